"""Elementwise ops: arithmetic with numpy broadcasting and dtype promotion, comparisons,
where, and the unary math functions (the activation functions: ops/activations.py)."""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import ShapeError
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from . import integers
from .basic import cast
from .emitter import Emitter
from .poly import SIGMOID_PRIME, TANH_PRIME, poly
from .shape_rules import (
    binary_broadcast,
    binary_float,
    binary_numeric,
    broadcast_shapes,
    compare_broadcast,
    same_dtype,
    unary_float,
    unary_numeric,
)

__all__ = ["abs", "add", "addcdiv", "addcmul", "ceil", "clip", "cos", "divide", "equal", "erf", "exp", "exp2", "expm1",
           "floor",
           "greater", "greater_equal", "heaviside", "lerp", "less", "less_equal", "log", "log10", "log1p", "log2",
           "logaddexp", "logaddexp2", "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum",
           "multiply", "negative",
           "not_equal", "pow", "power", "round", "rsqrt", "sigmoid", "sign", "sin",
           "sqrt", "square", "subtract", "tan", "tanh", "where"]


def _onnx(op_type, **fixed):
    """A lowering that emits one ONNX node of `op_type` over the node's inputs."""
    return lambda ctx, names, node: ctx.emit(op_type, names, **fixed)


def _promote(*values) -> list[Tensor]:
    """numpy 2 promotion (NEP 50): Python scalars are weak and take the tensors' dtype. Beside a
    Tensor, NumPy scalars (np.float64(...), what np.sqrt(d) returns) are weak too, as in PyTorch
    and JAX, so x_float32 * (1 / np.sqrt(d)) stays float32 (NumPy itself would give float64);
    0-d arrays stay strong, as in NumPy."""
    if any(isinstance(v, Tensor) for v in values):
        values = tuple(v.item() if isinstance(v, np.generic) else v for v in values)
    dtype = np.result_type(*[v.dtype if isinstance(v, Tensor) else
                             v if isinstance(v, (bool, int, float, np.ndarray, np.generic)) else np.asarray(v)
                             for v in values])
    return [cast(v, dtype) if isinstance(v, Tensor) else as_tensor(np.asarray(v, dtype=dtype)) for v in values]


def promote_float(*values) -> list[Tensor]:
    """_promote, then integer and bool operands to float64, as numpy's true division and math functions do."""
    promoted = _promote(*values)
    return [cast(v, np.float64) for v in promoted] if promoted[0].dtype.kind in "biu" else promoted


# -- arithmetic ------------------------------------------------------------------------------
def _binary(op) -> Callable[..., Tensor]:
    def fn(a, b) -> Tensor:
        return apply(op, _promote(a, b))
    fn.__name__ = op
    return fn


add, subtract, multiply = _binary("add"), _binary("sub"), _binary("mul")
power = _binary("pow")
maximum, minimum = _binary("maximum"), _binary("minimum")


def _float_or_none(x, grad):
    return grad if is_float(x.dtype) else None


