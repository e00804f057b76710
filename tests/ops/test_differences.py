"""diff, trapezoid and cumulative_trapezoid: forward on ONNX Runtime against numpy (orders, axes,
prepend and append, sample points 1-d or of y's shape, short and empty axes, booleans) and float64
gradient checks to second order."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_diff_matches_numpy():
    x = rand(3, 5, seed=1)
    check_forward(lambda x: (F.diff(x), F.diff(x, 2, 0), F.diff(x, 3), F.diff(x, 0), F.diff(x, 6),
                             F.diff(x, 1, 1, prepend=np.float64(2.0), append=x[:, :2])), [x],
                  [np.diff(x), np.diff(x, 2, 0), np.diff(x, 3), x, np.diff(x, 6),
                   np.diff(x, 1, 1, prepend=2.0, append=x[:, :2])])
    b = np.array([True, False, False, True])
    check_forward(F.diff, [b], np.diff(b))
    check_forward(F.diff, [np.array([3, 7, 2])], np.diff([3, 7, 2]))
    # the differenced axis is static (diff refuses a symbolic one), the other axis symbolic
    check_grads(lambda x: (F.diff(x, 2), F.diff(F.transpose(x), 1, 0, prepend=F.transpose(x)[:1] * 2)), [x])
    with pytest.raises(gc.ShapeError, match="diff needs at least one axis"):
        gc.compile(F.diff, np.float64(1.0))


def test_trapezoid_and_cumulative_trapezoid():
    y = rand(3, 6, seed=2)
    x1 = np.sort(rand(6, seed=3))
    xs = np.sort(rand(3, 6, seed=4), 1)
    segments = lambda y, x: (y[:, 1:] + y[:, :-1]) / 2 * np.diff(x)          # noqa: E731
    check_forward(lambda y, x1, xs: (F.trapezoid(y), F.trapezoid(y, x1), F.trapezoid(y, xs), F.trapezoid(y, dx=0.5,
                                                                                                        axis=0),
                                     F.cumulative_trapezoid(y, x1), F.cumulative_trapezoid(y, xs),
                                     F.cumulative_trapezoid(y, dx=2.0, axis=0)), [y, x1, xs],
                  [np.trapezoid(y), np.trapezoid(y, x1), np.trapezoid(y, xs), np.trapezoid(y, dx=0.5, axis=0),
                   np.cumsum(segments(y, x1), 1), np.cumsum(segments(y, xs), 1),
                   np.cumsum((y[1:] + y[:-1]), 0)], rtol=1e-12)
    check_forward(lambda y: (F.trapezoid(y), F.cumulative_trapezoid(y)), [y[:, :1]], [np.zeros(3), np.zeros((3, 0))])
    check_forward(F.trapezoid, [np.array([1, 2, 4])], np.float64(4.5))
    check_grads(lambda y, x: (F.trapezoid(y, x), F.cumulative_trapezoid(y, x)), [y, xs])
    with pytest.raises(gc.ShapeError, match="trapezoid: x .* must have the 6 samples"):
        gc.compile(lambda y: F.trapezoid(y, np.arange(4.0)), y)
