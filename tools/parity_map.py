"""The name map of tools/parity.py: for each entry of PyTorch's op database ("name" or "name.variant"),
adapters that compute it with gcompile.functions from torch's arguments.

An entry may list several adapters; the first whose gcompile functions exist in this checkout is used:
a gcompile function of the same meaning first, then a composition of several (`composed`), so an op
that another branch adds as a function replaces its composition without an edit here. Adapters take
torch's positional and keyword arguments with traced Tensors for float tensors and numpy arrays for
integer and bool ones, and raise TypeError for an argument they do not express (the sample fails).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import gcompile.functions as F


class NotComparable(Exception):
    """A sample whose torch result is random (dropout with p > 0): left out of the tallies."""

@dataclass
class Entry:
    needs: tuple          # gcompile.functions names the adapter uses
    fn: Callable          # adapter(x, *args, **kwargs) on traced Tensors (non-float tensors as numpy arrays)
    composed: bool = False
    # where torch's gradient is the derivative: a predicate on the sample's torch arguments (None: always)
    derivative: Callable | None = None


MAP: dict[str, list[Entry]] = {}     # alternatives, first available wins: a gcompile function, then a composition


def op(names, needs, composed=False):
    """Register `fn` as an adapter of the torch entries `names` (a string, space-separated)."""
    def register(fn):
        for name in names.split():
            MAP.setdefault(name, []).append(Entry(tuple(needs.split()), fn, composed))
        return fn
    return register


def direct(names, fnames):
    """torch name(s) -> F.<fname> called with the same arguments; `fnames` lists spellings ("arcsin|asin")."""
    for fname in fnames.split("|"):
        op(names, fname)(lambda *a, _f=fname, **k: getattr(F, _f)(*a, **k))


def preferred(names, fname):
    """Like direct, but ahead of the adapters already listed (a composition written before the
    gcompile function existed)."""
    for name in names.split():
        MAP.setdefault(name, []).insert(0, Entry((fname,), lambda *a, _f=fname, **k: getattr(F, _f)(*a, **k)))


def reflected(names, fname):
    """torch's reflected operator(s) (`b.__rsub__(a)` is a - b spelled from b) -> F.<fname>(b, a)."""
    op(names, fname)(lambda a, b, _f=fname: getattr(F, _f)(b, a))


def _axes(dim, ndim=None):
    """torch's dim as gcompile's axis; None for all (also on a 0-d tensor, where torch takes dim 0 or -1)."""
    if dim is None or dim == [] or dim == () or ndim == 0:
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else dim


def _scalar(x):
    return float(x) if isinstance(x, (int, float, bool)) else x


def _as_vector(fn):
    """torch reads a 0-d tensor as a 1-element vector along dim 0 or -1 (numpy has no axis there):
    the adapter runs on x reshaped to (1,) with dim 0, and its results are reshaped back to ()."""
    def adapt(x, *args, **kwargs):
        if x.ndim:
            return fn(x, *args, **kwargs)
        out = fn(F.reshape(x, (1,)), *args, **kwargs)
        return tuple(F.reshape(o, ()) for o in out) if isinstance(out, tuple) else F.reshape(out, ())
    return adapt


# -- elementwise ---------------------------------------------------------------------------------------
for _t, _f in [("abs", "abs"), ("exp", "exp"), ("log", "log"), ("sin", "sin"), ("cos", "cos"), ("tan", "tan"),
               ("tanh", "tanh"), ("sigmoid", "sigmoid"), ("sqrt", "sqrt"), ("rsqrt", "rsqrt"), ("neg", "negative"),
               ("sign", "sign"), ("floor", "floor"), ("ceil", "ceil"), ("erf", "erf"), ("expm1", "expm1"),
               ("log1p", "log1p"), ("square", "square"), ("nn.functional.relu", "relu"), ("nn.functional.selu", "selu"),
               ("nn.functional.silu", "silu"), ("sgn", "sign"),
               ("asin", "arcsin|asin"), ("acos", "arccos|acos"), ("atan", "arctan|atan"),
               ("asinh", "arcsinh|asinh"), ("acosh", "arccosh|acosh"), ("atanh", "arctanh|atanh"), ("sinh", "sinh"),
               ("cosh", "cosh"), ("erfinv", "erfinv"), ("lgamma", "lgamma|gammaln"), ("digamma", "digamma"),
               ("erfc", "erfc"), ("log2", "log2"), ("log10", "log10"),
               ("exp2", "exp2"), ("trunc", "trunc"), ("reciprocal", "reciprocal"), ("isnan", "isnan"),
               ("isinf", "isinf"), ("isfinite", "isfinite"), ("nn.functional.mish", "mish"),
               ("nn.functional.softsign", "softsign"), ("nn.functional.hardswish", "hardswish|hard_swish"),
               ("nn.functional.hardsigmoid", "hardsigmoid|hard_sigmoid"),
               ("nn.functional.logsigmoid", "log_sigmoid|logsigmoid"),
               ("i0", "i0"), ("special.modified_bessel_i0", "i0"), ("special.ndtr", "ndtr"),
               ("special.ndtri", "ndtri"), ("special.log_ndtr", "log_ndtr"),
               ("special.entr", "entr"), ("sinc", "sinc"), ("logit", "logit"), ("frac", "frac"),
               ("deg2rad", "deg2rad"), ("rad2deg", "rad2deg"), ("signbit", "signbit")]:
    direct(_t, _f)


@op("round", "round")
def _round(x, decimals=0):
    if decimals:
        raise TypeError("round(decimals=...)")
    return F.round(x)


