"""Special functions ONNX lacks, written with ordinary ai.onnx ops: erfc, erfinv, lgamma,
digamma and polygamma, plus xlogy and logit, and the compositions ndtr, ndtri, log_ndtr and i0.

- erfc(x): 1 - erf(x) by erf's Taylor series for |x| < 1/2; beyond, exp(-x²)·t·Q(t) with
  t = 1/(1 + |x|) and Q a Chebyshev series (special_tables.py, fitted by tools/fit_special.py),
  exp(-x²) taken as exp(-h²)·exp(-(|x| - h)(|x| + h)) with h = |x| rounded so that h² is exact;
  erfc(-x) = 2 - erfc(x).
- erfinv(y) = y·P(w), w = -log((1 - y)(1 + y)), P a Chebyshev series in w for w < 5 and in
  sqrt(w) beyond (1 - y is exact near 1, so the tail keeps its digits).
- lgamma and polygamma: for z >= 1/2, the recurrence moves z up to at least 8 + 2n and the
  asymptotic (Stirling) series with Bernoulli numbers B2..B20 finishes; below 1/2 the reflection
  formulas: lgamma(x) = log(π/|sin πx|) - lgamma(1 - x), and
  ψ⁽ⁿ⁾(x) = (-1)ⁿ ψ⁽ⁿ⁾(1 - x) - πⁿ⁺¹ Pₙ(cot πx), where Pₙ is the polynomial with
  dⁿ/dxⁿ [π cot πx] = πⁿ⁺¹ Pₙ(cot πx) (P₀(c) = c, Pₖ₊₁(c) = -(1 + c²) Pₖ'(c)), evaluated at
  x - round(x) so large arguments keep their fraction.
Each is accurate to a few units in the last place of its dtype (the series lengths differ per
dtype), except lgamma near its zeros at 1 and 2, where the recurrence leaves an absolute
(not relative) error of about one unit of lgamma(z + 8). Gradients: erfc' = -2/√π·exp(-x²),
erfinv' = √π/2·exp(erfinv²), lgamma' = digamma = polygamma(0), polygamma(n)' = polygamma(n + 1).
The numpy references compute in float64 from math.erf, math.erfc and math.lgamma, and the
polygamma series with twice the shift.

The compositions (gradients from their parts): ndtr(x) = erfc(-x/√2)/2 (accurate in the lower
tail); ndtri(p) = √2·erfinv(2p - 1); log_ndtr(x) = log(erfc(-x/√2)/2), log1p(-erfc(x/√2)/2)
for x > 0, and below x = -20 (where erfc nears underflow) the asymptotic series
-x²/2 - log(-x) - log(2π)/2 + log(Σ (-1)^k (2k-1)!!/x^(2k)); i0(x) = Σ (x²/4)^k/(k!)² (positive
terms, no cancellation; nested so that no constant underflows float32, see i0) for |x| <= 30, and
e^|x|/√(2π|x|)·Σ ((2k-1)!!)²/(k! (8|x|)^k) beyond.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.dtypes import is_float
from ..ir.registry import Trait, defop
from . import special_tables as tables
from .basic import cast
from .elementwise import (
    _unary,
    equal,
    exp,
    greater,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_or,
    promote_float,
    sqrt,
    where,
)
from .elementwise import abs as absolute
from .emitter import Emitter
from .shape_rules import binary_float, unary_float

__all__ = ["digamma", "erfc", "erfinv", "i0", "lgamma", "log_ndtr", "logit", "ndtr", "ndtri", "polygamma", "xlog1py",
           "xlogy"]

# Bernoulli numbers B2, B4, ..., B20
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330)
_SQRT_PI = math.sqrt(math.pi)


def _f32(dtype) -> bool:
    return np.dtype(dtype) != np.float64


# -- erfc -----------------------------------------------------------------------------------------------
def _lower_erfc(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    x = e.wrap(names[0])
    f32 = _f32(e.dtype)
    a = e("Abs", x)
    taylor = [2 / _SQRT_PI * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7 if f32 else 13)]
    near = 1 - x * e.polynomial(taylor, x * x)
    scale = 2.0 ** (8 if f32 else 20)        # h = |x| to 2^-8 (2^-20): h² is exact up to the cutoff
    h = e("Round", a * scale) / scale
    t = 1 / (1 + a)
    q = e.chebyshev(tables.ERFC_Q_F32 if f32 else tables.ERFC_Q_F64, t * (2 * (1 + tables.ERFC_FROM)) - 1)
    far = e("Exp", -(h * h)) * e("Exp", -((a - h) * (a + h))) * t * q
    far = e.where(a > (10.5 if f32 else 27.5), 0, far)      # underflowed (and inf - inf above); NaN stays
    return e.where(a < tables.ERFC_FROM, near, e.where(x < 0, 2 - far, far)).name


_erfc_scalar = np.vectorize(math.erfc, otypes=[np.float64])


def _erfc_vjp(g, ins, outs):
    return [g[0] * (-2 / _SQRT_PI) * exp(-(ins[0] * ins[0]))]


defop("erfc", infer=unary_float, reference=_erfc_scalar, lower=_lower_erfc, vjp=_erfc_vjp,
      traits={Trait.CHEAP, Trait.ELEMENTWISE})


# -- erfinv ---------------------------------------------------------------------------------------------
def _newton(f, slope, x: float) -> float:
    for _ in range(100):
        step = f(x) / slope(x)
        x -= step
        if not abs(step) > 1e-17 * abs(x):
            break
    return x


def erfinv_reference(y: float) -> float:
    """erfinv(y) in float64 by Newton's method: on erf below 1/2, on erfc(x) = 1 - y (exact there) above."""
    if not -1 < y < 1:
        return math.copysign(math.inf, y) if abs(y) == 1 else math.nan
    if y < 0:
        return -erfinv_reference(-y)
    slope = lambda x: -2 / _SQRT_PI * math.exp(-x * x)  # noqa: E731
    if y < 0.5:
        return _newton(lambda x: y - math.erf(x), slope, _SQRT_PI / 2 * y)
    q = 1 - y
    return _newton(lambda x: math.erfc(x) - q, slope, math.sqrt(-math.log(q)))


