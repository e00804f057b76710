"""Inverse trigonometric and hyperbolic functions, arctan2 and hypot (numpy's names, with
PyTorch's asin/acos/atan/atan2/asinh/acosh/atanh as aliases).

ONNX has each unary one; onnxruntime's CPU provider has float32 kernels only, so in float64
the hyperbolic ones lower to formulas written with ops that have float64 kernels (accurate near
0 and without overflow for large arguments), while Asin, Acos and Atan are refused on the CPU in
float64, as Erf and Tan are. arctan2 and hypot have no ONNX op: arctan2 is atan of the smaller
over the larger magnitude, placed in its quadrant by the signs (signed zeros included, as numpy),
and hypot is the larger magnitude times sqrt(1 + ratio²), which neither overflows nor underflows.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..frontend.tensor import Tensor, apply
from ..ir.registry import Trait, defop
from .elementwise import _onnx, _unary_def, emit_log1p, equal, promote_float, rsqrt, where, zeros_scalar
from .shape_rules import binary_broadcast

__all__ = ["acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2", "arctanh", "asin",
           "asinh", "atan", "atan2", "atanh", "cosh", "hypot", "sinh"]

_LN2 = math.log(2)
_BIG = 2.0 ** 28        # past this, asinh(x) and acosh(x) are log(2|x|) to double precision


def _float64_formula(native: str, formula: Callable) -> Callable:
    """The native ONNX op, or in float64 `formula(ctx, x, c)` (c makes scalar constants of x's dtype)."""
    def lower(ctx, names, node):
        dtype = node.outputs[0].dtype
        if dtype != np.float64:
            return ctx.emit(native, names)
        return formula(ctx, names[0], lambda v: ctx.const(np.asarray(v, dtype)))
    return lower


def _half_exp(ctx, x, c):
    """(e^|x|/2, e^-|x|/2) from e = exp(|x|/2), so neither overflows before the result does."""
    e = ctx.emit("Exp", [ctx.emit("Mul", [ctx.emit("Abs", [x]), c(0.5)])])
    return ctx.emit("Mul", [ctx.emit("Mul", [e, c(0.5)]), e]), ctx.emit("Div", [c(0.5), ctx.emit("Mul", [e, e])])


def _sinh64(ctx, x, c):
    grow, decay = _half_exp(ctx, x, c)
    large = ctx.emit("Sub", [grow, decay])
    large = ctx.emit("Where", [ctx.emit("Less", [x, c(0)]), ctx.emit("Neg", [large]), large])
    # |x| < 1: the odd Taylor series to x^17 (the next term is below 1e-17 of the sum)
    x2 = ctx.emit("Mul", [x, x])
    series = c(1 / math.factorial(17))
    for k in range(7, -1, -1):
        series = ctx.emit("Add", [ctx.emit("Mul", [series, x2]), c(1 / math.factorial(2 * k + 1))])
    small = ctx.emit("Mul", [series, x])
    return ctx.emit("Where", [ctx.emit("Less", [ctx.emit("Abs", [x]), c(1)]), small, large])


def _cosh64(ctx, x, c):
    return ctx.emit("Add", list(_half_exp(ctx, x, c)))


def _log_2x_or(ctx, a, c, moderate):
    """log(2a) for a past _BIG (where a² would lose or overflow), else `moderate`."""
    large = ctx.emit("Add", [ctx.emit("Log", [a]), c(_LN2)])
    return ctx.emit("Where", [ctx.emit("Greater", [a, c(_BIG)]), large, moderate])


def _asinh64(ctx, x, c):
    # asinh|x| = log1p(|x| + x²/(1 + sqrt(1 + x²))), accurate near 0
    a = ctx.emit("Abs", [x])
    a2 = ctx.emit("Mul", [a, a])
    tail = ctx.emit("Div", [a2, ctx.emit("Add", [c(1), ctx.emit("Sqrt", [ctx.emit("Add", [a2, c(1)])])])])
    r = _log_2x_or(ctx, a, c, emit_log1p(ctx, ctx.emit("Add", [a, tail]), np.float64))
    return ctx.emit("Where", [ctx.emit("Less", [x, c(0)]), ctx.emit("Neg", [r]), r])


def _acosh64(ctx, x, c):
    # acosh x = log1p(t + sqrt(t(t + 2))) with t = x - 1, accurate near 1 (NaN below 1 from the sqrt)
    t = ctx.emit("Sub", [x, c(1)])
    root = ctx.emit("Sqrt", [ctx.emit("Mul", [t, ctx.emit("Add", [t, c(2)])])])
    return _log_2x_or(ctx, x, c, emit_log1p(ctx, ctx.emit("Add", [t, root]), np.float64))


def _atanh64(ctx, x, c):
    # atanh|x| = log1p(2|x| / (1 - |x|)) / 2, odd (for x near -1 the log1p of the signed form loses digits)
    a = ctx.emit("Abs", [x])
    ratio = ctx.emit("Div", [ctx.emit("Mul", [a, c(2)]), ctx.emit("Sub", [c(1), a])])
    r = ctx.emit("Mul", [emit_log1p(ctx, ratio, np.float64), c(0.5)])
    return ctx.emit("Where", [ctx.emit("Less", [x, c(0)]), ctx.emit("Neg", [r]), r])


arcsin = _unary_def("arcsin", np.arcsin, _onnx("Asin"), lambda g, ins, outs: [g[0] * rsqrt(1 - ins[0] * ins[0])])
arccos = _unary_def("arccos", np.arccos, _onnx("Acos"),
                    lambda g, ins, outs: [-(g[0] * rsqrt(1 - ins[0] * ins[0]))])
arctan = _unary_def("arctan", np.arctan, _onnx("Atan"), lambda g, ins, outs: [g[0] / (1 + ins[0] * ins[0])])
sinh: Callable[..., Tensor] = _unary_def("sinh", np.sinh, _float64_formula("Sinh", _sinh64),
                                         lambda g, ins, outs: [g[0] * cosh(ins[0])])
cosh: Callable[..., Tensor] = _unary_def("cosh", np.cosh, _float64_formula("Cosh", _cosh64),
                                         lambda g, ins, outs: [g[0] * sinh(ins[0])])
arcsinh = _unary_def("arcsinh", np.arcsinh, _float64_formula("Asinh", _asinh64),
                     lambda g, ins, outs: [g[0] * rsqrt(ins[0] * ins[0] + 1)])
arccosh = _unary_def("arccosh", np.arccosh, _float64_formula("Acosh", _acosh64),
                     lambda g, ins, outs: [g[0] * rsqrt((ins[0] - 1) * (ins[0] + 1))])
arctanh = _unary_def("arctanh", np.arctanh, _float64_formula("Atanh", _atanh64),
                     lambda g, ins, outs: [g[0] / ((1 - ins[0]) * (1 + ins[0]))])
asin, acos, atan, asinh, acosh, atanh = arcsin, arccos, arctan, arcsinh, arccosh, arctanh


# -- arctan2 and hypot ---------------------------------------------------------------------------------
def arctan2(y, x) -> Tensor:
    """The angle of the point (x, y) in (-π, π], numpy.arctan2 (signed zeros and infinities as numpy).
    At the origin the gradient is 0, as PyTorch's."""
    return apply("arctan2", promote_float(y, x))


def hypot(a, b) -> Tensor:
    """sqrt(a² + b²) without overflow or underflow, numpy.hypot (inf wherever an operand is ±inf, even
    beside NaN). At (0, 0) the gradient is NaN, as PyTorch's."""
    return apply("hypot", promote_float(a, b))


atan2 = arctan2


def _sign_bit(ctx, v, c) -> str:
    """v < 0 or v is -0 (whose reciprocal is -inf)."""
    zero = ctx.emit("Equal", [v, c(0)])
    negative_zero = ctx.emit("And", [zero, ctx.emit("Less", [ctx.emit("Reciprocal", [v]), c(0)])])
    return ctx.emit("Or", [ctx.emit("Less", [v, c(0)]), negative_zero])


def _magnitudes(ctx, a, b):
    """(|a|, |b|, the smaller, the larger) of two ONNX values."""
    abs_a, abs_b = ctx.emit("Abs", [a]), ctx.emit("Abs", [b])
    return abs_a, abs_b, ctx.emit("Min", [abs_a, abs_b]), ctx.emit("Max", [abs_a, abs_b])


def _lower_arctan2(ctx, names, node):
    y, x = names
    c = lambda v: ctx.const(np.asarray(v, node.outputs[0].dtype))  # noqa: E731
    ax, ay, lo, hi = _magnitudes(ctx, x, y)
    angle = ctx.emit("Atan", [ctx.emit("Div", [lo, hi])])           # in [0, π/4]
    angle = ctx.emit("Where", [ctx.emit("Greater", [ay, ax]), ctx.emit("Sub", [c(math.pi / 2), angle]), angle])
    both_inf = ctx.emit("And", [ctx.emit("IsInf", [ax]), ctx.emit("IsInf", [ay])])
    angle = ctx.emit("Where", [both_inf, c(math.pi / 4), angle])    # inf/inf
    angle = ctx.emit("Where", [ctx.emit("Equal", [hi, c(0)]), c(0), angle])   # 0/0
    angle = ctx.emit("Where", [_sign_bit(ctx, x, c), ctx.emit("Sub", [c(math.pi), angle]), angle])
    return ctx.emit("Where", [_sign_bit(ctx, y, c), ctx.emit("Neg", [angle]), angle])


def _arctan2_vjp(g, ins, outs):
    y, x = ins
    r2 = x * x + y * y
    origin = equal(r2, 0)
    inv = where(origin, zeros_scalar(r2), 1 / where(origin, 1, r2))
    return [g[0] * x * inv, -(g[0] * y * inv)]


def _lower_hypot(ctx, names, node):
    c = lambda v: ctx.const(np.asarray(v, node.outputs[0].dtype))  # noqa: E731
    aa, ab, lo, hi = _magnitudes(ctx, *names)
    ratio = ctx.emit("Div", [lo, hi])
    h = ctx.emit("Mul", [hi, ctx.emit("Sqrt", [ctx.emit("Add", [c(1), ctx.emit("Mul", [ratio, ratio])])])])
    h = ctx.emit("Where", [ctx.emit("Equal", [hi, c(0)]), c(0), h])
    return ctx.emit("Where", [ctx.emit("Or", [ctx.emit("IsInf", [aa]), ctx.emit("IsInf", [ab])]), c(np.inf), h])


defop("arctan2", infer=binary_broadcast, reference=np.arctan2, lower=_lower_arctan2, vjp=_arctan2_vjp,
      traits={Trait.CHEAP, Trait.BROADCASTS})
defop("hypot", infer=binary_broadcast, reference=np.hypot, lower=_lower_hypot,
      vjp=lambda g, ins, outs: [g[0] * ins[0] / outs[0], g[0] * ins[1] / outs[0]],
      traits={Trait.CHEAP, Trait.BROADCASTS})
