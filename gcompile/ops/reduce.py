"""Reductions over axes, and sum_to_shape (the adjoint of broadcasting)."""
from __future__ import annotations

import numpy as np
from onnx import helper

from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir import dims
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from . import integers
from .basic import cast, stop_gradient
from .cumulative import accumulator_dtype, cumprod
from .elementwise import equal, exp, log, not_equal, where, zeros_scalar
from .nonfinite import isfinite
from .shape import broadcast_to, reshape
from .shape_rules import normalize_axes, reduced_shape

__all__ = ["all", "any", "count_nonzero", "logsumexp", "max", "mean", "min", "nanmean", "nansum", "prod", "sum",
           "sum_to_shape"]


def _reduce_infer(types, axes, keepdims):
    t = types[0]
    return [tensor_type(t.dtype, reduced_shape(t.shape, axes, keepdims))]


def _lower_reduce(onnx_op):
    def lower(ctx, names, node):
        a = node.attrs
        t = ctx.graph.type_of(node.inputs[0])
        if onnx_op == "ReduceMean":
            return _lower_mean(ctx, names[0], t, node.outputs[0], a["axes"], a["keepdims"])
        ordering = onnx_op in ("ReduceMax", "ReduceMin")
        if integers.orders_wrongly(t.dtype) if ordering else integers.through_float(t.dtype):
            return integers.reduction(ctx, onnx_op, names[0], t, a["axes"], a["keepdims"])
        return ctx.emit(onnx_op, [names[0], ctx.int64s(a["axes"])], keepdims=int(a["keepdims"]))
    return lower


def _lower_mean(ctx, x: str, t, out, axes, keepdims: bool) -> str:
    """The mean of nothing is NaN (numpy, torch), where ONNX Runtime's ReduceMean gives 0: over
    an empty axis it is NaN, and over a symbolic count (which may be 0) the sum divided by it."""
    n = dims.product(t.shape[a] for a in axes)
    if n == 0:
        return ctx.emit("Expand", [ctx.const(np.asarray(np.nan, out.dtype)), ctx.shape_tensor(out.shape)])
    if isinstance(n, int):
        return ctx.emit("ReduceMean", [x, ctx.int64s(axes)], keepdims=int(keepdims))
    count = ctx.emit("Cast", [ctx.dim_scalar(n)], to=helper.np_dtype_to_tensor_dtype(np.dtype(out.dtype)))
    return ctx.emit("Div", [ctx.emit("ReduceSum", [x, ctx.int64s(axes)], keepdims=int(keepdims)), count])


def _reduction(op):
    def fn(x, axis=None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x)
        if op in ("reduce_mean",) and not is_float(x.dtype):
            x = cast(x, np.float32)
        elif op in ("reduce_sum", "reduce_prod"):     # a count of bools, a sum of int8s: int64, as numpy and torch
            x = cast(x, accumulator_dtype(x.dtype))
        axes = normalize_axes(axis, x.ndim)
        if not axes:
            return x
        return apply(op, [x], axes=axes, keepdims=bool(keepdims))
    fn.__name__ = op.replace("reduce_", "")
    return fn


def _kept(g: Tensor, x: Tensor, axes, keepdims) -> Tensor:
    """g (reduced over `axes`) reshaped so it broadcasts against x."""
    return g if keepdims else reshape(g, reduced_shape(x.shape, axes, True))


def _sum_vjp(g, ins, outs, axes, keepdims):
    return [broadcast_to(_kept(g[0], ins[0], axes, keepdims), ins[0].shape)]


def _mean_vjp(g, ins, outs, axes, keepdims):
    x = ins[0]
    # divided before the reshape: a ones seed stays a 0-d numerator (ONNX Runtime's DivMulFusion drops
    # the axes of a [1, 1]-shaped one, which onnxruntime-web then refuses; docs/targets.md)
    return [broadcast_to(_kept(g[0] / count(x, axes), x, axes, keepdims), x.shape)]


def _extremum_vjp(g, ins, outs, axes, keepdims):
    # The gradient goes to the positions holding the extremum, shared equally among ties.
    x = ins[0]
    y = _kept(outs[0], x, axes, keepdims)
    mask = cast(equal(x, y), x.dtype)
    share = mask / sum(mask, axes, keepdims=True)
    return [_kept(g[0], x, axes, keepdims) * share]


def _product_of_others(x: Tensor, axes) -> Tensor:
    """For each element, the product of the other elements of its slice over `axes`, with no
    division (so one zero gives its neighbours' product and two zeros give 0): exclusive scans
    from both ends along the last axis, times the same over the other axes of the products
    along it."""
    *rest, last = axes
    others = cumprod(x, last, exclusive=True) * cumprod(x, last, exclusive=True, reverse=True)
    if rest:
        others = others * _product_of_others(apply("reduce_prod", [x], axes=(last,), keepdims=True), rest)
    return others


def _prod_vjp(g, ins, outs, axes, keepdims):
    x = ins[0]
    if not is_float(x.dtype):
        return [None]
    return [_kept(g[0], x, axes, keepdims) * _product_of_others(x, axes)]


def _np_reduce(fn):
    return lambda x, axes, keepdims: fn(x, axis=axes, keepdims=keepdims)


