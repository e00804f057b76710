"""ONNX translators that read an image at computed, fractional positions: GridSample, AffineGrid,
DeformConv and RoiAlign.

GridSample is F.grid_sample (gathers of the flattened image at the neighbouring pixels, weighted),
so it differentiates in the image and in the grid. AffineGrid is the product of theta with the
fixed grid of normalised pixel coordinates, differentiable in theta. DeformConv samples its taps
with F.grid_sample, so it differentiates in the input, the weight, the offsets and the mask. RoiAlign
averages bilinear samples through per-region weight matrices (differentiable in the image, and in
the regions where they are run-time values).
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ir import dims
from ..table import onnx_op, require_float

_GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "cubic": "bicubic", "bicubic": "bicubic",
               "nearest": "nearest"}


@onnx_op("GridSample")
def _grid_sample(n, x, grid):
    x, grid = require_float(n, x), require_float(n, grid, "grid")
    mode = n.attr("mode", "linear" if n.opset >= 20 else "bilinear")
    padding = n.attr("padding_mode", "zeros")
    if mode not in _GRID_MODES or (x.ndim, _GRID_MODES[mode]) not in ((4, "bilinear"), (4, "nearest"), (4, "bicubic"),
                                                                      (5, "bilinear"), (5, "nearest")):
        raise n.unsupported(f"mode {mode!r} on a rank-{x.ndim} input (supported: linear, nearest and cubic on 4-D "
                            "inputs, linear and nearest on 5-D ones)")
    if not dims.is_static(grid.shape[1:]):
        raise n.unsupported(f"a grid of symbolic output size {tuple(grid.shape)}")
    return F.grid_sample(x, grid, mode=_GRID_MODES[mode], padding_mode=padding,
                         align_corners=bool(n.attr("align_corners", 0)))


def _normalised_positions(size: int, align_corners: bool) -> np.ndarray:
    """The normalised coordinates in [-1, 1] of the pixel centres along an axis of `size` pixels."""
    i = np.arange(size, dtype=np.float64)
    if align_corners:
        return -1 + 2 * i / (size - 1) if size > 1 else np.full(size, -1.0)
    return (2 * i + 1) / size - 1


@onnx_op("AffineGrid")
def _affine_grid(n, theta, size):
    """grid[n, *p] = theta[n] · (x, y[, z], 1) at every output pixel p, with x along the last axis: one
    product of theta with the fixed (pixels, k+1) matrix of homogeneous coordinates."""
    theta = require_float(n, theta, "theta")
    spatial = n.ints(size, "size")[2:]
    k = len(spatial)
    if k not in (2, 3) or tuple(theta.shape[1:]) != (k, k + 1):
        raise n.unsupported(f"theta of shape {tuple(theta.shape)} for the size {n.ints(size, 'size')} (it takes "
                            "(N, 2, 3) for a 2-D size (N, C, H, W), (N, 3, 4) for (N, C, D, H, W))")
    axes = [_normalised_positions(s, bool(n.attr("align_corners", 0))) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")                    # one array per spatial axis, (D,) H, W
    coords = np.stack([m.reshape(-1) for m in mesh[::-1]] + [np.ones(mesh[0].size)], axis=1)
    grid = F.matmul(coords.astype(theta.dtype), F.swapaxes(theta, -1, -2))        # (N, pixels, k)
    return F.reshape(grid, (theta.shape[0], *spatial, k))


@onnx_op("DeformConv")
def _deform_conv(n, x, w, offset, b=None, mask=None):
    """A convolution whose kernel taps read the input at positions moved by `offset` (bilinear, zeros
    outside: F.grid_sample with align_corners, as ONNX defines it), each scaled by `mask`: the taps are
    sampled into (N, C, taps, positions) and contracted with the weight per group."""
    x, w, offset = require_float(n, x), require_float(n, w, "W"), require_float(n, offset, "offset")
    if x.ndim != 4:
        raise n.unsupported(f"a rank-{x.ndim} input (2-D images only)")
    batch, channels, height, width = x.shape
    kernel = tuple(n.attr("kernel_shape", list(w.shape[2:])))
    k = kernel[0] * kernel[1]
    groups, offset_groups = n.attr("group", 1), n.attr("offset_group", 1)
    strides, dilation = tuple(n.attr("strides", [1, 1])), tuple(n.attr("dilations", [1, 1]))
    pads = n.attr("pads", [0, 0, 0, 0])
    out = tuple(offset.shape[2:])
    if not dims.is_static((channels, height, width) + out) or height < 2 or width < 2 or channels % offset_groups \
            or offset.shape[1] != 2 * offset_groups * k:
        raise n.unsupported(f"input {tuple(x.shape)}, weight {tuple(w.shape)}, offset {tuple(offset.shape)} with "
                            f"offset_group {offset_groups} (static sizes above 1, offsets (N, 2·offset_group·kH·kW, "
                            "oH, oW))")
    # each tap's position at each output position, before the offsets: (kH, kW, oH, oW) per axis
    rows = (np.arange(out[0]) * strides[0] - pads[0])[None, None, :, None] + \
        (np.arange(kernel[0]) * dilation[0])[:, None, None, None]
    cols = (np.arange(out[1]) * strides[1] - pads[1])[None, None, None, :] + \
        (np.arange(kernel[1]) * dilation[1])[None, :, None, None]
    moves = F.reshape(offset, (batch, offset_groups) + kernel + (2,) + out)
    dy, dx = (F.squeeze(m, 4) for m in F.split(moves, [1], 4))
    y = (dy + rows.astype(x.dtype)) * np.asarray(2 / (height - 1), x.dtype) - np.asarray(1, x.dtype)
    xs = (dx + cols.astype(x.dtype)) * np.asarray(2 / (width - 1), x.dtype) - np.asarray(1, x.dtype)
    grid = F.reshape(F.stack([xs, y], -1), (dims.product((batch, offset_groups)), k * out[0], out[1], 2))
    images = F.reshape(x, (dims.product((batch, offset_groups)), channels // offset_groups, height, width))
    taps = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    taps = F.reshape(taps, (batch, offset_groups, channels // offset_groups, k, out[0] * out[1]))
    if mask is not None:
        taps = taps * F.reshape(mask, (batch, offset_groups, 1, k, out[0] * out[1]))
    per_group = F.reshape(taps, (batch, groups, (channels // groups) * k, out[0] * out[1]))
    weights = F.reshape(w, (groups, w.shape[0] // groups, (channels // groups) * k))
    y_out = F.reshape(F.einsum("gok,bgkl->bgol", weights, per_group), (batch, w.shape[0]) + out)
    return y_out if b is None else y_out + F.reshape(b, (-1, 1, 1))


@onnx_op("RoiAlign")
def _roi_align(n, x, rois, batch_indices):
    """Each region of interest pooled to output_height × output_width bins, each bin the average (or
    maximum) of sampling_ratio² bilinear samples of the image the region's batch index names (an
    adaptive count, ⌈size / bins⌉ per axis, where sampling_ratio is 0: the regions must then be known at
    import time). Averages are separable: one (bins, H) and one (bins, W) weight matrix per region."""
    x = require_float(n, x)
    mode = n.attr("mode", "avg")
    bins = (n.attr("output_height", 1), n.attr("output_width", 1))
    ratio, scale = n.attr("sampling_ratio", 0), n.attr("spatial_scale", 1.0)
    half = n.attr("coordinate_transformation_mode", "half_pixel" if n.opset >= 16 else "output_half_pixel") == \
        "half_pixel"
    size = tuple(x.shape[2:])
    if x.ndim != 4 or not dims.is_static(size) or mode not in ("avg", "max"):
        raise n.unsupported(f"mode {mode!r} on an input of shape {tuple(x.shape)} (avg or max, static 2-D images)")
    boxes = np.asarray(rois, np.float64) if isinstance(rois, np.ndarray) else F.cast(rois, x.dtype)
    starts = [boxes[:, a] * scale - 0.5 * half for a in (1, 0)]            # (y, x)
    lengths = [boxes[:, a + 2] * scale - 0.5 * half - s for a, s in zip((1, 0), starts)]
    if not half:
        lengths = [np.maximum(v, 1.0) if isinstance(v, np.ndarray) else F.maximum(v, 1.0) for v in lengths]
    if ratio > 0:
        grids = [np.full(rois.shape[0], ratio)] * 2
    elif isinstance(rois, np.ndarray):
        grids = [np.maximum(np.ceil(v / b), 0).astype(np.int64) for v, b in zip(lengths, bins)]
    else:
        raise n.unsupported("sampling_ratio 0 (a sample count from each region's size) with regions computed at "
                            "run time: give a sampling_ratio, or the regions as constants")
    axes = []
    for start, length, grid, count, extent in zip(starts, lengths, grids, bins, size):
        most = max(int(np.max(grid)) if len(grid) else 0, 1)
        step = length / count if isinstance(length, np.ndarray) else length * (1 / count)
        sample = (np.arange(most) + 0.5)[None, None, :] / np.maximum(grid, 1)[:, None, None]
        position = _column(start) + _column(step) * np.arange(count)[None, :, None] + _column(step) * sample
        present = np.arange(most)[None, None, :] < grid[:, None, None]      # (regions, bins, samples)
        axes.append((position, present, extent))
    images = F.take(x, F.cast(batch_indices, np.int64), 0)                       # (regions, C, H, W)
    count = np.maximum(grids[0] * grids[1], 1).astype(x.dtype).reshape(-1, 1, 1, 1)
    if mode == "avg":
        (wy, _), (wx, _) = (_bilinear(position, present, extent, x.dtype) for position, present, extent in axes)
        return F.einsum("rph,rchw,rqw->rcpq", F.sum(wy, 2), images, F.sum(wx, 2)) / count
    return _roi_max(axes, images, x.dtype)


def _column(v):
    """A per-region value as (regions, 1, 1)."""
    return v[:, None, None] if isinstance(v, np.ndarray) else F.reshape(v, (-1, 1, 1))


def _bilinear(position, present, extent: int, dtype):
    """RoiAlign's bilinear weights of the samples `position` (regions, bins, samples) over an axis of
    `extent` pixels: (regions, bins, samples, extent), zero for samples outside [-1, extent] (and for
    absent ones); positions clamped into [0, extent - 1] first. Also the clamped positions."""
    valid = F.logical_and(F.greater_equal(position, -1.0), F.less_equal(position, float(extent)))
    clamped = F.clip(F.cast(position, dtype), 0.0, float(extent - 1))
    hat = F.relu(1 - F.abs(F.expand_dims(clamped, -1) - np.arange(extent, dtype=dtype)))
    keep = F.logical_and(valid, present)
    return hat * F.expand_dims(F.cast(keep, dtype), -1), clamped


def _roi_max(axes, images, dtype):
    """RoiAlign's max mode as its definition computes it: per sample the largest of the four corner
    values each times its bilinear weight, then the largest over the bin's samples (an invalid sample
    counts as 0, an absent one not at all)."""
    corners = []
    for position, present, extent in axes:
        _, clamped = _bilinear(position, present, extent, dtype)
        low = F.floor(clamped)
        high = F.minimum(low + 1, float(extent - 1))
        frac = clamped - low
        pick = [F.cast(F.equal(F.expand_dims(c, -1), np.arange(extent, dtype=dtype)), dtype) for c in (low, high)]
        valid = F.logical_and(F.greater_equal(position, -1.0), F.less_equal(position, float(extent)))
        corners.append((pick, (1 - frac, frac), valid, present))
    (pick_y, weight_y, valid_y, present_y), (pick_x, weight_x, valid_x, present_x) = corners
    best = None
    for a in (0, 1):
        for b in (0, 1):
            values = F.einsum("rpsh,rchw,rqtw->rcpsqt", pick_y[a], images, pick_x[b])
            weight = F.expand_dims(F.expand_dims(weight_y[a], -1), -1) * F.expand_dims(
                F.expand_dims(weight_x[b], 1), 1)
            term = values * F.expand_dims(weight, 1)
            best = term if best is None else F.maximum(best, term)
    valid = F.logical_and(F.expand_dims(F.expand_dims(valid_y, -1), -1), F.expand_dims(F.expand_dims(valid_x, 1), 1))
    present = present_y[:, :, :, None, None] & present_x[:, None, None, :, :]
    best = F.where(F.expand_dims(valid, 1), best, np.zeros((), dtype))
    best = F.where(np.expand_dims(present, 1), best, np.asarray(-np.inf, dtype))
    return F.max(best, (3, 5))
