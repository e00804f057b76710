"""Indexing and data movement: forward through onnxruntime against plain numpy indexing and
np.take/concatenate/stack/split/pad/tile, float64 gradient checks (orders 1 and 2), backward
graphs through onnxruntime against each op's numpy Jacobian, and the refused index forms."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ops.indexing import slice_scatter

from ..opcheck import check_forward, check_grads

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 3, 5)).astype(np.float32)
XI = np.arange(60, dtype=np.int64).reshape(4, 3, 5)
MASK2 = np.array([[True, False, True, False, True], [False] * 5, [False, True, False, False, True]])   # (3, 5)
IDX = np.array([[2, -1], [0, 2]])          # a 2-D index array with a negative entry (axis of size 3 or more)

TAKE_ALONG = np.array([[[4, 4]], [[0, -1]], [[1, 1]], [[2, 0]]])   # (4, 1, 2), repeated entries

# (id, index expression) pairs: the same lambda indexes a numpy array (expectation) and a Tensor
GETITEMS = [
    ("int", lambda t: t[1]),
    ("negative_int", lambda t: t[-1, :, -2]),
    ("mixed", lambda t: t[1:-1:2, None, ..., ::-1]),
    ("negative_steps", lambda t: t[::-2, 2:0:-1, -1::-3]),
    ("ellipsis_newaxis", lambda t: t[..., None, 1:4]),
    ("array_first", lambda t: t[IDX, ..., ::-2]),
    ("array_middle", lambda t: t[1:, IDX]),
    ("array_after_int", lambda t: t[:, 0, IDX]),
    ("array_apart_from_int", lambda t: t[0, :, IDX]),
    ("list", lambda t: t[:, [2, 2, 0]]),
    ("two_arrays_adjacent", lambda t: t[:, [0, 2, -1], [1, 1, 4]]),
    ("two_arrays_apart", lambda t: t[[0, 1], :, [1, 2]]),
    ("arrays_broadcast", lambda t: t[np.array([[0], [3]]), 1, [1, -2, 4]]),
    ("three_arrays_repeated", lambda t: t[[0, 0, 3], [1, 1, 2], [0, 0, 4]]),
    ("arrays_with_newaxis", lambda t: t[None, [1, 2], ..., [3, 0]]),
    ("known_mask", lambda t: t[np.array([True, False, True, True])]),
    ("known_2d_mask", lambda t: t[:, MASK2]),
    ("known_mask_list_after_ellipsis", lambda t: t[..., [False, True, False, True, True]]),
]


def _jacobian_vjp(np_fn, x, w):
    """The vjp of a linear numpy function, built from its Jacobian on basis vectors."""
    columns = []
    for k in range(x.size):
        e = np.zeros(x.size, np.float64)
        e[k] = 1
        columns.append(np.asarray(np_fn(e.reshape(x.shape))).ravel())
    return (np.stack(columns, axis=1).T @ w.ravel()).reshape(x.shape)


# -- forward through onnxruntime ------------------------------------------------------------------
@pytest.mark.parametrize("index", [g for _, g in GETITEMS], ids=[n for n, _ in GETITEMS])
def test_getitem_forward(index):
    check_forward(index, [X], index(X))


def test_getitem_int64_and_tensor_index():
    check_forward(lambda x: x[1, ::-1, 1:4:2], [XI], XI[1, ::-1, 1:4:2])
    idx = np.array([3, -4, 3], np.int64)
    check_forward(lambda x, i: x[..., i], [X, idx], X[..., idx])


def test_take_forward():
    idx = np.array([[2, -1], [0, 0]], np.int64)
    for axis in (0, 1, -1, 2):
        check_forward(lambda x: F.take(x, idx, axis=axis), [X], np.take(X, idx, axis=axis))  # noqa: B023  (traced at once)
    check_forward(lambda x: F.take(x, idx * 29), [X], np.take(X, idx * 29))
    check_forward(lambda x: F.take(x, 2, axis=1), [X], np.take(X, 2, axis=1))
    check_forward(lambda x, i: F.take(x, i, axis=0), [XI, np.array([3, 1, 3], np.int32)],
                  np.take(XI, [3, 1, 3], axis=0))


def test_embedding_forward():
    w = RNG.standard_normal((6, 3)).astype(np.float32)
    ids = np.array([[5, 0, 5], [1, 2, 3]], np.int64)
    check_forward(F.embedding, [ids, w], w[ids])


def test_scatter_add_forward():
    base = RNG.standard_normal((2, 4)).astype(np.float32)
    updates = RNG.standard_normal((2, 5)).astype(np.float32)
    idx = np.array([1, -1, 1, 0, 3])
    expected = base.copy()
    for j, i in enumerate(idx):
        expected[:, i] += updates[:, j]
    check_forward(lambda b, u: F.scatter_add(b, idx, u, axis=-1), [base, updates], expected)


def test_take_along_axis_forward():
    # (4, 1, 4): broadcasts against X on axis 1
    idx = np.array([[[4, -1, 0, 4]], [[0, 1, 1, -5]], [[2, 2, 3, 3]], [[1, 0, 0, 1]]])
    check_forward(lambda x: F.take_along_axis(x, idx, axis=-1), [X],
                  np.take_along_axis(X, np.broadcast_to(idx, (4, 3, 4)), axis=-1))
    check_forward(lambda x: F.take_along_axis(x, idx % 3, axis=1), [XI[:, :, :4]],
                  np.take_along_axis(XI[:, :, :4], idx % 3, axis=1))
    flat_idx = np.array([59, 0, 0])
    check_forward(lambda x: F.take_along_axis(x, flat_idx, axis=None), [X], np.take_along_axis(X.ravel(), flat_idx, 0))


def test_scatter_add_along_axis_forward():
    base = RNG.standard_normal((2, 4)).astype(np.float32)
    updates = RNG.standard_normal((2, 3)).astype(np.float32)
    idx = np.array([[1, -1, 1], [0, 0, 2]])
    expected = base.copy()
    for i in range(2):
        for j in range(3):
            expected[i, idx[i, j]] += updates[i, j]
    check_forward(lambda b, u: F.scatter_add_along_axis(b, idx, u, axis=-1), [base, updates], expected)


def test_concat_stack_forward():
    a, b = X[:, :2], X[:, 1:]
    check_forward(lambda a, b: F.concat([a, b, a], axis=1), [a, b], np.concatenate([a, b, a], axis=1))
    check_forward(lambda a, b: F.concat([a, b], axis=-2), [a, b], np.concatenate([a, b], axis=-2))
    check_forward(lambda a, b: F.concat([a, b]), [XI, XI[:1]], np.concatenate([XI, XI[:1]]))
    for axis in (0, 2, -1):
        check_forward(lambda a, b: F.stack([a, b, a], axis=axis), [X, X * 2], np.stack([X, X * 2, X], axis=axis))  # noqa: B023  (traced at once)


def test_split_forward():
    check_forward(lambda x: F.split(x, 5, axis=-1), [X], np.split(X, 5, axis=-1))
    check_forward(lambda x: F.split(x, [1, 3, 9]), [X], np.split(X, [1, 3, 9]))
    check_forward(lambda x: F.split(x, [2], axis=1), [X], np.split(X, [2], axis=1))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_forward(mode):
    for pads in (1, (2, 0), ((0, 1), (2, 1), (3, 0))):
        kwargs = {"constant_values": 1.5} if mode == "constant" else {}
        extra = {"value": 1.5} if mode == "constant" else {}
        check_forward(lambda x: F.pad(x, pads, mode, **extra), [X], np.pad(X, pads, mode, **kwargs))  # noqa: B023  (traced at once)
    check_forward(lambda x: F.pad(x, ((1, 0), (0, 2), (0, 0)), mode), [XI], np.pad(XI, ((1, 0), (0, 2), (0, 0)), mode))


def test_tile_forward():
    for reps in (2, (2, 1, 3), (3, 1), (2, 1, 1, 2)):
        check_forward(lambda x: F.tile(x, reps), [X], np.tile(X, reps))  # noqa: B023  (traced at once)


@pytest.mark.parametrize("bounds", [
    ((1,), (0,), (5,), (1,)),              # step 1: a pad
    ((1,), (1,), (5,), (3,)),              # step 3: interleave, then pad to length
    ((2,), (0,), (7,), (3,)),              # step 3 ending exactly at the end: interleave, then trim
    ((0, 2), (3, 4), (-1, 0), (-2, -3)),   # negative steps on two axes
])
def test_slice_scatter_forward(bounds):
    shape = (4, 5, 7)
    index = [slice(None)] * 3
    for axis, start, end, step in zip(*bounds):
        index[axis] = slice(start, end if end >= 0 else None, step)
    target = np.zeros(shape, np.float32)
    g = RNG.standard_normal(target[tuple(index)].shape).astype(np.float32)
    target[tuple(index)] = g
    check_forward(lambda g: slice_scatter(g, shape, *bounds), [g], target)


def test_symbolic_batch_forward():
    def fn(x):
        return (x[:, 1:], x[..., None], x[:, ::-2], x[:, 3], F.take(x, [0, 4, 4], axis=1),
                F.pad(x, ((0, 0), (1, 2)), "reflect"), F.concat([x, x[:, :2]], axis=1), F.tile(x, (2, 1)))
    for batch in (2, 3):
        x = RNG.standard_normal((batch, 5)).astype(np.float32)
        expected = [x[:, 1:], x[..., None], x[:, ::-2], x[:, 3], np.take(x, [0, 4, 4], axis=1),
                    np.pad(x, ((0, 0), (1, 2)), "reflect"), np.concatenate([x, x[:, :2]], axis=1), np.tile(x, (2, 1))]
        check_forward(fn, [x], expected, specs=[gc.spec(("batch", 5))])


# -- backward graphs through onnxruntime (slice_scatter, scatter_add and the pad/tile adjoints) -----
LINEAR = [
    ("getitem", lambda t: t[1:, ::-2, None, 3], None),
    ("getitem_array", lambda t: t[:, [2, 0, 2], 1::3], None),
    ("take", lambda t: F.take(t, [4, -1, 0, 4], axis=-1), lambda a: np.take(a, [4, -1, 0, 4], axis=-1)),
    ("concat", lambda t: F.concat([t, t[:, 1:]], axis=1), lambda a: np.concatenate([a, a[:, 1:]], axis=1)),
    ("pad_constant", lambda t: F.pad(t, ((1, 0), (0, 0), (2, 1))), lambda a: np.pad(a, ((1, 0), (0, 0), (2, 1)))),
    ("pad_reflect", lambda t: F.pad(t, ((0, 0), (2, 1), (1, 3)), "reflect"),
     lambda a: np.pad(a, ((0, 0), (2, 1), (1, 3)), "reflect")),
    ("pad_edge", lambda t: F.pad(t, ((1, 2), (0, 0), (3, 0)), "edge"),
     lambda a: np.pad(a, ((1, 2), (0, 0), (3, 0)), "edge")),
    ("pad_wrap", lambda t: F.pad(t, ((1, 2), (0, 0), (7, 1)), "wrap"),     # more than the axis holds
     lambda a: np.pad(a, ((1, 2), (0, 0), (7, 1)), "wrap")),
    ("tile", lambda t: F.tile(t, (2, 1, 2)), lambda a: np.tile(a, (2, 1, 2))),
    ("take_along_axis", lambda t: F.take_along_axis(t, TAKE_ALONG, axis=2),
     lambda a: np.take_along_axis(a, np.broadcast_to(TAKE_ALONG, (4, 3, 2)), axis=2)),
]


@pytest.mark.parametrize("fn,np_fn", [(f, n or f) for _, f, n in LINEAR], ids=[i for i, _, _ in LINEAR])
def test_backward_forward(fn, np_fn):
    w = RNG.standard_normal(np.shape(np_fn(X))).astype(np.float32)
    check_forward(lambda x: gc.grad(F.sum(fn(x) * w), [x])[0], [X], _jacobian_vjp(np_fn, X, w), atol=1e-5)


def test_symbolic_batch_backward():
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    w = RNG.standard_normal((1, 4)).astype(np.float32)

    def fn(x):
        y = [x[:, ::-2] * w[:, :3], F.take(x, [1, 1, -1, 0], axis=1) * w, F.pad(x, ((0, 0), (1, 0)), "edge")[:, :4]]
        return gc.grad(F.add_n([F.sum(t) for t in y]), [x])[0]

    # the gradient of sum(y) is the sum of each linear term's vjp of its weight
    expected = (_jacobian_vjp(lambda a: a[:, ::-2], x, np.broadcast_to(w[:, :3], (3, 3)))
                + _jacobian_vjp(lambda a: np.take(a, [1, 1, -1, 0], axis=1), x, np.broadcast_to(w, (3, 4)))
                + _jacobian_vjp(lambda a: np.pad(a, ((0, 0), (1, 0)), "edge")[:, :4], x, np.ones((3, 4))))
    check_forward(fn, [x], expected, specs=[gc.spec(("batch", 5))], atol=1e-5)


# -- gradient checks (float64, reference evaluator) ------------------------------------------------
@pytest.mark.parametrize("index", [g for _, g in GETITEMS], ids=[n for n, _ in GETITEMS])
def test_getitem_grads(index):
    check_grads(lambda x: index(x) * index(x), [X])


def test_getitem_tensor_index_grads():
    check_grads(lambda x, i: F.sin(x[:, i]), [X, np.array([2, -1, 2])])


def test_getitem_several_tensor_indices():
    """Run-time index arrays (negative ones too) broadcast together, as numpy's advanced indexing."""
    i, j = np.array([[1], [-1]], np.int64), np.array([0, 2, -3], np.int64)
    check_forward(lambda x, i, j: x[i, :, j], [X, i, j], X[i, :, j])
    check_forward(lambda x, i, j: x[1:, i, j], [X, i, j], X[1:, i, j])
    check_grads(lambda x, i, j: F.sin(x[i, 1:, j]), [X, i, j])


