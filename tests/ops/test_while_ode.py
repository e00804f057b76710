"""A neural ODE through an adaptive solver: examples/neural_ode.py's rk45 (Dormand-Prince 5(4) steps with
error control in one gc.while_loop) compiled to ONNX and run by ONNX Runtime, against PyTorch running
the same loop eagerly (tests/data/ode/rk45.npz, written by tools/make_ode_fixtures.py) and against a
float64 central difference: y(T), the loss, the numbers of accepted and rejected steps, and the
gradients w.r.t. the MLP's weights and y0, through every decision of the step-size controller.
Also: T == t0 takes no step (y(T) = y0, an identity Jacobian), checkpoint_every gives the same
gradients, and the tableau has order 5 (one step's error falls as h^6)."""
import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

ROOT = Path(__file__).resolve().parents[2]
DATA = np.load(ROOT / "tests" / "data" / "ode" / "rk45.npz")
WRT = ["y0", "w1", "b1", "w2", "b2"]                   # what the loss is differentiated against
INPUTS = ["y0", "target", "t1", "w1", "b1", "w2", "b2"]


def _example():
    spec = importlib.util.spec_from_file_location("neural_ode_example", ROOT / "examples" / "neural_ode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ODE = _example()


def program(y0, target, t1, w1, b1, w2, b2, every=None):
    """The fixture's problem, with t1 an input (one model serves t1 == t0 too)."""
    y1, accepted, rejected = ODE.rk45(lambda y: ODE.mlp(y, w1, b1, w2, b2), y0, float(DATA["t0"]), t1,
                                      h0=float(DATA["h0"]), rtol=float(DATA["rtol"]), atol=float(DATA["atol"]),
                                      max_steps=int(DATA["max_steps"]), checkpoint_every=every)
    loss = F.mean((y1 - target) ** 2)
    return {"loss": loss, "y1": y1, "accepted": accepted, "rejected": rejected,
            "grads": gc.grad(loss, [y0, w1, b1, w2, b2])}


def inputs(dtype, **changed) -> list[np.ndarray]:
    values = {**{n: DATA[n] for n in INPUTS}, **changed}
    return [np.asarray(values[n], dtype) for n in INPUTS]


@functools.cache
def compiled(dtype, every=None):
    return gc.compile(functools.partial(program, every=every), *inputs(dtype))


def _assert_matches(out, prefix, rtol, atol_scale):
    """y1, loss and every gradient within rtol, plus atol_scale times the largest reference element
    (for elements near zero)."""
    pairs = [("y1", out["y1"]), ("loss", out["loss"])] + [(f"grad/{n}", g) for n, g in zip(WRT, out["grads"])]
    for name, got in pairs:
        expected = DATA[f"{prefix}/{name}"]
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol_scale * np.max(np.abs(expected)),
                                   err_msg=f"{prefix}/{name}")


def test_the_fixture_rejects_steps_and_both_precisions_take_the_same_steps():
    assert int(DATA["f64/rejected"]) > 0 and int(DATA["f64/accepted"]) > 5
    assert (int(DATA["f32/accepted"]), int(DATA["f32/rejected"])) == (int(DATA["f64/accepted"]),
                                                                     int(DATA["f64/rejected"]))


def test_float64_matches_pytorch():
    """Both run the same float64 operations in the same order, but for the summation order inside
    matmul and mean (about 1e-16 relative each); over 13 steps that stayed below 1e-15 when measured,
    so 1e-9 only leaves room for other BLAS builds, not for a different computation."""
    out = compiled(np.float64)(*inputs(np.float64))
    assert (int(out["accepted"]), int(out["rejected"])) == (int(DATA["f64/accepted"]), int(DATA["f64/rejected"]))
    _assert_matches(out, "f64", rtol=1e-9, atol_scale=1e-12)


def test_float32_matches_pytorch():
    """float32's unit roundoff is 6e-8; 13 tries of 7 stages differ from PyTorch's float32 by at most
    6e-7 of the largest element (measured), and from float64 likewise: 1e-4 leaves room for other
    CPUs' kernels. The step-size controller's share of the gradients (the result depends on the step
    sizes only through the truncation error, of the order of the tolerances) is 2e-6 of them, below
    what float32 resolves here: the float64 tests are the ones that check that path."""
    out = compiled(np.float32)(*inputs(np.float32))
    assert (int(out["accepted"]), int(out["rejected"])) == (int(DATA["f32/accepted"]), int(DATA["f32/rejected"]))
    _assert_matches(out, "f32", rtol=1e-4, atol_scale=1e-4)
    _assert_matches(out, "f64", rtol=1e-4, atol_scale=1e-4)


