"""Writing into tensors at indices, PyTorch's way, without mutation: scatter and scatter_reduce
(along an axis, element by element), index_put / index_copy / index_add / index_fill (whole
slices at indices), masked_fill and a static-shape masked_select.

Duplicate indices. Where several updates land on one element and the op does not combine them,
the LAST one in row-major order of the index wins (numpy's `a[idx] = v` behaves so; PyTorch
leaves it undefined), and only the winner's value gets a gradient. This is exact and
deterministic on every provider: the winner is found with a scatter-max of update positions
(ONNX ScatterElements, reduction="max"), and the write itself is then a scatter-add of the
winners only, selected into the base with `where`, so everything differentiates through
gather/scatter-add adjoints to any order.

One primitive is new here, `scatter_reduce_elements` (ScatterElements with reduction "max", "min"
or "mul"); the rest are compositions.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..errors import ShapeError, UnsupportedError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from .basic import cast, full, zeros_like
from .elementwise import equal, greater_equal, less, logical_and, maximum, where
from .indexing import (
    _gather_elements,
    _index_tensor,
    _scatter_add_elements_infer,
    concat,
    onnx_indices,
    pad,
    scatter_add,
    scatter_add_along_axis,
    slice_axes,
    take,
)
from .reduce import sum as reduce_sum
from .shape import broadcast_to, ravel, reshape
from .shape_rules import broadcast_shapes, normalize_axis

__all__ = ["index_add", "index_copy", "index_fill", "index_put", "masked_fill", "masked_select", "put_along_axis",
           "scatter", "scatter_reduce"]


# -- the primitive: ScatterElements with max, min or mul ----------------------------------------------
_NP_REDUCTIONS = {"max": np.maximum, "min": np.minimum, "mul": np.multiply}


def _scatter_reduce_reference(base, idx, updates, axis, reduction):
    out = base.copy()
    where_ = list(np.indices(idx.shape, sparse=True))
    where_[axis] = idx
    _NP_REDUCTIONS[reduction].at(out, tuple(where_), updates)
    return out


def _lower_scatter_reduce(ctx, names, node):
    idx = onnx_indices(ctx, names[1], ctx.graph.type_of(node.inputs[1]).dtype)
    return ctx.emit("ScatterElements", [names[0], idx, names[2]], axis=node.attrs["axis"],
                    reduction=node.attrs["reduction"])


def _scatter_reduce_vjp(g, ins, outs, axis, reduction):
    base, idx, updates = ins
    out, g = outs[0], g[0]
    read = _gather_elements(out, idx, axis)
    if reduction == "mul":
        # base: g times the product of the updates landing there (no division). An update: g times the
        # product of the others in its group, out / update where the update is not 0; where it is, the
        # product with the zeros read as 1 if it is the group's only zero, else 0 (exact at zeros, as
        # F.prod's and PyTorch's)
        one = np.ones((), base.dtype)
        landed = _scatter_reduce_elements(broadcast_to(one, base.shape), idx, updates, axis, "mul")
        zero = equal(updates, 0)
        zeros_here = _gather_elements(scatter_add_along_axis(zeros_like(base), idx, cast(zero, base.dtype), axis),
                                      idx, axis)
        without_zeros = _gather_elements(_scatter_reduce_elements(base, idx, where(zero, one, updates), axis, "mul"),
                                         idx, axis)
        others = where(zero, where(equal(zeros_here, 1), without_zeros, np.zeros((), base.dtype)),
                       read / where(zero, one, updates))
        return [g * landed, None, _gather_elements(g, idx, axis) * others]
    # max/min: shared equally among the values equal to the result (the base's and the updates'), as PyTorch
    from_self = cast(equal(base, out), g.dtype)
    from_updates = cast(equal(updates, read), g.dtype)
    share = g / (from_self + scatter_add_along_axis(zeros_like(base), idx, from_updates, axis))
    return [share * from_self, None, _gather_elements(share, idx, axis) * from_updates]


defop("scatter_reduce_elements", infer=lambda types, axis, reduction: _scatter_add_elements_infer(types, axis),
      reference=_scatter_reduce_reference, lower=_lower_scatter_reduce, vjp=_scatter_reduce_vjp)


def _scatter_reduce_elements(base, idx, updates, axis: int, reduction: str) -> Tensor:
    return apply("scatter_reduce_elements", [base, idx, updates], axis=axis, reduction=reduction)


# -- scatter along an axis (torch.scatter, torch.scatter_reduce) ------------------------------------------
def _along_axis_operands(x, axis, index, src, what: str):
    """x, the integer index and src (a Tensor or a scalar, broadcast to the index's shape), checked
    as PyTorch checks them: same rank, index no larger than src anywhere nor than x off the axis."""
    x = as_tensor(x)
    if not x.ndim:
        raise ShapeError(f"{what}: x must have at least one axis (at {user_location()})")
    a = normalize_axis(int(axis), x.ndim)
    idx = _index_tensor(index, x.shape[a], what)
    if isinstance(src, Tensor) or np.ndim(src):
        src = _like(x, src)
        if src.ndim != idx.ndim:
            raise ShapeError(f"{what}: src {format_shape(src.shape)} and index {format_shape(idx.shape)} must have "
                             f"the same rank (at {user_location()})")
        if src.shape != idx.shape:
            src = slice_axes(src, range(idx.ndim), [0] * idx.ndim, [_static(d, what) for d in idx.shape],
                             [1] * idx.ndim)
    else:
        src = broadcast_to(as_tensor(np.asarray(src, x.dtype)), idx.shape)
    if idx.ndim != x.ndim or any(i != d and _static(i, what) > _static(d, what)
                                 for k, (i, d) in enumerate(zip(idx.shape, x.shape)) if k != a):
        raise ShapeError(f"{what}: index {format_shape(idx.shape)} must have the rank of x {format_shape(x.shape)} "
                         f"and be no larger off axis {a} (at {user_location()})")
    return x, a, idx, src


def _like(x: Tensor, values) -> Tensor:
    """values in x's dtype (PyTorch requires it; numpy casts on assignment)."""
    return cast(values, x.dtype) if isinstance(values, Tensor) else as_tensor(np.asarray(values, x.dtype))


def _static(d, what: str) -> int:
    if not isinstance(d, int):
        raise UnsupportedError(f"{what}: the index and src shapes must agree where they are symbolic (got {d!r}) "
                               f"(at {user_location()})")
    return d


def _in_region(x: Tensor, idx_shape, axis: int, fn) -> Tensor:
    """fn applied to the part of x the index covers off `axis` (PyTorch lets the index be smaller
    than x there), the rest of x unchanged."""
    region = [i for i, (n, d) in enumerate(zip(idx_shape, x.shape)) if i != axis and n != d]
    if not region:
        return fn(x)
    ends = [idx_shape[i] for i in region]
    inner = fn(slice_axes(x, region, [0] * len(region), ends, [1] * len(region)))
    pads = [(0, x.shape[i] - idx_shape[i]) if i in region else (0, 0) for i in range(x.ndim)]
    inside = np.zeros([d if i in region else 1 for i, d in enumerate(x.shape)], bool)
    inside[tuple(slice(0, idx_shape[i]) if i in region else slice(None) for i in range(x.ndim))] = True
    return where(inside, pad(inner, pads), x)


def _last_wins(x: Tensor, idx: Tensor, src: Tensor, axis: int) -> Tensor:
    """x with src written at idx along `axis` (ScatterElements form), the last duplicate winning."""
    n = _static(idx.shape[axis], "scatter")
    along = np.arange(n, dtype=np.int64).reshape([n if k == axis else 1 for k in range(idx.ndim)])
    positions = broadcast_to(along, idx.shape)
    winner = _scatter_reduce_elements(full(x.shape, -1, np.int64), idx, positions, axis, "max")
    keep = equal(_gather_elements(winner, idx, axis), positions)
    written = scatter_add_along_axis(zeros_like(x), idx, where(keep, src, np.zeros((), x.dtype)), axis)
    return where(greater_equal(winner, 0), written, x)


def scatter(x, axis: int, index, src) -> Tensor:
    """torch.scatter: x with out[..., index[i, j], ...] = src[i, j] along `axis` (index of x's rank,
    no larger than src, nor than x off the axis). src is a Tensor or a scalar (torch's `value`
    form). Duplicate indices: the last in row-major order wins, and alone gets a gradient (PyTorch
    gives every duplicate the gradient as if it had won)."""
    x, a, idx, src = _along_axis_operands(x, axis, index, src, "scatter")
    return _in_region(x, idx.shape, a, lambda part: _last_wins(part, idx, src, a))


def put_along_axis(x, indices, values, axis: int) -> Tensor:
    """numpy put_along_axis without mutation: scatter(x, axis, indices, values)."""
    return scatter(x, axis, indices, values)


_SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(x, axis: int, index, src, reduce: str, include_self: bool = True) -> Tensor:
    """torch.scatter_reduce: the src values at index along `axis` combined into x by `reduce`
    ("sum", "prod", "mean", "amax", "amin"); include_self=False leaves x's own value out wherever
    an index lands (elsewhere x is kept). Gradients as PyTorch's: amax/amin share among all values
    equal to the result; prod's is the product of the other factors, exact at zeros too (its second
    derivative where a group holds at most one zero, as PyTorch's)."""
    if reduce not in _SCATTER_REDUCES:
        raise ShapeError(f"scatter_reduce: reduce must be one of {', '.join(_SCATTER_REDUCES)}, got {reduce!r} "
                         f"(at {user_location()})")
    x, a, idx, src = _along_axis_operands(x, axis, index, src, "scatter_reduce")
    if not is_float(x.dtype) and reduce == "mean":
        raise ShapeError(f"scatter_reduce: reduce='mean' needs a float x, got {x.dtype.name} (at {user_location()})")

    def combine(part: Tensor) -> Tensor:
        hit = None
        if not include_self or reduce == "mean":
            ones = broadcast_to(np.ones((), part.dtype), idx.shape)
            hits = scatter_add_along_axis(zeros_like(part), idx, ones, a)
            hit = greater_equal(hits, 1)
        if not include_self:
            neutral = {"sum": 0, "mean": 0, "prod": 1, "amax": -np.inf, "amin": np.inf}[reduce]
            if not is_float(part.dtype) and reduce in ("amax", "amin"):
                info = np.iinfo(part.dtype)
                neutral = info.min if reduce == "amax" else info.max
            start = where(hit, np.asarray(neutral, part.dtype), part)
        else:
            start = part
        if reduce in ("sum", "mean"):
            out = scatter_add_along_axis(start, idx, src, a)
            if reduce == "mean":   # (no division by 0 where nothing lands: the where would not stop its NaN gradient)
                out = out / (hits + 1) if include_self else where(hit, out / maximum(hits, 1), part)
            return out
        out = _scatter_reduce_elements(start, idx, src, a, {"prod": "mul", "amax": "max", "amin": "min"}[reduce])
        return out if include_self else where(hit, out, part)

    return _in_region(x, idx.shape, a, combine)


# -- slices at indices (index_put, index_copy, index_add, index_fill) --------------------------------------
def _put_slices(x: Tensor, axis: int, idx: Tensor, values, accumulate: bool) -> Tensor:
    """x with the slices at positions idx (any shape) along `axis` set to (or, with accumulate,
    increased by) values, which broadcast to x.shape[:axis] + idx.shape + x.shape[axis + 1:]."""
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    values = _like(x, values)
    try:
        values = broadcast_to(values, shape)
    except ShapeError:
        raise ShapeError(f"values of shape {format_shape(values.shape)} do not broadcast to the indexed shape "
                         f"{format_shape(shape)} (at {user_location()})") from None
    if accumulate:
        return scatter_add(x, idx, values, axis)
    size, n = x.shape[axis], dims.product(idx.shape)
    if not isinstance(n, int):
        raise UnsupportedError(f"writing at indices of the symbolic shape {format_shape(idx.shape)} without "
                               f"accumulate is not supported (at {user_location()})")
    positions = np.arange(n, dtype=np.int64)
    winner = _scatter_reduce_elements(full((size,), -1, np.int64), ravel(idx), positions, 0, "max")
    keep = equal(take(winner, idx), positions.reshape(idx.shape))
    keep = reshape(keep, (1,) * axis + idx.shape + (1,) * (x.ndim - axis - 1))
    written = scatter_add(zeros_like(x), idx, where(keep, values, np.zeros((), x.dtype)), axis)
    hit = reshape(greater_equal(winner, 0), (size,) + (1,) * (x.ndim - axis - 1))
    return where(hit, written, x)


def index_put(x, indices, values, accumulate: bool = False) -> Tensor:
    """torch.index_put: x[indices] = values (accumulate=True: +=) without mutation. `indices` is a
    tuple of k integer index arrays for x's first k axes (broadcast together to a shape B); values
    broadcast to B + x.shape[k:]. Duplicates: the last wins (see the module docstring)."""
    x = as_tensor(x)
    indices = tuple(indices) if isinstance(indices, (tuple, list)) else (indices,)
    if not indices or len(indices) > x.ndim:
        raise ShapeError(f"index_put: {len(indices)} index arrays for x of rank {x.ndim} (at {user_location()})")
    if any((i.dtype if isinstance(i, Tensor) else np.asarray(i).dtype) == np.bool_ for i in indices):
        raise UnsupportedError("index_put: boolean masks are not supported (the number of positions would depend on "
                               f"the data); use F.masked_fill or F.where (at {user_location()})")
    k = len(indices)
    sizes = [x.shape[i] for i in range(k)]
    if k > 1 and not dims.is_static(tuple(sizes)):
        raise UnsupportedError(f"index_put: the indexed axes {format_shape(tuple(sizes))} must be static "
                               f"(at {user_location()})")
    idxs = [cast(_index_tensor(i, size, "index_put"), np.int64) for i, size in zip(indices, sizes)]
    if k == 1:
        return _put_slices(x, 0, idxs[0], values, accumulate)
    common = broadcast_shapes(*(i.shape for i in idxs))
    flat = None
    for i, size in zip(idxs, sizes):
        i = where(less(i, 0), i + size, i)
        flat = i if flat is None else flat * size + i
    flat = broadcast_to(flat, common)
    rows = reshape(x, (dims.product(sizes),) + x.shape[k:])
    return reshape(_put_slices(rows, 0, flat, values, accumulate), x.shape)


def index_copy(x, axis: int, index, source) -> Tensor:
    """torch.index_copy: x with the slices at the 1-d `index` along `axis` replaced by source's."""
    x = as_tensor(x)
    a = normalize_axis(int(axis), x.ndim)
    idx = _index_tensor(index, x.shape[a], "index_copy")
    if idx.ndim != 1:
        raise ShapeError(f"index_copy: index must be 1-d, got {format_shape(idx.shape)} (at {user_location()})")
    return _put_slices(x, a, idx, source, accumulate=False)


def index_add(x, axis: int, index, source, alpha=1) -> Tensor:
    """torch.index_add: x with alpha * source's slices added at the 1-d `index` along `axis`."""
    x = as_tensor(x)
    a = normalize_axis(int(axis), x.ndim)
    idx = _index_tensor(index, x.shape[a], "index_add")
    if idx.ndim != 1:
        raise ShapeError(f"index_add: index must be 1-d, got {format_shape(idx.shape)} (at {user_location()})")
    return _put_slices(x, a, idx, source if alpha == 1 else source * alpha, accumulate=True)


def index_fill(x, axis: int, index, value) -> Tensor:
    """torch.index_fill: x with the slices at `index` along `axis` set to the scalar `value` (a
    Python number or a 0-d Tensor, which then gets the gradient of the filled elements)."""
    x = as_tensor(x)
    a = normalize_axis(int(axis), x.ndim)
    idx = _index_tensor(index, x.shape[a], "index_fill")
    hits = scatter_add(full((x.shape[a],), 0, np.float32), ravel(idx), broadcast_to(np.float32(1), (idx.size,)))
    hit = reshape(greater_equal(hits, 1), (x.shape[a],) + (1,) * (x.ndim - a - 1))
    value = _like(x, value)
    if value.ndim:
        raise ShapeError(f"index_fill: value must be a scalar, got shape {format_shape(value.shape)} "
                         f"(at {user_location()})")
    return where(hit, value, x)


# -- masks ----------------------------------------------------------------------------------------------------
def _mask(mask, what: str):
    dtype = mask.dtype if isinstance(mask, Tensor) else np.asarray(mask).dtype
    if dtype != np.bool_:
        raise ShapeError(f"{what}: mask must be boolean, got dtype {dtype.name} (at {user_location()})")
    return mask


def masked_fill(x, mask, value) -> Tensor:
    """torch.masked_fill: x with `value` where the boolean mask (broadcast to x's shape) is True."""
    x = as_tensor(x)
    mask = _mask(mask, "masked_fill")
    shape = mask.shape if isinstance(mask, Tensor) else np.shape(mask)
    if broadcast_shapes(x.shape, shape) != x.shape:
        raise ShapeError(f"masked_fill: mask {format_shape(shape)} does not broadcast to x {format_shape(x.shape)} "
                         f"(at {user_location()})")
    return where(mask, _like(x, value), x)


def _mask_ranks_lower(ctx, names, node):
    ints = ctx.emit("Cast", [names[0]], to=TensorProto.INT64)
    return ctx.emit("Sub", [ctx.emit("CumSum", [ints, ctx.const(np.asarray(0, np.int64))]), ctx.int64s([1])])


# The rank of each True among the Trues of a flat mask (0, 1, ...), -1 before the first: a cumsum.
defop("mask_ranks", infer=lambda types: [tensor_type(np.int64, types[0].shape)],
      reference=lambda m: np.cumsum(m.astype(np.int64)) - 1, lower=_mask_ranks_lower, traits={Trait.NONDIFF})


def masked_select(x, mask, size: int | None = None, fill=0) -> Tensor:
    """torch.masked_select with a static shape: the elements of x where the mask (broadcast with x)
    is True, in row-major order, as a 1-d tensor of `size` elements: the first `size` selected
    ones, then `fill` if fewer are selected (as jax.numpy.nonzero's size/fill_value). size may be
    left out only when the mask is a numpy array (known when tracing): then it is the mask's count.
    The gradient goes to the selected elements that fit."""
    x = as_tensor(x)
    mask = _mask(mask, "masked_select")
    try:
        fill = np.asarray(fill, x.dtype)
    except (OverflowError, ValueError):
        raise ShapeError(f"masked_select: fill {fill!r} does not fit x's dtype {x.dtype.name} (at {user_location()})") \
            from None
    shape = broadcast_shapes(x.shape, mask.shape if isinstance(mask, Tensor) else np.shape(mask))
    flat_x = ravel(broadcast_to(x, shape))
    if not isinstance(mask, Tensor):
        chosen = np.flatnonzero(np.broadcast_to(mask, shape))
        n = len(chosen) if size is None else int(size)
        picked = take(flat_x, chosen[:n].astype(np.int64))
        return concat([picked, full((n - len(chosen[:n]),), fill, x.dtype)]) if n > len(chosen) else picked
    if size is None:
        raise UnsupportedError("masked_select with a run-time mask needs `size` (the result's length): the number "
                               f"of selected elements is only known at run time (at {user_location()})")
    size = int(size)
    if size < 0:
        raise ShapeError(f"masked_select: size must be >= 0, got {size} (at {user_location()})")
    flat_mask = ravel(broadcast_to(mask, shape))
    ranks = apply("mask_ranks", [flat_mask])
    slot = where(logical_and(flat_mask, less(ranks, size)), ranks, size)       # the rest go to a dropped slot
    slots = scatter_add(full((size + 1,), 0, x.dtype), slot, flat_x)
    count = reduce_sum(cast(flat_mask, np.int64))
    kept = less(np.arange(size, dtype=np.int64), count)
    return where(kept, slice_axes(slots, (0,), (0,), (size,), (1,)), fill)

