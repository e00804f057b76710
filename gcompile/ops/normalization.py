"""PyTorch's normalisation functions beyond batch and layer norm: group_norm, instance_norm,
rms_norm, normalize (biased variances, as torch) and local_response_norm.

group_norm (and instance_norm, one group per channel) is a primitive op with a closed-form VJP,
as training-mode batch_norm: written out, its backward was some fourteen passes over the
activation, the closed form is five (a product, two sums, and x's gradient as one affine map of
gy and x per channel). Its VJP is written with gcompile ops, so it differentiates again. The
others are compositions of reductions and elementwise ops, whose gradients of every order come
from those ops' rules."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply_n, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import defop
from .basic import add_n, cast
from .elementwise import _promote, maximum, power, rsqrt
from .indexing import pad, slice_axes
from .nn import _plus
from .reduce import count, mean
from .reduce import sum as reduce_sum
from .shape import broadcast_to, reshape
from .shape_rules import normalize_axis, require_float, same_dtype
from .statistics import vector_norm

__all__ = ["group_norm", "instance_norm", "local_response_norm", "normalize", "rms_norm"]


def _float(x) -> Tensor:
    x = as_tensor(x)
    return x if is_float(x.dtype) else cast(x, np.float32)


def _channel_params(x: Tensor, weight, bias, what: str) -> tuple[Tensor, Tensor]:
    """weight and bias (C,) in x's dtype: ones and zeros where not given."""
    channels = x.shape[1]
    params = []
    for name, p, default in (("weight", weight, 1), ("bias", bias, 0)):
        p = as_tensor(np.full(channels, default, x.dtype)) if p is None else _promote(x, p)[1]
        if p.shape != (channels,):
            raise ShapeError(f"{what}: {name} must have shape ({channels},), got {format_shape(p.shape)} "
                             f"(at {user_location()})")
        params.append(p)
    return params[0], params[1]