def test_slice_scatter_grads():
    shape = (3, 7)
    g = RNG.standard_normal((3, 4))
    check_grads(lambda g: slice_scatter(g, shape, (0, 1), (2, 6), (-1, -1), (-1, -2)) ** 2, [g])


def test_take_embedding_grads():
    check_grads(lambda x: F.take(x, [[1, 1], [-1, 1]], axis=1) ** 2, [X])
    check_grads(lambda x: F.sin(F.take(x, [0, 7, 7, 59])), [X])
    check_grads(lambda w: F.embedding(np.array([[0, 2], [2, 2]]), w) ** 2, [X[0]])


def test_take_of_evenly_stepping_constant_indices_grads():
    # a select's scalar, a range, a negative step, a negative index: the gradient is a slice's
    check_grads(lambda x: F.sin(F.take(x, np.int64(2), axis=1)), [X])
    check_grads(lambda x: F.take(x, [1, 2, 3], axis=2) ** 2, [X])
    check_grads(lambda x: F.sin(F.take(x, [4, 2, 0], axis=2)), [X])
    check_grads(lambda x: F.take(x, [-1], axis=0) ** 2, [X])


def test_a_select_gradient_places_the_slice_without_a_scatter():
    # q, k and v selected from one tensor: their gradients are Pads, which simplify joins into one
    # Concat; a scatter's index tensor, computed from constants, was folded by ONNX Runtime into a
    # constant of the gradient's size per select
    x = RNG.standard_normal((3, 2, 4)).astype(np.float32)

    def grad(x):
        q, k, v = (F.take(x, np.int64(i), axis=0) for i in range(3))
        return gc.grad(F.sum(F.sin(q) * k + v * v), [x])[0]
    cf = gc.compile(grad, x, provider="cpu")
    ops = [n.op_type for n in cf.model.graph.node]
    assert "ScatterElements" not in ops and "If" not in ops and "Concat" in ops
    q, k, v = x
    np.testing.assert_allclose(cf(x), np.stack([np.cos(q) * k, np.sin(q), 2 * v]), rtol=1e-6)
    # repeated or uneven constant indices keep the scatter (the duplicates add)
    cf = gc.compile(lambda x: gc.grad(F.sum(F.take(x, [1, 1, 2], axis=0)), [x])[0], x, provider="cpu")
    np.testing.assert_allclose(cf(x), np.broadcast_to(np.array([0, 2, 1], np.float32)[:, None, None], x.shape))


