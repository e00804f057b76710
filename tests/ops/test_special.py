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


def test_poles_and_infinities_are_pytorchs():
    x = np.array([0.0, -1.0, -2.0, inf, -inf, nan])
    check_values(lambda x: (F.lgamma(x), F.digamma(x), F.polygamma(1, x), F.polygamma(2, x)), [x],
                 [[inf, inf, inf, inf, inf, nan], [-inf, nan, nan, inf, nan, nan], [inf, inf, inf, 0, nan, nan],
                  [nan, nan, nan, 0, nan, nan]])


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
