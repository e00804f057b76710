"""Integer ops in ONNX forms that ONNX Runtime computes exactly, as numpy does.

ONNX Runtime 1.31's CPU kernels get some integer ops wrong without any error (each kernel compared
with numpy at values near the int32 and float64 limits; docs/reference/dtypes.md has examples):

- int64 Max, Min, Clip, ReduceMax and ReduceMin order two values whose high 32 bits agree by their
  low 32 bits read as signed numbers (max(4294967295, 7) is 7), and int64 Sign reads some elements'
  low 32 bits only (the sign of 2**31 is -1): they are right only where every value fits in int32;
- int32 and int64 ReduceSum and ReduceProd, Pow and Mod with fmod=1 compute through float64: an int64
  sum loses the low bits past 2**53, and a result past the dtype's range saturates where numpy wraps;
- integer Div and Mod by zero, and the dtype's lowest value divided by -1, stop the process (SIGFPE).

Its ArgMax, ArgMin, TopK, CumSum, CumProd, MatMul, comparisons, Where, Add, Sub, Mul, Neg, Abs,
BitwiseAnd and Div (by a safe divisor) are exact, and the forms here use only those. Every target
lowers to them: a portable file runs on ONNX Runtime too, and each form is plain ai.onnx that the other
runtimes compute as numpy does. Division by zero gives 0 (numpy's integer result) and the lowest value
divided by -1 wraps to itself, as in numpy.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from ..ir import dims
from ..ir.graph import TensorType

_INT64 = np.dtype(np.int64)


def orders_wrongly(dtype) -> bool:
    """Whether ONNX Runtime's Max, Min, Clip, ReduceMax, ReduceMin and Sign kernels for `dtype` are wrong."""
    return np.dtype(dtype) == _INT64


def through_float(dtype) -> bool:
    """Whether ONNX Runtime's ReduceSum, ReduceProd and Pow kernels for `dtype` compute through float64."""
    return np.dtype(dtype) in (np.dtype(np.int32), _INT64)


# -- elementwise -----------------------------------------------------------------------------------
def extremum(ctx, a: str, b: str, largest: bool) -> str:
    """max(a, b) (or min) with broadcasting, as a Where on a comparison."""
    return ctx.emit("Where", [ctx.emit("Greater" if largest else "Less", [a, b]), a, b])


def clip(ctx, x: str, lo: str | None, hi: str | None) -> str:
    """min(max(x, lo), hi), either bound optional (hi where lo > hi, as numpy's clip)."""
    if lo is not None:
        x = extremum(ctx, x, lo, largest=True)
    if hi is not None:
        x = extremum(ctx, x, hi, largest=False)
    return x


def sign(ctx, x: str, dtype) -> str:
    """(x > 0) - (x < 0) in `dtype`."""
    zero = ctx.const(np.zeros((), dtype))
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    above, below = (ctx.emit("Cast", [ctx.emit(op, [x, zero])], to=to) for op in ("Greater", "Less"))
    return ctx.emit("Sub", [above, below])


def power(ctx, a: str, b: str, dtype, exponent: np.ndarray | None = None) -> str:
    """a ** b by squaring, wrapping as numpy's integer power: one step per bit of the exponent (the
    bits of `exponent` where the exponent is a known constant, else every bit of the dtype). A
    negative exponent, which numpy refuses, gives the real power truncated toward zero (1 for a = 1,
    ±1 for a = -1, 0 otherwise, a = 0 included)."""
    dtype = np.dtype(dtype)
    signed = dtype.kind == "i"
    if exponent is not None:
        bits = int(np.max(np.abs(exponent.astype(np.int64)), initial=0)).bit_length()
        negative = signed and bool(np.any(exponent < 0))
    else:
        bits, negative = 8 * dtype.itemsize - int(signed), signed
    bits = max(bits, 1)                          # one step at least: the result takes the broadcast shape
    const = lambda v: ctx.const(np.asarray(v, dtype))  # noqa: E731
    zero = const(0)
    result, base = const(1), a
    for k in range(bits):
        unset = ctx.emit("Equal", [ctx.emit("BitwiseAnd", [b, const(1 << k)]), zero])
        result = ctx.emit("Where", [unset, result, ctx.emit("Mul", [result, base])])
        if k + 1 < bits:
            base = ctx.emit("Mul", [base, base])
    if not negative:
        return result
    # a ** -n: 1 for a = 1, (-1) ** n for a = -1, else 0
    one, minus_one = const(1), const(-1)
    odd = ctx.emit("Equal", [ctx.emit("BitwiseAnd", [b, one]), one])
    unit = ctx.emit("Where", [ctx.emit("Equal", [a, minus_one]), ctx.emit("Where", [odd, minus_one, one]), zero])
    reciprocal = ctx.emit("Where", [ctx.emit("Equal", [a, one]), one, unit])
    return ctx.emit("Where", [ctx.emit("Less", [b, zero]), reciprocal, result])