def test_scatter_add_grads():
    base = RNG.standard_normal((2, 4))
    check_grads(lambda b, u: F.scatter_add(b, [3, -1, 0, 3], u, axis=1) ** 2, [base, RNG.standard_normal((2, 4))])
    idx = np.array([[3, -1, 0], [0, 0, 1]])
    check_grads(lambda b, u: F.scatter_add(b, idx, u * u, axis=-1), [base, RNG.standard_normal((2, 2, 3))])
    check_grads(lambda b, u: F.sin(F.scatter_add(b, idx.T, u, axis=0)), [base.T, RNG.standard_normal((3, 2, 2))])


def test_take_along_axis_grads():
    check_grads(lambda x: F.take_along_axis(x, TAKE_ALONG, axis=-1) ** 2, [X])
    check_grads(lambda x: F.sin(F.take_along_axis(x, TAKE_ALONG.reshape(2, 4) % 3, axis=0)), [X[0, :, :4]])


def test_scatter_add_along_axis_grads():
    idx = np.array([[3, -1, 3], [0, 0, 1]])
    check_grads(lambda b, u: F.scatter_add_along_axis(b, idx, u, axis=1) ** 2,
                [RNG.standard_normal((2, 4)), RNG.standard_normal((2, 3))])


def test_concat_stack_split_grads():
    a, b = X[:, :2], X[:, 1:]
    check_grads(lambda a, b: F.concat([a, b * b, a], axis=-2) ** 2, [a, b])
    check_grads(lambda a, b: F.stack([a, b], axis=-1) ** 3, [a[:, :, :3], b[:, :, :3]])
    check_grads(lambda x: [p * p for p in F.split(x, [1, 4], axis=2)] + [F.split(x, 3, axis=1)[2] ** 3], [X])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_grads(mode):
    extra = {"value": 0.5} if mode == "constant" else {}
    check_grads(lambda x: F.pad(x, ((1, 0), (2, 1), (0, 3)), mode, **extra) ** 2, [X])


