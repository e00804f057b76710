"""A small tanh MLP regression problem shared by the training-step tests, with its gradient
written out by hand in numpy (independent of gcompile's gradient engine)."""
import numpy as np

import gcompile.functions as F


def problem(dtype=np.float64, seed=0, n=16):
    rng = np.random.default_rng(seed)
    params = {"w1": rng.standard_normal((3, 6)), "b1": 0.1 * rng.standard_normal(6),
              "w2": rng.standard_normal((6, 2)) / 2, "b2": np.zeros(2)}
    x, y = rng.standard_normal((n, 3)), rng.standard_normal((n, 2))
    return {k: v.astype(dtype) for k, v in params.items()}, x.astype(dtype), y.astype(dtype)


def loss_fn(p, x, y):
    h = F.tanh(x @ p["w1"] + p["b1"])
    return F.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def numpy_loss_and_grads(p, x, y):
    """Mean squared error of the MLP and its gradient w.r.t. every parameter (float64)."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    h = np.tanh(x @ p["w1"] + p["b1"])
    r = h @ p["w2"] + p["b2"] - y
    d = 2 * r / r.size
    dh = (d @ p["w2"].T) * (1 - h * h)
    return np.mean(r * r), {"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ d, "b2": d.sum(0)}
