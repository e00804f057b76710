"""max_unpool: the partial inverse of max pooling (torch's max_unpool1d/2d/3d, by the input's rank),
each value written back where max_pool's indices say it came from, zeros elsewhere.

A scatter along each image's flattened positions (the last of equal indices wins, as PyTorch's CPU
kernel writes them in order), so the gradient is a gather at the same indices (to the winner
alone where indices repeat; PyTorch gives every duplicate the gradient). ONNX's MaxUnpool is not
used: OpenVINO has no conversion for it (docs/targets.md).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from .basic import cast
from .scatter import scatter
from .shape import broadcast_to, reshape

__all__ = ["max_unpool"]


def _per_axis(value, n: int, what: str) -> tuple[int, ...]:
    values = (value,) * n if isinstance(value, int) else tuple(int(v) for v in value)
    if len(values) != n:
        raise ShapeError(f"max_unpool: {what} needs {n} values, got {value!r} (at {user_location()})")
    return values


def max_unpool(x, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """torch's max_unpool1d/2d/3d of x (N, C, *spatial), by its rank as max_pool, with the integer
    `indices` max_pool(..., return_indices=True) gave (flat positions in each output image): an
    output of spatial size (in - 1)·stride - 2·padding + kernel_size per axis, or `output_size`
    (its last len(spatial) entries), holding each value at its index and zeros elsewhere."""
    x, indices = as_tensor(x), as_tensor(indices)
    if indices.dtype.kind not in "iu":
        raise ShapeError(f"max_unpool: indices must be integers, got {indices.dtype.name} (at {user_location()})")
    if x.ndim < 3 or indices.shape != x.shape:
        raise ShapeError(f"max_unpool: x {format_shape(x.shape)} and indices {format_shape(indices.shape)} must "
                         f"share one shape (N, C, *spatial) (at {user_location()})")
    n = x.ndim - 2
    kernel = _per_axis(kernel_size, n, "kernel_size")
    steps = kernel if stride is None else _per_axis(stride, n, "stride")
    pads = _per_axis(padding, n, "padding")
    spatial = x.shape[2:]
    if not dims.is_static(spatial):
        raise ShapeError(f"max_unpool: the spatial sizes of x {format_shape(x.shape)} must be static (the batch and "
                         f"channels may be symbolic) (at {user_location()})")
    if output_size is not None:
        size = tuple(int(v) for v in tuple(output_size)[-n:])
    else:
        size = tuple((s - 1) * st - 2 * p + k for s, st, p, k in zip(spatial, steps, pads, kernel))
    lead = tuple(x.shape[:2])
    flat = (dims.product(spatial),)
    zeros = broadcast_to(np.zeros((), x.dtype), lead + (dims.product(size),))
    out = scatter(zeros, -1, reshape(cast(indices, np.int64), lead + flat), reshape(x, lead + flat))
    return reshape(out, lead + size)