def _lower_erfinv(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    y = e.wrap(names[0])
    f32 = _f32(e.dtype)
    w = -e("Log", (1 - y) * (1 + y))
    split = tables.ERFINV_SPLIT
    central = e.chebyshev(tables.ERFINV_CENTRAL_F32 if f32 else tables.ERFINV_CENTRAL_F64, w * (2 / split) - 1)
    s0, s1 = math.sqrt(split), math.sqrt(tables.ERFINV_W_MAX_F32 if f32 else tables.ERFINV_W_MAX_F64)
    tail = e.chebyshev(tables.ERFINV_TAIL_F32 if f32 else tables.ERFINV_TAIL_F64,
                       (e("Sqrt", w) * 2 - (s0 + s1)) / (s1 - s0))
    result = y * e.where(w < split, central, tail)
    return e.where(e.eq(e("Abs", y), 1), y * np.inf, result).name


defop("erfinv", infer=unary_float, reference=np.vectorize(erfinv_reference, otypes=[np.float64]),
      lower=_lower_erfinv, vjp=lambda g, ins, outs: [g[0] * (_SQRT_PI / 2) * exp(outs[0] * outs[0])],
      traits={Trait.CHEAP, Trait.ELEMENTWISE})


# -- lgamma and polygamma ---------------------------------------------------------------------------------
def _shift(n: int) -> int:
    """How far the recurrence moves z up before the asymptotic series (more for higher derivatives)."""
    return 8 + 2 * n


def _cot_derivative_polynomial(n: int) -> np.ndarray:
    """Coefficients (constant term first) of Pₙ with dⁿ/dxⁿ [π cot πx] = πⁿ⁺¹ Pₙ(cot πx)."""
    p = np.polynomial.Polynomial([0.0, 1.0])
    for _ in range(n):
        p = -np.polynomial.Polynomial([1.0, 0.0, 1.0]) * p.deriv()
    return p.coef


def _polygamma_series(n: int, terms: int) -> tuple[list[float], float, float]:
    """For n >= 1: ψ⁽ⁿ⁾(y) ≈ (-1)ⁿ⁺¹ rⁿ ((n-1)! + n!·r/2 + r²·Σ dₖ r²ᵏ), r = 1/y; returns (d, (n-1)!, n!/2).
    For n = 0: ψ(y) ≈ log y - r/2 - r²·Σ dₖ r²ᵏ; returns (d, 0, 1/2)."""
    if n == 0:
        return [b / (2 * k + 2) for k, b in enumerate(_BERNOULLI[:terms])], 0.0, 0.5
    d = [b * math.factorial(2 * k + 1 + n) / math.factorial(2 * k + 2) for k, b in enumerate(_BERNOULLI[:terms])]
    return d, float(math.factorial(n - 1)), math.factorial(n) / 2


class _Gamma:
    """The shared pieces of lgamma and polygamma, on emitted Values (lowering) or on numpy arrays
    (the float64 references), so both follow one derivation."""

    def __init__(self, ops):
        self.o = ops

    def lgamma_positive(self, z, shift: int, terms: int):
        o = self.o
        small = z < shift
        y = o.where(small, z + shift, z)
        product = z
        for k in range(1, shift):
            product = product * (z + k)
        r = 1 / y   # Stirling: (y - 1/2) log y - y + log(2π)/2 + Σ B₂ₖ / (2k(2k-1) y²ᵏ⁻¹)
        coefficients = [b / ((2 * k + 2) * (2 * k + 1)) for k, b in enumerate(_BERNOULLI[:terms])]
        stirling = (y - 0.5) * o.log(y) - y + 0.5 * math.log(2 * math.pi) + r * o.polynomial(coefficients, r * r)
        return stirling - o.where(small, o.log(product), 0.0)

    def polygamma_positive(self, n: int, z, shift: int, terms: int):
        o = self.o
        small = z < shift
        y = o.where(small, z + shift, z)
        r = 1 / y
        d, lead, half = _polygamma_series(n, terms)
        total = 1 / z if n == 0 else o.power(z, -(n + 1.0))
        for k in range(1, shift):
            total = total + (1 / (z + k) if n == 0 else o.power(z + k, -(n + 1.0)))
        tail = r * r * o.polynomial(d, r * r)
        if n == 0:
            return o.log(y) - r * half - tail - o.where(small, total, 0.0)
        sign = (-1.0) ** (n + 1)
        return sign * (o.power(r, float(n)) * (lead + r * half + tail)) + sign * math.factorial(n) * o.where(
            small, total, 0.0)

    def cot_pi(self, x):
        """cot(πx), from x - round(x) (cot has period 1)."""
        o = self.o
        angle = (x - o.round(x)) * math.pi
        return o.cos(angle) / o.sin(angle)

    def sin_pi_abs(self, x):
        o = self.o
        return o.abs(o.sin((x - o.round(x)) * math.pi))


class _Emitted:
    """The few functions _Gamma needs, as ONNX ops."""

    def __init__(self, e: Emitter):
        self.e = e

    def where(self, c, a, b):
        return self.e.where(c, a, b)

    def polynomial(self, c, x):
        return self.e.polynomial(c, x)

    def power(self, x, p):
        return self.e("Pow", x, p)

    def __getattr__(self, name):      # log, cos, sin, abs, round: one ONNX op each
        return lambda v: self.e(name.capitalize(), v)


class _Numpy:
    """The same functions on float64 numpy arrays."""
    where, power, log, cos, sin, abs, round = (staticmethod(np.where), staticmethod(np.power), staticmethod(np.log),
                                               staticmethod(np.cos), staticmethod(np.sin), staticmethod(np.abs),
                                               staticmethod(np.round))

    @staticmethod
    def polynomial(c, x):
        return np.polynomial.polynomial.polyval(x, c)


def _series_terms(dtype) -> int:
    return 5 if _f32(dtype) else 10


def _lower_lgamma(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    x = e.wrap(names[0])
    gamma = _Gamma(_Emitted(e))
    left = x < 0.5
    z = e.where(left, 1 - x, x)
    positive = gamma.lgamma_positive(z, _shift(0), _series_terms(e.dtype))
    reflected = math.log(math.pi) - e("Log", gamma.sin_pi_abs(x)) - positive
    return e.where(e("IsInf", x), np.inf, e.where(left, reflected, positive)).name


def _lgamma_reference(x):
    x = np.asarray(x, np.float64)
    out = np.full(x.shape, np.nan)
    for i, v in np.ndenumerate(x):
        out[i] = math.inf if math.isinf(v) or (v <= 0 and v == math.floor(v)) else math.lgamma(v)
    return out


def _pole_value(n: int) -> float:
    """polygamma(n, ·) at 0, -1, -2, ... for n >= 1: (-1)ⁿ⁺¹·inf, the sign of n!·ζ(n + 1, x) with the
    Hurwitz zeta at +inf, as torch.polygamma and scipy.special.polygamma give it. (For even n the
    function runs to -inf on the pole's right and +inf on its left, so no limit decides it.)"""
    return math.inf if n % 2 else -math.inf


def _lower_polygamma(ctx, names, node):
    n = node.attrs["n"]
    e = Emitter(ctx, node.outputs[0].dtype)
    x = e.wrap(names[0])
    gamma = _Gamma(_Emitted(e))
    left = x < 0.5
    positive = gamma.polygamma_positive(n, e.where(left, 1 - x, x), _shift(n), _series_terms(e.dtype) + (n > 0))
    cot_term = e.polynomial(list(_cot_derivative_polynomial(n)), gamma.cot_pi(x)) * math.pi ** (n + 1)
    reflected = positive * (-1.0) ** n - cot_term
    result = e.where(left, reflected, positive)
    pole = (x <= 0) & e.eq(x, e("Round", x)) & ~e("IsInf", x)      # 0, -1, -2, ...: PyTorch's and SciPy's values
    pole_value = e.where(e.eq(x, 0), -np.inf, np.nan) if n == 0 else e.const(_pole_value(n))
    return e.where(pole, pole_value, result).name


def _polygamma_reference(x, n):
    """The same formulas in float64 numpy with twice the shift (an independent error budget)."""
    x = np.asarray(x, np.float64)
    gamma = _Gamma(_Numpy)
    with np.errstate(all="ignore"):
        left = x < 0.5
        positive = gamma.polygamma_positive(n, np.where(left, 1 - x, x), 2 * _shift(n), 10)
        reflected = positive * (-1.0) ** n - np.polynomial.polynomial.polyval(
            gamma.cot_pi(x), _cot_derivative_polynomial(n)) * math.pi ** (n + 1)
        result = np.where(left, reflected, positive)
        pole = (x <= 0) & (x == np.round(x)) & ~np.isinf(x)
        return np.where(pole, np.where(x == 0, -np.inf, np.nan) if n == 0 else _pole_value(n), result)


defop("lgamma", infer=unary_float, reference=_lgamma_reference, lower=_lower_lgamma,
      vjp=lambda g, ins, outs: [g[0] * polygamma(0, ins[0])], traits={Trait.CHEAP, Trait.ELEMENTWISE})
defop("polygamma", infer=unary_float, reference=_polygamma_reference, lower=_lower_polygamma,
      vjp=lambda g, ins, outs, n: [g[0] * polygamma(n + 1, ins[0])], traits={Trait.CHEAP, Trait.ELEMENTWISE})

erfc = _unary("erfc")
erfinv = _unary("erfinv")
lgamma = _unary("lgamma")
erfc.__doc__ = "The complementary error function 1 - erf(x), accurate where it is tiny (scipy.special.erfc)."
erfinv.__doc__ = "The inverse error function on [-1, 1] (±inf at ±1, NaN outside), as torch.erfinv."
lgamma.__doc__ = "log|Γ(x)| (math.lgamma, torch.lgamma): +inf at 0, -1, -2, ... and at ±inf."


def polygamma(n: int, x) -> Tensor:
    """The n-th derivative of digamma, ψ⁽ⁿ⁾(x) (torch.polygamma(n, x)). At the poles 0, -1, -2, ...:
    +inf for odd n, -inf for even n >= 2 (PyTorch's and SciPy's values); digamma gives -inf at 0
    and NaN below, as PyTorch. At +inf the limit, (-1)ⁿ⁺¹·0 for n >= 1 (SciPy's; PyTorch 2.13
    gives NaN for n >= 2); at -inf NaN."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ShapeError(f"polygamma: n must be a non-negative int, got {n!r} (at {user_location()})")
    x = as_tensor(x)
    if not is_float(x.dtype):
        x = cast(x, np.float32)
    return apply("polygamma", [x], n=int(n))


def digamma(x) -> Tensor:
    """ψ(x) = d/dx lgamma(x) (torch.digamma): -inf at 0, NaN at -1, -2, ..., +inf at +inf."""
    return polygamma(0, x)


# -- xlogy and logit --------------------------------------------------------------------------------------
def xlogy(x, y) -> Tensor:
    """x·log(y), and 0 where x == 0 unless y is NaN (torch.xlogy, scipy.special.xlogy), even at y == 0.
    Gradients as PyTorch's: d/dx = log(y), but 0 where x == 0 and y <= 0; d/dy = x/y."""
    return apply("xlogy", promote_float(x, y))


def _lower_xlogy(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    x, y = e.wrap(names[0]), e.wrap(names[1])
    return e.where(e.eq(x, 0) & ~e("IsNaN", y), 0, x * e("Log", y)).name


def _xlogy_reference(x, y):
    return np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log(y))


def _xlogy_vjp(g, ins, outs):
    x, y = ins
    skip = logical_and(equal(x, 0), y <= 0)
    return [g[0] * log(where(skip, 1, y)), g[0] * x / y]


defop("xlogy", infer=binary_float, reference=_xlogy_reference, lower=_lower_xlogy, vjp=_xlogy_vjp,
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})


def xlog1py(x, y) -> Tensor:
    """x·log1p(y), and 0 where x == 0 unless y is NaN (torch.special.xlog1py, scipy.special.xlog1py),
    even at y = -1 or +inf. Gradients as PyTorch's: d/dx = log1p(y), but 0 where x == 0 and y <= -1;
    d/dy = x/(1 + y)."""
    x, y = promote_float(x, y)
    skip = logical_and(equal(x, 0), logical_or(less_equal(y, -1), equal(y, np.inf)))
    return x * log1p(where(skip, np.zeros((), y.dtype), y))


def logit(x, eps: float | None = None) -> Tensor:
    """log(x / (1 - x)) (torch.logit); with `eps`, x is first clipped to [eps, 1 - eps], and the
    gradient is 0 outside those bounds (it passes at them), as PyTorch's. As PyTorch, x below eps
    reads eps and x above 1 - eps reads 1 - eps, in that order (which matters only for eps > 1/2)."""
    x = promote_float(x)[0]
    if eps is not None:
        low, high = float(eps), 1 - float(eps)
        x = where(less(x, low), low, where(greater(x, high), high, x))
    return log(x) - log1p(-x)



# -- compositions: the normal distribution and I0 ----------------------------------------------------------------
_SQRT2 = math.sqrt(2.0)


def ndtr(x) -> Tensor:
    """The standard normal CDF (scipy.special.ndtr, torch.special.ndtr): erfc(-x/√2)/2."""
    x = promote_float(x)[0]
    return erfc(-x / _SQRT2) * 0.5


_NDTRI_TAIL = 0.05                 # below (and above 1 - 0.05): Newton steps on log_ndtr


def ndtri(p) -> Tensor:
    """The inverse of ndtr (scipy.special.ndtri, torch.special.ndtri); -inf at 0, inf at 1, NaN
    outside [0, 1]. √2·erfinv(2p - 1) in the middle; in the tails, where 2p - 1 would lose p's digits,
    Newton's method on log_ndtr(x) = log(q) for the smaller tail probability q (exact: 1 - p is
    exact for p > 1/2) from the asymptotic start -sqrt(t - log t - log 2π), t = -2 log q."""
    p = promote_float(p)[0]
    middle = erfinv(2 * p - 1) * _SQRT2
    upper = greater(p, 0.5)
    q = where(upper, 1 - p, p)
    tail = logical_and(less(q, _NDTRI_TAIL), greater(q, 0))
    log_q = log(where(tail, q, _NDTRI_TAIL))          # each branch at a point where it is finite
    t = -2 * log_q
    x = -sqrt(t - log(t) - math.log(2 * math.pi))
    for _ in range(5):                                # quadratic convergence from within ~1e-2
        current = log_ndtr(x)
        x = x - (current - log_q) * exp(current + 0.5 * x * x + 0.5 * math.log(2 * math.pi))
    return where(tail, where(upper, -x, x), middle)


# Below: the asymptotic series, where erfc(-x/√2) nears the dtype's underflow (float32's below about
# -13, float64's below -37); nine terms are exact to float64 from -17 down, to float32 from -6.
_LOG_NDTR_TAIL = {np.dtype(np.float64): -20.0, np.dtype(np.float32): -10.0, np.dtype(np.float16): -4.0}
_LOG_NDTR_TERMS = [(-1) ** k * math.prod(range(1, 2 * k, 2)) for k in range(1, 10)]     # (-1)^k (2k-1)!!


def _series(coefficients, t):
    """Σ coefficients[k] t^(k+1), by Horner's rule."""
    total = coefficients[-1]
    for c in coefficients[-2::-1]:
        total = c + t * total
    return total * t


def log_ndtr(x) -> Tensor:
    """log(ndtr(x)) without underflow (scipy.special.log_ndtr, torch.special.log_ndtr), accurate to a
    few ulps in both tails."""
    x = promote_float(x)[0]
    switch = _LOG_NDTR_TAIL[np.dtype(x.dtype)]
    tail = less(x, switch)
    far = where(tail, x, switch)                    # each branch at a point where it is finite
    near = where(tail, switch, x)
    asymptotic = (-0.5 * far * far - log(-far) - 0.5 * math.log(2 * math.pi)
                  + log1p(_series(_LOG_NDTR_TERMS, 1 / (far * far))))
    positive = greater(near, 0)
    lower = log(erfc(-near / _SQRT2) * 0.5)
    upper = log1p(erfc(where(positive, near, 1.0) / _SQRT2) * -0.5)      # log1p(-1) = -inf below 0
    return where(tail, asymptotic, where(positive, upper, lower))


_I0_SWITCH = 30.0
_I0_TERMS = 63
_I0_ASYMPTOTIC = [math.prod((2 * j - 1) ** 2 for j in range(1, k + 1)) / (math.factorial(k) * 8 ** k)
                  for k in range(1, 17)]                                              # ((2k-1)!!)² / (k! 8^k)


def i0(x) -> Tensor:
    """The modified Bessel function of the first kind, order 0 (numpy.i0, torch.i0), even in x;
    overflows to inf where e^|x| does."""
    x = promote_float(x)[0]
    a = absolute(x)
    small = less_equal(a, _I0_SWITCH)
    s = where(small, x, 0.0)                        # each branch at a point where it is finite (the series is
    #                                                 even: x, not |x|, so its derivatives at 0 are right)
    big = where(small, _I0_SWITCH + 1, a)
    t = s * s * 0.25
    # Σ t^k/(k!)² nested as 1 + t/1²(1 + t/2²(1 + ...)): no constant nears float32's underflow, below
    # which ONNX Runtime's optimizer (1.31) drops an Add of a float64 constant as if it were 0
    series = t * (1 / _I0_TERMS ** 2) + 1
    for k in range(_I0_TERMS - 1, 0, -1):
        series = 1 + series * t * (1 / (k * k))
    asymptotic = exp(big) / sqrt(2 * math.pi * big) * (1 + _series(_I0_ASYMPTOTIC, 1 / big))
    return where(small, series, asymptotic)
