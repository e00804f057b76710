"""Indexing and data movement: getitem, slice, take/gather, scatter-add, concat, stack, split, pad, tile, embedding.

Three primitive pairs are each other's adjoints, which keeps everything closed under
differentiation: slice ↔ slice_scatter, gather ↔ scatter_add (take) and gather_elements ↔
scatter_add_elements (take_along_axis). concat's adjoint is slices; pad's is a slice (constant
mode) or scatter_adds of static source indices (reflect/edge). The rest (getitem, stack, split,
tile, embedding) are compositions of these and reshapes.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..errors import ShapeError, UnsupportedError
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from ..ir.graph import tensor_type
from ..ir.registry import Trait, constant_equal_to, defop
from .basic import cast, full, zeros_like
from .elementwise import _promote, less, where
from .shape import broadcast_to, expand_dims, ravel, reshape, transpose
from .shape_rules import broadcast_shapes, normalize_axis

__all__ = ["concat", "embedding", "getitem", "pad", "scatter_add", "scatter_add_along_axis", "split", "stack", "take",
           "take_along_axis", "tile"]


def _require_static(dim, what: str, axis: int) -> int:
    if not isinstance(dim, int):
        raise UnsupportedError(f"{what} on axis {axis}, whose size {dim!r} is symbolic, is not supported: "
                               "its result size would depend on run-time values")
    return dim


def _span(start: int, end: int, step: int) -> int:
    return len(range(start, end, step))


# -- slice and its adjoint slice_scatter -----------------------------------------------------------
# Attributes: per sliced axis, a normalised (start, end, step) as Python's slice.indices gives
# them (end may be -1 for a negative step reaching index 0). Sliced axes are static.
def slice_axes(x, axes, starts, ends, steps) -> Tensor:
    """x[start:end:step] along each of `axes` (non-negative, static, normalised bounds)."""
    x = as_tensor(x)
    kept = [bounds for bounds in zip(axes, starts, ends, steps) if bounds[1:] != (0, x.shape[bounds[0]], 1)]
    if not kept:
        return x
    axes, starts, ends, steps = (tuple(int(v) for v in column) for column in zip(*kept))
    return apply("slice", [x], axes=axes, starts=starts, ends=ends, steps=steps)


def slice_scatter(g, shape, axes, starts, ends, steps) -> Tensor:
    """Zeros of `shape` with g placed at the positions slice_axes(·, axes, ...) reads."""
    return apply("slice_scatter", [g], shape=tuple(shape), axes=tuple(axes), starts=tuple(starts),
                 ends=tuple(ends), steps=tuple(steps))


def _slices(ndim, axes, starts, ends, steps) -> tuple:
    index = [slice(None)] * ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(s, e if e >= 0 else None, st)
    return tuple(index)


def _slice_infer(types, axes, starts, ends, steps):
    shape = list(types[0].shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        shape[a] = _span(s, e, st)
    return [tensor_type(types[0].dtype, shape)]


def _lower_slice(ctx, names, node):
    a = node.attrs
    ends = [e if e >= 0 else ctx.INT64_MIN for e in a["ends"]]
    return ctx.emit("Slice", [names[0], ctx.int64s(a["starts"]), ctx.int64s(ends), ctx.int64s(a["axes"]),
                              ctx.int64s(a["steps"])])


def _slice_scatter_infer(types, shape, axes, starts, ends, steps):
    for a, s, e, st in zip(axes, starts, ends, steps):
        if types[0].shape[a] != _span(s, e, st):
            raise ShapeError(f"axis {a} holds {types[0].shape[a]!r} values for a slice of "
                             f"{_span(s, e, st)}")
    return [tensor_type(types[0].dtype, shape)]


def _slice_scatter_reference(g, shape, axes, starts, ends, steps):
    out = np.zeros(shape, g.dtype)
    out[_slices(len(shape), axes, starts, ends, steps)] = g
    return out


def _lower_slice_scatter(ctx, names, node):
    """Per sliced axis: reverse if the step is negative, interleave step-1 zeros after each value
    (Unsqueeze, Pad, Reshape), trim to the axis length; then one Pad places the result on every
    axis at once (a Pad per axis would copy the whole tensor once per axis)."""
    a = node.attrs
    out, shape = names[0], list(ctx.graph.type_of(node.inputs[0]).shape)
    rank = len(shape)
    begins, ends = [0] * rank, [0] * rank
    for axis, start, _end, step in zip(a["axes"], a["starts"], a["ends"], a["steps"]):
        n, size = shape[axis], a["shape"][axis]
        if step < 0:
            out = ctx.reverse(out, [axis], [n])
            start, step = start + (n - 1) * step, -step
        if step > 1:
            spread_ends = [0] * (rank + 1)
            spread_ends[axis + 1] = step - 1
            spread = ctx.pad(ctx.emit("Unsqueeze", [out, ctx.int64s([axis + 1])]), [0] * (rank + 1), spread_ends)
            shape[axis] = n = n * step
            out = ctx.emit("Reshape", [spread, ctx.shape_tensor(shape)], allowzero=1)
            if n > size - start:
                out = ctx.emit("Slice", [out, ctx.int64s([0]), ctx.int64s([size - start]), ctx.int64s([axis])])
                n = size - start
        begins[axis], ends[axis] = start, size - start - n
        shape[axis] = n
    return ctx.pad(out, begins, ends)


defop("slice", infer=_slice_infer,
      reference=lambda x, axes, starts, ends, steps: x[_slices(x.ndim, axes, starts, ends, steps)].copy(),
      lower=_lower_slice,
      vjp=lambda g, ins, outs, **a: [slice_scatter(g[0], ins[0].shape, **a)], traits={Trait.CHEAP})
defop("slice_scatter", infer=_slice_scatter_infer, reference=_slice_scatter_reference, lower=_lower_slice_scatter,
      vjp=lambda g, ins, outs, shape, **a: [slice_axes(g[0], **a)])


def _axis_slice(x: Tensor, axis: int, start: int, end: int, step: int = 1) -> Tensor:
    return slice_axes(x, (axis,), (start,), (end,), (step,))


# -- gather and its adjoint scatter_add -------------------------------------------------------------
def _require_int(t, what: str) -> None:
    if t.dtype.kind not in "iu":
        raise ShapeError(f"{what} must be an integer tensor, got {t.dtype.name}")


def _gather_shape(x_shape, idx_shape, axis) -> tuple:
    return tuple(x_shape[:axis]) + tuple(idx_shape) + tuple(x_shape[axis + 1:])


def _gather_infer(types, axis):
    x, idx = types
    _require_int(idx, "gather indices")
    return [tensor_type(x.dtype, _gather_shape(x.shape, idx.shape, axis))]


def _scatter_add_infer(types, axis):
    base, idx, updates = types
    _require_int(idx, "scatter_add indices")
    expected = _gather_shape(base.shape, idx.shape, axis)
    if updates.shape != expected:
        raise ShapeError(f"updates of shape {format_shape(updates.shape)} do not match "
                         f"{format_shape(expected)} (base shape with axis {axis} replaced by the indices' shape)")
    if updates.dtype != base.dtype:
        raise ShapeError(f"updates are {updates.dtype.name} but base is {base.dtype.name}")
    return [base]


def _scatter_add_reference(base, idx, updates, axis):
    out = base.copy()
    np.add.at(out, (slice(None),) * axis + (idx,), updates)
    return out


def onnx_indices(ctx, name: str, dtype, wide: bool = False) -> str:
    """An index operand as ONNX's index inputs take it: Gather, GatherElements and ScatterElements
    accept int32 and int64 only (wide=True: int64 only, to meet an int64 size in arithmetic), so
    smaller or unsigned integer indices are cast to int64."""
    allowed = (np.int64,) if wide else (np.int32, np.int64)
    return name if np.dtype(dtype) in allowed else ctx.emit("Cast", [name], to=TensorProto.INT64)


def _lower_indexed(op_type: str, index_at: int = 1):
    """A lowering that emits one `op_type` node with the node's axis and its index operand made valid."""
    def lower(ctx, names, node):
        names = list(names)
        names[index_at] = onnx_indices(ctx, names[index_at], ctx.graph.type_of(node.inputs[index_at]).dtype)
        extra = {"reduction": "add"} if op_type == "ScatterElements" else {}
        return ctx.emit(op_type, names, axis=node.attrs["axis"], **extra)
    return lower


