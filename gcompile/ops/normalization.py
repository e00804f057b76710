"""PyTorch's normalisation functions beyond batch and layer norm: group_norm, instance_norm,
rms_norm and normalize. Compositions of reductions and elementwise ops (biased variances, as
torch), so their gradients of every order come from those ops' rules."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from .basic import cast
from .elementwise import _promote, maximum, rsqrt
from .losses import _norm
from .reduce import mean
from .shape import reshape
from .shape_rules import normalize_axis

__all__ = ["group_norm", "instance_norm", "normalize", "rms_norm"]


def _float(x) -> Tensor:
    x = as_tensor(x)
    return x if x.dtype.kind == "f" else cast(x, np.float32)


def _affine(y: Tensor, weight, bias, channels, what: str) -> Tensor:
    """y * weight + bias with per-channel (axis 1) parameters of shape (C,)."""
    shape = (channels,) + (1,) * (y.ndim - 2)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        p = _promote(y, p)[1]
        if p.shape != (channels,):
            raise ShapeError(f"{what}: {name} must have shape ({channels},), got {format_shape(p.shape)} "
                             f"(at {user_location()})")
        y = y * reshape(p, shape) if name == "weight" else y + reshape(p, shape)
    return y


def _standardise(x: Tensor, axes, eps: float) -> Tensor:
    xc = x - mean(x, axes, keepdims=True)
    return xc * rsqrt(mean(xc * xc, axes, keepdims=True) + eps)


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """torch's group_norm of x (N, C, *): the channels split into num_groups groups, each group
    (with all its positions) standardised by its mean and biased variance, then weight (C,) and
    bias (C,) per channel."""
    x = _float(x)
    if x.ndim < 2 or not isinstance(x.shape[1], int) or num_groups < 1 or x.shape[1] % num_groups:
        raise ShapeError(f"group_norm: x {format_shape(x.shape)} needs (N, C, *) with C divisible by "
                         f"num_groups={num_groups} (at {user_location()})")
    n, c = x.shape[:2]
    grouped = reshape(x, (n, num_groups, dims.product((c // num_groups,) + x.shape[2:])))
    y = reshape(_standardise(grouped, (2,), eps), x.shape)
    return _affine(y, weight, bias, c, "group_norm")


def instance_norm(x, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """torch's instance_norm with the input's statistics (use_input_stats=True): each (N, C) plane of
    x (N, C, *spatial) standardised over its positions, then weight (C,) and bias (C,)."""
    x = _float(x)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm: x {format_shape(x.shape)} needs (N, C, *spatial) "
                         f"(at {user_location()})")
    y = _standardise(x, tuple(range(2, x.ndim)), eps)
    return _affine(y, weight, bias, x.shape[1], "instance_norm")


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None) -> Tensor:
    """torch's rms_norm: x / sqrt(mean(x^2) + eps) over the trailing `normalized_shape` axes, times
    weight (of that shape); eps defaults to the dtype's machine epsilon, as torch."""
    x = _float(x)
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    k = len(shape)
    if k > x.ndim or tuple(x.shape[x.ndim - k:]) != shape:
        raise ShapeError(f"rms_norm: normalized_shape {shape} is not the end of x's shape {format_shape(x.shape)} "
                         f"(at {user_location()})")
    eps = float(np.finfo(x.dtype).eps) if eps is None else eps
    y = x * rsqrt(mean(x * x, tuple(range(x.ndim - k, x.ndim)), keepdims=True) + eps)
    if weight is None:
        return y
    weight = _promote(y, weight)[1]
    if weight.shape != shape:
        raise ShapeError(f"rms_norm: weight must have shape {shape}, got {format_shape(weight.shape)} "
                         f"(at {user_location()})")
    return y * weight


def normalize(x, p: float = 2.0, axis: int = 1, eps: float = 1e-12) -> Tensor:
    """torch's normalize: x / max(||x||_p, eps) along `axis` (torch's dim); the norm's gradient is
    0 at a zero vector, as torch's."""
    x = _float(x)
    a = normalize_axis(axis, x.ndim)
    return x / maximum(_norm(x, p, a, keepdims=True), eps)