def test_tile_grads():
    check_grads(lambda x: F.tile(x, (2, 1, 1, 3)) ** 2, [X])


# -- refused index forms and shape errors ------------------------------------------------------------
def test_errors():
    with pytest.raises(gc.UnsupportedError, match="boolean mask"):
        trace(lambda x: x[x > 0], [X])
    with pytest.raises(gc.UnsupportedError, match="boolean mask"):
        trace(lambda x, m: x[m], [X, np.array([True, False, True, False])])      # a run-time mask
    with pytest.raises(gc.ShapeError, match="boolean index of size 3 does not match axis 0 of size 4"):
        trace(lambda x: x[np.array([True, False, True])], [X])
    with pytest.raises(gc.ShapeError, match="index 3 is out of range"):
        trace(lambda x: x[[0, 1], [3, 0]], [X])
    with pytest.raises(gc.ShapeError, match="index 4 is out of range for axis 0 of size 4"):
        trace(lambda x: x[4], [X])
    with pytest.raises(gc.ShapeError, match="index -4 is out of range for axis 1 of size 3"):
        trace(lambda x: x[:, -4], [X])
    with pytest.raises(gc.ShapeError, match="too many indices"):
        trace(lambda x: x[0, 0, 0, 0], [X])
    with pytest.raises(gc.ShapeError, match=r"\(4, 3, 5\) and \(4, 2, 5\)"):
        trace(lambda a, b: F.concat([a, b], axis=0), [X, X[:, 1:]])
    with pytest.raises(gc.ShapeError, match="out of range"):
        trace(lambda x: F.take(x, [0, 5], axis=0), [X])
    with pytest.raises(gc.ShapeError, match="do not divide"):
        trace(lambda x: F.split(x, 2, axis=2), [X])
    with pytest.raises(gc.ShapeError, match="reflect padding"):
        trace(lambda x: F.pad(x, 3, "reflect"), [X])
    with pytest.raises(gc.UnsupportedError, match="symbolic"):
        trace(lambda x: x[1:], [gc.spec(("batch", 5))])


