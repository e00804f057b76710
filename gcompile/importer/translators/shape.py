"""ONNX translators for shapes, indexing, constants and casts.

The ones marked symbolic also run on SymInts (shape vectors with symbolic dims), which is what
keeps exporters' shape subgraphs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) exact and
symbolic at import time instead of turning them into run-time computations.

Translators that make values from sizes alone (ConstantOfShape, Range, EyeLike, Trilu's mask,
OneHot's class indices) build them as numpy arrays only up to MAX_FOLD_ELEMENTS elements; beyond,
they trace ops fed by small constants (`iota`), so a model declaring 10^10 elements costs the
importer nothing and leaves the work to the runtime (see inline.py).
"""
from __future__ import annotations

import math

import numpy as np

from ... import functions as F
from ...errors import ShapeError
from ...frontend.tensor import Tensor
from ...ir import dims
from ...ops.basic import cast_array
from ...ops.indexing import slice_axes
from ...ops.shape_rules import broadcast_shapes, normalize_axes, normalize_axis
from ...passes.fold import MAX_FOLD_ELEMENTS
from .. import sizes
from ..table import NotSymbolic, SymInts, check_dtype, entries, entrywise, np_dtype, onnx_op, sym_or_const


def _on_entries(x: SymInts, fn):
    """A numpy data-movement function applied to the entries of a SymInts."""
    return sym_or_const(fn(x.values), x.dtype)


def _axes(n, operand, what="axes"):
    """Axes from the attribute (older opsets) or the optional input (newer ones); None if absent."""
    if n.has_attr(what):
        return list(n.attr(what))
    return None if operand is None else n.ints(operand, what)


# -- shapes as values -------------------------------------------------------------------------------------
@onnx_op("Shape", symbolic=True)
def _shape(n, x):
    n.note_dims(x)
    part = tuple(x.shape)[slice(n.attr("start", 0), n.attr("end"))]
    return sym_or_const(np.asarray(part, dtype=object))


@onnx_op("Size", symbolic=True)
def _size(n, x):
    n.note_dims(x)
    holder = np.empty((), dtype=object)
    holder[()] = dims.product(x.shape)
    return sym_or_const(holder)


@onnx_op("Identity", symbolic=True)
def _identity(n, x):
    return x


@onnx_op("Cast", "CastLike", symbolic=True)
def _cast(n, x, like=None):
    dtype = np_dtype(n.attr("to"), f"{n.describe()} target") if like is None else np.dtype(like.dtype)
    if isinstance(x, SymInts):
        if dtype.kind == "b":                # size != 0, where the dims decide it
            return entrywise(lambda v: not sizes.compare("Equal", v, 0), x, dtype=dtype)
        if dtype.kind not in "iuf":
            raise NotSymbolic()
        return SymInts(x.values, dtype)      # sizes cast to float (arange(float(n))) stay whole numbers
    saturate = bool(n.attr("saturate", 1))   # float8 targets only
    if isinstance(x, np.ndarray):            # CastLike of a constant to a size's type: still a constant
        with np.errstate(all="ignore"):      # as the reference evaluator casts (-inf to int is the runtime's)
            return cast_array(x, dtype, saturate)
    return F.cast(x, dtype, saturate)


# -- reshaping -------------------------------------------------------------------------------------------
@onnx_op("Reshape", symbolic=True)
def _reshape(n, x, shape):
    target = list(n.dims(shape, "shape"))
    if not n.attr("allowzero", 0):
        target = [x.shape[i] if isinstance(d, int) and d == 0 else d for i, d in enumerate(target)]
    if isinstance(x, SymInts):
        if not all(isinstance(d, int) for d in target):
            raise NotSymbolic()
        return _on_entries(x, lambda v: v.reshape(target))
    return F.reshape(x, tuple(target))


@onnx_op("Flatten")
def _flatten(n, x):
    axis = n.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise n.unsupported(f"axis {n.attr('axis')} is out of range for rank {x.ndim}")
    return F.reshape(x, (dims.product(x.shape[:axis]), dims.product(x.shape[axis:])))


