"""Activation functions (torch.nn.functional names and defaults).

relu, leaky_relu, elu, selu, softplus, silu and gelu are ops of their own: each lowers to one
ONNX operator or a short stable formula, and their derivatives of every order are closed forms
(ops/poly.py for silu and gelu). The rest are compositions of gcompile ops chosen so that the
gradient is PyTorch's at every kink and stays finite where the function is: hardtanh, relu6 and
hardsigmoid pass no gradient at their bounds (the clip op with strict bounds), celu is
α·elu(x/α), mish and logsigmoid go through the stable softplus. Second and higher derivatives
come from the same ops' rules. (tanh and sigmoid, functions of numerics as much as of networks,
live with the unary math in ops/elementwise.py.)
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.registry import Trait, defop
from .basic import cast
from .elementwise import (
    _erf_reference,
    _onnx,
    _promote,
    _unary_def,
    abs,
    bounded,
    greater,
    less_equal,
    sigmoid,
    sign,
    tanh,
    where,
    zeros_scalar,
)
from .indexing import split
from .poly import SIGMOID_PRIME, gelu_deriv, poly, silu_deriv
from .shape import reshape
from .shape_rules import axis_for, unary_float

__all__ = ["celu", "elu", "gelu", "glu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu",
           "logsigmoid", "mish", "prelu", "relu", "relu6", "selu", "silu", "softplus", "softshrink", "softsign",
           "tanhshrink", "threshold"]


# -- relu ----------------------------------------------------------------------------------------
def _relu_vjp(g, ins, outs):
    """where(y > 0, g, 0): the mask reads relu's output (y > 0 exactly where x > 0), so x need not
    stay alive for backward (under a max_pool, passes/simplify.py moves the select before the
    pool's scatter)."""
    return [where(greater(outs[0], 0), g[0], zeros_scalar(g[0]))]


relu = _unary_def("relu", lambda x: np.maximum(x, 0), _onnx("Relu"), _relu_vjp)


# -- parametrised activations ------------------------------------------------------------------
# onnxruntime's CPU provider has no float64 kernel for LeakyRelu, Elu or Selu (probed with 1.31),
# so in float64 these lower to the same formula written with ops that have one (softplus always
# does: see _lower_softplus).
def _f64(node) -> bool:
    return node.outputs[0].dtype == np.float64


def _scalar(ctx, value) -> str:
    return ctx.const(np.asarray(value, np.float64))


def _where_positive(ctx, x, otherwise) -> str:
    """x where x > 0, else `otherwise` (float64 lowerings)."""
    return ctx.emit("Where", [ctx.emit("Greater", [x, _scalar(ctx, 0)]), x, otherwise])


def _elu_negative_part(ctx, x, alpha) -> str:
    """alpha * (exp(min(x, 0)) - 1) (float64 lowerings)."""
    e = ctx.emit("Exp", [ctx.emit("Min", [x, _scalar(ctx, 0)])])
    return ctx.emit("Mul", [ctx.emit("Sub", [e, _scalar(ctx, 1)]), _scalar(ctx, alpha)])


def leaky_relu(x, slope: float = 0.2) -> Tensor:
    """x where x > 0, slope * x elsewhere (the gradient at 0 is slope's side)."""
    return apply("leaky_relu", [as_tensor(x)], slope=float(slope))


def _lower_leaky_relu(ctx, names, node):
    slope = node.attrs["slope"]
    if not _f64(node):
        return ctx.emit("LeakyRelu", names, alpha=slope)
    return _where_positive(ctx, names[0], ctx.emit("Mul", [names[0], _scalar(ctx, slope)]))


defop("leaky_relu", infer=unary_float, reference=lambda x, slope: np.where(x > 0, x, slope * x),
      lower=_lower_leaky_relu,
      vjp=lambda g, ins, outs, slope: [where(greater(ins[0], 0), g[0], g[0] * slope)],
      traits={Trait.CHEAP, Trait.ELEMENTWISE})


def elu(x, alpha: float = 1.0) -> Tensor:
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""
    return apply("elu", [as_tensor(x)], alpha=float(alpha))


def _lower_elu(ctx, names, node):
    alpha = node.attrs["alpha"]
    if not _f64(node):
        return ctx.emit("Elu", names, alpha=alpha)
    return _where_positive(ctx, names[0], _elu_negative_part(ctx, names[0], alpha))


defop("elu", infer=unary_float, reference=lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))),
      lower=_lower_elu,
      vjp=lambda g, ins, outs, alpha: [g[0] * where(greater(ins[0], 0), 1.0, outs[0] + alpha)],
      traits={Trait.CHEAP, Trait.ELEMENTWISE})

_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def selu(x) -> Tensor:
    """The self-normalising ELU: scale * elu(x, alpha) with the fixed constants of Klambauer et al.
    (alpha ≈ 1.6733, scale ≈ 1.0507), as torch.nn.functional.selu."""
    return apply("selu", [as_tensor(x)])


