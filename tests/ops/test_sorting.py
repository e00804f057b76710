"""topk, sort, argsort, median, argmax, argmin: forward on ONNX Runtime against numpy's stable sort
(ties, NaN, infinities, integers, symbolic and empty axes) and float64 gradient checks."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values

inf, nan = np.inf, np.nan
TIES = np.array([[3.0, 1.0, 3.0, nan, 2.0, 3.0, -inf, inf, -0.0, 0.0],
                 [0.0, -0.0, 5.0, 5.0, 1.0, 1.0, 2.0, -1.0, 2.0, 5.0]])


def stable_order(x, axis, descending):
    """numpy's stable argsort, NaN as the largest; descending keeps equal values in index order."""
    key = np.where(np.isnan(x), np.inf, x) if x.dtype.kind == "f" else x.astype(np.float64)
    return np.argsort(-key if descending else key, axis=axis, kind="stable")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("axis", [-1, 0, None], ids=str)
def test_sort_argsort_are_stable(dtype, descending, axis):
    x = np.nan_to_num(TIES, nan=7.0, posinf=9, neginf=-9).astype(dtype) if dtype not in (np.float32, np.float64) \
        else TIES.astype(dtype)
    flat = x.ravel() if axis is None else x
    ax = 0 if axis is None else axis
    order = stable_order(flat, ax, descending)
    out = check_forward(lambda x: (F.sort(x, axis, descending=descending), F.argsort(x, axis, descending=descending)),
                        [x], [np.take_along_axis(flat, order, ax), order])
    assert out[1].dtype == np.int64


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [0, 1, 4, 10])
def test_topk_values_and_indices(largest, k):
    x = TIES.astype(np.float32)
    order = stable_order(x, 1, largest)[:, :k]
    check_forward(lambda x: F.topk(x, k, largest=largest), [x], [np.take_along_axis(x, order, 1), order])
    check_forward(lambda x: F.topk(x, min(k, 2), axis=0, largest=largest), [x],
                  [np.take_along_axis(x, stable_order(x, 0, largest)[:min(k, 2)], 0),
                   stable_order(x, 0, largest)[:min(k, 2)]])


def test_sort_over_symbolic_and_empty_axes_and_numpy_dispatch():
    cf = gc.compile(lambda x: (F.sort(x, 0), F.argsort(x, 0, descending=True), np.sort(x, axis=1)),
                    gc.spec(("n", 3)), provider="cpu")
    for n in (1, 5):
        x = np.random.default_rng(n).integers(0, 3, (n, 3)).astype(np.float32)
        got = cf(x)
        np.testing.assert_array_equal(got[0], np.sort(x, 0))
        np.testing.assert_array_equal(got[1], stable_order(x, 0, True))
        np.testing.assert_array_equal(got[2], np.sort(x, 1))
    empty = np.zeros((2, 0), np.float32)
    check_forward(lambda x: (F.sort(x), F.argsort(x)), [empty], [empty, empty.astype(np.int64)])


def test_topk_k_out_of_range_and_bool_are_errors():
    with pytest.raises(gc.ShapeError, match=r"topk: k=4 must be between 0 and the size 3 of axis 1"):
        gc.compile(lambda x: F.topk(x, 4), np.ones((2, 3), np.float32))
    with pytest.raises(gc.ShapeError, match="sort: x must be a numeric tensor, got bool"):
        gc.compile(lambda x: F.sort(x > 0), np.ones(3, np.float32))


def test_sort_and_topk_gradients_go_back_to_the_source_positions():
    x = np.random.default_rng(5).permutation(np.linspace(-2, 2, 12)).reshape(3, 4)
    check_grads(lambda x: (F.sort(x, 1), F.sort(x * x + 0.3 * x, 0, descending=True), F.topk(x, 2)[0],
                           F.topk(x, 2, axis=0, largest=False)[0]), [x])
    # ties: PyTorch's stable sort of [3, 1, 3] weighted by [1, 2, 3] gives the gradient [2, 1, 3]
    t = np.array([3.0, 1.0, 3.0])
    check_values(lambda x: gc.grad(F.sum(F.sort(x) * np.array([1.0, 2.0, 3.0])), [x]), [t], [[2.0, 1.0, 3.0]])
    check_values(lambda x: gc.grad(F.sum(F.topk(x, 2)[0] * np.array([1.0, 2.0])), [x]),
                 [np.array([3.0, 1.0, 3.0, 2.0, 3.0])], [[1.0, 0.0, 2.0, 0.0, 0.0]])


