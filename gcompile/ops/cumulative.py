"""Scans along one axis: cumsum and cumprod (ONNX CumSum and CumProd), logcumsumexp, cummax and
cummin.

Both primitive scans take `exclusive` (each output leaves its own element out) and `reverse`
(the scan runs from the end of the axis), as ONNX's do: the gradient of a scan is the same
scan of the cotangent run the other way, and reduce_prod's gradient is the product of an
exclusive scan from each side, which never divides by an input.

cumprod's own gradient never divides by an input either. dx_j = (Π_{k<j} x_k)·s_j, where
s_j = Σ_{i≥j} g_i Π_{j<k≤i} x_k follows s_j = g_j + x_(j+1)·s_(j+1): a linear recurrence solved by
a Hillis-Steele scan of products and sums, so zeros get exact derivatives of every order.
Along a symbolic axis (where the step count is unknown) a first-order form is used instead:
before the first zero of the scan dx_j = Σ_{i≥j} g_i·y_i / x_j is exact (x_j is nonzero), the
first zero gets Σ_{i≥j} g_i times the scan with that zero read as 1, and later positions get 0
(each output reading them also holds the first zero).

cummax and cummin scan (value, index) pairs with Hillis-Steele steps, keeping the later pair on a
tie or a NaN (PyTorch's rule: the last index of the running extremum, NaN propagating); the values
are then read from x at those indices, so the gradient reaches exactly the positions picked.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import defop
from .basic import cast, stop_gradient
from .elementwise import equal, greater_equal, logaddexp, logical_and, logical_or, negative, not_equal, where
from .indexing import pad, slice_axes, take_along_axis
from .shape import broadcast_to, ravel
from .shape_rules import axis_for

__all__ = ["cummax", "cummin", "cumprod", "cumsum", "logcumsumexp"]


def accumulator_dtype(dtype: np.dtype) -> np.dtype:
    """numpy's accumulator: bools and signed integers sum (and multiply) in int64, unsigned ones in uint64."""
    kind = np.dtype(dtype).kind
    return np.dtype(np.int64) if kind in "bi" else np.dtype(np.uint64) if kind == "u" else np.dtype(dtype)


def _scan_operand(x, axis, what: str) -> tuple[Tensor, int]:
    x = as_tensor(x)
    if axis is None:       # numpy: the flattened tensor
        x, axis = ravel(x), 0
    return cast(x, accumulator_dtype(x.dtype)), axis_for(axis, x.ndim, what)


def cumsum(x, axis=None, *, reverse: bool = False, exclusive: bool = False) -> Tensor:
    """Running sums along `axis` (numpy.cumsum; axis=None scans the flattened tensor). Integers
    and bools sum in int64 as in numpy and PyTorch. `reverse` runs from the end of the axis and
    `exclusive` leaves each position's own element out (both ONNX CumSum options; PyTorch has
    neither)."""
    x, axis = _scan_operand(x, axis, "cumsum")
    return apply("cumsum", [x], axis=axis, exclusive=bool(exclusive), reverse=bool(reverse))


def cumprod(x, axis=None, *, reverse: bool = False, exclusive: bool = False) -> Tensor:
    """Running products along `axis` (numpy.cumprod), with cumsum's options. The gradient is exact
    where inputs are zero (see the module docstring)."""
    x, axis = _scan_operand(x, axis, "cumprod")
    return apply("cumprod", [x], axis=axis, exclusive=bool(exclusive), reverse=bool(reverse))


def _scan_reference(accumulate, identity):
    def reference(x, axis, exclusive, reverse):
        if reverse:
            x = np.flip(x, axis)
        y = accumulate(x, axis=axis, dtype=x.dtype)
        if exclusive:
            head = np.full(y.shape[:axis] + (min(1, y.shape[axis]),) + y.shape[axis + 1:], identity, y.dtype)
            y = np.concatenate([head, np.delete(y, -1, axis) if y.shape[axis] else y], axis)
        return np.flip(y, axis) if reverse else y
    return reference


def _lower_scan(onnx_op):
    def lower(ctx, names, node):
        a = node.attrs
        if onnx_op == "CumProd" and (ctx.opset < 26 or not ctx.target.cumprod):
            if isinstance(ctx.graph.type_of(node.inputs[0]).shape[a["axis"]], int):
                return _lower_cumprod_doubling(ctx, names[0], node)
            return _lower_cumprod_masked(ctx, names[0], node)
        return ctx.emit(onnx_op, [names[0], ctx.const(np.asarray(a["axis"], np.int64))],
                        exclusive=int(a["exclusive"]), reverse=int(a["reverse"]))
    return lower


