"""erfc, erfinv, lgamma, digamma/polygamma, xlogy and logit: the lowerings (compositions of
ai.onnx ops) against float64 references on ONNX Runtime, the references against known values and
against math's functions, poles and infinities, and float64 gradient checks to second order."""
import math

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ops.special import erfinv_reference

from ..opcheck import check_forward, check_grads, check_values

inf, nan = np.inf, np.nan
EULER = 0.5772156649015329
ZETA3 = 1.2020569031595942


def rand(*shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape)


def relative_error(got, exact):
    return np.max(np.abs(got - exact) / np.abs(exact))


# -- the references ----------------------------------------------------------------------------------------
def evaluated(fn, x):
    """fn on the float64 reference evaluator."""
    x = np.asarray(x, np.float64)
    return evaluate(trace(fn, [x]).graph, [x])[0]


def test_references_against_known_values_and_math():
    known = {  # polygamma(n, x) exact values
        (0, 1.0): -EULER, (0, 0.5): -EULER - 2 * math.log(2), (0, 2.0): 1 - EULER,
        (0, -0.5): 2 - EULER - 2 * math.log(2),
        (1, 1.0): math.pi ** 2 / 6, (1, 0.5): math.pi ** 2 / 2, (2, 1.0): -2 * ZETA3, (3, 1.0): math.pi ** 4 / 15,
    }
    for (n, x), value in known.items():
        got = evaluated(lambda x, n=n: F.polygamma(n, x), [x])
        assert abs(got[0] - value) <= 1e-14 * abs(value), (n, x, got, value)
    # digamma and trigamma are the derivatives of math.lgamma (central differences, away from poles)
    x = np.array([0.3, 1.7, 4.2, 11.0, -0.6, -2.3])
    lg = np.vectorize(math.lgamma)
    h = 1e-5
    assert relative_error(evaluated(F.digamma, x), (lg(x + h) - lg(x - h)) / (2 * h)) < 1e-8
    h = 1e-4
    assert relative_error(evaluated(lambda x: F.polygamma(1, x), x),
                          (lg(x + h) - 2 * lg(x) + lg(x - h)) / h ** 2) < 1e-5
    assert relative_error(evaluated(F.lgamma, x), lg(x)) < 1e-15
    y = np.array([-0.999999, -0.5, 0.0, 1e-9, 0.3, 0.9, 0.99999999])
    assert np.max(np.abs(np.vectorize(math.erf)(np.vectorize(erfinv_reference)(y)) - y)) < 2e-16