@onnx_op("Transpose")
def _transpose(n, x):
    return F.transpose(x, n.attr("perm"))


@onnx_op("Squeeze", symbolic=True)
def _squeeze(n, x, axes=None):
    ax = _axes(n, axes)
    if isinstance(x, SymInts):
        return _on_entries(x, lambda v: np.squeeze(v, axis=None if not ax else tuple(ax)))
    return F.squeeze(x, ax or None)


@onnx_op("Unsqueeze", symbolic=True)
def _unsqueeze(n, x, axes=None):
    ax = normalize_axes(_axes(n, axes), x.ndim + len(_axes(n, axes)))
    if isinstance(x, SymInts):
        return _on_entries(x, lambda v: np.expand_dims(v, ax))
    return F.expand_dims(x, ax)


@onnx_op("Expand", symbolic=True)
def _expand(n, x, shape):
    target = broadcast_shapes(tuple(x.shape), n.shape(shape))
    if isinstance(x, SymInts):
        if not dims.is_static(target) or dims.product(target) > MAX_FOLD_ELEMENTS:
            raise NotSymbolic()
        return _on_entries(x, lambda v: np.broadcast_to(v, target).copy())
    return F.broadcast_to(x, target)


@onnx_op("Tile", symbolic=True)
def _tile(n, x, repeats):
    if isinstance(x, SymInts):
        reps = n.ints(repeats, "repeats")
        if len(reps) != x.ndim or any(r < 0 for r in reps) or math.prod(reps) * x.values.size > MAX_FOLD_ELEMENTS:
            raise NotSymbolic()      # a value that large, or a malformed one, is left to the run-time Tile
        return _on_entries(x, lambda v: np.tile(v, reps))
    reps = n.dims(repeats, "repeats")
    if any(isinstance(r, int) and r < 0 for r in reps):
        raise n.unsupported(f"negative repeats {list(reps)}")
    return F.tile(x, reps)


# -- joining and splitting -------------------------------------------------------------------------------------
@onnx_op("Concat", symbolic=True)
def _concat(n, *xs):
    axis = n.attr("axis")
    sym = [x for x in xs if isinstance(x, SymInts)]
    if sym:
        parts = [entries(x) for x in xs]
        axis = normalize_axis(axis, parts[0].ndim)
        if len({p.shape[:axis] + p.shape[axis + 1:] for p in parts}) != 1 or len({p.ndim for p in parts}) != 1:
            raise ShapeError(f"cannot concatenate shapes {[p.shape for p in parts]} along axis {axis}")
        return sym_or_const(np.concatenate(parts, axis=axis), sym[0].dtype)
    return F.concat(list(xs), axis)


def _static(n, dim, what):
    if not isinstance(dim, int):
        raise n.unsupported(f"{what} along an axis of symbolic size {dim!r}")
    return dim


