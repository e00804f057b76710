"""ONNX translators for quantized models: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and
the integer products MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

A quantized model's float path differentiates: DequantizeLinear in its scale (ops/quantize.py), and a
QuantizeLinear read by a DequantizeLinear with the same scale and zero point (the pair PyTorch's
exporters write for fake quantization) as one fake_quantize, with PyTorch's straight-through
gradient. The QuantizeLinear translator notes what it quantized in the inliner's notes; the
DequantizeLinear translator looks its operand up there.

The integer products are exact: differences of 8-bit values multiplied in int32 (MatMul), or, for
the convolutions, which ONNX Runtime's CPU computes in floats only, in float32 on operands split into
4-bit halves where a sum of products could pass 2**24 (float32's exact integers), and past what even
the halves keep exact, as the input's windows (strided slices) contracted with the weight by an
int32 Einsum.
"""
from __future__ import annotations

import math

import numpy as np

from ... import functions as F
from ...frontend.tensor import Tensor, as_tensor
from ...ir import dims, dtypes
from ...ops.windows import pool_geometry, windows
from ..table import TRANSLATORS, np_dtype, onnx_op, require_float
from .nn import spatial_attrs

_EXACT = 2 ** 24       # float32 holds every integer up to this


def _params(n) -> dict:
    return dict(axis=n.attr("axis", 1), block_size=n.attr("block_size", 0))


def _same(a, b) -> bool:
    """The same operand: one Tensor, or equal known arrays (or both absent)."""
    if a is None or b is None:
        return a is b
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.ref == b.ref and a.graph is b.graph
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


@onnx_op("QuantizeLinear")
def _quantize_linear(n, x, scale, zero_point=None):
    dtype = np_dtype(n.attr("output_dtype"), f"{n.describe()} output_dtype") if n.attr("output_dtype") else None
    if isinstance(zero_point, np.ndarray) and zero_point.dtype in dtypes.FLOAT8 and np.any(zero_point != 0):
        raise n.unsupported("a float8 zero point is 0 in ONNX (its value is not added)")
    if n.attr("precision"):        # the dtype the division is computed in (opset 25)
        work = np_dtype(n.attr("precision"), f"{n.describe()} precision")
        x, scale = F.cast(x, work), F.cast(scale, work)
    q = F.quantize_linear(x, scale, zero_point, dtype=dtype, saturate=bool(n.attr("saturate", 1)), **_params(n))
    if isinstance(q, Tensor):
        n.inliner.note("quantized", q, (x, scale, zero_point, _params(n)))
    return q


@onnx_op("DequantizeLinear")
def _dequantize_linear(n, q, scale, zero_point=None):
    dtype = np_dtype(n.attr("output_dtype"), f"{n.describe()} output_dtype") if n.attr("output_dtype") else None
    source = n.inliner.noted("quantized", q)
    if source is not None:
        x, q_scale, q_zero, params = source
        if _same(scale, q_scale) and _same(zero_point, q_zero) and params == _params(n):
            y = F.fake_quantize(x, scale, zero_point, dtype=q.dtype, **params)
            return F.cast(y, dtype if dtype is not None else as_tensor(scale).dtype)
    return F.dequantize_linear(q, scale, zero_point, dtype=dtype, **_params(n))


@onnx_op("DynamicQuantizeLinear")
def _dynamic_quantize_linear(n, x):
    """uint8 with the scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255], in x's float
    dtype (float32 in ONNX; float64 for gradient checks)."""
    x = require_float(n, x)
    zero, one = np.zeros((), x.dtype), np.ones((), x.dtype)
    top, bottom = F.maximum(F.max(x), zero), F.minimum(F.min(x), zero)
    span = top - bottom
    scale = F.where(F.equal(span, zero), one, span) / np.asarray(255, x.dtype)
    zero_point = F.cast(F.round(F.clip(-bottom / scale, 0, 255)), np.uint8)
    return F.quantize_linear(x, scale, zero_point), scale, zero_point


def _centered(q, zero_point, row_axis: int | None = None):
    """q - zero_point in int32; a 1-D zero point of the left MatMul operand is one per row."""
    value = F.cast(q, np.int32)
    if zero_point is None:
        return value
    z = F.cast(as_tensor(zero_point), np.int32)
    if row_axis is not None and z.ndim == 1:
        z = F.reshape(z, (z.shape[0], 1))
    return value - z


@onnx_op("MatMulInteger")
def _matmul_integer(n, a, b, a_zero_point=None, b_zero_point=None):
    return F.matmul(_centered(a, a_zero_point, row_axis=-2), _centered(b, b_zero_point))


def _kernel_zero_point(w_zero_point, w):
    """A per-output-channel zero point of a convolution kernel, broadcast against it."""
    if w_zero_point is None:
        return None
    z = as_tensor(w_zero_point)
    return F.reshape(z, (z.shape[0],) + (1,) * (w.ndim - 1)) if z.ndim == 1 else z


