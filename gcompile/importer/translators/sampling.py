"""ONNX translators that read an image at computed, fractional positions: GridSample and AffineGrid.

GridSample is F.grid_sample (gathers of the flattened image at the neighbouring pixels, weighted),
so it differentiates in the image and in the grid. AffineGrid is the product of theta with the
fixed grid of normalised pixel coordinates, differentiable in theta.
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
