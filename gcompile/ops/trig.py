"""Inverse trigonometric and hyperbolic functions, arctan2 and hypot (numpy's names, with
PyTorch's asin/acos/atan/atan2/asinh/acosh/atanh as aliases), angle conversions and sinc.

ONNX has each unary one; onnxruntime's CPU provider has float32 kernels only, so in float64
the hyperbolic ones lower to formulas written with ops that have float64 kernels (accurate near
0 and without overflow for large arguments), while Asin, Acos and Atan are refused on the CPU in
float64, as Erf and Tan are. arctan2 and hypot have no ONNX op: arctan2 is atan of the smaller
over the larger magnitude, placed in its quadrant by the signs (signed zeros included, as numpy),
and hypot is the larger magnitude times sqrt(1 + ratio²), which neither overflows nor underflows.
sinc is a composition: its Taylor series near 0, where sin(πx)/(πx) and its derivatives cancel.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.dtypes import is_float
from ..ir.registry import Trait, defop
from .basic import cast
from .elementwise import _onnx, _unary_def, emit_log1p, equal, less, promote_float, rsqrt, sin, where, zeros_scalar
from .elementwise import abs as absolute
from .emitter import Emitter, Value, sign_bit
from .shape_rules import binary_float

__all__ = ["acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2", "arctanh", "asin",
           "asinh", "atan", "atan2", "atanh", "cosh", "deg2rad", "hypot", "rad2deg", "sinc", "sinh"]

_LN2 = math.log(2)
_BIG = 2.0 ** 28        # past this, asinh(x) and acosh(x) are log(2|x|) to double precision


def _float64_formula(native: str, formula: Callable[[Emitter, Value], Value]) -> Callable:
    """The native ONNX op, or in float64 `formula(e, x)` written with an Emitter."""
    def lower(ctx, names, node):
        dtype = node.outputs[0].dtype
        if dtype != np.float64:
            return ctx.emit(native, names)
        e = Emitter(ctx, dtype)
        return formula(e, e.wrap(names[0])).name
    return lower


def _log1p(v: Value) -> Value:
    return v.e.wrap(emit_log1p(v.e.ctx, v.name, v.e.dtype))


def _odd(x: Value, magnitude: Value) -> Value:
    """±magnitude with x's sign."""
    return x.e.where(x < 0, -magnitude, magnitude)


def _half_exp(x: Value) -> tuple[Value, Value]:
    """(e^|x|/2, e^-|x|/2) from h = exp(|x|/2), so neither overflows before the result does."""
    h = x.e("Exp", x.e("Abs", x) * 0.5)
    return (h * 0.5) * h, 0.5 / (h * h)


def _sinh64(e: Emitter, x: Value) -> Value:
    grow, decay = _half_exp(x)
    # |x| < 1: the odd Taylor series to x^17 (the next term is below 1e-17 of the sum)
    series = e.polynomial([1 / math.factorial(2 * k + 1) for k in range(9)], x * x) * x
    return e.where(e("Abs", x) < 1, series, _odd(x, grow - decay))


def _cosh64(e: Emitter, x: Value) -> Value:
    grow, decay = _half_exp(x)
    return grow + decay


def _log_2x_or(a: Value, moderate: Value) -> Value:
    """log(2a) for a past _BIG (where a² would lose or overflow), else `moderate`."""
    return a.e.where(a > _BIG, a.e("Log", a) + _LN2, moderate)


def _asinh64(e: Emitter, x: Value) -> Value:
    # asinh|x| = log1p(|x| + x²/(1 + sqrt(1 + x²))), accurate near 0
    a = e("Abs", x)
    a2 = a * a
    return _odd(x, _log_2x_or(a, _log1p(a + a2 / (1 + e("Sqrt", a2 + 1)))))


def _acosh64(e: Emitter, x: Value) -> Value:
    # acosh x = log1p(t + sqrt(t(t + 2))) with t = x - 1, accurate near 1 (NaN below 1 from the sqrt)
    t = x - 1
    return _log_2x_or(x, _log1p(t + e("Sqrt", t * (t + 2))))


