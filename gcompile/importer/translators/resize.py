"""The ONNX Resize (and Upsample) translator: nearest, linear and cubic interpolation, separable per axis.

Each resized axis of static size maps its input to its output by a fixed (out, in) matrix that ONNX's
definition gives once the sizes are known: a row per output position, holding the interpolation
weights of its neighbours (edge positions repeated, as the definition pads). Linear and cubic
resizing (antialiased too: a kernel widened by 1/scale when downsampling) multiply by that matrix
along the axis, so the gradient is the transposed product; nearest picks one input position per
output position (a gather). tf_crop_and_resize samples the roi's crop of each axis and gives
extrapolation_value where a position falls outside the input. Sizes, scales and the roi must be
known at import time; the batch and other unresized axes may be symbolic.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ... import functions as F
from ...ops.shape_rules import normalize_axis
from ..table import onnx_op, require_float

MAX_MATRIX_ELEMENTS = 2 ** 24   # entries of one axis's interpolation matrix (128 MiB of float64)

_ROUNDING: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _source_positions(mode: str, size_in: int, size_out: int, scale: float, roi=(0.0, 1.0)) -> np.ndarray:
    """Where each output position samples the input (coordinate_transformation_mode); `roi` is the
    (start, end) of the crop tf_crop_and_resize takes, as fractions of the input's extent."""
    i = np.arange(size_out, dtype=np.float64)
    if mode == "tf_crop_and_resize":
        start, end = roi
        length = size_in * scale
        step = (end - start) * (size_in - 1) / (length - 1) if length != 1 else 0.0
        centre = (end - start) * (size_in - 1) / 2 if length == 1 else 0.0
        return i * step + centre + start * (size_in - 1)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        shift = size_in / 2 * (1 - size_out / (scale * size_in))
        return shift + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if size_out > 1 else np.zeros(size_out)
    if mode == "align_corners":                # over the unrounded resized length size_in * scale
        length = size_in * scale
        return i * (size_in - 1) / (length - 1) if length != 1 else np.zeros(size_out)
    if mode == "asymmetric":
        return i / scale
    raise ValueError(mode)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter a, at distances t."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _interpolation_matrix(n, size_in: int, size_out: int, scale: float, roi=(0.0, 1.0)) -> np.ndarray:
    """The (size_out, size_in) float64 matrix of one axis, for the node's mode and attributes; an
    UnsupportedError beyond MAX_MATRIX_ELEMENTS entries (sizes come from the file: a hostile one may
    ask for terabytes)."""
    if size_out * size_in > MAX_MATRIX_ELEMENTS:
        raise n.unsupported(f"resizing an axis of size {size_in} to {size_out} needs a {size_out} x {size_in} "
                            f"interpolation matrix, more than the {MAX_MATRIX_ELEMENTS} entries gcompile builds")
    mode = "linear" if n.attr("mode", "nearest") == "bilinear" else n.attr("mode", "nearest")
    x = _source_positions(_coordinates(n), size_in, size_out, scale, roi)
    weights = np.zeros((size_out, size_in))
    rows = np.arange(size_out)
    if mode == "nearest":
        rounding = _ROUNDING[n.attr("nearest_mode", "round_prefer_floor") if n.opset >= 11 else "floor"]
        weights[rows, np.clip(rounding(x), 0, size_in - 1).astype(np.int64)] = 1.0
        return weights
    antialias = bool(n.attr("antialias", 0)) and scale < 1          # the kernel widened by 1/scale
    stretch = scale if antialias else 1.0
    radius = 1 if mode == "linear" else 2
    a = n.attr("cubic_coeff_a", -0.75)
    base = np.floor(x)
    for tap in range(int(np.floor(-radius / stretch)), int(np.ceil(radius / stretch)) + 2):
        pos = base + tap
        t = (pos - x) * stretch
        w = np.maximum(1 - np.abs(t), 0.0) if mode == "linear" else _cubic(t, a)
        if n.attr("exclude_outside", 0):
            w = np.where((pos >= 0) & (pos <= size_in - 1), w, 0.0)
        np.add.at(weights, (rows, np.clip(pos, 0, size_in - 1).astype(np.int64)), w)
    if antialias or n.attr("exclude_outside", 0):
        total = weights.sum(1, keepdims=True)
        weights /= np.where(total == 0, 1.0, total)
    return weights


