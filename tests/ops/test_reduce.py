"""Reductions: forward through onnxruntime against numpy (axes, keepdims, dtypes, symbolic dims)
and float64 gradient checks."""
import warnings

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)


def distinct(*shape, seed=0):
    """Float64 values with no ties, not even of their squares (max/min gradients are unique)."""
    n = int(np.prod(shape))
    return np.random.default_rng(seed).permutation(np.linspace(0.1, 2.1, n) * (-1) ** np.arange(n)).reshape(shape)


def np_logsumexp(x, axis, keepdims):
    x = x.astype(np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


REDUCTIONS = [(F.sum, np.sum), (F.mean, np.mean), (F.max, np.max), (F.min, np.min), (F.prod, np.prod),
              (F.logsumexp, np_logsumexp)]
AXES = [None, 0, -1, 1, (0, 2), (-1, -3), (), (2, 0, 1)]


@pytest.mark.parametrize("fn, ref", REDUCTIONS, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_axes_and_keepdims(fn, ref, axis, keepdims):
    x = rand(2, 3, 4, seed=1)
    expected = ref(x, axis=axis, keepdims=keepdims).astype(np.float32)
    check_forward(lambda x: fn(x, axis=axis, keepdims=keepdims), [x], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn, ref", REDUCTIONS, ids=lambda f: getattr(f, "__name__", ""))
def test_reduction_float64(fn, ref):
    x = rand(3, 5, seed=2, dtype=np.float64)
    check_forward(lambda x: (fn(x), fn(x, axis=-1, keepdims=True)), [x],
                  [ref(x, axis=None, keepdims=False), ref(x, axis=-1, keepdims=True)], rtol=1e-12, atol=1e-12)


def test_tensor_reduction_methods():
    x = rand(2, 3, 4, seed=3)
    check_forward(lambda x: (x.sum(), x.sum(axis=1), x.mean(axis=(0, 2), keepdims=True), x.max(-1), x.min(axis=0),
                             x.prod(axis=2)),
                  [x], [x.sum(), x.sum(axis=1), x.mean(axis=(0, 2), keepdims=True), x.max(-1), x.min(axis=0),
                        x.prod(axis=2)], rtol=1e-5)


@pytest.mark.parametrize("fn, ref", [(F.sum, np.sum), (F.max, np.max), (F.min, np.min), (F.prod, np.prod)],
                         ids=["sum", "max", "min", "prod"])
def test_integer_reductions_stay_integer(fn, ref):
    x = np.array([[3, -1, 4], [1, -5, 9]], np.int64)
    out = check_forward(lambda x: (fn(x), fn(x, axis=0), fn(x, axis=-1, keepdims=True)), [x],
                        [ref(x), ref(x, axis=0), ref(x, axis=-1, keepdims=True)])
    assert all(o.dtype == np.int64 for o in out)


def test_mean_of_integers_is_float():
    x = np.array([[1, 2], [4, 6]], np.int64)
    out = check_forward(lambda x: F.mean(x, axis=0), [x], np.array([2.5, 4.0], np.float32))
    assert out[0].dtype.kind == "f"


def test_reductions_over_a_symbolic_axis():
    cf = gc.compile(lambda x: (F.mean(x, axis=0), F.sum(x, 0), F.max(x, axis=0), F.mean(x), F.mean(x, axis=1),
                               F.logsumexp(x, axis=0)), gc.spec(("batch", 3)))
    for n in (1, 4):
        x = rand(n, 3, seed=n)
        got = cf(x)
        for g, e in zip(got, [x.mean(0), x.sum(0), x.max(0), x.mean(), x.mean(1), np_logsumexp(x, 0, False)]):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_over_leading_axes_are_a_product_with_ones(dtype):
    """A float sum or mean over leading axes (size-1 axes aside) is lowered as a row of ones times
    the rows (onnxruntime's ReduceSum of few long rows is slow): the values, infinities and NaN
    as numpy's, keepdims, size-1 axes between and after, and an empty kept axis; a reduction
    with a kept axis before a reduced one stays a ReduceSum."""
    x = rand(4, 1, 3, 5, seed=4, dtype=dtype)
    x[0, 0, 0, 0], x[1, 0, 0, 0] = np.inf, -np.inf          # inf + -inf: NaN
    x[2, 0, 1, 1], x[3, 0, 2, 2] = np.nan, np.inf
    empty = np.zeros((3, 0, 2), dtype)
    fns = lambda x, e: (F.sum(x, 0), F.mean(x, (0, 1), keepdims=True), F.sum(x, (0, 2)),     # noqa: E731
                        F.mean(x, (0, 1, 2)), F.sum(e, 0), F.sum(x, (0, 3)))
    expected = [x.sum(0), x.mean((0, 1), keepdims=True), x.sum((0, 2)), x.mean((0, 1, 2)), empty.sum(0),
                x.sum((0, 3))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # numpy's inf - inf
        check_forward(fns, [x, empty], expected, rtol=1e-6, atol=1e-6)
    ops = [n.op_type for n in gc.compile(fns, x, empty, provider="cpu").model.graph.node]
    # two products: each mean shares its sum's (the same rows), merged with the repeated nodes; the
    # sum of the static empty e is known without data, a constant
    assert ops.count("MatMul") == 2 and ops.count("ReduceSum") == 1


def test_a_leading_axis_sum_with_a_symbolic_kept_axis():
    cf = gc.compile(lambda x: (F.sum(x, 0), F.mean(x, 0, keepdims=True)), gc.spec((3, "n")), provider="cpu")
    for n in (0, 1, 6):
        x = rand(3, n, seed=n)
        got = cf(x)
        np.testing.assert_allclose(got[0], x.sum(0), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got[1], x.mean(0, keepdims=True), rtol=1e-6, atol=1e-6)


def test_logsumexp_is_stable_for_large_values():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -1002.0]], np.float32)
    expected = np_logsumexp(x, 1, False).astype(np.float32)
    assert np.all(np.isfinite(expected))
    check_forward(lambda x: F.logsumexp(x, axis=1), [x], expected, rtol=1e-6)


def test_sum_to_shape_undoes_broadcasting():
    g = rand(2, 3, 4, seed=5)
    check_forward(lambda g: (F.sum_to_shape(g, (3, 1)), F.sum_to_shape(g, (1, 4)), F.sum_to_shape(g, (2, 3, 4)),
                             F.sum_to_shape(g, ())),
                  [g], [g.sum(axis=(0, 2)).reshape(3, 1), g.sum(axis=(0, 1)).reshape(1, 4), g, g.sum()], rtol=1e-5)


def test_reductions_over_an_empty_axis():
    """Over nothing: sum 0, prod 1, mean NaN (numpy and torch; ONNX Runtime's ReduceMean gave 0, so
    mse and l1_loss of nothing were 0), max -inf and min +inf (ONNX's identities; the reference
    evaluator raised), so any is False, all True and logsumexp -inf, as torch. Reference evaluator
    and ONNX Runtime alike, an empty axis or a symbolic one given 0; the gradients are empty."""
    def reductions(x):
        return (F.sum(x, 0), F.prod(x, 0), F.mean(x, 0), F.max(x, 0), F.min(x, 0), F.logsumexp(x, 0), F.mean(x),
                F.cast(F.any(x, 0), x.dtype), F.cast(F.all(x, 0), x.dtype), F.mse(x, x * 2), F.l1_loss(x, x * 2))
    empty = np.zeros((0, 3))
    nothing = [np.zeros(3), np.ones(3), np.full(3, np.nan), np.full(3, -np.inf), np.full(3, np.inf),
               np.full(3, -np.inf), np.nan, np.zeros(3), np.ones(3), np.nan, np.nan]
    check_values(reductions, [empty], nothing)
    check_values(lambda x: gc.grad(F.sum(F.max(x, 0)) + F.sum(F.mean(x, 0)) + F.sum(F.logsumexp(x, 0)), [x]),
                 [empty], [empty])
    cf = gc.compile(reductions, gc.spec(("n", 3), np.float64), provider="cpu")
    for got, want in zip(cf.run_flat(empty), nothing):
        np.testing.assert_array_equal(got, want)
    x = rand(2, 3, dtype=np.float64)
    np.testing.assert_allclose(cf.run_flat(x)[2], x.mean(0), rtol=1e-12)


def test_reduction_over_a_bad_axis_is_a_shape_error():
    with pytest.raises(gc.ShapeError, match="axis 3 is out of range for a tensor of rank 3"):
        gc.compile(lambda x: F.sum(x, axis=3), np.ones((2, 3, 4), np.float32))
    with pytest.raises(gc.ShapeError, match="repeated axis"):
        gc.compile(lambda x: F.max(x, axis=(1, -2)), np.ones((2, 3, 4), np.float32))


# -- gradients (float64, reference evaluator) ------------------------------------------------------
@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, False), (-1, True), ((0, 2), False), ((-1, 0), True)])
def test_grad_sum_mean(axis, keepdims):
    x = rand(2, 3, 4, seed=6, dtype=np.float64)
    check_grads(lambda x: (F.sum(x * x, axis, keepdims), F.mean(x * x, axis, keepdims)), [x])