def power_reference(a, b):
    """numpy's integer power, with `power`'s value for a negative exponent (numpy raises there)."""
    dtype = np.result_type(a, b)
    a, b = np.asarray(a, dtype), np.asarray(b, dtype)
    if dtype.kind != "i" or not np.any(b < 0):
        return np.power(a, b)
    whole = np.power(a, np.where(b < 0, 0, b))
    unit = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 1, -1, 1), 0)).astype(dtype)
    return np.where(b < 0, unit, whole)


# -- division --------------------------------------------------------------------------------------
def safe_division(e, a, b, compute: Callable):
    """compute(a, b') for integer a and b (Emitter values), with b' = 1 where b is 0 or where a is the
    dtype's lowest value and b is -1, whose quotient overflows (both stop ONNX Runtime with SIGFPE);
    then 0 where b is 0 (numpy's integer result). compute(lowest, 1) is numpy's wrapped result for
    lowest / -1 (lowest itself for a quotient, 0 for a remainder). Masks are added and multiplied, not
    selected: ONNX Runtime has no uint64 Where."""
    to = helper.np_dtype_to_tensor_dtype(e.dtype)
    zero = e.eq(b, 0)
    divisor = b + e("Cast", zero, to=to)
    if e.dtype.kind == "i":
        overflow = e.eq(a, np.iinfo(e.dtype).min) & e.eq(b, -1)
        divisor = divisor + e("Cast", overflow, to=to) * 2
    return compute(a, divisor) * e("Cast", ~zero, to=to)


def safe_reference(fn):
    """numpy's integer fn(a, b), with safe_division's values where b is 0 or the quotient overflows."""
    def reference(a, b):
        dtype = np.result_type(a, b)
        if dtype.kind not in "iu":
            return fn(a, b)
        a, b = np.asarray(a, dtype), np.asarray(b, dtype)
        unsafe = b == 0
        if dtype.kind == "i":
            unsafe = unsafe | (a == np.iinfo(dtype).min) & (b == -1)
        with np.errstate(over="ignore"):
            return np.where(b == 0, 0, fn(a, np.where(unsafe, 1, b))).astype(dtype)
    return reference


# -- reductions ------------------------------------------------------------------------------------
_IDENTITY: dict[str, Callable[[np.dtype], int]] = {
    "ReduceSum": lambda d: 0, "ReduceProd": lambda d: 1,
    "ReduceMax": lambda d: int(np.iinfo(d).min), "ReduceMin": lambda d: int(np.iinfo(d).max)}


