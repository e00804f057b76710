"""Recurrences and loops: W8 (an LSTM training step, 50 steps), R1/R2/R2u (LSTM steps as one scan
against PyTorch's nn.LSTM, and unrolled), P1/P1h (a PINN-style ODE time-stepper: the gradient and
a Hessian-vector product through 100 explicit steps). `python -m tools.bench --loops` reports on
the loop ones (tools/bench/loops.py)."""
from __future__ import annotations

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .common import RNG, Workload, config_values, jax_grad_step, param, torch_tensor

# -- W8: one LSTM layer over 50 steps, a linear read-out of every step, MSE ---------------------------------
LSTM = dict(steps=50, batch=32, features=64, hidden=128)


def w8_setup():
    steps, batch, features, hidden = config_values(LSTM, "steps", "batch", "features", "hidden")
    ps = [param(4 * hidden, features, scale=0.1), param(4 * hidden, hidden, scale=0.1),
          np.zeros(4 * hidden, np.float32), np.zeros(4 * hidden, np.float32), param(hidden, 1)]
    xs = RNG.standard_normal((steps, batch, features)).astype(np.float32)
    ys = RNG.standard_normal((steps, batch, 1)).astype(np.float32)
    zero = np.zeros((1, batch, hidden), np.float32)

    def step(xs, ys, w_ih, w_hh, b_ih, b_hh, w_out):
        out, _, _ = F.lstm(xs, zero, zero, [(w_ih, w_hh, b_ih, b_hh)])
        value = F.mse(out @ w_out, ys)
        return value, gc.grad(value, [w_ih, w_hh, b_ih, b_hh, w_out])

    return step, None, [xs, ys, *ps]


def w8_torch(args):
    import torch
    xs, ys = torch_tensor(args[0]), torch_tensor(args[1])
    lstm = torch.nn.LSTM(LSTM["features"], LSTM["hidden"])
    with torch.no_grad():
        for name, a in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), args[2:6]):
            getattr(lstm, name).copy_(torch_tensor(a))
    w_out = torch_tensor(args[6]).requires_grad_(True)
    ps = list(lstm.parameters()) + [w_out]

    def run():
        out, _ = lstm(xs)
        return torch.autograd.grad(((out @ w_out - ys) ** 2).mean(), ps)
    return run


