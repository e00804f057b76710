"""Order along an axis: topk, sort, argsort, median (ONNX TopK), argmax and argmin (ONNX ArgMax/ArgMin).

One primitive, `topk`, returns the k largest or smallest values and their int64 indices. ONNX
TopK puts equal values in index order, so every sort here is stable, descending ones included
(equal values keep their original order, as torch.sort(stable=True) and numpy's stable sort).
NaN counts as larger than every number (numpy's and PyTorch's order), by sorting a key with NaN
read as +inf and gathering the values back from x; a NaN and a +inf in the same slice keep their
index order (PyTorch puts the NaN after the +inf). The gradient of the values is scattered back
to the positions they came from.

median is the lower median (the element at (n-1)//2 of the sorted slice, as PyTorch's, where
numpy averages the two middle ones), NaN if the slice holds NaN; its gradient goes to that one
element, the first of equal values in index order (PyTorch's full median() shares it among
equal values instead, and its median(dim) picks an unspecified one). argmax/argmin give the
first occurrence, and the first NaN where there is one, as numpy and PyTorch.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from .basic import cast, zeros_like
from .division import floor_divide
from .elementwise import where
from .indexing import scatter_add_along_axis, slice_axes, take
from .nonfinite import isnan
from .reduce import any as reduce_any
from .reduce import count
from .shape import expand_dims, ravel, reshape, squeeze
from .shape_rules import axis_for

__all__ = ["argmax", "argmin", "argsort", "median", "sort", "topk"]


def _operand(x, axis, what: str) -> tuple[Tensor, int]:
    x = as_tensor(x)
    if x.dtype == np.bool_:
        raise ShapeError(f"{what}: x must be a numeric tensor, got bool (at {user_location()})")
    if axis is None:
        x, axis = ravel(x), 0
    return x, axis_for(axis, x.ndim, what)


def topk(x, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) entries along `axis` and their int64 indices, in order (torch.topk;
    the result is always sorted). Equal values come in index order; NaN counts as the largest."""
    x, ax = _operand(x, axis, "topk")
    k = int(k)
    n = x.shape[ax]
    if k < 0 or (isinstance(n, int) and k > n):
        raise ShapeError(f"topk: k={k} must be between 0 and the size {n!r} of axis {ax} of x "
                         f"{format_shape(x.shape)} (at {user_location()})")
    values, indices = apply_n("topk", [x], k=k, axis=ax, largest=bool(largest))
    return values, indices


def sort(x, axis: int | None = -1, descending: bool = False, stable: bool = True, kind=None) -> Tensor:
    """x sorted along `axis` (None: the flattened x), ascending unless `descending` (numpy.sort,
    torch.sort(...).values). Always stable; `kind` is accepted for numpy and ignored."""
    x, ax = _operand(x, axis, "sort")
    return apply_n("topk", [x], k=None, axis=ax, largest=bool(descending))[0]


def argsort(x, axis: int | None = -1, descending: bool = False, stable: bool = True, kind=None) -> Tensor:
    """The int64 indices that sort x along `axis` (numpy.argsort, torch.argsort); always stable."""
    x, ax = _operand(x, axis, "argsort")
    return apply_n("topk", [x], k=None, axis=ax, largest=bool(descending))[1]


def _topk_infer(types, k, axis, largest):
    shape = list(types[0].shape)
    if k is not None:
        shape[axis] = k
    return [tensor_type(types[0].dtype, shape), tensor_type(np.int64, shape)]


def _sort_key(x, largest):
    """A key whose stable ascending argsort is the op's order (NaN as +inf, largest first if asked)."""
    if is_float(x.dtype):
        key = np.where(np.isnan(x), np.inf, x)
        return -key if largest else key
    return ~x if largest else x          # bitwise not reverses the order of integers without overflow


def _topk_reference(x, k, axis, largest):
    order = np.argsort(_sort_key(x, largest), axis=axis, kind="stable")
    if k is not None:
        order = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, order, axis), order.astype(np.int64)


def _lower_topk(ctx, names, node):
    a = node.attrs
    x, t = names[0], ctx.graph.type_of(node.inputs[0])
    k = ctx.int64s([a["k"]]) if a["k"] is not None else ctx.shape_tensor((t.shape[a["axis"]],))
    floating = is_float(t.dtype)
    key = x
    if floating:
        key = ctx.emit("Where", [ctx.emit("IsNaN", [x]), ctx.const(np.asarray(np.inf, t.dtype)), x])
    values, indices = ctx.emit("TopK", [key, k], n_out=2, axis=a["axis"], largest=int(a["largest"]), sorted=1)
    if floating and ctx.is_read(node, 0):        # the NaNs back, from x
        values = ctx.emit("GatherElements", [x, indices], axis=a["axis"])
    return [values, indices]