def _lower_cumprod_doubling(ctx, x, node):
    """CumProd without the op (before opset 26, or for a target without it: OpenVINO 2026.4 has no
    conversion for CumProd-26) along a static axis: Hillis-Steele steps, y times y moved 1, 2, 4,
    ... positions along the scan with ones moved in (after moving x one position for an
    exclusive scan), ⌈log2 n⌉ products."""
    a = node.attrs
    t = ctx.graph.type_of(node.inputs[0])
    axis, n, rank = a["axis"], t.shape[a["axis"]], len(t.shape)
    one = ctx.const(np.ones((), t.dtype))

    def moved(v, step):
        begins, ends = [0] * rank, [0] * rank
        begins[axis], ends[axis] = (-step, step) if a["reverse"] else (step, -step)
        return ctx.pad(v, begins, ends, fill=one)
    y = moved(x, 1) if a["exclusive"] and n > 0 else x
    step = 1
    while step < n:
        y = ctx.emit("Mul", [y, moved(y, step)])
        step *= 2
    return y if y != x else ctx.emit("Identity", [x])


def _lower_cumprod_masked(ctx, x, node):
    """CumProd without the op along a symbolic axis (a static one takes _lower_cumprod_doubling):
    y_i = Π_j where(j scans into i, x_j, 1), one (n, n) mask per axis (quadratic in the axis
    length)."""
    a = node.attrs
    t = ctx.graph.type_of(node.inputs[0])
    axis, n = a["axis"], t.shape[a["axis"]]
    idx = ctx.index_range(n)
    i = ctx.emit("Unsqueeze", [idx, ctx.int64s([1])])
    j = ctx.emit("Unsqueeze", [idx, ctx.int64s([0])])
    compare = {(False, False): "LessOrEqual", (True, False): "Less", (False, True): "GreaterOrEqual",
               (True, True): "Greater"}[(a["exclusive"], a["reverse"])]
    mask = ctx.emit(compare, [j, i])
    mask = ctx.emit("Reshape", [mask, ctx.shape_tensor((n, n) + (1,) * (len(t.shape) - axis - 1))])
    spread = ctx.emit("Where", [mask, ctx.emit("Unsqueeze", [x, ctx.int64s([axis])]),
                                ctx.const(np.ones((), t.dtype))])
    return ctx.emit("ReduceProd", [spread, ctx.int64s([axis + 1])], keepdims=0)


def _scan_infer(types, axis, exclusive, reverse):
    return [tensor_type(types[0].dtype, types[0].shape)]


def _cumsum_vjp(g, ins, outs, axis, exclusive, reverse):
    if not is_float(ins[0].dtype):
        return [None]
    return [apply("cumsum", [g[0]], axis=axis, exclusive=exclusive, reverse=not reverse)]


def _next(v: Tensor, step: int, axis: int, reverse: bool) -> Tensor:
    """v moved `step` positions against the scan, so each position reads the value `step` later along
    it (0 past the end)."""
    n = v.shape[axis]
    pads = [(0, 0)] * v.ndim
    pads[axis] = (step, 0) if reverse else (0, step)
    start, end = (0, n - step) if reverse else (step, n)
    return pad(slice_axes(v, (axis,), (start,), (end,), (1,)), pads)


def _later_recurrence(a: Tensor, b: Tensor, axis: int, reverse: bool) -> Tensor:
    """s with s_j = b_j + a_j·s_(j+1), j+1 the next position along the scan and s 0 past the end:
    a Hillis-Steele scan of affine maps (⌈log2 n⌉ steps of products and sums, no division)."""
    step, n = 1, a.shape[axis]
    while step < n:
        b = b + a * _next(b, step, axis, reverse)
        if 2 * step < n:
            a = a * _next(a, step, axis, reverse)
        step *= 2
    return b


