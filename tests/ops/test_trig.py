"""Inverse trigonometric and hyperbolic functions, arctan2 and hypot: forward on ONNX Runtime
against numpy (float32, and float64 where the CPU provider runs it), their edges, and float64
gradient checks to second order."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values

inf, nan = np.inf, np.nan


def rand(*shape, seed=0, low=-2.0, high=2.0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


UNARY = {  # name: (function, numpy, random domain, edge values, float64 on the CPU)
    "arcsin": (F.arcsin, np.arcsin, (-0.95, 0.95), [0.0, 1.0, -1.0, 1.5, nan], False),
    "arccos": (F.arccos, np.arccos, (-0.95, 0.95), [0.0, 1.0, -1.0, -1.5, nan], False),
    "arctan": (F.arctan, np.arctan, (-3, 3), [0.0, inf, -inf, 1e30, nan], False),
    "sinh": (F.sinh, np.sinh, (-3, 3), [0.0, 1e-6, -3e-5, 0.999, 1.0, 80.0, 710.0, inf, -inf, nan], True),
    "cosh": (F.cosh, np.cosh, (-3, 3), [0.0, 1e-6, 80.0, -710.0, inf, -inf, nan], True),
    "arcsinh": (F.arcsinh, np.arcsinh, (-3, 3), [0.0, 1e-7, -1e-4, 1e10, -3e38, inf, -inf, nan], True),
    "arccosh": (F.arccosh, np.arccosh, (1.1, 4), [1.0, 1.0 + 1e-6, 1e10, 3e38, 0.5, inf, nan], True),
    "arctanh": (F.arctanh, np.arctanh, (-0.9, 0.9), [0.0, 1e-7, -0.999, 1.0, -1.0, 1.5, nan], True),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_forward_and_edges(name, dtype):
    fn, ref, (low, high), edges, has_float64 = UNARY[name]
    if dtype == np.float64 and not has_float64:
        dtype = np.float32
    x = np.concatenate([rand(20, seed=len(name), low=low, high=high), edges]).astype(dtype)
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64)).astype(dtype)
    tol = 4e-7 if dtype == np.float32 else 1e-15
    check_forward(fn, [x], expected, rtol=tol, atol=0)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(name):
    fn, _, (low, high), _, _ = UNARY[name]
    check_grads(fn, [rand(2, 3, seed=len(name) + 1, low=low, high=high)])


def test_aliases_and_numpy_dispatch():
    assert (F.asin, F.acos, F.atan, F.asinh, F.acosh, F.atanh, F.atan2) == (
        F.arcsin, F.arccos, F.arctan, F.arcsinh, F.arccosh, F.arctanh, F.arctan2)
    x = rand(4, seed=1, low=-0.9, high=0.9, dtype=np.float32)
    check_forward(lambda x: (np.arcsin(x), np.sinh(x), np.arctan2(x, 0.5), np.hypot(x, 2.0)), [x],
                  [np.arcsin(x), np.sinh(x), np.arctan2(x, np.float32(0.5)), np.hypot(x, np.float32(2))], rtol=1e-6)


def test_inverse_trig_in_float64_is_refused_on_the_cpu():
    with pytest.raises(gc.GcompileError, match="no float64 kernel for: Asin"):
        gc.compile(F.arcsin, np.zeros(3), provider="cpu")


SIGNED = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, inf, -inf, inf, 1.0, nan, 2.0, -3.0, 0.0, 5.0, 1e-30, 3e38])
OTHER = np.array([0.0, 0.0, -0.0, -0.0, -inf, -inf, inf, -inf, 1.0, 0.0, 1.0, -2.0, 4.0, 3.0, nan, 1e-30, 3e38])


def test_arctan2_quadrants_zeros_and_infinities():
    y, x = SIGNED.astype(np.float32), OTHER.astype(np.float32)
    with np.errstate(all="ignore"):
        check_forward(F.arctan2, [y, x], np.arctan2(y, x), rtol=2e-7, atol=0)
    ints = [np.array([3, -4, 0]), np.array([-4, 0, 0])]
    out = check_forward(lambda a, b: (F.hypot(a, b), F.arctan2(F.cast(a, "float32"), F.cast(b, "float32"))), ints,
                        [np.hypot(*ints), np.arctan2(*ints).astype(np.float32)], rtol=2e-7)
    assert out[0].dtype == np.float64       # integers promote to float64, as numpy


def test_hypot_never_overflows_and_ignores_nan_beside_inf():
    for dtype in (np.float32, np.float64):
        a, b = SIGNED.astype(dtype), OTHER.astype(dtype)
        with np.errstate(all="ignore"):
            check_forward(F.hypot, [a, b], np.hypot(a, b), rtol=3e-7 if dtype == np.float32 else 3e-16, atol=0)


def test_arctan2_and_hypot_gradients():
    y, x = rand(2, 3, seed=2), rand(3, seed=3, low=0.3, high=2) * np.array([1, -1, 1])
    check_grads(F.arctan2, [y, x])
    check_grads(F.hypot, [y, x])
    # at the origin: arctan2's gradient is (0, -0) (PyTorch), hypot's NaN (PyTorch)
    zero = np.zeros(1)
    check_values(lambda y, x: gc.grad(F.sum(F.arctan2(y, x)), [y, x]), [zero, zero], [[0.0], [-0.0]])
    check_values(lambda y, x: gc.grad(F.sum(F.hypot(y, x)), [y, x]), [zero, zero], [[nan], [nan]])


# -- angles and sinc --------------------------------------------------------------------------------------
def test_angle_conversions():
    x = np.array([0.0, 90.0, -180.0, 1e300, inf, nan])
    check_forward(lambda x: (F.deg2rad(x), F.rad2deg(F.deg2rad(x))), [x], [np.deg2rad(x), np.rad2deg(np.deg2rad(x))],
                  rtol=1e-15)
    check_forward(F.deg2rad, [np.array([180, -90])], np.deg2rad([180, -90]).astype(np.float32))
    check_grads(lambda x: (F.deg2rad(x), F.rad2deg(x)), [rand(3, 2, seed=30)])


def test_sinc_matches_numpy_across_its_series_switch():
    x = np.concatenate([rand(40, seed=31, low=-4, high=4), [0.0, -0.0, 1e-30, 0.159, 0.1592, 0.16, 1.0, -3.0,
                                                               1e8, inf, -inf, nan]])
    with np.errstate(invalid="ignore"):
        check_forward(F.sinc, [x], np.sinc(x), rtol=1e-14, atol=1e-16)
        check_forward(F.sinc, [x.astype(np.float32)], np.sinc(x).astype(np.float32), rtol=2e-6, atol=1e-7)
    check_forward(F.sinc, [np.zeros((2, 0))], np.zeros((2, 0)))


def test_sinc_derivatives_at_and_near_zero():
    """sinc'(0) = 0 and sinc''(0) = -π²/3 exactly (the series), and float32's first derivative keeps its
    digits near 0, where (y cos y - sin y)/y² would cancel."""
    check_grads(F.sinc, [np.array([0.0, 0.158, 0.16, -0.5, 2.3])])
    d2 = gc.compile(lambda x: gc.grad(F.sum(gc.grad(F.sum(F.sinc(x)), [x])[0]), [x])[0], np.zeros(1))(np.zeros(1))
    np.testing.assert_allclose(d2, [-np.pi ** 2 / 3], rtol=1e-12)
    x = np.float32([1e-3, 1e-2])
    d1 = gc.compile(lambda x: gc.grad(F.sum(F.sinc(x)), [x])[0], x)(x)
    y = np.pi * x.astype(np.float64)
    np.testing.assert_allclose(d1, np.pi * (y * np.cos(y) - np.sin(y)) / y ** 2, rtol=1e-5)
