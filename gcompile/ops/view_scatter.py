"""Writes into a view, PyTorch's *_scatter functions, without mutation: slice_scatter,
select_scatter, diagonal_scatter, masked_scatter, and diag_embed (a diagonal_scatter into zeros).

Each returns a new tensor: `input` with `src` where the view (a slice, one index, a diagonal, the
True entries of a mask) reads. Compositions: a contiguous slice joins src with input's parts either
side (concat); otherwise the placed src is the adjoint of the view (the strided slice's
slice_scatter, an einsum with a constant diagonal placement, a gather at the mask's running
count), chosen with a where. Either way input gets the gradient off the view and src the view's
part of it, to every order.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from .elementwise import _promote, maximum, minimum, where
from .indexing import concat, slice_axes, take
from .indexing import slice_scatter as _placed
from .linalg import einsum
from .shape import broadcast_to, expand_dims, ravel, reshape, transpose
from .shape_rules import broadcast_shapes, normalize_axis

__all__ = ["diag_embed", "diagonal_scatter", "masked_scatter", "select_scatter", "slice_scatter"]


def _where(what: str) -> str:
    return f"{what} (at {user_location()})"


def _axis(x: Tensor, axis: int, what: str) -> tuple[int, int]:
    try:
        ax = normalize_axis(axis, x.ndim)
    except ShapeError as err:
        raise ShapeError(_where(f"{what}: {err}")) from None
    n = x.shape[ax]
    if not isinstance(n, int):
        raise ShapeError(_where(f"{what}: axis {ax} of {format_shape(x.shape)} must be static"))
    return ax, n


def _along(mask: np.ndarray, ax: int, ndim: int) -> np.ndarray:
    return mask.reshape((-1,) + (1,) * (ndim - ax - 1))


def slice_scatter(input, src, axis: int = 0, start=None, end=None, step: int = 1) -> Tensor:
    """torch.slice_scatter: input with src where input[start:end:step] along `axis` (torch's dim) reads
    (step > 0); src has that slice's shape."""
    x, src = _promote(input, src)
    ax, n = _axis(x, axis, "slice_scatter")
    if step is None or step < 1:
        raise ShapeError(_where(f"slice_scatter: step must be positive, got {step!r}"))
    s, e, st = slice(start, end, step).indices(n)
    want = tuple(len(range(s, e, st)) if i == ax else d for i, d in enumerate(x.shape))
    if src.shape != want:
        raise ShapeError(_where(f"slice_scatter: src {format_shape(src.shape)} must have the slice's shape "
                                f"{format_shape(want)}"))
    if st == 1:
        return _joined(x, src, ax, s, s + want[ax], n)
    chosen = np.zeros(n, bool)
    chosen[s:e:st] = True
    return where(_along(chosen, ax, x.ndim), _placed(src, x.shape, (ax,), (s,), (e,), (st,)), x)


def _joined(x: Tensor, src: Tensor, ax: int, start: int, end: int, n: int) -> Tensor:
    """x with src in place of x[start:end] along `ax`: src between x's parts either side, joined.
    Each value is copied once, where a select over src placed in zeros passes over the whole
    tensor three times, and input's gradient is the output's with src's part cut out (a part that
    input's own slices fill again, as in x[:, 1:] += y, leaves the gradient whole: simplify's
    _rejoined)."""
    if start == end:
        return x
    pieces = ([slice_axes(x, (ax,), (0,), (start,), (1,))] if start > 0 else []) + [src] \
        + ([slice_axes(x, (ax,), (end,), (n,), (1,))] if end < n else [])
    return concat(pieces, ax)


def select_scatter(input, src, axis: int, index: int) -> Tensor:
    """torch.select_scatter: input with src (input's shape without `axis`) at `index` along `axis`."""
    x = as_tensor(input)
    ax, n = _axis(x, axis, "select_scatter")
    if not -n <= index < n:
        raise ShapeError(_where(f"select_scatter: index {index} is out of range for axis {ax} of size {n}"))
    index %= n
    src = as_tensor(src)
    return slice_scatter(x, expand_dims(src, ax) if src.ndim == x.ndim - 1 else src, ax, index, index + 1)


def _diagonal_places(n: int, m: int, offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows and columns of the diagonal `offset` of an (n, m) plane, and the (k, n, m) placement."""
    rows = np.arange(max(0, -offset), max(0, min(n, m - offset)))
    cols = rows + offset
    place = np.zeros((len(rows), n, m))
    place[np.arange(len(rows)), rows, cols] = 1
    return rows, cols, place


def diagonal_scatter(input, src, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """torch.diagonal_scatter: input with src on the diagonal `offset` of its (axis1, axis2) planes
    (torch's dim1, dim2); src has the shape of that diagonal (numpy.diagonal's: the other axes, then
    the diagonal's)."""
    x, src = _promote(input, src)
    a, n = _axis(x, axis1, "diagonal_scatter")
    b, m = _axis(x, axis2, "diagonal_scatter")
    if a == b:
        raise ShapeError(_where(f"diagonal_scatter: axis1 and axis2 must differ, got {axis1} and {axis2}"))
    rows, cols, place = _diagonal_places(n, m, offset)
    rest = [i for i in range(x.ndim) if i not in (a, b)]
    want = tuple(x.shape[i] for i in rest) + (len(rows),)
    if src.shape != want:
        raise ShapeError(_where(f"diagonal_scatter: src {format_shape(src.shape)} must have the diagonal's shape "
                                f"{format_shape(want)}"))
    planes = einsum("...k,knm->...nm", src, place.astype(src.dtype))        # (rest..., n, m)
    others = iter(range(len(rest)))
    planes = transpose(planes, [len(rest) if i == a else len(rest) + 1 if i == b else next(others)
                                for i in range(x.ndim)])
    on = np.zeros((n, m), bool)
    on[rows, cols] = True
    mask = on.reshape([n if i == a else m if i == b else 1 for i in range(x.ndim)]) if a < b else \
        on.T.reshape([m if i == b else n if i == a else 1 for i in range(x.ndim)])
    return where(mask, planes, x)


def diag_embed(input, offset: int = 0, axis1: int = -2, axis2: int = -1) -> Tensor:
    """torch.diag_embed: a tensor of zeros one rank higher whose (axis1, axis2) planes (torch's dim1,
    dim2) hold input's last axis on their diagonal `offset` (planes of size n + |offset|)."""
    x = as_tensor(input)
    if x.ndim == 0 or not isinstance(x.shape[-1], int):
        raise ShapeError(_where(f"diag_embed needs a static last axis, got {format_shape(x.shape)}"))
    size = x.shape[-1] + abs(offset)
    rank = x.ndim + 1
    a, b = (normalize_axis(d, rank) for d in (axis1, axis2))
    rest = iter(x.shape[:-1])
    shape = tuple(size if i in (a, b) else next(rest) for i in range(rank))
    zeros = broadcast_to(np.zeros((), x.dtype), shape)
    return diagonal_scatter(zeros, x, offset, a, b)


def masked_scatter(input, mask, source) -> Tensor:
    """torch.masked_scatter: input (broadcast with the boolean mask) with the True entries replaced,
    in row-major order, by source's first elements (row-major too). source needs as many elements
    as the mask has True entries (torch raises where it has fewer; here its last element repeats)."""
    x, source = _promote(input, source)
    mask = as_tensor(mask)
    if mask.dtype != np.bool_:
        raise ShapeError(_where(f"masked_scatter: mask must be boolean, got {mask.dtype.name}"))
    shape = broadcast_shapes(x.shape, mask.shape)
    x, mask = broadcast_to(x, shape), broadcast_to(mask, shape)
    n = dims.product(source.shape)
    if not isinstance(n, int):
        raise ShapeError(_where(f"masked_scatter: source {format_shape(source.shape)} must have a static size"))
    if n == 0:                                   # nothing to write: the mask must be all False
        return x
    ranks = apply("mask_ranks", [ravel(mask)])
    picked = take(ravel(source), minimum(maximum(ranks, 0), n - 1))
    return where(mask, reshape(picked, shape), x)