def reduction(ctx, op_type: str, x: str, t: TensorType, axes: Sequence[int], keepdims: bool) -> str:
    """ReduceSum, ReduceProd, ReduceMax or ReduceMin of the integer x (of type t) over `axes`: the
    reduced axes moved last and joined into one, then a product with a column of ones (a sum), a tree
    of products (a product; over a symbolic count a CumProd where the target has it, else a Loop) or a
    TopK of one (an ordering); a slice of nothing gives the reduction's identity, as ONNX's ops do."""
    dtype = np.dtype(t.dtype)
    axes = sorted(axes)
    kept = [a for a in range(len(t.shape)) if a not in axes]
    out = [1 if a in axes else d for a, d in enumerate(t.shape) if keepdims or a not in axes]
    n = dims.product(t.shape[a] for a in axes)
    identity = ctx.const(np.asarray(_IDENTITY[op_type](dtype), dtype))
    if n == 0:
        return ctx.emit("Expand", [identity, ctx.shape_tensor(out)])
    rows_shape = [t.shape[a] for a in kept]
    if op_type == "ReduceSum" and axes == list(range(len(axes))):       # leading axes: a row of ones, no transpose
        flat = ctx.emit("Reshape", [x, ctx.shape_tensor([n, dims.product(rows_shape)])], allowzero=1)
        ones = ctx.fill((1, n), 1, dtype)
        return ctx.emit("Reshape", [ctx.emit("MatMul", [ones, flat]), ctx.shape_tensor(out)], allowzero=1)
    if kept + axes != list(range(len(t.shape))):
        x = ctx.emit("Transpose", [x], perm=kept + axes)
    if len(axes) > 1:
        x = ctx.emit("Reshape", [x, ctx.shape_tensor([*rows_shape, n])], allowzero=1)
    if op_type == "ReduceSum":
        ones = ctx.fill((n, 1), 1, dtype)
        y = ctx.emit("MatMul", [x, ones])
    elif op_type == "ReduceProd":
        y = _product(ctx, x, len(rows_shape), n, identity, dtype)
    else:
        if not isinstance(n, int):           # maybe nothing: the identity first
            column = ctx.emit("Expand", [identity, ctx.shape_tensor([*rows_shape, 1])])
            x = ctx.emit("Concat", [column, x], axis=-1)
        y = ctx.emit("TopK", [x, ctx.int64s([1])], n_out=2, axis=-1, largest=int(op_type == "ReduceMax"))[0]
    return ctx.emit("Reshape", [y, ctx.shape_tensor(out)], allowzero=1)


def _product(ctx, x: str, axis: int, n, one: str, dtype: np.dtype) -> str:
    """The product along the last axis (of size n, at position `axis`), keeping it as size 1."""
    def part(begin, end, source=None):
        source = x if source is None else source
        return ctx.emit("Slice", [source, ctx.int64s([begin]), ctx.int64s([end]), ctx.int64s([axis])])
    if isinstance(n, int):
        while n > 1:                          # halves multiplied, the odd one carried
            half = n // 2
            product = ctx.emit("Mul", [part(0, half), part(half, 2 * half)])
            x = ctx.emit("Concat", [product, part(2 * half, n)], axis=axis) if n % 2 else product
            n = half + n % 2
        return x
    if ctx.opset >= 26 and ctx.target.cumprod:
        ones = ctx.emit("Expand", [one, ctx.emit("Concat", [ctx.emit("Shape", [x], end=axis), ctx.int64s([1])],
                                                    axis=0)])
        running = ctx.emit("CumProd", [ctx.emit("Concat", [ones, x], axis=axis), ctx.const(np.asarray(axis, np.int64))])
        return part(-1, np.iinfo(np.int64).max, running)
    return _loop_product(ctx, x, axis, n, one, dtype)


def _loop_product(ctx, x: str, axis: int, n, one: str, dtype: np.dtype) -> str:
    """The product along the last axis of x (of symbolic size n, at position `axis`) as a Loop of n
    steps multiplying one slice each (a target without CumProd: OpenVINO cannot convert it)."""
    step, cond, carry = ctx.fresh("step"), ctx.fresh("cond"), ctx.fresh("product")
    factor, carried, cond_out = ctx.fresh("factor"), ctx.fresh("product_next"), ctx.fresh("cond_next")
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    rows = [None] * axis
    scalar = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Gather", [x, step], [factor], axis=axis),
         helper.make_node("Mul", [carry, factor], [carried]), helper.make_node("Identity", [cond], [cond_out])],
        ctx.fresh("product_body"),
        [scalar(step, onnx.TensorProto.INT64, []), scalar(cond, onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info(carry, elem, rows)],
        [scalar(cond_out, onnx.TensorProto.BOOL, []), helper.make_tensor_value_info(carried, elem, rows)])
    start = ctx.emit("Expand", [one, ctx.emit("Shape", [x], end=axis)])
    product = ctx.emit("Loop", [ctx.dim_scalar(n), ctx.const(np.asarray(True)), start], body=body)
    return ctx.emit("Unsqueeze", [product, ctx.int64s([axis])])
