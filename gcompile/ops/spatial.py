"""Spatial ops on NCHW tensors, as PyTorch defines them: interpolate (upsample), adaptive average
and max pooling, grid_sample, pixel_shuffle / pixel_unshuffle, and unfold / fold (im2col and
col2im). Channel and spatial dims must be static; leading (batch) dims may be symbolic.

Linear resampling is separable: along each spatial axis the output is a fixed matrix (out, in)
times the input, with the matrix built from PyTorch's source-index rules. interpolate's linear
and cubic modes are one op, `resize`, lowered to ONNX Resize (checked to agree with PyTorch for
every mode here) whose gradient is the transposed resampling (matmuls with the transposed
matrices, so it differentiates again); nearest modes and adaptive average pooling are gathers and
matmuls with those matrices directly. The rest are compositions of gathers, slices and reshapes.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import defop
from .basic import cast
from .elementwise import _promote, abs, clip, equal, floor, greater_equal, less_equal, logical_and, round, where
from .indexing import pad, slice_axes, slice_scatter, take, take_along_axis
from .linalg import matmul
from .shape import broadcast_to, reshape, swapaxes, transpose
from .shape_rules import require_float
from .windows import first_max, windows

__all__ = ["adaptive_avg_pool", "adaptive_max_pool", "fold", "grid_sample", "interpolate", "pixel_shuffle",
           "pixel_unshuffle", "unfold", "upsample"]


def _image(x, what: str, ranks=(3, 4, 5)) -> Tensor:
    x = as_tensor(x)
    if x.ndim not in ranks or not dims.is_static(x.shape[1:]):
        raise ShapeError(f"{what} needs x of shape (N, C, *spatial) with {' or '.join(str(r - 2) for r in ranks)} "
                         f"static spatial dim(s), got {format_shape(x.shape)} (at {user_location()})")
    return x


def _per_axis(value, n: int, what: str, cast_to=int) -> tuple:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(values) != n:
        raise ShapeError(f"{what} must be one value or {n} (one per spatial axis), got {value!r} "
                         f"(at {user_location()})")
    return tuple(cast_to(v) for v in values)


# -- resampling matrices, one per spatial axis (out, in), from PyTorch's index rules -----------------
def _source_scale(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> float:
    """torch's area_pixel_compute_scale: the step in input coordinates per output position."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale else n_in / n_out


def _cubic_weights(t, a: float = -0.75) -> list:
    """Keys' cubic convolution weights (A = -0.75, as PyTorch) of the taps at offsets -1, 0, 1, 2, for
    t (an array or a Tensor) in [0, 1)."""
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def resample_matrix(n_in: int, n_out: int, mode: str, align_corners: bool = False,
                    scale: float | None = None) -> np.ndarray:
    """The (n_out, n_in) float64 matrix of 1-d resampling as torch.nn.functional.interpolate
    computes it: mode "nearest", "nearest-exact", "linear" or "cubic"; `scale` is the user's
    scale_factor for that axis, if given (torch then steps by 1/scale, not n_in/n_out)."""
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    if n_in == 0 or n_out == 0:
        return m
    if mode in ("nearest", "nearest-exact"):
        step = np.float32(1.0 / scale if scale else n_in / n_out)       # torch computes these in float
        shift = np.float32(0.5 if mode == "nearest-exact" else 0.0)
        src = np.minimum(np.floor((rows.astype(np.float32) + shift) * step).astype(np.int64), n_in - 1)
        m[rows, src] = 1
        return m
    step = _source_scale(n_in, n_out, align_corners, scale)
    src = rows * step if align_corners else (rows + 0.5) * step - 0.5
    if mode == "linear":
        src = np.maximum(src, 0)
        left = np.floor(src).astype(np.int64)
        lam = src - left
        right = np.minimum(left + 1, n_in - 1)
        np.add.at(m, (rows, left), 1 - lam)
        np.add.at(m, (rows, right), lam)
        return m
    left = np.floor(src).astype(np.int64)
    for offset, w in zip((-1, 0, 1, 2), _cubic_weights(src - left)):
        np.add.at(m, (rows, np.clip(left + offset, 0, n_in - 1)), w)
    return m