def scatter_add_rows(ctx, names, node, add) -> str:
    """The frame of a scatter_add's lowering: `axis` moved to the front of base and the index
    axes to the front of updates (joined into one), the indices made non-negative (Mod by the
    axis size), float16 computed in float32 (ONNX Runtime's scatters add no float16), and
    `add(ctx, base, idx, updates, rows, count, size, into_zeros)` adding the update rows
    (count, *rows) at idx (count,) into base (size, *rows); into_zeros says base is the constant
    0 (a gather's gradient). A target's strategy passes its own `add`."""
    axis = node.attrs["axis"]
    base_t, idx_t = (ctx.graph.type_of(r) for r in node.inputs[:2])
    r, k = base_t.ndim, idx_t.ndim
    base, idx, updates = names
    if base_t.shape[axis] == 0:   # no index is valid, so none is given: nothing to add (and no Mod by 0)
        return ctx.emit("Identity", [base])
    base_perm = [axis] + [i for i in range(r) if i != axis]
    upd_perm = list(range(axis, axis + k)) + list(range(axis)) + list(range(axis + k, r + k - 1))
    if axis:
        base = ctx.emit("Transpose", [base], perm=base_perm)
        updates = ctx.emit("Transpose", [updates], perm=upd_perm)
    rows = tuple(base_t.shape[i] for i in base_perm[1:])                  # an update row's shape
    count = dims.product(idx_t.shape)
    if k != 1:
        updates = ctx.emit("Reshape", [updates, ctx.shape_tensor((count, *rows))], allowzero=1)
    idx = onnx_indices(ctx, idx, idx_t.dtype, wide=True)
    idx = ctx.emit("Mod", [ctx.emit("Reshape", [idx, ctx.int64s([-1])]), ctx.dim_scalar(base_t.shape[axis])])
    half = np.dtype(base_t.dtype) == np.float16
    if half:
        base, updates = (ctx.emit("Cast", [v], to=TensorProto.FLOAT) for v in (base, updates))
    out = add(ctx, base, idx, updates, rows, count, base_t.shape[axis], constant_equal_to(ctx.graph, node.inputs[0], 0))
    if half:
        out = ctx.emit("Cast", [out], to=TensorProto.FLOAT16)
    return ctx.emit("Transpose", [out], perm=[int(p) for p in np.argsort(base_perm)]) if axis else out