# -- erfc and erfinv ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erfc_is_accurate_in_the_tail(dtype):
    x = np.concatenate([np.linspace(-6, 27, 331), [0.4999, 0.5, 0.5001, -0.5, 0.0, inf, -inf, nan]]).astype(dtype)
    exact = np.vectorize(math.erfc)(x.astype(np.float64))
    tiny = np.finfo(dtype).tiny
    got = check_forward(F.erfc, [x], exact.astype(dtype), rtol=4e-7 if dtype == np.float32 else 2e-15, atol=tiny)[0]
    normal = exact > tiny
    assert relative_error(got[normal], exact[normal]) < (4e-7 if dtype == np.float32 else 2e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erfinv_is_accurate_up_to_one(dtype):
    eps = np.finfo(dtype).eps
    near_one = 1 - np.logspace(np.log10(eps), -1, 40)
    y = np.concatenate([np.linspace(-0.999, 0.999, 201), near_one, -near_one, [0, 1, -1, 1.5, -2, nan]]).astype(dtype)
    with np.errstate(invalid="ignore"):
        exact = np.vectorize(erfinv_reference)(y.astype(np.float64))
    check_forward(F.erfinv, [y], exact.astype(dtype), rtol=3e-7 if dtype == np.float32 else 5e-14, atol=0)


def test_erfc_erfinv_gradients():
    check_grads(F.erfc, [rand(2, 3, seed=1, low=-3, high=3)])
    check_grads(F.erfinv, [rand(2, 3, seed=2, low=-0.95, high=0.95)])
    check_values(lambda y: gc.grad(F.sum(F.erfinv(y)), [y]), [np.array([0.0, 1.0, -1.0])],
                 [[math.sqrt(math.pi) / 2, inf, inf]])


# -- lgamma, digamma, polygamma ------------------------------------------------------------------------------
GAMMA_POINTS = np.array([0.5, 1.0, 2.0, 3.5, 10.0, 7.99, 8.01, 100.0, 1e-5, 0.1, -0.5, -2.5, -7.3, 1e6, 2.6e36,
                         -0.001, 0.49, 0.51])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lgamma_matches_math_lgamma(dtype):
    x = GAMMA_POINTS.astype(dtype)
    exact = np.vectorize(math.lgamma)(x.astype(np.float64))
    # absolute error about one unit of lgamma(x + 8) near the zeros at 1 and 2, relative elsewhere
    check_forward(F.lgamma, [x], exact.astype(dtype), rtol=2e-6 if dtype == np.float32 else 4e-15,
                  atol=3e-6 if dtype == np.float32 else 4e-15)


@pytest.mark.parametrize("n", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_polygamma_matches_the_reference(n, dtype):
    x = GAMMA_POINTS[:-5].astype(dtype)    # the digamma root neighbourhood and huge x are checked below
    fn = lambda x: F.polygamma(n, x)      # noqa: E731
    exact = evaluated(fn, x)
    # float32: π·x rounds, so reflected values near a zero of cot keep ~1e-6 absolute error
    check_forward(fn, [x], exact.astype(dtype), rtol=5e-7 if dtype == np.float32 else 5e-14,
                  atol=3e-6 if dtype == np.float32 else 1e-15)


def test_poles_and_infinities():
    # PyTorch's values, except polygamma(n >= 2, +inf): the limit (-1)^(n+1)·0 as SciPy gives it,
    # where PyTorch 2.13 gives NaN
    x = np.array([0.0, -1.0, -2.0, inf, -inf, nan])
    check_values(lambda x: (F.lgamma(x), F.digamma(x), F.polygamma(1, x), F.polygamma(2, x), F.polygamma(3, x)),
                 [x], [[inf, inf, inf, inf, inf, nan], [-inf, nan, nan, inf, nan, nan], [inf, inf, inf, 0, nan, nan],
                       [-inf, -inf, -inf, -0.0, nan, nan], [inf, inf, inf, 0, nan, nan]])


def test_gamma_family_gradients():
    x = np.array([[0.7, 2.3, 9.5], [-0.4, -1.6, 4.1]])
    check_grads(F.lgamma, [x])
    check_grads(F.digamma, [x])
    check_grads(lambda x: F.polygamma(2, x), [x])


def test_polygamma_needs_a_non_negative_int():
    with pytest.raises(gc.ShapeError, match=r"polygamma: n must be a non-negative int, got -1 \(at test_special"):
        gc.compile(lambda x: F.polygamma(-1, x), np.ones(2, np.float32))


# -- xlogy and logit ---------------------------------------------------------------------------------------
def test_xlogy_forward_and_pytorchs_gradients():
    x = np.array([0.0, 0.0, 1.0, 0.0, 2.0, 0.0, -1.5])
    y = np.array([0.0, 2.0, 0.0, nan, 3.0, -1.0, 0.5])
    with np.errstate(all="ignore"):
        expected = np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log(y))
    for dtype in (np.float32, np.float64):
        check_forward(F.xlogy, [x.astype(dtype), y.astype(dtype)], expected.astype(dtype))
    check_values(lambda x, y: gc.grad(F.sum(F.xlogy(x, y)), [x, y]), [x[:5], y[:5]],
                 [[0.0, math.log(2), -inf, nan, math.log(3)], [nan, 0.0, inf, nan, 2 / 3]])
    check_grads(F.xlogy, [rand(2, 3, seed=3), rand(3, seed=4, low=0.2, high=3)])


def test_logit_with_and_without_eps():
    x = np.array([0.05, 0.1, 0.5, 0.9, 0.95, 0.0, 1.0])
    with np.errstate(all="ignore"):
        check_forward(lambda x: (F.logit(x), F.logit(x, eps=0.1)), [x],
                      [np.log(x / (1 - x)), np.log(np.clip(x, 0.1, 0.9) / (1 - np.clip(x, 0.1, 0.9)))])
    check_values(lambda x: gc.grad(F.sum(F.logit(x, eps=0.1)), [x]), [x[:5]], [[0.0, 100 / 9, 4.0, 100 / 9, 0.0]])
    check_values(lambda x: gc.grad(F.sum(F.logit(x)), [x]), [np.array([0.0, 1.0, 0.5])], [[inf, inf, 4.0]])
    check_grads(F.logit, [rand(2, 3, seed=5, low=0.05, high=0.95)])
    wide = np.array([0.1, 0.45, 0.5, 0.55, 0.9])               # eps > 1/2: below eps reads eps first (torch)
    check_forward(lambda x: F.logit(x, eps=0.6), [wide], np.log(1.5) * np.array([1, 1, 1, 1, -1.0]))


# -- ndtr, ndtri, log_ndtr, i0 -----------------------------------------------------------------------------
def test_ndtr_and_ndtri_invert_each_other():
    x = np.concatenate([rand(50, seed=11, low=-8, high=8), [-37.0, -20.0, 0.0, 5.0, inf, -inf, nan]])
    exact = np.array([0.5 * math.erfc(-v / math.sqrt(2)) if np.isfinite(v) else (v > 0) * 1.0 if not np.isnan(v)
                      else nan for v in x])
    check_forward(F.ndtr, [x], exact, rtol=1e-13, atol=0)
    p = np.concatenate([rand(50, seed=12, low=0, high=1), [0.0, 1.0, 1e-12, 0.5, 1 - 1e-9, -0.1, 1.1]])
    y = evaluated(F.ndtri, p)
    back = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in y[:-2]])
    np.testing.assert_allclose(back, p[:-2], rtol=1e-12, atol=1e-20)
    assert y[-7] == -inf and y[-6] == inf and y[-4] == 0 and np.isnan(y[-2:]).all()
    check_forward(F.ndtri, [p], y, rtol=1e-9, atol=1e-12)