def _one_axis(x: Tensor, k: int, m: np.ndarray) -> Tensor:
    """The matrix m (out, in) applied along spatial axis k of x: a matmul on that axis moved last."""
    axis, last = 2 + k, x.ndim - 1
    moved = swapaxes(x, axis, last) if axis != last else x
    moved = matmul(moved, m.T.astype(x.dtype))
    return swapaxes(moved, axis, last) if axis != last else moved


def _along_axes(x, matrices, transposed: bool = False):
    """x (numpy or Tensor) with matrix k applied along spatial axis k (from axis 2): y = M x per axis,
    or M^T y with transposed=True (the adjoint)."""
    for k, m in enumerate(matrices):
        m = m.T if transposed else m
        if isinstance(x, np.ndarray):
            x = np.moveaxis(np.tensordot(x, m.T, ([2 + k], [0])), -1, 2 + k)
        else:
            x = _one_axis(x, k, m)
    return x


# -- the resize op (linear and cubic modes) -------------------------------------------------------------
def _resize_matrices(in_size, size, mode, align_corners, scales):
    return [resample_matrix(i, o, mode, align_corners, s)
            for i, o, s in zip(in_size, size, scales or (None,) * len(size))]


def _resize_infer(types, mode, align_corners, size, scales):
    x = types[0]
    require_float(x, "x")
    return [tensor_type(x.dtype, x.shape[:2] + tuple(size))]


def _resize_reference(x, mode, align_corners, size, scales):
    return _along_axes(x, _resize_matrices(x.shape[2:], size, mode, align_corners, scales)).astype(x.dtype)


def _resize_by_scales(in_size, size, scales) -> bool:
    """Whether ONNX Resize given these scales makes exactly `size`: it floors in * float32(scale)."""
    return scales is not None and all(math.floor(i * float(np.float32(s))) == o
                                      for i, o, s in zip(in_size, size, scales))


def _lower_resize(ctx, names, node):
    """ONNX Resize over the spatial axes with PyTorch's coordinate rules: half_pixel (the linear
    source index is clamped at 0 by ONNX Runtime as by torch) or align_corners; cubic with
    A = -0.75 and edge taps clamped. Given a scale_factor torch steps by 1/scale, which Resize
    does when given the scales. Where float32 scales would not make torch's output size, and for
    float64 (ONNX Runtime's CPU Resize has no double kernel), the matrices are applied as MatMuls."""
    a = node.attrs
    x_type = ctx.graph.type_of(node.inputs[0])
    in_size, nsp = x_type.shape[2:], len(a["size"])
    if x_type.dtype == np.float64 or a["scales"] is not None and not _resize_by_scales(in_size, a["size"],
                                                                                         a["scales"]):
        y = names[0]
        for k, m in enumerate(_resize_matrices(in_size, a["size"], a["mode"], a["align_corners"], a["scales"])):
            perm = list(range(2 + nsp))
            perm[2 + k], perm[-1] = perm[-1], perm[2 + k]
            y = ctx.emit("Transpose", [y], perm=perm)
            y = ctx.emit("MatMul", [y, ctx.const(m.T.astype(x_type.dtype))])
            y = ctx.emit("Transpose", [y], perm=perm)
        return y
    axes = list(range(2, 2 + nsp))
    mode_attrs = dict(mode=a["mode"], coordinate_transformation_mode="align_corners" if a["align_corners"]
                      else "half_pixel", axes=axes)
    if a["mode"] == "cubic":
        mode_attrs.update(cubic_coeff_a=-0.75, exclude_outside=0)
    if a["scales"] is not None:
        return ctx.emit("Resize", [names[0], "", ctx.const(np.asarray(a["scales"], np.float32))], **mode_attrs)
    return ctx.emit("Resize", [names[0], "", "", ctx.int64s(a["size"])], **mode_attrs)


