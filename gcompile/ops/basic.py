"""Graph inputs, constants, casts, identity, stop_gradient, fills and the n-ary sum."""
from __future__ import annotations

import numpy as np
from onnx import helper

from ..errors import ShapeError
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir import dtypes
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from .shape_rules import broadcast_shapes, same_dtype, unary_any

__all__ = ["add_n", "arange", "cast", "constant", "full", "identity", "ones_like", "stop_gradient", "zeros_like"]


def _not_lowered(ctx, names, node):  # inputs and constants are handled by the lowering driver itself
    raise AssertionError(f"{node.op} is lowered by the driver")


def _not_evaluated(**attrs):  # an input's value is the caller's array, bound by the evaluator itself
    raise AssertionError("graph inputs are bound by the evaluator")


defop("input", infer=lambda types, **a: [a["type"]], reference=_not_evaluated, lower=_not_lowered,
      traits={Trait.NONDIFF})
# A constant may carry a `name` (a module parameter's, frontend.tensor.lift_named): its initializer keeps it.
defop("constant", infer=lambda types, value, name=None: [tensor_type(value.dtype, value.shape)],
      reference=lambda value, name=None: value, lower=_not_lowered, traits={Trait.NONDIFF, Trait.CHEAP})


# -- cast --------------------------------------------------------------------------------------
def cast(x, dtype, saturate: bool = True) -> Tensor:
    """x converted to `dtype` (numpy casting; float -> int truncates toward zero). To a float8 format,
    values beyond its range become its largest finite value when `saturate` (ONNX's default), else
    infinity where the format has one and NaN where not."""
    x, dtype = as_tensor(x), dtypes.as_dtype(dtype)
    if x.dtype == dtype:
        return x
    return apply("cast", [x], dtype=dtype, **({} if saturate or dtype not in dtypes.FLOAT8 else {"saturate": False}))


def _cast_vjp(g, ins, outs, dtype, saturate=True):
    if not dtypes.is_float(ins[0].dtype):
        return [None]
    return [cast(g[0], ins[0].dtype)]


def cast_array(x, dtype, saturate=True):
    """numpy's astype, except that a float8 target saturates as ONNX's Cast (ml_dtypes would give NaN)."""
    if dtype in dtypes.FLOAT8 and saturate and not dtypes.is_integer(x.dtype):
        x = np.clip(x, *dtypes.limits(dtype))
    return x.astype(dtype)


def _lower_cast(ctx, names, node):
    extra = {} if node.attrs.get("saturate", True) else {"saturate": 0}
    return ctx.emit("Cast", names, to=helper.np_dtype_to_tensor_dtype(node.attrs["dtype"]), **extra)


defop("cast",
      infer=lambda types, dtype, saturate=True: [tensor_type(dtype, types[0].shape)],
      reference=cast_array, lower=_lower_cast,
      vjp=_cast_vjp, traits={Trait.CHEAP, Trait.ELEMENT_COPY, Trait.NOOP_IF_SAME_TYPE, Trait.ELEMENTWISE})


# -- identity and stop_gradient ----------------------------------------------------------------
def identity(x) -> Tensor:
    """x itself as a new node (a named value to fetch or to differentiate at; passes may remove it)."""
    return apply("identity", [x])


def stop_gradient(x) -> Tensor:
    """x, with no gradient flowing through it (gc.grad treats it as a constant)."""
    return apply("stop_gradient", [x])


defop("identity", infer=unary_any, reference=lambda x: x.copy(),
      lower=lambda ctx, names, node: ctx.emit("Identity", names),
      vjp=lambda g, ins, outs: [g[0]],
      traits={Trait.CHEAP, Trait.ELEMENT_COPY, Trait.NOOP_IF_SAME_TYPE, Trait.ELEMENTWISE})
defop("stop_gradient", infer=unary_any, reference=lambda x: x.copy(),
      lower=lambda ctx, names, node: ctx.emit("Identity", names),
      traits={Trait.NONDIFF, Trait.CHEAP, Trait.ELEMENT_COPY, Trait.NOOP_IF_SAME_TYPE,
              Trait.ELEMENTWISE})


# -- fills ---------------------------------------------------------------------------------------
def full(shape, value, dtype="float32") -> Tensor:
    """A tensor of `shape` (ints and symbol names) filled with `value`."""
    return apply("fill", [], shape=tuple(shape), value=float(value), dtype=np.dtype(dtype))


def zeros_like(x) -> Tensor:
    """Zeros of x's shape and dtype (symbolic dims stay symbolic), as numpy.zeros_like."""
    x = as_tensor(x)
    return full(x.shape, 0, x.dtype)