# -- edge cases: empty axes and small integer index dtypes -------------------------------------------
def test_take_gradient_on_an_empty_axis_emits_no_modulo_by_zero():
    e = np.ones((3, 0), np.float32)
    for idx in (np.zeros((0,), np.int64), np.zeros((2, 0), np.int64)):
        check_forward(lambda e, i: gc.grad(F.sum(F.take(e, i, axis=1)), [e])[0], [e, idx], np.zeros_like(e))
    check_grads(lambda e: F.take(e, np.zeros((0,), np.int64), axis=1), [e])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_and_take_at_an_empty_batch(mode):
    """The gradients of reflect/edge/wrap padding and of take are scatter_adds, whose update rows
    were reshaped to a target holding a 0 (an empty batch), which ONNX's Reshape reads as "copy
    that dim of the input" unless told otherwise: refused at a static batch of 0. Values and
    gradients at a static batch of 0, and at a symbolic batch given 0 and 2."""
    pads = ((0, 0), (0, 0), (1, 2), (2, 1))
    idx = np.array([3, 0, 3])

    def fn(x):
        y = F.pad(x, pads, mode)
        return y, gc.grad(F.sum(y ** 2), [x])[0], gc.grad(F.sum(F.take(x, idx, axis=-1) ** 2), [x])[0]

    for n in (0, 2):
        x = RNG.standard_normal((n, 2, 3, 4))
        counts = np.zeros(4)
        np.add.at(counts, idx, 1)
        grad_pad = evaluate(trace(lambda x: gc.grad(F.sum(F.pad(x, pads, mode) ** 2), [x])[0], [x]).graph, [x])[0]
        expected = [np.pad(x, pads, mode), grad_pad, 2 * x * counts]
        if not n:
            check_forward(fn, [x], expected)
        check_forward(fn, [x], expected, specs=[gc.spec(("batch", 2, 3, 4), np.float64)])