def _np_extremum(fn, largest: bool):
    """numpy's max or min, with ONNX's value for an empty slice, the identity of the reduction:
    -inf for a max (+inf for a min), or the dtype's lowest (highest) integer, False (True) for a
    bool; numpy raises there, while ONNX Runtime gives it (so any() of nothing is False, all()
    True, and logsumexp of nothing -inf)."""
    def reference(x, axes, keepdims):
        if is_float(x.dtype):
            identity = -np.inf if largest else np.inf
        elif x.dtype.kind == "b":
            identity = not largest
        else:
            info = np.iinfo(x.dtype)
            identity = info.min if largest else info.max
        return fn(x, axis=axes, keepdims=keepdims, initial=identity)
    return reference


defop("reduce_sum", infer=_reduce_infer, reference=_np_reduce(np.sum), lower=_lower_reduce("ReduceSum"),
      vjp=_sum_vjp)
defop("reduce_mean", infer=_reduce_infer, reference=_np_reduce(np.mean), lower=_lower_reduce("ReduceMean"),
      vjp=_mean_vjp)
defop("reduce_max", infer=_reduce_infer, reference=_np_extremum(np.max, True), lower=_lower_reduce("ReduceMax"),
      vjp=_extremum_vjp)
defop("reduce_min", infer=_reduce_infer, reference=_np_extremum(np.min, False), lower=_lower_reduce("ReduceMin"),
      vjp=_extremum_vjp)
defop("reduce_prod", infer=_reduce_infer, reference=_np_reduce(np.prod), lower=_lower_reduce("ReduceProd"),
      vjp=_prod_vjp)

sum = _reduction("reduce_sum")
mean = _reduction("reduce_mean")
max = _reduction("reduce_max")
min = _reduction("reduce_min")
prod = _reduction("reduce_prod")


def logsumexp(x, axis=None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) over axes, shifted by the (gradient-free) max for stability. A slice holding
    +inf gives +inf and one of only -inf (fully masked) gives -inf; an infinite max shifts by 0
    instead, so the gradient is NaN exactly where PyTorch's and JAX's are (at the +inf entries,
    and over a slice of only -inf)."""
    x = as_tensor(x)
    shift = max(x, axis, keepdims=True)
    shift = stop_gradient(where(isfinite(shift), shift, 0))
    out = log(sum(exp(x - shift), axis, keepdims=True)) + shift
    return out if keepdims else reshape(out, reduced_shape(x.shape, normalize_axes(axis, x.ndim), False))


def nansum(x, axis=None, keepdims: bool = False) -> Tensor:
    """The sum over axes with NaN read as 0 (numpy.nansum, torch.nansum); NaN entries get no gradient."""
    x = as_tensor(x)
    if not is_float(x.dtype):
        return sum(x, axis, keepdims)
    return sum(where(not_equal(x, x), zeros_scalar(x), x), axis, keepdims)


def nanmean(x, axis=None, keepdims: bool = False) -> Tensor:
    """The mean over axes of the entries that are not NaN (numpy.nanmean, torch.nanmean): NaN where a
    slice holds only NaN (or nothing); NaN entries get no gradient."""
    x = as_tensor(x)
    if not is_float(x.dtype):
        x = cast(x, np.float32)
    kept = cast(equal(x, x), x.dtype)
    return nansum(x, axis, keepdims) / sum(kept, axis, keepdims)


def _logical(reduction):
    def fn(x, axis=None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x)
        truth = x if x.dtype == np.bool_ else not_equal(x, zeros_scalar(x))
        return cast(reduction(cast(truth, np.uint8), axis, keepdims), np.bool_)
    return fn


all = _logical(min)
any = _logical(max)
all.__name__, any.__name__ = "all", "any"
all.__doc__ = "Whether every element over `axis` is nonzero (numpy.all, torch.all; NaN counts as true): bool."
any.__doc__ = "Whether some element over `axis` is nonzero (numpy.any, torch.any; NaN counts as true): bool."


def count_nonzero(x, axis=None, keepdims: bool = False) -> Tensor:
    """numpy.count_nonzero / torch.count_nonzero (whose `dim` is `axis`): the int64 number of nonzero
    entries (NaN counts) over `axis`, all of them by default."""
    x = as_tensor(x)
    truth = x if x.dtype == np.bool_ else not_equal(x, zeros_scalar(x))
    return sum(cast(truth, np.int64), axis, keepdims)


# -- element counts (symbolic dims resolved at run time) -------------------------------------------
def count(x, axes) -> Tensor:
    """Number of elements of x over `axes`, as a scalar of x's dtype (run-time for symbolic dims)."""
    x = as_tensor(x)
    n = dims.product(x.shape[a] for a in axes)
    if isinstance(n, int):
        return as_tensor(np.asarray(n, x.dtype))
    return apply("count", [x], axes=tuple(axes))


def _lower_count(ctx, names, node):
    dim = dims.product(ctx.graph.type_of(node.inputs[0]).shape[a] for a in node.attrs["axes"])
    n = ctx.shape_tensor((dim,))
    total = ctx.emit("Reshape", [n, ctx.int64s([])])
    return ctx.emit("Cast", [total], to=helper.np_dtype_to_tensor_dtype(node.outputs[0].dtype))


defop("count", infer=lambda types, axes: [tensor_type(types[0].dtype, ())],
      reference=lambda x, axes: np.asarray(np.prod([x.shape[a] for a in axes]), x.dtype),
      lower=_lower_count, traits={Trait.NONDIFF, Trait.CHEAP})


# -- the adjoint of broadcasting ---------------------------------------------------------------------
def sum_to_shape(g, shape) -> Tensor:
    """Sum g over the axes along which `shape` was broadcast to g's shape, giving `shape`."""
    g, shape = as_tensor(g), tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    if axes:
        g = apply("reduce_sum", [g], axes=axes, keepdims=True)
    return reshape(g, shape)