def _conv_exact(n, x, w):
    """The integer convolution of int32 x and w (int32 result), on float32 kernels: whole, where every
    sum of products stays below 2**24, else with both split into 4-bit halves (four convolutions)."""
    terms = int(np.prod(w.shape[1:]))
    bound = 255 * 255                  # |x - x_zero_point| and |w - w_zero_point| of 8-bit operands
    conv = TRANSLATORS["Conv"].fn
    if terms * bound < _EXACT:
        return F.cast(conv(n, F.cast(x, np.float32), F.cast(w, np.float32)), np.int32)
    if terms * 16 * 16 >= _EXACT:
        return _windowed_conv(n, x, w)
    sixteen = np.int32(16)
    x_high, w_high = F.floor_divide(x, sixteen), F.floor_divide(w, sixteen)
    x_low, w_low = x - x_high * sixteen, w - w_high * sixteen
    total = None
    for xs, ws, weight in ((x_high, w_high, 256), (x_high, w_low, 16), (x_low, w_high, 16), (x_low, w_low, 1)):
        part = F.cast(conv(n, F.cast(xs, np.float32), F.cast(ws, np.float32)), np.int32) * np.int32(weight)
        total = part if total is None else total + part
    return total


def _windowed_conv(n, x, w):
    """The int32 convolution as the padded input's windows (N, C, *out, taps) contracted with the weight
    (M, C/group, *kernel) per group by an int32 Einsum: exact at any size, but slower than a Conv and
    for static sizes but the batch only."""
    kernel = tuple(w.shape[2:])
    dilation = tuple(n.attr("dilations", [1] * len(kernel)))
    strides, pads = spatial_attrs(n, x, kernel, dilation)
    groups = n.attr("group", 1)
    batch, channels = x.shape[:2]
    if not dims.is_static(x.shape[1:]) or channels % groups:
        raise n.unsupported(f"an integer convolution summing more than 2**16 products per output on an input of "
                            f"shape {tuple(x.shape)} in {groups} groups (static sizes but the batch)")
    out, _, _ = pool_geometry(x.shape[2:], kernel, strides, pads, dilation, False)
    padded = F.pad(x, ((0, 0), (0, 0)) + tuple(pads)) if any(p for pair in pads for p in pair) else x
    cols = F.reshape(windows(padded, kernel, strides, dilation, out),
                     (batch, groups, channels // groups, math.prod(out), math.prod(kernel)))
    weights = F.reshape(w, (groups, w.shape[0] // groups, channels // groups, math.prod(kernel)))
    y = F.einsum("ngclt,gmct->ngml", cols, weights)
    return F.reshape(y, (batch, w.shape[0]) + tuple(out))


@onnx_op("ConvInteger")
def _conv_integer(n, x, w, x_zero_point=None, w_zero_point=None):
    return _conv_exact(n, _centered(x, x_zero_point), _centered(w, _kernel_zero_point(w_zero_point, w)))


def _requantize(acc, factor, y_zero_point, out_dtype):
    """An int32 accumulator times factor (in float64, as ONNX's reference), plus the zero point,
    rounded half to even and saturated to the output dtype."""
    value = F.cast(acc, np.float64) * F.cast(factor, np.float64)
    if y_zero_point is not None:
        value = value + F.cast(as_tensor(y_zero_point), np.float64)
    low, high = dtypes.limits(out_dtype)
    return F.cast(F.clip(F.round(value), low, high), out_dtype)


@onnx_op("QLinearMatMul")
def _qlinear_matmul(n, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
    acc = F.matmul(_centered(a, a_zero_point, row_axis=-2), _centered(b, b_zero_point))
    factor = as_tensor(a_scale) * as_tensor(b_scale) / as_tensor(y_scale)
    out = as_tensor(y_zero_point).dtype if y_zero_point is not None else as_tensor(a).dtype
    return _requantize(acc, factor, y_zero_point, out)


@onnx_op("QLinearConv")
def _qlinear_conv(n, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, b=None):
    acc = _conv_exact(n, _centered(x, x_zero_point), _centered(w, _kernel_zero_point(w_zero_point, w)))
    if b is not None:
        acc = acc + F.reshape(F.cast(as_tensor(b), np.int32), (-1,) + (1,) * (acc.ndim - 2))
    w_scale = as_tensor(w_scale)
    if w_scale.ndim == 1 and w_scale.shape[0] != 1:
        w_scale = F.reshape(w_scale, (-1,) + (1,) * (acc.ndim - 2))
    factor = as_tensor(x_scale) * w_scale / as_tensor(y_scale)
    out = as_tensor(y_zero_point).dtype if y_zero_point is not None else as_tensor(x).dtype
    return _requantize(acc, factor, y_zero_point, out)