@onnx_op("Split")
def _split(n, x, split=None):
    axis = normalize_axis(n.attr("axis", 0), x.ndim)
    size = _static(n, x.shape[axis], "splitting")
    sizes = _axes(n, split, "split")
    if sizes is None:
        k = n.attr("num_outputs", n.n_outputs)
        if k != n.n_outputs or k < 1:
            raise n.unsupported(f"num_outputs {k} with {n.n_outputs} outputs")
        chunk = -(-size // k)
        sizes = [min(chunk, max(size - chunk * i, 0)) for i in range(k)]
    if sum(sizes) != size or any(s < 0 for s in sizes):
        raise n.unsupported(f"split sizes {sizes} do not add up to the axis size {size}")
    return F.split(x, list(np.cumsum(sizes)[:-1]), axis)


def _slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX's clamping of Slice bounds; returns (start, end) with end < 0 meaning "through index 0"."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    count = len(range(start, end, step))
    return (start, start + count * step) if count else (0, 0)


@onnx_op("Slice", symbolic=True)
def _slice(n, x, starts=None, ends=None, axes=None, steps=None):
    if n.opset < 10:
        starts, ends, axes = n.attr("starts"), n.attr("ends"), n.attr("axes")
    else:
        starts, ends = list(n.dims(starts, "starts")), list(n.dims(ends, "ends"))
        axes = None if axes is None else n.ints(axes, "axes")
        steps = None if steps is None else n.ints(steps, "steps")
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
    steps = steps or [1] * len(starts)
    cuts = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise n.unsupported("a step of 0")
        dim = x.shape[a]
        if s == 0 and st == 1 and (e == dim or (isinstance(e, int) and e >= 2 ** 62)):
            continue                                  # the whole axis (x[:n] where n is its symbolic size)
        if isinstance(s, str) or isinstance(e, str):
            raise n.unsupported(f"Slice from {s} to {e} on an axis of size {dim!r}: bounds over symbolic dims are "
                                "supported only when they take the whole axis")
        s, e = _slice_bounds(_static(n, dim, "slicing"), s, e, st)
        cuts.append((a, s, e, st))
    if isinstance(x, SymInts):
        index = [slice(None)] * x.ndim
        for a, s, e, st in cuts:
            index[a] = slice(s, e if e >= 0 else None, st)
        return _on_entries(x, lambda v: v[tuple(index)])
    return slice_axes(x, *(zip(*cuts) if cuts else ((),) * 4))


# -- indexing ------------------------------------------------------------------------------------------------------
@onnx_op("Gather", symbolic=True)
def _gather(n, x, indices):
    axis = n.attr("axis", 0)
    if isinstance(x, SymInts) or isinstance(indices, SymInts):
        if not isinstance(x, SymInts) or not isinstance(indices, np.ndarray):
            raise NotSymbolic()
        axis = normalize_axis(axis, x.ndim)
        if indices.size and not -x.shape[axis] <= int(indices.min()) <= int(indices.max()) < x.shape[axis]:
            raise ShapeError(f"indices {indices.tolist()} are out of range for an axis of size {x.shape[axis]}")
        return _on_entries(x, lambda v: np.take(v, indices, axis=axis))
    return F.take(x, indices, axis)


@onnx_op("GatherElements")
def _gather_elements(n, x, indices):
    return F.take_along_axis(x, indices, n.attr("axis", 0))


def iota(size: int) -> np.ndarray | Tensor:
    """0, 1, ..., size-1 (int64): a numpy array up to MAX_FOLD_ELEMENTS, else computed at run time as
    row * width + column over a grid of about sqrt(size) by sqrt(size), flattened and cut to size,
    so no constant longer than about sqrt(size) is built."""
    if size <= MAX_FOLD_ELEMENTS:
        return np.arange(size, dtype=np.int64)
    width = math.isqrt(size - 1) + 1
    rows = -(-size // width)
    grid = F.reshape(iota(rows), (rows, 1)) * np.int64(width) + F.reshape(iota(width), (1, width))
    return slice_axes(F.reshape(grid, (rows * width,)), (0,), (0,), (size,), (1,))


def _offsets(n, x):
    """column - row for every position of x's last two axes (the diagonal index Trilu and EyeLike use)."""
    if x.ndim < 2:
        raise n.unsupported(f"an input of rank {x.ndim} (it needs a matrix)")
    return diagonal_offsets(*(_static(n, d, n.op_type) for d in x.shape[-2:]))


def diagonal_offsets(rows: int, cols: int):
    """column - row over a rows x cols grid (int64): a numpy array up to MAX_FOLD_ELEMENTS, else
    computed at run time from two iotas, so sizes read from a file never become a constant."""
    row, col = iota(rows), iota(cols)
    if max(rows, cols, rows * cols) <= MAX_FOLD_ELEMENTS:
        return col[None, :] - row[:, None]
    return F.reshape(col, (1, cols)) - F.reshape(row, (rows, 1))


def one_hot_mask(indices, depth: int, axis: int):
    """indices == class along a new axis `axis` of size depth (bool; indices outside [0, depth) give all
    False), compared with iota(depth), so a huge depth costs no import-time memory."""
    classes = F.reshape(iota(depth), (depth,) + (1,) * (indices.ndim - axis))
    return F.equal(F.expand_dims(indices, axis), classes)


@onnx_op("OneHot")
def _one_hot(n, indices, depth, values):
    depth = int(n.known(depth, "depth").reshape(-1)[0])
    if depth < 0:
        raise n.unsupported(f"a negative depth {depth}")
    idx = F.cast(indices, np.int64)
    idx = F.where(F.less(idx, np.int64(0)), idx + np.int64(depth), idx)   # negative indices count from the end
    hot = one_hot_mask(idx, depth, normalize_axis(n.attr("axis", -1), idx.ndim + 1))
    return F.where(hot, values[1], values[0])


@onnx_op("Trilu")
def _trilu(n, x, k=None):
    k = 0 if k is None else int(n.known(k, "k").reshape(-1)[0])
    offsets = _offsets(n, x)
    return F.where(offsets >= k if n.attr("upper", 1) else offsets <= k, x, np.zeros((), dtype=x.dtype))


@onnx_op("Pad")
def _pad(n, x, pads=None, value=None, axes=None):
    mode = n.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise n.unsupported(f"Pad mode {mode!r}")
    if n.opset < 11:
        flat, fill = n.attr("pads"), n.attr("value", 0.0)
    else:
        flat = n.ints(pads, "pads")
        fill = 0 if value is None else n.known(value, "constant_value").reshape(-1)[0].item()
    ax = range(x.ndim) if axes is None else [normalize_axis(a, x.ndim) for a in n.ints(axes, "axes")]
    pairs = [(0, 0)] * x.ndim
    for i, a in enumerate(ax):
        pairs[a] = (flat[i], flat[i + len(ax)])
    cuts = [(a, -min(b, 0), _static(n, x.shape[a], "cropping") + min(e, 0)) for a, (b, e) in enumerate(pairs)
            if min(b, e) < 0]
    if cuts:                                     # negative pads crop, before the rest is padded
        x = slice_axes(x, *zip(*[c + (1,) for c in cuts]))
    return F.pad(x, tuple((max(b, 0), max(e, 0)) for b, e in pairs), mode, fill)


@onnx_op("CenterCropPad")
def _center_crop_pad(n, x, shape):
    """Each of `axes` cropped or zero-padded to its target size around the centre (the odd element cut
    from, or added at, the end)."""
    target = n.ints(shape, "shape")
    axes = [normalize_axis(a, x.ndim) for a in n.attr("axes", list(range(x.ndim)))]
    if len(axes) != len(target):
        raise n.unsupported(f"a shape of {len(target)} sizes for the axes {axes}")
    cuts, pads = [], [(0, 0)] * x.ndim
    for a, want in zip(axes, target):
        size = _static(n, x.shape[a], "cropping or padding")
        if want < size:
            start = (size - want) // 2
            cuts.append((a, start, start + want, 1))
        elif want > size:
            before = (want - size) // 2
            pads[a] = (before, want - size - before)
    if cuts:
        x = slice_axes(x, *zip(*cuts))
    return F.pad(x, tuple(pads)) if any(p != (0, 0) for p in pads) else F.identity(x)


# -- constants -------------------------------------------------------------------------------------------------------
@onnx_op("Constant")
def _constant(n):
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
        if n.has_attr(name):
            return np.asarray(n.attr(name), dtype=dtype)
    if not n.has_attr("value"):
        raise n.unsupported("only numeric Constant values are supported (value, value_float(s), value_int(s))")
    return check_dtype(n.attr("value"), n.describe())


@onnx_op("ConstantOfShape", symbolic=True)
def _constant_of_shape(n, shape):
    value = n.attr("value")
    value = np.zeros(1, np.float32) if value is None else check_dtype(value, n.describe())
    if value.size != 1:
        raise n.unsupported(f"a value of {value.size} elements (it must have one)")
    target = n.shape(shape)
    fill = value.reshape(-1)[0]
    if dims.is_static(target) and dims.product(target) <= MAX_FOLD_ELEMENTS:
        return np.full(target, fill, dtype=value.dtype)
    return F.full(target, fill.item(), value.dtype)


@onnx_op("Range", symbolic=True)
def _range(n, start, limit, delta):
    data = [name for name, v in zip(("start", "limit", "delta"), (start, limit, delta)) if isinstance(v, Tensor)]
    if data:
        raise n.unsupported(f"its bounds must be known at import time (constants, initializers, or sizes of the "
                            f"inputs computed from their shapes), but its {' and '.join(data)} "
                            f"{'is' if len(data) == 1 else 'are'} computed at run time from data, which would make "
                            "the length of its output depend on the data (refused)")
    if any(isinstance(v, SymInts) for v in (start, limit, delta)):
        return _symbolic_range(n, start, limit, delta)
    start, limit, delta = (v.reshape(-1)[0] for v in (start, limit, delta))
    span = (limit - start) / delta if delta else np.nan
    if not np.isfinite(span):
        raise n.unsupported(f"Range from {start} to {limit} by {delta} has no finite length")
    index = iota(max(math.ceil(span), 0))
    if isinstance(index, np.ndarray):
        return (start + index * delta).astype(start.dtype)
    return F.cast(index, start.dtype) * delta + start


def _symbolic_range(n, start, limit, delta) -> Tensor:
    """Range over sizes (arange(x.shape[0]), arange(s, s + n) as exporters write them): its length
    ceil((limit - start) / delta) must be a dim, so a constant step must divide the span exactly;
    the values are start + step * arange(length), the start computed at run time where it is symbolic."""
    dtype = next(v.dtype for v in (start, limit, delta) if isinstance(v, (SymInts, np.ndarray)))
    bounds = [v.values.reshape(-1)[0] if isinstance(v, SymInts) else v.reshape(-1)[0] for v in (start, limit, delta)]
    length = None
    try:
        first, last, step = (entries(v).reshape(-1)[0] for v in (start, limit, delta))
        span = sizes.sub(last, first)
        if isinstance(step, int) and step and sizes.mod(span, step) == 0:
            length = sizes.maximum(sizes.div(span, step), 0)   # empty where the span points against the step
    except NotSymbolic:
        pass
    if length is None or not sizes.is_dim(length):
        raise n.unsupported(f"Range from {bounds[0]} to {bounds[1]} by {bounds[2]}: its length must be known at import "
                            "time as a product of the model's dims (a constant step dividing the span)"
                            + ("" if length is None else f", but it is {length}"))
    values = F.arange(length, 0, step, dtype)
    if isinstance(first, int):
        return values + np.asarray(first, dtype) if first else values
    return values + n.inliner.materialize(SymInts(np.asarray(first, dtype=object), dtype))


@onnx_op("DepthToSpace", "SpaceToDepth")
def _depth_space(n, x):
    """Both as reshape -> transpose -> reshape (NCHW), in mode DCR (depth-column-row) or CRD."""
    b, dcr = n.attr("blocksize"), n.attr("mode", "DCR") == "DCR"
    batch, c, h, w = x.shape
    if n.op_type == "SpaceToDepth":
        split = (batch, c, dims.divide(h, b), b, dims.divide(w, b), b)
        perm, out = (0, 3, 5, 1, 2, 4) if dcr else (0, 1, 3, 5, 2, 4), (batch, dims.product((c, b, b)), split[2],
                                                                        split[4])
    elif dcr:
        split, perm = (batch, b, b, dims.divide(c, b * b), h, w), (0, 3, 4, 1, 5, 2)
        out = (batch, split[3], dims.product((h, b)), dims.product((w, b)))
    else:
        split, perm = (batch, dims.divide(c, b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
        out = (batch, split[1], dims.product((h, b)), dims.product((w, b)))
    if any(d is None for d in split):
        raise n.unsupported(f"a shape {tuple(x.shape)} that blocksize {b} does not divide")
    return F.reshape(F.transpose(F.reshape(x, split), perm), out)


@onnx_op("EyeLike")
def _eye_like(n, x):
    if x.ndim != 2:
        raise n.unsupported(f"an input of rank {x.ndim} (it takes a matrix)")
    dtype = np.dtype(x.dtype) if n.attr("dtype") is None else np_dtype(n.attr("dtype"), n.describe())
    return F.cast(F.equal(_offsets(n, x), np.int64(n.attr("k", 0))), dtype)