defop("add", infer=binary_broadcast, reference=np.add, lower=_onnx("Add"),
      vjp=lambda g, ins, outs: [g[0], g[0]], traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("sub", infer=binary_numeric, reference=np.subtract, lower=_onnx("Sub"),
      vjp=lambda g, ins, outs: [g[0], -g[0]],
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("mul", infer=binary_broadcast, reference=np.multiply, lower=_onnx("Mul"),
      vjp=lambda g, ins, outs: [g[0] * ins[1], g[0] * ins[0]],
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})


def _div_vjp(g, ins, outs):
    a, b = ins
    ga = g[0] / b
    return [ga, -ga * outs[0]]


def _truncated(a, b):
    """a / b truncated toward zero, exact (a / b in float64 is not, past 2**53)."""
    floored = np.floor_divide(a, b)
    inexact = (a - floored * b != 0) & ((a < 0) != (b < 0))
    return np.where(inexact, floored + 1, floored)


_integer_quotient = integers.safe_reference(_truncated)


def _div_reference(a, b):
    # ONNX Div truncates toward zero on integers; by zero it gives 0 here (ops/integers.py)
    return np.divide(a, b) if is_float(np.result_type(a, b)) else _integer_quotient(a, b)


def _lower_div(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    if is_float(e.dtype):
        return ctx.emit("Div", names)
    return integers.safe_division(e, e.wrap(names[0]), e.wrap(names[1]), lambda a, b: a / b).name


def divide(a, b) -> Tensor:
    """True division, as numpy: integer or bool operands give float64 (the `div` op itself
    truncates integers, as ONNX Div does)."""
    return apply("div", promote_float(a, b))


defop("div", infer=binary_numeric, reference=_div_reference, lower=_lower_div, vjp=_div_vjp,
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})


def _pow_vjp(g, ins, outs):
    x, y = ins
    # base 1 where y == 0: there y·x^(y-1) is 0 even at x = 0 (not 0·inf), so x**2 at 0 has finite
    # derivatives of every order (passes drop the where when y is a nonzero constant)
    gx = g[0] * y * power(where(equal(y, 0), 1, x), y - 1)
    if not is_float(y.dtype):
        return [gx, None]
    # d/dy x^y = x^y·ln x is 0·(-inf) at x = 0; PyTorch's value there is 0 for y >= 0 (0^y is
    # constant in y), which ln 1 gives, with no NaN in the derivatives of this rule either
    base = where(logical_and(equal(x, 0), greater_equal(y, 0)), 1, x)
    return [gx, g[0] * outs[0] * log(base)]


def _lower_pow(ctx, names, node):
    dtype = node.outputs[0].dtype
    if is_float(dtype):
        return ctx.emit("Pow", names)
    # integer powers by squaring: ONNX Runtime's Pow computes them in float64 (ops/integers.py)
    exponent = ctx.graph.nodes[node.inputs[1].node]
    known = exponent.attrs["value"] if exponent.op == "constant" else None
    return integers.power(ctx, names[0], names[1], dtype, known)


def _pow_reference(a, b):
    return np.power(a, b) if is_float(np.result_type(a, b)) else integers.power_reference(a, b)


defop("pow", infer=binary_broadcast, reference=_pow_reference, lower=_lower_pow, vjp=_pow_vjp,
      traits={Trait.BROADCASTS, Trait.ELEMENTWISE})


def _minmax_vjp(loses):
    """Each operand gets g where the other does not win, half of it at ties (as PyTorch and JAX do);
    where one operand is NaN the comparisons are false and both get g, as in PyTorch."""
    def vjp(g, ins, outs):
        a, b = ins
        zero, tie = zeros_scalar(g[0]), equal(a, b)
        share = where(tie, g[0] * 0.5, g[0])
        return [where(loses(a, b), zero, share), where(loses(b, a), zero, share)]
    return vjp


def zeros_scalar(like: Tensor) -> Tensor:
    return as_tensor(np.zeros((), like.dtype))


def _lower_extremum(op_type: str):
    def lower(ctx, names, node):
        if integers.orders_wrongly(node.outputs[0].dtype):
            return integers.extremum(ctx, names[0], names[1], largest=op_type == "Max")
        return ctx.emit(op_type, names)
    return lower


defop("maximum", infer=binary_broadcast, reference=np.maximum, lower=_lower_extremum("Max"),
      vjp=_minmax_vjp(lambda a, b: less(a, b)), traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("minimum", infer=binary_broadcast, reference=np.minimum, lower=_lower_extremum("Min"),
      vjp=_minmax_vjp(lambda a, b: greater(a, b)), traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})


def logaddexp(a, b) -> Tensor:
    """log(exp(a) + exp(b)) without overflow, as numpy.logaddexp (integer operands give float64)."""
    return apply("logaddexp", promote_float(a, b))


def _lower_logaddexp(ctx, names, node):
    # max(a, b) + log(1 + exp(-|a - b|)); where a == b (both infinite included, where a - b is NaN)
    # the result is a + log 2.
    a, b = names
    dtype = node.outputs[0].dtype
    gap = ctx.emit("Neg", [ctx.emit("Abs", [ctx.emit("Sub", [a, b])])])
    if dtype == np.float64:   # onnxruntime's CPU provider has no float64 Softplus
        tail = ctx.emit("Log", [ctx.emit("Add", [ctx.emit("Exp", [gap]), ctx.const(np.ones((), dtype))])])
    else:
        tail = ctx.emit("Softplus", [gap])
    general = ctx.emit("Add", [ctx.emit("Max", [a, b]), tail])
    tie = ctx.emit("Add", [a, ctx.const(np.asarray(math.log(2), dtype))])
    return ctx.emit("Where", [ctx.emit("Equal", [a, b]), tie, general])


def _logaddexp_vjp(g, ins, outs):
    # d/da = exp(a) / (exp(a) + exp(b)) = sigmoid(a - b): exact at ties too (half to each operand)
    a, b = ins
    return [g[0] * sigmoid(a - b), g[0] * sigmoid(b - a)]


defop("logaddexp", infer=binary_float, reference=np.logaddexp, lower=_lower_logaddexp, vjp=_logaddexp_vjp,
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})


