"""WGAN-GP gradient penalty: a second-order gradient in one ONNX graph.

The penalty mean((|dD/dx| - 1)^2) needs the critic's gradient w.r.t. its input x (first
order); training the critic needs the penalty's gradient w.r.t. the critic's parameters,
i.e. a gradient of that gradient (second order).

    gcompile build examples/wgan_gp.py -o build --check
    python examples/wgan_gp.py [--steps 20]   # compile it and drive the penalty down
"""
import argparse

import numpy as np

import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(0)
W1 = (rng.standard_normal((128, 256)) / np.sqrt(128)).astype(np.float32)
B1 = np.zeros(256, np.float32)
W2 = (rng.standard_normal((256, 1)) / np.sqrt(256)).astype(np.float32)
B2 = np.zeros(1, np.float32)


@gc.export(x=gc.spec(("batch", 128), "float32"), w1=W1, b1=B1, w2=W2, b2=B2)
def wgan_gp_penalty(x, w1, b1, w2, b2):
    d = F.relu(x @ w1 + b1) @ w2 + b2
    gx, = gc.grad(F.sum(d), [x])                                     # first order, w.r.t. an input
    pen = F.mean((F.sqrt(F.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
    return {"penalty": pen, "grads": gc.grad(pen, [w1, b1, w2, b2])}  # second order, w.r.t. the params


def main(steps: int = 20, lr: float = 0.05) -> list[float]:
    """Compile the penalty and its second-order parameter gradient, then take gradient steps on
    the critic's parameters; returns the penalty of every step."""
    x = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32)
    step = gc.compile(wgan_gp_penalty, gc.spec(("batch", 128), "float32"), W1, B1, W2, B2)
    params, penalties = [W1, B1, W2, B2], []
    for i in range(steps):
        out = step(x, *params)
        params = [w - lr * g for w, g in zip(params, out["grads"])]
        penalties.append(float(out["penalty"]))
        if i % 5 == 0 or i == steps - 1:
            norms = ", ".join(f"{np.linalg.norm(g):.3f}" for g in out["grads"])
            print(f"step {i:3d}  penalty {penalties[-1]:.5f}  |grad| of w1, b1, w2, b2: {norms}")
    return penalties


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    main(parser.parse_args().steps)