def _topk_vjp(g, ins, outs, k, axis, largest):
    if g[0] is None:
        return [None]
    return [scatter_add_along_axis(zeros_like(ins[0]), outs[1], g[0], axis)]


defop("topk", infer=_topk_infer, reference=_topk_reference, lower=_lower_topk, vjp=_topk_vjp, n_outputs=2)


# -- median ------------------------------------------------------------------------------------------------
def median(x, axis: int | None = None, keepdims: bool = False, return_indices: bool = False):
    """The lower median along `axis` (None: of all elements), torch.median's values: the element at
    (n-1)//2 of the sorted slice, NaN if the slice holds NaN. The gradient goes to that element.
    With return_indices, also its int64 index along `axis` (torch.median(x, dim)'s indices; of equal
    values, the one a stable sort puts in the middle)."""
    x = as_tensor(x)
    full_rank = x.ndim
    axis = None if full_rank == 0 else axis          # torch: dim 0 or -1 of a 0-d tensor is its one element
    x, ax = _operand(x, axis, "median")
    n = x.shape[ax]
    if n == 0:
        raise ShapeError(f"median: axis {ax} of x {format_shape(x.shape)} is empty (at {user_location()})")
    if isinstance(n, int):
        k = (n + 1) // 2
        smallest, order = topk(x, k, ax, largest=False)
        middle, index = (slice_axes(t, (ax,), (k - 1,), (k,), (1,)) for t in (smallest, order))
    else:         # a symbolic axis: sort it all and take the middle at run time
        position = floor_divide(cast(count(x, (ax,)), np.int64) - 1, 2)
        middle, index = (expand_dims(take(t, position, ax), ax) for t in (sort(x, ax), argsort(x, ax)))
    if is_float(x.dtype):
        nan = reduce_any(isnan(x), ax, keepdims=True)
        middle = where(nan, np.nan, middle)
        index = where(nan, argmax(cast(isnan(x), np.int64), ax, keepdims=True), index)    # the first NaN, as torch
    if axis is None:
        shape = (1,) * full_rank if keepdims else ()
        middle, index = reshape(middle, shape), reshape(index, shape)
    elif not keepdims:
        middle, index = squeeze(middle, ax), squeeze(index, ax)
    return (middle, index) if return_indices else middle


# -- argmax and argmin -------------------------------------------------------------------------------------
def _arg(op: str):
    def fn(x, axis: int | None = None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x)
        rank = x.ndim
        x, ax = _operand(x, axis, op)
        if x.shape[ax] == 0:
            raise ShapeError(f"{op}: axis {ax} of x {format_shape(x.shape)} is empty: there is no index to give "
                             f"(at {user_location()})")
        out = apply(op, [x], axis=ax, keepdims=bool(keepdims and axis is not None))
        return reshape(out, (1,) * rank) if keepdims and axis is None else out
    fn.__name__ = op
    fn.__doc__ = (f"The int64 index of the {'largest' if op == 'argmax' else 'smallest'} entry along `axis` "
                  f"(None: of the flattened x), numpy.{op}: the first one of equal values, and the first NaN "
                  "where there is one; an empty axis is refused, as torch. No gradient.")
    return fn


argmax, argmin = _arg("argmax"), _arg("argmin")


def _arg_infer(types, axis, keepdims):
    shape = tuple(1 if i == axis else d for i, d in enumerate(types[0].shape) if keepdims or i != axis)
    return [tensor_type(np.int64, shape)]


def _lower_arg(onnx_op):
    def lower(ctx, names, node):
        a = node.attrs
        x, t = names[0], ctx.graph.type_of(node.inputs[0])
        found = ctx.emit(onnx_op, [x], axis=a["axis"], keepdims=int(a["keepdims"]), select_last_index=0)
        if not is_float(t.dtype):
            return found
        nan = ctx.emit("Cast", [ctx.emit("IsNaN", [x])], to=6)      # int32
        first_nan = ctx.emit("ArgMax", [nan], axis=a["axis"], keepdims=int(a["keepdims"]), select_last_index=0)
        has_nan = ctx.emit("ReduceMax", [nan, ctx.int64s([a["axis"]])], keepdims=int(a["keepdims"]))
        has_nan = ctx.emit("Cast", [has_nan], to=9)                 # bool
        return ctx.emit("Where", [has_nan, first_nan, found])
    return lower


defop("argmax", infer=_arg_infer, reference=lambda x, axis, keepdims: np.argmax(x, axis=axis, keepdims=keepdims),
      lower=_lower_arg("ArgMax"), traits={Trait.NONDIFF})
defop("argmin", infer=_arg_infer, reference=lambda x, axis, keepdims: np.argmin(x, axis=axis, keepdims=keepdims),
      lower=_lower_arg("ArgMin"), traits={Trait.NONDIFF})