def ones_like(x) -> Tensor:
    """Ones of x's shape and dtype (symbolic dims stay symbolic), as numpy.ones_like."""
    x = as_tensor(x)
    return full(x.shape, 1, x.dtype)


def _lower_fill(ctx, names, node):
    a = node.attrs
    return ctx.fill(a["shape"], a["value"], a["dtype"])


defop("fill", infer=lambda types, shape, value, dtype: [tensor_type(dtype, shape)],
      reference=lambda shape, value, dtype: np.full(shape, value, dtype=dtype), lower=_lower_fill,
      traits={Trait.NONDIFF, Trait.CHEAP})


def arange(n, start=0, step=1, dtype="int64") -> Tensor:
    """start, start + step, ..., start + (n-1)·step: `n` values of `dtype`, where `n` may be a symbolic
    dim ("batch", x.shape[0]), so a range over a dynamic size keeps it symbolic (ONNX Range at run time)."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer, str)):
        raise ShapeError(f"arange: n must be an int or a symbolic dim, got {n!r}")
    if not isinstance(n, str) and n < 0:
        raise ShapeError(f"arange: negative length {n}")
    dtype = np.dtype(dtype)
    if dtype.kind not in "iuf":
        raise ShapeError(f"arange: dtype {dtype.name} is not numeric")
    index = apply("arange", [], shape=(n if isinstance(n, str) else int(n),), dtype=dtype)
    if step != 1:
        index = index * np.asarray(step, dtype)
    return index + np.asarray(start, dtype) if start != 0 else index


def _lower_arange(ctx, names, node):
    """Range(0, n, 1) in int64 (n read from the shape where it is symbolic), cast to the dtype."""
    a = node.attrs
    index = ctx.index_range(a["shape"][0])
    dtype = np.dtype(a["dtype"])
    return index if dtype == np.int64 else ctx.emit("Cast", [index], to=helper.np_dtype_to_tensor_dtype(dtype))


defop("arange", infer=lambda types, shape, dtype: [tensor_type(dtype, shape)],
      reference=lambda shape, dtype: np.arange(shape[0]).astype(dtype), lower=_lower_arange,
      traits={Trait.NONDIFF, Trait.CHEAP})


def constant(value, dtype=None) -> Tensor:
    """A constant tensor from a Python value or numpy array."""
    return as_tensor(np.asarray(value, dtype=dtype))


# -- n-ary sum (used to accumulate fan-out cotangents) --------------------------------------------
def add_n(xs) -> Tensor:
    """The sum of the Tensors xs (one node however many there are, so the gradient hands the same
    cotangent to each; a single Tensor is returned as it is)."""
    xs = list(xs)
    return xs[0] if len(xs) == 1 else apply("add_n", xs)


def _add_n_infer(types):
    if not types:
        raise ShapeError("add_n needs at least one operand")
    return [tensor_type(same_dtype(types), broadcast_shapes(*(t.shape for t in types)))]


def _lower_add_n(ctx, names, node):
    """A chain of Adds, not ONNX's Sum: Sum is float-only in the spec's type constraints, while
    Add takes every numeric type and is the op every runtime optimises first (docs/strategies.md
    has the measurements)."""
    total = names[0]
    for name in names[1:]:
        total = ctx.emit("Add", [total, name])
    return total


defop("add_n", infer=_add_n_infer, reference=lambda *xs: np.sum(np.broadcast_arrays(*xs), axis=0).astype(xs[0].dtype),
      lower=_lower_add_n, vjp=lambda g, ins, outs: [g[0]] * len(ins),   # summed to each operand's shape by gc.grad
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.NOOP_IF_SAME_TYPE, Trait.ELEMENTWISE})


# -- scheduling ---------------------------------------------------------------------------------------
def _lower_after(ctx, names, node):
    """x concatenated with an empty slice of the token: x's value, with a data dependency on the token."""
    x, token = names
    t = ctx.graph.type_of(node.inputs[0])
    flat = ctx.emit("Reshape", [x, ctx.int64s([-1])])
    empty = ctx.emit("Slice", [ctx.emit("Reshape", [token, ctx.int64s([-1])]), ctx.int64s([0]), ctx.int64s([0])])
    empty = ctx.emit("Cast", [empty], to=helper.np_dtype_to_tensor_dtype(t.dtype))
    return ctx.emit("Reshape", [ctx.emit("Concat", [flat, empty], axis=0), ctx.shape_tensor(t.shape)])


# Inserted by the recompute pass (gcompile/passes/recompute.py) after differentiation: never differentiated.
defop("after", infer=lambda types: [types[0]], reference=lambda x, token: np.array(x, copy=True),
      lower=_lower_after, traits={Trait.NONDIFF})