def _coordinates(n) -> str:
    return n.attr("coordinate_transformation_mode", "half_pixel" if n.opset >= 11 else "asymmetric")


def _crops(n, x, roi) -> dict:
    """tf_crop_and_resize's roi as {axis: (start, end)} for the axes it crops (those not (0, 1))."""
    if _coordinates(n) != "tf_crop_and_resize":
        return {}
    if roi is None:
        raise n.unsupported("coordinate_transformation_mode tf_crop_and_resize without a roi")
    axes = [normalize_axis(a, x.ndim) for a in n.attr("axes", list(range(x.ndim)))]
    values = [float(v) for v in n.known(roi, "roi").reshape(-1)]
    if len(values) != 2 * len(axes):
        raise n.unsupported(f"a roi of {len(values)} values for {len(axes)} axes (it takes a start and an end each)")
    crops = {a: (start, end) for a, start, end in zip(axes, values[:len(axes)], values[len(axes):])}
    return {a: c for a, c in crops.items() if c != (0.0, 1.0)}


def _targets(n, x, scales, sizes, crops):
    """(axis, size_out, scale) for each axis the node resizes (an axis kept at its size and not
    cropped is left out)."""
    axes = [normalize_axis(a, x.ndim) for a in n.attr("axes", list(range(x.ndim)))]
    given = () if sizes is None else n.dims(sizes, "sizes")
    if given:
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        changed = [(a, o) for a, o in zip(axes, given) if o != x.shape[a] or a in crops]
        if any(not isinstance(o, int) or not isinstance(x.shape[a], int) for a, o in changed):
            raise n.unsupported(f"sizes {list(given)} change an axis of symbolic size (input {tuple(x.shape)})")
        if policy == "stretch":
            return [(a, o, o / x.shape[a]) for a, o in changed]
        ratios = [o / x.shape[a] for a, o in zip(axes, given)]
        r = min(ratios) if policy == "not_larger" else max(ratios)
        return [(a, int(math.floor(r * x.shape[a] + 0.5)), r) for a in axes]
    if scales is None or not n.known(scales, "scales").size:
        raise n.unsupported("neither scales nor sizes is given")
    factors = [float(v) for v in n.known(scales, "scales").reshape(-1)]
    targets = [(a, s) for a, s in zip(axes, factors) if s != 1.0 or a in crops]
    if any(not isinstance(x.shape[a], int) for a, _ in targets):
        raise n.unsupported(f"scales {factors} change an axis of symbolic size (input {tuple(x.shape)})")
    return [(a, int(math.floor(x.shape[a] * s)), s) for a, s in targets]


@onnx_op("Resize", "Upsample")
def _resize(n, x, *operands):
    x = require_float(n, x)
    if n.op_type == "Upsample" or n.opset < 11:
        roi, scales, sizes = None, (operands[0] if operands else np.asarray(n.attr("scales"), np.float32)), None
    else:
        roi, scales, sizes = (list(operands) + [None] * 3)[:3]
    mode = n.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic", "bilinear"):
        raise n.unsupported(f"mode {mode!r}")
    crops = _crops(n, x, roi)
    fill = n.attr("extrapolation_value", 0.0)
    for axis, size_out, scale in _targets(n, x, scales, sizes, crops):
        crop = crops.get(axis, (0.0, 1.0))
        weights = _interpolation_matrix(n, x.shape[axis], size_out, scale, crop)
        if mode == "nearest":
            x = F.take(x, weights.argmax(1).astype(np.int64), axis)
        else:
            x = F.swapaxes(F.matmul(F.swapaxes(x, axis, -1), weights.T.astype(x.dtype)), axis, -1)
        if _coordinates(n) == "tf_crop_and_resize":      # positions outside the input: extrapolation_value
            size_in = weights.shape[1]
            source = _source_positions("tf_crop_and_resize", size_in, size_out, scale, crop)
            outside = (source < 0) | (source > size_in - 1)
            if outside.any():
                shape = (size_out,) + (1,) * (x.ndim - axis - 1)
                x = F.where(outside.reshape(shape), np.asarray(fill, x.dtype), x)
    return F.identity(x)