def _resize_vjp(g, ins, outs, mode, align_corners, size, scales):
    return [_along_axes(g[0], _resize_matrices(ins[0].shape[2:], size, mode, align_corners, scales), transposed=True)]


defop("resize", infer=_resize_infer, reference=_resize_reference, lower=_lower_resize, vjp=_resize_vjp)


_MODES = {"nearest": (1, 2, 3), "nearest-exact": (1, 2, 3), "linear": (1,), "bilinear": (2,), "bicubic": (2,),
          "trilinear": (3,), "area": (1, 2, 3)}


def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None) -> Tensor:
    """torch.nn.functional.interpolate on (N, C, *spatial) with 1 to 3 spatial dims: give the output
    `size` or a `scale_factor` (output size floor(in * scale)); mode "nearest" (torch's index rule:
    floor(out_index * in/out), or * 1/scale_factor when that was given), "nearest-exact", "linear"
    (1-d), "bilinear" (2-d), "bicubic" (2-d, A = -0.75), "trilinear" (3-d) or "area" (adaptive
    average pooling to the output size, as torch); align_corners for the linear and cubic modes.
    recompute_scale_factor=True steps by in/out even when a scale_factor is given. The gradient is
    the transposed resampling."""
    x = _image(x, "interpolate")
    nsp = x.ndim - 2
    if mode not in _MODES or nsp not in _MODES[mode]:
        known = ", ".join(f"{m} ({'/'.join(f'{d}-d' for d in r)})" for m, r in _MODES.items())
        raise ShapeError(f"interpolate: mode {mode!r} does not apply to {nsp} spatial dim(s) of "
                         f"{format_shape(x.shape)}; modes: {known} (at {user_location()})")
    linear = mode in ("linear", "bilinear", "bicubic", "trilinear")
    if align_corners is not None and not linear:
        raise ShapeError(f"interpolate: align_corners applies to the linear and cubic modes only, not {mode!r} "
                         f"(at {user_location()})")
    if (size is None) == (scale_factor is None):
        raise ShapeError(f"interpolate: give exactly one of size and scale_factor (at {user_location()})")
    in_size = x.shape[2:]
    scales = None
    if size is not None:
        out = _per_axis(size, nsp, "size")
    else:
        scales = _per_axis(scale_factor, nsp, "scale_factor", float)
        if any(s <= 0 for s in scales):
            raise ShapeError(f"interpolate: scale_factor must be positive, got {scale_factor!r} "
                             f"(at {user_location()})")
        out = tuple(math.floor(i * s) for i, s in zip(in_size, scales))
        if recompute_scale_factor:
            scales = None
    if any(o < 1 for o in out):
        raise ShapeError(f"interpolate: output size {out} must be positive on every axis (at {user_location()})")
    if not is_float(x.dtype):
        raise ShapeError(f"interpolate needs a float x, got {x.dtype.name} (at {user_location()})")
    if mode == "area":
        return adaptive_avg_pool(x, out)
    if not linear:
        for k, (i, o) in enumerate(zip(in_size, out)):
            m = resample_matrix(i, o, mode, scale=None if scales is None else scales[k])
            if i != o or not np.array_equal(m, np.eye(i)):
                x = take(x, np.argmax(m, axis=1).astype(np.int64), axis=2 + k)
        return x
    kind = "cubic" if mode == "bicubic" else "linear"
    return apply("resize", [x], mode=kind, align_corners=bool(align_corners), size=out, scales=scales)


upsample = interpolate


