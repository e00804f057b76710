"""NaN and infinity: isnan/isinf/isfinite against numpy on ONNX Runtime (float and integer
tensors, empty ones), and that they pass no gradient."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_values

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
