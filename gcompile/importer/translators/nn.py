"""ONNX translators for neural-network layers: matrix products, softmax, normalisation,
convolution, pooling and losses.

Each translator writes the ONNX op's semantics with gcompile ops (gcompile.functions), so the
imported graph differentiates to any order through the existing VJP rules. Where ONNX allows
something gcompile does not express exactly (auto_pad on a symbolic size, ...), the translator
raises a clear UnsupportedError instead of guessing. Dropout is translated with the other random
draws (translators/random.py).
"""
from __future__ import annotations

import math

import numpy as np

from ... import functions as F
from ...ir import dims
from ...ops.conv import conv_batch_norm
from ...ops.indexing import slice_axes
from ...ops.linalg import _LETTERS as EINSUM_LETTERS
from ...ops.linalg import _canonical as canonical_einsum
from ...ops.shape_rules import normalize_axes, normalize_axis
from ..table import onnx_op, require_float, scalar_like
from .shape import diagonal_offsets, one_hot_mask


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
        y = y * scalar_like(alpha, y)
    if c is not None and beta != 0.0:
        y = y + (c if beta == 1.0 else c * scalar_like(beta, y))
    return y


@onnx_op("Det")
def _det(n, x):
    return F.det(require_float(n, x))


@onnx_op("Einsum")
def _einsum(n, *xs):
    """numpy's notation; an index repeated inside one term (a diagonal, "ii->i") becomes a fresh index
    tied to the first by an identity matrix operand, so the product differentiates as any other."""
    terms, out = canonical_einsum(n.attr("equation"), [x.ndim for x in xs])
    spare = iter(c for c in EINSUM_LETTERS if c not in "".join(terms) + out)
    written, ties, eyes = [], [], []
    for term, x in zip(terms, xs):
        fixed = ""
        for position, c in enumerate(term):
            if c in fixed:
                size = x.shape[position]
                if not isinstance(size, int):
                    raise n.unsupported(f"a diagonal over an axis of symbolic size {size!r}")
                fresh = next(spare)
                ties.append(c + fresh)
                eyes.append(F.cast(F.equal(diagonal_offsets(size, size), np.int64(0)), x.dtype))
                c = fresh
            fixed += c
        written.append(fixed)
    return F.einsum(",".join(written + ties) + "->" + out, *xs, *eyes)


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


def _hardmax(x, axis):
    """1 at the first maximum along the axis, 0 elsewhere (constant in x: no gradient flows)."""
    size = x.shape[axis]
    return F.one_hot(F.argmax(x, axis), size, axis=axis, dtype=x.dtype)


onnx_op("Softmax")(_softmax(F.softmax))
onnx_op("LogSoftmax")(_softmax(F.log_softmax))
onnx_op("Hardmax")(_softmax(_hardmax))


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
    inv = F.rsqrt(var + scalar_like(eps, var))
    y = xc * inv * scale
    return (y if bias is None else y + bias), mu, inv


@onnx_op("BatchNormalization")
def _batch_norm(n, x, scale, bias, mean, var):
    x, eps = require_float(n, x), n.attr("epsilon", 1e-5)
    if not n.attr("training_mode", 0):
        if n.wants(1) or n.wants(2):
            raise n.unsupported("the running-statistics outputs of an inference-mode BatchNormalization")
        conv = n.inliner.noted("conv", x) if n.only_reader(0) else None
        if conv is not None and all(np.dtype(p.dtype) == x.dtype and p.shape == (x.shape[1],)
                                    for p in (scale, bias, mean, var)):
            x, w, b, attrs = conv             # one Conv or ConvTranspose: docs/guide/importing.md
            return conv_batch_norm(x, w, b, scale, bias, mean, var, eps, **attrs)
        return F.batch_norm(x, scale, bias, mean, var, axis=1, eps=eps, training=False)
    y, batch_mean, batch_var = F.batch_norm(x, scale, bias, axis=1, eps=eps, training=True, return_stats=True)
    momentum = n.attr("momentum", 0.9)
    m, one_m = scalar_like(momentum, batch_mean), scalar_like(1 - momentum, batch_mean)
    return y, mean * m + batch_mean * one_m, var * m + batch_var * one_m