def test_gradient_matches_a_float64_central_difference():
    """Along a random direction over y0 and the weights, with eps = 1e-6: the truncation error is
    O(eps²) and the rounding error about 1e-16/eps, both near 1e-10 relative (measured 2e-11); the
    shifted runs take the same steps, so the loss is smooth there."""
    cf = compiled(np.float64)
    x = inputs(np.float64)
    rng = np.random.default_rng(1)
    positions = [INPUTS.index(n) for n in WRT]
    r = {i: rng.standard_normal(x[i].shape) for i in positions}
    out = cf(*x)
    analytic = sum(float(np.sum(g * r[i])) for g, i in zip(out["grads"], positions))
    eps, losses = 1e-6, []
    for sign in (1, -1):
        shifted = [a + sign * eps * r[i] if i in r else a for i, a in enumerate(x)]
        o = cf(*shifted)
        assert (int(o["accepted"]), int(o["rejected"])) == (int(out["accepted"]), int(out["rejected"]))
        losses.append(float(o["loss"]))
    numeric = (losses[0] - losses[1]) / (2 * eps)
    assert numeric == pytest.approx(analytic, rel=1e-7)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_no_step_when_t1_is_t0(dtype):
    """y(T) = y0 exactly, so d loss/d y0 is the loss's own gradient at y0 (an identity Jacobian) and
    the weights get zero gradients; the backward loop runs no step."""
    x = inputs(dtype, t1=DATA["t0"])
    out = compiled(dtype)(*x)
    assert (int(out["accepted"]), int(out["rejected"])) == (0, 0)
    y0, target = x[0], x[1]
    np.testing.assert_array_equal(out["y1"], y0)
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(out["grads"][0], 2 * (y0 - target) / y0.size, rtol=rtol)
    for g in out["grads"][1:]:
        np.testing.assert_array_equal(g, np.zeros_like(g))


def test_checkpoint_every_gives_the_same_gradients():
    """Blocks of 3 tries over 13 (the last block takes 1): one carry kept per block, the same numbers."""
    x = inputs(np.float64)
    plain, blocked = compiled(np.float64)(*x), compiled(np.float64, every=3)(*x)
    assert (int(blocked["accepted"]), int(blocked["rejected"])) == (int(plain["accepted"]), int(plain["rejected"]))
    np.testing.assert_allclose(blocked["y1"], plain["y1"], rtol=1e-13)
    for a, b in zip(blocked["grads"], plain["grads"]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


# -- the tableau, on dy/dt = y A, whose solution is y0 exp(A t) -----------------------------------------------
ROTATION = np.array([[-0.1, 1.0], [-1.0, -0.1]])   # y turns at 1 rad per unit of time and decays at 0.1


def _exact(y0, t):
    c, s = np.cos(t), np.sin(t)
    return np.exp(-0.1 * t) * y0 @ np.array([[c, s], [-s, c]])


@functools.cache
def linear_solver():
    def solve(y0, t1, h0, rtol, atol, max_steps):
        y1, accepted, rejected = ODE.rk45(lambda y: y @ ROTATION, y0, 0.0, t1, h0, rtol, atol, max_steps)
        return y1, accepted, rejected
    return gc.compile(solve, np.zeros((3, 2)), np.float64(1), np.float64(1), np.float64(1), np.float64(1),
                      np.int64(1))


def test_one_step_has_local_error_of_order_h6():
    """One accepted step (max_steps=1, a tolerance nothing fails) of a 5th-order method: halving h
    divides the error by 2^6 = 64, up to the next term."""
    y0 = np.array([[1.0, 0.0], [0.3, -0.7], [-0.5, 0.5]])
    errors = []
    for h in (0.2, 0.1, 0.05):
        y1, accepted, _ = linear_solver()(y0, np.float64(10), np.float64(h), np.float64(1.0), np.float64(1e3),
                                          np.int64(1))
        assert int(accepted) == 1
        errors.append(np.max(np.abs(y1 - _exact(y0, h))))
    for big, small in zip(errors, errors[1:]):
        assert 50 < big / small < 80, errors


def test_the_solution_meets_the_tolerance_in_few_steps():
    y0 = np.array([[1.0, 0.0], [0.3, -0.7], [-0.5, 0.5]])
    for rtol, limit in ((1e-6, 2e-6), (1e-9, 2e-9)):
        y1, accepted, rejected = linear_solver()(y0, np.float64(3.0), np.float64(0.1), np.float64(rtol),
                                                 np.float64(rtol * 1e-2), np.int64(1000))
        assert np.max(np.abs(y1 - _exact(y0, 3.0))) < limit
        assert 3 < int(accepted) < 100 and int(rejected) < int(accepted)