def _atanh64(e: Emitter, x: Value) -> Value:
    # atanh|x| = log1p(2|x| / (1 - |x|)) / 2, odd (for x near -1 the log1p of the signed form loses digits)
    a = e("Abs", x)
    return _odd(x, _log1p(a * 2 / (1 - a)) * 0.5)


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


def _magnitudes(e: Emitter, a: Value, b: Value) -> tuple[Value, Value, Value, Value]:
    """(|a|, |b|, the smaller, the larger)."""
    abs_a, abs_b = e("Abs", a), e("Abs", b)
    return abs_a, abs_b, e("Min", abs_a, abs_b), e("Max", abs_a, abs_b)


def _lower_arctan2(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    y, x = e.wrap(names[0]), e.wrap(names[1])
    ax, ay, lo, hi = _magnitudes(e, x, y)
    angle = e("Atan", lo / hi)                                          # in [0, π/4]
    angle = e.where(ay > ax, math.pi / 2 - angle, angle)
    angle = e.where(e("IsInf", ax) & e("IsInf", ay), math.pi / 4, angle)   # inf/inf
    angle = e.where(e.eq(hi, 0), 0, angle)                              # 0/0
    angle = e.where(sign_bit(x), math.pi - angle, angle)
    return e.where(sign_bit(y), -angle, angle).name


def _arctan2_vjp(g, ins, outs):
    y, x = ins
    r2 = x * x + y * y
    origin = equal(r2, 0)
    inv = where(origin, zeros_scalar(r2), 1 / where(origin, 1, r2))
    return [g[0] * x * inv, -(g[0] * y * inv)]


def _lower_hypot(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    aa, ab, lo, hi = _magnitudes(e, e.wrap(names[0]), e.wrap(names[1]))
    ratio = lo / hi
    h = e.where(e.eq(hi, 0), 0, hi * e("Sqrt", 1 + ratio * ratio))
    return e.where(e("IsInf", aa) | e("IsInf", ab), np.inf, h).name


defop("arctan2", infer=binary_float, reference=np.arctan2, lower=_lower_arctan2, vjp=_arctan2_vjp,
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("hypot", infer=binary_float, reference=np.hypot, lower=_lower_hypot,
      vjp=lambda g, ins, outs: [g[0] * ins[0] / outs[0], g[0] * ins[1] / outs[0]],
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})


# -- angles and sinc ----------------------------------------------------------------------------------------
def _float(x) -> Tensor:
    x = as_tensor(x)
    return x if is_float(x.dtype) else cast(x, np.float32)


def deg2rad(x) -> Tensor:
    """Degrees to radians, x·π/180 (numpy.deg2rad; integers as float32, as the other math functions)."""
    return _float(x) * (math.pi / 180)


def rad2deg(x) -> Tensor:
    """Radians to degrees, x·180/π (numpy.rad2deg)."""
    return _float(x) * (180 / math.pi)


# sin(y)/y = Σ (-y²)^k/(2k+1)! for |y| < 1/2: to y^16 the next term is below float64's rounding there
_SINC_SERIES = [(-1) ** k / math.factorial(2 * k + 1) for k in range(9)]


def sinc(x) -> Tensor:
    """The normalized sinc, sin(πx)/(πx) and 1 at 0 (numpy.sinc, torch.sinc). Below |πx| = 1/2 it is
    the Taylor series, so every derivative is right near and at 0 (the quotient's cancel there:
    its first derivative in float32 would keep no digits near 0); ±inf gives NaN, as numpy."""
    x = _float(x)
    y = x * math.pi
    near = less(absolute(y), 0.5)
    y2 = y * y
    series = _SINC_SERIES[-1]
    for c in reversed(_SINC_SERIES[:-1]):
        series = series * y2 + c
    safe = where(near, np.ones((), x.dtype), y)
    return where(near, series, sin(safe) / safe)