def _lower_scatter_add(ctx, names, node):
    return scatter_add_rows(ctx, names, node, lambda ctx, base, idx, updates, rows, *_:
                            added_in_order(ctx, base, idx, updates, rows))


def added_in_order(ctx, base: str, idx: str, updates: str, rows) -> str:
    """base (N, *rows) plus the update rows (E, *rows) at idx (E, in [0, N)), each element added in
    turn by one 1-D ScatterElements(reduction=add) over the flat base: element j of row i goes to
    index[i] * R + j, R the row's size. The spec's reduction adds duplicates one after another,
    giving np.add.at's sums. (Not ScatterND(reduction=add) over the rows as given: ONNX Runtime
    (1.31) splits those among threads with no care for repeated indices, and two threads adding
    into one row lose updates.)"""
    row = dims.product(rows)
    flat = ctx.int64s([-1])
    if row != 1:
        start = ctx.emit("Mul", [ctx.emit("Unsqueeze", [idx, ctx.int64s([-1])]), ctx.dim_scalar(row)])
        idx = ctx.emit("Add", [start, ctx.index_range(row)])
    out = ctx.emit("ScatterElements", [ctx.emit("Reshape", [base, flat]), ctx.emit("Reshape", [idx, flat]),
                                       ctx.emit("Reshape", [updates, flat])], axis=0, reduction="add")
    return ctx.emit("Reshape", [out, ctx.emit("Shape", [base])], allowzero=1)


def _gather(x: Tensor, idx: Tensor, axis: int) -> Tensor:
    return apply("gather", [x, idx], axis=axis)


