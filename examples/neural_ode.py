"""A neural ODE trained through an adaptive Runge-Kutta solver: error control inside gc.while_loop.

dy/dt = f(y; θ), with f a tanh MLP 2-16-2, is integrated from t = 0 to T by the Dormand-Prince
5(4) pair. Each trip of the loop tries one step of size h from (t, y): it computes the 5th-order
solution and the difference to the embedded 4th-order one, turns that into an error norm
(root mean square of the difference over atol + rtol·|y|, one norm for the whole batch, which
shares t), accepts the step when the norm is at most 1 (t and y advance) or rejects it (they stay),
and scales h by 0.9·err^(-1/5), clamped to [0.2, 5]. A step that would pass T is cut to end on T,
and then t is set to T exactly. The number of trips is known only at run time: one ONNX Loop.

The loss fits y(T) to targets. Its gradient w.r.t. θ and y0 is reverse mode through that loop:
every operation of the solver is differentiated, the step-size controller included (the step
sizes depend on θ through the error norms), so it is the derivative of the loss the program
computes, the one a finite difference sees (tests/ops/test_while_ode.py checks it against
PyTorch running the same loop eagerly, and against a central difference).

    gcompile build examples/neural_ode.py -o build --check
    python examples/neural_ode.py [--steps 30]   # fit a damped rotation by gradient descent
"""
import argparse

import numpy as np

import gcompile as gc
import gcompile.functions as F

