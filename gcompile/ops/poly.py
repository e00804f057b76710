"""Closed-form derivatives of smooth activations, to any order, in few ONNX nodes.

The derivatives of tanh and sigmoid are polynomials in their own output: tanh' = 1 - y²,
sigmoid' = s - s², and P_{k+1} = P_k' · (1 - y²) or P_k' · (s - s²). `poly(y, c)` evaluates
such a polynomial (coefficients in ascending powers) by Horner's rule, skipping zero terms
and unit factors (1 - y² is one Mul and one Sub); its VJP is another `poly`, so every order
of differentiation stays one short chain instead of the backward of a Mul and a Sub
differentiated again term by term. silu(x) = x·s(x) has derivatives
silu⁽ᵏ⁾ = k·P_{k-1}(s) + x·P_k(s) (Leibniz), one op `silu_deriv` of order k; exact gelu's
are Q_k(x)·φ(x) from the second on, one op `gelu_deriv`.

A runtime that fuses no elementwise chains (ONNX Runtime's CPU provider among them) runs each
node as its own pass over memory, so node count is time for smooth networks at second order.
"""
from __future__ import annotations

import math

import numpy as np

from ..frontend.tensor import Tensor, apply
from ..ir.registry import Trait, defop
from .shape_rules import binary_float, unary_float

__all__: list[str] = []

TANH_PRIME = (1.0, 0.0, -1.0)       # 1 - y²
SIGMOID_PRIME = (0.0, 1.0, -1.0)    # s - s²


def _trim(c) -> tuple:
    c = [float(v) for v in c]
    while len(c) > 1 and c[-1] == 0:
        c.pop()
    return tuple(c)


def derivative(c) -> tuple:
    """Coefficients of P' for P with ascending coefficients c."""
    return _trim([i * v for i, v in enumerate(c)][1:] or [0.0])


def times(a, b) -> tuple:
    """Coefficients of the product of two polynomials."""
    return _trim(np.convolve(np.asarray(a, float), np.asarray(b, float)))


def sigmoid_derivatives(k: int) -> list[tuple]:
    """[P_0, ..., P_k]: sigmoid's j-th derivative as a polynomial in s (P_0 = s)."""
    polys = [(0.0, 1.0)]
    for _ in range(k):
        polys.append(times(derivative(polys[-1]), SIGMOID_PRIME))
    return polys


def poly(y: Tensor, coeffs) -> Tensor:
    """c0 + c1·y + c2·y² + ... as one op (c in ascending powers, degree at least 1)."""
    c = _trim(coeffs)
    assert len(c) > 1, "poly needs a polynomial of degree >= 1"
    return y if c == (0.0, 1.0) else apply("poly", [y], coeffs=c)


def times_derivative(g: Tensor, y: Tensor, coeffs) -> Tensor:
    """g · P'(y): the VJP of poly(y, coeffs) (a plain product when P' is constant)."""
    d = derivative(coeffs)
    return g * d[0] if len(d) == 1 else g * poly(y, d)


def _horner(ctx, y: str, c: tuple, dtype) -> str:
    """Emit P(y) for ascending coefficients c (degree >= 1), skipping zero terms and unit
    factors and keeping a sign aside, so 1 - y² is Mul + Sub and s - s² is Sub + Mul."""
    const = lambda v: ctx.const(np.asarray(v, dtype))  # noqa: E731
    acc, sign = None, 1.0           # the value so far is sign * acc (acc None: the leading 1)
    lead = c[-1]
    if abs(lead) != 1.0:
        acc = const(lead)
    else:
        sign = lead
    for i in range(len(c) - 2, -1, -1):
        acc = y if acc is None else ctx.emit("Mul", [acc, y])
        if c[i] != 0:
            if sign < 0:        # c - acc
                acc, sign = ctx.emit("Sub", [const(c[i]), acc]), 1.0
            else:
                acc = ctx.emit("Add", [acc, const(c[i])])
    assert acc is not None
    return ctx.emit("Neg", [acc]) if sign < 0 else acc


def _lower_poly(ctx, names, node):
    return _horner(ctx, names[0], node.attrs["coeffs"], node.outputs[0].dtype)


def _horner_np(y, c):
    """P(y) in the lowering's order of operations (zero terms skipped: at y = ±inf, 1 - y² is
    -inf, where numpy's polyval gives NaN from 0·inf)."""
    acc, sign = (None, c[-1]) if abs(c[-1]) == 1.0 else (np.full_like(y, c[-1]), 1.0)
    for i in range(len(c) - 2, -1, -1):
        acc = y if acc is None else acc * y
        if c[i] != 0:
            acc, sign = (c[i] - acc, 1.0) if sign < 0 else (acc + c[i], sign)
    return -acc if sign < 0 else acc