def group_norm(x, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """torch's group_norm of x (N, C, *): the channels split into num_groups groups, each group
    (with all its positions) standardised by its mean and biased variance, then weight (C,) and
    bias (C,) per channel."""
    x = _float(x)
    if x.ndim < 2 or not isinstance(x.shape[1], int) or num_groups < 1 or x.shape[1] % num_groups:
        raise ShapeError(f"group_norm: x {format_shape(x.shape)} needs (N, C, *) with C divisible by "
                         f"num_groups={num_groups} (at {user_location()})")
    weight, bias = _channel_params(x, weight, bias, "group_norm")
    return apply_n("group_norm", [x, weight, bias], groups=num_groups, eps=float(eps))[0]


def instance_norm(x, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """torch's instance_norm with the input's statistics (use_input_stats=True): each (N, C) plane of
    x (N, C, *spatial) standardised over its positions, then weight (C,) and bias (C,)."""
    x = _float(x)
    if x.ndim < 3 or not isinstance(x.shape[1], int):
        raise ShapeError(f"instance_norm: x {format_shape(x.shape)} needs (N, C, *spatial) "
                         f"(at {user_location()})")
    weight, bias = _channel_params(x, weight, bias, "instance_norm")
    return apply_n("group_norm", [x, weight, bias], groups=x.shape[1], eps=float(eps))[0]


# The group_norm op: outputs y, and each (image, group)'s mean and 1/sqrt(var + eps), shape (N, G),
# which the backward reads (with x) instead of recomputing them.
def _group_norm_infer(types, groups, eps):
    x, weight, _ = types
    require_float(x)
    same_dtype(types)
    if weight.shape != (x.shape[1],) or x.shape[1] % groups:
        raise ShapeError(f"group_norm: weight and bias ({x.shape[1]},) with C divisible by groups={groups}, "
                         f"got x {format_shape(x.shape)}, weight {format_shape(weight.shape)}")
    stat = tensor_type(x.dtype, (x.shape[0], groups))
    return [x, stat, stat]


def _group_norm_reference(x, weight, bias, groups, eps):
    n, c = x.shape[:2]
    size = c // groups * int(np.prod(x.shape[2:]))
    grouped = x.reshape(n, groups, size)                   # not -1, which is ambiguous at n = 0
    # an empty group's statistics are 0 (its mean and variance divide a sum of nothing by 1), as
    # the lowering's ReduceMean gives them: its y is empty and its parameters' gradients 0
    mu = grouped.sum(2) / max(size, 1)
    var = ((grouped - mu[:, :, None]) ** 2).sum(2) / max(size, 1)
    rstd = 1 / np.sqrt(var + eps)
    y = ((grouped - mu[:, :, None]) * rstd[:, :, None]).reshape(x.shape)
    per_channel = (c,) + (1,) * (x.ndim - 2)
    return y * weight.reshape(per_channel) + bias.reshape(per_channel), mu, rstd


def _lower_group_norm(ctx, names, node):
    """The statistics from the centred groups (two ReduceMeans: exact where the mean is large
    against the spread), then y = xc · (rstd · weight) + bias, one product and one sum with
    per-(image, channel) factors. (ONNX's LayerNormalization gives the statistics in one kernel,
    but in float32 for float64 inputs and not for empty groups.)"""
    x, weight, bias = names
    a, t = node.attrs, node.outputs[0]
    n, c, groups = t.shape[0], t.shape[1], a["groups"]
    size = dims.product((c // groups,) + tuple(t.shape[2:]))
    grouped = ctx.emit("Reshape", [x, ctx.shape_tensor((n, groups, size))], allowzero=1)
    axis = ctx.int64s([2])
    mu = ctx.emit("ReduceMean", [grouped, axis], keepdims=1)
    xc = ctx.emit("Sub", [grouped, mu])
    var = ctx.emit("ReduceMean", [ctx.emit("Mul", [xc, xc]), axis], keepdims=1)
    eps = ctx.const(np.asarray(a["eps"], t.dtype))
    rstd = ctx.emit("Reciprocal", [ctx.emit("Sqrt", [ctx.emit("Add", [var, eps])])])
    channel = [c] + [1] * (len(t.shape) - 2)
    scale = ctx.emit("Mul", [rstd, ctx.emit("Reshape", [weight, ctx.int64s([groups, c // groups])])])
    scale = ctx.emit("Reshape", [scale, ctx.shape_tensor((n, *channel))], allowzero=1)
    y = ctx.emit("Mul", [ctx.emit("Reshape", [xc, ctx.shape_tensor(t.shape)], allowzero=1), scale])
    y = ctx.emit("Add", [y, ctx.emit("Reshape", [bias, ctx.int64s(channel)])])
    stats = ctx.shape_tensor((n, groups))
    return [y, ctx.emit("Reshape", [mu, stats], allowzero=1), ctx.emit("Reshape", [rstd, stats], allowzero=1)]


def _group_norm_vjp(g, ins, outs, groups, eps):
    """Per image n and group, with r = rstd, K elements per group, s1 = Σ gy and s2 = Σ gy·x per
    channel over the positions: Σ gy·x̂ = r·(s2 - mean·s1) per channel gives dweight, Σ s1 dbias,
    and dx = r·w·gy + k·x + b with k and b per group (m1, m2: the group means of w·gy and
    w·gy·x̂) — x's gradient is one affine map of gy and x per channel, as torch's kernel.
    Cotangents of the returned statistics add gmean/K to b and the rstd's derivative
    -r³·(x - mean)/K, times grstd, to k and b."""
    x, weight, _ = ins
    _, mu, rstd = outs
    gy, gmu, grstd = g
    n, c = x.shape[:2]
    spatial, per_image = tuple(range(2, x.ndim)), (n, c) + (1,) * (x.ndim - 2)
    size = count(x, spatial) * (c // groups)

    def channels(stat: Tensor) -> Tensor:                       # (N, G) -> (N, C, 1, ...)
        return reshape(broadcast_to(reshape(stat, (n, groups, 1)), (n, groups, c // groups)), per_image)

    def group_sums(t: Tensor) -> Tensor:                        # (N, C, 1, ...) -> (N, G)
        return reduce_sum(reshape(t, (n, groups, c // groups)), (2,))

    gx = g_weight = g_bias = k = b = None
    if gy is not None:
        w, r = reshape(weight, (c,) + (1,) * (x.ndim - 2)), channels(rstd)
        s1 = reduce_sum(gy, spatial, keepdims=True)
        gxhat = r * (reduce_sum(gy * x, spatial, keepdims=True) - channels(mu) * s1)
        g_weight, g_bias = reshape(reduce_sum(gxhat, (0,)), (c,)), reshape(reduce_sum(s1, (0,)), (c,))
        m1, m2 = group_sums(w * s1) / size, group_sums(w * gxhat) / size
        k = -(rstd * rstd * m2)
        b = rstd * (rstd * m2 * mu - m1)
        gx = (r * w) * gy
    if gmu is not None:
        b = _plus(b, gmu / size)
    if grstd is not None:
        dr = grstd * rstd * rstd * rstd / size
        k, b = _plus(k, -dr), _plus(b, dr * mu)
    if k is not None:
        gx = _plus(gx, x * channels(k))
    gx = _plus(gx, broadcast_to(channels(b), x.shape))
    return [gx, g_weight, g_bias]


defop("group_norm", infer=_group_norm_infer, reference=_group_norm_reference, lower=_lower_group_norm,
      vjp=_group_norm_vjp, n_outputs=3)


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
    """torch's normalize: x / max(||x||_p, eps) along `axis` (torch's dim), with vector_norm's p: any
    p != 0, inf, -inf, or 0 (the count of nonzeros, which has no gradient, as torch's). The
    norm's gradient is 0 at a zero vector, as torch's."""
    x = _float(x)
    return x / maximum(vector_norm(x, p, normalize_axis(axis, x.ndim), keepdims=True), eps)


def local_response_norm(x, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """torch's local_response_norm of x (N, C, *): x / (k + alpha·mean of x² over a window of `size`
    channels)^beta, the window running from c - size//2 to c + (size-1)//2, zeros past the ends
    counted in the mean (torch's average pooling with its padding). The window sum is `size` shifted
    slices (no pooling op: ONNX Runtime's CPU AveragePool has no float64 kernel)."""
    x = _float(x)
    if x.ndim < 3 or not isinstance(x.shape[1], int):
        raise ShapeError(f"local_response_norm: x must be (N, C, *) with a static C, got {format_shape(x.shape)} "
                         f"(at {user_location()})")
    size = int(size)
    if size < 1:
        raise ShapeError(f"local_response_norm: size must be positive, got {size} (at {user_location()})")
    c = x.shape[1]
    pads = ((0, 0), (size // 2, (size - 1) // 2)) + ((0, 0),) * (x.ndim - 2)
    squares = pad(x * x, pads)
    window = add_n([slice_axes(squares, (1,), (i,), (i + c,), (1,)) for i in range(size)])
    return x / power(window * (alpha / size) + k, beta)