def w8_jax(args):
    import jax
    import jax.numpy as jnp
    xs, ys, ps = args[0], args[1], list(args[2:])

    def loss(ps, xs, ys):
        w_ih, w_hh, b_ih, b_hh, w_out = ps
        gx = xs @ w_ih.T + b_ih

        def cell(state, g):
            h, c = state
            i, f, gg, o = jnp.split(g + h @ w_hh.T + b_hh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        zero = jnp.zeros((xs.shape[1], LSTM["hidden"]), xs.dtype)
        _, out = jax.lax.scan(cell, (zero, zero), gx)
        return jnp.mean((out @ w_out - ys) ** 2)
    return jax_grad_step(loss, ps, xs, ys)


# -- R1, R2, R2u: an LSTM layer's weight gradients, as a scan or unrolled -----------------------------------
BATCH, FEATURES, HIDDEN = 32, 32, 128


def lstm_layer(xs, h0, ws, scan: bool = True):
    """F.lstm's outputs over xs (one layer), or (scan=False) the same steps unrolled at trace time
    with F.lstm_cell, whatever the sequence length."""
    if scan:
        return F.lstm(xs, h0, h0, [ws])[0]
    w_ih, w_hh, b_ih, b_hh = (list(ws) + [None, None])[:4]
    h, c, ys = h0[0], h0[0], []
    for t in range(xs.shape[0]):
        h, c = F.lstm_cell(xs[t], h, c, w_ih, w_hh, b_ih, b_hh)
        ys.append(h)
    return F.stack(ys)


def lstm_setup(steps: int, scan: bool = True, seed: int = 0, forward: bool = False):
    """One LSTM layer (PyTorch's layout) over `steps` steps, loss mean(ys²), gradients w.r.t. its
    weights (forward=True: the outputs only)."""
    rng = np.random.default_rng(seed)
    scale = 1 / np.sqrt(HIDDEN)
    weights = [rng.uniform(-scale, scale, shape).astype(np.float32)
               for shape in [(4 * HIDDEN, FEATURES), (4 * HIDDEN, HIDDEN), (4 * HIDDEN,), (4 * HIDDEN,)]]
    xs = rng.standard_normal((steps, BATCH, FEATURES)).astype(np.float32)
    h0 = np.zeros((1, BATCH, HIDDEN), np.float32)

    def step(xs, h0, *ws):
        ys = lstm_layer(xs, h0, ws, scan)
        if forward:
            return ys
        loss = F.mean(ys * ys)
        return loss, gc.grad(loss, list(ws))
    return step, None, [xs, h0, *weights]


def lstm_torch(args):
    import torch
    xs, h0, w_ih, w_hh, b_ih, b_hh = (torch.tensor(a) for a in args)
    lstm = torch.nn.LSTM(FEATURES, HIDDEN)
    with torch.no_grad():
        for p, w in zip((lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0),
                        (w_ih, w_hh, b_ih, b_hh)):
            p.copy_(w)
    params = list(lstm.parameters())

    def run():
        ys, _ = lstm(xs, (h0, h0))
        return torch.autograd.grad((ys * ys).mean(), params)
    return run


# -- P1, P1h: a PINN-style time-stepper, u' = MLP(u; θ), 100 explicit Euler steps ----------------------------
ODE_STEPS, ODE_DIM, ODE_WIDTH, ODE_BATCH, DT = 100, 8, 64, 64, 0.01


def ode_setup(hvp: bool = False, loop: str = "scan", seed: int = 1, forward: bool = False):
    """The gradient (or, hvp=True, a Hessian-vector product) of ⟨u_T, target⟩ w.r.t. the MLP's
    parameters. loop: "scan" (gc.fori_loop, whose unused index is pruned: a Scan over a placeholder),
    "indexed" (the index read by the step at no cost: a Scan over the index) or "unrolled"."""
    rng = np.random.default_rng(seed)
    sizes = [ODE_DIM, ODE_WIDTH, ODE_WIDTH, ODE_DIM]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32)]
    u0 = rng.standard_normal((ODE_BATCH, ODE_DIM)).astype(np.float32)
    target = rng.standard_normal((ODE_BATCH, ODE_DIM)).astype(np.float32)
    vs = [rng.standard_normal(p.shape).astype(np.float32) for p in params]

    def final_state(u0, ps):
        def rhs(u):
            h = u
            for i in range(0, len(ps), 2):
                h = h @ ps[i] + ps[i + 1]
                h = F.tanh(h) if i + 2 < len(ps) else h
            return h

        def step(i, u):
            u = u + DT * rhs(u)
            return u + F.cast(i, u.dtype) * 0.0 if loop == "indexed" else u
        return gc.fori_loop(0, ODE_STEPS, step, u0, unroll=True if loop == "unrolled" else 1)

    if forward:
        return (lambda u0, target, *ps: F.sum(final_state(u0, ps) * target)), None, [u0, target, *params]

    def grad_fn(u0, target, *ps):
        value = F.sum(final_state(u0, ps) * target)
        return value, gc.grad(value, list(ps))

    def hvp_fn(u0, target, *rest):
        ps, v = list(rest[:len(params)]), list(rest[len(params):])
        return gc.hvp(lambda *p: F.sum(final_state(u0, p) * target), ps, v)
    return (hvp_fn, None, [u0, target, *params, *vs]) if hvp else (grad_fn, None, [u0, target, *params])


WORKLOADS = [
    Workload("W8", "lstm-step", w8_setup, w8_torch, w8_jax, LSTM, dict(steps=100, batch=16, features=32, hidden=256)),
    Workload("R1", "lstm-1000-step", lambda: lstm_setup(1000), lstm_torch),
    Workload("R2", "lstm-32-scan", lambda: lstm_setup(32), lstm_torch),
    Workload("R2u", "lstm-32-unrolled", lambda: lstm_setup(32, scan=False), lstm_torch),
    Workload("P1", "ode-100-grad", lambda: ode_setup()),
    Workload("P1h", "ode-100-hvp", lambda: ode_setup(hvp=True)),
]