def test_strided_slice_gradient_with_an_empty_axis():
    """A strided slice's gradient spreads it with a Reshape whose target holds the empty axis's 0."""
    x = np.zeros((5, 0, 3))
    check_forward(lambda x: gc.grad(F.sum(x[::2, :, 1:] ** 2), [x])[0], [x], x)
    check_grads(lambda x: x[::2, :, 1:] ** 2, [x])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32])
def test_small_and_unsigned_integer_indices_give_a_valid_model(dtype):
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([4, 0, 4], dtype)
    along = np.array([[1, 2], [0, 0], [2, 1], [1, 1], [0, 2]], dtype)
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    check_forward(lambda x, i: (F.take(x, i, axis=0), x[i], F.embedding(i, x)), [x, idx],
                  [x[idx.astype(np.int64)]] * 3)
    check_forward(lambda x, i: F.take_along_axis(x, i, axis=1), [x, along], np.take_along_axis(x, along, axis=1))
    expected = np.zeros_like(x)
    np.add.at(expected, idx.astype(np.int64), w)
    check_forward(lambda x, i: gc.grad(F.sum(F.take(x, i, axis=0) * w), [x])[0], [x, idx], expected)
    g2 = np.zeros_like(x)
    np.add.at(g2, (np.arange(5)[:, None], along.astype(np.int64)), 1.0)
    check_forward(lambda x, i: gc.grad(F.sum(F.take_along_axis(x, i, axis=1)), [x])[0], [x, along], g2)