for _t, _f in [("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("div.no_rounding_mode", "divide"),
               ("true_divide", "divide"), ("maximum", "maximum"), ("minimum", "minimum"), ("eq", "equal"),
               ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
               ("logaddexp", "logaddexp"),
               ("atan2", "arctan2|atan2"), ("fmod", "fmod"), ("remainder", "remainder|mod"), ("hypot", "hypot"),
               ("xlogy", "xlogy"), ("copysign", "copysign"), ("fmax", "fmax"), ("fmin", "fmin"),
               ("logaddexp2", "logaddexp2"), ("nextafter", "nextafter"), ("heaviside", "heaviside")]:
    for _g in _f.split("|"):
        op(_t, _g)(lambda a, b, _g=_g, alpha=None: getattr(F, _g)(a, b if alpha is None else b * alpha))


@op("pow", "power")
def _pow(a, b):
    return F.power(a, b)


@op("float_power", "power cast", composed=True)
def _float_power(a, b):
    return F.power(F.cast(a, np.float64), F.cast(b, np.float64) if hasattr(b, "dtype") else b)


@op("rsub", "subtract")
def _rsub(a, b, alpha=1):
    return F.subtract(b, a * alpha)


for _name, _fname in (("__rsub__", "subtract"), ("__radd__", "add"), ("__rmul__", "multiply"),
                      ("__rdiv__", "divide"), ("__rpow__", "power")):
    reflected(_name, _fname)


def _truth(x):
    """torch's logical ops take numbers: nonzero is True."""
    return x if np.dtype(x.dtype) == np.bool_ else F.not_equal(x, np.zeros((), x.dtype))


direct("logical_xor", "logical_xor")


@op("logical_xor", "not_equal", composed=True)
def _xor(a, b):
    return F.not_equal(_truth(a), _truth(b))


@op("logical_and", "logical_and", composed=True)
def _logical_and(a, b):
    return F.logical_and(_truth(a), _truth(b))


@op("logical_or", "logical_or", composed=True)
def _logical_or(a, b):
    return F.logical_or(_truth(a), _truth(b))


@op("logical_not", "logical_not", composed=True)
def _logical_not(a):
    return F.logical_not(_truth(a))


@op("where", "where")
def _where(x, cond, other):
    return F.where(cond, x, other)


@op("clamp", "clip")
def _clamp(x, lo=None, hi=None, min=None, max=None):      # noqa: A002 - torch's keyword names
    lo, hi = (min if lo is None else lo), (max if hi is None else hi)
    return F.clip(x, _scalar(lo), _scalar(hi))


@op("clamp_min", "clip")
def _clamp_min(x, lo):
    return F.clip(x, _scalar(lo), None)


@op("clamp_max", "clip")
def _clamp_max(x, hi):
    return F.clip(x, None, _scalar(hi))


@op("lerp", "add multiply subtract", composed=True)
def _lerp(a, b, w):
    return a + (b - a) * w


direct("addcmul", "addcmul")
direct("addcdiv", "addcdiv")


@op("addcmul", "add multiply", composed=True)
def _addcmul(x, a, b, value=1):
    return x + a * b * value


@op("addcdiv", "add divide", composed=True)
def _addcdiv(x, a, b, value=1):
    return x + a / b * value


@op("positive clone contiguous", "identity")
def _identity(x, memory_format=None):
    return F.identity(x)


@op("nan_to_num", "where not_equal", composed=True)
def _nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    big = np.finfo(np.float64).max
    x = F.where(F.not_equal(x, x), np.float64(nan), x)
    x = F.where(F.equal(x, np.inf), np.float64(big if posinf is None else posinf), x)
    return F.where(F.equal(x, -np.inf), np.float64(-big if neginf is None else neginf), x)


# compositions for the entries above whose own gcompile function this checkout may lack (used only then)
_LN2 = math.log(2.0)


def _isnan(x):
    return F.not_equal(x, x)


def _trunc(x):
    return F.sign(x) * F.floor(F.abs(x))


def _safe(x, at, value):
    """x with `value` where x == at: keeps an unused branch of a where free of 0/0."""
    return F.where(F.equal(x, at), value, x)


_COMPOSED = {
    "sinh": ("exp", lambda x: (F.exp(x) - F.exp(-x)) * 0.5),
    "cosh": ("exp", lambda x: (F.exp(x) + F.exp(-x)) * 0.5),
    "log2": ("log", lambda x: F.log(x) / _LN2),
    "log10": ("log", lambda x: F.log(x) / math.log(10.0)),
    "exp2": ("exp", lambda x: F.exp(x * _LN2)),
    "reciprocal": ("divide", lambda x: 1.0 / x),
    "isnan": ("not_equal", _isnan),
    "isinf": ("equal abs", lambda x: F.equal(F.abs(x), np.inf)),
    "isfinite": ("less abs", lambda x: F.less(F.abs(x), np.inf)),
    "trunc": ("sign floor abs", _trunc),
    "frac": ("sign floor abs", lambda x: x - _trunc(x)),
    "deg2rad": ("multiply", lambda x: x * (math.pi / 180)),
    "rad2deg": ("multiply", lambda x: x * (180 / math.pi)),
    "nn.functional.hardswish": ("clip", lambda x, inplace=False: x * F.clip(x / 6 + 0.5, 0.0, 1.0)),
    "nn.functional.hardsigmoid": ("clip", lambda x, inplace=False: F.clip(x / 6 + 0.5, 0.0, 1.0)),
    "nn.functional.mish": ("tanh softplus", lambda x, inplace=False: x * F.tanh(F.softplus(x))),
    "nn.functional.softsign": ("abs divide", lambda x: x / (F.abs(x) + 1)),
    "nn.functional.logsigmoid": ("softplus", lambda x: -F.softplus(-x)),
    "erfc": ("erf", lambda x: 1 - F.erf(x)),
    "special.ndtr": ("erf", lambda x: 0.5 * (1 + F.erf(x / math.sqrt(2)))),
    "special.entr": ("where log", lambda x: F.where(F.greater(x, 0.0), -x * F.log(_safe(x, 0.0, 1.0)),
                                                    F.where(F.equal(x, 0.0), F.zeros_like(x),
                                                            F.full(x.shape, -np.inf, x.dtype)))),
    "sinc": ("where sin", lambda x: F.where(F.equal(x, 0.0), F.ones_like(x),
                                            F.sin(math.pi * _safe(x, 0.0, 1.0)) / (math.pi * _safe(x, 0.0, 1.0)))),
    "hypot": ("sqrt", lambda a, b: F.sqrt(a * a + b * b)),
    "fmod": ("sign floor abs", lambda a, b: a - _trunc(a / b) * b),
    "remainder": ("floor", lambda a, b: a - F.floor(a / b) * b),
    "fmax": ("where maximum", lambda a, b: F.where(_isnan(a), b, F.where(_isnan(b), a, F.maximum(a, b)))),
    "fmin": ("where minimum", lambda a, b: F.where(_isnan(a), b, F.where(_isnan(b), a, F.minimum(a, b)))),
    "logaddexp2": ("logaddexp", lambda a, b: F.logaddexp(a * _LN2, b * _LN2) / _LN2),
    "xlogy": ("where log", lambda x, y: F.where(_isnan(y), y * 1.0, F.where(F.equal(x, 0.0), F.zeros_like(x * y),
                                                                             x * F.log(y)))),
    "heaviside": ("where", lambda x, v: F.where(F.equal(x, 0.0), v * F.ones_like(x),
                                                F.where(F.greater(x, 0.0), F.ones_like(x), F.zeros_like(x)))),
    "logit": ("log", lambda x, eps=None: F.log(x / (1 - x)) if eps is None else
              F.log(F.clip(x, eps, 1 - eps) / (1 - F.clip(x, eps, 1 - eps)))),
    "nansum": ("where sum", lambda x, dim=None, keepdim=False, dtype=None:
               F.sum(F.where(_isnan(x), F.zeros_like(x), x), _axes(dim, x.ndim), keepdims=keepdim)),
}
for _t, (_needs, _fn) in _COMPOSED.items():
    op(_t, _needs, composed=True)(_fn)


# -- activations -------------------------------------------------------------------------------------------
@op("nn.functional.gelu", "gelu")
def _gelu(x, approximate="none"):
    return F.gelu(x, approximate=approximate == "tanh")


@op("nn.functional.elu", "elu")
def _elu(x, alpha=1.0, inplace=False):
    return F.elu(x, alpha)


@op("nn.functional.celu", "elu divide", composed=True)
def _celu(x, alpha=1.0, inplace=False):
    return F.elu(x / alpha, 1.0) * alpha


@op("nn.functional.leaky_relu", "leaky_relu")
def _leaky_relu(x, negative_slope=0.01, inplace=False):
    return F.leaky_relu(x, negative_slope)


@op("nn.functional.softplus", "softplus")
def _softplus(x, beta=1.0, threshold=20.0):
    """torch's softplus is x itself where beta * x > threshold."""
    return F.where(F.greater(x * beta, threshold), x, F.softplus(x, beta))


@op("nn.functional.relu6", "clip")
def _relu6(x, inplace=False):
    return F.clip(x, 0.0, 6.0)


@op("nn.functional.hardtanh", "clip")
def _hardtanh(x, min_val=-1.0, max_val=1.0, inplace=False):
    return F.clip(x, float(min_val), float(max_val))


@op("nn.functional.tanhshrink", "tanh subtract", composed=True)
def _tanhshrink(x):
    return x - F.tanh(x)


@op("nn.functional.softshrink", "where", composed=True)
def _softshrink(x, lambd=0.5):
    return F.where(F.greater(x, lambd), x - lambd, F.where(F.less(x, -lambd), x + lambd, F.zeros_like(x)))


@op("nn.functional.hardshrink", "where", composed=True)
def _hardshrink(x, lambd=0.5):
    return F.where(F.greater(F.abs(x), lambd), x, F.zeros_like(x))


@op("nn.functional.threshold", "where", composed=True)
def _threshold(x, threshold, value, inplace=False):
    return F.where(F.greater(x, threshold), x, F.full(x.shape, value, x.dtype))


@op("nn.functional.glu", "split sigmoid", composed=True)
def _glu(x, dim=-1):
    a, b = F.split(x, 2, dim)
    return a * F.sigmoid(b)


@op("nn.functional.prelu", "prelu")
def _prelu_direct(x, w=None, weight=None):
    return F.prelu(x, weight if w is None else w)


@op("nn.functional.prelu", "where", composed=True)
def _prelu(x, w=None, weight=None):
    w = weight if w is None else w
    w = F.reshape(w, (w.shape[0],) + (1,) * (x.ndim - 2)) if x.ndim > 1 and w.ndim == 1 and w.shape[0] > 1 else w
    return F.where(F.less(x, 0.0), x * w, x)


@op("softmax nn.functional.softmax", "softmax")
def _softmax(x, dim, dtype=None):
    return F.softmax(x, dim) if x.ndim else F.ones_like(x)


@op("log_softmax nn.functional.log_softmax", "log_softmax")
def _log_softmax(x, dim, dtype=None):
    return F.log_softmax(x, dim) if x.ndim else F.zeros_like(x)


@op("nn.functional.softmin", "softmax negative", composed=True)
def _softmin(x, dim, dtype=None):
    return F.softmax(-x, dim) if x.ndim else F.ones_like(x)


# -- reductions --------------------------------------------------------------------------------------------------
def _reduction(fname):
    def adapt(x, dim=None, keepdim=False, dtype=None):
        x = x if dtype is None else F.cast(x, _np_dtype(dtype))
        return getattr(F, fname)(x, _axes(dim, x.ndim), keepdims=keepdim)
    return adapt


for _t, _f in [("sum", "sum"), ("mean", "mean"), ("amax", "max"), ("amin", "min"), ("prod", "prod"),
               ("nansum", "nansum"), ("nanmean", "nanmean")]:
    op(_t, _f)(_reduction(_f))


@op("logsumexp", "logsumexp")
def _logsumexp(x, dim, keepdim=False):
    return F.logsumexp(x, _axes(dim, x.ndim), keepdims=keepdim)


@op("max.reduction_no_dim", "max")
def _max_all(x):
    return F.max(x)


@op("min.reduction_no_dim", "min")
def _min_all(x):
    return F.min(x)


@op("max.binary", "maximum")
def _max_binary(a, b):
    return F.maximum(a, b)


@op("min.binary", "minimum")
def _min_binary(a, b):
    return F.minimum(a, b)


def _moments_var(x, dim, correction, keepdim):
    axes = _axes(dim)
    count = math.prod(x.shape) if axes is None else math.prod(
        x.shape[a] for a in ((axes,) if isinstance(axes, int) else axes))
    centred = x - F.mean(x, axes, keepdims=True)
    return F.sum(centred * centred, axes, keepdims=keepdim) / max(count - correction, 0)


@op("var var.unbiased", "mean sum", composed=True)
def _var(x, dim=None, unbiased=None, correction=None, keepdim=False):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    correction = correction if correction is not None else (0 if unbiased is False else 1)
    return _moments_var(x, dim, correction, keepdim)


@op("std std.unbiased", "mean sum sqrt", composed=True)
def _std(x, dim=None, unbiased=None, correction=None, keepdim=False):
    return F.sqrt(_var(x, dim, unbiased, correction, keepdim))


@op("linalg.vector_norm", "sum abs power max", composed=True)
def _vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None):    # noqa: A002
    axes = _axes(dim, x.ndim)
    if ord == np.inf:
        return F.max(F.abs(x), axes, keepdims=keepdim)
    if ord == -np.inf:
        return F.min(F.abs(x), axes, keepdims=keepdim)
    if ord == 0:
        return F.sum(F.cast(F.not_equal(x, 0.0), x.dtype), axes, keepdims=keepdim)
    if ord == 2:
        return F.sqrt(F.sum(x * x, axes, keepdims=keepdim))
    if ord == 1:
        return F.sum(F.abs(x), axes, keepdims=keepdim)
    return F.power(F.sum(F.power(F.abs(x), float(ord)), axes, keepdims=keepdim), 1.0 / ord)


@op("cumsum", "cumsum")
@_as_vector
def _cumsum(x, dim, dtype=None):
    return F.cumsum(x, dim)


@op("cumprod", "cumprod")
@_as_vector
def _cumprod(x, dim, dtype=None):
    return F.cumprod(x, dim)


@op("argmax", "argmax")
@_as_vector
def _argmax(x, dim=None, keepdim=False):
    return F.argmax(x, dim, keepdims=keepdim)


@op("argmin", "argmin")
@_as_vector
def _argmin(x, dim=None, keepdim=False):
    return F.argmin(x, dim, keepdims=keepdim)


@op("sort", "topk")
@_as_vector
def _sort(x, dim=-1, descending=False, stable=False):
    """torch.sort's (values, indices): topk over the whole axis (stable, as gcompile's sorts are)."""
    return F.topk(x, x.shape[dim], dim, largest=descending)


@op("topk", "topk")
@_as_vector
def _topk(x, k, dim=-1, largest=True, sorted=True):      # noqa: A002
    return F.topk(x, k, dim, largest=largest, sorted=sorted)


@op("cummax", "cummax")
@_as_vector
def _cummax(x, dim):
    return F.cummax(x, dim)


@op("cummin", "cummin")
@_as_vector
def _cummin(x, dim):
    return F.cummin(x, dim)


@op("logcumsumexp", "logcumsumexp")
@_as_vector
def _logcumsumexp(x, dim):
    return F.logcumsumexp(x, dim)


# -- linear algebra -------------------------------------------------------------------------------------------------
direct("matmul mm bmm mv", "matmul")
reflected("__rmatmul__", "matmul")


@op("dot inner vdot", "dot")
def _dot(a, b):
    return F.dot(a, b) if a.ndim <= 1 else F.einsum("...i,...i->...", a, b)


@op("outer", "einsum")
def _outer(a, b):
    return F.einsum("i,j->ij", a, b)


@op("einsum", "einsum")
def _einsum(operands, equation):
    return F.einsum(equation, *operands)


@op("addmm addmm.decomposed addmv", "matmul add", composed=True)
def _addmm(x, a, b, beta=1, alpha=1):
    return x * beta + F.matmul(a, b) * alpha


@op("addbmm", "matmul sum add", composed=True)
def _addbmm(x, a, b, beta=1, alpha=1):
    return x * beta + F.sum(F.matmul(a, b), 0) * alpha


@op("baddbmm", "matmul add", composed=True)
def _baddbmm(x, a, b, beta=1, alpha=1):
    return x * beta + F.matmul(a, b) * alpha


@op("addr", "einsum add", composed=True)
def _addr(x, a, b, beta=1, alpha=1):
    return x * beta + F.einsum("i,j->ij", a, b) * alpha


@op("nn.functional.linear", "linear transpose")
def _linear(x, w, b=None):
    return F.linear(x, F.transpose(w) if w.ndim == 2 else w, b)


@op("nn.functional.bilinear", "einsum", composed=True)
def _bilinear(a, b, w, bias=None):
    y = F.einsum("...i,oij,...j->...o", a, w, b)
    return y if bias is None else y + bias


@op("tensordot", "einsum", composed=True)
def _tensordot(a, b, dims=2):
    letters = "abcdefghijklmnopqrstuvwxyz"
    if isinstance(dims, int):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = [list(d) if isinstance(d, (list, tuple)) else [d] for d in dims]
    ta, tb = list(letters[:a.ndim]), list(letters[a.ndim:a.ndim + b.ndim])
    for i, j in zip(da, db):
        tb[j] = ta[i]
    out = [c for k, c in enumerate(ta) if k not in da] + [c for k, c in enumerate(tb) if k not in db]
    return F.einsum("".join(ta) + "," + "".join(tb) + "->" + "".join(out), a, b)


