"""ONNX translators for pooling and its relatives: MaxPool (with its Indices output), AveragePool,
LpPool, the global poolings, MaxUnpool and Col2Im.

Max pooling is F.max_pool (ONNX MaxPool where it can be; dilated windows as strided slices whose
first maximum is picked), on integers through float32, which holds their values exactly. Average
and Lp pooling with dilations sum their windows with a ones kernel (a Conv over the channels folded
into the batch, so its gradient is a transposed convolution), divided by the number of positions
each window reads inside the input (and its padding with count_include_pad; never the positions
ceil_mode adds past it, as ONNX and PyTorch count them), or raised to 1/p. MaxUnpool writes each
value at its index into zeros, Col2Im sums columns back into an image (gcompile.ops.spatial's
col2im, in any number of spatial dims).
"""
from __future__ import annotations

import math

import numpy as np

from ... import functions as F
from ...ir import dims
from ...ops.spatial import fold_blocks
from ...ops.windows import pool_geometry
from ..table import onnx_op, require_float, scalar_like
from .nn import spatial_attrs


def _geometry(n, x):
    """(kernel, strides, pads as (before, after) pairs, dilations) of a pooling node. With ceil_mode a
    window may reach past the padded input as long as one starts inside it (transformers' EfficientNet
    pools its last 2x2 map with a 2560-wide kernel): ceil_mode's end positions count as neither input
    nor padding, as in ONNX Runtime and PyTorch."""
    kernel = tuple(n.attr("kernel_shape"))
    dilation = tuple(n.attr("dilations", [1] * len(kernel)))
    strides, pads = spatial_attrs(n, x, kernel, dilation)
    reach = [s - 1 if n.attr("ceil_mode", 0) else 0 for s in strides]     # how far ceil_mode's window may reach
    if len(kernel) != x.ndim - 2 or any(k < 1 or (isinstance(size, int) and d * (k - 1) + 1 > size + sum(pad) + r)
                                        for k, d, size, pad, r in zip(kernel, dilation, x.shape[2:], pads, reach)):
        raise n.unsupported(f"kernel_shape {list(kernel)} (dilations {list(dilation)}) does not fit the input's "
                            f"spatial shape {x.shape[2:]} padded by {list(pads)}")
    return kernel, strides, pads, dilation


def _static_spatial(n, x, why: str) -> tuple:
    if not dims.is_static(x.shape[2:]):
        raise n.unsupported(f"{why} on a symbolic spatial size {tuple(x.shape[2:])}")
    return tuple(x.shape[2:])


def _indices(n, x, index):
    """F.max_pool's index within each (N, C) plane as ONNX's Indices: flat over the whole tensor,
    the spatial position in row-major order, or column-major with storage_order=1."""
    spatial = _static_spatial(n, x, "the Indices output")
    if n.attr("storage_order", 0):
        coordinates, rest = [], index
        for size in reversed(spatial):                   # row-major: the last axis varies fastest
            coordinates.append(F.remainder(rest, np.int64(size)))
            rest = F.floor_divide(rest, np.int64(size))
        index, stride = None, 1
        for coordinate, size in zip(reversed(coordinates), spatial):    # column-major: the first axis
            term = coordinate * np.int64(stride)
            index = term if index is None else index + term
            stride *= size
    planes = F.reshape(F.arange(dims.product(x.shape[:2])), tuple(x.shape[:2]) + (1,) * (x.ndim - 2))
    return index + planes * np.int64(math.prod(spatial))


@onnx_op("MaxPool")
def _max_pool(n, x):
    kind = np.dtype(x.dtype)
    if kind.kind in "iu" and kind.itemsize == 1:         # int8 and uint8 are exact in float32
        y = _max_pool(n, F.cast(x, np.float32))
        return (F.cast(y[0], kind), *y[1:]) if isinstance(y, tuple) else F.cast(y, kind)
    x = require_float(n, x)
    kernel, strides, pads, dilation = _geometry(n, x)
    ceil = bool(n.attr("ceil_mode", 0))
    if all(d == 1 for d in dilation) and ceil:           # ONNX MaxPool's own form: the ceil as end padding
        _, extra, kernel = pool_geometry(_static_spatial(n, x, "ceil_mode"), kernel, strides, pads, dilation, True)
        pads, ceil = tuple((before, after + e) for (before, after), e in zip(pads, extra)), False
    if not n.wants(1):
        return F.max_pool(x, kernel, strides, pads, dilation=dilation, ceil_mode=ceil)
    y, index = F.max_pool(x, kernel, strides, pads, dilation=dilation, ceil_mode=ceil, return_indices=True)
    return y, _indices(n, x, index)


@onnx_op("AveragePool")
def _avg_pool(n, x):
    x = require_float(n, x)
    kernel, strides, pads, dilation = _geometry(n, x)
    include, ceil = bool(n.attr("count_include_pad", 0)), bool(n.attr("ceil_mode", 0))
    if all(d == 1 for d in dilation):
        return F.avg_pool(x, kernel, strides, pads, count_include_pad=include, ceil_mode=ceil)
    _static_spatial(n, x, "AveragePool with dilations")
    sums, out = _window_sums(n, x, kernel, strides, pads, dilation, ceil)
    counts = _window_counts(x.shape[2:], kernel, strides, pads, dilation, out, include)
    return sums / counts.astype(x.dtype)