def logaddexp2(a, b) -> Tensor:
    """log2(2**a + 2**b) without overflow, as numpy.logaddexp2: logaddexp of a·ln 2 and b·ln 2, over
    ln 2 (so ties, infinities and the gradients, 2**a / (2**a + 2**b), are logaddexp's)."""
    a, b = promote_float(a, b)
    return logaddexp(a * math.log(2), b * math.log(2)) * (1 / math.log(2))


# -- comparisons and logic (no gradient) ---------------------------------------------------------
def _compare(op, onnx_op, reference, negate=False) -> Callable[..., Tensor]:
    def lower(ctx, names, node):
        out = ctx.emit(onnx_op, names)
        return ctx.emit("Not", [out]) if negate else out
    defop(op, infer=compare_broadcast, reference=reference, lower=lower,
          traits={Trait.NONDIFF, Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
    fn = _binary(op)
    return fn


less: Callable[..., Tensor] = _compare("less", "Less", np.less)
less_equal: Callable[..., Tensor] = _compare("less_equal", "LessOrEqual", np.less_equal)
greater: Callable[..., Tensor] = _compare("greater", "Greater", np.greater)
greater_equal: Callable[..., Tensor] = _compare("greater_equal", "GreaterOrEqual", np.greater_equal)
equal = _compare("equal", "Equal", np.equal)
not_equal = _compare("not_equal", "Equal", np.not_equal, negate=True)


def _bool_infer(types, **_):
    for t in types:
        if t.dtype != np.bool_:
            raise ShapeError(f"logical ops need bool operands, got {t.dtype.name}")
    return compare_broadcast(types)


defop("logical_and", infer=_bool_infer, reference=np.logical_and, lower=_onnx("And"),
      traits={Trait.NONDIFF, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("logical_or", infer=_bool_infer, reference=np.logical_or, lower=_onnx("Or"),
      traits={Trait.NONDIFF, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("logical_not", infer=_bool_infer, reference=np.logical_not, lower=_onnx("Not"),
      traits={Trait.NONDIFF, Trait.ELEMENTWISE})


def logical_and(a, b) -> Tensor:
    """Elementwise a and b of bool Tensors, broadcast (no gradient: the result is bool)."""
    return apply("logical_and", [a, b])


def logical_or(a, b) -> Tensor:
    """Elementwise a or b of bool Tensors, broadcast (no gradient: the result is bool)."""
    return apply("logical_or", [a, b])


def logical_not(a) -> Tensor:
    """Elementwise not a of a bool Tensor (no gradient: the result is bool)."""
    return apply("logical_not", [a])


def _truth(x) -> Tensor:
    """x as bool: nonzero (NaN included) is True, as numpy's and torch's logical functions read numbers."""
    x = as_tensor(x)
    return x if x.dtype == np.bool_ else not_equal(x, np.zeros((), x.dtype))


def logical_xor(a, b) -> Tensor:
    """Elementwise a xor b (numpy.logical_xor, torch.logical_xor): numbers count as True where nonzero;
    the result is bool (no gradient)."""
    return not_equal(_truth(a), _truth(b))


# -- where -------------------------------------------------------------------------------------
def where(cond, a, b) -> Tensor:
    """Elementwise choice: a where cond is true, else b (broadcasting all three)."""
    cond = as_tensor(cond)
    if cond.dtype != np.bool_:
        cond = cast(cond, np.bool_)
    a, b = _promote(a, b)
    return apply("where", [cond, a, b])


def _where_infer(types):
    dtype = same_dtype(types[1:])
    return [tensor_type(dtype, broadcast_shapes(*(t.shape for t in types)))]


def _where_vjp(g, ins, outs):
    cond, a, b = ins
    zero = zeros_scalar(g[0])
    return [None, where(cond, g[0], zero), where(cond, zero, g[0])]


defop("where", infer=_where_infer, reference=np.where, lower=_onnx("Where"), vjp=_where_vjp,
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})


# -- unary math ----------------------------------------------------------------------------------
def _unary(op) -> Callable[..., Tensor]:
    def fn(x) -> Tensor:
        x = as_tensor(x)
        if not is_float(x.dtype) and op not in ("neg", "abs", "sign"):
            x = cast(x, np.float32)
        return apply(op, [x])
    fn.__name__ = op
    return fn


def _unary_def(op, reference, lower, vjp, traits=(Trait.CHEAP,), infer=unary_float) -> Callable[..., Tensor]:
    """Register a unary math op (elementwise by construction) and return its user-facing function."""
    defop(op, infer=infer, reference=reference, lower=lower, vjp=vjp, traits={*traits, Trait.ELEMENTWISE})
    return _unary(op)


def _numeric(types, **_):
    return [types[0]]


negative = _unary_def("neg", np.negative, _onnx("Neg"), lambda g, ins, outs: [-g[0]], infer=unary_numeric)
exp = _unary_def("exp", np.exp, _onnx("Exp"), lambda g, ins, outs: [g[0] * outs[0]])
log = _unary_def("log", np.log, _onnx("Log"), lambda g, ins, outs: [g[0] / ins[0]])
sqrt = _unary_def("sqrt", np.sqrt, _onnx("Sqrt"), lambda g, ins, outs: [g[0] * 0.5 / outs[0]])
rsqrt = _unary_def("rsqrt", lambda x: 1 / np.sqrt(x),
                   lambda ctx, names, node: ctx.emit("Reciprocal", [ctx.emit("Sqrt", names)]),
                   lambda g, ins, outs: [g[0] * -0.5 * outs[0] / ins[0]])
abs = _unary_def("abs", np.abs, _onnx("Abs"), lambda g, ins, outs: [g[0] * sign(ins[0])], infer=_numeric)
sin = _unary_def("sin", np.sin, _onnx("Sin"), lambda g, ins, outs: [g[0] * cos(ins[0])])
cos: Callable[..., Tensor] = _unary_def("cos", np.cos, _onnx("Cos"), lambda g, ins, outs: [-(g[0] * sin(ins[0]))])
tan = _unary_def("tan", np.tan, _onnx("Tan"), lambda g, ins, outs: [g[0] * (1 + outs[0] * outs[0])])
# tanh' = 1 - y², sigmoid' = s - s²: polynomials in the output, whose own derivatives are
# closed forms too (ops/poly.py)
tanh = _unary_def("tanh", np.tanh, _onnx("Tanh"), lambda g, ins, outs: [g[0] * poly(outs[0], TANH_PRIME)])
sigmoid = _unary_def("sigmoid", lambda x: 0.5 * (1 + np.tanh(0.5 * x)), _onnx("Sigmoid"),
                     lambda g, ins, outs: [g[0] * poly(outs[0], SIGMOID_PRIME)])
_erf_reference = np.vectorize(math.erf, otypes=[float])
erf = _unary_def("erf", _erf_reference, _onnx("Erf"),
                 lambda g, ins, outs: [g[0] * (2 / math.sqrt(math.pi)) * exp(-(ins[0] * ins[0]))])


def emit_log1p(ctx, x: str, dtype) -> str:
    """ONNX nodes for log(1 + x): log(1+x) * x / ((1+x) - 1) is accurate where plain log(1+x) rounds
    away small x (Kahan); at x = +inf that ratio is inf/inf, so +inf passes through."""
    one = ctx.const(np.ones((), dtype))
    u = ctx.emit("Add", [x, one])
    d = ctx.emit("Sub", [u, one])
    ratio = ctx.emit("Div", [ctx.emit("Mul", [ctx.emit("Log", [u]), x]), d])
    finite = ctx.emit("Where", [ctx.emit("Equal", [d, ctx.const(np.zeros((), dtype))]), x, ratio])
    return ctx.emit("Where", [ctx.emit("IsInf", [x], detect_negative=0), x, finite])


def _lower_log1p(ctx, names, node):
    return emit_log1p(ctx, names[0], node.outputs[0].dtype)


def _lower_expm1(ctx, names, node):
    # (e^x - 1) * x / log(e^x) near 0; plain e^x - 1 for |x| > 1 (where it is already accurate).
    x, dtype = names[0], node.outputs[0].dtype
    one = ctx.const(np.ones((), dtype))
    u = ctx.emit("Exp", [x])
    d = ctx.emit("Sub", [u, one])
    ratio = ctx.emit("Div", [ctx.emit("Mul", [d, x]), ctx.emit("Log", [u])])
    small = ctx.emit("Where", [ctx.emit("Equal", [u, one]), x, ratio])
    return ctx.emit("Where", [ctx.emit("Greater", [ctx.emit("Abs", [x]), one]), d, small])


log1p = _unary_def("log1p", np.log1p, _lower_log1p, lambda g, ins, outs: [g[0] / (1 + ins[0])])
expm1 = _unary_def("expm1", np.expm1, _lower_expm1, lambda g, ins, outs: [g[0] * (outs[0] + 1)])

# Piecewise-constant ops: declared non-differentiable (zero gradient, never an error).
def _lower_sign(ctx, names, node):
    dtype = node.outputs[0].dtype
    return integers.sign(ctx, names[0], dtype) if integers.orders_wrongly(dtype) else ctx.emit("Sign", names)


sign: Callable[..., Tensor] = _unary_def("sign", np.sign, _lower_sign, None, traits=(Trait.NONDIFF,),
                                         infer=unary_numeric)
floor = _unary_def("floor", np.floor, _onnx("Floor"), None, traits=(Trait.NONDIFF,))
ceil = _unary_def("ceil", np.ceil, _onnx("Ceil"), None, traits=(Trait.NONDIFF,))
round = _unary_def("round", np.round, _onnx("Round"), None, traits=(Trait.NONDIFF,))


def square(x) -> Tensor:
    """x * x (a product, not Pow: its gradient 2x needs no power, and x's sign is kept exactly)."""
    x = as_tensor(x)
    return x * x


def clip(x, lo=None, hi=None) -> Tensor:
    """x limited to [lo, hi] (either bound may be None; where lo > hi the result is hi, as numpy's);
    NaN stays NaN. As torch.clamp, x's gradient passes where lo <= x <= hi, bounds included, and
    a tensor bound gets it where the bound is the result."""
    x = as_tensor(x)
    bounds = [b for b in (lo, hi) if b is not None]
    if not bounds:
        return x
    if not all(not isinstance(b, Tensor) and np.ndim(b) == 0 for b in bounds):
        if lo is not None:
            x = where(less(x, lo), lo, x)
        if hi is not None:
            x = where(greater(x, hi), hi, x)
        return x
    x = _promote(x, *bounds)[0]
    if x.dtype.kind in "iu":
        # integer bounds stay exact integers (float64 would round those past 2**53), held within x's dtype
        info = np.iinfo(x.dtype)

        def held(b):
            return None if b is None else min(max(int(b), int(info.min)), int(info.max))
        return bounded(x, held(lo), held(hi), inclusive=True)
    return bounded(x, None if lo is None else float(lo), None if hi is None else float(hi), inclusive=True)


def bounded(x: Tensor, lo: float | int | None, hi: float | int | None, inclusive: bool) -> Tensor:
    """The clip op with constant bounds: the gradient passes inside [lo, hi] (inclusive, torch.clamp's
    convention) or only strictly inside (torch.nn.functional.hardtanh's)."""
    return apply("clip", [x], lo=lo, hi=hi, inclusive=inclusive)


def _clip_reference(x, lo, hi, inclusive):
    y = x if lo is None else np.maximum(x, np.asarray(lo, x.dtype))
    return y if hi is None else np.minimum(y, np.asarray(hi, x.dtype))


def _lower_clip(ctx, names, node):
    dtype = node.outputs[0].dtype
    lo, hi = (None if v is None else ctx.const(np.asarray(v, dtype)) for v in (node.attrs["lo"], node.attrs["hi"]))
    if integers.orders_wrongly(dtype):
        return integers.clip(ctx, names[0], lo, hi)
    return ctx.emit("Clip", [names[0], lo or "", hi or ""])


def _clip_vjp(g, ins, outs, lo, hi, inclusive):
    x = ins[0]
    if not is_float(x.dtype):
        return [None]
    above, below = (greater_equal, less_equal) if inclusive else (greater, less)
    inside = [test(x, bound) for test, bound in ((above, lo), (below, hi)) if bound is not None]
    mask = inside[0] if len(inside) == 1 else logical_and(*inside)
    return [where(mask, g[0], zeros_scalar(g[0]))]


defop("clip", infer=lambda types, **_: [types[0]], reference=_clip_reference, lower=_lower_clip, vjp=_clip_vjp,
      traits={Trait.CHEAP, Trait.ELEMENTWISE})


def lerp(start, end, weight) -> Tensor:
    """start + weight·(end - start) (torch.lerp), computed from the nearer end so that weight = 1 gives
    end exactly."""
    start, end, weight = promote_float(start, end, weight)
    d = end - start
    return where(less(abs(weight), 0.5), start + weight * d, end - d * (1 - weight))


def addcmul(input, tensor1, tensor2, value=1) -> Tensor:
    """input + value·tensor1·tensor2 (torch.addcmul), broadcast."""
    product = multiply(tensor1, tensor2)
    return add(input, product if value == 1 else multiply(product, value))


def addcdiv(input, tensor1, tensor2, value=1) -> Tensor:
    """input + value·tensor1/tensor2 (torch.addcdiv), broadcast; integer operands divide as floats."""
    ratio = divide(tensor1, tensor2)
    return add(input, ratio if value == 1 else multiply(ratio, value))


def heaviside(x, values) -> Tensor:
    """The step function (numpy.heaviside, torch.heaviside): 0 where x < 0, `values` where x == 0, 1
    where x > 0, NaN where x is NaN (as numpy; torch gives 0 there); integers give float64, as numpy. x
    gets no gradient (the step is flat wherever it is differentiable); `values` gets it where x == 0."""
    x, values = promote_float(x, values)
    step = where(not_equal(x, x), np.asarray(np.nan, x.dtype), cast(greater(x, 0), x.dtype))
    return where(equal(x, 0), values, step)


# -- exponentials and logarithms in other bases ----------------------------------------------------------
def exp2(x) -> Tensor:
    """2**x (numpy.exp2): ONNX Pow with base 2, exact at integers."""
    return power(2.0, promote_float(x)[0])


def log2(x) -> Tensor:
    """The base-2 logarithm (numpy.log2)."""
    return log(promote_float(x)[0]) * (1 / math.log(2))


def log10(x) -> Tensor:
    """The base-10 logarithm (numpy.log10)."""
    return log(promote_float(x)[0]) * (1 / math.log(10))


def pow(x, y) -> Tensor:  # noqa: A001 - numpy's name
    """x ** y elementwise, broadcast: numpy's other name for power()."""
    return power(x, y)
