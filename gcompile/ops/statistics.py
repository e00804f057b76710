"""Spread and size: var and std (with PyTorch's `correction`), vector_norm, matrix_norm, norm and
cond.

var is two passes (the mean, then the mean squared deviation), which float32 needs. std's
gradient is 0 where the variance is 0 (a constant slice), and a norm's gradient is 0 where the
norm is 0, as PyTorch's (the derivatives there are undefined; JAX gives NaN).

vector_norm is one op, so it lowers to ONNX's ReduceL1/ReduceL2 and carries PyTorch's
subgradients: ord ±inf shares the gradient equally among the tied extreme entries, ord 0
(the count of nonzeros) has none, and ord p (negative too) is g·sign(x)·|x|^(p-1)/‖x‖^(p-1),
0 at x = 0. matrix_norm's ord ±1 and ±inf are the extreme column or row sums of |x|; the
spectral norms (ord ±2) are the extreme singular values and the nuclear norm their sum
(ops/decompositions.py), whose gradients U diag(g) Vᵀ are finite.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.dtypes import is_float
from ..ir.registry import defop
from .basic import cast
from .decompositions import svdvals
from .elementwise import abs as absolute
from .elementwise import equal, maximum, not_equal, power, sign, sqrt, where
from .indexing import slice_axes
from .reduce import _kept, _reduce_infer, count, mean
from .reduce import max as reduce_max
from .reduce import min as reduce_min
from .reduce import sum as reduce_sum
from .shape import expand_dims, squeeze, transpose
from .shape_rules import axes_for, normalize_axis
from .solvers import inv

__all__ = ["cond", "matrix_norm", "norm", "std", "var", "vector_norm"]


def _float(x) -> Tensor:
    x = as_tensor(x)
    return x if is_float(x.dtype) else cast(x, np.float32)


def var(x, axis=None, correction: float = 1, keepdims: bool = False) -> Tensor:
    """The variance over `axis`: the sum of squared deviations from the mean divided by N - correction
    (torch.var; correction=0 is numpy's default ddof=0). N - correction <= 0 divides by 0 (NaN or inf),
    as PyTorch does."""
    x = _float(x)
    axes = axes_for(axis, x.ndim, "var")
    d = x - mean(x, axes, keepdims=True)
    dof = maximum(count(x, axes) - correction, 0)
    return reduce_sum(d * d, axes, keepdims=keepdims) / dof


def std(x, axis=None, correction: float = 1, keepdims: bool = False) -> Tensor:
    """sqrt(var(x, axis, correction)) (torch.std); its gradient is 0 where the variance is 0."""
    v = var(x, axis, correction, keepdims)
    flat = equal(v, 0)
    return where(flat, 0, sqrt(where(flat, 1, v)))


# -- vector norms ------------------------------------------------------------------------------------------
def vector_norm(x, ord: float = 2, axis=None, keepdims: bool = False) -> Tensor:
    """(Σ|x|^ord)^(1/ord) over `axis` (all axes by default), as torch.linalg.vector_norm: ord may be
    any p != 0 (a negative p too: 0 if an entry is 0), inf (max |x|), -inf (min |x|) or 0 (the number
    of nonzeros). NaN propagates. Over nothing every norm is 0 (inf's too: the largest of no |x|,
    where torch refuses), but -inf's and a negative p's are +inf."""
    x = _float(x)
    ord = float(ord)
    axes = axes_for(axis, x.ndim, "vector_norm")
    if not axes:            # each entry its own slice (ONNX reads an empty axes list as "all axes")
        return cast(not_equal(x, 0), x.dtype) if ord == 0 else absolute(x)
    return apply("vector_norm", [x], ord=ord, axes=axes, keepdims=bool(keepdims))


def norm(x, ord=None, axis=None, keepdims: bool = False) -> Tensor:
    """numpy.linalg.norm and torch.linalg.norm: ord None is the 2-norm over `axis` (all axes by
    default, of any rank); a number is vector_norm(ord) over one axis (an int `axis`, or a 1-D x)
    and matrix_norm(ord) over two (a pair `axis`, or a 2-D x); "fro" is the Frobenius norm."""
    x = _float(x)
    if ord is None:
        return vector_norm(x, 2, axis, keepdims)
    if isinstance(axis, (int, np.integer)) or (axis is None and x.ndim == 1):
        if isinstance(ord, str):
            raise ShapeError(f"norm: ord {ord!r} is a matrix norm; a vector norm takes a number "
                             f"(at {user_location()})")
        return vector_norm(x, ord, axis, keepdims)
    if axis is None and x.ndim != 2:
        raise ShapeError(f"norm: ord {ord!r} without an axis needs a 1-d or 2-d x, got rank {x.ndim} "
                         f"(at {user_location()})")
    return matrix_norm(x, ord, (-2, -1) if axis is None else axis, keepdims)


def matrix_norm(x, ord="fro", axis=(-2, -1), keepdims: bool = False) -> Tensor:
    """torch.linalg.matrix_norm over the two axes `axis` (rows, columns): "fro" (the square root of
    the sum of squares), 1 / -1 (the largest / smallest column sum of |x|), inf / -inf (the largest
    / smallest row sum), 2 / -2 (the largest / smallest singular value) and "nuc" (the sum of the
    singular values; static sizes along `axis`, as svd)."""
    x = _float(x)
    if not isinstance(axis, (tuple, list)) or len(axis) != 2:
        raise ShapeError(f"matrix_norm: axis must be a pair of axes, got {axis!r} (at {user_location()})")
    rows, cols = (normalize_axis(a, x.ndim) for a in axis)
    if rows == cols:
        raise ShapeError(f"matrix_norm: axis {tuple(axis)} names one axis twice (at {user_location()})")
    if ord == "fro":
        return vector_norm(x, 2, (rows, cols), keepdims)
    if ord in (2, -2, "nuc"):
        return _spectral_norm(x, ord, rows, cols, keepdims)
    if ord not in (1, -1, math.inf, -math.inf):
        raise ShapeError(f"matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r} "
                         f"(at {user_location()})")
    summed, kept = (rows, cols) if abs(ord) == 1 else (cols, rows)       # ord 1: sum down each column
    sums = reduce_sum(absolute(x), summed, keepdims=True)
    y = (reduce_max if ord > 0 else reduce_min)(sums, kept, keepdims=True)
    if ord > 0 and _may_be_empty(x.shape, (kept,)):
        y = maximum(y, 0)                   # the largest of no sums is 0, as torch (a max's own is -inf)
    return y if keepdims else squeeze(y, (rows, cols))


def _spectral_norm(x: Tensor, ord, rows: int, cols: int, keepdims: bool) -> Tensor:
    """The singular values of the (rows, cols) planes: their largest, smallest or sum."""
    rest = [a for a in range(x.ndim) if a not in (rows, cols)]
    s = svdvals(transpose(x, rest + [rows, cols]))                                 # (..., k)
    if ord == "nuc" or s.shape[-1] == 0:           # no singular values: 0, as torch
        y = reduce_sum(s, -1)
    else:
        k = s.shape[-1]
        y = squeeze(slice_axes(s, (s.ndim - 1,), (0,) if ord == 2 else (k - 1,), (1,) if ord == 2 else (k,), (1,)), -1)
    if keepdims:
        for axis in sorted((rows, cols)):
            y = expand_dims(y, axis)
    return y


def cond(x, p=None) -> Tensor:
    """numpy.linalg.cond / torch.linalg.cond: the condition number of x (..., m, n) in the norm p: None
    or 2 is the largest singular value over the smallest, -2 its inverse; any other matrix_norm ord
    ("fro", "nuc", ±1, ±inf; square x) is ‖x‖·‖inv(x)‖. inf where the smallest singular value is 0
    (for p None, ±2), inf or NaN where x is singular (the others, through inv)."""
    x = _float(x)
    if x.ndim < 2:
        raise ShapeError(f"cond needs matrices (..., m, n), got {x.type} (at {user_location()})")
    if p in (None, 2, -2):
        s = svdvals(x)
        k = s.shape[-1]
        top, bottom = (squeeze(slice_axes(s, (s.ndim - 1,), (i,), (i + 1,), (1,)), -1) for i in (0, k - 1))
        return top / bottom if p != -2 else bottom / top
    return matrix_norm(x, p) * matrix_norm(inv(x), p)


def _norm_reference(x, ord, axes, keepdims):
    a = np.abs(x)
    with np.errstate(all="ignore"):
        if ord == math.inf:          # over nothing: 0, as every p-norm (and -inf's min: +inf)
            y = np.max(a, axis=axes, keepdims=keepdims, initial=0)
        elif ord == -math.inf:
            y = np.min(a, axis=axes, keepdims=keepdims, initial=np.inf)
        elif ord == 0:
            y = np.sum(x != 0, axis=axes, keepdims=keepdims)
        else:
            y = np.sum(a ** ord, axis=axes, keepdims=keepdims) ** (1 / ord)
    return np.asarray(y, x.dtype)


def _may_be_empty(shape, axes) -> bool:
    """Whether the slices over `axes` may hold nothing: a dim there is 0 or symbolic."""
    return any(not isinstance(shape[a], int) or shape[a] == 0 for a in axes)


def _lower_norm(ctx, names, node):
    a = node.attrs
    ord, axes, keep, dtype = a["ord"], ctx.int64s(a["axes"]), int(a["keepdims"]), node.outputs[0].dtype
    x = names[0]
    if ord == 2:
        return ctx.emit("ReduceL2", [x, axes], keepdims=keep)
    if ord == 1:
        return ctx.emit("ReduceL1", [x, axes], keepdims=keep)
    if ord == 0:
        nonzero = ctx.emit("Cast", [ctx.emit("Not", [ctx.emit("Equal", [x, ctx.const(np.zeros((), dtype))])])],
                           to=helper.np_dtype_to_tensor_dtype(dtype))
        return ctx.emit("ReduceSum", [nonzero, axes], keepdims=keep)
    if math.isinf(ord):          # onnxruntime's ReduceMax/ReduceMin skip NaN: put it back
        y = ctx.emit("ReduceMax" if ord > 0 else "ReduceMin", [ctx.emit("Abs", [x]), axes], keepdims=keep)
        if ord > 0 and _may_be_empty(ctx.graph.type_of(node.inputs[0]).shape, a["axes"]):
            y = ctx.emit("Max", [y, ctx.const(np.zeros((), dtype))])            # not ReduceMax's -inf
        nan = ctx.emit("Cast", [ctx.emit("IsNaN", [x])], to=helper.np_dtype_to_tensor_dtype(dtype))
        any_nan = ctx.emit("ReduceMax", [nan, axes], keepdims=keep)
        has_nan = ctx.emit("Greater", [any_nan, ctx.const(np.zeros((), dtype))])
        return ctx.emit("Where", [has_nan, ctx.const(np.asarray(np.nan, dtype)), y])
    powered = ctx.emit("Pow", [ctx.emit("Abs", [x]), ctx.const(np.asarray(ord, dtype))])
    total = ctx.emit("ReduceSum", [powered, axes], keepdims=keep)
    return ctx.emit("Pow", [total, ctx.const(np.asarray(1 / ord, dtype))])


def _norm_vjp(g, ins, outs, ord, axes, keepdims):
    x = ins[0]
    gk, y = _kept(g[0], x, axes, keepdims), _kept(outs[0], x, axes, keepdims)
    if ord == 0:
        return [None]
    if ord == 1:
        return [gk * sign(x)]
    if math.isinf(ord):       # shared equally among the entries at the extreme
        hit = cast(equal(absolute(x), y), x.dtype)
        return [gk * sign(x) * hit / reduce_sum(hit, axes, keepdims=True)]
    a = absolute(x)
    zero_norm = equal(y, 0)
    scale = x if ord == 2 else sign(x) * power(where(equal(a, 0), 1, a), ord - 1)
    denominator = where(zero_norm, 1, y if ord == 2 else power(y, ord - 1))
    return [where(zero_norm, 0, gk * scale / denominator)]


defop("vector_norm", infer=lambda types, ord, axes, keepdims: _reduce_infer(types, axes, keepdims),
      reference=_norm_reference, lower=_lower_norm, vjp=_norm_vjp)