def _poly_reference(y, coeffs):
    return np.asarray(_horner_np(y, coeffs), y.dtype)


defop("poly", infer=lambda types, coeffs: unary_float(types), reference=_poly_reference, lower=_lower_poly,
      vjp=lambda g, ins, outs, coeffs: [times_derivative(g[0], ins[0], coeffs)],
      traits={Trait.CHEAP, Trait.ELEMENTWISE})


# -- silu's derivatives ------------------------------------------------------------------------------
def silu_deriv(x: Tensor, s: Tensor, order: int) -> Tensor:
    """silu⁽ᵏ⁾(x) = k·P_{k-1}(s) + x·P_k(s), where s must be sigmoid(x) (silu's second output)."""
    return apply("silu_deriv", [x, s], order=int(order))


def _silu_deriv_reference(x, s, order):
    polys = sigmoid_derivatives(order)
    return np.asarray(order * _horner_np(s, polys[order - 1]) + x * _horner_np(s, polys[order]), x.dtype)


def _lower_silu_deriv(ctx, names, node):
    x, s = names
    k, dtype = node.attrs["order"], node.outputs[0].dtype
    polys = sigmoid_derivatives(k)
    low = _horner(ctx, s, polys[k - 1], dtype)
    if k != 1:
        low = ctx.emit("Mul", [low, ctx.const(np.asarray(k, dtype))])
    return ctx.emit("Add", [low, ctx.emit("Mul", [x, _horner(ctx, s, polys[k], dtype)])])


def _silu_deriv_vjp(g, ins, outs, order):
    # d/dx of silu^(k)(x) in full (s is sigmoid(x), so its share is included): no cotangent for s
    x, s = ins
    return [g[0] * silu_deriv(x, s, order + 1), None]


defop("silu_deriv", infer=lambda types, order: binary_float(types), reference=_silu_deriv_reference,
      lower=_lower_silu_deriv, vjp=_silu_deriv_vjp, traits={Trait.CHEAP, Trait.ELEMENTWISE})


# -- exact gelu's derivatives ------------------------------------------------------------------------
# gelu(x) = x·Φ(x); gelu' = Φ + x·φ and, from the second on, gelu⁽ᵏ⁾ = Q_k(x)·φ(x) with
# Q_2 = 2 - x² and Q_{k+1} = Q_k' - x·Q_k (φ' = -x·φ).
_SQRT_2PI = math.sqrt(2 * math.pi)
_erf = np.vectorize(math.erf, otypes=[float])


def gelu_polys(k: int) -> tuple:
    """Coefficients of Q_k (k >= 2)."""
    q = (2.0, 0.0, -1.0)
    for _ in range(k - 2):
        q = _trim(np.polynomial.polynomial.polysub(derivative(q), times((0.0, 1.0), q)))
    return q


def gelu_deriv(x: Tensor, order: int) -> Tensor:
    """The order-th derivative of exact gelu at x, in closed form."""
    return apply("gelu_deriv", [x], order=int(order))


def _gelu_deriv_reference(x, order):
    pdf = np.exp(-0.5 * x * x) / _SQRT_2PI
    if order == 1:
        return np.asarray(0.5 * (1 + _erf(x / math.sqrt(2))) + x * pdf, x.dtype)
    return np.asarray(_horner_np(x, gelu_polys(order)) * pdf, x.dtype)


def _lower_gelu_deriv(ctx, names, node):
    x, k, dtype = names[0], node.attrs["order"], node.outputs[0].dtype
    const = lambda v: ctx.const(np.asarray(v, dtype))  # noqa: E731
    pdf = ctx.emit("Mul", [ctx.emit("Exp", [ctx.emit("Mul", [ctx.emit("Mul", [x, x]), const(-0.5)])]),
                           const(1 / _SQRT_2PI)])
    if k == 1:
        cdf = ctx.emit("Mul", [ctx.emit("Add", [ctx.emit("Erf", [ctx.emit("Mul", [x, const(1 / math.sqrt(2))])]),
                                                const(1.0)]), const(0.5)])
        return ctx.emit("Add", [cdf, ctx.emit("Mul", [x, pdf])])
    return ctx.emit("Mul", [_horner(ctx, x, gelu_polys(k), dtype), pdf])


defop("gelu_deriv", infer=lambda types, order: unary_float(types), reference=_gelu_deriv_reference,
      lower=_lower_gelu_deriv, vjp=lambda g, ins, outs, order: [g[0] * gelu_deriv(ins[0], order + 1)],
      traits={Trait.CHEAP, Trait.ELEMENTWISE})
