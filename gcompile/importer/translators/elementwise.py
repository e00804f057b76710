"""ONNX translators for elementwise ops: arithmetic, comparisons, logic and activations.

Each translator writes the ONNX op's semantics with gcompile ops (gcompile.functions), so the
imported graph differentiates to any order through the existing VJP rules. The arithmetic and
comparison ops that exporters apply to shapes (Add, Sub, Mul, Div, Mod, Neg, Abs, Min, Max, the
comparisons and Where) also run on SymInts (sizes.py), so shape subgraphs stay symbolic. Where ONNX
allows something gcompile does not express (a float-only activation on ints), the translator raises
a clear UnsupportedError instead of guessing.

An activation with a kink takes PyTorch's derivative there (docs/guide/gradients.md's conventions):
each is written with the gcompile function that keeps it (F.celu, F.hardswish, the strict bounds of
F.hardtanh) or with a where whose condition picks PyTorch's side, never as a sum of pieces whose
derivatives at the kink do not add up to it (relu(x) + min(x, 0)-based terms give 0.5 at 0:
minimum's tie rule). tests/importer/test_activation_kinks.py checks each at its kinks.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from ... import functions as F
from ...frontend.tensor import Tensor, apply
from ...ir.dtypes import is_float
from .. import sizes
from ..table import COMPARISONS, SYMBOLIC_BINARY, SymInts, entrywise, onnx_op, require_float, scalar_like

# -- elementwise: unary ------------------------------------------------------------------------------
_UNARY = {"Sigmoid": F.sigmoid, "Tanh": F.tanh, "Exp": F.exp, "Log": F.log, "Sqrt": F.sqrt, "Erf": F.erf,
          "Sin": F.sin, "Cos": F.cos, "Tan": F.tan, "Floor": F.floor, "Ceil": F.ceil, "Round": F.round,
          "Softplus": F.softplus, "Acos": F.acos, "Asin": F.asin, "Atan": F.atan}


def _unary(fn):
    return lambda n, x: fn(require_float(n, x))


for _op, _fn in _UNARY.items():
    onnx_op(_op)(_unary(_fn))


@onnx_op("Neg", symbolic=True)
def _neg(n, x):
    return entrywise(sizes.neg, x) if isinstance(x, SymInts) else F.negative(x)


@onnx_op("Abs", symbolic=True)
def _abs(n, x):
    return entrywise(sizes.absolute, x) if isinstance(x, SymInts) else F.abs(x)


@onnx_op("Sign")
def _sign(n, x):
    return F.sign(x)


@onnx_op("Relu")
def _relu(n, x):
    return F.relu(x) if is_float(np.dtype(x.dtype)) else F.maximum(x, scalar_like(0, x))


@onnx_op("Reciprocal")
def _reciprocal(n, x):
    return F.divide(scalar_like(1, require_float(n, x)), x)


@onnx_op("Gelu")
def _gelu(n, x):
    return F.gelu(require_float(n, x), approximate=n.attr("approximate", "none") == "tanh")


@onnx_op("LeakyRelu")
def _leaky_relu(n, x):
    return F.leaky_relu(require_float(n, x), n.attr("alpha", 0.01))


@onnx_op("Elu")
def _elu(n, x):
    return F.elu(require_float(n, x), n.attr("alpha", 1.0))


@onnx_op("Selu")
def _selu(n, x):
    alpha, gamma = n.attr("alpha", 1.67326319217681884765625), n.attr("gamma", 1.05070102214813232421875)
    return F.elu(require_float(n, x), alpha) * gamma     # at 0, gamma·alpha: the negative side's, as F.selu


@onnx_op("Celu")
def _celu(n, x):
    return F.celu(require_float(n, x), n.attr("alpha", 1.0))     # at 0, 1: as F.celu


@onnx_op("HardSigmoid")
def _hard_sigmoid(n, x):
    x = require_float(n, x)    # no gradient at the bounds, as F.hardsigmoid
    return F.hardtanh(x * n.attr("alpha", 0.2) + n.attr("beta", 0.5), 0.0, 1.0)


@onnx_op("HardSwish")
def _hard_swish(n, x):
    return F.hardswish(require_float(n, x))      # at -3 and 3, gradients 0 and 1: as F.hardswish


@onnx_op("Softsign")
def _softsign(n, x):
    x = require_float(n, x)
    return x / (F.abs(x) + 1)


@onnx_op("Mish")
def _mish(n, x):
    x = require_float(n, x)
    return x * F.tanh(F.softplus(x))


@onnx_op("ThresholdedRelu")
def _thresholded_relu(n, x):
    x = require_float(n, x)
    return F.where(F.greater(x, scalar_like(n.attr("alpha", 1.0), x)), x, scalar_like(0, x))


@onnx_op("PRelu")
def _prelu(n, x, slope):
    x = require_float(n, x)    # at 0, the slope: as F.prelu
    return F.where(F.greater(x, scalar_like(0, x)), x, x * slope)


@onnx_op("Shrink")
def _shrink(n, x):
    lambd, bias = n.attr("lambd", 0.5), n.attr("bias", 0.0)
    zero = scalar_like(0, x)
    return F.where(F.less(x, scalar_like(-lambd, x)), x + scalar_like(bias, x),
                   F.where(F.greater(x, scalar_like(lambd, x)), x - scalar_like(bias, x), zero))


@onnx_op("IsNaN")
def _isnan(n, x):
    return F.not_equal(x, x)


@onnx_op("IsInf")
def _isinf(n, x):
    pos = F.equal(x, scalar_like(np.inf, x)) if n.attr("detect_positive", 1) else None
    neg = F.equal(x, scalar_like(-np.inf, x)) if n.attr("detect_negative", 1) else None
    if pos is None or neg is None:
        return pos if neg is None else neg
    return F.logical_or(pos, neg)


@onnx_op("Not")
def _not(n, x):
    return F.logical_not(x)


# -- elementwise: binary and variadic -------------------------------------------------------------------
def _symbolic(op_type, a, b):
    """Elementwise shape arithmetic on SymInts (sizes.py); a quotient of float sizes must be exact."""
    dtype = next(v.dtype for v in (a, b) if isinstance(v, SymInts))
    op = "ExactDiv" if op_type == "Div" and is_float(dtype) else op_type
    return entrywise(SYMBOLIC_BINARY[op], a, b, dtype=np.dtype(np.bool_) if op_type in COMPARISONS else None)


def _binary(op_type, fn):
    def translate(n, a, b):
        if isinstance(a, SymInts) or isinstance(b, SymInts):
            return _symbolic(op_type, a, b)
        return fn(a, b)
    onnx_op(op_type, symbolic=op_type in SYMBOLIC_BINARY)(translate)


def _div(a, b):
    if is_float(np.dtype(a.dtype)):
        return F.divide(a, b)
    return apply("div", [a, b])       # ONNX integer Div truncates toward zero, as gcompile's div op


_BINARY: dict[str, Callable[..., Tensor]] = {
    "Add": F.add, "Sub": F.subtract, "Mul": F.multiply, "Div": _div, "Equal": F.equal, "Less": F.less,
    "LessOrEqual": F.less_equal, "Greater": F.greater, "GreaterOrEqual": F.greater_equal,
    "And": F.logical_and, "Or": F.logical_or, "Xor": F.not_equal}
for _op, _fn in _BINARY.items():
    _binary(_op, _fn)


@onnx_op("Pow")
def _pow(n, x, y):
    if is_float(np.dtype(x.dtype)):
        return F.power(x, F.cast(y, x.dtype))
    if is_float(np.dtype(y.dtype)):      # int base, float exponent: the result keeps the base's type
        return F.cast(F.power(F.cast(x, np.float64), F.cast(y, np.float64)), x.dtype)
    return F.power(x, F.cast(y, x.dtype))


def _variadic(fn, op_type):
    def translate(n, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = _symbolic(op_type, out, x) if isinstance(out, SymInts) or isinstance(x, SymInts) else fn(out, x)
        return out if len(xs) > 1 else _identity(out)
    return translate


def _identity(x):
    return x if isinstance(x, SymInts) else F.identity(x)


onnx_op("Max", symbolic=True)(_variadic(F.maximum, "Max"))
onnx_op("Min", symbolic=True)(_variadic(F.minimum, "Min"))
onnx_op("Sum")(_variadic(F.add, "Add"))


@onnx_op("Mean")
def _mean(n, *xs):
    return _variadic(F.add, "Add")(n, *xs) / scalar_like(len(xs), require_float(n, xs[0]))


@onnx_op("Where", symbolic=True)
def _where(n, cond, a, b):
    if isinstance(a, SymInts) or isinstance(b, SymInts):
        return entrywise(lambda c, x, y: x if c else y, cond, a, b)
    return F.where(cond, a, b)


@onnx_op("Clip")
def _clip(n, x, lo=None, hi=None):
    if n.has_attr("min") or n.has_attr("max"):     # opset < 11
        lo, hi = n.attr("min"), n.attr("max")
    lo = None if lo is None else F.cast(lo, x.dtype)
    hi = None if hi is None else F.cast(hi, x.dtype)
    return F.identity(x) if lo is None and hi is None else F.clip(x, lo, hi)


@onnx_op("Mod", symbolic=True)
def _mod(n, a, b):
    """fmod = 1: a - trunc(a / b)·b (the sign of a); fmod = 0: the sign of b, as Python's %. Integer
    quotients truncate exactly (gcompile's integer div); float ones are computed in float64. On sizes,
    the remainder is kept symbolic (sizes.mod)."""
    if isinstance(a, SymInts) or isinstance(b, SymInts):
        return entrywise(partial(sizes.mod, fmod=bool(n.attr("fmod", 0))), a, b)
    dtype = np.result_type(a.dtype, b.dtype)
    if is_float(dtype):                  # in float64, so that a float32 quotient rounds far less
        wide_a, wide_b = F.cast(a, np.float64), F.cast(b, np.float64)
        q = wide_a / wide_b
        rest = wide_a - F.sign(q) * F.floor(F.abs(q)) * wide_b
        inf = np.float64(np.inf)
        by_infinity = F.logical_and(F.equal(F.abs(wide_b), inf), F.less(F.abs(wide_a), inf))   # fmod(a, ±inf) = a
        rest = F.cast(F.where(by_infinity, wide_a, rest), dtype)
    else:
        a, b = F.cast(a, dtype), F.cast(b, dtype)
        zero = scalar_like(0, a)   # by zero: 0, numpy's integer remainder (div gives 0 there, so a - 0·b is a)
        rest = F.where(F.equal(b, zero), zero, a - apply("div", [a, b]) * b)
    b = F.cast(b, dtype)
    if n.attr("fmod", 0):
        return rest
    zero = scalar_like(0, rest)
    wrong_sign = F.logical_and(F.not_equal(rest, zero), F.not_equal(F.less(rest, zero), F.less(b, zero)))
    return F.where(wrong_sign, rest + b, rest)


# -- hyperbolic functions and Swish, written with the ops above -----------------------------------------
@onnx_op("Sinh", "Cosh")
def _sinh_cosh(n, x):
    x = require_float(n, x)
    e, inv = F.exp(x), F.exp(-x)
    return (e - inv if n.op_type == "Sinh" else e + inv) * 0.5


@onnx_op("Asinh")
def _asinh(n, x):
    x = require_float(n, x)
    return F.log(x + F.sqrt(x * x + 1))


@onnx_op("Acosh")
def _acosh(n, x):
    x = require_float(n, x)
    return F.log(x + F.sqrt(x * x - 1))


@onnx_op("Atanh")
def _atanh(n, x):
    x = require_float(n, x)
    return F.log((1 + x) / (1 - x)) * 0.5


@onnx_op("Swish")
def _swish(n, x):
    x = require_float(n, x)
    return x * F.sigmoid(x * n.attr("alpha", 1.0))
