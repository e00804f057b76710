"""Layers on gcompile.functions, with torch.nn's names, parameter layouts and default
initialisation, so a torch state_dict (converted to numpy) loads into them unchanged.

Every layer takes `rng` (a numpy Generator or a seed; see nn/init.py) and `dtype` (float32).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .. import functions as F
from ..errors import GcompileError
from ..frontend.tensor import Tensor
from ..ops.conv import conv_batch_norm
from ..ops.reduce import count
from . import init
from .module import Module

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d", "Dropout", "Embedding",
           "Flatten", "GELU", "Identity", "LayerNorm", "Linear", "MaxPool2d", "ReLU", "SiLU", "Sigmoid", "Tanh"]


def _tuple(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    return (int(value),) * n if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)


class Linear(Module):
    """y = x Wᵀ + b, W of shape (out_features, in_features) as in torch.nn.Linear."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, rng=None,
                 dtype: DTypeLike = "float32") -> None:
        self.in_features, self.out_features = in_features, out_features
        rng = init.generator(rng)
        self.weight = init.kaiming_uniform((out_features, in_features), in_features, rng, dtype)
        self.bias = init.kaiming_uniform((out_features,), in_features, rng, dtype) if bias else None

    def forward(self, x: Any) -> Tensor:
        return F.linear(x, F.transpose(self.weight), self.bias)


class _ConvNd(Module):
    spatial = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True, rng=None,
                 dtype: DTypeLike = "float32") -> None:
        if in_channels % groups or out_channels % groups:
            raise GcompileError(f"{type(self).__name__}: in_channels {in_channels} and out_channels {out_channels} "
                                f"must be divisible by groups {groups}")
        kernel = _tuple(kernel_size, self.spatial)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * int(np.prod(kernel))
        rng = init.generator(rng)
        self.weight = init.kaiming_uniform((out_channels, in_channels // groups, *kernel), fan_in, rng, dtype)
        self.bias = init.kaiming_uniform((out_channels,), fan_in, rng, dtype) if bias else None

    def forward(self, x: Any) -> Tensor:
        return F.conv(x, self.weight, self.bias, **self._params())

    def _params(self) -> dict:
        return dict(stride=self.stride, pad=self.padding, dilation=self.dilation, groups=self.groups)

    def followed_by(self, after: Module, x: Any) -> Any:
        """An inference-mode batch norm after this convolution, both as defined here (not a subclass's
        own forward), is one convolution (ops/conv.py conv_batch_norm)."""
        if not (isinstance(after, _BatchNorm) and type(self).forward is _ConvNd.forward
                and type(after).forward is _BatchNorm.forward and after.uses_running_stats):
            return None
        scale, shift = after.affine_params(np.dtype(self.weight.dtype))
        return conv_batch_norm(x, self.weight, self.bias, scale, shift, after.running_mean, after.running_var,
                               after.eps, **self._params())


class Conv1d(_ConvNd):
    """torch.nn.Conv1d on (N, C, L)."""
    spatial = 1


class Conv2d(_ConvNd):
    """torch.nn.Conv2d on (N, C, H, W); padding is an int, a pair, or per axis a (before, after) pair."""
    spatial = 2


class _BatchNorm(Module):
    """Normalises each channel (axis 1). In training mode it uses the batch's statistics and, when
    its buffers are traced (the module is an argument of the traced function, as in a training
    step), updates running_mean, running_var (unbiased, as PyTorch) and num_batches_tracked;
    in eval mode it uses the running statistics."""
    running_mean: Any   # numpy arrays, or Tensors in a traced copy
    running_var: Any
    num_batches_tracked: Any

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, dtype: DTypeLike = "float32") -> None:
        self.num_features, self.eps, self.momentum = num_features, float(eps), momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = init.ones((num_features,), dtype) if affine else None
        self.bias = init.zeros((num_features,), dtype) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", init.zeros((num_features,), dtype))
            self.register_buffer("running_var", init.ones((num_features,), dtype))
            self.register_buffer("num_batches_tracked", np.array(0, np.int64))

    @property
    def uses_running_stats(self) -> bool:
        """Whether forward normalises by the running statistics (eval mode, tracked), not the batch's."""
        return not self.training and self.track_running_stats

    def affine_params(self, dtype) -> tuple:
        """(weight, bias): the module's, or ones and zeros of `dtype` without an affine transform."""
        if self.affine:
            return self.weight, self.bias
        return np.ones(self.num_features, dtype), np.zeros(self.num_features, dtype)

    def forward(self, x: Any) -> Tensor:
        dtype = x.dtype
        weight, bias = self.affine_params(dtype)
        if self.uses_running_stats:
            return F.batch_norm(x, weight, bias, self.running_mean, self.running_var, axis=1, eps=self.eps,
                                training=False)
        y, mean, var = F.batch_norm(x, weight, bias, axis=1, eps=self.eps, training=True, return_stats=True)
        if self.training and self.track_running_stats and isinstance(self.running_mean, Tensor):
            n = count(x, tuple(a for a in range(x.ndim) if a != 1))
            tracked = self.num_batches_tracked + 1
            momentum = self.momentum if self.momentum is not None else 1 / F.cast(tracked, dtype)
            self.running_mean = self.running_mean + momentum * (F.cast(mean, self.running_mean.dtype)
                                                                - self.running_mean)
            unbiased = F.cast(var * (n / F.maximum(n - 1, 1)), self.running_var.dtype)
            self.running_var = self.running_var + momentum * (unbiased - self.running_var)
            self.num_batches_tracked = tracked
        return y


class BatchNorm1d(_BatchNorm):
    """torch.nn.BatchNorm1d on (N, C) or (N, C, L)."""


class BatchNorm2d(_BatchNorm):
    """torch.nn.BatchNorm2d on (N, C, H, W)."""


class LayerNorm(Module):
    """Normalises over the last len(normalized_shape) axes (torch.nn.LayerNorm)."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype: DTypeLike = "float32") -> None:
        shape = _tuple(normalized_shape, 1)
        self.normalized_shape, self.eps = shape, float(eps)
        self.weight = init.ones(shape, dtype) if elementwise_affine else None
        self.bias = init.zeros(shape, dtype) if elementwise_affine and bias else None

    def forward(self, x: Any) -> Tensor:
        dtype = x.dtype
        weight = self.weight if self.weight is not None else np.ones(self.normalized_shape, dtype)
        bias = self.bias if self.bias is not None else np.zeros(self.normalized_shape, dtype)
        return F.layer_norm(x, weight, bias, axis=-len(self.normalized_shape), eps=self.eps)


class Embedding(Module):
    """Rows of weight (num_embeddings, embedding_dim) for integer ids; the padding_idx row, if
    given, starts at zero and gets no gradient, as in torch.nn.Embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, rng=None,
                 dtype: DTypeLike = "float32") -> None:
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        self.weight = init.normal((num_embeddings, embedding_dim), 1.0, rng, dtype)
        if self.padding_idx is not None:
            self.weight[self.padding_idx] = 0

    def forward(self, ids: Any) -> Tensor:
        weight: Any = self.weight
        if self.padding_idx is not None:
            row = (np.arange(self.num_embeddings) == self.padding_idx).reshape(-1, 1)
            weight = F.where(row, F.stop_gradient(weight), weight)
        return F.embedding(ids, weight)


