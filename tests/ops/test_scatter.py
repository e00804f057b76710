"""scatter, scatter_reduce, index_put/index_copy/index_add/index_fill, masked_fill and
masked_select: forward through onnxruntime against loops written from PyTorch's definitions,
float64 gradient checks (orders 1 and 2), and the edges: duplicate indices (the last wins),
ties of amax/amin (shared), negative indices, an index smaller than x, zero-size operands, and
the refused forms."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5))
IDX = np.array([[1, -1, 0, 3, 1], [1, 2, 0, 0, 3], [2, 2, 0, 1, 3]])      # duplicates along axis 0
SRC = RNG.standard_normal((3, 5))


def f32(*arrays):
    return [np.asarray(a, np.float32) for a in arrays]


def naive_scatter(x, axis, idx, src, combine=None):
    """Row-major loop over the index: out[.., idx[p], ..] = src[p] (or combine(old, src[p]))."""
    out = np.array(x, np.float64)
    for p in np.ndindex(*idx.shape):
        target = list(p)
        target[axis] = idx[p] % x.shape[axis]
        value = src[p] if np.ndim(src) else src
        out[tuple(target)] = value if combine is None else combine(out[tuple(target)], value)
    return out


def naive_scatter_reduce(x, axis, idx, src, reduce, include_self):
    out = np.array(x, np.float64)
    groups: dict = {}
    for p in np.ndindex(*idx.shape):
        target = list(p)
        target[axis] = idx[p] % x.shape[axis]
        groups.setdefault(tuple(target), []).append(src[p])
    for t, values in groups.items():
        values = ([x[t]] if include_self else []) + values
        out[t] = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce](values)
    return out


# -- scatter ------------------------------------------------------------------------------------------
def test_scatter_src_and_value_forms_last_duplicate_wins():
    x, src = f32(X, SRC)
    check_forward(lambda x, s: F.scatter(x, 0, IDX, s), [x, src], naive_scatter(x, 0, IDX, src))
    check_forward(lambda x: F.scatter(x, 0, IDX, 2.5), [x], naive_scatter(x, 0, IDX, 2.5))
    check_forward(lambda x, s: F.put_along_axis(x, IDX.T[:4], s, 1), [x, src.T[:4]],
                  naive_scatter(x, 1, IDX.T[:4], src.T[:4]))
    check_grads(lambda x, s: F.scatter(x, 0, IDX, s), [X, SRC])
    check_grads(lambda x: F.scatter(x, -1, IDX.T[:4], 0.5), [X])


def test_scatter_gradient_goes_to_the_winner_only():
    x, src = np.zeros((1, 2)), np.array([[1.0, 2.0], [3.0, 4.0]])
    idx = np.zeros((2, 2), np.int64)
    gx, gs = gc.compile(lambda x, s: gc.grad(F.sum(F.scatter(x, 0, idx, s) * np.array([5.0, 7.0])), [x, s]),
                        x, src, provider="cpu")(x, src)
    np.testing.assert_array_equal(gx, [[0, 0]])
    np.testing.assert_array_equal(gs, [[0, 0], [5, 7]])


def test_scatter_index_smaller_than_x_and_src():
    x, src = f32(RNG.standard_normal((4, 6)), RNG.standard_normal((3, 7)))
    idx = np.array([[3, 0], [3, 1]])
    expected = naive_scatter(x, 0, idx, src[:2, :2])
    check_forward(lambda x, s: F.scatter(x, 0, idx, s), [x, src], expected)
    check_grads(lambda x, s: F.scatter(x, 0, idx, s), [x, src])


def test_scatter_on_integers_and_runtime_indices():
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    idx = np.array([[3, 3, 0, 1, 2]], np.int32)
    check_forward(lambda x, i: F.scatter(x, 0, i, -1), [x, idx], naive_scatter(x, 0, idx, -1).astype(np.int64))
    check_forward(lambda x, i: F.scatter(x, 0, i, x[:1] * 10), [x, idx],
                  naive_scatter(x, 0, idx, x[:1] * 10).astype(np.int64))


# -- scatter_reduce -------------------------------------------------------------------------------------
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce, include_self):
    x, src = f32(X, SRC)
    check_forward(lambda x, s: F.scatter_reduce(x, 0, IDX, s, reduce, include_self=include_self), [x, src],
                  naive_scatter_reduce(x, 0, IDX, src, reduce, include_self), rtol=1e-5, atol=1e-6)
    check_grads(lambda x, s: F.scatter_reduce(x, 0, IDX, s, reduce, include_self=include_self), [X, SRC])
    idx = np.array([[0, 4, -1]])
    check_forward(lambda x, s: F.scatter_reduce(x, 1, idx, s, reduce, include_self=include_self), [x, src],
                  naive_scatter_reduce(x, 1, idx, src[:1, :3], reduce, include_self), rtol=1e-5, atol=1e-6)


def test_scatter_reduce_on_integers():
    x = np.arange(10, dtype=np.int64).reshape(2, 5)
    idx, src = np.array([[4, 4, 0]]), np.array([[7, -3, 2]], np.int64)
    for reduce in ("sum", "prod", "amax", "amin"):
        for include_self in (True, False):
            check_forward(lambda x: F.scatter_reduce(x, 1, idx, src, reduce, include_self),  # noqa: B023
                          [x], naive_scatter_reduce(x, 1, idx, src, reduce, include_self).astype(np.int64))


def test_scatter_reduce_amax_ties_share_the_gradient():
    """Two updates and x's own value tie at the maximum: each gets a third (PyTorch's rule). With
    include_self=False only the updates are counted."""
    x, src = np.array([[2.0, 0.0]]), np.array([[2.0, -1.0], [2.0, 5.0]])
    idx = np.zeros((2, 2), np.int64)
    w = np.array([[3.0, 1.0]])
    for include_self, gx, gs in [(True, [[1, 0]], [[1, 0], [1, 1]]), (False, [[0, 0]], [[1.5, 0], [1.5, 1]])]:
        got = gc.compile(lambda x, s: gc.grad(F.sum(F.scatter_reduce(x, 0, idx, s, "amax", include_self) * w),  # noqa: B023
                                              [x, s]), x, src, provider="cpu")(x, src)
        np.testing.assert_allclose(got[0], gx)
        np.testing.assert_allclose(got[1], gs)


def test_scatter_reduce_with_nothing_landing_keeps_x_and_its_gradient():
    x, src = X[:, :2], np.zeros((0, 2))
    idx = np.zeros((0, 2), np.int64)
    for reduce in ("mean", "amax", "prod"):
        for include_self in (True, False):
            check_forward(lambda x, s: F.scatter_reduce(x, 0, idx, s, reduce, include_self), [x, src], x)  # noqa: B023
            check_grads(lambda x, s: F.scatter_reduce(x, 0, idx, s, reduce, include_self), [x, src])  # noqa: B023


# -- index_put and friends --------------------------------------------------------------------------------
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    x = f32(X)[0]
    i0, i1 = np.array([0, 2, -1, 2]), np.array([1, -1, 0, 4])
    v = RNG.standard_normal(4).astype(np.float32)
    expected = x.astype(np.float64)
    for a, b, value in zip(i0, i1, v):
        expected[a, b] = expected[a, b] + value if accumulate else value
    check_forward(lambda x, v: F.index_put(x, (i0, i1), v, accumulate=accumulate), [x, v], expected)
    rows = RNG.standard_normal((2, 5)).astype(np.float32)
    expected = x.astype(np.float64)
    for r, value in zip([3, 3], rows):
        expected[r] = expected[r] + value if accumulate else value
    check_forward(lambda x, v: F.index_put(x, np.array([3, 3]), v, accumulate), [x, rows], expected)
    check_forward(lambda x: F.index_put(x, (np.array([[1], [2]]), np.array([0, 4])), 9.0, accumulate), [x],
                  _put_grid(x, accumulate))
    check_grads(lambda x, v: F.index_put(x, (i0, i1), v, accumulate=accumulate), [X, v])
    check_grads(lambda x, v: F.index_put(x, np.array([3, 0, 3]), v[:3, None], accumulate), [X, v])


def _put_grid(x, accumulate):
    out = x.astype(np.float64)
    for a in (1, 2):
        for b in (0, 4):
            out[a, b] = out[a, b] + 9 if accumulate else 9
    return out


def test_index_put_with_runtime_indices():
    x = f32(X)[0]
    i = np.array([4, 0, 4, 1], np.int64)
    v = RNG.standard_normal((4,)).astype(np.float32)
    expected = x.astype(np.float64)
    for r, value in zip(i, v):
        expected[1, r] = value
    check_forward(lambda x, i, v: F.index_put(x, (np.array(1), i), v), [x, i, v], expected)


def test_index_copy_add_fill():
    x = f32(X)[0]
    src = RNG.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([3, 0, -2])
    copied, added, filled = (x.astype(np.float64) for _ in range(3))
    for j, i in enumerate(idx):
        copied[:, i] = src[:, j]
        added[:, i] += 2 * src[:, j]
        filled[:, i] = -7
    check_forward(lambda x, s: (F.index_copy(x, 1, idx, s), F.index_add(x, -1, idx, s, alpha=2),
                                F.index_fill(x, 1, idx, -7.0)), [x, src], [copied, added, filled])
    check_grads(lambda x, s: (F.index_copy(x, 1, idx, s), F.index_add(x, 1, idx, s, alpha=2),
                              F.index_fill(x, 1, idx, -7.0)), [X, src])
    value = np.array(1.5)
    check_grads(lambda x, v: F.index_fill(x, 0, np.array([1, 1]), v), [X, value])
    check_forward(lambda x: F.index_copy(x, 1, np.zeros(0, np.int64), np.zeros((4, 0), np.float32)), [x], x)


# -- masks -------------------------------------------------------------------------------------------------
MASK = RNG.random((4, 5)) > 0.5


def test_masked_fill():
    x = f32(X)[0]
    check_forward(lambda x, m: F.masked_fill(x, m, 3.0), [x, MASK], np.where(MASK, 3.0, x))
    check_forward(lambda x: F.masked_fill(x, MASK[0], -np.inf), [x], np.where(MASK[0], -np.inf, x))
    check_grads(lambda x, v: F.masked_fill(x, MASK, v), [X, np.array(0.5)])


def test_masked_select_static_and_runtime_masks():
    x = f32(X)[0]
    selected = x[MASK]
    n = len(selected)
    check_forward(lambda x: F.masked_select(x, MASK), [x], selected)
    check_forward(lambda x, m: F.masked_select(x, m, size=n), [x, MASK], selected)
    check_forward(lambda x, m: F.masked_select(x, m, size=n + 3, fill=-1), [x, MASK],
                  np.concatenate([selected, [-1, -1, -1]]))
    check_forward(lambda x, m: F.masked_select(x, m, size=2), [x, MASK], selected[:2])
    check_forward(lambda x: F.masked_select(x, MASK, size=n + 1), [x], np.concatenate([selected, [0]]))
    check_forward(lambda x, m: F.masked_select(x, m[0], size=8), [x, MASK],       # the mask broadcasts
                  np.broadcast_to(x, (4, 5))[np.broadcast_to(MASK[0], (4, 5))][:8])
    check_forward(lambda x, m: F.masked_select(x, m, size=0), [x, MASK], np.zeros(0, np.float32))
    check_forward(lambda x, m: F.masked_select(x, m, size=3), [x, np.zeros((4, 5), bool)], np.zeros(3, np.float32))
    check_grads(lambda x: F.masked_select(x, MASK, size=n - 2), [X])
    cf = gc.compile(lambda x, m: gc.grad(F.sum(F.masked_select(x, m, size=3) * np.array([1.0, 2.0, 3.0])), [x])[0],
                    X, MASK, provider="cpu")
    expected = np.zeros_like(X)
    expected[tuple(np.argwhere(MASK)[:3].T)] = [1, 2, 3]
    np.testing.assert_array_equal(cf(X, MASK), expected)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: F.masked_select(x, x > 0), gc.UnsupportedError, "needs `size`"),
    (lambda x: F.masked_fill(x, x, 1.0), gc.ShapeError, "mask must be boolean"),
    (lambda x: F.masked_fill(x, np.ones((2, 4, 5), bool), 1.0), gc.ShapeError, "does not broadcast"),
    (lambda x: F.index_put(x, (x > 0,), 1.0), gc.UnsupportedError, "boolean masks"),
    (lambda x: F.index_put(x, (np.array([4]),), 1.0), gc.ShapeError, "out of range"),
    (lambda x: F.scatter(x, 0, np.zeros((2, 6), np.int64), 1.0), gc.ShapeError, "no larger off axis 0"),
    (lambda x: F.scatter(x, 0, np.zeros((2, 2), np.int64), np.ones(3)), gc.ShapeError, "same rank"),
    (lambda x: F.scatter_reduce(x, 0, np.zeros((1, 5), np.int64), x, "max"), gc.ShapeError, "amax"),
    (lambda x: F.index_fill(x, 0, [1], np.ones(2)), gc.ShapeError, "must be a scalar"),
    (lambda x: F.index_copy(x, 0, np.zeros((1, 1), np.int64), x[:1]), gc.ShapeError, "must be 1-d"),
])
def test_refused_forms(call, error, message):
    with pytest.raises(error, match=message):
        gc.compile(call, f32(X)[0])


def test_scatter_reduce_prod_gradient_is_exact_at_zeros():
    """The product of the other factors, never a division by a factor: a group with one zero update
    gives that update the product of the rest and the others 0, a group with two zeros gives all 0,
    a zero in x gives x the updates' product (torch's values; a division gave NaN). The second
    derivative is exact where a group holds at most one zero (as PyTorch's)."""
    x = np.array([2.0, 0.0, 3.0, 5.0])
    src = np.array([0.0, 4.0, 7.0, 0.0, 0.0, 6.0])
    index = np.array([0, 0, 1, 2, 2, 3])
    out, gx, gsrc = gc.compile(lambda x, s: [F.scatter_reduce(x, 0, index, s, "prod"),
                                             *gc.grad(F.sum(F.scatter_reduce(x, 0, index, s, "prod")), [x, s])],
                               x, src)(x, src)
    np.testing.assert_array_equal(out, [0.0, 0.0, 0.0, 30.0])
    np.testing.assert_array_equal(gx, [0.0, 7.0, 0.0, 6.0])
    np.testing.assert_array_equal(gsrc, [8.0, 0.0, 0.0, 0.0, 0.0, 5.0])
    check_grads(lambda x, s: F.scatter_reduce(x, 0, index, s, "prod", include_self=False), [x, src], order=1)
    one_zero = np.array([0.0, 4.0, 7.0, 0.0, 2.0, 6.0])
    check_grads(lambda x, s: F.scatter_reduce(x, 0, index, s, "prod"), [x, one_zero])