# -- adaptive pooling -----------------------------------------------------------------------------------------
def _adaptive_bins(n_in: int, n_out: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling bins: [floor(i * in / out), ceil((i + 1) * in / out))."""
    return [((i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)) for i in range(n_out)]


def _adaptive_args(x, output_size, what: str):
    x = _image(x, what)
    nsp = x.ndim - 2
    out = tuple(i if o is None else o for i, o in zip(x.shape[2:], _per_axis(output_size, nsp, "output_size",
                                                                               lambda v: v)))
    if any(not isinstance(o, (int, np.integer)) or o < 1 for o in out):
        raise ShapeError(f"{what}: output_size must be positive ints (or None to keep a dim), got "
                         f"{output_size!r} (at {user_location()})")
    if any(i == 0 for i in x.shape[2:]):
        raise ShapeError(f"{what}: the spatial dims of {format_shape(x.shape)} must be non-empty "
                         f"(at {user_location()})")
    return x, tuple(int(o) for o in out)


def adaptive_avg_pool(x, output_size) -> Tensor:
    """torch's adaptive_avg_pool1d/2d/3d: the mean over PyTorch's bins [floor(i*in/out),
    ceil((i+1)*in/out)) (uneven and overlapping where out does not divide in); output_size is an
    int or one per spatial axis (None keeps that axis)."""
    x, out = _adaptive_args(x, output_size, "adaptive_avg_pool")
    if not is_float(x.dtype):
        raise ShapeError(f"adaptive_avg_pool needs a float x, got {x.dtype.name} (at {user_location()})")
    matrices = []
    for n_in, n_out in zip(x.shape[2:], out):
        m = np.zeros((n_out, n_in))
        for row, (start, end) in enumerate(_adaptive_bins(n_in, n_out)):
            m[row, start:end] = 1 / (end - start)
        matrices.append(m)
    for k, m in enumerate(matrices):
        if m.shape[0] != m.shape[1]:          # equal sizes: each bin is one element
            x = _one_axis(x, k, m)
    return x


def adaptive_max_pool(x, output_size, return_indices: bool = False):
    """torch's adaptive_max_pool1d/2d/3d over the same bins as adaptive_avg_pool: the first maximum
    of each bin (a NaN wins), which alone gets the gradient. return_indices=True also returns the
    int64 flat index of each maximum within its (N, C) plane, as torch."""
    x, out = _adaptive_args(x, output_size, "adaptive_max_pool")
    in_size = x.shape[2:]
    bins = [_adaptive_bins(i, o) for i, o in zip(in_size, out)]
    widths = [max(e - s for s, e in b) for b in bins]
    # each bin as `width` positions, short bins repeating their last element (the max is unchanged)
    picks = [np.array([[min(s + j, e - 1) for j in range(w)] for s, e in b], np.int64) for b, w in zip(bins, widths)]
    w = x
    for k, p in enumerate(picks):                  # axis 2 + 2k becomes (out_k, width_k)
        axis = 2 + 2 * k
        w = take(w, p, axis=axis)
    nsp = len(out)
    perm = [0, 1] + [2 + 2 * k for k in range(nsp)] + [3 + 2 * k for k in range(nsp)]
    w = reshape(transpose(w, perm), x.shape[:2] + out + (math.prod(widths),))
    y, tap = first_max(w)
    if not return_indices:
        return y
    flat = np.zeros(out + (math.prod(widths),), np.int64)
    for index in np.ndindex(*out, *widths):
        o, j = index[:nsp], index[nsp:]
        position = 0
        for k in range(nsp):
            position = position * in_size[k] + picks[k][o[k], j[k]]
        flat[o + (np.ravel_multi_index(j, widths),)] = position
    table = broadcast_to(flat, x.shape[:2] + flat.shape)
    return y, reshape(take_along_axis(table, tap, -1), y.shape)


# -- grid_sample ------------------------------------------------------------------------------------------------
def _reflect(pos: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """torch's reflect_coordinates: pos folded back and forth into [twice_low / 2, twice_high / 2]."""
    if twice_low == twice_high:
        return pos * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    p = abs(pos - low)
    flips = floor(p / span)
    extra = p - flips * span
    even = equal(flips - floor(flips / 2) * 2, 0)
    return where(even, extra + low, span - extra + low)


def _grid_coordinate(pos: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    """torch's compute_coordinates: a source position after the padding mode (zeros: unchanged)."""
    if padding_mode == "border":
        return clip(pos, 0, size - 1)
    if padding_mode == "reflection":
        pos = _reflect(pos, 0, 2 * (size - 1)) if align_corners else _reflect(pos, -1, 2 * size - 1)
        return clip(pos, 0, size - 1)
    return pos


def grid_sample(x, grid, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool = False) -> Tensor:
    """torch.nn.functional.grid_sample for x (N, C, H, W) with grid (N, H_out, W_out, 2) holding (x, y)
    sample locations in [-1, 1], or x (N, C, D, H, W) with grid (N, D_out, H_out, W_out, 3) holding
    (x, y, z): mode "bilinear" (trilinear on 5-d x), "nearest" (round half to even, as torch) or
    "bicubic" (4-d x, A = -0.75); padding_mode "zeros" (samples outside read 0), "border"
    (locations clamped to the edge) or "reflection" (locations reflected at the edges, then
    clamped); align_corners as torch (-1 and 1 are the centres of the corner pixels, else their
    outer edges). Differentiable in x and in grid (nearest's grid gradient is 0, as torch).

    Built from gathers of the flattened x at the corner indices, weighted; so it runs in float64
    and its gradients of every order come from gather and scatter-add."""
    x = _image(x, "grid_sample", ranks=(4, 5))
    x, grid = _promote(x, grid)
    nsp = x.ndim - 2
    n, c = x.shape[:2]
    spatial = tuple(x.shape[2:])
    if (grid.ndim != x.ndim or grid.shape[-1] != nsp or grid.shape[0] != n
            or not dims.is_static(grid.shape[1:])):
        raise ShapeError(f"grid_sample: grid must have shape (N, *out, {nsp}) with N = {n!r} of x "
                         f"{format_shape(x.shape)}, got {format_shape(grid.shape)} (at {user_location()})")
    if mode not in ("bilinear", "nearest", "bicubic") or padding_mode not in ("zeros", "border", "reflection") \
            or (mode == "bicubic" and nsp != 2):
        raise UnsupportedError(f"grid_sample: mode {mode!r} / padding_mode {padding_mode!r} is not supported for "
                               f"{nsp} spatial dims (modes: bilinear, nearest, and bicubic on 4-d x; padding: zeros, "
                               f"border, reflection) (at {user_location()})")
    require_float(x.type, "x")
    out = tuple(grid.shape[1:-1])
    length = math.prod(out)
    sizes = spatial[::-1]                                    # grid coordinate k addresses spatial axis nsp-1-k
    strides = [math.prod(spatial[nsp - k:]) for k in range(nsp)]
    coords = [reshape(slice_axes(grid, (nsp + 1,), (k,), (k + 1,), (1,)), (n, 1, length)) for k in range(nsp)]
    flat = reshape(x, (n, c, math.prod(spatial)))
    zero = np.zeros((), x.dtype)

    def unnormalise(coord: Tensor, size: int) -> Tensor:
        return (coord + 1) * ((size - 1) / 2) if align_corners else ((coord + 1) * size - 1) / 2

    def read(points: list) -> Tensor:
        """x at integer-valued float coordinates (each (N, 1, L)), 0 outside."""
        inside, index = None, None
        for p, size, stride in zip(points, sizes, strides):
            ok = logical_and(greater_equal(p, 0), less_equal(p, size - 1))
            inside = ok if inside is None else logical_and(inside, ok)
            term = cast(clip(p, 0, size - 1), np.int64) * stride
            index = term if index is None else index + term
        return where(inside, take_along_axis(flat, index, axis=2), zero)

    if mode == "bicubic":
        pos = [unnormalise(g, size) for g, size in zip(coords, sizes)]
        base = [floor(p) for p in pos]
        weights = [_cubic_weights(p - b) for p, b in zip(pos, base)]
        taps = [[_grid_coordinate(b + (t - 1), size, padding_mode, align_corners) for t in range(4)]
                for b, size in zip(base, sizes)]
        total = None
        for ty in range(4):
            for tx in range(4):
                term = read([taps[0][tx], taps[1][ty]]) * (weights[0][tx] * weights[1][ty])
                total = term if total is None else total + term
        return reshape(total, (n, c) + out)
    pos = [_grid_coordinate(unnormalise(g, size), size, padding_mode, align_corners) for g, size in zip(coords, sizes)]
    if mode == "nearest":
        return reshape(read([round(p) for p in pos]), (n, c) + out)
    low = [floor(p) for p in pos]
    frac = [p - lo for p, lo in zip(pos, low)]
    total = None
    for corner in itertools.product((0, 1), repeat=nsp):
        weight = None
        for k, bit in enumerate(corner):
            w = frac[k] if bit else 1 - frac[k]
            weight = w if weight is None else weight * w
        term = read([lo + bit for lo, bit in zip(low, corner)]) * weight
        total = term if total is None else total + term
    return reshape(total, (n, c) + out)


# -- pixel shuffle -------------------------------------------------------------------------------------------
def _factor(r, what: str) -> int:
    if not isinstance(r, (int, np.integer)) or r < 1:
        raise ShapeError(f"{what}: the factor must be a positive int, got {r!r} (at {user_location()})")
    return int(r)


def pixel_shuffle(x, upscale_factor: int) -> Tensor:
    """torch's pixel_shuffle: (*, C*r*r, H, W) -> (*, C, H*r, W*r), channel c*r*r + i*r + j going to
    the sub-pixel (i, j)."""
    x = as_tensor(x)
    r = _factor(upscale_factor, "pixel_shuffle")
    if x.ndim < 3 or not isinstance(x.shape[-3], int) or x.shape[-3] % (r * r):
        raise ShapeError(f"pixel_shuffle: x {format_shape(x.shape)} needs (*, C*{r * r}, H, W) "
                         f"(at {user_location()})")
    *lead, c, h, w = x.shape
    lead = tuple(lead)
    k = len(lead)
    y = reshape(x, lead + (c // (r * r), r, r, h, w))
    y = transpose(y, list(range(k + 1)) + [k + 3, k + 1, k + 4, k + 2])
    return reshape(y, lead + (c // (r * r), dims.product((h, r)), dims.product((w, r))))


def pixel_unshuffle(x, downscale_factor: int) -> Tensor:
    """torch's pixel_unshuffle, the inverse of pixel_shuffle: (*, C, H*r, W*r) -> (*, C*r*r, H, W)."""
    x = as_tensor(x)
    r = _factor(downscale_factor, "pixel_unshuffle")
    if x.ndim < 3 or not all(isinstance(d, int) and d % r == 0 for d in x.shape[-2:]):
        raise ShapeError(f"pixel_unshuffle: x {format_shape(x.shape)} needs (*, C, H*{r}, W*{r}) "
                         f"(at {user_location()})")
    *lead, c, h, w = x.shape
    lead = tuple(lead)
    k = len(lead)
    y = reshape(x, lead + (c, h // r, r, w // r, r))
    y = transpose(y, list(range(k + 1)) + [k + 2, k + 4, k + 1, k + 3])
    return reshape(y, lead + (dims.product((c, r * r)), h // r, w // r))


# -- unfold / fold ----------------------------------------------------------------------------------------------
def _window_args(kernel_size, dilation, padding, stride):
    kernel = _per_axis(kernel_size, 2, "kernel_size")
    dilation, stride = _per_axis(dilation, 2, "dilation"), _per_axis(stride, 2, "stride")
    pads = _per_axis(padding, 2, "padding")
    if min(kernel + dilation + stride) < 1 or min(pads) < 0:
        raise ShapeError(f"kernel_size, dilation and stride must be >= 1 and padding >= 0, got {kernel_size!r}, "
                         f"{dilation!r}, {stride!r}, {padding!r} (at {user_location()})")
    return kernel, dilation, pads, stride


def _blocks(size, kernel, dilation, pads, stride, what: str) -> tuple:
    out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, d, p, s in zip(size, kernel, dilation, pads, stride))
    if min(out) < 1:
        raise ShapeError(f"{what}: the window (kernel {kernel}, dilation {dilation}) does not fit the padded size "
                         f"{tuple(n + 2 * p for n, p in zip(size, pads))} (at {user_location()})")
    return out


def unfold(x, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.unfold (im2col) of (N, C, H, W) or (C, H, W): the sliding blocks as columns,
    (N, C*kh*kw, L) with L the number of blocks, channels outermost then kernel rows and columns."""
    x = as_tensor(x)
    batched = x.ndim == 4
    if x.ndim not in (3, 4) or not dims.is_static(x.shape[-3:]):
        raise ShapeError(f"unfold needs x of shape (N, C, H, W) or (C, H, W), static but for N, got "
                         f"{format_shape(x.shape)} (at {user_location()})")
    if not batched:
        x = reshape(x, (1,) + x.shape)
    kernel, dilation, pads, stride = _window_args(kernel_size, dilation, padding, stride)
    out = _blocks(x.shape[2:], kernel, dilation, pads, stride, "unfold")
    if any(pads):
        x = pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in pads))
    cols = windows(x, kernel, stride, dilation, out)                   # (N, C, oh, ow, kh*kw)
    cols = transpose(cols, (0, 1, 4, 2, 3))
    n, c = x.shape[:2]
    cols = reshape(cols, (n, c * math.prod(kernel), math.prod(out)))
    return cols if batched else reshape(cols, cols.shape[1:])


def fold_blocks(x: Tensor, size: tuple, kernel: tuple, dilation: tuple, pads: tuple, stride: tuple) -> Tensor:
    """col2im in any number of spatial dims: columns (N, C*prod(kernel), L), L the number of blocks of
    the padded image, summed back into (N, C, *size); `pads` holds (before, after) per axis. Each
    kernel tap's blocks are placed into the padded image by one strided slice_scatter."""
    nsp = len(kernel)
    padded = tuple(s + b + a for s, (b, a) in zip(size, pads))
    out = tuple((n - d * (k - 1) - 1) // s + 1 for n, k, d, s in zip(padded, kernel, dilation, stride))
    n, c = x.shape[0], dims.divide(x.shape[1], math.prod(kernel))
    blocks = reshape(x, (n, c) + kernel + out)
    axes = tuple(range(2, 2 + nsp))
    total = None
    for tap in itertools.product(*(range(k) for k in kernel)):
        block = reshape(slice_axes(blocks, axes, tap, tuple(t + 1 for t in tap), (1,) * nsp), (n, c) + out)
        starts = tuple(t * d for t, d in zip(tap, dilation))
        ends = tuple(st + s * (o - 1) + 1 for st, s, o in zip(starts, stride, out))
        placed = slice_scatter(block, (n, c) + padded, axes, starts, ends, stride)
        total = placed if total is None else total + placed
    return slice_axes(total, axes, tuple(b for b, _ in pads), tuple(b + s for (b, _), s in zip(pads, size)),
                      (1,) * nsp)


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.fold (col2im), the adjoint of unfold: columns (N, C*kh*kw, L) or
    (C*kh*kw, L) summed back into (N, C, *output_size), overlapping blocks adding up."""
    x = as_tensor(x)
    batched = x.ndim == 3
    if x.ndim not in (2, 3) or not dims.is_static(x.shape[-2:]):
        raise ShapeError(f"fold needs columns of shape (N, C*kh*kw, L) or (C*kh*kw, L), static but for N, got "
                         f"{format_shape(x.shape)} (at {user_location()})")
    if not batched:
        x = reshape(x, (1,) + x.shape)
    kernel, dilation, pads, stride = _window_args(kernel_size, dilation, padding, stride)
    size = _per_axis(output_size, 2, "output_size")
    out = _blocks(size, kernel, dilation, pads, stride, "fold")
    taps = math.prod(kernel)
    if x.shape[1] % taps or x.shape[2] != math.prod(out):
        raise ShapeError(f"fold: columns {format_shape(x.shape)} need C*{taps} rows and {math.prod(out)} blocks "
                         f"for kernel {kernel} and output_size {size} (at {user_location()})")
    y = fold_blocks(x, size, kernel, dilation, tuple((p, p) for p in pads), stride)
    return y if batched else reshape(y, y.shape[1:])