@onnx_op("InstanceNormalization")
def _instance_norm(n, x, scale, bias):
    x = require_float(n, x)
    _, xc, var = _moments(x, tuple(range(2, x.ndim)))
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    y = xc * F.rsqrt(var + scalar_like(n.attr("epsilon", 1e-5), var))
    return y * F.reshape(scale, per_channel) + F.reshape(bias, per_channel)


@onnx_op("GroupNormalization")
def _group_norm(n, x, scale, bias):
    """Moments over each group of channels (and the spatial axes); scale and bias per channel (opset 21;
    opset 18's per-group scale, deprecated, is refused)."""
    x, groups, eps = require_float(n, x), n.attr("num_groups"), n.attr("epsilon", 1e-5)
    batch, channels = x.shape[0], x.shape[1]
    if not isinstance(channels, int) or channels % groups:
        raise n.unsupported(f"{channels!r} channels in {groups} groups")
    grouped = F.reshape(x, (batch, groups, channels // groups) + tuple(x.shape[2:]))
    _, xc, var = _moments(grouped, tuple(range(2, grouped.ndim)))
    y = xc * F.rsqrt(var + scalar_like(eps, var))
    if scale.shape != (channels,) or bias.shape != (channels,):
        raise n.unsupported(f"scale {tuple(scale.shape)} and bias {tuple(bias.shape)} for {channels} channels "
                            "(one per channel, as opset 21 defines them)")
    per_channel = (channels,) + (1,) * (x.ndim - 2)
    return F.reshape(y, x.shape) * F.reshape(scale, per_channel) + F.reshape(bias, per_channel)


@onnx_op("LpNormalization")
def _lp_normalization(n, x):
    x, p = require_float(n, x), n.attr("p", 2)
    axis = n.attr("axis", -1)
    if p not in (1, 2):
        raise n.unsupported(f"p={p} (only 1 and 2)")
    norm = F.sum(F.abs(x), axis, keepdims=True) if p == 1 else F.sqrt(F.sum(x * x, axis, keepdims=True))
    zero = F.equal(norm, scalar_like(0, norm))
    return F.where(zero, scalar_like(0, x), x / F.where(zero, scalar_like(1, norm), norm))


@onnx_op("MeanVarianceNormalization")
def _mean_variance_normalization(n, x):
    """(x - E x) / (sqrt(E (x - E x)²) + 1e-9) over `axes` (ONNX's function adds the 1e-9 after the root)."""
    x = require_float(n, x)
    _, xc, var = _moments(x, normalize_axes(n.attr("axes", [0, 2, 3]), x.ndim))
    return xc / (F.sqrt(var) + scalar_like(1e-9, var))


@onnx_op("LRN")
def _lrn(n, x):
    """x / (bias + alpha/size · Σ x²)^beta, the sum over the channels c - ⌊(size-1)/2⌋ .. c + ⌈(size-1)/2⌉
    that exist: the squares padded with zeros along axis 1 and summed over `size` shifted slices."""
    x = require_float(n, x)
    size = n.attr("size")
    channels = x.shape[1]
    if not isinstance(channels, int):
        raise n.unsupported(f"LRN over a symbolic number of channels {channels!r}")
    before = (size - 1) // 2
    squares = F.pad(x * x, ((0, 0), (before, size - 1 - before)) + ((0, 0),) * (x.ndim - 2))
    total = F.add_n([slice_axes(squares, (1,), (i,), (i + channels,), (1,)) for i in range(size)]) if size > 1 \
        else squares
    alpha, beta, bias = n.attr("alpha", 1e-4), n.attr("beta", 0.75), n.attr("bias", 1.0)
    return x / F.power(total * scalar_like(alpha / size, x) + scalar_like(bias, x), scalar_like(beta, x))


@onnx_op("RMSNormalization")
def _rms_norm(n, x, scale):
    x = require_float(n, x)
    axes = tuple(range(normalize_axis(n.attr("axis", -1), x.ndim), x.ndim))
    return x * F.rsqrt(F.mean(x * x, axes, keepdims=True) + scalar_like(n.attr("epsilon", 1e-5), x)) * scale


# -- convolution (pooling: pooling.py) ------------------------------------------------------------------------
def spatial_attrs(n, x, kernel, dilation=None):
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
    strides, pads = spatial_attrs(n, x, kernel, dilation)
    attrs = dict(stride=strides, pad=pads, dilation=dilation, groups=n.attr("group", 1))
    y = F.conv(x, w, b, **attrs)
    n.inliner.note("conv", y, (x, w, b, attrs))        # for a BatchNormalization reading y alone
    return y


@onnx_op("ConvTranspose")
def _conv_transpose(n, x, w, b=None):
    kernel = tuple(w.shape[2:])
    nsp = len(kernel)
    strides, dilation = tuple(n.attr("strides", [1] * nsp)), tuple(n.attr("dilations", [1] * nsp))
    output_padding = tuple(n.attr("output_padding", [0] * nsp))
    auto_pad = n.attr("auto_pad", "NOTSET")
    if n.has_attr("output_shape") or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _transpose_pads(n, x, kernel, strides, dilation, output_padding, auto_pad)
    else:
        flat = n.attr("pads", [0] * (2 * nsp)) if auto_pad != "VALID" else [0] * (2 * nsp)
        pads = tuple(zip(flat[:nsp], flat[nsp:]))
    if all(p >= 0 for pair in pads for p in pair):
        attrs = dict(stride=strides, pad=pads, dilation=dilation, groups=n.attr("group", 1),
                     output_padding=output_padding)
        y = F.conv_transpose(x, w, b, **attrs)
        n.inliner.note("conv", y, (x, w, b, dict(attrs, transpose=True)))   # as Conv's
        return y
    # a negative pad (an output_shape past the last input's reach) adds positions no input reaches
    y = F.conv_transpose(x, w, None, stride=strides, pad=tuple((max(p, 0), max(q, 0)) for p, q in pads),
                         dilation=dilation, groups=n.attr("group", 1), output_padding=output_padding)
    y = F.pad(y, ((0, 0), (0, 0)) + tuple((max(-p, 0), max(-q, 0)) for p, q in pads))
    return y if b is None else y + F.reshape(b, (-1,) + (1,) * nsp)


def _transpose_pads(n, x, kernel, strides, dilation, output_padding, auto_pad) -> tuple:
    """The pads that make ConvTranspose's output output_shape (default: input size × stride, for auto_pad
    SAME_*): the total split in two, the odd one at the end with SAME_UPPER, else at the start; negative
    where output_shape asks for more than the last input reaches."""
    spatial = x.shape[2:]
    if not dims.is_static(spatial):
        raise n.unsupported(f"output_shape or auto_pad {auto_pad} on a symbolic spatial size {tuple(spatial)}")
    target = n.attr("output_shape") or [size * s for size, s in zip(spatial, strides)]
    target = list(target)[-len(kernel):]                   # the spatial sizes, also when N and C are given
    pads = []
    for size, k, s, d, extra, want in zip(spatial, kernel, strides, dilation, output_padding, target):
        total = s * (size - 1) + extra + (k - 1) * d + 1 - want
        half = total // 2
        pads.append((half, total - half) if auto_pad == "SAME_UPPER" else (total - half, half))
    return tuple(pads)


# -- losses (PyTorch exports nn.CrossEntropyLoss and nn.NLLLoss as these) -----------------------------------
def _nll(n, logp, target, weight):
    """-logp[n, target, ...] weighted per class, ignore_index skipped, reduced as ONNX says."""
    if logp.ndim < 2:
        raise n.unsupported(f"scores of rank {logp.ndim} (it needs a class axis 1)")
    classes = logp.shape[1]
    if not isinstance(classes, int):
        raise n.unsupported(f"a symbolic number of classes {classes!r}")
    t = F.cast(target, np.int64)
    ignore = n.attr("ignore_index")
    valid = None if ignore is None else F.not_equal(t, np.int64(ignore))
    safe = t if valid is None else F.where(valid, t, np.int64(0))
    picked = -F.sum(F.where(one_hot_mask(safe, classes, 1), logp, np.zeros((), logp.dtype)), 1)
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