def _constant_stride(idx: Tensor, size) -> tuple[int, int, int] | None:
    """(start, end, step), normalised as slice_axes takes them, where `idx` is a constant of at
    most one axis whose entries step evenly through distinct positions of an axis of `size`
    (a select's scalar, an arange): the positions a slice reads. None otherwise."""
    node = idx.graph.nodes[idx.ref.node]
    if node.op != "constant" or not isinstance(size, int) or node.attrs["value"].ndim > 1:
        return None
    values = node.attrs["value"].astype(np.int64).ravel()
    values = np.where(values < 0, values + size, values)
    if not values.size or values.min() < 0 or values.max() >= size:
        return None
    step = int(values[1] - values[0]) if values.size > 1 else 1
    if step == 0 or np.any(np.diff(values) != step):
        return None
    end = int(values[-1]) + step
    return int(values[0]), end if end >= 0 else -1, step


def _gather_vjp(g, ins, outs, axis):
    """A scatter of g into zeros; where the indices are a constant that steps evenly (a select,
    a range) the positions are a slice's, and g is placed by slice_scatter (Pads): no scatter,
    whose index tensor, computed from constants, the runtime would fold into one constant of
    g's size per gather (a ViT's selects of q, k and v held 0.7 GB so)."""
    x, idx = ins
    stride = _constant_stride(idx, x.shape[axis])
    if stride is None:
        return [scatter_add(zeros_like(x), idx, g[0], axis), None]
    placed = expand_dims(g[0], axis) if idx.ndim == 0 else g[0]
    return [slice_scatter(placed, x.shape, (axis,), *((v,) for v in stride)), None]


defop("gather", infer=_gather_infer, reference=lambda x, idx, axis: np.take(x, idx, axis=axis),
      lower=_lower_indexed("Gather"), vjp=_gather_vjp)
defop("scatter_add", infer=_scatter_add_infer, reference=_scatter_add_reference, lower=_lower_scatter_add,
      vjp=lambda g, ins, outs, axis: [g[0], None, _gather(g[0], ins[1], axis)])


def _index_tensor(indices, size, what: str) -> Tensor:
    """indices as an integer Tensor; a numpy/list index is bounds-checked against a static size."""
    if not isinstance(indices, Tensor):
        arr = np.asarray(indices)
        if arr.dtype.kind not in "iu":
            raise ShapeError(f"{what}: indices must be integers, got dtype {arr.dtype.name}")
        if isinstance(size, int) and arr.size and not (-size <= arr.min() and arr.max() < size):
            raise ShapeError(f"{what}: index {arr.max() if arr.max() >= size else arr.min()} is out of range "
                             f"for an axis of size {size}")
        indices = arr
    idx = as_tensor(indices)
    _require_int(idx.type, f"{what} indices")
    return idx


def scatter_add(base, indices, updates, axis: int = 0) -> Tensor:
    """base with updates added at `indices` along `axis` (repeated indices accumulate), numpy's
    np.add.at(base, (slice(None),) * axis + (indices,), updates) without mutation."""
    base, updates = _promote(base, updates)
    axis = normalize_axis(axis, base.ndim)
    return apply("scatter_add", [base, _index_tensor(indices, base.shape[axis], "scatter_add"), updates],
                 axis=axis)


def take(x, indices, axis=None) -> Tensor:
    """numpy take: elements of x at integer `indices` along `axis` (None: of the flattened x)."""
    x = as_tensor(x)
    if axis is None:
        x, axis = ravel(x), 0
    axis = normalize_axis(axis, x.ndim)
    return _gather(x, _index_tensor(indices, x.shape[axis], "take"), axis)


# -- gather_elements and its adjoint scatter_add_elements (take_along_axis) ------------------------------
def _gather_elements_infer(types, axis):
    x, idx = types
    _require_int(idx, "take_along_axis indices")
    if idx.ndim != x.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, idx.shape)) if i != axis):
        raise ShapeError(f"indices of shape {format_shape(idx.shape)} must match {format_shape(x.shape)} "
                         f"off axis {axis}")
    return [tensor_type(x.dtype, idx.shape)]


def _scatter_add_elements_infer(types, axis):
    base, idx, updates = types
    _gather_elements_infer([base, idx], axis)
    if updates.shape != idx.shape or updates.dtype != base.dtype:
        raise ShapeError(f"updates {updates} must have the indices' shape {format_shape(idx.shape)} "
                         f"and dtype {base.dtype.name}")
    return [base]


def _scatter_add_elements_reference(base, idx, updates, axis):
    out = base.copy()
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx
    np.add.at(out, tuple(where), updates)
    return out