def _cumprod_vjp(g, ins, outs, axis, exclusive, reverse):
    x, y, g = ins[0], outs[0], g[0]
    if not is_float(x.dtype):
        return [None]

    def scan(op, v, exclusive=exclusive, reverse=reverse):
        return apply(op, [v], axis=axis, exclusive=exclusive, reverse=reverse)

    if isinstance(x.shape[axis], int):
        # dx_j = (Π_{k<j} x_k)·s_j with s_j = Σ_{i≥j} g_i Π_{j<k≤i} x_k = g_j + x_(j+1)·s_(j+1)
        # (exclusive: s_j = g_(j+1) + x_(j+1)·s_(j+1)): products and sums only, exact at zeros to every order
        step = lambda v: _next(v, 1, axis, reverse)   # noqa: E731
        s = _later_recurrence(step(x), step(g) if exclusive else g, axis, reverse)
        return [scan("cumprod", x, exclusive=True) * s]
    # a symbolic axis: the division-free form below, exact at zeros to first order
    zero = equal(x, 0)
    seen = scan("cumsum", cast(zero, x.dtype), exclusive=False)   # zeros at or before each position
    before = equal(seen, 0)
    first = logical_and(zero, equal(seen, 1))
    later = lambda v: scan("cumsum", v, reverse=not reverse)    # noqa: E731 - Σ over the outputs reading each position
    away = later(g * y) / where(before, x, 1)
    at_first = later(g * scan("cumprod", where(first, 1, x)))
    return [where(before, away, where(first, at_first, 0))]


defop("cumsum", infer=_scan_infer, reference=_scan_reference(np.cumsum, 0), lower=_lower_scan("CumSum"),
      vjp=_cumsum_vjp)
defop("cumprod", infer=_scan_infer, reference=_scan_reference(np.cumprod, 1), lower=_lower_scan("CumProd"),
      vjp=_cumprod_vjp)


def logcumsumexp(x, axis=None) -> Tensor:
    """log(cumsum(exp(x))) along `axis`, without overflow or underflow (torch.logcumsumexp; axis=None
    scans the flattened tensor). Computed as a Hillis-Steele scan of logaddexp: ⌈log2 n⌉ steps,
    each combining every position with the one 2^k before it, so the axis size must be static.
    Gradients come from logaddexp's, to any order."""
    x = as_tensor(x)
    if not is_float(x.dtype):
        x = cast(x, np.float32)
    if axis is None:
        x, axis = ravel(x), 0
    axis = axis_for(axis, x.ndim, "logcumsumexp")
    n = x.shape[axis]
    if not isinstance(n, int):
        raise UnsupportedError(f"logcumsumexp along axis {axis}, whose size {n!r} is symbolic, is not supported: "
                               "the scan's step count depends on the size")
    pads = [(0, 0)] * x.ndim
    step = 1
    while step < n:
        pads[axis] = (step, 0)
        earlier = pad(slice_axes(x, (axis,), (0,), (n - step,), (1,)), pads, value=-np.inf)
        x = logaddexp(x, earlier)
        step *= 2
    return x


def _running_extreme(x, axis, largest: bool, what: str) -> tuple[Tensor, Tensor]:
    x = as_tensor(x)
    if x.dtype == np.bool_:
        x = cast(x, np.uint8)
    if axis is None:
        x, axis = ravel(x), 0
    axis = axis_for(axis, x.ndim, what)
    n = x.shape[axis]
    if not isinstance(n, int):
        raise UnsupportedError(f"{what} along axis {axis}, whose size {n!r} is symbolic, is not supported: the "
                               "scan's step count depends on the size")
    floating = is_float(x.dtype)
    key = stop_gradient(x)
    if not largest:     # the running minimum is the running maximum of -x (of ~x for integers, ties kept)
        key = negative(key) if floating else as_tensor(np.invert(np.zeros((), x.dtype))) - key  # ~x: no overflow
    lowest = -np.inf if is_float(key.dtype) else np.iinfo(key.dtype).min
    index = broadcast_to(np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (x.ndim - axis - 1)), x.shape)
    pads = [(0, 0)] * x.ndim
    step = 1
    while step < n:
        pads[axis] = (step, 0)
        earlier = pad(slice_axes(key, (axis,), (0,), (n - step,), (1,)), pads, value=lowest)
        earlier_index = pad(slice_axes(index, (axis,), (0,), (n - step,), (1,)), pads, value=-1)
        later = greater_equal(key, earlier)
        if floating:                      # NaN counts as the largest, and a later NaN wins
            later = logical_or(not_equal(key, key), logical_and(later, equal(earlier, earlier)))
        key, index = where(later, key, earlier), where(later, index, earlier_index)
        step *= 2
    return take_along_axis(x, index, axis), index


def cummax(x, axis=None) -> tuple[Tensor, Tensor]:
    """torch.cummax: the running maximum along `axis` (None: of the flattened x) and the int64 index
    where it was taken, the last one on ties; a NaN propagates (index of the latest NaN). The
    gradient goes to the indexed positions."""
    return _running_extreme(x, axis, True, "cummax")


def cummin(x, axis=None) -> tuple[Tensor, Tensor]:
    """torch.cummin: the running minimum along `axis` and its int64 index (the last on ties; NaN
    propagates), as cummax."""
    return _running_extreme(x, axis, False, "cummin")
