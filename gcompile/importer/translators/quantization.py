"""ONNX translators for quantized models: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, for the 8- and 16-bit integer types
gcompile traces (int8, uint8, int16; the 2-, 4- and 8-bit float types and unsigned 16-bit are refused
by name).

Quantizing divides by the scale, rounds half to even and saturates to the type's range; the result is
an integer (no gradient), while DequantizeLinear's float result differentiates in its scale, so a
quantized model's float path, and what follows it, differentiates. Integer products and convolutions
run in int32 (a convolution as its windows, strided slices, contracted with the weight by Einsum), as
ONNX defines them; QLinearMatMul and QLinearConv requantize that exact int32 result.
"""
from __future__ import annotations

import math

import numpy as np

from ... import functions as F
from ...ir import dims
from ...ops.shape_rules import normalize_axis
from ...ops.windows import pool_geometry, windows
from ..table import np_dtype, onnx_op, require_float
from .nn import spatial_attrs

_RANGES = {np.dtype(t): (np.iinfo(t).min, np.iinfo(t).max) for t in (np.uint8, np.int8, np.int16)}


def _integer_type(n, dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in _RANGES:
        raise n.unsupported(f"{n.op_type} to or from {dtype.name} (supported: uint8, int8, int16)")
    return dtype


def _along(n, value, x):
    """A scale or zero point broadcastable to x: one value, one per entry of the node's axis, or
    (block_size) one per block of that many entries along it."""
    if value.ndim == 0 or dims.product(value.shape) == 1:
        return F.reshape(value, ())
    axis, block = normalize_axis(n.attr("axis", 1), x.ndim), n.attr("block_size", 0)
    if not block:
        if value.ndim != 1:
            raise n.unsupported(f"a scale or zero point of shape {tuple(value.shape)} without block_size")
        return F.reshape(value, tuple(-1 if a == axis else 1 for a in range(x.ndim)))
    if value.ndim != x.ndim:
        raise n.unsupported(f"a blocked scale or zero point of shape {tuple(value.shape)} for x {tuple(x.shape)}")
    size = x.shape[axis]
    spread = F.repeat_interleave(value, block, axis)
    return spread if spread.shape[axis] == size else F.getitem(
        spread, tuple(slice(0, size) if a == axis else slice(None) for a in range(x.ndim)))


def _saturated(n, q, zero_point, dtype):
    """round(q) + zero point, clipped to dtype's range, in dtype."""
    low, high = _RANGES[dtype]
    q = F.round(q)
    if zero_point is not None:
        q = q + F.cast(zero_point, q.dtype)
    return F.cast(F.clip(q, float(low), float(high)), dtype)


@onnx_op("QuantizeLinear")
def _quantize_linear(n, x, scale, zero_point=None):
    x = require_float(n, x)
    if zero_point is not None:
        dtype = _integer_type(n, zero_point.dtype)
    else:
        dtype = _integer_type(n, np_dtype(n.attr("output_dtype", 2), n.describe()))     # default uint8
    precision = n.attr("precision")
    work = np.dtype(x.dtype) if precision is None else np_dtype(precision, n.describe())
    q = F.cast(x, work) / F.cast(_along(n, scale, x), work)
    return _saturated(n, q, None if zero_point is None else _along(n, zero_point, x), dtype)


@onnx_op("DequantizeLinear")
def _dequantize_linear(n, x, scale, zero_point=None):
    """(x - zero point) · scale, computed in float32 at least (as ONNX's reference does), in the scale's
    dtype or output_dtype."""
    _integer_type(n, x.dtype)
    out = np_dtype(n.attr("output_dtype"), n.describe()) if n.attr("output_dtype") else np.dtype(scale.dtype)
    work = np.promote_types(np.dtype(scale.dtype), np.float32)
    shifted = F.cast(x, work)
    if zero_point is not None:
        shifted = shifted - F.cast(_along(n, zero_point, x), work)
    return F.cast(shifted * F.cast(_along(n, scale, x), work), out)


@onnx_op("DynamicQuantizeLinear")
def _dynamic_quantize_linear(n, x):
    """uint8 quantization over the range of x widened to hold 0: scale (max - min) / 255, the zero point
    where 0 lands; returns y, the scale and the zero point."""
    x = require_float(n, x)
    top = F.maximum(F.max(x), np.zeros((), x.dtype))
    bottom = F.minimum(F.min(x), np.zeros((), x.dtype))
    span = top - bottom
    scale = F.where(F.equal(span, 0), np.ones((), x.dtype), span) / np.asarray(255, x.dtype)
    zero = F.round(F.clip(-bottom / scale, 0.0, 255.0))
    y = F.cast(F.clip(F.round(x / scale) + zero, 0.0, 255.0), np.uint8)
    return y, scale, F.cast(zero, np.uint8)


def _centred(n, x, zero_point, axis=None):
    """x - zero point in int32 (a zero point per row of A or column of B along `axis` where given)."""
    _integer_type(n, x.dtype)
    x = F.cast(x, np.int32)
    if zero_point is None:
        return x
    zero_point = F.cast(zero_point, np.int32)
    if axis is not None and zero_point.ndim == 1 and dims.product(zero_point.shape) > 1:
        zero_point = F.reshape(zero_point, tuple(-1 if a == axis % x.ndim else 1 for a in range(x.ndim)))
    return x - zero_point


@onnx_op("MatMulInteger")
def _matmul_integer(n, a, b, a_zero_point=None, b_zero_point=None):
    return F.matmul(_centred(n, a, a_zero_point, -2), _centred(n, b, b_zero_point, -1))


def _requantized(n, exact, scale, y_scale, y_zero_point, like):
    """An int32 product or convolution times scale / y_scale (computed in the scales' dtype, the product
    in float64, as ONNX's reference does), rounded, plus the zero point, saturated."""
    ratio = F.cast(scale / y_scale, np.float64)
    dtype = _integer_type(n, (y_zero_point if y_zero_point is not None else like).dtype)
    return _saturated(n, F.cast(exact, np.float64) * ratio, y_zero_point, dtype)


@onnx_op("QLinearMatMul")
def _qlinear_matmul(n, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
    exact = F.matmul(_centred(n, a, a_zero_point, -2), _centred(n, b, b_zero_point, -1))
    scale = F.reshape(a_scale, ()) * F.reshape(b_scale, (-1,) if dims.product(b_scale.shape) > 1 else ())
    return _requantized(n, exact, scale, F.reshape(y_scale, ()), y_zero_point, a)


def _integer_conv(n, x, w):
    """The int32 convolution of a Conv node's attributes: the padded input's windows (N, C, *out, taps)
    contracted with the weight (M, C/group, *kernel) per group."""
    kernel = tuple(w.shape[2:])
    nsp = len(kernel)
    dilation = tuple(n.attr("dilations", [1] * nsp))
    strides, pads = spatial_attrs(n, x, kernel, dilation)
    groups = n.attr("group", 1)
    batch, channels = x.shape[:2]
    if not dims.is_static(x.shape[1:]) or channels % groups:
        raise n.unsupported(f"an input of shape {tuple(x.shape)} in {groups} groups (static sizes but the batch)")
    out, _ = pool_geometry(x.shape[2:], kernel, strides, pads, dilation, False)
    padded = F.pad(x, ((0, 0), (0, 0)) + tuple(pads)) if any(p for pair in pads for p in pair) else x
    cols = F.reshape(windows(padded, kernel, strides, dilation, out),
                     (batch, groups, channels // groups, math.prod(out), math.prod(kernel)))
    weights = F.reshape(w, (groups, w.shape[0] // groups, channels // groups, math.prod(kernel)))
    y = F.einsum("ngclt,gmct->ngml", cols, weights)
    return F.reshape(y, (batch, w.shape[0]) + tuple(out))


@onnx_op("ConvInteger")
def _conv_integer(n, x, w, x_zero_point=None, w_zero_point=None):
    return _integer_conv(n, _centred(n, x, x_zero_point), _centred(n, w, w_zero_point, 0))


@onnx_op("QLinearConv")
def _qlinear_conv(n, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, b=None):
    exact = _integer_conv(n, _centred(n, x, x_zero_point), _centred(n, w, w_zero_point, 0))
    if b is not None:
        exact = exact + F.reshape(F.cast(b, np.int32), (-1,) + (1,) * (x.ndim - 2))
    per_channel = F.reshape(w_scale, (-1,) + (1,) * (x.ndim - 2)) if dims.product(w_scale.shape) > 1 else \
        F.reshape(w_scale, ())
    return _requantized(n, exact, F.reshape(x_scale, ()) * per_channel, F.reshape(y_scale, ()), y_zero_point, x)