@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (-1, True), ((0, 2), True)])
def test_grad_max_min_without_ties(axis, keepdims):
    x = distinct(2, 3, 4, seed=7)
    check_grads(lambda x: (F.max(x, axis, keepdims), F.min(x * x, axis, keepdims)), [x])


@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, True), ((0, -1), False)])
def test_grad_prod_of_nonzero_values(axis, keepdims):
    x = np.abs(rand(2, 3, 2, seed=8, dtype=np.float64)) + 0.5
    x[0] *= -1
    check_grads(lambda x: F.prod(x, axis, keepdims), [x])


@pytest.mark.parametrize("axis, keepdims", [(None, False), (-1, False), ((0, 1), True)])
def test_grad_logsumexp(axis, keepdims):
    x = rand(2, 3, 4, seed=9, dtype=np.float64)
    check_grads(lambda x: F.logsumexp(x * 2, axis, keepdims), [x])


@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, False), ((0, 1), True), ((-1, 0), False)])
def test_grad_prod_with_zeros_divides_by_nothing(axis, keepdims):
    """One zero in a slice gets the product of the others, two zeros give 0, to second order."""
    x = rand(3, 4, seed=10, dtype=np.float64)
    x[0, 1] = x[1, 2] = x[1, 3] = x[2, 0] = 0.0
    check_grads(lambda x: F.prod(x, axis, keepdims), [x])


