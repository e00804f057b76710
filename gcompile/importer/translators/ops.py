"""ONNX translators for arithmetic, activations, reductions, matrix products and NN layers.

Each translator writes the ONNX op's semantics with gcompile ops (gcompile.functions), so the
imported graph differentiates to any order through the existing VJP rules. Where ONNX allows
something gcompile does not express exactly (a dilated pooling window, an int Relu of a dtype
the op rejects, ...), the translator raises a clear UnsupportedError instead of guessing.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ... import functions as F
from ...frontend.tensor import Tensor, apply
from ...ir import dims
from ...ops.shape_rules import normalize_axes, normalize_axis
from ..table import SYMBOLIC_BINARY, SymInts, entries, onnx_op, require_float, sym_or_const


def _scalar(value, like) -> np.ndarray:
    return np.asarray(value, dtype=like.dtype)


# -- elementwise: unary ------------------------------------------------------------------------------
_UNARY = {"Sigmoid": F.sigmoid, "Tanh": F.tanh, "Exp": F.exp, "Log": F.log, "Sqrt": F.sqrt, "Erf": F.erf,
          "Sin": F.sin, "Cos": F.cos, "Tan": F.tan, "Floor": F.floor, "Ceil": F.ceil, "Round": F.round,
          "Softplus": F.softplus}


def _unary(fn):
    return lambda n, x: fn(require_float(n, x))


for _op, _fn in _UNARY.items():
    onnx_op(_op)(_unary(_fn))


@onnx_op("Neg")
def _neg(n, x):
    return F.negative(x)


@onnx_op("Abs")
def _abs(n, x):
    return F.abs(x)


@onnx_op("Sign")
def _sign(n, x):
    return F.sign(x)


@onnx_op("Relu")
def _relu(n, x):
    return F.relu(x) if np.dtype(x.dtype).kind == "f" else F.maximum(x, _scalar(0, x))


@onnx_op("Reciprocal")
def _reciprocal(n, x):
    return F.divide(_scalar(1, require_float(n, x)), x)


@onnx_op("Gelu")
def _gelu(n, x):
    return F.gelu(require_float(n, x), approximate=n.attr("approximate", "none") == "tanh")


@onnx_op("LeakyRelu")
def _leaky_relu(n, x):
    return F.leaky_relu(require_float(n, x), n.attr("alpha", 0.01))


@onnx_op("Elu")
def _elu(n, x):
    return F.elu(require_float(n, x), n.attr("alpha", 1.0))


def _expm1_negative(x, alpha):
    """alpha·(exp(x) − 1) for x ≤ 0, written on min(x, 0) so the unused branch never overflows."""
    return F.expm1(F.minimum(x, _scalar(0, x))) * alpha


@onnx_op("Selu")
def _selu(n, x):
    alpha, gamma = n.attr("alpha", 1.67326319217681884765625), n.attr("gamma", 1.05070102214813232421875)
    x = require_float(n, x)
    return F.where(F.greater(x, _scalar(0, x)), x, _expm1_negative(x, alpha)) * gamma


@onnx_op("Celu")
def _celu(n, x):
    alpha = n.attr("alpha", 1.0)
    x = require_float(n, x)
    return F.relu(x) + _expm1_negative(x / alpha, alpha)


@onnx_op("HardSigmoid")
def _hard_sigmoid(n, x):
    x = require_float(n, x)
    return F.clip(x * n.attr("alpha", 0.2) + n.attr("beta", 0.5), _scalar(0, x), _scalar(1, x))


@onnx_op("HardSwish")
def _hard_swish(n, x):
    x = require_float(n, x)
    return x * F.clip(x * (1 / 6) + 0.5, _scalar(0, x), _scalar(1, x))


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
    return F.where(F.greater(x, _scalar(n.attr("alpha", 1.0), x)), x, _scalar(0, x))


@onnx_op("PRelu")
def _prelu(n, x, slope):
    x = require_float(n, x)
    return F.where(F.less(x, _scalar(0, x)), x * slope, x)


@onnx_op("Shrink")
def _shrink(n, x):
    lambd, bias = n.attr("lambd", 0.5), n.attr("bias", 0.0)
    zero = _scalar(0, x)
    return F.where(F.less(x, _scalar(-lambd, x)), x + _scalar(bias, x),
                   F.where(F.greater(x, _scalar(lambd, x)), x - _scalar(bias, x), zero))


@onnx_op("IsNaN")
def _isnan(n, x):
    return F.not_equal(x, x)


@onnx_op("IsInf")
def _isinf(n, x):
    pos = F.equal(x, _scalar(np.inf, x)) if n.attr("detect_positive", 1) else None
    neg = F.equal(x, _scalar(-np.inf, x)) if n.attr("detect_negative", 1) else None
    if pos is None or neg is None:
        return pos if neg is None else neg
    return F.logical_or(pos, neg)


@onnx_op("Not")
def _not(n, x):
    return F.logical_not(x)


# -- elementwise: binary and variadic -------------------------------------------------------------------
def _symbolic(op_type, a, b):
    """Elementwise shape arithmetic on SymInts (raises NotSymbolic when it leaves the dims' algebra)."""
    fn = np.frompyfunc(SYMBOLIC_BINARY[op_type], 2, 1)
    dtype = np.bool_ if op_type == "Equal" else next(v.dtype for v in (a, b) if isinstance(v, SymInts))
    return sym_or_const(fn(entries(a), entries(b)), dtype)


def _binary(op_type, fn):
    def translate(n, a, b):
        if isinstance(a, SymInts) or isinstance(b, SymInts):
            return _symbolic(op_type, a, b)
        return fn(a, b)
    onnx_op(op_type, symbolic=op_type in SYMBOLIC_BINARY)(translate)


def _div(a, b):
    if np.dtype(a.dtype).kind == "f":
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
    if np.dtype(x.dtype).kind == "f":
        return F.power(x, F.cast(y, x.dtype))
    if np.dtype(y.dtype).kind == "f":      # int base, float exponent: the result keeps the base's type
        return F.cast(F.power(F.cast(x, np.float64), F.cast(y, np.float64)), x.dtype)
    return F.power(x, F.cast(y, x.dtype))


def _variadic(fn):
    def translate(n, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out if len(xs) > 1 else F.identity(out)
    return translate


onnx_op("Max")(_variadic(F.maximum))
onnx_op("Min")(_variadic(F.minimum))
onnx_op("Sum")(_variadic(F.add))


@onnx_op("Mean")
def _mean(n, *xs):
    return _variadic(F.add)(n, *xs) / _scalar(len(xs), require_float(n, xs[0]))


@onnx_op("Where", symbolic=True)
def _where(n, cond, a, b):
    if isinstance(a, SymInts) or isinstance(b, SymInts):
        dtype = next(v.dtype for v in (a, b) if isinstance(v, SymInts))
        return sym_or_const(np.where(entries(cond).astype(bool), entries(a), entries(b)), dtype)
    return F.where(cond, a, b)


@onnx_op("Clip")
def _clip(n, x, lo=None, hi=None):
    if n.has_attr("min") or n.has_attr("max"):     # opset < 11
        lo, hi = n.attr("min"), n.attr("max")
    lo = None if lo is None else F.cast(lo, x.dtype)
    hi = None if hi is None else F.cast(hi, x.dtype)
    return F.identity(x) if lo is None and hi is None else F.clip(x, lo, hi)


@onnx_op("Mod", numpy_only=True)
def _mod(n, a, b):
    return np.fmod(a, b) if n.attr("fmod", 0) else np.mod(a, b)


# -- matrix products -------------------------------------------------------------------------------------
@onnx_op("MatMul")
def _matmul(n, a, b):
    return F.matmul(a, b)


@onnx_op("Gemm")
def _gemm(n, a, b, c=None):
    a = F.transpose(a) if n.attr("transA", 0) else a
    b = F.transpose(b) if n.attr("transB", 0) else b
    y = F.matmul(a, b)
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if alpha != 1.0:
        y = y * _scalar(alpha, y)
    if c is not None and beta != 0.0:
        y = y + (c if beta == 1.0 else c * _scalar(beta, y))
    return y


@onnx_op("Einsum")
def _einsum(n, *xs):
    return F.einsum(n.attr("equation"), *xs)


# -- reductions ----------------------------------------------------------------------------------------------
def _reduce_axes(n, x, axes_operand):
    """The axes to reduce (a tuple), or None for "no reduction" (noop_with_empty_axes)."""
    axes = n.attr("axes") if n.has_attr("axes") else (
        None if axes_operand is None else n.ints(axes_operand, "axes"))
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return normalize_axes(axes, x.ndim)


def _reduction(body, extremum=False):
    def translate(n, x, axes=None):
        ax = _reduce_axes(n, x, axes)
        if ax is None:
            return F.identity(x)
        if extremum and any(x.shape[a] == 0 for a in ax):
            raise n.unsupported("a maximum or minimum over an empty axis is not supported")
        return body(x, ax, bool(n.attr("keepdims", 1)))
    return translate


_REDUCTIONS = {
    "ReduceSum": (lambda x, ax, k: F.sum(x, ax, keepdims=k), False),
    "ReduceMean": (lambda x, ax, k: F.mean(x, ax, keepdims=k), False),
    "ReduceMax": (lambda x, ax, k: F.max(x, ax, keepdims=k), True),
    "ReduceMin": (lambda x, ax, k: F.min(x, ax, keepdims=k), True),
    "ReduceProd": (lambda x, ax, k: F.prod(x, ax, keepdims=k), False),
    "ReduceL1": (lambda x, ax, k: F.sum(F.abs(x), ax, keepdims=k), False),
    "ReduceL2": (lambda x, ax, k: F.sqrt(F.sum(x * x, ax, keepdims=k)), False),
    "ReduceSumSquare": (lambda x, ax, k: F.sum(x * x, ax, keepdims=k), False),
    "ReduceLogSum": (lambda x, ax, k: F.log(F.sum(x, ax, keepdims=k)), False),
    "ReduceLogSumExp": (lambda x, ax, k: F.logsumexp(x, ax, keepdims=k), True),
}
for _op, (_body, _ext) in _REDUCTIONS.items():
    onnx_op(_op)(_reduction(_body, _ext))


@onnx_op("ArgMax", "ArgMin", numpy_only=True)
def _arg_extremum(n, x):
    axis = normalize_axis(n.attr("axis", 0), x.ndim)
    flip = np.flip(x, axis) if n.attr("select_last_index", 0) else x
    idx = (np.argmax if n.op_type == "ArgMax" else np.argmin)(flip, axis=axis)
    if n.attr("select_last_index", 0):
        idx = x.shape[axis] - 1 - idx
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, axis) if n.attr("keepdims", 1) else idx


# -- softmax family ----------------------------------------------------------------------------------------
def _softmax(fn):
    def translate(n, x):
        x = require_float(n, x)
        if n.opset >= 13:
            return fn(x, n.attr("axis", -1))
        axis = normalize_axis(n.attr("axis", 1), x.ndim)     # opset < 13: over the axes from `axis` on
        flat = F.reshape(x, (dims.product(x.shape[:axis]), dims.product(x.shape[axis:])))
        return F.reshape(fn(flat, -1), x.shape)
    return translate


onnx_op("Softmax")(_softmax(F.softmax))
onnx_op("LogSoftmax")(_softmax(F.log_softmax))


# -- normalisation -------------------------------------------------------------------------------------------
def _moments(x, axes):
    mu = F.mean(x, axes, keepdims=True)
    xc = x - mu
    return mu, xc, F.mean(xc * xc, axes, keepdims=True)


@onnx_op("LayerNormalization")
def _layer_norm(n, x, scale, bias=None):
    x = require_float(n, x)
    axis, eps = normalize_axis(n.attr("axis", -1), x.ndim), n.attr("epsilon", 1e-5)
    normalised = x.shape[axis:]
    if not n.wants(1) and not n.wants(2) and scale.shape == normalised and (bias is None or bias.shape == normalised):
        return F.layer_norm(x, scale, F.zeros_like(scale) if bias is None else bias, axis=axis, eps=eps)
    mu, xc, var = _moments(x, tuple(range(axis, x.ndim)))
    inv = F.rsqrt(var + _scalar(eps, var))
    y = xc * inv * scale
    return (y if bias is None else y + bias), mu, inv


@onnx_op("BatchNormalization")
def _batch_norm(n, x, scale, bias, mean, var):
    x, eps = require_float(n, x), n.attr("epsilon", 1e-5)
    if not n.attr("training_mode", 0):
        if n.wants(1) or n.wants(2):
            raise n.unsupported("the running-statistics outputs of an inference-mode BatchNormalization")
        return F.batch_norm(x, scale, bias, mean, var, axis=1, eps=eps, training=False)
    y, batch_mean, batch_var = F.batch_norm(x, scale, bias, axis=1, eps=eps, training=True, return_stats=True)
    momentum = n.attr("momentum", 0.9)
    m, one_m = _scalar(momentum, batch_mean), _scalar(1 - momentum, batch_mean)
    return y, mean * m + batch_mean * one_m, var * m + batch_var * one_m


@onnx_op("InstanceNormalization")
def _instance_norm(n, x, scale, bias):
    x = require_float(n, x)
    _, xc, var = _moments(x, tuple(range(2, x.ndim)))
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    y = xc * F.rsqrt(var + _scalar(n.attr("epsilon", 1e-5), var))
    return y * F.reshape(scale, per_channel) + F.reshape(bias, per_channel)


@onnx_op("Dropout")
def _dropout(n, x, ratio=None, training=None):
    training = training is not None and bool(n.known(training, "training_mode").reshape(-1)[0])
    if training and (ratio is None or float(n.known(ratio, "ratio").reshape(-1)[0]) != 0.0):
        raise n.unsupported("Dropout in training mode (a random mask) is not supported; export the model "
                            "in inference mode")
    mask = F.full(x.shape, 1, np.bool_) if n.wants(1) else None
    return F.identity(x), mask


# -- convolution and pooling ---------------------------------------------------------------------------------
def _spatial_attrs(n, x, kernel, dilation=None):
    """(strides, pads as (before, after) pairs) with auto_pad resolved on the static input size."""
    nsp = len(kernel)
    strides = tuple(n.attr("strides", [1] * nsp))
    dilation = dilation or (1,) * nsp
    auto_pad = n.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", "VALID"):
        flat = n.attr("pads", [0] * (2 * nsp)) if auto_pad == "NOTSET" else [0] * (2 * nsp)
        return strides, tuple(zip(flat[:nsp], flat[nsp:]))
    pads = []
    for size, k, s, d in zip(x.shape[2:], kernel, strides, dilation):
        if not isinstance(size, int):
            raise n.unsupported(f"auto_pad={auto_pad} on a symbolic spatial size {size!r}")
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        pads.append((total - small, small) if auto_pad == "SAME_LOWER" else (small, total - small))
    return strides, tuple(pads)


@onnx_op("Conv")
def _conv(n, x, w, b=None):
    kernel = tuple(w.shape[2:])
    dilation = tuple(n.attr("dilations", [1] * len(kernel)))
    strides, pads = _spatial_attrs(n, x, kernel, dilation)
    return F.conv(x, w, b, stride=strides, pad=pads, dilation=dilation, groups=n.attr("group", 1))


@onnx_op("ConvTranspose")
def _conv_transpose(n, x, w, b=None):
    kernel = tuple(w.shape[2:])
    nsp = len(kernel)
    if n.has_attr("output_shape") or n.attr("auto_pad", "NOTSET") != "NOTSET":
        raise n.unsupported("ConvTranspose with output_shape or auto_pad (give pads and output_padding)")
    flat = n.attr("pads", [0] * (2 * nsp))
    return F.conv_transpose(x, w, b, stride=tuple(n.attr("strides", [1] * nsp)),
                            pad=tuple(zip(flat[:nsp], flat[nsp:])), dilation=tuple(n.attr("dilations", [1] * nsp)),
                            groups=n.attr("group", 1), output_padding=tuple(n.attr("output_padding", [0] * nsp)))


def _pool_geometry(n, x):
    kernel = tuple(n.attr("kernel_shape"))
    if any(d != 1 for d in n.attr("dilations", [1] * len(kernel))):
        raise n.unsupported("pooling with dilations")
    strides, pads = _spatial_attrs(n, x, kernel)
    if n.attr("ceil_mode", 0):
        pads = tuple(_ceil_pad(n, size, k, s, p) for size, k, s, p in zip(x.shape[2:], kernel, strides, pads))
    return kernel, strides, pads


def _ceil_pad(n, size, k, s, pad):
    """Extra end padding that makes the floor output size equal ONNX's ceil_mode size (whose last
    window must start inside the input or its begin padding)."""
    if not isinstance(size, int):
        raise n.unsupported(f"ceil_mode on a symbolic spatial size {size!r}")
    before, after = pad
    span = size + before + after - k
    out = -(-span // s) + 1
    if (out - 1) * s >= size + before:
        out -= 1
    return before, after + max((out - 1) * s - span, 0)


@onnx_op("MaxPool")
def _max_pool(n, x):
    if n.wants(1):
        raise n.unsupported("the Indices output of MaxPool")
    kernel, strides, pads = _pool_geometry(n, require_float(n, x))
    return F.max_pool(x, kernel, strides, pads)


@onnx_op("AveragePool")
def _avg_pool(n, x):
    include = bool(n.attr("count_include_pad", 0))
    if include and n.attr("ceil_mode", 0):
        raise n.unsupported("AveragePool with both ceil_mode and count_include_pad")
    kernel, strides, pads = _pool_geometry(n, require_float(n, x))
    return F.avg_pool(x, kernel, strides, pads, count_include_pad=include)


@onnx_op("GlobalAveragePool")
def _global_avg_pool(n, x):
    return F.global_avg_pool(require_float(n, x))


@onnx_op("GlobalMaxPool")
def _global_max_pool(n, x):
    return F.max(x, tuple(range(2, x.ndim)), keepdims=True)



# -- more math, written with the ops above ------------------------------------------------------------------
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


@onnx_op("CumSum")
def _cumsum(n, x, axis):
    """A product with a triangular matrix of ones along the axis (its gradient is the transposed one)."""
    axis = normalize_axis(int(n.known(axis, "axis").reshape(-1)[0]), x.ndim)
    size = x.shape[axis]
    if not isinstance(size, int):
        raise n.unsupported(f"CumSum along an axis of symbolic size {size!r}")
    i, j = np.indices((size, size))
    reverse, exclusive = n.attr("reverse", 0), n.attr("exclusive", 0)
    mask = (i >= j if reverse else i <= j) & ((i != j) if exclusive else True)
    moved = F.swapaxes(x, axis, -1)
    return F.swapaxes(F.matmul(moved, mask.astype(x.dtype)), axis, -1)


@onnx_op("LpNormalization")
def _lp_normalization(n, x):
    x, p = require_float(n, x), n.attr("p", 2)
    axis = n.attr("axis", -1)
    if p not in (1, 2):
        raise n.unsupported(f"p={p} (only 1 and 2)")
    norm = F.sum(F.abs(x), axis, keepdims=True) if p == 1 else F.sqrt(F.sum(x * x, axis, keepdims=True))
    zero = F.equal(norm, _scalar(0, norm))
    return F.where(zero, _scalar(0, x), x / F.where(zero, _scalar(1, norm), norm))


@onnx_op("RMSNormalization")
def _rms_norm(n, x, scale):
    x = require_float(n, x)
    axes = tuple(range(normalize_axis(n.attr("axis", -1), x.ndim), x.ndim))
    return x * F.rsqrt(F.mean(x * x, axes, keepdims=True) + _scalar(n.attr("epsilon", 1e-5), x)) * scale


# -- losses (PyTorch exports nn.CrossEntropyLoss and nn.NLLLoss as these) -----------------------------------
def _nll(n, logp, target, weight):
    """-logp[n, target, ...] weighted per class, ignore_index skipped, reduced as ONNX says."""
    classes = logp.shape[1]
    if not isinstance(classes, int):
        raise n.unsupported(f"a symbolic number of classes {classes!r}")
    t = F.cast(target, np.int64)
    ignore = n.attr("ignore_index")
    valid = None if ignore is None else F.not_equal(t, np.int64(ignore))
    safe = t if valid is None else F.where(valid, t, np.int64(0))
    picked = -F.sum(logp * F.one_hot(safe, classes, axis=1, dtype=logp.dtype), 1)
    w = None if weight is None else F.take(weight, safe)
    if valid is not None:
        mask = F.cast(valid, logp.dtype)
        w = mask if w is None else w * mask
    loss = picked if w is None else picked * w
    reduction = n.attr("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return F.sum(loss)
    return F.mean(loss) if w is None else F.sum(loss) / F.sum(w)


@onnx_op("NegativeLogLikelihoodLoss")
def _nll_loss(n, logp, target, weight=None):
    return _nll(n, require_float(n, logp), target, weight)


@onnx_op("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(n, scores, labels, weights=None):
    logp = F.log_softmax(require_float(n, scores), axis=1)
    return _nll(n, logp, labels, weights), logp