def _gather_elements(x: Tensor, idx: Tensor, axis: int) -> Tensor:
    return apply("gather_elements", [x, idx], axis=axis)


defop("gather_elements", infer=_gather_elements_infer,
      reference=lambda x, idx, axis: np.take_along_axis(x, idx, axis=axis),
      lower=_lower_indexed("GatherElements"),
      vjp=lambda g, ins, outs, axis: [scatter_add_along_axis(zeros_like(ins[0]), ins[1], g[0], axis), None])
defop("scatter_add_elements", infer=_scatter_add_elements_infer, reference=_scatter_add_elements_reference,
      lower=_lower_indexed("ScatterElements"),
      vjp=lambda g, ins, outs, axis: [g[0], None, _gather_elements(g[0], ins[1], axis)])


def _along_axis(x: Tensor, indices, axis, what: str):
    """x and integer indices of the same rank, broadcast against each other off `axis`."""
    axis = normalize_axis(axis, x.ndim)
    idx = _index_tensor(indices, x.shape[axis], what)
    if idx.ndim != x.ndim:
        raise ShapeError(f"{what}: indices of rank {idx.ndim} for a tensor of rank {x.ndim}")
    common = broadcast_shapes(*(t.shape[:axis] + (1,) + t.shape[axis + 1:] for t in (x, idx)))
    x, idx = (broadcast_to(t, common[:axis] + (t.shape[axis],) + common[axis + 1:]) for t in (x, idx))
    return x, idx, axis


def take_along_axis(x, indices, axis) -> Tensor:
    """numpy take_along_axis: out[..., j, ...] = x[..., indices[..., j, ...], ...] along `axis`
    (None: of the flattened x); indices broadcast against x off that axis."""
    x = as_tensor(x)
    if axis is None:
        x, axis = ravel(x), 0
    x, idx, axis = _along_axis(x, indices, axis, "take_along_axis")
    return _gather_elements(x, idx, axis)


def scatter_add_along_axis(base, indices, updates, axis) -> Tensor:
    """The adjoint of take_along_axis: base with updates added at `indices` along `axis`
    (indices and updates of one shape, matching base off that axis; repeats accumulate)."""
    base, updates = _promote(base, updates)
    axis = normalize_axis(axis, base.ndim)
    return apply("scatter_add_elements", [base, _index_tensor(indices, base.shape[axis], "scatter_add_along_axis"),
                                          updates], axis=axis)


def embedding(ids, w) -> Tensor:
    """Rows of the table w (vocab, dim) for integer `ids` of any shape: shape ids.shape + (dim,)."""
    return take(w, ids, axis=0)


# -- getitem -------------------------------------------------------------------------------------------
def _is_array_index(item) -> bool:
    return isinstance(item, (Tensor, np.ndarray, list))


def _is_bool_index(item) -> bool:
    if isinstance(item, (bool, np.bool_)):
        return True
    return _is_array_index(item) and (item.dtype if isinstance(item, Tensor) else np.asarray(item).dtype) == np.bool_


def _expand_ellipsis(index: tuple, ndim: int) -> tuple:
    n_ell = sum(1 for i in index if i is Ellipsis)
    if n_ell > 1:
        raise ShapeError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > ndim:
        raise ShapeError(f"too many indices: {used} for a tensor of rank {ndim}")
    if not n_ell:
        return index + (slice(None),) * (ndim - used)
    k = next(pos for pos, i in enumerate(index) if i is Ellipsis)
    return index[:k] + (slice(None),) * (ndim - used) + index[k + 1:]