@op("kron", "einsum reshape", composed=True)
def _kron(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise TypeError("kron of rank != 2")
    y = F.einsum("ij,kl->ikjl", a, b)
    return F.reshape(y, (a.shape[0] * b.shape[0], a.shape[1] * b.shape[1]))


@op("trace", "einsum")
def _trace(x):
    return F.einsum("ii->", x)


@op("diagonal linalg.diagonal", "einsum")
def _diagonal(x, offset=0, dim1=0, dim2=1):
    if offset or x.ndim != 2:
        raise TypeError("diagonal with an offset or rank != 2")
    return F.einsum("ii->i", x)


for _t in ("linalg.det", "linalg.inv", "linalg.svd", "linalg.eigh", "linalg.slogdet", "linalg.pinv",
           "logdet", "linalg.matrix_power", "linalg.multi_dot", "matrix_exp", "linalg.eigvalsh", "linalg.svdvals",
           "linalg.cond", "linalg.matrix_exp"):
    _fname = _t.split(".")[-1]
    op(_t, _fname)(lambda *a, _f=_fname, **k: getattr(F, _f)(*a, **k))


@op("linalg.pinv.singular", "pinv")
def _pinv_singular(a, b):
    return F.pinv(F.matmul(a, F.swapaxes(b, -1, -2)))


@op("linalg.pinv.hermitian", "pinv")
def _pinv_hermitian(a, hermitian=True):
    return F.pinv(a, hermitian=hermitian)


@op("pinverse", "pinv")
def _pinverse(a, rcond=1e-15):
    return F.pinv(a, rtol=rcond)


@op("svd", "svd")
def _torch_svd(a, some=True, compute_uv=True):
    """torch.svd: (U, S, V) with V, not Vh; `some` is not full_matrices."""
    u, s, vh = F.svd(a, full_matrices=not some)
    return u, s, F.swapaxes(vh, -1, -2)


@op("linalg.matrix_rank linalg.matrix_rank.hermitian", "matrix_rank")
def _matrix_rank(a, atol=None, rtol=None, hermitian=False):
    return F.matrix_rank(a, atol=atol, rtol=rtol, hermitian=hermitian)


def _lstsq(a, b, rcond=None, driver=None):
    """torch.linalg.lstsq's tuple as its driver fills it: the residuals where m > n (not for gelsy),
    the rank (not for gels), the singular values (gelss and gelsd); the others empty."""
    x, residuals, rank, s = F.lstsq(a, b, rcond)
    driver = driver or "gelsy"
    empty = F.full((0,), 0.0, x.dtype)
    m, n = a.shape[-2:]
    return (x, residuals if m > n and driver != "gelsy" else empty,
            rank if driver != "gels" else F.full((0,), 0, np.int64), s if driver in ("gelss", "gelsd") else empty)


MAP["linalg.lstsq"] = [Entry(("lstsq",), _lstsq)]
MAP["linalg.lstsq.grad_oriented"] = [Entry(("lstsq",), lambda a, b, driver=None: _lstsq(a, b, driver=driver)[:2])]


def _torch_norm(x, p="fro", dim=None, keepdim=False, dtype=None):
    """torch.norm: "nuc" over two dims (the last two by default), "fro" and numbers as vector norms over
    `dim` (every entry by default)."""
    if p == "nuc":
        return F.matrix_norm(x, "nuc", tuple(dim) if dim is not None else (-2, -1), keepdims=keepdim)
    return F.vector_norm(x, 2 if p == "fro" else p, _axes(dim, x.ndim), keepdims=keepdim)


MAP["norm"] = MAP["norm.fro"] = MAP["norm.inf"] = MAP["norm.nuc"] = [Entry(("vector_norm", "matrix_norm"),
                                                                           _torch_norm)]


@op("linalg.qr", "qr")
def _qr(a, mode="reduced"):
    return (F.full((0,), 0.0, a.dtype), F.qr(a, "r")) if mode == "r" else F.qr(a, mode)


@op("linalg.norm", "norm")
def _linalg_norm(x, ord=None, dim=None, keepdim=False, dtype=None):     # noqa: A002
    return F.norm(x, ord, _axes(dim), keepdims=keepdim)


@op("linalg.matrix_norm", "matrix_norm")
def _matrix_norm(x, ord="fro", dim=(-2, -1), keepdim=False, dtype=None):     # noqa: A002
    return F.matrix_norm(x, ord, tuple(dim), keepdims=keepdim)


@op("linalg.cholesky", "cholesky")
def _cholesky(a, upper=False):
    low = F.cholesky(a)
    return F.swapaxes(low, -1, -2) if upper else low


@op("linalg.solve", "solve")
def _solve(a, b, left=True):
    """torch reads b (..., n) as a batch of vectors where its shape is a's without the last dim."""
    if not left:
        return F.swapaxes(_solve(F.swapaxes(a, -1, -2), F.swapaxes(b, -1, -2)), -1, -2)
    if b.ndim == 1 or (b.ndim == a.ndim - 1 and tuple(b.shape) == tuple(a.shape[:-1])):
        return F.squeeze(F.solve(a, F.expand_dims(b, -1)), -1)
    return F.solve(a, b)


@op("cholesky_solve", "cholesky_solve")
def _cholesky_solve(b, factor, upper=False):
    return F.cholesky_solve(b, factor, upper=upper)


@op("linalg.solve_triangular", "solve_triangular")
def _solve_triangular(a, b, upper, left=True, unitriangular=False):
    return F.solve_triangular(a, b, upper=upper, left=left, unitriangular=unitriangular)


@op("triangular_solve", "solve_triangular")
def _triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    """torch.triangular_solve's (x, a): a^T x = b with transpose=True."""
    a_used = F.swapaxes(a, -1, -2) if transpose else a
    return F.solve_triangular(a_used, b, upper=upper != transpose, unitriangular=unitriangular), F.identity(a)


@op("linalg.cross cross", "cross")
def _cross(a, b, dim=None):
    if dim is None:                       # torch.cross's legacy default: the first axis of size 3
        dim = next(i for i, (p, q) in enumerate(zip(a.shape, b.shape)) if p == 3 and q == 3)
    return F.cross(a, b, dim)


# -- shapes -------------------------------------------------------------------------------------------------------
@op("reshape view", "reshape")
def _reshape(x, *shape):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape
    return F.reshape(x, tuple(shape))


@op("reshape_as view_as", "reshape")
def _reshape_as(x, other):
    return F.reshape(x, tuple(other.shape))


@op("flatten", "reshape", composed=True)
def _flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return F.reshape(x, (1,))
    end = end_dim % x.ndim
    return F.reshape(x, tuple(x.shape[:start_dim]) + (-1,) + tuple(x.shape[end + 1:]))


@op("ravel", "ravel")
def _ravel(x):
    return F.ravel(x)


@op("unflatten", "reshape")
def _unflatten(x, dim, sizes):
    dim = dim % x.ndim
    return F.reshape(x, tuple(x.shape[:dim]) + tuple(sizes) + tuple(x.shape[dim + 1:]))


@op("permute", "transpose")
def _permute(x, *dims):
    dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
    return F.transpose(x, tuple(d % max(x.ndim, 1) for d in dims)) if x.ndim else F.identity(x)


@op("transpose swapaxes swapdims", "swapaxes")
def _transpose(x, a, b):
    return F.swapaxes(x, a, b) if x.ndim else F.identity(x)


@op("t mT", "transpose")
def _t(x):
    return F.swapaxes(x, -1, -2) if x.ndim >= 2 else F.identity(x)


@op("movedim moveaxis", "transpose")
def _movedim(x, src, dst):
    src = [s % x.ndim for s in (src if isinstance(src, (list, tuple)) else [src])]
    dst = [d % x.ndim for d in (dst if isinstance(dst, (list, tuple)) else [dst])]
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return F.transpose(x, tuple(order))


@op("squeeze squeeze.multiple", "squeeze")
def _squeeze(x, dim=None):
    if dim is None:
        return F.squeeze(x)
    dims = [d % max(x.ndim, 1) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    keep = [d for d in dims if x.ndim and x.shape[d] == 1]
    return F.squeeze(x, tuple(keep)) if keep else F.identity(x)


@op("unsqueeze", "expand_dims")
def _unsqueeze(x, dim):
    return F.expand_dims(x, dim % (x.ndim + 1))


@op("expand", "broadcast_to")
def _expand(x, *shape):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape
    lead = len(shape) - x.ndim
    return F.broadcast_to(x, tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)))


@op("expand_as", "broadcast_to")
def _expand_as(x, other):
    return F.broadcast_to(x, tuple(other.shape))


@op("broadcast_to", "broadcast_to")
def _broadcast_to(x, shape):
    return F.broadcast_to(x, tuple(shape))


@op("cat concat concatenate", "concat")
def _cat(xs, dim=0):
    kept = [x for x in xs if x.ndim != 1 or x.shape[0] != 0] or list(xs)    # torch skips 1-d empty tensors
    return F.concat(kept, dim)


@op("stack", "stack")
def _stack(xs, dim=0):
    return F.stack(list(xs), dim)


@op("hstack", "concat")
def _hstack(xs):
    return F.concat(list(xs), 0 if xs[0].ndim == 1 else 1)


@op("vstack", "concat reshape", composed=True)
def _vstack(xs):
    return F.concat([F.reshape(x, (1, -1)) if x.ndim < 2 else x for x in xs], 0)


@op("tile", "tile")
def _tile(x, reps):
    return F.tile(x, tuple(reps))


@op("repeat", "tile")
def _repeat(x, *reps):
    reps = reps[0] if len(reps) == 1 and isinstance(reps[0], (list, tuple)) else reps
    return F.tile(x, tuple(reps))


@op("split", "split")
def _split(x, size, dim=0):
    if isinstance(size, int):
        n = x.shape[dim]
        return tuple(F.split(x, list(range(size, n, size)), dim))
    return tuple(F.split(x, list(np.cumsum(size)[:-1]), dim))


@op("split_with_sizes", "split")
def _split_with_sizes(x, sizes, dim=0):
    return tuple(F.split(x, list(np.cumsum(sizes)[:-1]), dim))


@op("chunk", "split")
def _chunk(x, chunks, dim=0):
    n = x.shape[dim]
    size = -(-n // chunks)
    return tuple(F.split(x, list(range(size, n, size)), dim))


@op("unbind", "split squeeze", composed=True)
def _unbind(x, dim=0):
    return tuple(F.squeeze(p, dim) for p in F.split(x, x.shape[dim], dim))


@op("narrow", "getitem")
def _narrow(x, dim, start, length):
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, start + length)
    return x[tuple(index)]


@op("select", "getitem")
def _select(x, dim, index):
    item = [slice(None)] * x.ndim
    item[dim] = index
    return x[tuple(item)]


@op("flip", "getitem")
def _flip(x, dims):
    item = [slice(None)] * x.ndim
    for d in dims:
        item[d] = slice(None, None, -1)
    return x[tuple(item)]


@op("fliplr", "getitem")
def _fliplr(x):
    return x[:, ::-1]


@op("flipud", "getitem")
def _flipud(x):
    return x[::-1]


@op("roll", "concat getitem", composed=True)
def _roll(x, shifts, dims=None):
    if dims is None:
        return F.reshape(_roll(F.ravel(x), shifts, 0), tuple(x.shape))
    shifts = shifts if isinstance(shifts, (list, tuple)) else [shifts]
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        if n:
            s %= n
            lead = [slice(None)] * d
            x = F.concat([x[tuple(lead + [slice(n - s, None)])], x[tuple(lead + [slice(0, n - s)])]], d)
    return x


def _triangle(upper):
    def adapt(x, diagonal=0):
        rows, cols = x.shape[-2:]
        offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
        keep = offset >= diagonal if upper else offset <= diagonal
        return F.where(keep, x, F.zeros_like(x))
    return adapt


MAP["tril"] = [Entry(("where",), _triangle(False), True)]
MAP["triu"] = [Entry(("where",), _triangle(True), True)]


def _each(fn):
    """torch's atleast_* take one tensor or several (a list): one result each."""
    return lambda *xs: tuple(fn(x) for x in xs[0]) if isinstance(xs[0], (list, tuple)) else fn(xs[0])


MAP["atleast_1d"] = [Entry(("reshape",), _each(lambda x: F.reshape(x, (1,)) if x.ndim == 0 else F.identity(x)))]


@op("__getitem__", "getitem")
def _getitem(x, index):
    return x[index]


# -- indexing ------------------------------------------------------------------------------------------------------
def _fit_index(x, index, dim):
    """x cut to index's extent off `dim` (torch's gather reads only that part)."""
    return x[tuple(slice(None) if a == dim else slice(0, index.shape[a]) for a in range(x.ndim))]


@op("gather", "take_along_axis")
def _gather(x, dim, index, sparse_grad=False):
    if np.size(index) == 0:                   # torch allows any rank for an empty index
        return F.full(np.shape(index), 0.0, x.dtype)
    if x.ndim == 0:
        return F.identity(x) if np.ndim(index) == 0 else F.broadcast_to(x, np.shape(index))
    dim %= x.ndim
    return F.take_along_axis(_fit_index(x, index, dim), index, dim)


@op("take_along_dim", "take_along_axis")
def _take_along_dim(x, index, dim=None):
    if dim is None:                           # torch flattens both
        return F.take_along_axis(F.ravel(x), np.ravel(index), 0)
    return F.take_along_axis(x, index, dim)


@op("index_select", "take")
def _index_select(x, dim, index):
    return F.take(x, index, dim) if x.ndim else F.reshape(F.take(F.reshape(x, (1,)), index, 0), ())


@op("take", "take")
def _take(x, index):
    return F.take(x, index)


@op("masked_fill", "where")
def _masked_fill(x, mask, value):
    return F.where(mask, value if not hasattr(value, "shape") else value, x)


@op("scatter_add", "scatter_add_along_axis pad")
def _scatter_add(x, dim, index, src):
    """index may cover less than x off `dim`, and src more than index: src is cut to index, both are
    padded to x with zeros (index 0, update 0: nothing added)."""
    if x.ndim == 0:
        return x + F.sum(src) if np.size(index) else F.identity(x)
    dim %= x.ndim
    src = src[tuple(slice(0, n) for n in index.shape)]
    pads = tuple((0, 0) if a == dim else (0, x.shape[a] - index.shape[a]) for a in range(x.ndim))
    return F.scatter_add_along_axis(x, np.pad(index, pads), F.pad(src, pads), dim)


