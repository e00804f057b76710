"""Sliding windows for the pooling forms ONNX's pooling ops do not cover the way PyTorch defines
them (dilated max pooling, ceil_mode, adaptive max pooling, unfold): window geometry as PyTorch
computes it, windows gathered as strided slices stacked on a new last axis, and the maximum of
each window picked PyTorch's way (the first maximum; a NaN wins, the last NaN if several).

Everything here is a composition of slices, concats and gathers, so gradients (to any order)
follow from their adjoints: the gradient of a picked maximum goes to the one element picked.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor
from .basic import stop_gradient
from .elementwise import equal, greater_equal, not_equal, where
from .indexing import concat, slice_axes, take_along_axis
from .reduce import max as reduce_max
from .reduce import min as reduce_min
from .shape import expand_dims, squeeze


def pool_geometry(in_size, kernel, stride, pad, dilation, ceil_mode: bool) -> tuple[tuple, tuple, tuple]:
    """PyTorch's pooling output size per spatial axis, the padding to add at the end of each axis so
    every window lies inside the padded input (nonzero only with ceil_mode), and the kernel to take:
    with ceil_mode the size rounds up, but the last window must start inside the input or the padding
    before it, so a window may also reach up to stride - 1 past the padded input (a kernel wider than
    the input: transformers' EfficientNet pools its last 2x2 map with a 2560-wide one). That window is
    the only one, and its taps that never land inside the padded input read ceil_mode's positions
    alone, which count as nothing: they are cut from the kernel rather than padded for."""
    out, extra, cut = [], [], []
    for i, k, s, (p0, p1), d in zip(in_size, kernel, stride, pad, dilation):
        span = i + p0 + p1 - d * (k - 1) - 1
        if span < (1 - s if ceil_mode else 0):
            raise ShapeError(f"the window (kernel {tuple(kernel)}, dilation {tuple(dilation)}) is larger than the "
                             f"padded input {tuple(n + sum(p) for n, p in zip(in_size, pad))} (at {user_location()})")
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + p0:
            o -= 1
        taken = min(k, (i + p0 + p1 - 1) // d + 1)
        out.append(o)
        cut.append(taken)
        extra.append(max(0, (o - 1) * s + d * (taken - 1) + 1 - (i + p0 + p1)))
    return tuple(out), tuple(extra), tuple(cut)


def taps(kernel):
    return itertools.product(*(range(k) for k in kernel))


def windows(xp: Tensor, kernel, stride, dilation, out) -> Tensor:
    """The windows of xp (N, C, *spatial, already padded): (N, C, *out, prod(kernel)), taps in
    row-major order."""
    nsp = len(kernel)
    axes = range(2, 2 + nsp)
    cols = [expand_dims(slice_axes(xp, axes, [t * d for t, d in zip(tap, dilation)],
                                   [t * d + s * (o - 1) + 1 for t, d, s, o in zip(tap, dilation, stride, out)],
                                   stride), -1)
            for tap in taps(kernel)]
    return concat(cols, -1) if len(cols) > 1 else cols[0]


def window_positions(in_size, kernel, stride, dilation, out, before) -> np.ndarray:
    """Per output position and tap, the flat spatial index (row-major over in_size) of the input
    element it reads, for inputs padded by `before` on each axis: shape (*out, prod(kernel))."""
    grids = np.meshgrid(*(np.arange(o) for o in out), indexing="ij")
    flat = np.zeros(tuple(out) + (math.prod(kernel),), np.int64)
    for t, tap in enumerate(taps(kernel)):
        index = 0
        for g, k, s, d, b, n in zip(grids, tap, stride, dilation, before, in_size):
            index = index * n + (g * s + k * d - b)
        flat[..., t] = index
    return flat


def first_max(w: Tensor, axis: int = -1) -> tuple[Tensor, Tensor]:
    """The maximum along `axis` as PyTorch's pooling kernels pick it: the first maximum, or the
    last NaN where there is one; returns (values without that axis, int64 positions kept as a
    size-1 axis). Only the picked element gets a gradient."""
    axis = axis % w.ndim
    k = w.shape[axis]
    positions = np.arange(k, dtype=np.int64).reshape((k,) + (1,) * (w.ndim - axis - 1))
    plain = stop_gradient(w)
    first = reduce_min(where(equal(plain, reduce_max(plain, axis, keepdims=True)), positions, k), axis,
                       keepdims=True)
    last_nan = reduce_max(where(not_equal(plain, plain), positions, -1), axis, keepdims=True)
    index = where(greater_equal(last_nan, 0), last_nan, first)
    return squeeze(take_along_axis(w, index, axis), axis), index