def test_logsumexp_of_infinite_rows_in_float32_and_float64():
    inf = np.inf
    x = np.array([[inf, 1.0, 2.0], [-inf, -inf, -inf], [-inf, 1.0, -inf], [inf, inf, -inf], [np.nan, 1.0, 2.0]])
    expected = np.array([inf, -inf, 1.0, inf, np.nan])
    for dtype in (np.float32, np.float64):
        check_forward(lambda x: F.logsumexp(x, axis=1), [x.astype(dtype)], expected.astype(dtype))


@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, True), ((0, 2), False)])
def test_nansum_nanmean_skip_nan(axis, keepdims):
    x = rand(3, 4, 5, seed=7).astype(np.float64)
    x[0, 1, :] = np.nan                         # a slice of only NaN: nanmean NaN, nansum 0
    x[2, ::2, 1] = np.nan
    with warnings.catch_warnings():                             # numpy warns of the all-NaN slice
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(x, axis, keepdims=keepdims)
    check_forward(lambda x: (F.nansum(x, axis, keepdims), F.nanmean(x, axis, keepdims)), [x],
                  [np.nansum(x, axis, keepdims=keepdims), mean], rtol=1e-12)
    clean = rand(3, 4, 5, seed=8).astype(np.float64)
    check_grads(lambda x: (F.nansum(x, axis, keepdims), F.nanmean(x, axis, keepdims)), [clean])


def test_nan_reductions_of_integers_and_the_gradient_at_nan():
    xi = np.arange(6, dtype=np.int64).reshape(2, 3)
    check_forward(lambda x: (F.nansum(x, 1), F.nanmean(x, 1)), [xi], [xi.sum(1), xi.mean(1).astype(np.float32)])
    x = np.array([1.0, np.nan, 3.0])
    g = gc.compile(lambda x: gc.grad(F.nanmean(x) + F.nansum(x), [x])[0], x, provider="cpu")(x)
    np.testing.assert_array_equal(g, [1.5, 0.0, 1.5])