@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_median_is_the_lower_median(axis, keepdims):
    x = np.array([[3.0, 1.0, 3.0, 2.0], [4.0, 4.0, -1.0, 0.5], [2.0, 7.0, 1.0, 1.0]], np.float32)
    flat = np.sort(x.ravel() if axis is None else x, axis=0 if axis is None else axis)
    n = flat.shape[0 if axis is None else axis]
    expected = np.take(flat, (n - 1) // 2, axis=0 if axis is None else axis)
    if keepdims:
        expected = np.expand_dims(expected, tuple(range(x.ndim)) if axis is None else axis)
    check_forward(lambda x: F.median(x, axis, keepdims), [x], np.asarray(expected))


def test_median_with_nan_symbolic_axes_and_integers():
    x = np.array([[3.0, nan, 1.0], [2.0, 5.0, 1.0]])
    check_forward(lambda x: (F.median(x, 1), F.median(x)), [x], [np.array([nan, 2.0]), np.array(nan)])
    cf = gc.compile(lambda x: F.median(x, 0), gc.spec(("n", 2)), provider="cpu")
    for n in (1, 4, 5):
        v = np.random.default_rng(n).standard_normal((n, 2)).astype(np.float32)
        np.testing.assert_array_equal(cf(v), np.sort(v, 0)[(n - 1) // 2])
    i = np.array([5, 1, 4, 2])
    check_forward(F.median, [i], np.array(2))


def test_median_gradient_goes_to_the_selected_element():
    x = np.random.default_rng(6).permutation(np.linspace(-1, 1, 15)).reshape(3, 5)
    check_grads(lambda x: (F.median(x, 1), F.median(x)), [x])
    check_values(lambda x: gc.grad(F.median(x), [x]), [np.array([3.0, 1.0, 3.0, 2.0])], [[0.0, 0.0, 0.0, 1.0]])
    check_values(lambda x: gc.grad(F.median(x), [x]), [np.array([3.0, 1.0, 3.0, 3.0])], [[1.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_argmax_argmin_first_occurrence_and_nan(axis, keepdims, dtype):
    x = TIES if dtype != np.int64 else np.nan_to_num(TIES, nan=7, posinf=9, neginf=-9)
    x = x.astype(dtype)
    out = check_forward(lambda x: (F.argmax(x, axis, keepdims), F.argmin(x, axis, keepdims)), [x],
                        [np.argmax(x, axis, keepdims=keepdims), np.argmin(x, axis, keepdims=keepdims)])
    assert out[0].dtype == np.int64


def test_argmax_of_an_empty_axis_is_refused():
    """There is no index to give: torch refuses, and ONNX Runtime failed at run time."""
    with pytest.raises(gc.ShapeError, match=r"argmax: axis 0 of x \(0, 3\) is empty"):
        gc.compile(lambda x: F.argmax(x, 0), np.zeros((0, 3)))
    with pytest.raises(gc.ShapeError, match=r"argmin: axis 0 of x \(0, 3\) is empty"):
        gc.compile(lambda x: F.argmin(x, 0), np.zeros((0, 3)))
    check_forward(lambda x: F.argmax(x, 1), [np.zeros((0, 3))], np.zeros(0, np.int64))


def test_argmax_has_no_gradient():
    x = np.array([1.0, 3.0, 2.0])
    check_values(lambda x: gc.grad(F.sum(x * F.cast(F.argmax(x), x.dtype)), [x]), [x], [[1.0, 1.0, 1.0]])
