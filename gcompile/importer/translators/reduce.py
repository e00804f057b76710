"""ONNX translators for reductions (ReduceSum ... ReduceLogSumExp, ArgMax, ArgMin), CumSum and CumProd.

Each translator writes the ONNX op's semantics with gcompile ops, so the imported graph
differentiates to any order through the existing VJP rules. ArgMax and ArgMin (integer results, no
gradient) compare with the reduced extremum.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ir.dtypes import is_float
from ...ops.shape_rules import normalize_axes, normalize_axis
from ..table import onnx_op


# -- reductions ----------------------------------------------------------------------------------------------
def _reduce_axes(n, x, axes_operand):
    """The axes to reduce (a tuple), or None for "no reduction" (noop_with_empty_axes)."""
    axes = n.attr("axes") if n.has_attr("axes") else (
        None if axes_operand is None else n.ints(axes_operand, "axes"))
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return normalize_axes(axes, x.ndim)


def _reduction(body, empty=None):
    """The translator of a reduction `body`; over an empty axis a reduction with no identity element
    (`empty`: x's dtype -> the value ONNX gives, the least or greatest value of the type) is that
    constant."""
    def translate(n, x, axes=None):
        ax = _reduce_axes(n, x, axes)
        if ax is None:
            return F.identity(x)
        keep = bool(n.attr("keepdims", 1))
        if empty is not None and any(x.shape[a] == 0 for a in ax):
            shape = tuple(1 if a in ax else d for a, d in enumerate(x.shape) if keep or a not in ax)
            return F.full(shape, empty(np.dtype(x.dtype)), x.dtype)
        return body(x, ax, keep)
    return translate


def _least(dtype):
    return -np.inf if is_float(dtype) else False if dtype.kind == "b" else np.iinfo(dtype).min


def _greatest(dtype):
    return np.inf if is_float(dtype) else True if dtype.kind == "b" else np.iinfo(dtype).max


_REDUCTIONS = {
    "ReduceSum": (lambda x, ax, k: F.sum(x, ax, keepdims=k), None),
    "ReduceMean": (lambda x, ax, k: F.mean(x, ax, keepdims=k), None),
    "ReduceMax": (lambda x, ax, k: F.max(x, ax, keepdims=k), _least),
    "ReduceMin": (lambda x, ax, k: F.min(x, ax, keepdims=k), _greatest),
    "ReduceProd": (lambda x, ax, k: F.prod(x, ax, keepdims=k), None),
    "ReduceL1": (lambda x, ax, k: F.sum(F.abs(x), ax, keepdims=k), None),
    "ReduceL2": (lambda x, ax, k: F.sqrt(F.sum(x * x, ax, keepdims=k)), None),
    "ReduceSumSquare": (lambda x, ax, k: F.sum(x * x, ax, keepdims=k), None),
    "ReduceLogSum": (lambda x, ax, k: F.log(F.sum(x, ax, keepdims=k)), None),
    "ReduceLogSumExp": (lambda x, ax, k: F.logsumexp(x, ax, keepdims=k), _least),    # log of an empty sum
}
for _op, (_body, _empty) in _REDUCTIONS.items():
    onnx_op(_op)(_reduction(_body, _empty))


@onnx_op("ArgMax", "ArgMin")
def _arg_extremum(n, x):
    """The first (or, with select_last_index, the last) position holding the maximum (minimum) along the
    axis, found by comparing with the reduced extremum; a NaN counts as the extremum, as in numpy."""
    axis = normalize_axis(n.attr("axis", 0), x.ndim)
    size = x.shape[axis]
    if size == 0:
        raise n.unsupported(f"{n.op_type} over an empty axis")
    reduce = F.max if n.op_type == "ArgMax" else F.min
    extremum = reduce(x, axis, keepdims=True)
    hit = F.equal(x, extremum)
    if is_float(np.dtype(x.dtype)):
        hit = F.logical_or(hit, F.logical_and(F.not_equal(x, x), F.not_equal(extremum, extremum)))
    position = F.reshape(F.arange(size), (size,) + (1,) * (x.ndim - axis - 1))
    keep = bool(n.attr("keepdims", 1))
    if n.attr("select_last_index", 0):
        return F.max(F.where(hit, position, np.int64(-1)), axis, keepdims=keep)
    return F.min(F.where(hit, position, np.int64(np.iinfo(np.int64).max)), axis, keepdims=keep)


# -- running sums and products ------------------------------------------------------------------------------
@onnx_op("CumSum", "CumProd")
def _cumulative(n, x, axis):
    axis = normalize_axis(int(n.known(axis, "axis").reshape(-1)[0]), x.ndim)
    scan = F.cumsum if n.op_type == "CumSum" else F.cumprod
    total = scan(x, axis, reverse=bool(n.attr("reverse", 0)), exclusive=bool(n.attr("exclusive", 0)))
    return F.cast(total, x.dtype)   # F's scans widen small ints as numpy does; ONNX keeps the dtype
