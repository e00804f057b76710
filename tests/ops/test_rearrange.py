"""flip, roll, rot90, moveaxis/movedim, unflatten, the numpy stacks, unbind and repeat_interleave:
forward through onnxruntime against numpy's functions of the same name (torch's where numpy has
none), float64 gradient checks at orders 1 and 2, and the edges (size-0 and size-1 axes,
negative axes and shifts, shifts longer than the axis, zero repeats)."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)

CASES = [   # id, gcompile call, numpy call (the same lambda where the names agree)
    ("flip_all", lambda t: F.flip(t), np.flip),
    ("flip_axis", lambda t: F.flip(t, -1), lambda a: np.flip(a, -1)),
    ("flip_axes", lambda t: F.flip(t, (0, 2)), lambda a: np.flip(a, (0, 2))),
    ("roll_flat", lambda t: F.roll(t, 5), lambda a: np.roll(a, 5)),
    ("roll_negative", lambda t: F.roll(t, -1, axis=1), lambda a: np.roll(a, -1, axis=1)),
    ("roll_longer_than_axis", lambda t: F.roll(t, 9, axis=-1), lambda a: np.roll(a, 9, axis=-1)),
    ("roll_axes", lambda t: F.roll(t, (1, -2), axis=(0, 2)), lambda a: np.roll(a, (1, -2), axis=(0, 2))),
    ("roll_one_shift_two_axes", lambda t: F.roll(t, 1, axis=(1, 2)), lambda a: np.roll(a, 1, axis=(1, 2))),
    ("roll_full_turn", lambda t: F.roll(t, 3, axis=1), lambda a: np.roll(a, 3, axis=1)),
    ("rot90", lambda t: F.rot90(t), np.rot90),
    ("rot90_k2", lambda t: F.rot90(t, 2, (1, 2)), lambda a: np.rot90(a, 2, (1, 2))),
    ("rot90_k3", lambda t: F.rot90(t, 3, (2, 0)), lambda a: np.rot90(a, 3, (2, 0))),
    ("rot90_negative_k", lambda t: F.rot90(t, -1, (0, -1)), lambda a: np.rot90(a, -1, (0, -1))),
    ("moveaxis", lambda t: F.moveaxis(t, 0, -1), lambda a: np.moveaxis(a, 0, -1)),
    ("movedim_many", lambda t: F.movedim(t, (0, 1), (2, 0)), lambda a: np.moveaxis(a, (0, 1), (2, 0))),
    ("unflatten", lambda t: F.unflatten(t, -1, (2, -1)), lambda a: a.reshape(2, 3, 2, 2)),
    ("unbind", lambda t: F.unbind(t, 1), lambda a: tuple(a[:, i] for i in range(3))),
    ("repeat_int", lambda t: F.repeat_interleave(t, 2, axis=1), lambda a: np.repeat(a, 2, axis=1)),
    ("repeat_list", lambda t: F.repeat_interleave(t, [0, 2, 1, 3], axis=-1), lambda a: np.repeat(a, [0, 2, 1, 3], -1)),
    ("repeat_flat", lambda t: F.repeat_interleave(t, 2), lambda a: np.repeat(a, 2)),
    ("repeat_zero", lambda t: F.repeat_interleave(t, 0, axis=0), lambda a: np.repeat(a, 0, axis=0)),
    ("numpy_dispatch", lambda t: (np.flip(t, 0), np.roll(t, 1, 2), np.rot90(t), np.moveaxis(t, 1, 0),
                                  np.repeat(t, 2, axis=0)),
     lambda a: (np.flip(a, 0), np.roll(a, 1, 2), np.rot90(a), np.moveaxis(a, 1, 0), np.repeat(a, 2, axis=0))),
]


@pytest.mark.parametrize("gc_fn, np_fn", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_forward_and_gradients_match_numpy(gc_fn, np_fn):
    expected = np_fn(X)
    check_forward(gc_fn, [X], list(expected) if isinstance(expected, tuple) else expected)
    check_grads(gc_fn, [X])


STACK_SHAPES = [[(3,), (3,)], [(), ()], [(2, 3), (2, 1)], [(2, 3, 1), (2, 3, 2)], [(3,), (1, 3)], [(2,), (2, 1)]]


@pytest.mark.parametrize("name", ["hstack", "vstack", "dstack"])
@pytest.mark.parametrize("shapes", STACK_SHAPES, ids=str)
def test_stacks_follow_numpy(name, shapes):
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    try:
        expected = getattr(np, name)(xs)
    except ValueError:
        with pytest.raises(gc.ShapeError):
            gc.compile(lambda *a: getattr(F, name)(a), *xs)
        return
    check_forward(lambda *a: getattr(F, name)(a), xs, expected)
    check_forward(lambda *a: getattr(np, name)(a), xs, expected)    # numpy's function on Tensors
    check_grads(lambda *a: getattr(F, name)(a), xs)


def test_size_zero_and_size_one_axes():
    e = np.zeros((0, 3), np.float32)
    for fn, np_fn in [(lambda t: F.flip(t), np.flip), (lambda t: F.roll(t, 2, 0), lambda a: np.roll(a, 2, 0)),
                      (lambda t: F.roll(t, 2, 1), lambda a: np.roll(a, 2, 1)), (lambda t: F.rot90(t), np.rot90),
                      (lambda t: F.repeat_interleave(t, 3, 0), lambda a: np.repeat(a, 3, 0)),
                      (lambda t: F.repeat_interleave(t, [1, 0, 2], 1), lambda a: np.repeat(a, [1, 0, 2], 1)),
                      (lambda t: F.unflatten(t, 1, (3, 1)), lambda a: a.reshape(0, 3, 1))]:
        check_forward(fn, [e], np_fn(e))
    one = RNG.standard_normal((1, 3)).astype(np.float32)
    check_forward(lambda t: (F.flip(t, 0), F.roll(t, 5, 0)), [one], [one, one])
    parts = []
    gc.compile(lambda t: parts.extend(F.unbind(t, 0)) or t, e)
    assert parts == []


def test_symbolic_axes_are_refused_where_data_moves_along_them():
    with pytest.raises(gc.UnsupportedError, match="flip: axis 0 .* symbolic size 'batch'"):
        gc.compile(lambda t: F.flip(t, 0), gc.spec(("batch", 3)))
    cf = gc.compile(lambda t: (F.flip(t, 1), F.roll(t, 1, 1), F.repeat_interleave(t, 2, 0)), gc.spec(("batch", 3)))
    t = X[0, :, :3]
    got = cf(t)
    np.testing.assert_array_equal(got[0], np.flip(t, 1))
    np.testing.assert_array_equal(got[1], np.roll(t, 1, 1))
    np.testing.assert_array_equal(got[2], np.repeat(t, 2, 0))


@pytest.mark.parametrize("call, error, message", [
    (lambda t: F.rot90(t, 1, (0, 0)), gc.ShapeError, "must differ"),
    (lambda t: F.roll(t, (1, 2), axis=(0, 1, 2)), gc.ShapeError, "2 shifts for 3 axes"),
    (lambda t: F.roll(t, (1, 2)), gc.ShapeError, "one int"),
    (lambda t: F.moveaxis(t, (0, 0), (1, 2)), gc.ShapeError, "repeated axis"),
    (lambda t: F.unflatten(t, 2, (3, -1)), gc.ShapeError, "do not split"),
    (lambda t: F.unflatten(t, 2, (3, 2)), gc.ShapeError, "multiply to 6"),
    (lambda t: F.repeat_interleave(t, [1, 2], 1), gc.ShapeError, "2 repeats for axis 1 of size 3"),
    (lambda t: F.repeat_interleave(t, -1), gc.ShapeError, "non-negative"),
    (lambda t: F.repeat_interleave(t, t[0, 0, 0].astype(np.int64)), gc.UnsupportedError, "known when tracing"),
    (lambda t: F.flip(t, 3), gc.ShapeError, "flip: axis 3 is out of range"),
])
def test_argument_errors(call, error, message):
    with pytest.raises(error, match=message):
        gc.compile(call, X)


# -- column_stack, atleast_nd, meshgrid ------------------------------------------------------------------------
def test_column_stack_and_atleast_nd():
    a, b, c = np.arange(3.0), np.arange(6.0).reshape(3, 2), np.float64(7.0)
    check_forward(lambda a, b: F.column_stack([a, b, a]), [a, b], np.column_stack([a, b, a]))
    check_forward(lambda c: F.column_stack([c]), [c], np.column_stack([c]))
    for fn, np_fn in ((F.atleast_1d, np.atleast_1d), (F.atleast_2d, np.atleast_2d), (F.atleast_3d, np.atleast_3d)):
        check_forward(lambda a, b, c, fn=fn: (*fn(a, b, c), fn(c), *fn([a])), [a, b, c],
                      [*np_fn(a, b, c), np_fn(c), np_fn(a)])
    check_grads(lambda a, b: (F.column_stack([a, b]), F.atleast_3d(b)), [a, b])


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
def test_meshgrid(indexing, sparse):
    x, y, z = np.arange(3.0), np.arange(4.0) * 2, np.array(5.0)
    check_forward(lambda x, y, z: F.meshgrid(x, y, z, indexing=indexing, sparse=sparse), [x, y, z],
                  list(np.meshgrid(x, y, z, indexing=indexing, sparse=sparse)))
    check_forward(lambda x: F.meshgrid(x, indexing=indexing), [x], list(np.meshgrid(x, indexing=indexing)))
    check_grads(lambda x, y: F.meshgrid([x, y], indexing=indexing, sparse=sparse), [x, y])