def getitem(x, index) -> Tensor:
    """x[index] with numpy semantics for ints, slices (any step), None, Ellipsis and integer index
    arrays (several broadcast together, as numpy's advanced indexing: their axes become one gather
    on the flattened product, and the result's axes go first when the advanced indices are not
    adjacent). A boolean mask known while tracing (a numpy array or list) is its nonzero() index
    arrays, as numpy reads it; a traced boolean Tensor is refused (the result's shape would depend
    on the data)."""
    x = as_tensor(x)
    index = index if isinstance(index, tuple) else (index,)
    index, mask_sizes = _known_masks_as_arrays(index)
    if any(_is_bool_index(i) for i in index):
        raise UnsupportedError("boolean mask indexing is not supported: its result shape depends on the data; "
                               "use F.where(mask, x, 0) to keep the shape")
    index = _expand_ellipsis(index, x.ndim)
    cuts = []                           # (axis, start, end, step) of every slice and int index
    shape: list = []                    # result shape of the basic indexing
    arrays: list = []                   # (position in that result, index array) of every index array
    advanced = []                       # positions in `index` of ints and arrays (numpy's advanced indices)
    axis = 0
    for pos, item in enumerate(index):
        if item is None:
            shape.append(1)
            continue
        dim = x.shape[axis]
        if id(item) in mask_sizes and mask_sizes[id(item)] != dim:
            raise ShapeError(f"a boolean index of size {mask_sizes[id(item)]} does not match axis {axis} of size "
                             f"{dim!r}")
        if _is_array_index(item):
            arrays.append((len(shape), item))
            advanced.append(pos)
            shape.append(dim)
        elif isinstance(item, slice):
            if item.start in (None, 0) and item.stop is None and item.step in (None, 1):
                shape.append(dim)
            else:
                start, end, step = item.indices(_require_static(dim, "slicing", axis))
                n = _span(start, end, step)
                cuts.append((axis, start, start + n * step, step))
                shape.append(n)
        elif isinstance(item, (int, np.integer)):
            size = _require_static(dim, "integer indexing", axis)
            if not -size <= item < size:
                raise ShapeError(f"index {int(item)} is out of range for axis {axis} of size {size}")
            cuts.append((axis, int(item) % size, int(item) % size + 1, 1))
            advanced.append(pos)
        else:
            raise UnsupportedError(f"unsupported index {item!r} of type {type(item).__name__}")
        axis += 1
    y = reshape(slice_axes(x, *(zip(*cuts) if cuts else ((),) * 4)), tuple(shape))
    if not arrays:
        return y
    at = arrays[0][0]
    if len(arrays) == 1:
        idx = _index_tensor(arrays[0][1], shape[at], "getitem")
    else:
        y, idx = _merge_array_axes(y, arrays)
    y = _gather(y, idx, at)
    if advanced != list(range(advanced[0], advanced[0] + len(advanced))):
        # numpy puts the index arrays' axes first when advanced indices are not adjacent
        moved = list(range(at, at + idx.ndim))
        y = transpose(y, moved + [i for i in range(y.ndim) if i not in moved])
    return y


def _known_masks_as_arrays(index: tuple) -> tuple[tuple, dict]:
    """index with each boolean numpy array or list (of k dims) replaced by its k nonzero() index
    arrays, and the size of the axis each of those must index (keyed by id)."""
    out: list = []
    sizes: dict = {}
    for item in index:
        if isinstance(item, (np.ndarray, list)) and np.asarray(item).dtype == np.bool_ and np.ndim(item) > 0:
            mask = np.asarray(item)
            for n, positions in zip(mask.shape, np.nonzero(mask)):
                sizes[id(positions)] = n
                out.append(positions)
        else:
            out.append(item)
    return tuple(out), sizes


def _merge_array_axes(y: Tensor, arrays: list) -> tuple[Tensor, Tensor]:
    """Several index arrays at axes a1 < a2 < ... of y: those axes moved together at a1 and merged
    into one (their sizes must be static), and the broadcast arrays as one flat index into it."""
    positions = [p for p, _ in arrays]
    sizes = [_require_static(y.shape[p], "indexing with several index arrays", p) for p in positions]
    order = [a for a in range(y.ndim) if a not in positions]
    first = positions[0]
    order[first:first] = positions
    y = transpose(y, order) if order != list(range(y.ndim)) else y
    y = reshape(y, tuple(y.shape[:first]) + (int(np.prod(sizes)),) + tuple(y.shape[first + len(sizes):]))
    idxs = [_index_tensor(item, size, "getitem") for (_, item), size in zip(arrays, sizes)]
    if not any(isinstance(item, Tensor) for _, item in arrays):      # known indices: the flat index in numpy
        known = np.broadcast_arrays(*(np.asarray(item) % size for (_, item), size in zip(arrays, sizes)))
        return y, as_tensor(np.ravel_multi_index(known, sizes).astype(np.int64))
    terms = []
    for k, (idx, size) in enumerate(zip(idxs, sizes)):
        idx = cast(idx, np.int64)
        idx = where(less(idx, 0), idx + np.int64(size), idx)                  # numpy's negative indices
        terms.append(idx * np.int64(np.prod(sizes[k + 1:])))
    flat = terms[0]
    for term in terms[1:]:
        flat = flat + term
    return y, flat