def test_scatter_add_with_many_repeated_indices_is_exact_on_every_call():
    """Rows added into few destinations, enough of them that onnxruntime runs a scatter on several
    threads (its ScatterND(reduction=add) then lost updates that two threads added into one row
    at once, differently at every call): the sum of each destination is np.add.at's, in float64
    and integers (each element added in order), along a middle axis, from a 2-D index array."""
    rng = np.random.default_rng(3)
    idx = rng.integers(-400, 400, 20_000)
    x = rng.standard_normal((400, 64))
    upd = rng.standard_normal((20_000, 64))
    upd[7, 5] = np.inf
    expected = np.zeros_like(x)
    np.add.at(expected, idx, upd)
    grad = gc.compile(lambda x, i, u: gc.grad(F.sum(F.take(x, i, axis=0) * u), [x])[0], x, idx, upd)
    added = gc.compile(lambda x, i, u: F.scatter_add(x, i, u, axis=1), np.zeros((3, 400, 8), np.int64),
                       idx.reshape(100, 200), np.ones((3, 100, 200, 8), np.int64))
    counts = np.zeros((3, 400, 8), np.int64)
    np.add.at(counts, (slice(None), idx.reshape(100, 200)), 1)
    for _ in range(3):
        np.testing.assert_allclose(grad(x, idx, upd), expected, rtol=1e-13, atol=1e-12)
        np.testing.assert_array_equal(added(np.zeros((3, 400, 8), np.int64), idx.reshape(100, 200),
                                            np.ones((3, 100, 200, 8), np.int64)), counts)
    assert np.isposinf(grad(x, idx, upd)[idx[7], 5])


def test_large_float32_scatter_add_sums_rows_by_sorted_index():
    """A float32 scatter of many elements sums each index's rows from a float64 running sum over
    the rows sorted by index (one ScatterND at distinct indices); where an update is infinite or
    NaN it adds element by element instead, so those stay where np.add.at puts them. Also for
    an empty and a one-row symbolic batch, and two scatters by one index share one sort."""
    rng = np.random.default_rng(4)
    idx = rng.integers(-300, 300, 30_000)
    x = rng.standard_normal((300, 2, 16)).astype(np.float32)
    upd = rng.standard_normal((30_000, 2, 16)).astype(np.float32)
    fn = gc.compile(lambda x, i, u: (F.scatter_add(x, i, u), F.scatter_add(x, i, 2 * u)), x, idx, upd)
    ops = [n.op_type for n in fn.model.graph.node]
    assert ops.count("TopK") == 1 and ops.count("If") == 2
    for u in (upd, np.where(np.arange(30_000)[:, None, None] == 11, np.float32(-np.inf), upd),
              np.where(np.arange(30_000)[:, None, None] == 12, np.float32(np.nan), upd)):
        expected = x.astype(np.float64)
        np.add.at(expected, idx, u.astype(np.float64))
        once, twice = fn(x, idx, u)
        for got in (once, fn(x, idx, u)[0]):
            assert np.array_equal(np.isnan(got), np.isnan(expected)) and np.array_equal(got == -np.inf,
                                                                                       expected == -np.inf)
            np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(expected.astype(np.float32)),
                                       rtol=1e-5, atol=1e-5)
        np.add.at(expected, idx, u.astype(np.float64))
        np.testing.assert_allclose(np.nan_to_num(twice), np.nan_to_num(expected.astype(np.float32)),
                                   rtol=1e-5, atol=1e-5)
    sym = gc.compile(lambda x, i, u: F.scatter_add(x, i, u), x, gc.spec(("e",), np.int64),
                     gc.spec(("e", 2, 16), np.float32))
    for n in (0, 1):
        expected = x.copy()
        np.add.at(expected, idx[:n], upd[:n])
        np.testing.assert_allclose(sym(x, idx[:n], upd[:n]), expected, rtol=1e-6)


