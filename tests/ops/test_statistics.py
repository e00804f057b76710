"""var, std, vector_norm, norm, all and any: forward on ONNX Runtime against numpy (axes,
keepdims, correction, every ord, symbolic and empty axes, NaN) and float64 gradient checks."""
import math

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values

inf, nan = np.inf, np.nan
AXES = [None, 0, -1, (0, 2)]


def rand(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("correction", [1, 0, 2])
def test_var_std_match_numpy_ddof(axis, keepdims, correction):
    x = rand(3, 4, 5, seed=1, dtype=np.float32) * 3 + 10      # an offset mean: the two passes keep float32 digits
    expected = [np.var(x.astype(np.float64), axis=axis, ddof=correction, keepdims=keepdims),
                np.std(x.astype(np.float64), axis=axis, ddof=correction, keepdims=keepdims)]
    check_forward(lambda x: (F.var(x, axis, correction, keepdims), F.std(x, axis, correction, keepdims)), [x],
                  [e.astype(np.float32) for e in expected], rtol=2e-6)


def test_var_over_a_symbolic_axis_and_too_few_entries():
    cf = gc.compile(lambda x: (F.var(x, 0), F.std(x, 0, correction=0)), gc.spec(("n", 3)), provider="cpu")
    for n in (2, 5):
        x = rand(n, 3, seed=n, dtype=np.float32)
        got = cf(x)
        np.testing.assert_allclose(got[0], np.var(x, 0, ddof=1), rtol=1e-5)
        np.testing.assert_allclose(got[1], np.std(x, 0), rtol=1e-5)
    x = np.array([[1.0, 2.0]])
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"), np.errstate(all="ignore"):
        expected = [np.var(x, 0, ddof=1), np.std(x, 1, ddof=3)]      # N - correction <= 0 divides by zero
    check_forward(lambda x: (F.var(x, 0), F.std(x, 1, correction=3)), [x], expected)


def test_var_std_gradients_and_zero_spread():
    x = rand(3, 4, seed=2)
    check_grads(lambda x: (F.var(x, 1), F.std(x, 0, correction=0), F.std(x)), [x])
    flat = np.ones((2, 3))
    g = gc.compile(lambda x: gc.grad(F.sum(F.std(x, 1)), [x]), flat, provider="cpu")(flat)
    np.testing.assert_array_equal(g[0], np.zeros((2, 3)))     # PyTorch's 0, not NaN


def np_norm(x, ord, axis, keepdims):
    a = np.abs(x)
    if ord == inf:
        return np.max(a, axis=axis, keepdims=keepdims)
    if ord == -inf:
        return np.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return np.sum(x != 0, axis=axis, keepdims=keepdims).astype(x.dtype)
    return np.sum(a ** ord, axis=axis, keepdims=keepdims) ** (1 / ord)


ORDS = [2, 1, inf, -inf, 0, 3, 0.5]


@pytest.mark.parametrize("ord", ORDS, ids=str)
@pytest.mark.parametrize("axis", AXES, ids=str)
def test_vector_norm_matches_numpy(ord, axis):
    x = rand(3, 4, 5, seed=3, dtype=np.float32)
    x[0, 0, :2] = 0
    check_forward(lambda x: (F.vector_norm(x, ord, axis), F.vector_norm(x, ord, axis, keepdims=True)), [x],
                  [np_norm(x, ord, axis, False), np_norm(x, ord, axis, True)], rtol=2e-6)


@pytest.mark.parametrize("ord", ORDS, ids=str)
def test_vector_norm_float64_nan_and_infinity(ord):
    x = np.array([[3.0, -4.0, 0.0], [nan, 1.0, 2.0], [inf, 1.0, -2.0], [0.0, 0.0, 0.0]])
    with np.errstate(all="ignore"):
        check_forward(lambda x: F.vector_norm(x, ord, 1), [x], np_norm(x, ord, 1, False), rtol=1e-15)


@pytest.mark.parametrize("ord", [2, 1, inf, -inf, 3, 1.5], ids=str)
def test_vector_norm_gradients(ord):
    x = np.random.default_rng(4).permutation(np.linspace(0.3, 2.4, 12)).reshape(3, 4) * np.array([1, -1, 1, -1])
    check_grads(lambda x: (F.vector_norm(x, ord, 1), F.vector_norm(x, ord)), [x])


def test_norm_follows_numpy_linalg_norm():
    x = rand(3, 4, seed=5, dtype=np.float32)
    check_forward(lambda x: (F.norm(x), F.norm(x, "fro"), F.norm(x, axis=1), F.norm(x, 1, axis=0), F.norm(x[0], inf),
                             np.linalg.norm(x, axis=0)),
                  [x], [np.linalg.norm(x), np.linalg.norm(x, "fro"), np.linalg.norm(x, axis=1),
                        np.linalg.norm(x, 1, axis=0), np.linalg.norm(x[0], inf), np.linalg.norm(x, axis=0)], rtol=2e-6)


def test_unsupported_norms_say_so():
    with pytest.raises(gc.ShapeError, match="matrix_norm: ord must be"):
        gc.compile(lambda x: F.matrix_norm(x, 3), np.ones((2, 2), np.float32))
    with pytest.raises(gc.ShapeError, match="without an axis needs a 1-d or 2-d x"):
        gc.compile(lambda x: F.norm(x, 1), np.ones((2, 2, 2), np.float32))


@pytest.mark.parametrize("ord", ["fro", 1, -1, inf, -inf])
@pytest.mark.parametrize("axis", [(-2, -1), (2, 0)])
def test_matrix_norm_matches_numpy(ord, axis):
    x = rand(3, 4, 5, seed=4)
    check_forward(lambda x: (F.matrix_norm(x, ord, axis), F.matrix_norm(x, ord, axis, keepdims=True),
                             F.norm(x, ord, axis)), [x],
                  [np.linalg.norm(x, ord, axis), np.linalg.norm(x, ord, axis, keepdims=True),
                   np.linalg.norm(x, ord, axis)], rtol=2e-6)
    check_grads(lambda x: F.matrix_norm(x, ord, axis), [x.astype(np.float64)])


def test_matrix_norm_edges():
    """Empty matrices (torch: 0), NaN propagating through the Frobenius norm, tied extreme row sums."""
    check_forward(lambda x: F.matrix_norm(x, "fro"), [np.zeros((2, 0, 3))], np.zeros(2))
    nan = np.array([[1.0, np.nan], [2.0, 3.0]])
    assert np.isnan(gc.compile(lambda x: F.matrix_norm(x, "fro"), nan, provider="cpu")(nan))
    ties = np.array([[1.0, -2.0], [3.0, 0.0]])                      # row sums 3 and 3
    check_forward(lambda x: (F.matrix_norm(x, inf), F.matrix_norm(x, -1)), [ties], [3.0, 2.0])


@pytest.mark.parametrize("ord", [-0.5, -1, -3.5])
def test_negative_vector_norms(ord):
    """p < 0: (sum |x|^p)^(1/p), 0 when an entry is 0 (torch.linalg.vector_norm)."""
    x = rand(3, 4, seed=5)
    check_forward(lambda x: F.vector_norm(x, ord, 1), [x], np_norm(x, ord, 1, False), rtol=2e-6)
    check_grads(lambda x: F.vector_norm(x, ord, 1), [x.astype(np.float64)])
    zero = np.array([[1.0, 0.0, 2.0]])
    check_forward(lambda x: F.vector_norm(x, ord, 1), [zero], np.zeros(1))


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_all_any(axis, keepdims):
    x = np.array([[0.0, 1.0, nan], [0.0, 0.0, 0.0], [2.0, -1.0, 3.0]], np.float32)
    b = x != 0
    i = np.array([[0, 3, 1], [2, 2, 2], [0, 0, 0]])
    out = check_forward(lambda x, b, i: (F.all(x, axis, keepdims), F.any(x, axis, keepdims), F.all(b, axis, keepdims),
                                         F.any(i, axis, keepdims)),
                        [x, b, i], [np.all(x, axis, keepdims=keepdims), np.any(x, axis, keepdims=keepdims),
                                    np.all(b, axis, keepdims=keepdims), np.any(i, axis, keepdims=keepdims)])
    assert all(o.dtype == np.bool_ for o in out)


def test_all_any_of_empty_axes():
    empty = np.zeros((0, 2), np.float32)
    check_forward(lambda x: (F.all(x, 0), F.any(x, 0)), [empty], [np.ones(2, bool), np.zeros(2, bool)])


@pytest.mark.parametrize("shape", [(0, 0), (0, 3), (3, 0)])
def test_norms_of_nothing(shape):
    """Every p-norm of nothing is 0, inf's too (max |x| of no entry; ONNX's ReduceMax gave -inf, and
    the reference evaluator raised), and so are the largest row or column sums of matrix_norm (ord
    1 and inf), as torch's; -inf's is the smallest of nothing, +inf."""
    x = np.zeros(shape)
    check_values(lambda x: (F.vector_norm(x, inf), F.vector_norm(x, -inf), F.vector_norm(x, 2),
                            F.vector_norm(x, inf, 1), F.matrix_norm(x, 1), F.matrix_norm(x, inf)),
                 [x], [0.0, inf, 0.0, np.zeros(shape[0]), 0.0, 0.0])
    cf = gc.compile(lambda x: (F.vector_norm(x, inf, 1), F.matrix_norm(x, 1), F.matrix_norm(x, inf)),
                    gc.spec(("m", "n"), np.float64), provider="cpu")
    for got, want in zip(cf.run_flat(x), [np.zeros(shape[0]), 0.0, 0.0]):
        np.testing.assert_array_equal(got, want)
    y = np.array([[1.0, -4.0], [2.0, 3.0]])
    for got, want in zip(cf.run_flat(y), [[4.0, 3.0], 7.0, 5.0]):
        np.testing.assert_array_equal(got, want)


def test_norm_gradient_at_zero_is_zero_to_second_order():
    zero = np.zeros((1, 3))
    g = gc.compile(lambda x: gc.grad(F.sum(gc.grad(F.sum(F.vector_norm(x, 2, 1)), [x])[0] * 1.5), [x]), zero,
                   provider="cpu")(zero)
    np.testing.assert_array_equal(g[0], zero)
    assert math.isfinite(float(np.sum(g[0])))


def test_numpy_var_std_keep_numpys_ddof_and_median_is_refused():
    x = rand(3, 4, seed=6, dtype=np.float32)
    check_forward(lambda x: (np.var(x), np.std(x, axis=1, ddof=1), np.var(x, 0, keepdims=True), np.linalg.norm(x)),
                  [x], [np.var(x), np.std(x, axis=1, ddof=1), np.var(x, 0, keepdims=True), np.linalg.norm(x)],
                  rtol=2e-6)
    with pytest.raises(gc.TraceError, match="numpy.median averages the two middle values"):
        gc.compile(lambda x: np.median(x), x)