def _lower_selu(ctx, names, node):
    if not _f64(node):
        return ctx.emit("Selu", names, alpha=_SELU_ALPHA, gamma=_SELU_SCALE)
    elu_x = _where_positive(ctx, names[0], _elu_negative_part(ctx, names[0], _SELU_ALPHA))
    return ctx.emit("Mul", [elu_x, _scalar(ctx, _SELU_SCALE)])


defop("selu", infer=unary_float,
      reference=lambda x: _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0))),
      lower=_lower_selu,
      vjp=lambda g, ins, outs: [g[0] * where(greater(ins[0], 0), _SELU_SCALE, outs[0] + _SELU_ALPHA * _SELU_SCALE)],
      traits={Trait.CHEAP, Trait.ELEMENTWISE})


def softplus(x, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed stably."""
    return apply("softplus", [as_tensor(x)], beta=float(beta))


def _softplus_reference(x, beta):
    bx = beta * x
    return (np.maximum(bx, 0) + np.log1p(np.exp(-np.abs(bx)))) / beta


def _lower_softplus(ctx, names, node):
    """max(x, 0) + log1p(t) with t = exp(-|x|) in (0, 1], log1p(t) as log(u) + (t - (u - 1)) / u
    for u = 1 + t rounded: (u - 1) is exact, so the second term puts back the rounding of 1 + t
    (all of t where u rounds to 1, far left), to within 2 ulp of float64 in float32 (ONNX Runtime's
    Softplus too). Written out, not ONNX's Softplus, whose spec defines it as log(exp(x) + 1)
    with no accuracy promised, and for which ONNX Runtime's CPU provider has a slow scalar
    kernel (docs/strategies.md)."""
    beta, x, dtype = node.attrs["beta"], names[0], node.outputs[0].dtype
    b, one = ctx.const(np.asarray(beta, dtype)), ctx.const(np.ones((), dtype))
    if beta != 1.0:
        x = ctx.emit("Mul", [x, b])
    t = ctx.emit("Exp", [ctx.emit("Neg", [ctx.emit("Abs", [x])])])
    u = ctx.emit("Add", [t, one])
    lost = ctx.emit("Div", [ctx.emit("Sub", [t, ctx.emit("Sub", [u, one])]), u])
    y = ctx.emit("Add", [ctx.emit("Relu", [x]), ctx.emit("Add", [ctx.emit("Log", [u]), lost])])
    return y if beta == 1.0 else ctx.emit("Div", [y, b])


defop("softplus", infer=unary_float, reference=_softplus_reference, lower=_lower_softplus,
      vjp=lambda g, ins, outs, beta: [g[0] * sigmoid(ins[0] * beta)],
      traits={Trait.CHEAP, Trait.ELEMENTWISE})


def silu(x) -> Tensor:
    """x·sigmoid(x) (swish). One op whose derivatives of every order are closed forms in x and
    sigmoid(x), its second output (ops/poly.py)."""
    x = as_tensor(x)
    if not is_float(x.dtype):   # as x * sigmoid(x) promotes: int64 gives float64
        x = cast(x, np.result_type(x.dtype, np.float32))
    return apply_n("silu", [x])[0]


def _silu_reference(x):
    s = 0.5 * (1 + np.tanh(0.5 * x))
    return x * s, s


def _lower_silu(ctx, names, node):
    s = ctx.emit("Sigmoid", names)
    return [ctx.emit("Mul", [names[0], s]), s]


def _silu_vjp(g, ins, outs):
    x, s = ins[0], outs[1]
    gx = None if g[0] is None else g[0] * silu_deriv(x, s, 1)
    if g[1] is not None:
        gs = g[1] * poly(s, SIGMOID_PRIME)
        gx = gs if gx is None else gx + gs
    return [gx]


defop("silu", infer=lambda types: unary_float(types) * 2, reference=_silu_reference, lower=_lower_silu,
      vjp=_silu_vjp, traits={Trait.CHEAP, Trait.ELEMENTWISE})


def gelu(x, approximate: bool = False) -> Tensor:
    """x·Φ(x); approximate=True uses the tanh form."""
    return apply("gelu", [as_tensor(x)], approximate=bool(approximate))


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu_reference(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf_reference(x / math.sqrt(2)))


def _lower_gelu(ctx, names, node):
    approximate, dtype = node.attrs["approximate"], node.outputs[0].dtype
    # onnxruntime's float64 Gelu runs through Erf (no float64 CPU kernel) or, for tanh, with
    # float32-accurate constants; the expanded form is exact, and shows Erf to the float64 check.
    if ctx.opset >= 20 and dtype != np.float64:
        return ctx.emit("Gelu", names, approximate="tanh" if approximate else "none")
    c = lambda v: ctx.const(np.asarray(v, dtype))  # noqa: E731
    x = names[0]
    if approximate:
        cube = ctx.emit("Mul", [x, ctx.emit("Mul", [x, x])])
        inner = ctx.emit("Mul", [c(_SQRT_2_OVER_PI), ctx.emit("Add", [x, ctx.emit("Mul", [c(0.044715), cube])])])
        phi2 = ctx.emit("Add", [c(1.0), ctx.emit("Tanh", [inner])])
    else:
        phi2 = ctx.emit("Add", [c(1.0), ctx.emit("Erf", [ctx.emit("Mul", [x, c(1 / math.sqrt(2))])])])
    return ctx.emit("Mul", [ctx.emit("Mul", [x, phi2]), c(0.5)])


def _gelu_vjp(g, ins, outs, approximate):
    x = ins[0]
    if approximate:
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        t = tanh(inner)
        dinner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
        return [g[0] * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner)]
    return [g[0] * gelu_deriv(x, 1)]     # Φ + x·φ, and closed forms at every higher order


defop("gelu", infer=unary_float, reference=_gelu_reference, lower=_lower_gelu, vjp=_gelu_vjp,
      traits={Trait.ELEMENTWISE})


# -- compositions ---------------------------------------------------------------------------------
def _float(x) -> Tensor:
    x = as_tensor(x)
    return x if is_float(x.dtype) else cast(x, np.float32)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clipped to [min_val, max_val]; the gradient is 0 at the bounds, as PyTorch's."""
    return bounded(_float(x), float(min_val), float(max_val), inclusive=False)


def relu6(x) -> Tensor:
    """min(max(x, 0), 6), hardtanh(x, 0, 6): gradient 0 at 0 and at 6."""
    return hardtanh(x, 0.0, 6.0)


def hardsigmoid(x) -> Tensor:
    """relu6(x + 3) / 6: 1/6 strictly between -3 and 3, 0 beyond and at ±3."""
    return bounded(_float(x) * (1 / 6) + 0.5, 0.0, 1.0, inclusive=False)


def hardswish(x) -> Tensor:
    """x·hardsigmoid(x): gradient 0 at -3, 1 at 3, as PyTorch's."""
    x = _float(x)
    return x * hardsigmoid(x)


def celu(x, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, α(exp(x/α) - 1)) = α·elu(x/α): gradient 1 at 0."""
    return elu(_float(x) * (1 / alpha), 1.0) * alpha


def _shrink(x, lambd: float, shift: float) -> Tensor:
    x = _float(x)
    return where(less_equal(abs(x), lambd), 0.0, x - sign(x) * shift)


def softshrink(x, lambd: float = 0.5) -> Tensor:
    """x ∓ λ beyond ±λ, 0 within (gradient 0 at ±λ); NaN stays NaN."""
    return _shrink(x, float(lambd), float(lambd))


def hardshrink(x, lambd: float = 0.5) -> Tensor:
    """x beyond ±λ, 0 within (gradient 0 at ±λ); NaN stays NaN."""
    return _shrink(x, float(lambd), 0.0)


def tanhshrink(x) -> Tensor:
    """x - tanh(x)."""
    x = _float(x)
    return x - tanh(x)


def softsign(x) -> Tensor:
    """x / (1 + |x|) (NaN at ±inf, as PyTorch)."""
    x = _float(x)
    return x / (1 + abs(x))


def logsigmoid(x) -> Tensor:
    """log(sigmoid(x)) = 0 - softplus(-x), without overflow: -inf at -inf, gradient sigmoid(-x), and
    +0.0 where softplus(-x) is 0 (large x), as PyTorch gives, where a negation would give -0.0."""
    return 0.0 - softplus(-_float(x))


def mish(x) -> Tensor:
    """x·tanh(softplus(x))."""
    x = _float(x)
    return x * tanh(softplus(x))


def threshold(x, threshold: float, value: float) -> Tensor:
    """x where x > threshold, else value (torch.nn.functional.threshold): gradient 0 at the threshold."""
    x = _float(x)
    return where(greater(x, threshold), x, value)


def glu(x, axis: int = -1) -> Tensor:
    """a·sigmoid(b), where a and b are the two halves of x along `axis` (whose size must be even)."""
    x = _float(x)
    ax = axis_for(axis, x.ndim, "glu")
    n = x.shape[ax]
    if not isinstance(n, int) or n % 2:
        raise ShapeError(f"glu: axis {ax} of x {format_shape(x.shape)} must have an even static size, got {n!r} "
                         f"(at {user_location()})")
    a, b = split(x, 2, ax)
    return a * sigmoid(b)


def prelu(x, weight) -> Tensor:
    """x where x > 0, else weight·x, with one weight per channel (axis 1; a single weight for all),
    as torch.nn.functional.prelu. The weight gets the gradient Σ g·x over the entries x <= 0."""
    x, weight = _promote(_float(x), weight)
    if weight.shape == (1,):         # one weight for every entry: x keeps its shape (a 0-d x too, as torch)
        weight = reshape(weight, ())
    elif weight.shape != ():
        channels = x.shape[1] if x.ndim >= 2 else 1
        if weight.ndim != 1 or x.ndim < 2 or weight.shape[0] != channels:
            raise ShapeError(f"prelu: weight of shape {format_shape(weight.shape)} must have 1 or {channels!r} "
                             f"entries (the channels on axis 1 of x {format_shape(x.shape)}) (at {user_location()})")
        weight = reshape(weight, (channels,) + (1,) * (x.ndim - 2))
    return where(greater(x, 0), x, weight * x)