# -- concat, stack, split ---------------------------------------------------------------------------
def _concat_infer(types, axis):
    first = types[0]
    for t in types[1:]:
        if t.dtype != first.dtype:
            raise ShapeError(f"dtypes {first.dtype.name} and {t.dtype.name} differ")
        if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise ShapeError(f"along axis {axis}: shapes {format_shape(first.shape)} and "
                             f"{format_shape(t.shape)} differ off that axis")
    for t in types:
        _require_static(t.shape[axis], "concat", axis)
    size = sum(t.shape[axis] for t in types)
    return [tensor_type(first.dtype, first.shape[:axis] + (size,) + first.shape[axis + 1:])]


def _concat_vjp(g, ins, outs, axis):
    offsets = np.cumsum([0] + [x.shape[axis] for x in ins])
    return [_axis_slice(g[0], axis, int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])]


defop("concat", infer=_concat_infer, reference=lambda *xs, axis: np.concatenate(xs, axis=axis),
      lower=lambda ctx, names, node: ctx.emit("Concat", names, axis=node.attrs["axis"]), vjp=_concat_vjp)


def concat(xs, axis: int = 0) -> Tensor:
    """numpy concatenate: tensors of equal shape off `axis` (static sizes along it) joined along it."""
    xs = _promote(*xs)
    if not xs or xs[0].ndim == 0:
        raise ShapeError("concat needs at least one tensor of rank >= 1")
    axis = normalize_axis(axis, xs[0].ndim)
    return xs[0] if len(xs) == 1 else apply("concat", xs, axis=axis)


def stack(xs, axis: int = 0) -> Tensor:
    """numpy stack: equal-shaped tensors joined along a new axis."""
    xs = _promote(*xs)
    axis = normalize_axis(axis, xs[0].ndim + 1)
    return concat([expand_dims(x, axis) for x in xs], axis)