def test_a_large_gather_gradient_places_the_sorted_sums_into_zeros():
    """A gather's gradient adds into zeros: the sums by index are placed by one Gather over the
    sums and a row of zeros (no ScatterND copying the zeros first), along the first and a middle
    axis, with an infinite update (added element by element instead), an empty and a one-index
    symbolic count, and a symbolic table size."""
    rng = np.random.default_rng(6)
    idx = rng.integers(-500, 500, 6_000)
    table = rng.standard_normal((500, 3, 16)).astype(np.float32)
    small = rng.standard_normal((4, 3, 16)).astype(np.float32)
    w = rng.standard_normal((6_000, 3, 16)).astype(np.float32)

    def grads(t, s, i, w):
        return (gc.grad(F.sum(F.take(t, i, axis=0) * w), [t])[0],
                gc.grad(F.sum(F.take(s, F.remainder(i, 3), axis=1) ** 2), [s])[0])

    fn = gc.compile(grads, table, small, idx, w)
    ops = [n.op_type for n in fn.model.graph.node]
    branches = [g for n in fn.model.graph.node if n.op_type == "If" for g in (n.attribute[0].g, n.attribute[1].g)]
    assert "ScatterND" not in ops + [n.op_type for b in branches for n in b.node] and ops.count("If") == 2
    sym = gc.compile(lambda t, i, w: gc.grad(F.sum(F.take(t, i, axis=0) * w), [t])[0],
                     gc.spec(("rows", 3, 16), np.float32), gc.spec(("e",), np.int64), gc.spec(("e", 3, 16), np.float32))
    second = np.zeros((4, 3, 16), np.float64)
    np.add.at(second, (slice(None), idx % 3), 2 * np.take(small, idx % 3, axis=1).astype(np.float64))
    for u in (w, np.where(np.arange(6_000)[:, None, None] == 9, np.float32(np.inf), w)):
        first = np.zeros((500, 3, 16), np.float64)
        np.add.at(first, idx, u.astype(np.float64))
        got_first, got_second = fn(table, small, idx, u)
        assert np.array_equal(np.isinf(got_first), np.isinf(first))
        np.testing.assert_allclose(np.where(np.isinf(first), 0, got_first), np.where(np.isinf(first), 0, first),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_second, second, rtol=1e-5, atol=1e-3)
    for n in (0, 1):
        expected = np.zeros((7, 3, 16), np.float32)
        np.add.at(expected, idx[:n] % 7, w[:n])
        np.testing.assert_array_equal(sym(table[:7], idx[:n] % 7, w[:n]), expected)


@pytest.mark.parametrize("count", [20, 20_000])
def test_float16_scatter_add_adds_in_float32(count):
    """onnxruntime's scatters add no float16 (both refused it): the sum is float32's, rounded once."""
    rng = np.random.default_rng(5)
    idx, x = rng.integers(0, 100, count), np.ones((100, 8), np.float16)
    upd = rng.standard_normal((count, 8)).astype(np.float16)
    expected = x.astype(np.float32)
    np.add.at(expected, idx, upd.astype(np.float32))
    check_forward(lambda x, i, u: F.scatter_add(x, i, u), [x, idx, upd], expected.astype(np.float16),
                  rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_unsigned_constant_indices_give_a_valid_model(dtype):
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([1, 4], dtype)
    check_forward(lambda x: (F.take(x, idx, axis=0), gc.grad(F.sum(x[idx] ** 2), [x])[0]), [x],
                  [x[[1, 4]], np.where(np.isin(np.arange(5), [1, 4])[:, None], 2 * x, 0)])


def test_pad_takes_torch_mode_names():
    """torch's "circular" and "replicate" are numpy's "wrap" and "edge"; wrap may exceed the axis."""
    check_forward(lambda x: (F.pad(x, ((0, 0), (2, 1), (1, 6)), "circular"), F.pad(x, 1, "replicate")), [X],
                  [np.pad(X, ((0, 0), (2, 1), (1, 6)), "wrap"), np.pad(X, 1, "edge")])
    with pytest.raises(gc.ShapeError, match="wrap padding of an empty axis"):
        gc.compile(lambda x: F.pad(x, 1, "circular"), np.zeros((2, 0), np.float32))
    with pytest.raises(gc.UnsupportedError, match="mode 'symmetric' is not supported"):
        gc.compile(lambda x: F.pad(x, 1, "symmetric"), X)
