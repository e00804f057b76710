"""kthvalue, nanmedian, median's indices, mode, quantile, nanquantile and count_nonzero: forward on
ONNX Runtime against numpy (and PyTorch's conventions written out: lower medians, the last
occurrence of a mode, NaN ordered last), ties, NaN, infinities, 0-d and empty operands, symbolic
axes, and float64 gradient checks to second order."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads

nan, inf = np.nan, np.inf


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_kthvalue_and_median_indices():
    x = rand(3, 5, seed=1)
    order = np.argsort(x, 1, kind="stable")
    check_forward(lambda x: (*F.kthvalue(x, 2), *F.kthvalue(x, 1, axis=0, keepdims=True)), [x],
                  [np.sort(x, 1)[:, 1], order[:, 1], x.min(0, keepdims=True), x.argmin(0)[None]])
    ties = np.array([[2.0, 2.0, 2.0, 1.0, 3.0], [4.0, nan, 1.0, 0.0, 5.0]])
    check_forward(lambda x: (*F.kthvalue(x, 3), *F.median(x, 1, return_indices=True)), [ties],
                  [[2.0, 4.0], [1, 0], [2.0, nan], [1, 1]])       # stable order; median of a NaN slice: its first NaN
    check_forward(lambda x: F.kthvalue(x, 1), [np.array(5.0)], [np.array(5.0), np.array(0)])
    check_grads(lambda x: (F.kthvalue(x, 2)[0], F.median(x, 0, return_indices=True)[0]), [x])
    with pytest.raises(gc.ShapeError, match="kthvalue: k=6 must be between 1 and the size 5"):
        gc.compile(lambda x: F.kthvalue(x, 6), x)


def test_nanmedian_ignores_nan_and_takes_the_lower_middle():
    x = np.array([[4.0, nan, 2.0, 1.0, 7.0, 3.0], [nan, nan, nan, nan, nan, nan], [1.0, 2.0, inf, -inf, nan, 0.0]])
    values, index = gc.compile(lambda x: F.nanmedian(x, 1, return_indices=True), x, provider="cpu")(x)
    np.testing.assert_array_equal(values, [3.0, nan, 1.0])
    np.testing.assert_array_equal(index[[0, 2]], [5, 0])
    check_forward(lambda x: (F.nanmedian(x), F.nanmedian(x, keepdims=True)), [x[[0, 2]]],
                  [np.array(2.0), np.array([[2.0]])])
    check_forward(F.nanmedian, [np.array([5, 1, 3, 2])], np.array(2))                    # integers: the median
    check_grads(lambda x: F.nanmedian(x, 1), [np.where(np.eye(3, 4) > 0, nan, rand(3, 4, seed=2))])
    cf = gc.compile(lambda x: F.nanmedian(x, 1), gc.spec((2, "n"), np.float64))
    for n in (1, 4):
        y = rand(2, n, seed=n)
        np.testing.assert_array_equal(cf(y), np.sort(y, 1)[:, (n - 1) // 2])
    with pytest.raises(gc.TraceError, match="numpy.nanmedian averages"):
        gc.compile(lambda x: np.nanmedian(x), x)


def test_mode_is_the_smallest_most_frequent_value_at_its_last_occurrence():
    x = np.array([[3.0, 1.0, 3.0, 2.0, 1.0, 5.0], [1.0, 2.0, 2.0, 1.0, 0.0, 0.0], [7.0, -inf, inf, 0.5, 9.0, -2.0]])
    check_forward(lambda x: F.mode(x), [x], [[1.0, 0.0, -inf], [4, 5, 1]])
    check_forward(lambda x: F.mode(x, 0, keepdims=True), [x.T], [[[1.0, 0.0, -inf]], [[4, 5, 1]]])
    check_forward(lambda x: F.mode(x), [np.array([[4, 4, 1, 1, 1], [0, 9, 9, 2, 2]])], [[1, 2], [4, 4]])
    check_forward(lambda x: F.mode(x), [np.array([nan, 2.0, nan])], [np.array(nan), np.array(2)])
    g = gc.compile(lambda x: gc.grad(F.sum(F.mode(x)[0]), [x])[0], x[:1])(x[:1])
    np.testing.assert_array_equal(g, [[0, 0, 0, 0, 1, 0]])                     # to the last occurrence
    check_grads(lambda x: F.mode(x)[0], [rand(4, 6, seed=3)])      # (a tie is a jump: distinct values)
    with pytest.raises(gc.ShapeError, match="mode: axis 1 .* must have a static, nonzero size"):
        gc.compile(lambda x: F.mode(x), gc.spec((2, "n")))


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_matches_numpy(interpolation):
    x = rand(4, 7, seed=4)
    q = np.array([0.0, 0.1, 0.5, 0.75, 1.0])
    check_forward(lambda x: (F.quantile(x, q, 1, interpolation=interpolation),
                             F.quantile(x, 0.3, 0, keepdims=True, interpolation=interpolation),
                             F.quantile(x, 0.6, interpolation=interpolation)), [x],
                  [np.quantile(x, q, 1, method=interpolation),
                   np.quantile(x, 0.3, 0, keepdims=True, method=interpolation),
                   np.quantile(x, 0.6, method=interpolation)], rtol=1e-13)


def test_quantile_nan_and_nanquantile():
    x = np.array([[1.0, nan, 3.0, 2.0], [nan, nan, nan, nan], [4.0, -1.0, inf, 0.0]])
    with np.errstate(invalid="ignore"):
        want = np.nanquantile(x, [0.2, 0.9], 1)
    check_forward(lambda x: (F.quantile(x, 0.5, 1), F.nanquantile(x, [0.2, 0.9], 1)), [x],
                  [np.quantile(x, 0.5, 1), want])
    check_forward(lambda x: F.quantile(x, 0.25), [np.array([3, 1, 2, 4])], np.float32(1.75))
    check_forward(lambda x: F.nanquantile(x, np.array([0.5])), [np.array(2.0)], np.array([2.0]))
    cf = gc.compile(lambda x, q: F.quantile(x, q, 1), gc.spec((2, "n"), np.float64), gc.spec((3,), np.float64))
    y, q = rand(2, 5, seed=5), np.array([0.1, 0.5, 0.95])
    np.testing.assert_allclose(cf(y, q), np.quantile(y, q, 1), rtol=1e-13)
    with pytest.raises(gc.ShapeError, match=r"q must be a number or a 1-d array in \[0, 1\]"):
        gc.compile(lambda x: F.quantile(x, 1.5), y)
    with pytest.raises(gc.ShapeError, match="interpolation must be one of"):
        gc.compile(lambda x: F.quantile(x, 0.5, interpolation="cubic"), y)


def test_quantile_gradients():
    """Linear interpolation weighs the two neighbours; the others pick one (torch's gradients)."""
    x = rand(3, 6, seed=6)
    check_grads(lambda x: (F.quantile(x, np.array([0.1, 0.55]), 1), F.nanquantile(x, 0.3, 0),
                           F.quantile(x, 0.4, 1, interpolation="midpoint"),
                           F.quantile(x, 0.45, 1, interpolation="nearest")), [x])


def test_count_nonzero():
    x = np.array([[0.0, 1.0, nan], [-0.0, 0.0, inf]])
    check_forward(lambda x: (F.count_nonzero(x), F.count_nonzero(x, 1), F.count_nonzero(x, (0, 1), keepdims=True),
                             F.count_nonzero(x > 0, 0)), [x],
                  [np.count_nonzero(x), np.count_nonzero(x, 1), np.count_nonzero(x, (0, 1), keepdims=True),
                   np.count_nonzero(x > 0, 0)])
    check_forward(F.count_nonzero, [np.zeros((0, 3))], np.array(0))


def test_vmap_batches_the_order_statistics():
    """vmap of each (and of its gradient) equals the per-example results stacked."""
    x = rand(3, 2, 5, seed=7)

    def fn(x):
        return (F.quantile(x, np.array([0.2, 0.7]), 1), F.nanmedian(x, 1), F.mode(x)[1], F.kthvalue(x, 2)[0],
                F.count_nonzero(x > 0, 1), *gc.grad(F.sum(F.quantile(x, 0.4, 1) * F.kthvalue(x, 3)[0]), [x]))
    batched = gc.compile(gc.vmap(fn), x)(x)
    single = gc.compile(fn, x[0])
    for i in range(3):
        for b, s in zip(batched, single(x[i])):
            np.testing.assert_allclose(b[i], s, rtol=1e-12)
