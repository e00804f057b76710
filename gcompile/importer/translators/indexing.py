"""ONNX translators for indexing by arrays of indices (GatherND, ScatterND, ScatterElements), selection
(TopK, Compress) and the refusal of ops whose output shape depends on data.

Multi-dimensional indices become linear indices into a flattened tensor (`take` and `scatter_add`
on axis 0), so gradients come from those ops' VJP rules: a scattered-over position gets no gradient
from the data it replaced, the updates get the output's gradient at their positions. The mul, max and
min reductions are F.scatter_reduce (its gradients: PyTorch's). TopK ranks each
element by counting the elements ahead of it (ties: the lower index first, as ONNX says), so it
needs no sort op and its values differentiate through take_along_axis.

NonZero, Unique, NonMaxSuppression and Compress on a run-time condition have outputs whose length
depends on the values: gcompile's shapes are fixed when the model is traced, so they are refused by
name (NonZero, Unique and Compress run at import time where their operands are known there).
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...frontend.tensor import Tensor
from ...ir import dims
from ...ir.evaluate import constant_value
from ...ops.shape_rules import normalize_axis
from ..table import SymInts, onnx_op

_INT64 = np.dtype(np.int64)


def _sizes(n, shape: tuple) -> np.ndarray | Tensor:
    """`shape` as an int64 vector: a constant, or computed at run time where a dim is symbolic."""
    if dims.is_static(shape):
        return np.asarray(shape, np.int64)
    return n.inliner.materialize(SymInts(np.asarray(shape, dtype=object)))


def _wrapped(n, indices, sizes: tuple):
    """int64 indices with negative entries counted from the end of their axis (`sizes`, broadcast)."""
    idx = F.cast(indices, np.int64)
    return F.where(F.less(idx, np.int64(0)), idx + _sizes(n, sizes), idx)


def _linear(n, indices, shape: tuple):
    """Tuples of indices (last axis) into `shape` as linear indices into its flattening (row-major)."""
    if any(not isinstance(d, int) for d in shape[1:]):
        raise n.unsupported(f"indexing into axes of symbolic size {shape}")
    idx = _wrapped(n, indices, shape)
    strides = np.asarray([int(np.prod(shape[j + 1:], dtype=np.int64)) for j in range(len(shape))], np.int64)
    return F.sum(idx * strides, -1)


def _depth(n, indices) -> int:
    k = indices.shape[-1] if indices.ndim else None
    if not isinstance(k, int):
        raise n.unsupported(f"indices of shape {tuple(indices.shape)} (their last axis must have a static size)")
    return k


@onnx_op("GatherND")
def _gather_nd(n, x, indices):
    b, k = n.attr("batch_dims", 0), _depth(n, indices)
    if x.ndim < b + k:
        raise n.unsupported(f"{k} indices after {b} batch dims into a rank-{x.ndim} input")
    lead, indexed, rest = x.shape[:b], x.shape[b:b + k], x.shape[b + k:]
    lin = _linear(n, indices, indexed)
    size = dims.product(indexed)
    if b:
        offsets = F.arange(dims.product(lead), dtype=np.int64) * np.int64(size)
        lin = lin + F.reshape(offsets, tuple(lead) + (1,) * (lin.ndim - b))
    flat = F.reshape(x, (dims.product(tuple(lead) + (size,)),) + tuple(rest))
    return F.take(flat, lin, axis=0)


def _hits(base_shape: tuple, scatter) -> Tensor:
    """True where `scatter` (a function adding ones into zeros of base_shape) reaches."""
    return F.greater(scatter(F.full(base_shape, 0, np.float32), np.float32), np.float32(0))


_REDUCE = {"mul": "prod", "max": "amax", "min": "amin"}     # ONNX's reduction -> F.scatter_reduce's


def _scatter(n, data, scatter, reduce):
    """data with scattered updates, for ONNX's reductions none (replace) and add (`scatter`: a function
    adding updates, or ones, into a base), mul, max and min (`reduce`: F.scatter_reduce's name)."""
    reduction = n.attr("reduction", "none")
    if reduction == "add":
        return scatter(data, None)
    if reduction in _REDUCE:
        return reduce(_REDUCE[reduction])
    if reduction != "none":
        raise n.unsupported(f"reduction {reduction!r} (supported: none, add, mul, max, min)")
    placed = scatter(F.zeros_like(data), None)
    return F.where(_hits(tuple(data.shape), scatter), placed, data)


def _progression(n, indices, size) -> tuple[int, int, int] | None:
    """(start, stop, step) where indices known at import time (m, 1) into an axis of `size` name
    the positions of one slice, increasing: PyTorch's exporter writes a slice assignment
    (x[:, 1:] = y, slice_scatter) as a ScatterND of such indices, the axis moved first. Indices
    left to run time for their size (over the import-time fold bound, from constants alone) are
    computed here: at most one per position of the axis."""
    if not isinstance(size, int):
        return None
    if isinstance(indices, Tensor) and indices.ref in n.inliner.deferred and indices.ndim == 2 \
            and isinstance(indices.shape[0], int) and indices.shape[0] <= size:
        indices = constant_value(indices.graph, indices.ref)
    if not isinstance(indices, np.ndarray) or indices.ndim != 2 or not len(indices):
        return None
    idx = indices[:, 0].astype(np.int64)
    idx = np.where(idx < 0, idx + size, idx)
    step = int(idx[1] - idx[0]) if len(idx) > 1 else 1
    if step < 1 or idx.min() < 0 or idx.max() >= size or not np.array_equal(idx, idx[0] + step * np.arange(len(idx))):
        return None
    return int(idx[0]), int(idx[-1]) + 1, step


@onnx_op("ScatterND")
def _scatter_nd(n, data, indices, updates):
    k = _depth(n, indices)
    run = _progression(n, indices, data.shape[0]) if k == 1 and n.attr("reduction", "none") == "none" else None
    if run is not None:       # a slice of axis 0 replaced: its gradients are the slice and the rest
        start, stop, step = run
        return F.slice_scatter(data, updates, 0, start, stop, step)
    indexed, rest = tuple(data.shape[:k]), tuple(data.shape[k:])
    lin = _linear(n, indices, indexed)
    m = dims.product(lin.shape)
    lin = F.reshape(lin, (m,))
    flat_shape = (dims.product(indexed),) + rest

    def scatter(base, ones_dtype):
        base = F.reshape(base, flat_shape)
        upd = F.reshape(updates, (m,) + rest) if ones_dtype is None else F.full((m,) + rest, 1, ones_dtype)
        return F.reshape(F.scatter_add(base, lin, upd, 0), tuple(data.shape))

    def reduce(how):
        rows = F.broadcast_to(F.reshape(lin, (m,) + (1,) * len(rest)), (m,) + rest)
        out = F.scatter_reduce(F.reshape(data, flat_shape), 0, rows, F.reshape(updates, (m,) + rest), how)
        return F.reshape(out, tuple(data.shape))
    return _scatter(n, data, scatter, reduce)


@onnx_op("ScatterElements", "Scatter")
def _scatter_elements(n, data, indices, updates):
    axis = normalize_axis(n.attr("axis", 0), data.ndim)
    idx = _wrapped(n, indices, (data.shape[axis],))
    pads = []
    for a, (d, i) in enumerate(zip(data.shape, indices.shape)):
        if a == axis or d == i:
            pads.append((0, 0))
        elif isinstance(d, int) and isinstance(i, int):
            pads.append((0, d - i))            # indices may cover less than data off the axis: pad with no-ops
        else:
            raise n.unsupported(f"indices of shape {tuple(indices.shape)} into data of shape {tuple(data.shape)}")
    padded = any(p != (0, 0) for p in pads)
    if padded:
        idx = F.pad(idx, tuple(pads))

    def scatter(base, ones_dtype):
        upd = updates if ones_dtype is None else F.full(tuple(indices.shape), 1, ones_dtype)
        return F.scatter_add_along_axis(base, idx, F.pad(upd, tuple(pads)) if padded else upd, axis)

    def reduce(how):
        return F.scatter_reduce(data, axis, _wrapped(n, indices, (data.shape[axis],)), updates, how)
    return _scatter(n, data, scatter, reduce)


@onnx_op("ReverseSequence")
def _reverse_sequence(n, x, lengths):
    """The first lengths[b] steps of each batch entry b reversed along the time axis, the rest kept: a
    gather along time at position length - 1 - t for t < length, t after."""
    time, batch = n.attr("time_axis", 0), n.attr("batch_axis", 1)
    if {time, batch} != {0, 1} or x.ndim < 2:
        raise n.unsupported(f"time_axis {time} and batch_axis {batch} on a rank-{x.ndim} input (0 and 1, either way)")
    steps = x.shape[time]
    t = F.reshape(F.arange(steps), (steps, 1) if time == 0 else (1, steps))
    length = F.reshape(F.cast(lengths, np.int64), (1, -1) if time == 0 else (-1, 1))
    source = F.where(F.less(t, length), length - 1 - t, t)            # (time, batch) in the input's order
    source = F.reshape(source, tuple(source.shape) + (1,) * (x.ndim - 2))
    return F.take_along_axis(x, F.broadcast_to(source, tuple(x.shape)), time)


@onnx_op("TopK")
def _top_k(n, x, k):
    """F.topk: the k largest (or smallest) along the axis, ties in index order as ONNX says; the
    order with sorted=0 is unspecified, so it is sorted too."""
    k = int(n.known(k, "K").reshape(-1)[0])
    axis = normalize_axis(n.attr("axis", -1), x.ndim)
    size = x.shape[axis]
    if k < 0 or (isinstance(size, int) and k > size):
        raise n.unsupported(f"K={k} for an axis of size {size}")
    return F.topk(x, k, axis=axis, largest=bool(n.attr("largest", 1)), sorted=True)


def _data_dependent(n):
    return n.unsupported(f"{n.op_type} has an output whose shape depends on the values of its input (data-dependent); "
                         "gcompile fixes every shape when it traces the model, so it imports this op only where its "
                         "operands are known at import time (refused)")


@onnx_op("NonZero")
def _non_zero(n, x):
    if not isinstance(x, np.ndarray):
        raise _data_dependent(n)
    return np.asarray(np.nonzero(x), np.int64).reshape(x.ndim, -1)


@onnx_op("Compress")
def _compress(n, x, condition):
    if not isinstance(condition, np.ndarray):
        raise _data_dependent(n)
    picked = np.nonzero(condition.reshape(-1))[0].astype(np.int64)
    axis = n.attr("axis")
    return F.take(x, picked, None if axis is None else normalize_axis(axis, x.ndim))


@onnx_op("Unique", "NonMaxSuppression")
def _refused(n, *operands):
    raise _data_dependent(n)
