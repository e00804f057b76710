"""slice_scatter, select_scatter, diagonal_scatter, diag_embed and masked_scatter: forward on ONNX
Runtime against numpy written from PyTorch's definitions (negative axes and indices, offsets,
either order of the diagonal's axes, broadcast and run-time masks, empty views), and float64
gradient checks to second order (input gets the gradient off the view, src on it)."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def np_slice_scatter(x, src, axis, start, end, step):
    out = x.copy()
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, end, step)
    out[tuple(index)] = src
    return out


def test_slice_and_select_scatter():
    x = rand(3, 5, 4, seed=1)
    src = rand(3, 2, 4, seed=2)
    check_forward(lambda x, s: (F.slice_scatter(x, s, 1, 1, None, 2), F.slice_scatter(x, s, -2, -4, 3),
                                F.select_scatter(x, s[:, 0], 1, -1), F.slice_scatter(x, s[:, :0], 1, 3, 3)), [x, src],
                  [np_slice_scatter(x, src, 1, 1, None, 2), np_slice_scatter(x, src, 1, -4, 3, 1),
                   np_slice_scatter(x, src[:, :1], 1, -1, None, 1), x])
    check_grads(lambda x, s: (F.slice_scatter(x, s, 1, 0, 4, 3), F.select_scatter(x, s[:, 1], 1, 2)), [x, src])
    with pytest.raises(gc.ShapeError, match="slice_scatter: src .* must have the slice's shape"):
        gc.compile(lambda x, s: F.slice_scatter(x, s, 1, 0, 3), x, src)
    with pytest.raises(gc.ShapeError, match="select_scatter: index 5 is out of range"):
        gc.compile(lambda x: F.select_scatter(x, x[:, 0], 1, 5), x)


@pytest.mark.parametrize("start, end", [(0, 2), (2, 5), (4, 6), (0, 6), (3, 3)])
def test_a_contiguous_slice_scatter_joins_the_pieces(start, end):
    # input's parts either side of the slice joined with src: no select over a placed src (three
    # passes over the tensor on ONNX Runtime, its Where on one core), and no Pad
    x, src = rand(2, 6, 3, seed=11), rand(2, end - start, 3, seed=12)
    want = np_slice_scatter(x, src, 1, start, end, 1)
    check_forward(lambda x, s: F.slice_scatter(x, s, 1, start, end), [x, src], want)
    ops = {n.op_type for n in gc.compile(lambda x, s: F.slice_scatter(x, s, 1, start, end), x, src).model.graph.node}
    assert not ops & {"Where", "Pad", "ScatterND"}
    if end > start:
        check_grads(lambda x, s: F.slice_scatter(x, s, 1, start, end), [x, src])


def test_a_contiguous_slice_scatter_keeps_every_edge_value():
    # inf and NaN on either side of the slice and in src stay where they are; -0.0 keeps its sign
    x = np.array([[np.inf, -0.0, np.nan, 1.0, -np.inf]])
    src = np.array([[np.nan, -0.0]])
    check_values(lambda x, s: F.slice_scatter(x, s, 1, 2, 4), [x, src], np_slice_scatter(x, src, 1, 2, 4, 1))
    got = gc.compile(lambda x, s: F.slice_scatter(x, s, 1, 2, 4), x, src)(x, src)
    assert np.signbit(got[0, 1]) and np.signbit(got[0, 3])


@pytest.mark.parametrize("offset, axis1, axis2", [(0, 0, 1), (1, 1, 2), (-2, 2, 0), (0, -1, -3), (5, 0, 2)])
def test_diagonal_scatter(offset, axis1, axis2):
    x = rand(3, 4, 5, seed=3)
    src = rand(*np.diagonal(x, offset, axis1, axis2).shape, seed=4)
    a1, a2 = axis1 % 3, axis2 % 3
    rows = np.arange(max(0, -offset), max(0, min(x.shape[a1], x.shape[a2] - offset)))
    out = x.copy()
    np.moveaxis(out, [a1, a2], [-2, -1])[..., rows, rows + offset] = src         # numpy.diagonal's entries
    check_forward(lambda x, s: F.diagonal_scatter(x, s, offset, axis1, axis2), [x, src], out)
    if src.size:
        check_grads(lambda x, s: F.diagonal_scatter(x, s, offset, axis1, axis2), [x, src])


@pytest.mark.parametrize("offset, dim1, dim2", [(0, -2, -1), (1, 0, 2), (-1, 2, 0)])
def test_diag_embed(offset, dim1, dim2):
    v = rand(2, 3, seed=5)
    planes = np.stack([np.diag(row, offset) for row in v])
    check_forward(lambda v: F.diag_embed(v, offset, dim1, dim2), [v], np.moveaxis(planes, [1, 2], [dim1 % 3, dim2 % 3]))
    check_grads(lambda v: F.diag_embed(v, offset, dim1, dim2), [v])


def test_masked_scatter_in_row_major_order():
    x = rand(2, 4, seed=6)
    mask = np.array([True, False, True, True])                       # broadcast over the rows
    source = rand(3, 3, seed=7)
    want = x.copy()
    want[np.broadcast_to(mask, x.shape)] = source.ravel()[:6]
    check_forward(lambda x, m, s: F.masked_scatter(x, m, s), [x, mask, source], want)
    runtime = gc.compile(lambda x, m, s: F.masked_scatter(x, m, s), x, np.zeros((2, 4), bool), source)
    np.testing.assert_array_equal(runtime(x, np.zeros((2, 4), bool), source), x)
    every = np.ones((2, 4), bool)
    np.testing.assert_array_equal(runtime(x, every, source), source.ravel()[:8].reshape(2, 4))
    check_grads(lambda x, s: F.masked_scatter(x, mask, s), [x, source])
    with pytest.raises(gc.ShapeError, match="masked_scatter: mask must be boolean"):
        gc.compile(lambda x: F.masked_scatter(x, x, x), x)


def test_vmap_batches_the_view_scatters():
    x, src, mask = rand(3, 4, 5, seed=8), rand(3, 4, 2, seed=9), np.random.default_rng(10).random((3, 4, 5)) > 0.5

    def fn(x, src, mask):
        return (F.slice_scatter(x, src, 1, 0, 4, 2), F.diagonal_scatter(x, src[:, 0], 0, 1, 0)[:2],
                F.diag_embed(src), F.masked_scatter(x, mask, src * 3),
                *gc.grad(F.sum(F.masked_scatter(x, mask, src) ** 2) + F.sum(F.diag_embed(src) ** 3), [x, src]))
    batched = gc.compile(gc.vmap(fn), x, src, mask)(x, src, mask)
    single = gc.compile(fn, x[0], src[0], mask[0])
    for i in range(3):
        for b, s in zip(batched, single(x[i], src[i], mask[i])):
            np.testing.assert_allclose(b[i], s, rtol=1e-12)
