"""PyTorch's numbers for tests/ops/test_while_ode.py: a neural ODE integrated by adaptive Dormand-Prince
steps, the loop run eagerly in PyTorch, its loss differentiated by autograd.

Run by hand where torch is installed (the tests never import it):

    PYTHONPATH=. /path/to/torch-env/bin/python tools/make_ode_fixtures.py [--out tests/data/ode/rk45.npz]

The loop is written here again, in torch, from the same description as examples/neural_ode.py's
rk45 (the tableau typed in as exact fractions, the same error norm, accept/reject rule, step-size
update and last-step cut), without importing gcompile: dy/dt = tanh(y w1 + b1) w2 + b2 from t0 to
t1, loss = mean((y(t1) - target)²). Every decision is a torch.where on tensors, as in the traced
loop, so autograd differentiates the same function (the step sizes depend on θ through the error
norms). The inputs come from a seeded numpy generator and are stored with the results:

  y0, target, w1, b1, w2, b2    the inputs (float64)
  t0, t1, h0, rtol, atol        the solver's settings (float64 scalars); max_steps (int64)
  <p>/y1, <p>/loss              y(t1) and the loss, for precision p in f64, f32
  <p>/accepted, <p>/rejected    the numbers of accepted and rejected steps
  <p>/grad/<x>                  d loss / d x for x in y0, w1, b1, w2, b2

The first step tried, h0 = t1 - t0, is too long for the tolerances, so at least one step is
rejected (the script checks that, and that both precisions take the same steps).
"""
from __future__ import annotations

import argparse
import os
from fractions import Fraction as Q

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Dormand & Prince (1980), RK5(4)7M: the stages' coefficients, the 5th-order weights (also stage 7's
# row, first same as last) and the embedded 4th-order weights.
STAGES = [[Q(1, 5)],
          [Q(3, 40), Q(9, 40)],
          [Q(44, 45), Q(-56, 15), Q(32, 9)],
          [Q(19372, 6561), Q(-25360, 2187), Q(64448, 6561), Q(-212, 729)],
          [Q(9017, 3168), Q(-355, 33), Q(46732, 5247), Q(49, 176), Q(-5103, 18656)]]
FIFTH = [Q(35, 384), Q(0), Q(500, 1113), Q(125, 192), Q(-2187, 6784), Q(11, 84), Q(0)]
FOURTH = [Q(5179, 57600), Q(0), Q(7571, 16695), Q(393, 640), Q(-92097, 339200), Q(187, 2100), Q(1, 40)]
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 5.0


def _weighted(y, h, weights, ks):
    total = None
    for w, k in zip(weights, ks):
        if w != 0:
            total = k * float(w) if total is None else total + k * float(w)
    return y + h * total


def rk45(f, y0, t0, t1, h0, rtol, atol, max_steps):
    """(y(t1), accepted, rejected): the adaptive loop, eagerly."""
    error_weights = [a - b for a, b in zip(FIFTH, FOURTH)]
    t, y, h = t0, y0, h0
    accepted = rejected = 0
    while bool(t < t1) and accepted + rejected < max_steps:
        last = h >= t1 - t
        h = torch.minimum(h, t1 - t)
        ks = [f(y)]
        for row in STAGES:
            ks.append(f(_weighted(y, h, row, ks)))
        y5 = _weighted(y, h, FIFTH[:6], ks)
        ks.append(f(y5))
        difference = h * sum(k * float(e) for e, k in zip(error_weights, ks))
        scaled = difference / (atol + rtol * torch.maximum(y.abs(), y5.abs()))
        err2 = torch.mean(scaled * scaled)   # the error norm squared
        ok = err2 <= 1.0
        factor = torch.clamp(SAFETY * torch.clamp(err2, min=1e-20) ** -0.1, MIN_FACTOR, MAX_FACTOR)
        t = torch.where(ok, torch.where(last, t1, t + h), t)
        y = torch.where(ok, y5, y)
        h = h * factor
        accepted, rejected = accepted + int(ok), rejected + int(not ok)
    return y, accepted, rejected


def inputs(seed: int = 39) -> dict[str, np.ndarray]:
    """A batch of 3 start points in 3 dims and an MLP 3-8-3 whose flow turns and stretches them."""
    rng = np.random.default_rng(seed)
    return {"y0": rng.uniform(-1, 1, (3, 3)), "target": rng.uniform(-1, 1, (3, 3)),
            "w1": rng.standard_normal((3, 8)), "b1": 0.3 * rng.standard_normal(8),
            "w2": rng.standard_normal((8, 3)) / np.sqrt(8) * 2.0, "b2": 0.3 * rng.standard_normal(3),
            "t0": np.float64(0.25), "t1": np.float64(2.25), "h0": np.float64(2.0),
            "rtol": np.float64(1e-5), "atol": np.float64(1e-7), "max_steps": np.int64(200)}


def run(data: dict[str, np.ndarray], dtype) -> dict[str, np.ndarray]:
    names = ["y0", "w1", "b1", "w2", "b2"]
    leaves = {n: torch.tensor(data[n], dtype=dtype, requires_grad=True) for n in names}
    scalar = {n: torch.tensor(data[n], dtype=dtype) for n in ("t0", "t1", "h0")}
    w1, b1, w2, b2 = (leaves[n] for n in names[1:])
    y1, accepted, rejected = rk45(lambda y: torch.tanh(y @ w1 + b1) @ w2 + b2, leaves["y0"], scalar["t0"],
                                  scalar["t1"], scalar["h0"], float(data["rtol"]), float(data["atol"]),
                                  int(data["max_steps"]))
    loss = torch.mean((y1 - torch.tensor(data["target"], dtype=dtype)) ** 2)
    grads = torch.autograd.grad(loss, [leaves[n] for n in names])
    out = {"y1": y1.detach().numpy(), "loss": loss.detach().numpy(), "accepted": np.int64(accepted),
           "rejected": np.int64(rejected)}
    out.update({f"grad/{n}": g.numpy() for n, g in zip(names, grads)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "ode", "rk45.npz"))
    args = parser.parse_args()
    data = inputs()
    arrays = dict(data)
    for prefix, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        arrays.update({f"{prefix}/{k}": v for k, v in run(data, dtype).items()})
    counts = [(int(arrays[f"{p}/accepted"]), int(arrays[f"{p}/rejected"])) for p in ("f64", "f32")]
    assert counts[0] == counts[1], f"float64 and float32 take different steps: {counts}"
    assert counts[0][1] > 0, "no step was rejected: the fixture would not test rejections"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    print(f"{args.out}: {counts[0][0]} steps accepted, {counts[0][1]} rejected, loss {float(arrays['f64/loss']):.6g}, "
          f"{os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
