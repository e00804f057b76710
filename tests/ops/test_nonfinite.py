"""NaN and infinity: isnan/isinf/isfinite against numpy on ONNX Runtime (float and integer
tensors, empty ones), and that they pass no gradient."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values

SPECIALS = np.array([[0.0, -0.0, 1.5, -2.0], [np.inf, -np.inf, np.nan, 3e38]])


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tests_match_numpy(name, dtype):
    x = SPECIALS.astype(dtype)
    out = check_forward(lambda x: (getattr(F, name)(x), getattr(np, name)(x)), [x], [getattr(np, name)(x)] * 2)
    assert out[0].dtype == np.bool_


@pytest.mark.parametrize("name", ["isnan", "isinf", "isfinite"])
def test_tests_of_integers_and_empty_tensors(name):
    i = np.array([[1, -2], [0, 7]], np.int64)
    empty = np.zeros((0, 2), np.float32)
    check_forward(lambda i, e: (getattr(F, name)(i), getattr(F, name)(e)), [i, empty],
                  [getattr(np, name)(i), getattr(np, name)(empty)])


def test_tests_pass_no_gradient():
    x = np.array([1.0, np.inf, np.nan, -2.0])
    check_values(lambda x: gc.grad(F.sum(F.where(F.isfinite(x), x, 0.0) * 2.0), [x]), [x], [[2.0, 0.0, 0.0, 2.0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_to_num_defaults_and_replacements(dtype):
    x = SPECIALS.astype(dtype)
    check_forward(lambda x: (F.nan_to_num(x), F.nan_to_num(x, nan=-1.0, posinf=9.0, neginf=-9.0)), [x],
                  [np.nan_to_num(x), np.nan_to_num(x, nan=-1.0, posinf=9.0, neginf=-9.0)])
    i = np.array([1, 2])
    check_forward(F.nan_to_num, [i], i)


def test_nan_to_num_gradient_passes_where_finite():
    x = np.array([np.nan, np.inf, -np.inf, 1.5])
    check_values(lambda x: gc.grad(F.sum(F.nan_to_num(x) * 3.0), [x]), [x], [[0.0, 0.0, 0.0, 3.0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fmax_fmin_ignore_nan(dtype):
    a = np.array([np.nan, 1.0, 2.0, np.nan, 1.0, -np.inf, 3.0], dtype)
    b = np.array([1.0, np.nan, 2.0, np.nan, 3.0, 0.0, np.inf], dtype)
    check_forward(lambda a, b: (F.fmax(a, b), F.fmin(a, b), np.fmax(a, b)), [a, b],
                  [np.fmax(a, b), np.fmin(a, b), np.fmax(a, b)])
    check_forward(lambda a: (F.fmax(a, 0.5), F.fmin(2.0, a)), [a], [np.fmax(a, dtype(0.5)), np.fmin(dtype(2), a)])


def test_fmax_fmin_gradients():
    a, b = np.array([[0.3, -1.2, 0.8]]), np.array([[0.1], [-0.5]])
    check_grads(lambda a, b: (F.fmax(a, b), F.fmin(a, b)), [a, b])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.bool_])
def test_signbit_matches_numpy(dtype):
    """-0.0 and -inf have the sign bit; NaN (whose bit ONNX cannot read) reads False; empty works."""
    numbers = SPECIALS.ravel()[[0, 1, 2, 3, 5, 7]]                    # all but +inf and NaN
    others = {np.bool_: np.array([True, False]), np.int32: np.array([0, -3, 7, 1], np.int32),
              np.uint8: np.array([0, 3, 255], np.uint8)}
    x = others[dtype] if dtype in others else numbers.astype(dtype)
    check_forward(F.signbit, [x], np.signbit(x))
    check_forward(F.signbit, [np.array([np.nan], np.float32)], np.array([False]))
    check_forward(F.signbit, [np.zeros((0, 2))], np.zeros((0, 2), bool))
