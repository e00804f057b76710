"""Linear quantization: ONNX's QuantizeLinear and DequantizeLinear, and fake quantization.

All three are written with existing ops (division, rounding, clipping, casts), so they lower to
plain ai.onnx arithmetic every runtime runs, batch and differentiate through those ops' rules:
- dequantize_linear is differentiable in its scale (and in nothing else: its other operands are
  integers or 8- and 4-bit values);
- quantize_linear gives integers (or an 8- or 4-bit float format), which carry no gradient;
- fake_quantize, a quantization followed by its dequantization, has PyTorch's straight-through
  gradient (torch's learnable fake quantization, _fake_quantize_learnable_per_tensor_affine): in
  x the cotangent where the value lands inside the quantized range and 0 outside it; in the scale,
  round(x/s) - x/s inside and q_min - z or q_max - z outside. The importer reads a QuantizeLinear
  whose result only a DequantizeLinear of the same scale reads as one fake_quantize.

Scales and zero points are per tensor (0-d or one element), per axis (1-D along `axis`) or per block
(`block_size` elements along `axis` share one, ONNX's blocked quantization).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.tensor import Tensor, as_tensor
from ..ir import dims as dim_rules
from ..ir import dtypes
from .basic import cast, stop_gradient
from .elementwise import clip, round, where
from .indexing import take
from .nonfinite import isnan
from .shape import reshape
from .shape_rules import normalize_axis

__all__ = ["dequantize_linear", "fake_quantize", "quantize_linear"]


def _spread(p: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
    """A scale or zero point broadcastable against x: per tensor as it is, per axis along `axis`, per
    block repeated block_size times along it."""
    if p.ndim == 0 or int(dim_rules.product(p.shape)) == 1 and not block_size:
        return reshape(p, ())
    axis = normalize_axis(axis, x.ndim)
    if block_size:
        if p.ndim != x.ndim:
            raise ShapeError(f"a blocked scale or zero point has x's rank ({x.ndim}), got shape {p.shape}")
        size = x.shape[axis]
        if isinstance(size, str):
            raise ShapeError(f"blocked quantization along axis {axis} of symbolic size {size!r}")
        blocks = (np.arange(size) // block_size).astype(np.int64)
        if p.shape[axis] != -(-size // block_size):
            raise ShapeError(f"{p.shape[axis]} blocks of {block_size} along axis {axis}, whose size is {size}")
        return take(p, blocks, axis)
    if p.ndim != 1:
        raise ShapeError(f"a per-axis scale or zero point is 1-D, got shape {p.shape}")
    return reshape(p, tuple(p.shape[0] if i == axis else 1 for i in range(x.ndim)))


def _quantized_dtype(zero_point, dtype) -> np.dtype:
    if zero_point is not None:
        return as_tensor(zero_point).dtype
    return dtypes.as_dtype(dtype or "uint8")


def _rounded(u: Tensor, zero_point, dtype: np.dtype, straight_through: bool) -> Tensor:
    """u = x / scale quantized and mapped back: round(u) + z clipped to the integer range, minus z
    (z = 0 and a saturating cast for the float formats). With straight_through, the rounding passes
    the cotangent unchanged (its value is exact: u + (r - u) is r for every finite u)."""
    if not dtypes.is_integer(dtype):
        low, high = dtypes.limits(dtype)
        u = clip(u, low, high)
        r = cast(cast(u, dtype), u.dtype)
        return u + stop_gradient(r - u) if straight_through else r
    z = cast(zero_point, u.dtype) if zero_point is not None else None
    low, high = dtypes.limits(dtype)
    lo, hi = (low, high) if z is None else (low - z, high - z)
    u = where(isnan(u), lo, clip(u, lo - 1, hi + 1))      # NaN quantizes to q_min, as ONNX's reference
    r = round(u)
    r = u + stop_gradient(r - u) if straight_through else r
    return clip(r, lo, hi)


def quantize_linear(x, scale, zero_point=None, axis: int = 1, block_size: int = 0, dtype=None,
                    saturate: bool = True) -> Tensor:
    """ONNX's QuantizeLinear: round(x / scale) + zero_point, rounding half to even and saturating to
    the range of the zero point's dtype (`dtype`, default uint8, where none is given); to a float8 or
    float4 format, x / scale cast to it (saturating unless saturate=False). No gradient."""
    x, scale = as_tensor(x), as_tensor(scale)
    dtype = _quantized_dtype(zero_point, dtype)
    u = x / _spread(scale, x, axis, block_size)
    if not dtypes.is_integer(dtype):
        if dtype == dtypes.FLOAT4 and zero_point is not None:
            u = u + cast(_spread(as_tensor(zero_point), x, axis, block_size), u.dtype)
        return cast(u, dtype, saturate)
    z = None if zero_point is None else _spread(as_tensor(zero_point), x, axis, block_size)
    v = _rounded(u, z, dtype, straight_through=False)
    return cast(v if z is None else v + cast(z, v.dtype), dtype)


def dequantize_linear(q, scale, zero_point=None, axis: int = 1, block_size: int = 0, dtype=None) -> Tensor:
    """ONNX's DequantizeLinear: (q - zero_point) · scale, computed in float32 and given in the scale's
    dtype (or `dtype`). Differentiable in the scale."""
    q, scale = as_tensor(q), as_tensor(scale)
    value = cast(q, np.float32)
    if zero_point is not None and dtypes.is_integer(q.dtype):
        value = value - cast(_spread(as_tensor(zero_point), q, axis, block_size), np.float32)
    out = value * _spread(scale, q, axis, block_size)
    return cast(out, dtypes.as_dtype(dtype) if dtype is not None else scale.dtype)


def fake_quantize(x, scale, zero_point=None, axis: int = 1, block_size: int = 0, dtype=None) -> Tensor:
    """dequantize_linear(quantize_linear(x, ...), ...) in one, with PyTorch's straight-through gradient
    (see the module's doc): the value a quantized model computes, differentiable in x and the scale."""
    x, scale = as_tensor(x), as_tensor(scale)
    dtype = _quantized_dtype(zero_point, dtype)
    s = _spread(scale, x, axis, block_size)
    z = None if zero_point is None or not dtypes.is_integer(dtype) else \
        _spread(as_tensor(zero_point), x, axis, block_size)
    return _rounded(x / s, z, dtype, straight_through=True) * s