class Dropout(Module):
    """Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p)); in a
    training step the mask is a function of the step counter (F.dropout, gc.random_key)."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = float(p)

    def forward(self, x: Any) -> Tensor:
        return F.dropout(x, self.p, training=self.training)


class _Activation(Module):
    fn: Any = None

    def forward(self, x: Any) -> Tensor:
        return type(self).fn(x)


class ReLU(_Activation):
    fn = F.relu


class Tanh(_Activation):
    fn = F.tanh


class Sigmoid(_Activation):
    fn = F.sigmoid


class SiLU(_Activation):
    fn = F.silu


class Identity(_Activation):
    fn = F.identity


class GELU(Module):
    """approximate='none' (erf) or 'tanh', as torch.nn.GELU."""

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in ("none", "tanh"):
            raise GcompileError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Any) -> Tensor:
        return F.gelu(x, approximate=self.approximate == "tanh")


class Flatten(Module):
    """Merges the axes from start_dim on (torch.nn.Flatten with end_dim=-1)."""

    def __init__(self, start_dim: int = 1) -> None:
        self.start_dim = start_dim

    def forward(self, x: Any) -> Tensor:
        return F.flatten(x, self.start_dim)


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Any) -> Tensor:
        return F.max_pool(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(Module):
    """torch.nn.AvgPool2d; as there, padded positions count in the divisor by default."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> None:
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.count_include_pad = count_include_pad

    def forward(self, x: Any) -> Tensor:
        return F.avg_pool(x, self.kernel_size, self.stride, self.padding, count_include_pad=self.count_include_pad)


class AdaptiveAvgPool2d(Module):
    """Only output_size 1 (or (1, 1)): the global average over H and W, keeping them as size 1."""

    def __init__(self, output_size: Any = 1) -> None:
        if _tuple(output_size, 2) != (1, 1):
            raise GcompileError(f"AdaptiveAvgPool2d supports output_size 1 only, got {output_size!r}")
        self.output_size = output_size

    def forward(self, x: Any) -> Tensor:
        return F.global_avg_pool(x)