@op("index_add", "scatter_add")
def _index_add(x, dim, index, src, alpha=1):
    if x.ndim == 0:
        return F.reshape(_index_add(F.reshape(x, (1,)), 0, index, F.reshape(src, (1,)), alpha), ())
    return F.scatter_add(x, index, src * alpha, dim)


@op("scatter", "scatter")
def _scatter(x, dim, index, src=None, value=None, reduce=None):
    src = src if src is not None else value
    if x.ndim == 0:
        one = F.reshape(src, (1,)) if hasattr(src, "ndim") and src.ndim == 0 else src
        return F.reshape(F.scatter(F.reshape(x, (1,)), 0, np.reshape(index, (1,)), one), ())
    return F.scatter(x, dim, index, src)


@op("nn.functional.embedding", "embedding")
def _embedding(w, ids, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    if max_norm is not None or scale_grad_by_freq:
        raise TypeError("max_norm / scale_grad_by_freq")
    return F.embedding(ids, w)


@op("nn.functional.embedding_bag", "embedding_bag")
def _embedding_bag(w, ids, offsets=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, mode="mean",
                   sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    if max_norm is not None or scale_grad_by_freq:
        raise TypeError("max_norm / scale_grad_by_freq")
    return F.embedding_bag(ids, w, offsets, mode, per_sample_weights, include_last_offset, padding_idx)


@op("nn.functional.one_hot", "one_hot")
def _one_hot(x, num_classes=-1):
    if num_classes == -1:              # from the (constant) indices, as torch does
        num_classes = int(np.max(x)) + 1 if np.size(x) else 0
    return F.one_hot(x, num_classes, dtype=np.int64)


# -- nn: convolution, pooling, normalisation, losses -------------------------------------------------------------------
def _conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    if isinstance(padding, str):        # "valid": none; "same" (stride 1): total d*(k-1), the extra one after
        nsp = w.ndim - 2
        dil = (dilation,) * nsp if isinstance(dilation, int) else tuple(dilation)
        totals = [d * (k - 1) for d, k in zip(dil, w.shape[2:])]
        padding = 0 if padding == "valid" else tuple((t // 2, t - t // 2) for t in totals)
    batched = x.ndim == w.ndim
    x = x if batched else F.expand_dims(x, 0)
    y = F.conv(x, w, b, stride=stride, pad=padding, dilation=dilation, groups=groups)
    return y if batched else F.squeeze(y, 0)


for _t in ("nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d"):
    MAP[_t] = [Entry(("conv",), _conv)]


def _conv_t(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    batched = x.ndim == w.ndim
    x = x if batched else F.expand_dims(x, 0)
    y = F.conv_transpose(x, w, b, stride=stride, pad=padding, dilation=dilation, groups=groups,
                         output_padding=output_padding)
    return y if batched else F.squeeze(y, 0)


for _t in ("nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d"):
    MAP[_t] = [Entry(("conv_transpose",), _conv_t)]


def _tuple(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v) * (n if len(tuple(v)) == 1 else 1)


def _pool_geometry(x, nsp, kernel_size, stride, padding, ceil_mode):
    """(kernel, stride, pads, explicit pads) with ceil_mode's extra end padding; torch's rule: the last
    window starts inside the input or its begin padding."""
    kernel = _tuple(kernel_size, nsp)
    stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, nsp)
    pad = _tuple(padding, nsp)
    pads = []
    for size, k, st, p in zip(x.shape[-nsp:], kernel, stride, pad):
        extra = 0
        if ceil_mode:
            out = -(-(size + 2 * p - k) // st) + 1
            if (out - 1) * st >= size + p:
                out -= 1
            extra = max((out - 1) * st + k - (size + 2 * p), 0)
        pads.append((p, p + extra))
    return kernel, stride, tuple(pads), pad


def _batched(x, nsp, fn):
    """fn on x with a batch axis (torch's pools also take unbatched (C, *spatial) inputs)."""
    if x.ndim == nsp + 1:
        out = fn(F.expand_dims(x, 0))
        return tuple(F.squeeze(o, 0) for o in out) if isinstance(out, tuple) else F.squeeze(out, 0)
    return fn(x)


def _max_pool(nsp):
    def adapt(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        stride = None if stride is None or stride == [] or stride == () else _tuple(stride, nsp)
        return _batched(x, nsp, lambda t: F.max_pool(t, _tuple(kernel_size, nsp), stride, _tuple(padding, nsp),
                                                     _tuple(dilation, nsp), ceil_mode, return_indices))
    return adapt


def _avg_pool(nsp):
    def adapt(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
        kernel, stride, pads, pad = _pool_geometry(x, nsp, kernel_size, stride, padding, ceil_mode)
        if not count_include_pad and divisor_override is None:
            return _batched(x, nsp, lambda t: F.avg_pool(t, kernel, stride, pads, count_include_pad=False))
        window = math.prod(kernel)
        total = _batched(x, nsp, lambda t: F.avg_pool(t, kernel, stride, pads, count_include_pad=True) * window)
        if divisor_override is not None:
            return total / divisor_override
        counts = np.ones(())                   # per output position: the window inside input + explicit padding
        for axis, (size, k, st, p, (_, after)) in enumerate(zip(x.shape[-nsp:], kernel, stride, pad, pads)):
            starts = np.arange(0, size + p + after - k + 1, st)
            per = np.minimum(starts + k, size + 2 * p) - starts
            counts = counts[..., None] * per if axis else per.astype(np.float64)
        return total / counts
    return adapt


for _n in (1, 2, 3):
    MAP[f"nn.functional.max_pool{_n}d"] = [Entry(("max_pool",), _max_pool(_n))]
    MAP[f"nn.functional.avg_pool{_n}d"] = [Entry(("avg_pool",), _avg_pool(_n))]
    MAP[f"nn.functional.adaptive_avg_pool{_n}d"] = [Entry(("adaptive_avg_pool",), lambda x, size, _n=_n: _batched(
        x, _n, lambda t: F.adaptive_avg_pool(t, size)))]
    MAP[f"nn.functional.adaptive_max_pool{_n}d"] = [Entry(("adaptive_max_pool",), lambda x, size, return_indices=False,
                                                         _n=_n: _batched(x, _n, lambda t: F.adaptive_max_pool(
                                                             t, size, return_indices)))]


@op("nn.functional.layer_norm", "layer_norm mean", composed=True)
def _layer_norm(x, shape, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mu = F.mean(x, axes, keepdims=True)
    xc = x - mu
    y = xc * F.rsqrt(F.mean(xc * xc, axes, keepdims=True) + eps)
    y = y if w is None else y * w
    return y if b is None else y + b


@op("nn.functional.batch_norm", "batch_norm")
def _batch_norm(x, mean, var, w=None, b=None, training=False, momentum=0.1, eps=1e-5):
    """The normalised output (torch's update of the running statistics in place is not compared)."""
    if x.ndim < 2:                       # torch reads (C,) as one sample of C channels
        return F.reshape(_batch_norm(F.reshape(x, (1, -1)), mean, var, w, b, training, momentum, eps), x.shape)
    c = x.shape[1]
    w = np.ones(c) if w is None else w
    b = np.zeros(c) if b is None else b
    if training:
        return F.batch_norm(x, w, b, axis=1, eps=eps, training=True)
    return F.batch_norm(x, w, b, mean, var, axis=1, eps=eps, training=False)


@op("nn.functional.group_norm", "group_norm")
def _group_norm(x, groups, weight=None, bias=None, eps=1e-5):
    return F.group_norm(x, groups, weight, bias, eps=eps)


@op("nn.functional.rms_norm", "rms_norm")
def _rms_norm(x, shape, weight=None, eps=None):
    return F.rms_norm(x, shape, weight, eps=eps)


@op("nn.functional.normalize", "normalize")
def _normalize_direct(x, p=2.0, dim=1, eps=1e-12):
    if not x.ndim:               # torch normalises a 0-d x as a 1-element vector
        return F.reshape(F.normalize(F.reshape(x, (1,)), p, 0, eps), ())
    return F.normalize(x, p, dim, eps)


@op("nn.functional.normalize", "sum power maximum", composed=True)
def _normalize(x, p=2.0, dim=1, eps=1e-12):
    return x / F.maximum(_vector_norm(x, p, dim if x.ndim else None, keepdim=True), eps)


@op("nn.functional.cosine_similarity", "cosine_similarity")
def _cosine_similarity_direct(a, b, dim=1, eps=1e-8):
    if not max(a.ndim, b.ndim):
        return F.cosine_similarity(F.reshape(a, (1,)), F.reshape(b, (1,)), 0, eps)
    return F.cosine_similarity(a, b, dim, eps)


@op("nn.functional.cosine_similarity", "sum sqrt maximum", composed=True)
def _cosine_similarity(a, b, dim=1, eps=1e-8):
    dim = None if max(a.ndim, b.ndim) == 0 else dim
    shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))      # torch broadcasts before the norms
    a, b = F.broadcast_to(a, shape), F.broadcast_to(b, shape)
    return F.sum(a * b, dim) / F.sqrt(F.maximum(F.sum(a * a, dim) * F.sum(b * b, dim), eps * eps))


@op("nn.functional.pixel_shuffle", "reshape transpose", composed=True)
def _pixel_shuffle(x, r=None, upscale_factor=None):
    r = upscale_factor if r is None else r
    *lead, c, h, w = x.shape
    y = F.reshape(x, tuple(lead) + (c // (r * r), r, r, h, w))
    k = len(lead)
    y = F.transpose(y, tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    return F.reshape(y, tuple(lead) + (c // (r * r), h * r, w * r))


@op("nn.functional.pixel_unshuffle", "reshape transpose", composed=True)
def _pixel_unshuffle(x, r=None, downscale_factor=None):
    r = downscale_factor if r is None else r
    *lead, c, h, w = x.shape
    k = len(lead)
    y = F.reshape(x, tuple(lead) + (c, h // r, r, w // r, r))
    y = F.transpose(y, tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    return F.reshape(y, tuple(lead) + (c * r * r, h // r, w // r))


def _pad_mode(mode):
    def adapt(x, pad, mode_=None, value=None, **kw):
        pad = list(pad)
        pairs = [(0, 0)] * x.ndim
        for i in range(len(pad) // 2):
            pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
        if any(p < 0 for pair in pairs for p in pair):           # negative padding crops
            x = x[tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(pairs))]
            pairs = [(max(b, 0), max(e, 0)) for b, e in pairs]
        return F.pad(x, tuple(pairs), mode, 0.0 if value is None else value)
    return adapt


MAP["nn.functional.pad.constant"] = [Entry(("pad",), _pad_mode("constant"))]
MAP["nn.functional.pad.reflect"] = [Entry(("pad",), _pad_mode("reflect"))]
MAP["nn.functional.pad.replicate"] = [Entry(("pad",), _pad_mode("edge"))]
MAP["nn.functional.pad.circular"] = [Entry(("pad",), _pad_mode("wrap"))]
MAP["constant_pad_nd"] = [Entry(("pad",), lambda x, pad, value=0: _pad_mode("constant")(x, pad, value=value))]


def _reduce(loss, reduction):
    if reduction == "mean":
        return F.mean(loss)
    return F.sum(loss) if reduction == "sum" else loss


@op("nn.functional.mse_loss", "mean", composed=True)
def _mse_loss(a, b, size_average=None, reduce=None, reduction="mean"):
    return _reduce((a - b) * (a - b), reduction)


@op("nn.functional.l1_loss", "abs mean", composed=True)
def _l1_loss(a, b, size_average=None, reduce=None, reduction="mean"):
    return _reduce(F.abs(a - b), reduction)


@op("nn.functional.smooth_l1_loss", "where abs", composed=True)
def _smooth_l1(a, b, size_average=None, reduce=None, reduction="mean", beta=1.0):
    d = F.abs(a - b)
    loss = d - 0.5 * beta if beta == 0 else F.where(F.less(d, beta), 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(loss, reduction)


@op("nn.functional.huber_loss", "where abs", composed=True)
def _huber(a, b, reduction="mean", delta=1.0):
    d = F.abs(a - b)
    return _reduce(F.where(F.less(d, delta), 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


@op("nn.functional.binary_cross_entropy_with_logits", "softplus", composed=True)
def _bce_logits(x, t, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
    if pos_weight is not None:
        loss = (1 - t) * x + (1 + (pos_weight - 1) * t) * F.softplus(-x)
    else:
        loss = F.softplus(x) - x * t
    return _reduce(loss if weight is None else loss * weight, reduction)


@op("nn.functional.binary_cross_entropy", "log maximum", composed=True)
def _bce(p, t, weight=None, size_average=None, reduce=None, reduction="mean"):
    loss = -(t * F.maximum(F.log(p), -100.0) + (1 - t) * F.maximum(F.log(1 - p), -100.0))
    return _reduce(loss if weight is None else loss * weight, reduction)


@op("nn.functional.kl_div", "exp log", composed=True)
def _kl_div(x, t, size_average=None, reduce=None, reduction="mean", log_target=False):
    loss = F.exp(t) * (t - x) if log_target else F.where(F.greater(t, 0.0), t * (F.log(t) - x), F.zeros_like(x))
    if reduction == "batchmean":
        return F.sum(loss) / (x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction)


@op("nn.functional.soft_margin_loss", "softplus", composed=True)
def _soft_margin(x, t, size_average=None, reduce=None, reduction="mean"):
    return _reduce(F.softplus(-t * x), reduction)


@op("nn.functional.poisson_nll_loss", "exp log", composed=True)
def _poisson_nll(x, t, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None, reduction="mean"):
    loss = F.exp(x) - t * x if log_input else x - t * F.log(x + eps)
    if full:                          # Stirling's term t log t - t + log(2 pi t) / 2, where t > 1
        safe = F.where(F.greater(t, 1.0), t, F.full(t.shape, 2.0, t.dtype)) if hasattr(t, "shape") else t
        loss = loss + F.where(F.greater(t, 1.0), safe * F.log(safe) - safe + 0.5 * F.log(2 * math.pi * safe), 0.0)
    return _reduce(loss, reduction)


def _class_weights(weight, shape, axis):
    """A per-class weight (C,) shaped to broadcast along the class axis of `shape`."""
    return F.reshape(weight, (shape[axis],) + (1,) * (len(shape) - axis - 1)) if weight is not None else 1.0


@op("nn.functional.cross_entropy", "log_softmax take_along_axis", composed=True)
def _cross_entropy(x, t, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                   label_smoothing=0.0):
    axis = 1 if x.ndim > 1 else 0
    classes = x.shape[axis]
    logp = F.log_softmax(x, axis)
    w = _class_weights(weight, x.shape, axis)
    if np.dtype(t.dtype).kind == "f":                     # class probabilities
        t = t * (1 - label_smoothing) + label_smoothing / classes
        loss = -F.sum(logp * t * w, axis)
        return F.sum(loss) / (math.prod(x.shape) // classes) if reduction == "mean" else _reduce(loss, reduction)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    picked = -F.squeeze(F.take_along_axis(logp, np.expand_dims(safe, axis), axis), axis)
    per = (np.ones(safe.shape) if weight is None else F.take(weight, safe)) * valid
    loss = picked * per
    if label_smoothing:
        smooth = -F.sum(logp * w, axis) * valid
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)
    if reduction == "mean":
        return F.sum(loss) / F.sum(per) if weight is not None else F.sum(loss) / float(valid.sum())
    return _reduce(loss, reduction)


@op("nn.functional.nll_loss", "nll_loss")
def _nll_direct(x, t, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    if size_average is not None or reduce is not None:
        raise TypeError("size_average / reduce")
    return F.nll_loss(x, t, weight, ignore_index, reduction)


@op("nn.functional.nll_loss", "take_along_axis", composed=True)
def _nll(x, t, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    axis = 1 if x.ndim > 1 else 0
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    picked = -F.squeeze(F.take_along_axis(x, np.expand_dims(safe, axis), axis), axis)
    per = (np.ones(safe.shape) if weight is None else F.take(weight, safe)) * valid
    loss = picked * per
    if reduction == "mean":
        return F.sum(loss) / (F.sum(per) if weight is not None else float(valid.sum()))
    return _reduce(loss, reduction)


@op("nn.functional.scaled_dot_product_attention", "softmax matmul", composed=True)
def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise NotComparable("dropout")
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        times = q.shape[-3] // k.shape[-3]
        k, v = (F.reshape(F.broadcast_to(F.expand_dims(t, -3), t.shape[:-2] + (times,) + t.shape[-2:]),
                          t.shape[:-3] + (t.shape[-3] * times,) + t.shape[-2:]) for t in (k, v))
    s = F.matmul(q, F.swapaxes(k, -1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        s = F.where(np.tril(np.ones((lq, lk), bool)), s, -np.inf)
    if attn_mask is not None:
        s = F.where(attn_mask, s, -np.inf) if np.dtype(attn_mask.dtype) == np.bool_ else s + attn_mask
    return F.matmul(F.softmax(s, -1), v)


@op("nn.functional.interpolate.nearest nn.functional.interpolate.bilinear nn.functional.interpolate.linear "
    "nn.functional.interpolate.bicubic nn.functional.interpolate.trilinear nn.functional.interpolate.area "
    "nn.functional.upsample_nearest nn.functional.upsample_bilinear", "interpolate")
def _interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                 antialias=False):
    if antialias:
        raise TypeError("antialias=True")
    return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners,
                         recompute_scale_factor=bool(recompute_scale_factor))


MAP["nn.functional.upsample_bilinear"] = [Entry(("interpolate",), lambda x, size=None, scale_factor=None: F.interpolate(
    x, size=size, scale_factor=scale_factor, mode="bilinear", align_corners=True))]


@op("nn.functional.grid_sample", "grid_sample")
def _grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    return F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=bool(align_corners))


# -- more compositions: casts, fills, reductions with indices, stacking, distances, losses, norms -------------------
def _cast_to(dtype):
    return lambda x, memory_format=None: F.cast(x, dtype)


for _t, _d in [("double", np.float64), ("float", np.float32), ("long", np.int64), ("int", np.int32),
               ("bool", np.bool_), ("short", np.int16), ("char", np.int8), ("byte", np.uint8)]:
    op(_t, "cast")(_cast_to(_d))


@op("zeros_like", "zeros_like")
def _zeros_like(x, dtype=None, **kw):
    return F.zeros_like(x) if dtype is None else F.full(x.shape, 0, _np_dtype(dtype))


@op("ones_like", "ones_like")
def _ones_like(x, dtype=None, **kw):
    return F.ones_like(x) if dtype is None else F.full(x.shape, 1, _np_dtype(dtype))


@op("full_like", "full")
def _full_like(x, value, dtype=None, **kw):
    return F.full(x.shape, value, x.dtype if dtype is None else _np_dtype(dtype))


def _new(fill):
    def adapt(x, size, *value, dtype=None, **kw):
        v = value[0] if value else kw.get("fill_value", fill)
        return F.full(tuple(size), v, x.dtype if dtype is None else _np_dtype(dtype))
    return adapt


MAP["new_zeros"], MAP["new_ones"], MAP["new_full"] = ([Entry(("full",), _new(f))] for f in (0, 1, None))


def _np_dtype(dtype):
    import torch
    return torch.empty((), dtype=dtype).numpy().dtype


@op("fill", "full")
def _fill(x, value):
    return F.full(x.shape, float(value) if not hasattr(value, "shape") else 0, x.dtype) + (
        value if hasattr(value, "shape") else 0)


def _div_mode(mode):
    def adapt(a, b, rounding_mode=mode):
        q = a / b
        return F.floor(q) if mode == "floor" else F.sign(q) * F.floor(F.abs(q))
    return adapt


MAP["div.trunc_rounding"] = [Entry(("trunc_divide",), lambda a, b, rounding_mode="trunc": F.trunc_divide(a, b)),
                             Entry(("divide", "floor"), _div_mode("trunc"), True)]
MAP["div.floor_rounding"] = [Entry(("divide", "floor"), _div_mode("floor"), True)]
MAP["floor_divide"] = [Entry(("divide", "floor"), lambda a, b: F.floor(a / b), True)]


@op("var_mean var_mean.unbiased", "mean sum", composed=True)
def _var_mean(x, dim=None, unbiased=None, correction=None, keepdim=False):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _var(x, dim, unbiased, correction, keepdim), F.mean(x, _axes(dim, x.ndim), keepdims=keepdim)


@op("std_mean std_mean.unbiased", "mean sum sqrt", composed=True)
def _std_mean(x, dim=None, unbiased=None, correction=None, keepdim=False):
    v, m = _var_mean(x, dim, unbiased, correction, keepdim)
    return F.sqrt(v), m


def _arg_extremum(x, dim, keepdim, largest):
    """The first index of the extremum along dim, as a comparison with the reduced value."""
    if x.ndim == 0:
        return F.full((), 0, np.int64)
    dim %= x.ndim
    ext = (F.max if largest else F.min)(x, dim, keepdims=True)
    hit = F.logical_or(F.equal(x, ext), F.logical_and(_isnan(x), _isnan(ext)))
    index = np.arange(x.shape[dim]).reshape((-1,) + (1,) * (x.ndim - dim - 1))
    return F.min(F.where(hit, index, np.int64(x.shape[dim])), dim, keepdims=keepdim)


MAP.setdefault("argmax", []).append(Entry(("max", "min", "where"), lambda x, dim=None, keepdim=False:
                                          _arg_extremum(F.ravel(x) if dim is None else x, 0 if dim is None else dim,
                                                        keepdim and dim is not None, True), True))
MAP.setdefault("argmin", []).append(Entry(("max", "min", "where"), lambda x, dim=None, keepdim=False:
                                          _arg_extremum(F.ravel(x) if dim is None else x, 0 if dim is None else dim,
                                                        keepdim and dim is not None, False), True))


def _with_index(largest):
    def adapt(x, dim, keepdim=False):
        values = (F.max if largest else F.min)(x, None if x.ndim == 0 else dim, keepdims=keepdim)
        return values, _arg_extremum(x, dim, keepdim, largest)
    return adapt


MAP["max.reduction_with_dim"] = [Entry(("max", "min", "where"), _with_index(True), True)]
MAP["min.reduction_with_dim"] = [Entry(("max", "min", "where"), _with_index(False), True)]


@op("aminmax", "max min", composed=True)
def _aminmax(x, dim=None, keepdim=False):
    axes = _axes(dim, x.ndim)
    return F.min(x, axes, keepdims=keepdim), F.max(x, axes, keepdims=keepdim)


@op("all", "min cast", composed=True)
def _all(x, dim=None, keepdim=False):
    return F.cast(F.min(F.cast(_truth(x), np.int64), _axes(dim, x.ndim), keepdims=keepdim), np.bool_)


@op("any", "max cast", composed=True)
def _any(x, dim=None, keepdim=False):
    return F.cast(F.max(F.cast(_truth(x), np.int64), _axes(dim, x.ndim), keepdims=keepdim), np.bool_)


@op("count_nonzero", "sum cast", composed=True)
def _count_nonzero(x, dim=None):
    return F.sum(F.cast(_truth(x), np.int64), _axes(dim, x.ndim))


@op("diff", "getitem subtract concat", composed=True)
def _diff(x, n=1, dim=-1, prepend=None, append=None):
    if n == 0:                        # torch returns the input, without prepend and append
        return F.identity(x)
    dim %= x.ndim
    parts = [p for p in (prepend, x, append) if p is not None]
    x = F.concat([F.broadcast_to(p, x.shape[:dim] + (1,) + x.shape[dim + 1:]) if p.ndim == 0 else p
                  for p in parts], dim) if len(parts) > 1 else x
    lead = (slice(None),) * dim
    for _ in range(n):
        x = x[lead + (slice(1, None),)] - x[lead + (slice(None, -1),)]
    return x


@op("trapezoid trapz", "getitem sum", composed=True)
def _trapezoid(y, x=None, dx=None, dim=-1):
    dim %= y.ndim
    lead = (slice(None),) * dim
    mid = (y[lead + (slice(1, None),)] + y[lead + (slice(None, -1),)]) * 0.5
    if x is not None:
        step = _diff(x, 1, -1 if x.ndim == 1 else dim)
        step = F.reshape(step, (step.shape[0],) + (1,) * (y.ndim - dim - 1)) if x.ndim == 1 else step
        return F.sum(mid * step, dim)
    return F.sum(mid, dim) * (1.0 if dx is None else dx)


@op("dstack", "concat reshape", composed=True)
def _dstack(xs):
    shaped = [F.reshape(x, (1, 1, 1)) if x.ndim == 0 else F.reshape(x, (1, x.shape[0], 1)) if x.ndim == 1 else
              F.expand_dims(x, 2) if x.ndim == 2 else x for x in xs]
    return F.concat(shaped, 2)


@op("column_stack", "concat reshape", composed=True)
def _column_stack(xs):
    return F.concat([F.reshape(x, (-1, 1)) if x.ndim < 2 else x for x in xs], 1)


def _atleast_3d(x):
    if x.ndim >= 3:
        return F.identity(x)
    return F.reshape(x, (1, 1, 1) if x.ndim == 0 else (1, x.shape[0], 1) if x.ndim == 1 else tuple(x.shape) + (1,))


MAP["atleast_2d"] = [Entry(("reshape",), _each(lambda x: F.reshape(x, (1,) * (2 - x.ndim) + tuple(x.shape))
                                               if x.ndim < 2 else F.identity(x)))]
MAP["atleast_3d"] = [Entry(("reshape",), _each(_atleast_3d))]


def _split_at(x, cuts, dim):
    return tuple(F.split(x, list(cuts), dim)) if cuts else (F.identity(x),)


@op("tensor_split", "split")
def _tensor_split(x, sections, dim=0):
    if np.ndim(sections) == 0:                # a 0-d tensor of sections
        sections = int(sections)
    n = x.shape[dim]
    if isinstance(sections, int):
        size, extra = divmod(n, sections)
        cuts = np.cumsum([size + (i < extra) for i in range(sections)])[:-1]
    else:
        cuts = list(sections) if not hasattr(sections, "tolist") else sections.tolist()
    cuts = [min(max(int(c), 0), n) for c in cuts]
    return _split_at(x, cuts, dim)


@op("hsplit", "split")
def _hsplit(x, sections):
    return _tensor_split(x, sections, 1 if x.ndim > 1 else 0)


@op("vsplit", "split")
def _vsplit(x, sections):
    return _tensor_split(x, sections, 0)


@op("dsplit", "split")
def _dsplit(x, sections):
    return _tensor_split(x, sections, 2)


@op("split.list_args unsafe_split", "split")
def _split_list(x, size, dim=0):
    return _split(x, size, dim)


@op("unsafe_chunk", "split")
def _unsafe_chunk(x, chunks, dim=0):
    return _chunk(x, chunks, dim)


@op("rot90", "getitem transpose", composed=True)
def _rot90(x, k=1, dims=(0, 1)):
    a, b = dims
    for _ in range(k % 4):
        x = F.swapaxes(_flip(x, [b]), a, b)
    return x


@op("diag_embed", "einsum", composed=True)
def _diag_embed(x, offset=0, dim1=-2, dim2=-1):
    """x's last axis on the diagonal `offset` of a new pair of axes (dim1, dim2) of size n + |offset|."""
    n = x.shape[-1]
    size = n + abs(offset)
    place = np.zeros((n, size, size))
    place[np.arange(n), np.arange(n) + max(-offset, 0), np.arange(n) + max(offset, 0)] = 1
    y = F.einsum("...i,ijk->...jk", x, place)                        # the pair of axes last
    rank = y.ndim
    d1, d2 = dim1 % rank, dim2 % rank
    if d1 > d2:
        d1, d2, y = d2, d1, F.swapaxes(y, -1, -2)
    order = list(range(rank - 2))
    order.insert(d1, rank - 2)
    order.insert(d2, rank - 1)
    return F.transpose(y, tuple(order))


@op("diag", "einsum", composed=True)
def _diag(x, diagonal=0):
    if x.ndim == 1:
        n = x.shape[0] + abs(diagonal)
        eye = np.zeros((x.shape[0], n, n))
        for i in range(x.shape[0]):
            eye[i, i + max(-diagonal, 0), i + max(diagonal, 0)] = 1
        return F.einsum("i,ijk->jk", x, eye)
    return _diagonal(x, diagonal)


@op("diagflat", "einsum", composed=True)
def _diagflat(x, offset=0):
    return _diag(F.ravel(x), offset)


def _diagonal(x, offset=0, dim1=0, dim2=1):
    """Elements (i, i + offset) of axes dim1 and dim2, moved last, by a gather on their flattening."""
    d1, d2 = dim1 % x.ndim, dim2 % x.ndim
    rest = [a for a in range(x.ndim) if a not in (d1, d2)]
    moved = F.transpose(x, tuple(rest) + (d1, d2))
    rows, cols = x.shape[d1], x.shape[d2]
    i = np.arange(max(min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols), 0))
    flat = (i - min(offset, 0)) * cols + i + max(offset, 0)
    return F.take(F.reshape(moved, tuple(moved.shape[:-2]) + (rows * cols,)), flat.astype(np.int64), -1)


MAP["diagonal"] = MAP["linalg.diagonal"] = MAP["diagonal_copy"] = [Entry(("take",), _diagonal, True)]
MAP["trace"] = [Entry(("take", "sum"), lambda x: F.sum(_diagonal(x)), True)]


@op("isposinf", "equal")
def _isposinf(x):
    return F.equal(x, np.inf)


@op("isneginf", "equal")
def _isneginf(x):
    return F.equal(x, -np.inf)


@op("isclose", "abs less_equal", composed=True)
def _isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    close = F.logical_or(F.equal(a, b), F.less_equal(F.abs(a - b), atol + rtol * F.abs(b)))
    return F.logical_or(close, F.logical_and(_isnan(a), _isnan(b))) if equal_nan else close


@op("nn.functional.dropout nn.functional.dropout2d nn.functional.dropout3d nn.functional.alpha_dropout "
    "nn.functional.feature_alpha_dropout.without_train", "identity")
def _dropout(x, p=0.5, training=True, inplace=False):
    if training and p:
        raise NotComparable("random")
    return F.identity(x)


@op("nn.functional.rrelu", "leaky_relu")
def _rrelu(x, lower=1 / 8, upper=1 / 3, training=False, inplace=False):
    if training:
        raise NotComparable("random")
    return F.leaky_relu(x, (lower + upper) / 2)


for _t in ("squeeze_copy", "unsqueeze_copy", "view_copy", "expand_copy", "permute_copy", "transpose_copy", "t_copy",
           "alias_copy", "narrow_copy", "unbind_copy", "split_with_sizes_copy"):
    MAP[_t] = MAP[_t[:-len("_copy")] if _t != "alias_copy" else "positive"]


@op("softmax.with_dtype", "softmax")
def _softmax_dtype(x, dim, dtype=None):
    return _softmax(F.cast(x, _np_dtype(dtype)) if dtype is not None else x, dim)


@op("log_softmax.with_dtype", "log_softmax")
def _log_softmax_dtype(x, dim, dtype=None):
    return _log_softmax(F.cast(x, _np_dtype(dtype)) if dtype is not None else x, dim)


@op("nn.functional.softmin.with_dtype", "softmax")
def _softmin_dtype(x, dim, dtype=None):
    return _softmin(F.cast(x, _np_dtype(dtype)) if dtype is not None else x, dim)


@op("sum_to_size", "sum_to_shape")
def _sum_to_size(x, *size):
    size = size[0] if len(size) == 1 and isinstance(size[0], (list, tuple)) else size
    return F.sum_to_shape(x, tuple(size))


@op("T", "transpose")
def _big_t(x):
    return F.transpose(x) if x.ndim else F.identity(x)


@op("mH H", "transpose")
def _mh(x):
    return F.swapaxes(x, -1, -2) if x.ndim >= 2 else F.identity(x)


direct("special.xlog1py", "xlog1py")


@op("special.xlog1py", "where log1p", composed=True)
def _xlog1py(x, y):
    return F.where(_isnan(y), y * 1.0, F.where(F.equal(x, 0.0), F.zeros_like(x * y), x * F.log1p(y)))


@op("linalg.vecdot", "sum")
def _vecdot(a, b, dim=-1):
    return F.sum(a * b, dim)


@op("nn.functional.pairwise_distance", "pairwise_distance")
def _pairwise_distance_direct(a, b, p=2.0, eps=1e-6, keepdim=False):
    if not max(a.ndim, b.ndim):
        return F.reshape(F.pairwise_distance(F.reshape(a, (1,)), F.reshape(b, (1,)), p, eps), ())
    return F.pairwise_distance(a, b, p, eps, keepdim)


@op("nn.functional.pairwise_distance", "sum power", composed=True)
def _pairwise_distance(a, b, p=2.0, eps=1e-6, keepdim=False):
    d = a - b + eps
    return _vector_norm(d, p, -1 if max(a.ndim, b.ndim) else None, keepdim)


@op("dist", "sum power", composed=True)
def _dist(a, b, p=2):
    return _vector_norm(a - b, float(p), None)


@op("cdist", "sum sqrt", composed=True)
def _cdist(a, b, p=2.0, compute_mode=None):
    d = F.expand_dims(a, -2) - F.expand_dims(b, -3)
    return _vector_norm(d, p, -1)


@op("nn.functional.margin_ranking_loss", "maximum", composed=True)
def _margin_ranking(a, b, t, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    return _reduce(F.maximum(-t * (a - b) + margin, 0.0), reduction)


@op("nn.functional.hinge_embedding_loss", "where maximum", composed=True)
def _hinge_embedding(x, t, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    loss = F.where(F.not_equal(t, -1.0), x, F.zeros_like(x)) + F.where(F.not_equal(t, 1.0),
                                                                       F.maximum(margin - x, 0.0), F.zeros_like(x))
    return _reduce(loss, reduction)


@op("nn.functional.gaussian_nll_loss", "log maximum", composed=True)
def _gaussian_nll(x, t, var, full=False, eps=1e-6, reduction="mean"):
    if var.ndim == x.ndim - 1 and tuple(var.shape) == tuple(x.shape[:-1]):     # torch: one variance per row
        var = F.expand_dims(var, -1)
    var = F.maximum(var, eps)
    loss = 0.5 * (F.log(var) + (x - t) * (x - t) / var)
    return _reduce(loss + (0.5 * math.log(2 * math.pi) if full else 0.0), reduction)


@op("nn.functional.multilabel_soft_margin_loss", "softplus mean", composed=True)
def _multilabel_soft_margin(x, t, weight=None, size_average=None, reduce=None, reduction="mean"):
    loss = t * F.softplus(-x) + (1 - t) * F.softplus(x)
    loss = F.mean(loss if weight is None else loss * weight, -1)
    return _reduce(loss, reduction)


@op("nn.functional.cosine_embedding_loss", "sum sqrt maximum where", composed=True)
def _cosine_embedding(a, b, t, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    eps = 1e-12
    dim = -1 if a.ndim else None
    cos = F.sum(a * b, dim) / F.sqrt((F.sum(a * a, dim) + eps) * (F.sum(b * b, dim) + eps))
    loss = F.where(F.equal(t, 1.0), 1 - cos, F.where(F.equal(t, -1.0), F.maximum(cos - margin, 0.0),
                                                     F.zeros_like(cos)))
    return _reduce(loss, reduction)


@op("nn.functional.triplet_margin_loss", "sum power maximum", composed=True)
def _triplet(a, pos, neg, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None, reduce=None, reduction="mean"):
    d_pos, d_neg = _pairwise_distance(a, pos, p, eps), _pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = F.minimum(d_neg, _pairwise_distance(pos, neg, p, eps))
    return _reduce(F.maximum(d_pos - d_neg + margin, 0.0), reduction)


@op("nn.functional.instance_norm", "mean rsqrt", composed=True)
def _instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                   momentum=0.1, eps=1e-5):
    if not use_input_stats:
        raise TypeError("use_input_stats=False")
    axes = tuple(range(2, x.ndim))
    xc = x - F.mean(x, axes, keepdims=True)
    y = xc * F.rsqrt(F.mean(xc * xc, axes, keepdims=True) + eps)
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    y = y if weight is None else y * F.reshape(weight, shape)
    return y if bias is None else y + F.reshape(bias, shape)


MAP.setdefault("nn.functional.group_norm", []).append(Entry(("mean", "rsqrt", "reshape"), lambda x, groups,
                                                            weight=None, bias=None, eps=1e-5:
                                                            _group_norm_composed(x, groups, weight, bias, eps), True))


def _group_norm_composed(x, groups, weight, bias, eps):
    n, c = x.shape[0], x.shape[1]
    g = F.reshape(x, (n, groups, -1))
    gc_ = g - F.mean(g, -1, keepdims=True)
    y = F.reshape(gc_ * F.rsqrt(F.mean(gc_ * gc_, -1, keepdims=True) + eps), tuple(x.shape))
    shape = (c,) + (1,) * (x.ndim - 2)
    y = y if weight is None else y * F.reshape(weight, shape)
    return y if bias is None else y + F.reshape(bias, shape)


MAP.setdefault("nn.functional.rms_norm", []).append(Entry(("mean", "rsqrt"), lambda x, shape, weight=None,
                                                          eps=None: _rms_composed(x, shape, weight, eps), True))


def _rms_composed(x, shape, weight, eps):
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    eps = float(np.finfo(np.float64).eps) if eps is None else eps
    y = x * F.rsqrt(F.mean(x * x, axes, keepdims=True) + eps)
    return y if weight is None else y * weight


@op("nn.functional.local_response_norm", "avg_pool power pad", composed=True)
def _lrn(x, size, alpha=1e-4, beta=0.75, k=1.0):
    sq = F.expand_dims(x * x, 1)                                  # (N, 1, C, *spatial): pool over channels
    pads = ((0, 0), (0, 0), (size // 2, (size - 1) // 2)) + ((0, 0),) * (x.ndim - 2)
    sq = F.pad(sq, pads)
    div = F.avg_pool(sq, (size,) + (1,) * (x.ndim - 2), 1, 0, count_include_pad=True)
    return x / F.power(F.squeeze(div, 1) * alpha + k, beta)


@op("nn.functional.channel_shuffle", "reshape transpose", composed=True)
def _channel_shuffle(x, groups):
    n, c = x.shape[0], x.shape[1]
    y = F.reshape(x, (n, groups, c // groups) + tuple(x.shape[2:]))
    return F.reshape(F.swapaxes(y, 1, 2), tuple(x.shape))


def _adaptive(reduce, nsp):
    """Adaptive pooling as torch bins it: output i of an axis of size L over [floor(i L / n), ceil((i+1) L / n))."""
    def adapt(x, output_size, return_indices=False):
        if return_indices:
            raise TypeError("return_indices")
        sizes = (output_size,) * nsp if isinstance(output_size, int) or output_size is None else tuple(output_size)
        for axis_from_end, n in zip(range(len(sizes), 0, -1), sizes):
            axis = x.ndim - axis_from_end
            length = x.shape[axis]
            n = length if n is None else n
            lead = (slice(None),) * axis
            bins = [reduce(x[lead + (slice(i * length // n, -(-(i + 1) * length // n)),)], axis) for i in range(n)]
            x = F.stack(bins, axis)
        return x
    return adapt


for _n in (1, 2, 3):
    MAP[f"nn.functional.adaptive_avg_pool{_n}d"].append(Entry(("mean", "stack"), _adaptive(
        lambda t, a: F.mean(t, a), _n), True))
    MAP[f"nn.functional.adaptive_max_pool{_n}d"].append(Entry(("max", "stack"), _adaptive(
        lambda t, a: F.max(t, a), _n), True))


@op("repeat_interleave", "take")
def _repeat_interleave(x, repeats=None, dim=None, output_size=None):
    reps = np.asarray(repeats) if hasattr(repeats, "shape") and np.ndim(repeats) else int(repeats)
    x = F.ravel(x) if dim is None else x
    dim = 0 if dim is None else dim % x.ndim
    index = np.repeat(np.arange(x.shape[dim]), reps).astype(np.int64)
    return F.take(x, index, dim)


def _index_fill(x, dim, index, value):
    dim = dim % max(x.ndim, 1)
    mask = np.zeros(x.shape[dim] if x.ndim else 1, bool)
    mask[np.asarray(index).reshape(-1)] = True
    mask = mask.reshape((-1,) + (1,) * (x.ndim - dim - 1)) if x.ndim else mask.reshape(())
    return F.where(mask, value if hasattr(value, "shape") else float(value), x)


MAP["index_fill"] = [Entry(("where",), _index_fill, True)]


def _select_scatter(x, src, dim, index):
    dim %= x.ndim
    mask = (np.arange(x.shape[dim]) == index % x.shape[dim]).reshape((-1,) + (1,) * (x.ndim - dim - 1))
    return F.where(mask, F.expand_dims(src, dim), x)


MAP["select_scatter"] = [Entry(("where",), _select_scatter, True)]


def _slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    dim %= x.ndim
    positions = np.arange(x.shape[dim])[slice(start, end, step)]
    index = np.zeros(x.shape[dim], np.int64)
    index[positions] = np.arange(len(positions))
    mask = np.zeros(x.shape[dim], bool)
    mask[positions] = True
    spread = F.take(src, index, dim) if len(positions) else F.zeros_like(x)
    return F.where(mask.reshape((-1,) + (1,) * (x.ndim - dim - 1)), spread, x)


MAP["slice_scatter"] = [Entry(("where", "take"), _slice_scatter, True)]


def _index_copy(x, dim, index, src):
    dim %= max(x.ndim, 1)
    if x.ndim == 0:
        return F.identity(src)
    idx = np.asarray(index).reshape(-1)
    order = np.zeros(x.shape[dim], np.int64)
    order[idx] = np.arange(len(idx))
    mask = np.zeros(x.shape[dim], bool)
    mask[idx] = True
    return F.where(mask.reshape((-1,) + (1,) * (x.ndim - dim - 1)), F.take(src, order, dim), x)


MAP["index_copy"] = [Entry(("where", "take"), _index_copy, True)]


def _cov(x, correction=1, fweights=None, aweights=None):
    """torch.cov: observations in columns, frequency and importance weights combined."""
    x = F.reshape(x, (1, -1)) if x.ndim < 2 else x
    w = None
    for given in (fweights, aweights):
        if given is not None:
            given = F.cast(given, x.dtype) if hasattr(given, "dtype") else given
            w = given if w is None else w * given
    if w is None:
        xc = x - F.mean(x, 1, keepdims=True)
        c = F.matmul(xc, F.transpose(xc)) / max(x.shape[1] - correction, 0)
    else:
        total = F.sum(w)
        xc = x - F.sum(x * w, 1, keepdims=True) / total
        norm = total - (correction * F.sum(w * aweights) / total if aweights is not None else correction)
        c = F.matmul(xc * w, F.transpose(xc)) / F.maximum(norm, 0.0)
    return F.squeeze(c) if c.shape == (1, 1) else c


MAP["cov"] = [Entry(("matmul", "mean"), _cov, True)]


def _corrcoef(x):
    c = _cov(x)
    if c.ndim == 0:
        return c / c
    d = F.sqrt(_diagonal(c))
    return F.clip(c / (F.expand_dims(d, 1) * F.expand_dims(d, 0)), -1.0, 1.0)


MAP["corrcoef"] = [Entry(("matmul", "mean", "take"), _corrcoef, True)]


# -- gcompile functions of PyTorch's names, ahead of the compositions above --------------------------------------
for _t, _f in [("addmv", "addmv"), ("addbmm", "addbmm"), ("addr", "addr"), ("block_diag", "block_diag"),
               ("nn.functional.pdist", "pdist")]:
    preferred(_t, _f)
MAP["linalg.vecdot"].insert(0, Entry(("vecdot",), lambda a, b, dim=-1: F.vecdot(a, b, dim)))
MAP["count_nonzero"].insert(0, Entry(("count_nonzero",), lambda x, dim=None: F.count_nonzero(x, _axes(dim, x.ndim))))


def _with_indices(fname):
    """torch.median / nanmedian: the value of all entries, or (values, indices) along `dim`."""
    def adapt(x, dim=None, keepdim=False):
        if dim is None:
            return getattr(F, fname)(x)
        return getattr(F, fname)(x, dim, keepdims=keepdim, return_indices=True)
    return adapt


def _loss(fname, drop=("size_average", "reduce")):
    """A torch loss with its deprecated size_average/reduce arguments dropped (the samples leave them None)."""
    def adapt(*args, **kwargs):
        if any(kwargs.pop(k, None) is not None for k in drop):
            raise TypeError("size_average/reduce")
        return getattr(F, fname)(*args, **kwargs)
    return adapt


for _t in ("cosine_embedding_loss", "poisson_nll_loss", "gaussian_nll_loss", "soft_margin_loss", "multi_margin_loss",
           "multilabel_margin_loss", "multilabel_soft_margin_loss"):
    MAP.setdefault(f"nn.functional.{_t}", []).insert(0, Entry((_t,), _loss(_t)))


for _t, _f in [("nn.functional.local_response_norm", "local_response_norm"), ("nn.functional.bilinear", "bilinear"),
               ("nn.functional.channel_shuffle", "channel_shuffle")]:
    preferred(_t, _f)


def _unpool(n):
    """torch.nn.functional.max_unpool{n}d: an unbatched input (C, *spatial) as a batch of one."""
    def adapt(x, indices, kernel_size, stride=None, padding=0, output_size=None):
        one = x.ndim == n + 1
        if one:
            x, indices = F.expand_dims(x, 0), np.expand_dims(indices, 0)
        y = F.max_unpool(x, indices, kernel_size, stride, padding, output_size)
        return F.squeeze(y, 0) if one else y
    return adapt


def _distinct_indices(x, indices, *args, **kwargs) -> bool:
    """Whether no two values of one image go to the same place: elsewhere torch's max_unpool gradient
    (a gather for every value) is not the derivative, which reaches the value written last alone (its
    OpInfo skips those gradients and tests them on its `grad` variant, whose samples have none)."""
    flat = indices.reshape(-1, indices.shape[-1] if indices.ndim == 1 else int(np.prod(indices.shape[2:])))
    return all(len(np.unique(row)) == len(row) for row in np.asarray(flat))


for _n in (1, 2, 3):
    MAP[f"nn.functional.max_unpool{_n}d"] = [Entry(("max_unpool",), _unpool(_n), derivative=_distinct_indices)]
    MAP[f"nn.functional.max_unpool{_n}d.grad"] = [Entry(("max_unpool",), _unpool(_n))]


MAP["diag_embed"].insert(0, Entry(("diag_embed",), lambda x, offset=0, dim1=-2, dim2=-1:
                                  F.diag_embed(x, offset, dim1, dim2)))
MAP["select_scatter"].insert(0, Entry(("select_scatter",), lambda x, src, dim, index: F.select_scatter(x, src, dim,
                                                                                                      index)))
MAP["slice_scatter"].insert(0, Entry(("slice_scatter",), lambda x, src, dim=0, start=None, end=None, step=1:
                                     F.slice_scatter(x, src, dim, start, end, step)))
MAP["diagonal_scatter"] = [Entry(("diagonal_scatter",), lambda x, src, offset=0, dim1=0, dim2=1:
                                 F.diagonal_scatter(x, src, offset, dim1, dim2))]
MAP["masked_scatter"] = [Entry(("masked_scatter",), lambda x, mask, source: F.masked_scatter(x, mask, source))]
MAP["meshgrid.list_of_tensors"] = MAP["meshgrid.variadic_tensors"] = [
    Entry(("meshgrid",), lambda *xs, indexing="ij": F.meshgrid(*xs, indexing=indexing))]
for _t in ("atleast_1d", "atleast_2d", "atleast_3d", "column_stack"):
    preferred(_t, _t)
MAP["diff"].insert(0, Entry(("diff",), lambda x, n=1, dim=-1, prepend=None, append=None: F.diff(x, n, dim, prepend,
                                                                                                append)))
MAP["trapezoid"].insert(0, Entry(("trapezoid",), lambda y, x=None, dx=None, dim=-1: F.trapezoid(y, x, dx, dim)))
MAP["trapz"].insert(0, Entry(("trapezoid",), lambda y, x=None, dx=None, dim=-1: F.trapezoid(y, x, dx, dim)))
MAP["cumulative_trapezoid"] = [Entry(("cumulative_trapezoid",), lambda y, x=None, dx=None, dim=-1:
                                     F.cumulative_trapezoid(y, x, dx, dim))]

MAP["median"] = [Entry(("median",), _with_indices("median"))]
MAP["nanmedian"] = [Entry(("nanmedian",), _with_indices("nanmedian"))]
MAP["kthvalue"] = [Entry(("kthvalue",), lambda x, k, dim=-1, keepdim=False: F.kthvalue(x, k, dim, keepdim))]
MAP["mode"] = [Entry(("mode",), lambda x, dim=-1, keepdim=False: F.mode(x, dim, keepdim))]
for _t in ("quantile", "nanquantile"):
    MAP[_t] = [Entry((_t,), lambda x, q, dim=None, keepdim=False, interpolation="linear", _f=_t:
                     getattr(F, _f)(x, q, dim, keepdim, interpolation))]


# -- more of torch's op database, as compositions of gcompile functions ---------------------------------------------
for _n in range(5):
    MAP[f"polygamma.polygamma_n_{_n}"] = [Entry(("polygamma",), lambda x, n: F.polygamma(n, x))]
MAP["special.polygamma.special_polygamma_n_0"] = [Entry(("polygamma",), lambda x, n: F.polygamma(n, x))]


@op("mvlgamma.mvlgamma_p_1 mvlgamma.mvlgamma_p_3 mvlgamma.mvlgamma_p_5", "lgamma", composed=True)
def _mvlgamma(x, p):
    return F.add_n([F.lgamma(x - i / 2) for i in range(p)]) + p * (p - 1) / 4 * math.log(math.pi)


@op("round.decimals_0 round.decimals_3 round.decimals_neg_3", "round", composed=True)
def _round_decimals(x, decimals=0):
    scale = 10.0 ** abs(decimals)
    return F.round(x * scale) / scale if decimals >= 0 else F.round(x / scale) * scale


def _scatter_reduce(x, dim, index, src, reduce, include_self=True):
    if x.ndim == 0:                      # torch takes a 0-d tensor as one element along dim 0
        y = F.scatter_reduce(F.reshape(x, (1,)), 0, np.reshape(index, (1,)), F.reshape(src, (1,)), reduce,
                             include_self)
        return F.reshape(y, ())
    return F.scatter_reduce(x, dim, index, src, reduce, include_self)


for _r in ("sum", "prod", "mean", "amax", "amin"):
    MAP[f"scatter_reduce.{_r}"] = [Entry(("scatter_reduce",), _scatter_reduce)]


def _index_reduce(x, dim, index, source, reduce, include_self=True):
    """torch.index_reduce as scatter_reduce, the index spread along source's other axes."""
    if x.ndim == 0:
        x, source, out = F.reshape(x, (1,)), F.reshape(source, (1,)), ()
    else:
        out = None
    dim %= x.ndim
    spread = np.broadcast_to(np.reshape(index, (-1,) + (1,) * (x.ndim - dim - 1)), tuple(source.shape))
    y = F.scatter_reduce(x, dim, np.ascontiguousarray(spread), source, reduce, include_self)
    return y if out is None else F.reshape(y, out)


for _r in ("prod", "mean", "amax", "amin"):
    MAP[f"index_reduce.{_r}"] = [Entry(("scatter_reduce",), _index_reduce, True)]
MAP["argsort"] = [Entry(("argsort",), lambda x, dim=-1, descending=False, stable=False:
                        F.argsort(x, None if x.ndim == 0 else dim, descending) if x.ndim else F.full((), 0, np.int64))]
MAP["msort"] = [Entry(("sort",), lambda x: F.sort(x, 0))]
MAP["cholesky"] = [Entry(("cholesky",), lambda a, upper=False: F.swapaxes(F.cholesky(a), -1, -2) if upper
                         else F.cholesky(a))]
MAP["qr"] = [Entry(("qr",), lambda a, some=True: F.qr(a, "reduced" if some else "complete"))]


@op("linalg.tensorinv", "inv reshape", composed=True)
def _tensorinv(a, ind=2):
    rows, cols = a.shape[:ind], a.shape[ind:]
    return F.reshape(F.inv(F.reshape(a, (int(np.prod(rows)), int(np.prod(cols))))), tuple(cols) + tuple(rows))


@op("linalg.tensorsolve", "solve reshape", composed=True)
def _tensorsolve(a, b, dims=None):
    if dims is not None:
        a = F.moveaxis(a, tuple(dims), tuple(range(a.ndim - len(dims), a.ndim)))
    rest = a.shape[b.ndim:]
    square = F.reshape(a, (int(np.prod(b.shape)), int(np.prod(rest))))
    return F.reshape(F.solve(square, F.reshape(b, (-1,))), tuple(rest))


@op("linalg.vander", "power stack", composed=True)
def _vander(x, N=None):
    x = F.reshape(x, (1,)) if x.ndim == 0 else x              # torch reads a 0-d x as one element
    n = x.shape[-1] if N is None else N
    return F.stack([F.power(x, float(k)) if k else F.ones_like(x) for k in range(n)], -1) if n else \
        F.reshape(x, tuple(x.shape) + (0,)) * 0


def _tensor_unfold(x, dimension, size, step):
    """Tensor.unfold: windows of `size` every `step` along `dimension`, as a new last axis."""
    if x.ndim == 0:
        return F.reshape(x, (1,))
    dimension %= x.ndim
    count = (x.shape[dimension] - size) // step + 1
    index = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).astype(np.int64)
    windows = F.take(x, index, dimension)                  # (..., count, size, ...)
    return F.moveaxis(windows, dimension + 1, -1)


MAP["unfold"] = MAP["unfold_copy"] = [Entry(("take", "moveaxis"), _tensor_unfold, True)]
MAP["nn.functional.unfold"] = [Entry(("unfold",), lambda x, kernel_size, dilation=1, padding=0, stride=1:
                                     F.unfold(x, kernel_size, dilation, padding, stride))]
MAP["masked_select"] = [Entry(("masked_select",), lambda x, mask: F.masked_select(x, mask))]
MAP["index_put"] = [Entry(("index_put",), lambda x, indices, values, accumulate=False: F.index_put(
    x, tuple(i for k in indices for i in (np.nonzero(k) if np.asarray(k).dtype == np.bool_ else (k,))), values,
    accumulate))]


@op("put", "index_put reshape", composed=True)
def _put(x, index, source, accumulate=False):
    flat = F.index_put(F.ravel(x), (np.asarray(index).reshape(-1),), F.ravel(source), accumulate)
    return F.reshape(flat, tuple(x.shape))


@op("ldexp", "power multiply", composed=True)
def _ldexp(x, other):
    return x * F.power(2.0, F.cast(other, x.dtype) if hasattr(other, "dtype") else float(other))


@op("angle", "where", composed=True)
def _angle(x):
    x = x if np.dtype(x.dtype).kind == "f" else F.cast(x, np.float32)
    return F.where(F.not_equal(x, x), x, F.where(F.less(x, 0.0), np.asarray(math.pi, x.dtype),
                                                  np.asarray(0.0, x.dtype)))


@op("cartesian_prod", "meshgrid stack", composed=True)
def _cartesian_prod(*xs):
    if len(xs) == 1:
        return F.identity(xs[0])
    return F.stack([F.ravel(g) for g in F.meshgrid(*xs, indexing="ij")], 1)


@op("combinations", "take stack", composed=True)
def _combinations(x, r=2, with_replacement=False):
    import itertools
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = np.array(list(pick(range(x.shape[0]), r)), np.int64).reshape(-1, r)
    return F.take(x, rows, 0)


MAP["broadcast_tensors"] = [Entry(("broadcast_to",), lambda *xs: tuple(
    F.broadcast_to(t, np.broadcast_shapes(*(tuple(u.shape) for u in xs))) for t in xs))]


def _searched(sorted_seq, values, right, out_int32):
    """searchsorted's indices: how many entries of each sorted row are below each value (or not above)."""
    seq = F.expand_dims(sorted_seq, -2)                                 # (..., 1, M)
    v = F.expand_dims(values, -1)                                       # (..., K, 1)
    hits = F.less_equal(seq, v) if right else F.less(seq, v)
    return F.sum(F.cast(hits, np.int32 if out_int32 else np.int64), -1)


@op("searchsorted", "less sum", composed=True)
def _searchsorted(sorted_seq, values, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:
        sorted_seq = F.take_along_axis(sorted_seq, sorter, -1)
    right = right or side == "right"
    if not hasattr(values, "ndim"):
        values = F.full((), values, sorted_seq.dtype)
    if values.ndim == 0:
        return F.reshape(_searched(sorted_seq, F.reshape(values, (1,)), right, out_int32), ())
    if sorted_seq.ndim == 1:
        flat = F.reshape(values, (-1,))
        return F.reshape(_searched(sorted_seq, flat, right, out_int32), tuple(values.shape))
    return _searched(sorted_seq, values, right, out_int32)


@op("bucketize", "less sum", composed=True)
def _bucketize(x, boundaries, out_int32=False, right=False):
    return _searchsorted(boundaries, x, out_int32=out_int32, right=right)


reflected("__rmod__", "remainder")
MAP["linalg.inv_ex"] = [Entry(("inv",), lambda a, check_errors=False: (F.inv(a), F.full(tuple(a.shape[:-2]), 0,
                                                                                         np.int32)))]
MAP["linalg.cholesky_ex"] = [Entry(("cholesky",), lambda a, upper=False, check_errors=False: (
    F.swapaxes(F.cholesky(a), -1, -2) if upper else F.cholesky(a), F.full(tuple(a.shape[:-2]), 0, np.int32)))]
MAP["linalg.solve_ex"] = [Entry(("solve",), lambda a, b, left=True, check_errors=False: (
    _solve(a, b, left=left), F.full(tuple(a.shape[:-2]), 0, np.int32)))]
MAP["cholesky_inverse"] = [Entry(("cholesky_solve",), lambda low, upper=False: F.cholesky_solve(
    F.broadcast_to(np.eye(low.shape[-1]), tuple(low.shape)), low, upper))]
op("nn.functional.interpolate.nearest-exact", "interpolate")(_interpolate)


@op("nn.functional.triplet_margin_with_distance_loss", "pairwise_distance", composed=True)
def _triplet_with_distance(a, pos, neg, distance_function=None, margin=1.0, swap=False, reduction="mean"):
    if distance_function is None:
        distance = F.pairwise_distance
    elif type(distance_function).__name__ == "PairwiseDistance":
        d = distance_function
        distance = lambda u, v: F.pairwise_distance(u, v, d.norm, d.eps, d.keepdim)  # noqa: E731
    else:
        raise TypeError("a distance function written in torch")
    d_pos, d_neg = distance(a, pos), distance(a, neg)
    if swap:
        d_neg = F.minimum(d_neg, distance(pos, neg))
    return _reduce(F.maximum(d_pos - d_neg + margin, 0.0), reduction)


@op("renorm", "vector_norm where", composed=True)
def _renorm(x, p, dim, maxnorm):
    dim %= x.ndim
    others = tuple(i for i in range(x.ndim) if i != dim)
    norm = F.vector_norm(x, p, others, keepdims=True) if others else F.abs(x)
    return x * F.where(F.greater(norm, maxnorm), maxnorm / (norm + 1e-7), F.ones_like(norm))


for _t in ("conj", "conj_physical", "resolve_conj", "resolve_neg", "real"):
    MAP[_t] = [Entry(("identity",), lambda x: F.identity(x))]
MAP["isreal"] = [Entry(("full",), lambda x: F.full(tuple(x.shape), True, np.bool_))]


@op("linalg.householder_product", "matmul where", composed=True)
def _householder_product(a, tau):
    """Q = H_1 ... H_k, H_i = I - tau_i v_i v_iᵀ, v_i column i of a below the diagonal with a unit on it:
    Q's first n columns."""
    m, n = a.shape[-2:]
    rows = np.arange(m).reshape(m, 1)
    q = F.broadcast_to(np.eye(m), tuple(a.shape[:-2]) + (m, m))
    for i in range(tau.shape[-1]):
        v = F.where(rows > i, a[..., :, i:i + 1], (rows == i).astype(np.float64))
        t = F.expand_dims(F.expand_dims(tau[..., i], -1), -1)
        q = q - t * F.matmul(F.matmul(q, v), F.swapaxes(v, -1, -2))
    return q[..., :, :n]


@op("histc", "floor sum", composed=True)
def _histc(x, bins=100, min=0, max=0):          # noqa: A002 - torch's keyword names
    x = F.ravel(x)
    if min == max:
        lo, hi = F.min(x), F.max(x)
        same = F.equal(lo, hi)
        lo, hi = F.where(same, lo - 1, lo), F.where(same, hi + 1, hi)
    else:
        lo, hi = np.asarray(float(min)), np.asarray(float(max))
    inside = F.logical_and(F.greater_equal(x, lo), F.less_equal(x, hi))
    slot = F.minimum(F.floor((x - lo) * bins / (hi - lo)), bins - 1.0)
    hits = F.logical_and(F.expand_dims(inside, 1), F.equal(F.expand_dims(slot, 1), np.arange(bins, dtype=x.dtype)))
    return F.sum(F.cast(hits, x.dtype), 0)


def counterpart(name: str) -> Entry | None:
    """The first adapter of `name` whose gcompile functions exist here."""
    return next((e for e in MAP.get(name, []) if all(hasattr(F, n) for n in e.needs)), None)
