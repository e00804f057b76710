"""A physics-informed network for the heat equation u_t = u_xx: third-order gradients.

u(x, t) is a tanh MLP 2-64-64-1 on points p = (x, t). The residual u_t - u_xx needs the
first and second derivatives of u w.r.t. the input; training needs the gradient of the
residual loss w.r.t. the parameters, a third-order derivative of u, all in one ONNX graph.

    gcompile build examples/pinn.py -o build --check
    python examples/pinn.py [--steps 30]   # compile it and lower the residual by gradient descent
"""
import argparse

import numpy as np

import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(0)
SIZES = [2, 64, 64, 1]
PARAMS = []
for n_in, n_out in zip(SIZES[:-1], SIZES[1:]):
    PARAMS += [(rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32), np.zeros(n_out, np.float32)]

# p @ X_COL picks the x column of p (N, 2) as (N, 1); T_COL picks the t column.
X_COL = np.array([[1.0], [0.0]], np.float32)
T_COL = np.array([[0.0], [1.0]], np.float32)


def u(p, w1, b1, w2, b2, w3, b3):
    h = F.tanh(F.linear(p, w1, b1))
    h = F.tanh(F.linear(h, w2, b2))
    return F.linear(h, w3, b3)


@gc.export(p=gc.spec(("points", 2), "float32"), w1=PARAMS[0], b1=PARAMS[1], w2=PARAMS[2], b2=PARAMS[3],
           w3=PARAMS[4], b3=PARAMS[5])
def pinn_loss_and_grads(p, w1, b1, w2, b2, w3, b3):
    params = [w1, b1, w2, b2, w3, b3]
    du, = gc.grad(F.sum(u(p, *params)), [p])              # (N, 2): u_x, u_t (rows are independent)
    u_t = du @ T_COL
    u_x = du @ X_COL
    d2u, = gc.grad(F.sum(u_x), [p])                       # second order
    u_xx = d2u @ X_COL
    loss = F.mean((u_t - u_xx) ** 2)
    return {"loss": loss, "grads": gc.grad(loss, params)}  # third order


def main(steps: int = 30, lr: float = 0.05, points: int = 128) -> list[float]:
    """Compile the third-order model and run gradient descent on random collocation points;
    returns the residual loss of every step."""
    p = np.random.default_rng(1).uniform(-1, 1, (points, 2)).astype(np.float32)
    step = gc.compile(pinn_loss_and_grads, gc.spec(("points", 2), "float32"), *PARAMS)
    params, losses = list(PARAMS), []
    for i in range(steps):
        out = step(p, *params)
        params = [w - lr * g for w, g in zip(params, out["grads"])]
        losses.append(float(out["loss"]))
        if i % 10 == 0 or i == steps - 1:
            print(f"step {i:3d}  mean (u_t - u_xx)^2 = {losses[-1]:.6f}")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    main(parser.parse_args().steps)
