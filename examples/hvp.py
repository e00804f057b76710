"""Hessian-vector product of an MLP's loss w.r.t. its parameters, by differentiating twice.

H v = d/dθ <dL/dθ, v>: the gradient of the gradient's inner product with v. It costs
about two backward passes and never forms the Hessian.

    gcompile build examples/hvp.py -o build --check
    python examples/hvp.py   # compile it and compare H v with a finite difference of the gradient
"""
import argparse

import numpy as np

import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(0)
W1 = (rng.standard_normal((784, 64)) / np.sqrt(784)).astype(np.float32)
B1 = np.zeros(64, np.float32)
W2 = (rng.standard_normal((64, 10)) / np.sqrt(64)).astype(np.float32)
B2 = np.zeros(10, np.float32)


def loss_fn(x, labels, w1, b1, w2, b2):
    logits = F.linear(F.tanh(F.linear(x, w1, b1)), w2, b2)
    return F.softmax_cross_entropy(logits, labels)


@gc.export(x=gc.spec(("batch", 784), "float32"), labels=gc.spec(("batch",), "int64"),
           w1=W1, b1=B1, w2=W2, b2=B2, v_w1=W1, v_b1=B1, v_w2=W2, v_b2=B2)
def hvp(x, labels, w1, b1, w2, b2, v_w1, v_b1, v_w2, v_b2):
    params, vectors = [w1, b1, w2, b2], [v_w1, v_b1, v_w2, v_b2]
    grads = gc.grad(loss_fn(x, labels, *params), params)
    dot = sum(F.sum(g * v) for g, v in zip(grads, vectors))
    return {"hvp": gc.grad(dot, params)}


def gradient(x, labels, w1, b1, w2, b2):
    return gc.grad(loss_fn(x, labels, w1, b1, w2, b2), [w1, b1, w2, b2])


def main(batch: int = 32, eps: float = 1e-4) -> float:
    """Compile hvp and the plain gradient in float64, compare H v with (g(θ+εv) − g(θ−εv)) / 2ε;
    returns the relative difference."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, 784))
    labels = rng.integers(0, 10, batch).astype(np.int64)
    params = [p.astype(np.float64) for p in (W1, B1, W2, B2)]
    vectors = [rng.standard_normal(p.shape) for p in params]
    data = (gc.spec(("batch", 784), "float64"), gc.spec(("batch",), "int64"))
    hv = gc.compile(hvp, *data, *params, *vectors)(x, labels, *params, *vectors)["hvp"]
    grad_fn = gc.compile(gradient, *data, *params)
    plus = grad_fn(x, labels, *[p + eps * v for p, v in zip(params, vectors)])
    minus = grad_fn(x, labels, *[p - eps * v for p, v in zip(params, vectors)])
    numeric = [(a - b) / (2 * eps) for a, b in zip(plus, minus)]
    flat = np.concatenate([h.ravel() for h in hv])
    error = float(np.linalg.norm(flat - np.concatenate([n.ravel() for n in numeric])) / np.linalg.norm(flat))
    for name, h in zip(("w1", "b1", "w2", "b2"), hv):
        print(f"hvp_{name}: shape {h.shape}, norm {np.linalg.norm(h):.5f}")
    print(f"|Hv - finite difference| / |Hv| = {error:.2e} (central difference, eps {eps})")
    return error


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    main(parser.parse_args().batch)