# -- the Dormand-Prince 5(4) tableau ------------------------------------------------------------------------------
# Row i gives stage i+1 from stages 1..i (its time offset c is unused: f does not read t).
A = [[1 / 5],
     [3 / 40, 9 / 40],
     [44 / 45, -56 / 15, 32 / 9],
     [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
     [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656]]
B5 = [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84]                    # 5th order (stages 1-6)
B4 = [5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40]  # 4th order (stages 1-7)
E = [b5 - b4 for b5, b4 in zip(B5 + [0.0], B4)]   # y5 - y4 = h · Σ E_i k_i

SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 5.0
RTOL, ATOL, MAX_STEPS = 1e-5, 1e-7, 200   # float32 resolves errors down to about 1e-7 of |y|
T = H0 = 1.5   # the time span [0, T]; the first step tried covers it all, which the tolerances reject


def _combine(y, h, weights, ks):
    """y + h · Σ w_i k_i over the nonzero weights."""
    total = None
    for w, k in zip(weights, ks):
        if w != 0.0:
            total = k * w if total is None else total + k * w
    return y + h * total


def rk45(f, y0, t0, t1, h0=H0, rtol=RTOL, atol=ATOL, max_steps=MAX_STEPS, checkpoint_every=None):
    """y(t1) for dy/dt = f(y), y(t0) = y0, by adaptive Dormand-Prince steps in one gc.while_loop.

    t0, t1, h0, rtol, atol and max_steps are numbers or scalar Tensors. Returns (y(t1), accepted
    steps, rejected steps), the counts as int64 scalars. The loop stops when t reaches t1 or after
    max_steps tries (then t < t1: check `accepted` if that can happen). t1 == t0 takes no step.
    Reverse mode keeps the carry of every try; checkpoint_every=k keeps one per k tries instead
    (gc.while_loop's, for long integrations)."""
    dtype = y0.dtype

    def keep_going(carry):
        t, _, _, accepted, rejected = carry
        return F.logical_and(t < t1, accepted + rejected < max_steps)

    def step(carry):
        t, y, h, accepted, rejected = carry
        last = h >= t1 - t                          # this step reaches t1: cut it to end there
        h = F.minimum(h, t1 - t)
        ks = [f(y)]
        for row in A:
            ks.append(f(_combine(y, h, row, ks)))
        y5 = _combine(y, h, B5, ks)
        ks.append(f(y5))                            # the 7th stage, for the error estimate only
        difference = h * sum(k * e for e, k in zip(E, ks))
        scaled = difference / (atol + rtol * F.maximum(F.abs(y), F.abs(y5)))
        # The error norm squared, never its square root: √'s gradient at 0 is infinite, and under gc.vmap
        # the trajectories that reached t1 run the step masked with h = 0, an error of 0 (NaN gradients).
        err2 = F.mean(scaled * scaled)
        ok = err2 <= 1.0
        factor = F.clip(SAFETY * F.maximum(err2, 1e-20) ** -0.1, MIN_FACTOR, MAX_FACTOR)   # 0.9 err^(-1/5)
        t_next = F.where(ok, F.where(last, F.cast(t1, dtype), t + h), t)
        return (t_next, F.where(ok, y5, y), h * factor,
                accepted + F.cast(ok, np.int64), rejected + F.cast(F.logical_not(ok), np.int64))

    start = (F.cast(t0, dtype), y0, F.cast(h0, dtype), np.int64(0), np.int64(0))
    _, y1, _, accepted, rejected = gc.while_loop(keep_going, step, start, checkpoint_every=checkpoint_every)
    return y1, accepted, rejected


# -- the model -----------------------------------------------------------------------------------------------------
def init_params(seed: int = 0, hidden: int = 16, dim: int = 2, dtype=np.float32) -> list[np.ndarray]:
    """w1 (dim, hidden), b1, w2 (hidden, dim), b2: small, so the untrained flow is gentle."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((dim, hidden)) / np.sqrt(dim)).astype(dtype),
            (0.1 * rng.standard_normal(hidden)).astype(dtype),
            (0.5 * rng.standard_normal((hidden, dim)) / np.sqrt(hidden)).astype(dtype),
            np.zeros(dim, dtype)]


def mlp(y, w1, b1, w2, b2):
    return F.linear(F.tanh(F.linear(y, w1, b1)), w2, b2)


def task(batch: int = 8, seed: int = 1, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Start points on the plane and where a damped rotation dy/dt = [[-a, -w], [w, -a]] y takes them at T."""
    y0 = np.random.default_rng(seed).uniform(-1, 1, (batch, 2))
    a, w = 0.1, 1.0
    c, s = np.cos(w * T), np.sin(w * T)
    target = np.exp(-a * T) * y0 @ np.array([[c, s], [-s, c]])
    return y0.astype(dtype), target.astype(dtype)


PARAMS = init_params()
STATES = gc.spec(("batch", 2), "float32")


@gc.export(y0=STATES, target=STATES, w1=PARAMS[0], b1=PARAMS[1], w2=PARAMS[2], b2=PARAMS[3])
def loss_and_grads(y0, target, w1, b1, w2, b2):
    """The squared error of y(T) and its gradients w.r.t. the weights and the start points."""
    y1, accepted, rejected = rk45(lambda y: mlp(y, w1, b1, w2, b2), y0, 0.0, T)
    loss = F.mean((y1 - target) ** 2)
    return {"loss": loss, "y1": y1, "accepted": accepted, "rejected": rejected,
            "grads": gc.grad(loss, [w1, b1, w2, b2]), "grad_y0": gc.grad(loss, [y0])[0]}


def main(steps: int = 30, lr: float = 0.5) -> list[float]:
    """Compile loss_and_grads and fit the weights by gradient descent; returns the loss of every step."""
    y0, target = task()
    step = gc.compile(loss_and_grads, STATES, STATES, *PARAMS)
    params, losses = list(PARAMS), []
    for i in range(steps):
        out = step(y0, target, *params)
        params = [p - lr * g for p, g in zip(params, out["grads"])]
        losses.append(float(out["loss"]))
        print(f"step {i:3d}  loss {losses[-1]:.6f}  ({int(out['accepted'])} steps accepted, "
              f"{int(out['rejected'])} rejected)")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    main(parser.parse_args().steps)