def test_log_ndtr_is_finite_and_exact_in_both_tails():
    """log(ndtr(x)) from math's erfc where it is representable (down to -37), the asymptotic series
    below -20 agreeing with it, and values far beyond (-1e4: -x²/2 - log(-x) - log(2π)/2)."""
    x = np.concatenate([rand(40, seed=13, low=-37, high=12), [-20.0, -20.5, -25.0, 0.0, 9.0]])
    exact = np.array([math.log(0.5 * math.erfc(-v / math.sqrt(2))) if v <= 0
                      else math.log1p(-0.5 * math.erfc(v / math.sqrt(2))) for v in x])
    check_forward(F.log_ndtr, [x], exact, rtol=1e-13, atol=1e-300)
    far = np.array([-1e4])
    check_forward(F.log_ndtr, [far], [np.array([-5e7 - math.log(1e4) - 0.5 * math.log(2 * math.pi)])], rtol=1e-15)
    assert evaluated(F.log_ndtr, np.array([inf]))[0] == 0 and evaluated(F.log_ndtr, np.array([-inf]))[0] == -inf


def test_i0_matches_numpy():
    x = np.concatenate([rand(60, seed=14, low=-60, high=60), [0.0, -30.0, 30.0, 30.5, 700.0, nan]])
    check_forward(F.i0, [x], np.i0(x), rtol=1e-13, atol=0)
    check_forward(F.i0, [x[:20].astype(np.float32) / 4], np.i0(x[:20] / 4).astype(np.float32), rtol=1e-5)


def test_log_ndtr_in_float32_on_both_sides_of_its_tail_switch():
    """float32's erfc(-x/√2) underflows below about -13 (float64's below -37): the float32 model
    switches to the asymptotic series earlier, and is finite and accurate on both sides of it."""
    x = np.array([-30.0, -13.0, -10.5, -10.0, -9.5, -5.0, 0.0, 3.0])
    want = evaluate(trace(F.log_ndtr, [x]).graph, [x])[0]
    got = gc.compile(F.log_ndtr, x.astype(np.float32), provider="cpu")(x.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=2e-6)
    check_grads(F.log_ndtr, [x[1:-1]])


def test_normal_and_bessel_gradients():
    """Orders 1 and 2 away from the branch points, and at them: x = 0 (i0 is even), -20 and 0
    (log_ndtr's switches), p = 1/2."""
    check_grads(lambda x: (F.ndtr(x), F.log_ndtr(x), F.i0(x)), [rand(12, seed=15, low=-6, high=6)])
    check_grads(lambda x: (F.log_ndtr(x), F.i0(x)), [np.array([-25.0, -20.0, 0.0, 31.0, 1e-3])])
    check_grads(F.ndtri, [np.array([0.02, 0.5, 0.97])])
    g = gc.compile(lambda x: gc.grad(F.sum(gc.grad(F.sum(F.i0(x)), [x])[0]), [x])[0], np.zeros(1),
                   provider="cpu")(np.zeros(1))
    np.testing.assert_allclose(g, [0.5])                                  # I0''(0) = 1/2


def test_xlog1py_values_and_torchs_gradients():
    """0 where x == 0 (y = -1, +inf and beyond -1 too) unless y is NaN; d/dx = log1p(y), 0 where
    x == 0 and y <= -1; d/dy = x / (1 + y)."""
    x = np.array([0.0, 0.0, 0.0, 0.0, 2.0, -1.5, 3.0, 0.0, nan])
    y = np.array([-1.0, inf, nan, 0.5, -0.5, 1e-9, -2.0, -3.0, 1.0])
    want = np.array([0.0, 0.0, nan, 0.0, 2 * math.log(0.5), -1.5 * math.log1p(1e-9), nan, 0.0, nan])
    check_values(F.xlog1py, [x, y], want)
    pts = np.array([0.0, 0.0, 0.0, 2.0]), np.array([-1.0, 0.5, 2.0, -0.5])
    check_values(lambda x, y: gc.grad(F.sum(F.xlog1py(x, y)), [x]), list(pts),
                 [np.array([0.0, math.log1p(0.5), math.log1p(2.0), math.log1p(-0.5)])])
    check_grads(F.xlog1py, [rand(3, 4, seed=40), rand(4, seed=41, low=-0.5, high=3.0)])