def split(x, sections_or_indices, axis: int = 0) -> list[Tensor]:
    """numpy split: an int that divides the axis (equal parts) or a list of split points."""
    x = as_tensor(x)
    axis = normalize_axis(axis, x.ndim)
    size = _require_static(x.shape[axis], "split", axis)
    if isinstance(sections_or_indices, (int, np.integer)):
        n = int(sections_or_indices)
        if n <= 0 or size % n:
            raise ShapeError(f"split: {n} sections do not divide axis {axis} of size {size} equally")
        points = [size // n * k for k in range(1, n)]
    else:
        points = [int(p) for p in sections_or_indices]
    bounds = [0] + points + [size]
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        start, end, _ = slice(a, b).indices(size)
        parts.append(_axis_slice(x, axis, start, max(start, end)))
    return parts


# -- pad --------------------------------------------------------------------------------------------
_PAD_MODES = ("constant", "reflect", "edge", "wrap")
_TORCH_PAD_MODES = {"replicate": "edge", "circular": "wrap"}     # torch's names for numpy's modes


def _pad_pairs(pads, ndim) -> tuple:
    arr = np.asarray(pads)
    if arr.dtype.kind not in "iu" or arr.shape not in ((), (2,), (1, 2), (ndim, 2)):
        raise ShapeError(f"pad: pads {pads!r} must be an int, a (before, after) pair or one pair per axis "
                         f"of a tensor of rank {ndim}")
    arr = np.broadcast_to(arr.reshape(-1, 2) if arr.ndim else arr, (ndim, 2))
    if (arr < 0).any():
        raise ShapeError(f"pad: pads {pads!r} must be non-negative")
    return tuple((int(b), int(a)) for b, a in arr)


def _pad_infer(types, pads, mode, value):
    shape = []
    for axis, (d, (before, after)) in enumerate(zip(types[0].shape, pads)):
        if before or after:
            d = _require_static(d, "padding", axis)
            if mode == "reflect" and max(before, after) >= d:
                raise ShapeError(f"reflect padding of {max(before, after)} needs axis {axis} longer than "
                                 f"that, its size is {d}")
            if mode in ("edge", "wrap") and d == 0:
                raise ShapeError(f"{mode} padding of an empty axis {axis}")
            d = before + d + after
        shape.append(d)
    return [tensor_type(types[0].dtype, shape)]


def _pad_reference(x, pads, mode, value):
    return np.pad(x, pads, mode, constant_values=value) if mode == "constant" else np.pad(x, pads, mode)


def _pad_sources(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """The input index each position of a padded axis copies (reflect, edge, wrap)."""
    return np.pad(np.arange(n), (before, after), mode)  # type: ignore[call-overload]  # mode is one of numpy's


def _lower_pad(ctx, names, node):
    a = node.attrs
    if a["mode"] == "wrap":   # a Gather of the wrapped positions per axis (Pad's "wrap" needs opset 19)
        out, shape = names[0], ctx.graph.type_of(node.inputs[0]).shape
        for axis, (before, after) in enumerate(a["pads"]):
            if before or after:
                out = ctx.emit("Gather", [out, ctx.int64s(_pad_sources(shape[axis], before, after, "wrap"))], axis=axis)
        return out
    fill = ctx.const(np.asarray(a["value"], node.outputs[0].dtype)) if a["mode"] == "constant" else ""
    return ctx.pad(names[0], [b for b, _ in a["pads"]], [e for _, e in a["pads"]], fill, mode=a["mode"])


def _pad_vjp(g, ins, outs, pads, mode, value):
    x, g = ins[0], g[0]
    padded = [(axis, b, e) for axis, (b, e) in enumerate(pads) if b or e]
    if mode == "constant":
        return [slice_axes(g, [a for a, _, _ in padded], [b for _, b, _ in padded],
                           [b + x.shape[a] for a, b, _ in padded], [1] * len(padded))]
    # reflect/edge/wrap: each padded axis is a gather of static source indices; apply the adjoints
    for axis, before, after in padded:
        source = _pad_sources(x.shape[axis], before, after, mode)
        g = scatter_add(full(g.shape[:axis] + (x.shape[axis],) + g.shape[axis + 1:], 0, g.dtype), source, g, axis)
    return [g]


defop("pad", infer=_pad_infer, reference=_pad_reference, lower=_lower_pad, vjp=_pad_vjp)


def pad(x, pads, mode: str = "constant", value=0) -> Tensor:
    """numpy pad: `pads` is an int, a (before, after) pair for every axis, or one pair per axis;
    mode "constant" (filled with `value`), "reflect" (mirrored, edge not repeated), "edge" or
    "wrap" (periodic); torch's names "replicate" and "circular" are accepted for the last two."""
    x = as_tensor(x)
    mode = _TORCH_PAD_MODES.get(mode, mode)
    if mode not in _PAD_MODES:
        raise UnsupportedError(f"pad: mode {mode!r} is not supported (use one of {', '.join(_PAD_MODES)})")
    pairs = _pad_pairs(pads, x.ndim)
    if not any(b or e for b, e in pairs):
        return x
    return apply("pad", [x], pads=pairs, mode=mode, value=float(value))


# -- tile ---------------------------------------------------------------------------------------------
def tile(x, reps) -> Tensor:
    """numpy tile (a repetition count may be a symbolic dim), as reshape → broadcast → reshape: each
    tiled axis d becomes a (rep, d) pair, so the gradient is broadcast's (a sum over the rep axes)."""
    x = as_tensor(x)
    reps = (reps,) if isinstance(reps, (int, np.integer, str)) else tuple(reps)
    reps = tuple(r if isinstance(r, str) else int(r) for r in reps)     # symbolic dims repeat a dynamic count
    if any(isinstance(r, int) and r < 0 for r in reps):
        raise ShapeError(f"tile: negative repetitions {reps}")
    n = max(len(reps), x.ndim)
    reps, shape = (1,) * (n - len(reps)) + reps, (1,) * (n - x.ndim) + x.shape
    paired, expanded = [], []
    for r, d in zip(reps, shape):
        paired += [1, d] if r != 1 else [d]
        expanded += [r, d] if r != 1 else [d]
    final = tuple(dims.product((r, d)) for r, d in zip(reps, shape))
    return reshape(broadcast_to(reshape(x, tuple(paired)), tuple(expanded)), final)
