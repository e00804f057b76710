"""reciprocal, trunc, frac, fmod, remainder, floor_divide, copysign, lerp, exp2, log2, log10:
forward on ONNX Runtime against numpy (floats, integers, signs, zeros, infinities, NaN) and
float64 gradient checks with PyTorch's values at the edges."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values

inf, nan = np.inf, np.nan

A = np.array([5.0, -5.0, 5.0, -5.0, 4.0, 1.0, -1.0, 0.0, 1.0, 7.5, -7.5, 1.0, 0.0, inf, -0.0, 1e30, 3.0])
B = np.array([3.0, 3.0, -3.0, -3.0, 2.0, inf, inf, inf, 0.0, 0.5, 2.0, 0.1, 0.0, 2.0, 3.0, 7.0, nan])


@pytest.mark.parametrize("name", ["fmod", "remainder", "floor_divide"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_division_family_matches_numpy(name, dtype):
    a, b = A.astype(dtype), B.astype(dtype)
    with np.errstate(all="ignore"):
        expected = getattr(np, name)(a, b)
    check_forward(getattr(F, name), [a, b], expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["fmod", "remainder", "floor_divide"])
def test_division_family_on_integers_divides_by_zero_as_numpy(name):
    a = np.array([5, -5, 5, -5, 4, 0, 7, -7], np.int64)
    b = np.array([3, 3, -3, -3, 2, 0, 0, 0], np.int64)
    with np.errstate(all="ignore"):
        expected = getattr(np, name)(a, b)          # 0 where b == 0
    out = check_forward(getattr(F, name), [a, b], expected)
    assert out[0].dtype == np.int64
    check_forward(lambda a: getattr(F, name)(a, 3), [a], getattr(np, name)(a, 3))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_python_operators_divide_integer_tensors_by_zero_as_numpy(dtype):
    """`//` and `%` on Tensors were a TypeError; `/` of integers is numpy's true division."""
    a = np.array([5, -5, 5, -5, 4, 0, 7, -7], dtype)
    b = np.array([3, 3, -3, -3, 2, 0, 0, 0], dtype)
    f = gc.compile(lambda a, b: (a // b, a % b, a / b, 7 // b, a % 3), a, b, provider="cpu")
    with np.errstate(all="ignore"):
        expected = (a // b, a % b, a / b, 7 // b, a % 3)
    for got, want in zip(f(a, b), expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_powers_with_negative_exponents(dtype):
    """A negative exponent on integers reached ONNX Runtime's Pow, which converts the infinity of
    0 ** -1 to int (INT_MIN); it gives a ** b truncated toward zero, as PyTorch: 1 for base 1, ±1
    for -1, 0 otherwise (numpy raises), whether the exponent is known when tracing or not."""
    x = np.array([0, 1, -1, -1, 2, -3, 0, 2, -2, 5], dtype)
    y = np.array([-1, -5, -3, -2, -1, -2, 0, 3, 3, 0], dtype)
    expected = np.array([0, 1, -1, 1, 0, 0, 1, 8, -8, 1], dtype)
    check_forward(lambda x, y: x ** y, [x, y], expected)
    check_forward(lambda x: x ** -1, [x], np.where(np.abs(x) == 1, x, 0))
    check_forward(lambda x: x ** 2, [x], x ** 2)
    np.testing.assert_allclose(gc.compile(lambda x: x ** -1.0, x[1:], provider="cpu")(x[1:]), x[1:] ** -1.0)


def test_python_floor_division_where_floor_of_the_quotient_rounds_wrong():
    a, b = np.array([1.0, -1.0, 0.3, 7.0]), np.array([0.1, 0.1, 0.1, 0.7])
    check_forward(F.floor_divide, [a, b], np.floor_divide(a, b), rtol=0, atol=0)
    assert float(np.floor_divide(1.0, 0.1)) == 9.0 != np.floor(1.0 / 0.1)


def test_fmod_remainder_gradients_are_pytorchs():
    a, b = np.array([5.0, -5.0, 5.0, -5.0, 4.5]), np.array([3.0, 3.0, -3.0, -3.0, 2.0])
    check_values(lambda a, b: gc.grad(F.sum(F.fmod(a, b)), [a, b]), [a, b], [np.ones(5), [-1, 1, 1, -1, -2]])
    check_values(lambda a, b: gc.grad(F.sum(F.remainder(a, b)), [a, b]), [a, b], [np.ones(5), [-1, 2, 2, -1, -2]])
    a, b = np.array([[5.3, -2.2, 0.7]]), np.array([[1.7], [-2.9]])
    check_grads(lambda a, b: (F.fmod(a, b), F.remainder(a, b)), [a, b])


def test_floor_divide_and_trunc_pass_no_gradient():
    x = np.array([1.5, -2.5, 3.0])
    check_values(lambda x: gc.grad(F.sum(F.floor_divide(x, 2.0) + F.trunc(x) + x), [x]), [x], [np.ones(3)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trunc_frac_reciprocal(dtype):
    x = np.array([1.5, -1.5, -0.5, 0.5, 2.0, -0.0, 0.0, 1e30, inf, -inf, nan], dtype)
    with np.errstate(all="ignore"):
        check_forward(lambda x: (F.trunc(x), F.frac(x), F.reciprocal(x)), [x],
                      [np.trunc(x), x - np.trunc(x), 1 / x], rtol=0, atol=0)
    i = np.array([3, -2], np.int64)
    out = check_forward(lambda i: (F.trunc(i), F.reciprocal(i)), [i], [i, 1 / i.astype(np.float32)])
    assert out[0].dtype == np.int64 and out[1].dtype == np.float32   # reciprocal of integers is float, as torch


def test_frac_and_reciprocal_gradients():
    x = np.array([[1.3, -2.6, 0.4], [3.7, -0.2, 5.1]])
    check_grads(lambda x: (F.frac(x), F.reciprocal(x)), [x])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_copysign_signs_zeros_and_infinities(dtype):
    a = np.array([1.0, -2.0, 0.0, 3.0, inf, -inf, nan, 4.0, 2.0, 0.0, -0.0], dtype)
    b = np.array([-1.0, 2.0, 1.0, -0.0, -5.0, 1.0, -1.0, -inf, 0.0, -1.0, 1.0], dtype)
    got = check_forward(F.copysign, [a, b], np.copysign(a, b), rtol=0, atol=0)[0]
    signed = ~np.isnan(a)                      # -0.0 where b is negative (a NaN's sign bit is not kept)
    np.testing.assert_array_equal(np.signbit(got)[signed], np.signbit(np.copysign(a, b))[signed])


def test_copysign_gradient():
    a, b = np.array([1.0, -2.0, 0.0, 3.0]), np.array([-1.0, 2.0, -1.0, 0.5])
    check_values(lambda a, b: gc.grad(F.sum(F.copysign(a, b)), [a, b]), [a, b], [[-1, -1, 0, 1], [0, 0, 0, 0]])
    check_grads(F.copysign, [np.array([[1.2, -0.7]]), np.array([[0.5], [-1.5]])])


def test_lerp_forward_exact_at_the_ends_and_gradients():
    a, b = np.array([1.0, 2.0, -3.0, 0.1]), np.array([3.0, 5.0, 7.0, 0.3])
    w = np.array([0.5, 2.0, 1.0, 0.0])
    for dtype in (np.float32, np.float64):
        check_forward(F.lerp, [a.astype(dtype), b.astype(dtype), w.astype(dtype)],
                      (a + w * (b - a)).astype(dtype), rtol=1e-7)
    got = gc.compile(F.lerp, np.float32(0.1), np.float32(0.7), np.float32(1))(np.float32(0.1), np.float32(0.7),
                                                                               np.float32(1))
    assert got == np.float32(0.7)
    check_values(lambda a, b, w: gc.grad(F.sum(F.lerp(a, b, w)), [a, b, w]), [a[:2], b[:2], w[:2]],
                 [[0.5, -1.0], [0.5, 2.0], [2.0, 3.0]])
    check_grads(F.lerp, [a, b, np.array([0.3, 0.7, -0.2, 1.4])])
    check_forward(lambda a, b: F.lerp(a, b, 0.25), [a, b], a + 0.25 * (b - a))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp2_log2_log10(dtype):
    x = np.array([0.0, 1.0, 3.0, -2.0, 0.5, 10.3, 1e-3, 1024.0, inf, -inf, nan], dtype)
    with np.errstate(all="ignore"):
        check_forward(lambda x: (F.exp2(x), F.log2(x), F.log10(x)), [x], [np.exp2(x), np.log2(x), np.log10(x)],
                      rtol=3e-7 if dtype == np.float32 else 4e-16, atol=0)
    i = np.array([1, 8], np.int64)
    out = check_forward(lambda i: (F.exp2(i), F.log2(i)), [i], [np.exp2(i), np.log2(i)])
    assert out[0].dtype == np.float64 == out[1].dtype
    check_grads(lambda x: (F.exp2(x), F.log2(x * x + 0.5), F.log10(x * x + 0.5)), [np.array([0.3, -1.2, 2.0])])


EMPTY_OK = [F.arcsin, F.arcsinh, F.sinh, F.reciprocal, F.trunc, F.frac, F.exp2, F.log2, F.erfc, F.erfinv, F.lgamma,
            F.digamma, F.hardswish, F.mish, F.logsigmoid, F.softshrink, F.nan_to_num, F.isnan,
            lambda x: F.fmod(x, 2.0), lambda x: F.arctan2(x, x), lambda x: F.hypot(x, x), lambda x: F.xlogy(x, x),
            lambda x: F.var(x, 1), lambda x: F.vector_norm(x, 2, 1), lambda x: F.cumsum(x, 1), lambda x: F.sort(x, 0)]


@pytest.mark.parametrize("k", range(len(EMPTY_OK)))
def test_new_functions_on_zero_size_tensors(k):
    empty = np.zeros((0, 3), np.float32)
    out = gc.compile(EMPTY_OK[k], empty, provider="cpu")(empty)
    assert out.size == 0


def test_reductions_over_an_empty_axis():
    wide = np.zeros((3, 0), np.float32)         # var and std are NaN (0/0), the norm 0, as PyTorch
    got = gc.compile(lambda x: (F.var(x, 1), F.vector_norm(x, 2, 1), F.std(x, 1, correction=0)), wide,
                     provider="cpu")(wide)
    assert np.isnan(got[0]).all() and (got[1] == 0).all() and np.isnan(got[2]).all()


def _nextafter_cases(dtype):
    fi = np.finfo(dtype)
    edges = np.array([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 1024.0, fi.smallest_normal, -fi.smallest_normal,
                      fi.smallest_subnormal, 3 * fi.smallest_subnormal, fi.max, -fi.max, np.inf, -np.inf, np.nan])
    rng = np.random.default_rng(1)
    a = np.concatenate([edges, edges, rng.standard_normal(100) * 10.0 ** rng.integers(-30, 30, 100), [1.5, -0.0]])
    b = np.concatenate([np.full(16, np.inf), np.full(16, -np.inf), rng.standard_normal(100) * 1e3, [1.5, 0.0]])
    a, b = a.astype(dtype), b.astype(dtype)
    with np.errstate(over="ignore"):
        return a, b, np.nextafter(a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nextafter_matches_numpy_bit_for_bit(dtype, monkeypatch):
    """Random magnitudes over 60 decades, powers of two (the spacing halves below them), the normal
    range's edge and subnormals, ±0, ±max, ±inf, NaN and a == b; subnormals kept
    (runtime/subnormals.py)."""
    monkeypatch.setenv("GCOMPILE_SUBNORMALS", "keep")
    a, b, want = _nextafter_cases(dtype)
    got = check_forward(F.nextafter, [a, b], want, rtol=0, atol=0)[0]
    assert np.array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nextafter_with_subnormals_flushed(dtype):
    # by default ONNX Runtime flushes subnormal results to zero and reads subnormal operands as
    # zero: numpy's value wherever neither the values nor the step between them (at the lowest
    # exponent, the smallest subnormal) is subnormal, and never a subnormal
    a, b, want = _nextafter_cases(dtype)
    tiny = np.finfo(dtype).smallest_normal

    def subnormal(v):
        return (v != 0) & (np.abs(v) < tiny)
    got = gc.compile(F.nextafter, a, b, provider="cpu")(a, b)
    plain = ~(np.abs(a) < 2 * tiny) & ~subnormal(want)
    np.testing.assert_array_equal(got[plain], want[plain])
    assert not subnormal(got).any()


def test_nextafter_gradient():
    check_grads(F.nextafter, [np.array([0.3, -2.0, 7.5]), np.array([1.0, -3.0, 0.0])])


def test_trunc_divide_rounds_toward_zero_and_passes_no_gradient():
    with np.errstate(all="ignore"):
        check_forward(F.trunc_divide, [A, B], np.trunc(A / B), rtol=0)
    a, b = np.array([7, -7, 7, -7, 5, 0]), np.array([2, 2, -2, -2, 0, 3])
    check_forward(F.trunc_divide, [a, b], np.array([3, -3, -3, 3, 0, 0]))        # C's division; by 0 gives 0
    check_forward(F.trunc_divide, [np.zeros((0, 3)), np.ones(3)], np.zeros((0, 3)))
    x = np.array([1.5, -2.5]), np.array([0.5, 2.0])
    check_values(lambda a, b: gc.grad(F.sum(F.trunc_divide(a, b)), [a, b]), list(x), [np.zeros(2), np.zeros(2)])