@onnx_op("LpPool")
def _lp_pool(n, x):
    """(Σ |x|^p)^(1/p) over each window, padding counting as 0."""
    x = require_float(n, x)
    kernel, strides, pads, dilation = _geometry(n, x)
    p = n.attr("p", 2)
    sums, _ = _window_sums(n, _power(x, p), kernel, strides, pads, dilation, bool(n.attr("ceil_mode", 0)))
    return _root(sums, p)


@onnx_op("GlobalLpPool")
def _global_lp_pool(n, x):
    x = require_float(n, x)
    p = n.attr("p", 2)
    return _root(F.sum(_power(x, p), tuple(range(2, x.ndim)), keepdims=True), p)


def _power(x, p):
    return F.abs(x) if p == 1 else x * x if p == 2 else F.power(F.abs(x), scalar_like(p, x))


def _root(sums, p):
    return sums if p == 1 else F.sqrt(sums) if p == 2 else F.power(sums, scalar_like(1 / p, sums))


def _window_sums(n, x, kernel, strides, pads, dilation, ceil: bool):
    """The sum of each (dilated) window, padding and ceil_mode's extra positions counting as 0: a Conv
    with a ones kernel over (N*C, 1, *spatial). Returns the sums (N, C, *out) and out."""
    size = _static_spatial(n, x, "dilated pooling") if ceil else x.shape[2:]
    out, extra, kernel = pool_geometry(size, kernel, strides, pads, dilation, ceil) if ceil else \
        (None, (0,) * len(kernel), kernel)
    batch, channels = x.shape[:2]
    flat = F.reshape(x, (dims.product((batch, channels)), 1) + tuple(x.shape[2:]))
    sums = F.conv(flat, np.ones((1, 1) + kernel, x.dtype), stride=strides, dilation=dilation,
                  pad=tuple((b, a + e) for (b, a), e in zip(pads, extra)))
    return F.reshape(sums, (batch, channels) + tuple(sums.shape[2:])), tuple(sums.shape[2:])


def _window_counts(size, kernel, strides, pads, dilation, out, include: bool) -> np.ndarray:
    """How many positions of each window lie inside the input (and, with include, its padding)."""
    counts = np.ones(())
    for axis, (n, k, s, (p0, p1), d, o) in enumerate(zip(size, kernel, strides, pads, dilation, out)):
        position = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - p0
        low, high = (-p0, n + p1) if include else (0, n)
        per_axis = ((position >= low) & (position < high)).sum(1)
        counts = counts[..., None] * per_axis.reshape((1,) * axis + (-1,))
    return counts


@onnx_op("GlobalAveragePool")
def _global_avg_pool(n, x):
    return F.global_avg_pool(require_float(n, x))


@onnx_op("GlobalMaxPool")
def _global_max_pool(n, x):
    return F.max(x, tuple(range(2, x.ndim)), keepdims=True)


# -- the adjoints of pooling and of im2col ------------------------------------------------------------
@onnx_op("MaxUnpool")
def _max_unpool(n, x, indices, output_shape=None):
    """Each value written at its index into zeros of output_shape, or of the shape MaxPool's geometry
    inverts to; indices count over that whole shape, as MaxPool's Indices over its input (ONNX Runtime's
    and PyTorch's reading: onnx's reference counts them in the inverted shape, then pads)."""
    x = require_float(n, x)
    if output_shape is not None:
        shape = n.shape(output_shape, "output_shape")
    else:
        kernel = tuple(n.attr("kernel_shape"))
        nsp = len(kernel)
        strides = tuple(n.attr("strides", [1] * nsp))
        flat_pads = n.attr("pads", [0] * (2 * nsp))
        spatial = _static_spatial(n, x, "MaxUnpool without output_shape")
        shape = tuple(x.shape[:2]) + tuple((i - 1) * s - flat_pads[a] - flat_pads[a + nsp] + k
                                           for a, (i, s, k) in enumerate(zip(spatial, strides, kernel)))
    flat = F.put_along_axis(F.full((dims.product(shape),), 0, x.dtype), F.reshape(F.cast(indices, np.int64), (-1,)),
                            F.reshape(x, (-1,)), 0)
    return F.reshape(flat, shape)


@onnx_op("Col2Im")
def _col2im(n, x, image_shape, block_shape):
    """Columns (N, C·prod(block), L) summed back into (N, C, *image_shape), each block at its place."""
    x = require_float(n, x)
    size, kernel = tuple(n.ints(image_shape, "image_shape")), tuple(n.ints(block_shape, "block_shape"))
    nsp = len(size)
    dilation = tuple(n.attr("dilations", [1] * nsp))
    strides = tuple(n.attr("strides", [1] * nsp))
    flat = n.attr("pads", [0] * (2 * nsp))
    pads = tuple(zip(flat[:nsp], flat[nsp:]))
    blocks = [(s + b + a - d * (k - 1) - 1) // st + 1 for s, (b, a), d, k, st in zip(size, pads, dilation, kernel,
                                                                                      strides)]
    if len(kernel) != nsp or x.ndim != 3 or min(blocks) < 1 or x.shape[2] != math.prod(blocks) or \
            not isinstance(x.shape[1], int) or x.shape[1] % math.prod(kernel):
        raise n.unsupported(f"columns {tuple(x.shape)} for image_shape {list(size)} and block_shape {list(kernel)} "
                            f"(strides {list(strides)}, dilations {list(dilation)}, pads {flat})")
    return fold_blocks(x, size, kernel, dilation, pads, strides)
