"""Convolution and pooling, NCHW, 1-D to 3-D.

Closed under differentiation through adjoint pairs. conv(x, w) is bilinear: its adjoint in x
is conv_transpose and its adjoint in w is the internal op conv_weight_grad, and each of the
three ops' VJPs is built from the other two. max_pool records the flat index of each
maximum; its VJP scatters into zeros at those indices (pool_scatter), whose adjoint is a
gather at the same indices (pool_gather), and back. avg_pool's adjoint is avg_pool_grad
(a transposed window sum), whose adjoint is avg_pool.

Attributes: stride and dilation are int tuples, one per spatial axis; pad is a tuple of
(before, after) pairs. The channel and spatial dims must be static; the batch dim may be
symbolic.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from onnx import helper

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from ..ir.graph import tensor_type
from ..ir.registry import defop
from .basic import cast
from .elementwise import _promote, divide, floor
from .indexing import pad as pad_tensor
from .indexing import slice_axes, take_along_axis
from .reduce import mean
from .reduce import sum as reduce_sum
from .shape import broadcast_to, squeeze
from .shape_rules import require_float, same_dtype
from .windows import first_max, pool_geometry, window_positions, windows

__all__ = ["avg_pool", "conv", "conv_transpose", "global_avg_pool", "max_pool"]


# -- arguments -----------------------------------------------------------------------------------
def _ints(value, n: int, what: str, minimum: int) -> tuple:
    """An int or a sequence of n ints (each >= minimum) as a tuple of n ints."""
    values = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    if len(values) != n or not all(isinstance(v, (int, np.integer)) and v >= minimum for v in values):
        raise ShapeError(f"{what} must be an int >= {minimum} or {n} of them (one per spatial axis), "
                         f"got {value!r} (at {user_location()})")
    return tuple(int(v) for v in values)


def _pads(pad, n: int) -> tuple:
    """An int, or per spatial axis an int or a (before, after) pair, as n (before, after) pairs."""
    items = (pad,) * n if isinstance(pad, (int, np.integer)) else tuple(pad)
    pairs = [(p, p) if isinstance(p, (int, np.integer)) else tuple(p) if isinstance(p, (tuple, list)) else ()
             for p in items]
    if len(pairs) != n or any(len(p) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 0 for v in p)
                              for p in pairs):
        raise ShapeError(f"pad must be an int >= 0, or {n} of them or of (before, after) pairs, got {pad!r} "
                         f"(at {user_location()})")
    return tuple((int(a), int(b)) for a, b in pairs)


def _spatial_rank(x: Tensor, what: str) -> int:
    if x.ndim < 3:
        raise ShapeError(f"{what} needs x of shape (N, C, *spatial) with at least one spatial dim, got "
                         f"{format_shape(x.shape)} (at {user_location()})")
    return x.ndim - 2


def _conv_attrs(x, stride, pad, dilation, groups) -> dict:
    n = _spatial_rank(x, "convolution")
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ShapeError(f"groups must be a positive int, got {groups!r} (at {user_location()})")
    return dict(stride=_ints(stride, n, "stride", 1), pad=_pads(pad, n), dilation=_ints(dilation, n, "dilation", 1),
                groups=int(groups))


def _pool_attrs(x, kernel, stride, pad) -> dict:
    n = _spatial_rank(x, "pooling")
    kernel = _ints(kernel, n, "kernel", 1)
    return dict(kernel=kernel, stride=kernel if stride is None else _ints(stride, n, "stride", 1), pad=_pads(pad, n))


# -- shape rules ----------------------------------------------------------------------------------
def _out_sizes(in_size, kernel, stride, pad, dilation) -> tuple:
    """Output spatial size of a sliding window: floor((in + pads - dilation*(k-1) - 1) / stride) + 1."""
    out = tuple((i + p0 + p1 - d * (k - 1) - 1) // s + 1
                for i, k, s, (p0, p1), d in zip(in_size, kernel, stride, pad, dilation))
    if any(o < 1 for o in out):
        raise ShapeError(f"the window (kernel {tuple(kernel)}, dilation {tuple(dilation)}) is larger than the "
                         f"padded input {tuple(i + sum(p) for i, p in zip(in_size, pad))}")
    return out


def _transpose_sizes(in_size, kernel, stride, pad, dilation, output_padding) -> tuple:
    """Output spatial size of conv_transpose: (in-1)*stride - pads + dilation*(k-1) + output_padding + 1."""
    return tuple((i - 1) * s - p0 - p1 + d * (k - 1) + op + 1
                 for i, k, s, (p0, p1), d, op in zip(in_size, kernel, stride, pad, dilation, output_padding))


def _output_padding(in_size, out_size, kernel, stride, pad, dilation) -> tuple:
    """The output_padding that makes conv_transpose give back exactly `in_size` (the rows a strided
    conv skipped at the end)."""
    return tuple(i + p0 + p1 - d * (k - 1) - 1 - (o - 1) * s
                 for i, o, k, s, (p0, p1), d in zip(in_size, out_size, kernel, stride, pad, dilation))


def _check_nchw(t, nsp: int, what: str, layout: str = "(N, C, *spatial)") -> None:
    require_float(t, what)
    if t.ndim != nsp + 2:
        raise ShapeError(f"{what} must have shape {layout} with {nsp} spatial dims, got {format_shape(t.shape)}")
    if not dims.is_static(t.shape[1:]):
        raise ShapeError(f"{what} {format_shape(t.shape)}: channel and spatial dims must be static "
                         "(only the batch dim may be symbolic)")


def _check_bias(types, channels: int) -> None:
    if len(types) == 3 and types[2].shape != (channels,):
        raise ShapeError(f"bias must have shape ({channels},) (one per output channel), got "
                         f"{format_shape(types[2].shape)}")


def _conv_operands(types, nsp: int, w_layout: str):
    """x and w of a convolution-like op, checked to be N-C-spatial with a static weight shape."""
    x, w = types[:2]
    _check_nchw(x, nsp, "x")
    _check_nchw(w, nsp, "w", w_layout)
    if not dims.is_static(w.shape):
        raise ShapeError(f"w {format_shape(w.shape)} must have a static shape")
    return x, w


def _conv_infer(types, stride, pad, dilation, groups):
    x, w = _conv_operands(types, len(stride), "(C_out, C_in/groups, *kernel)")
    co, ci = w.shape[:2]
    if x.shape[1] != ci * groups:
        raise ShapeError(f"x {format_shape(x.shape)} has {x.shape[1]} channels but w {format_shape(w.shape)} "
                         f"takes {ci} per group x {groups} group(s) = {ci * groups}")
    if co % groups:
        raise ShapeError(f"w {format_shape(w.shape)} has {co} output channels, not divisible by groups={groups}")
    _check_bias(types, co)
    out = _out_sizes(x.shape[2:], w.shape[2:], stride, pad, dilation)
    return [tensor_type(same_dtype(types), (x.shape[0], co) + out)]


def _conv_transpose_infer(types, stride, pad, dilation, groups, output_padding):
    x, w = _conv_operands(types, len(stride), "(C_in, C_out/groups, *kernel)")
    if x.shape[1] != w.shape[0]:
        raise ShapeError(f"x {format_shape(x.shape)} has {x.shape[1]} channels but w {format_shape(w.shape)} "
                         f"takes {w.shape[0]}")
    if w.shape[0] % groups:
        raise ShapeError(f"w {format_shape(w.shape)} has {w.shape[0]} input channels, not divisible by "
                         f"groups={groups}")
    if any(not 0 <= op < max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
        raise ShapeError(f"output_padding {output_padding} must be >= 0 and smaller than the stride {stride} "
                         f"or the dilation {dilation} (the larger of the two, per axis, as in PyTorch)")
    co = w.shape[1] * groups
    _check_bias(types, co)
    out = _transpose_sizes(x.shape[2:], w.shape[2:], stride, pad, dilation, output_padding)
    if any(o < 1 for o in out):
        raise ShapeError(f"the padding {pad} removes the whole output (size {out})")
    return [tensor_type(same_dtype(types), (x.shape[0], co) + out)]


def _conv_weight_grad_infer(types, kernel, stride, pad, dilation, groups):
    x, g = types
    nsp = len(kernel)
    _check_nchw(x, nsp, "x")
    _check_nchw(g, nsp, "the output cotangent")
    if x.shape[0] != g.shape[0]:
        raise ShapeError(f"x {format_shape(x.shape)} and the output cotangent {format_shape(g.shape)} "
                         "have different batch sizes")
    if x.shape[1] % groups or g.shape[1] % groups:
        raise ShapeError(f"channels of x {format_shape(x.shape)} and of the output cotangent "
                         f"{format_shape(g.shape)} must be divisible by groups={groups}")
    out = _out_sizes(x.shape[2:], kernel, stride, pad, dilation)
    if out != g.shape[2:]:
        raise ShapeError(f"the output cotangent {format_shape(g.shape)} does not have the convolution's output "
                         f"size {out}")
    return [tensor_type(same_dtype(types), (g.shape[1], x.shape[1] // groups) + tuple(kernel))]


# -- numpy references: one strided slice per kernel tap ----------------------------------------------
def kernel_taps(kernel):
    """Every offset into the kernel, row-major (the references, the lowerings and gc.vmap's per-tap
    weight gradient walk them)."""
    return itertools.product(*(range(k) for k in kernel))


def tap_window(tap, stride, dilation, out) -> tuple:
    """Index of the (padded) input positions i*stride + tap*dilation read by output positions i."""
    return (Ellipsis,) + tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                               for t, s, d, o in zip(tap, stride, dilation, out))


def _zero_pad(x, pad):
    return np.pad(x, ((0, 0), (0, 0)) + tuple(pad))


def _with_bias(y, b):
    return y + b[0].reshape((-1,) + (1,) * (y.ndim - 2)) if b else y


def _conv_reference(x, w, *b, stride, pad, dilation, groups):
    n, ci, co, kernel = x.shape[0], x.shape[1], w.shape[0], w.shape[2:]
    out = _out_sizes(x.shape[2:], kernel, stride, pad, dilation)
    xp = _zero_pad(x, pad)
    xg = xp.reshape((n, groups, ci // groups) + xp.shape[2:])        # not -1: an empty batch is allowed
    wg = w.reshape((groups, co // groups) + w.shape[1:])
    y = np.zeros((n, groups, co // groups) + out, np.result_type(x, w))
    for tap in kernel_taps(kernel):
        y += np.einsum("ngc...,goc->ngo...", xg[tap_window(tap, stride, dilation, out)], wg[(Ellipsis,) + tap])
    return _with_bias(y.reshape((n, co) + out), b)


def _conv_transpose_reference(x, w, *b, stride, pad, dilation, groups, output_padding):
    n, kernel, co = x.shape[0], w.shape[2:], w.shape[1] * groups
    out = _transpose_sizes(x.shape[2:], kernel, stride, pad, dilation, output_padding)
    full = tuple(max((i - 1) * s + d * (k - 1) + 1, p0 + o)
                 for i, k, s, d, (p0, _), o in zip(x.shape[2:], kernel, stride, dilation, pad, out))
    y = np.zeros((n, groups, w.shape[1]) + full, np.result_type(x, w))
    xg = x.reshape((n, groups, x.shape[1] // groups) + x.shape[2:])
    wg = w.reshape((groups, w.shape[0] // groups) + w.shape[1:])
    for tap in kernel_taps(kernel):
        y[tap_window(tap, stride, dilation, x.shape[2:])] += np.einsum("ngc...,gco->ngo...", xg,
                                                                        wg[(Ellipsis,) + tap])
    crop = (Ellipsis,) + tuple(slice(p0, p0 + o) for (p0, _), o in zip(pad, out))
    return _with_bias(y[crop].reshape((n, co) + out), b)


def _conv_weight_grad_reference(x, g, *, kernel, stride, pad, dilation, groups):
    n, co, out = x.shape[0], g.shape[1], g.shape[2:]
    xp = _zero_pad(x, pad)
    xg = xp.reshape((n, groups, x.shape[1] // groups) + xp.shape[2:])
    gg = g.reshape((n, groups, co // groups, int(np.prod(out))))
    gw = np.zeros((groups, co // groups, xg.shape[2]) + tuple(kernel), np.result_type(x, g))
    for tap in kernel_taps(kernel):
        window = xg[tap_window(tap, stride, dilation, out)].reshape(xg.shape[:3] + (int(np.prod(out)),))
        gw[(Ellipsis,) + tap] = np.einsum("ngcs,ngos->goc", window, gg)
    return gw.reshape((co,) + gw.shape[2:])


# -- ONNX lowerings -------------------------------------------------------------------------------------
def _onnx_pads(pad) -> list:
    return [p[0] for p in pad] + [p[1] for p in pad]


def _window_attrs(kernel, stride, pad, dilation=None) -> dict:
    return dict(kernel_shape=list(kernel), strides=list(stride), pads=_onnx_pads(pad),
                dilations=None if dilation is None else list(dilation))


# The fewest images for which a Conv with more filters than output positions is split in two (see
# _conv_in_halves): with one or two images the halves' per-image threads have nothing to share.
HALVES_MIN_BATCH = 8


def _conv_in_halves(node, groups: int, kernel, stride, pad) -> bool:
    """Whether a float32 Conv runs faster as two Convs of half the filters each, joined by a Concat.
    MLAS (ONNX Runtime's CPU kernels, 1.31) convolves an image with more filters than output
    positions by expanding it whole and multiplying it with a GEMM that two threads do not
    speed up: 32 images of 8 x 8, 128 -> 128 channels, 3x3, took 4.6 ms on two threads and 4.5
    on one. With at most as many filters as positions it gives each thread whole images: the two
    halves took 3.3 ms (0.62-0.79 of the time from 7 x 7 to 14 x 14, 3x3 and 5x5, stride 1 and
    2; docs/performance.md), and on one thread 6.2. Beyond twice as many filters as positions
    the halves still take the slow path, and more pieces expand each image once per piece:
    four took 1.03 of the time. A pointwise Conv (1x1, stride 1, no padding) is a GEMM as it is."""
    out = node.outputs[0].shape
    if groups != 1 or node.outputs[0].dtype != np.float32 or not all(isinstance(d, int) for d in out):
        return False
    if all(k == 1 for k in kernel) and all(s == 1 for s in stride) and not any(map(any, pad)):
        return False
    positions = math.prod(out[2:])
    return out[0] >= HALVES_MIN_BATCH and positions < out[1] <= 2 * positions


def _emit_conv(ctx, names, node, groups: int, kernel, stride, pad, dilation) -> str:
    """A Conv of names = [x, w(, b)], in two halves of the filters where that is faster."""
    attrs = dict(group=groups, **_window_attrs(kernel, stride, pad, dilation))
    if not _conv_in_halves(node, groups, kernel, stride, pad):
        return ctx.emit("Conv", names, **attrs)
    filters = node.outputs[0].shape[1]
    sizes = ctx.int64s([(filters + 1) // 2, filters // 2])
    halves = [ctx.emit("Split", [name, sizes], n_out=2, axis=0) for name in names[1:]]
    return ctx.emit("Concat", [ctx.emit("Conv", [names[0], *part], **attrs) for part in zip(*halves)], axis=1)


def _lower_conv(ctx, names, node):
    a = node.attrs
    kernel = ctx.graph.type_of(node.inputs[1]).shape[2:]
    return _emit_conv(ctx, names, node, a["groups"], kernel, a["stride"], a["pad"], a["dilation"])


def _lower_conv_transpose(ctx, names, node):
    """ONNX Runtime refuses output_padding >= stride, which PyTorch allows below the dilation. The
    output_padding rows first take back rows the end padding crops; past the uncropped result the
    rows are zeros (plus the bias), so those are padded on after a ConvTranspose without them.
    Where the begin padding crops into those rows (ONNX Runtime refuses a ConvTranspose whose own
    output would be empty), the axis is convolved uncropped, padded, then sliced."""
    a = node.attrs
    x_type, kernel = (ctx.graph.type_of(r).shape[2:] for r in node.inputs[:2])
    out = node.outputs[0].shape[2:]
    pad, extra, output_padding, crops = list(a["pad"]), [], [], []
    for axis, (op, s, d) in enumerate(zip(a["output_padding"], a["stride"], a["dilation"])):
        before, after = pad[axis]
        taken = min(op, after)
        pad[axis], op = (before, after - taken), op - taken
        if isinstance(x_type[axis], int) and \
                (x_type[axis] - 1) * s + d * (kernel[axis] - 1) + 1 - before - pad[axis][1] <= 0:
            pad[axis] = (0, 0)
            extra.append(op)
            output_padding.append(0)
            crops.append((axis, before, before + out[axis]))
            continue
        extra.append(op if op >= s else 0)
        output_padding.append(0 if op >= s else op)
    if not any(extra) and not crops:
        if _as_conv(kernel, a["stride"], pad, a["dilation"], output_padding):
            return _conv_transpose_as_conv(ctx, names, node, pad, a["dilation"], a["groups"])
        return ctx.emit("ConvTranspose", names, group=a["groups"], output_padding=output_padding,
                        **_window_attrs(kernel, a["stride"], pad, a["dilation"]))
    y = ctx.emit("ConvTranspose", names[:2], group=a["groups"], output_padding=output_padding,
                 **_window_attrs(kernel, a["stride"], pad, a["dilation"]))
    if any(extra):
        y = ctx.pad(y, [0] * (2 + len(extra)), [0, 0, *extra])
    if len(names) == 3:
        y = ctx.emit("Add", [y, ctx.emit("Reshape", [names[2], ctx.int64s([-1] + [1] * len(extra))])])
    if crops:
        axes, starts, ends = zip(*crops)
        y = ctx.emit("Slice", [y, ctx.int64s(starts), ctx.int64s(ends), ctx.int64s([2 + k for k in axes])])
    return y


def _as_conv(kernel, stride, pad, dilation, output_padding) -> bool:
    """Whether a conv_transpose is a Conv of the flipped kernel: at stride 1, when no side is
    padded more than the kernel's reach (the Conv's own padding is what is left of it)."""
    return all(s == 1 and op == 0 and max(p) <= d * (k - 1)
               for k, s, p, d, op in zip(kernel, stride, pad, dilation, output_padding))


def _conv_transpose_as_conv(ctx, names, node, pad, dilation, groups):
    """A stride-1 ConvTranspose as the Conv it equals: the kernel flipped in every spatial axis,
    input and output channels swapped within each group, padded by the kernel's reach less the
    transpose's padding. ONNX Runtime's ConvTranspose scatters each image's columns back into
    the image on one thread; its Conv gathers them on all: a ResNet block's input gradient took
    5.8 ms as ConvTranspose and 4.0 ms as Conv with two threads (7.8 and 8.1 ms with one;
    docs/performance.md). The flip and the swap touch only the kernel."""
    w_shape = ctx.graph.type_of(node.inputs[1]).shape
    ci, co_g, kernel = w_shape[0], w_shape[1], tuple(w_shape[2:])
    nsp = len(kernel)
    spatial = list(range(2, 2 + nsp))
    w = ctx.reverse(names[1], spatial)
    if groups == 1:
        w = ctx.emit("Transpose", [w], perm=[1, 0, *spatial])
    else:
        w = ctx.emit("Reshape", [w, ctx.int64s([groups, ci // groups, co_g, *kernel])])
        w = ctx.emit("Transpose", [w], perm=[0, 2, 1, *(a + 1 for a in spatial)])
        w = ctx.emit("Reshape", [w, ctx.int64s([groups * co_g, ci // groups, *kernel])])
    reach = [d * (k - 1) for k, d in zip(kernel, dilation)]
    conv_pad = [(r - p0, r - p1) for r, (p0, p1) in zip(reach, pad)]
    return _emit_conv(ctx, [names[0], w, *names[2:]], node, groups, kernel, [1] * nsp, conv_pad, dilation)


# Input channels (per group) below which the weight gradient's taps share one product: per tap,
# products with so few columns run MLAS far below its speed (a 7x7 stem over RGB at 224x224,
# batch 32: 49 products of 3 columns took 218 of its 274 ms, PyTorch 74 ms in all).
FEW_CHANNELS = 8

# Output positions per chunk of the weight gradient's contraction below which whole images are
# grouped into chunks (see _weight_grad_chunks).
WEIGHT_GRAD_MIN_CONTRACTION = 512


def _weight_grad_chunks(batch, positions: int) -> int | None:
    """How many chunks the weight gradient's contraction over batch x output positions is split
    into, None for one per image: ONNX Runtime splits a product among threads by its rows and
    columns only, never along the contraction, and here those are two channel counts, so one
    long product ran on one core (11.5 ms with one thread, 12.0 with two, for a 32-channel 3x3
    layer at 32x32, batch 32). Products per image, summed after, run on every core (11.0 and
    7.7 ms) and need no transposes; but short ones (8x8 outputs, 128 channels: 14.2 ms against
    9.3 in one product) spend their time starting up, so there images are grouped until a chunk
    contracts at least WEIGHT_GRAD_MIN_CONTRACTION positions (6.5 ms), where the batch is static."""
    if positions >= WEIGHT_GRAD_MIN_CONTRACTION // 2:
        return None
    if not isinstance(batch, int) or batch < 1:
        return 1
    images = -(-WEIGHT_GRAD_MIN_CONTRACTION // positions)           # per chunk, at least
    return max(c for c in range(1, batch + 1) if batch % c == 0 and (batch // c >= images or c == 1))


# Kernel taps from which a depthwise weight gradient is one grouped Conv (_depthwise_weight_grad):
# from DEPTHWISE_CONV_MIN_TAPS at every stride, from DEPTHWISE_STRIDED_CONV_MIN_TAPS when strided.
DEPTHWISE_CONV_MIN_TAPS = 25
DEPTHWISE_STRIDED_CONV_MIN_TAPS = 9

# The flat window length (output rows x padded row width) from which a stride-1 depthwise weight
# gradient takes _depthwise_flat_weight_grad: below it, its N x C dot products per tap are too
# short (7x7 outputs, 16 x 960 channels: 19 ms against the taps' slices' 13).
DEPTHWISE_FLAT_MIN_LENGTH = 128


def _depthwise_weight_grad(ctx, names, node, batch: int):
    """The weight gradient of a convolution with one input channel per group (depthwise) as one
    Conv with a group per image and channel: x as one image of N*C channels, g as N*Co kernels of
    the output's size; the forward's stride is its dilation, the forward's dilation its stride;
    the images' results are summed. Per kernel tap, a depthwise gradient is one multiply-and-sum
    per channel, which as products is N*C one-by-one GEMMs per tap: a 7x7 depthwise layer (32 x
    64 channels at 28x28) took 90 ms with one thread and 75 with two that way, 45 and 22 as one
    Conv. At 3x3 and stride 1 the Conv is slower on one thread (32 x 64 channels at 28x28: 32
    against 21 ms), hence DEPTHWISE_CONV_MIN_TAPS; strided, it is faster on one thread and two
    (stride 2, 32 x 64 x 28 x 28: 7.4 against 13.5 ms, 3.9 against 9.1; 32 x 32 x 112 x 112:
    27 against 67 on two threads), hence DEPTHWISE_STRIDED_CONV_MIN_TAPS."""
    a = node.attrs
    kernel, nsp = a["kernel"], len(a["kernel"])
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    channels, co, out = x_type.shape[1], g_type.shape[1], g_type.shape[2:]
    x = ctx.emit("Reshape", [names[0], ctx.int64s([1, batch * channels, *x_type.shape[2:]])])
    g = ctx.emit("Reshape", [names[1], ctx.int64s([batch * co, 1, *out])])
    gw = ctx.emit("Conv", [x, g], group=batch * channels,
                  **_window_attrs(out, a["dilation"], a["pad"], a["stride"]))        # (1, N*Co, >= kernel)
    reach = _out_sizes(x_type.shape[2:], out, a["dilation"], a["pad"], a["stride"])
    if tuple(reach) != tuple(kernel):    # the positions past the kernel (a strided forward's leftover)
        gw = ctx.emit("Slice", [gw, ctx.int64s([0] * nsp), ctx.int64s(kernel), ctx.int64s(range(2, 2 + nsp))])
    gw = ctx.reduce("ReduceSum", ctx.emit("Reshape", [gw, ctx.int64s([batch, co, *kernel])]),
                    tensor_type(x_type.dtype, (batch, co, *kernel)), [0], False)
    return ctx.emit("Reshape", [gw, ctx.int64s([co, 1, *kernel])])


def _flat_window_length(x_type, out, pad) -> int:
    """The length of _depthwise_flat_weight_grad's windows (the output's rows times the padded
    frame's row length), 0 where a size is not static or the output is empty."""
    if not (dims.is_static(x_type.shape[1:]) and dims.is_static(out)) or math.prod(out) == 0:
        return 0
    return out[0] * math.prod(n + sum(p) for n, p in zip(x_type.shape[3:], pad[1:]))


def _depthwise_flat_weight_grad(ctx, names, node, length: int):
    """The weight gradient of a stride-1 depthwise convolution (one input and one output channel
    per group) from flat windows. The padded x of each image and channel is one flat row (the
    padded frame, plus a spare row of zeros at the end for the last taps' reach); g, padded at
    the end of every spatial axis but the first to the frame's sizes, is a flat row with the
    same strides; so each kernel tap's window is one contiguous range of x's row (`length` long:
    _flat_window_length), offset by the tap's position in the frame, and the tap's weights are
    that range's dot products with g, one batched MatMul per tap. The per-tap windows cut on
    every spatial axis are copied one image row at a time and joined in a Concat; against them,
    3x3 on two threads: 32 x 64 channels at 28x28 9.9 ms instead of 15.5, 32 x 96 at 32x32 20
    instead of 29, 32 x 32 at 112x112 104 instead of 123 (on one thread: equal).
    g's zero columns meet the x columns past each output row's reach (the next frame row's first
    ones among them): zero products for a finite x; an infinite or NaN x there, whose forward
    outputs and so g are non-finite already, also reaches taps that never read it."""
    a = node.attrs
    kernel, nsp = a["kernel"], len(a["kernel"])
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    channels, out = x_type.shape[1], g_type.shape[2:]
    padded = [n + sum(p) for n, p in zip(x_type.shape[2:], a["pad"])]
    frame = [math.prod(padded[d + 1:]) for d in range(nsp)]            # each axis's stride in a row
    pad = [list(p) for p in a["pad"]]
    pad[0][1] += 1                                                     # the spare row
    x = _zero_padded(ctx, names[0], pad, 2)
    x = ctx.emit("Reshape", [x, ctx.int64s([0, channels, 1, (padded[0] + 1) * frame[0]])])
    g = names[1]
    if list(out[1:]) != padded[1:]:
        g = ctx.pad(g, [0] * (2 + nsp), [0, 0, 0, *(p - o for p, o in zip(padded[1:], out[1:]))])
    g = ctx.emit("Reshape", [g, ctx.int64s([0, channels, 1, length])])
    last, parts = ctx.int64s([3]), []
    for tap in kernel_taps(kernel):
        start = sum(t * d * f for t, d, f in zip(tap, a["dilation"], frame))
        window = ctx.emit("Slice", [x, ctx.int64s([start]), ctx.int64s([start + length]), last])
        parts.append(ctx.emit("MatMul", [g, ctx.emit("Transpose", [window], perm=[0, 1, 3, 2])]))   # (N, C, 1, 1)
    gw = ctx.emit("Concat", parts, axis=3) if len(parts) > 1 else parts[0]          # (N, C, 1, T)
    gw = ctx.reduce("ReduceSum", gw, tensor_type(x_type.dtype, (x_type.shape[0], channels, 1, len(parts))),
                    [0], False)
    return ctx.emit("Reshape", [gw, ctx.int64s([channels, 1, *kernel])])


# The patch width (last axis) from which tiling windows take _patch_weight_grad: its Transpose
# moves runs of that many elements, and onnxruntime moves short runs slowly (8x64x64x64, two
# threads, against the taps' slices and products: 2x2 patches 1.9x the time, 4x4 0.45x, 16x16 0.28x).
PATCH_MIN_WIDTH = 4


def _zero_padded(ctx, x: str, pad, lead: int) -> str:
    """x with a convolution's zero padding `pad` ((before, after) per spatial axis) on its last
    axes, after `lead` others; x itself when there is none."""
    if not any(any(p) for p in pad):
        return x
    return ctx.pad(x, [0] * lead + [p[0] for p in pad], [0] * lead + [p[1] for p in pad])


def _patch_weight_grad(ctx, names, node, batch: int):
    """The weight gradient of a convolution whose windows tile the input (kernel = stride, no
    padding or dilation, one group: a vision transformer's patch embedding): the columns are x's
    patches rearranged (one Transpose), so the gradient is one product, g as (images x positions,
    Co) against the patches as (images x positions, C x taps). Per tap, a 16x16 patch embedding
    was 256 strided slices and products: 120 ms against PyTorch's 27 for batch 32 at 224x224."""
    kernel, nsp = node.attrs["kernel"], len(node.attrs["kernel"])
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    channels, co, out = x_type.shape[1], g_type.shape[1], g_type.shape[2:]
    x = names[0]
    if any(o * k != size for o, k, size in zip(out, kernel, x_type.shape[2:])):     # rows no window reads
        x = ctx.emit("Slice", [x, ctx.int64s([0] * nsp), ctx.int64s([o * k for o, k in zip(out, kernel)]),
                               ctx.int64s(range(2, 2 + nsp))])
    split = [batch, channels] + [d for o, k in zip(out, kernel) for d in (o, k)]
    x = ctx.emit("Transpose", [ctx.emit("Reshape", [x, ctx.int64s(split)])],
                 perm=[0, *(2 + 2 * i for i in range(nsp)), 1, *(3 + 2 * i for i in range(nsp))])
    patches = ctx.emit("Reshape", [x, ctx.int64s([-1, channels * math.prod(kernel)])])
    g = ctx.emit("Transpose", [names[1]], perm=[0, *range(2, 2 + nsp), 1])
    g = ctx.emit("Reshape", [g, ctx.int64s([-1, co])])
    gw = ctx.emit("Gemm", [g, patches], transA=1)                                    # (Co, C x taps)
    return ctx.emit("Reshape", [gw, ctx.int64s([co, channels, *kernel])])


def _tap_shifts(attrs, size, out) -> list[tuple]:
    """Per kernel tap, per spatial axis: (phase, offset, phase length, g's size). For output index
    i the tap reads x at i·stride + dilation·tap - (padding before), which is element i + offset
    of x's phase `phase` (its elements phase, phase + stride, ...: the whole axis at stride 1),
    a sequence `phase length` long."""
    taps = []
    for tap in kernel_taps(attrs["kernel"]):
        axes = []
        for d, t, p, s, n, o in zip(attrs["dilation"], tap, attrs["pad"], attrs["stride"], size, out):
            phase, offset = (d * t - p[0]) % s, (d * t - p[0]) // s
            axes.append((phase, offset, -(-(n - phase) // s), o))
        taps.append(tuple(axes))
    return taps


def _moves(shifts, x_axes) -> tuple[list, list]:
    """Per tap, the Pad amounts (begins, ends per axis) that bring x's phase and g into one frame:
    on the axes in x_axes the phase moves (cropped and zero-filled to g's size), on the others g
    moves (to the phase's)."""
    xs, gs = [], []
    for tap in shifts:
        xs.append(tuple((-f, f + o - n) if a in x_axes else (0, 0) for a, (_, f, n, o) in enumerate(tap)))
        gs.append(tuple((0, 0) if a in x_axes else (f, n - o - f) for a, (_, f, n, o) in enumerate(tap)))
    return xs, gs


def _frame(tap, x_axes) -> int:
    """The positions of one tap's common frame: g's size along x_axes, the phase's along the others."""
    return math.prod(o if a in x_axes else n for a, (_, _, n, o) in enumerate(tap))


def _shift_axes(shifts, ci: int, co: int) -> frozenset:
    """The spatial axes along which the weight gradient moves x's phases (g moves along the others)
    that copy the fewest elements: each distinct move of a phase copies that phase, of g copies g
    (an empty move is free). A 3x3 layer of equal channels moves x along rows and g along
    columns: two copies of each, where moving x alone copied x eight times. Ties keep x still
    (fewer axes in x_axes). `shifts`: _tap_shifts'; ci, co: x's and g's channels."""
    nsp = len(shifts[0])
    best: frozenset = frozenset()
    best_cost = None
    for count in range(nsp + 1):
        for x_axes in map(frozenset, itertools.combinations(range(nsp), count)):
            copies: dict = {}
            for tap, xm, gm in zip(shifts, *_moves(shifts, x_axes)):
                phase = tuple(t[0] for t in tap)
                if any(any(m) for m in xm):
                    copies["x", phase, xm] = ci * _frame(tap, x_axes)
                if any(any(m) for m in gm):
                    copies["g", gm] = co * _frame(tap, x_axes)
            cost = sum(copies.values())
            if best_cost is None or cost < best_cost:
                best, best_cost = x_axes, cost
    return best


# Row length (a convolution's last spatial axis) up to which _flat_move moves an inner axis by a
# Pad of the joined positions and a mask rather than by a Pad of the rows themselves.
FLAT_MOVE_MAX_ROW = 48


def _flat_move(ctx, name: str, lead: int, move: tuple, extents: tuple, dtype, crop: tuple = (0, 0)) -> str:
    """name (`lead` axes, then spatial ones of `extents`) moved by `move` (a Pad's (begin, end) per
    spatial axis: zeros in, or elements out where negative) and with `crop` elements cut from
    each end of its last lead axis, its spatial axes joined into one. ONNX Runtime pads row by
    row, and a convolution's rows are short: a column move of 32 x 64 x 16 x 16 took 0.68 ms as
    a 4-D Pad, 0.13 as a Pad of the joined positions (8 x 8: 0.25 and 0.05). So every move is one
    Pad of the joined positions (exact along the first spatial axis), and an inner axis's move,
    which then runs into the neighbouring row, is followed by a multiply by a 0/1 mask of the
    elements that came over the edge (0.26 ms in all at 16 x 16, 0.09 at 8 x 8, 0.35 against
    0.53 at 32 x 32; an infinite value there gives NaN rather than 0). An inner axis that
    changes length, or moves in rows of FLAT_MOVE_MAX_ROW or more (even at 56 x 56), pads as
    it is."""
    keep = [0] * lead
    frame = math.prod(n + b + e for n, (b, e) in zip(extents, move))
    inner = any(b for b, _ in move[1:])                  # a move along an inner axis: masked below
    if any(b + e for b, e in move[1:]) or (inner and extents[-1] >= FLAT_MOVE_MAX_ROW):
        v = ctx.pad(name, [0] * (lead - 1) + [-crop[0], *(m[0] for m in move)],
                    [0] * (lead - 1) + [-crop[1], *(m[1] for m in move)])
        return ctx.emit("Reshape", [v, ctx.int64s([*keep, frame])])
    flat = ctx.emit("Reshape", [name, ctx.int64s([*keep, math.prod(extents)])])
    strides = [math.prod(extents[a + 1:]) for a in range(len(extents))]
    begin, end = (sum(m[i] * r for m, r in zip(move, strides)) for i in (0, 1))
    if not (any(crop) or begin or end or inner):
        return flat
    # moves that cancel in joined positions (a row down and a whole row left: a tap whose window
    # lies wholly in the padding) are no Pad at all, but the mask still zeroes what crossed an edge
    v = ctx.pad(flat, [0] * (lead - 1) + [-crop[0], begin], [0] * (lead - 1) + [-crop[1], end]) \
        if any(crop) or begin or end else flat
    if not inner:
        return v
    mask = np.ones((extents[0] + move[0][0] + move[0][1], *extents[1:]), dtype)
    for a, ((b, _), n) in enumerate(zip(move[1:], extents[1:]), start=1):
        index = np.arange(n)
        mask *= ((index >= b) & (index < n + b)).astype(dtype).reshape([-1] + [1] * (len(extents) - 1 - a))
    return ctx.emit("Mul", [v, ctx.const(mask.reshape(-1))])


def _shifted_weight_grad(ctx, names, node, shifts, x_axes: frozenset):
    """The weight gradient with x's phases and g moved into one frame per tap (_shift_axes says
    along which axes each moves), each distinct move one Pad that crops and zero-fills
    (_flat_move: of the joined positions), shared by the taps that need it: gw[:, :, t] = Σ over
    images and frame positions of moved phase times moved g, one product per tap per image (on
    every core). At stride 1 the phase is x itself;
    strided, each phase a tap reads is one strided Slice of x, and the taps of one phase are a
    stride-1 problem on it: a 3x3 stride-2 layer copies x once into its four phases and moves
    some of them, where slicing each tap's window from a zero-padded x copied it 4.4 times. Where
    g has fewer channels than x (and x has one phase), g moves along every axis and x is read as
    it is: with few outputs (a head that maps many channels to an image's RGB or a mask) one
    product per image takes every tap's g (T x Co columns); per tap, slicing x's windows (80
    channels at 64x64, batch 8) took 8 of the layer's 11 ms, this form 0.24 of the time. A
    non-finite value within the kernel's reach of the border meets zeros moved in around the
    other operand for taps that never pair them (NaN there, 0·inf); in a training step such an x
    has made the loss and g non-finite already."""
    a = node.attrs
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    ci, co, size, out, nsp = x_type.shape[1], g_type.shape[1], x_type.shape[2:], g_type.shape[2:], len(a["kernel"])
    moved: dict = {}
    stride = a["stride"]
    # onnxruntime copies a strided Slice element by element; SpaceToDepth moves x into its phases
    # (each a block of channels) at 0.4-0.5 of that time, where it applies
    blocks = ctx.emit("SpaceToDepth", [names[0]], blocksize=stride[0]) \
        if nsp == 2 and stride[0] == stride[1] > 1 and all(n % stride[0] == 0 for n in size) else None

    def phase_of(tap) -> tuple[str, tuple]:
        """The tensor holding the tap's phase of x, and the channels around it to crop."""
        phase = tuple(t[0] for t in tap)
        if all(s == 1 for s in stride):
            return names[0], (0, 0)
        if blocks is not None:
            before = (phase[0] * stride[0] + phase[1]) * ci
            return blocks, (before, (stride[0] * stride[1] - 1) * ci - before)
        if ("phase", phase) not in moved:
            moved["phase", phase] = ctx.emit("Slice", [names[0], ctx.int64s(phase), ctx.int64s(size),
                                                       ctx.int64s(range(2, 2 + nsp)), ctx.int64s(stride)])
        return moved["phase", phase], (0, 0)

    def variant(name, crop, move, extents):
        if (name, crop, move) not in moved:
            moved[name, crop, move] = _flat_move(ctx, name, 2, move, extents, x_type.dtype, crop)   # (N, C, P)
        return moved[name, crop, move]

    xs, gs = [], []
    for tap, xm, gm in zip(shifts, *_moves(shifts, x_axes)):
        xs.append(variant(*phase_of(tap), xm, tuple(t[2] for t in tap)))
        gs.append(variant(names[1], (0, 0), gm, tuple(out)))
    taps = len(xs)
    if co < FEW_CHANNELS and not x_axes and len(set(xs)) == 1:
        g = ctx.emit("Transpose", [ctx.emit("Concat", gs, axis=1)], perm=[0, 2, 1])
        gw = ctx.emit("MatMul", [xs[0], g])                                           # (N, Ci, T x Co)
    else:
        gw = ctx.emit("Concat", [ctx.emit("MatMul", [x, ctx.emit("Transpose", [g], perm=[0, 2, 1])])
                                 for x, g in zip(xs, gs)], axis=2)                    # (N, Ci, T x Co)
    gw = ctx.reduce("ReduceSum", gw, tensor_type(x_type.dtype, (x_type.shape[0], ci, taps * co)), [0], False)
    gw = ctx.emit("Transpose", [ctx.emit("Reshape", [gw, ctx.int64s([ci, taps, co])])], perm=[2, 0, 1])
    return ctx.emit("Reshape", [gw, ctx.int64s([co, ci, *a["kernel"]])])


def _phase_blocks(ctx, x: str, outer: tuple, block: int, pad, stride: int, size) -> str:
    """x (2-D, `outer` axes and then one of `block` elements before its spatial axes: (N, C), (C, N)
    or (chunks, C, images)) zero-padded by the convolution's padding and on to a multiple of the
    stride, then moved into its phases by one SpaceToDepth: the axis before the spatial ones
    becomes stride² blocks of it, block φh·stride + φw holding phase (φh, φw) of the padded
    frame, so a tap's window is a plain slice of one block. (SpaceToDepth takes 4-D tensors:
    two outer axes are joined around it.)"""
    ends = [p[1] + -(n + p[0] + p[1]) % stride for n, p in zip(size, pad)]
    lead = len(outer) + 1
    if any(p[0] for p in pad) or any(ends):     # (none: the same SpaceToDepth as another layer's of x, merged)
        x = ctx.pad(x, [0] * lead + [p[0] for p in pad], [0] * lead + ends)
    if lead == 2:
        return ctx.emit("SpaceToDepth", [x], blocksize=stride)
    frame = [(n + p[0] + e) // stride for n, p, e in zip(size, pad, ends)]
    x = ctx.emit("Reshape", [x, ctx.int64s([-1, block, *(f * stride for f in frame)])])
    x = ctx.emit("SpaceToDepth", [x], blocksize=stride)
    return ctx.emit("Reshape", [x, ctx.int64s([*outer, stride * stride * block, *frame])])


def _lower_conv_weight_grad(ctx, names, node):
    """gw[o, c, k] = sum over n, i of xpad[n, c, i*stride + k*dilation] * g[n, o, i]: copy each
    kernel tap's window of the padded x (at stride 1 one Pad of x that crops and zero-fills,
    _flat_move's, so the padded x is never made: 13 MB at 8 x 96 x 66 x 66, a tenth of that
    layer's gradient) and contract it with g in one batched MatMul per tap, over the output
    positions of a chunk of images at once (per group; _weight_grad_chunks says how many); the
    chunks' products are summed and the taps' (Co, Ci) results joined last. Chunks of one image read x and g as they
    are; larger chunks first move the chunk's images next to the positions (a Transpose of
    each). Joining the windows first (im2col) and running one long product copied the input
    once more in the Concat, 9 times its size for a 3x3 kernel: the per-tap products took 0.7x
    its time single-threaded and 0.9x with two threads (docs/performance.md). (A Conv with g as
    its kernel computes the same, but onnxruntime runs such huge-kernel, tiny-output
    convolutions several times slower.)

    Strided: each tap's window is a plain slice of one of x's phases (the positions p, p + s,
    p + 2s, ... on each axis, one strided copy per phase a tap reads): ONNX Runtime copies a
    strided slice element by element, so nine of them, one per tap of a stride-2 3x3 layer,
    took 35 of its 62 ms (32 x 64 x 56 x 56, two threads); with four phases the layer took 0.78
    of the time; with equal strides in 2-D, one SpaceToDepth makes every phase (_phase_blocks:
    0.9 of the time again at 16 x 16 and 8 x 8). Below FEW_CHANNELS input channels the taps'
    windows are joined and contracted in one product (a 7x7 stride-2 RGB stem: 0.23 of the
    time, 101 ms against PyTorch's 74). With enough outputs per image, the stride-1 and strided
    forms alike take _shifted_weight_grad instead."""
    a = node.attrs
    groups, kernel = a["groups"], a["kernel"]
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    batch, out, nsp = x_type.shape[0], g_type.shape[2:], len(kernel)
    ci, co = x_type.shape[1] // groups, g_type.shape[1]
    nonempty = isinstance(batch, int) and batch > 0          # known when lowering
    strided = any(s > 1 for s in a["stride"])
    if ci == 1 and nonempty and x_type.dtype != np.float64 \
            and math.prod(kernel) >= (DEPTHWISE_STRIDED_CONV_MIN_TAPS if strided else DEPTHWISE_CONV_MIN_TAPS):
        return _depthwise_weight_grad(ctx, names, node, batch)   # (not float64: onnxruntime has no such CPU Conv)
    flat_length = _flat_window_length(x_type, out, a["pad"])
    if ci == 1 and co == groups > 1 and not strided and flat_length >= DEPTHWISE_FLAT_MIN_LENGTH:
        return _depthwise_flat_weight_grad(ctx, names, node, flat_length)
    if tuple(a["stride"]) == tuple(kernel) and not any(any(p) for p in a["pad"]) and groups == 1 \
            and all(d == 1 for d in a["dilation"]) and nonempty and dims.is_static(x_type.shape) \
            and kernel[-1] >= PATCH_MIN_WIDTH:
        return _patch_weight_grad(ctx, names, node, batch)
    shifts = _tap_shifts(a, x_type.shape[2:], out) if groups == 1 and math.prod(kernel) > 1 \
        and dims.is_static(x_type.shape[1:]) and dims.is_static(out) and math.prod(out) > 0 else None
    if shifts is not None and all(t[2] > 0 for tap in shifts for t in tap):
        x_axes = _shift_axes(shifts, ci, co)
        per_image = min(ci, co) >= FEW_CHANNELS and _weight_grad_chunks(batch, math.prod(out)) is None
        if strided and per_image or not strided and (co < FEW_CHANNELS <= ci and not x_axes
                                                     or per_image and len(x_axes) < nsp):
            return _shifted_weight_grad(ctx, names, node, shifts, x_axes)
    chunks = _weight_grad_chunks(batch, math.prod(out))
    x, g = names
    # outer, block: x's axes before the spatial ones, the last (`block` long) where a SpaceToDepth
    # puts x's phases
    if chunks is None:                       # x as it is: (N, C, *S); a Reshape's 0 keeps N
        lead, k, stack = 2, math.prod(out), [0]
        outer, block = (batch,), x_type.shape[1]
    elif chunks == 1:                        # (C, N, *S)
        lead, k, stack = 2, -1, []
        outer, block = (x_type.shape[1],), batch
        x, g = (ctx.emit("Transpose", [v], perm=[1, 0, *range(2, 2 + nsp)]) for v in names)
    else:                                    # (chunks, C, images per chunk, *S)
        lead, k, stack = 3, -1, [chunks]
        outer, block = (chunks, x_type.shape[1]), batch // chunks
        x, g = (ctx.emit("Transpose", [ctx.emit("Reshape", [v, ctx.int64s([chunks, -1, c, *sizes])])],
                         perm=[0, 2, 1, *range(3, 3 + nsp)])
                for v, c, sizes in ((x, x_type.shape[1], x_type.shape[2:]), (g, co, out)))
    in_blocks = strided and nsp == 2 and a["stride"][0] == a["stride"][1] and isinstance(block, int) and block > 0 \
        and dims.is_static(x_type.shape[1:])
    if in_blocks:
        x = _phase_blocks(ctx, x, outer, block, a["pad"], a["stride"][0], x_type.shape[2:])
    elif strided:
        x = _zero_padded(ctx, x, a["pad"], lead)
    axes, per_group = ctx.int64s(range(lead, lead + nsp)), ctx.int64s([*stack, groups, ci, k])
    g = ctx.emit("Reshape", [g, ctx.int64s([*stack, groups, co // groups, k])])
    rank = len(stack) + 3
    parts, phases = [], {}
    padded = [i + sum(p) for i, p in zip(x_type.shape[2:], a["pad"])]
    for tap in kernel_taps(kernel):
        window = tap_window(tap, a["stride"], a["dilation"], out)[1:]
        if not strided:                      # the window straight from x: a Pad that crops and zero-fills
            begins = [p[0] - w.start for w, p in zip(window, a["pad"])]
            ends = [w.stop - p[0] - n for w, p, n in zip(window, a["pad"], x_type.shape[2:])]
            if not any(begins + ends):
                cols = x
            elif dims.is_static(x_type.shape[2:]):
                cols = _flat_move(ctx, x, lead, tuple(zip(begins, ends)), x_type.shape[2:], x_type.dtype)
            else:
                cols = ctx.pad(x, [0] * lead + begins, [0] * lead + ends)
        elif in_blocks:                      # a window of a phase: a block of x's axis lead - 1, shifted
            s = a["stride"][0]
            b, starts = (window[0].start % s) * s + window[1].start % s, [w.start // s for w in window]
            cols = ctx.emit("Slice", [x, ctx.int64s([b * block, *starts]),
                                      ctx.int64s([(b + 1) * block, *(f + o for f, o in zip(starts, out))]),
                                      ctx.int64s(range(lead - 1, lead + nsp))])
        else:                                # a window of one of x's phases (below), a copy of whole rows
            phase = tuple(w.start % s for w, s in zip(window, a["stride"]))
            if phase not in phases:
                phases[phase] = ctx.emit("Slice", [x, ctx.int64s(phase), ctx.int64s(padded), axes,
                                                   ctx.int64s(a["stride"])])
            starts = [w.start // s for w, s in zip(window, a["stride"])]
            lengths = [-(-(n - f) // s) for n, f, s in zip(padded, phase, a["stride"])]
            cols = phases[phase]
            if any(b or o != n for b, o, n in zip(starts, out, lengths)):
                cols = ctx.emit("Slice", [cols, ctx.int64s(starts), ctx.int64s([b + o for b, o in zip(starts, out)]),
                                          axes])
        parts.append(ctx.emit("Reshape", [cols, per_group]))                         # (chunks, G, Ci, K)
    taps = len(parts)
    if ci < FEW_CHANNELS and taps > 1:       # one product of all taps' windows (T x Ci of them)
        cols = ctx.emit("Concat", parts, axis=rank - 2)
        cols = ctx.emit("Transpose", [cols], perm=[*range(rank - 2), rank - 1, rank - 2])
        gw = ctx.emit("MatMul", [g, cols])                                            # (chunks, G, Co/G, T x Ci)
        gw = ctx.emit("Reshape", [gw, ctx.int64s([-1] * len(stack) + [co, taps, ci])])
        gw = ctx.emit("Transpose", [gw], perm=[2, 0, 1, 3] if stack else [1, 0, 2])   # as below: T first
    else:                                    # one product per tap
        for t, cols in enumerate(parts):
            cols = ctx.emit("Transpose", [cols], perm=[*range(rank - 2), rank - 1, rank - 2])
            gw = ctx.emit("MatMul", [g, cols])                                        # (chunks, G, Co/G, Ci)
            parts[t] = ctx.emit("Reshape", [gw, ctx.int64s([1] + [-1] * len(stack) + [co, ci])])
        gw = ctx.emit("Concat", parts, axis=0) if taps > 1 else parts[0]              # (T, chunks, Co, Ci)
    if stack:
        gw = ctx.reduce("ReduceSum", gw, tensor_type(x_type.dtype, (taps, chunks or batch, co, ci)), [1], False)
    elif not nonempty:
        # onnxruntime's FusedMatMul leaves its output unwritten for an empty contraction (an empty
        # batch gave the arena's leftovers, 1e19), where the sum is zeros
        has_images = ctx.emit("Greater", [ctx.shape_tensor((batch,)), ctx.int64s([0])])
        gw = ctx.emit("Where", [has_images, gw, ctx.const(np.zeros((), x_type.dtype))])
    gw = ctx.emit("Transpose", [gw], perm=[1, 2, 0])                                 # (Co, Ci, T)
    return ctx.emit("Reshape", [gw, ctx.int64s([co, ci, *kernel])])


# -- VJPs: each op of the bilinear triple differentiates into the other two ---------------------------
def _conv_params(a: dict) -> dict:
    return {k: a[k] for k in ("stride", "pad", "dilation", "groups")}


def _bias_grad(g: Tensor) -> Tensor:
    return reduce_sum(g, (0,) + tuple(range(2, g.ndim)))


def _transpose_to(g: Tensor, w: Tensor, in_size, params: dict) -> Tensor:
    """conv_transpose(g, w) sized to give back a conv input of spatial size `in_size`."""
    op = _output_padding(in_size, g.shape[2:], w.shape[2:], params["stride"], params["pad"], params["dilation"])
    return apply("conv_transpose", [g, w], output_padding=op, **params)


def _conv_vjp(g, ins, outs, **a):
    x, w = ins[:2]
    params = _conv_params(a)
    grads = [_transpose_to(g[0], w, x.shape[2:], params),
             apply("conv_weight_grad", [x, g[0]], kernel=w.shape[2:], **params)]
    return grads + [_bias_grad(g[0])] * (len(ins) - 2)


def _conv_transpose_vjp(g, ins, outs, output_padding, **a):
    u, w = ins[:2]
    params = _conv_params(a)
    # output_padding of a stride or more (allowed below the dilation) leaves whole strides of output
    # rows no input position reaches: the conv reading g back sees `extra` positions past u's end,
    # which are dropped (and u is zero-padded to match for the weight gradient)
    extra = [op // s for op, s in zip(output_padding, params["stride"])]
    gu = apply("conv", [g[0], w], **params)
    if any(extra):
        nsp = len(extra)
        gu = slice_axes(gu, range(2, 2 + nsp), [0] * nsp, u.shape[2:], [1] * nsp)
        u = pad_tensor(u, ((0, 0), (0, 0), *((0, e) for e in extra)))
    grads = [gu, apply("conv_weight_grad", [g[0], u], kernel=w.shape[2:], **params)]
    return grads + [_bias_grad(g[0])] * (len(ins) - 2)


def _conv_weight_grad_vjp(g, ins, outs, kernel, **params):
    x, gy = ins
    return [_transpose_to(gy, g[0], x.shape[2:], params), apply("conv", [x, g[0]], **params)]


defop("conv", infer=_conv_infer, reference=_conv_reference, lower=_lower_conv, vjp=_conv_vjp)
defop("conv_transpose", infer=_conv_transpose_infer, reference=_conv_transpose_reference,
      lower=_lower_conv_transpose, vjp=_conv_transpose_vjp)
defop("conv_weight_grad", infer=_conv_weight_grad_infer, reference=_conv_weight_grad_reference,
      lower=_lower_conv_weight_grad, vjp=_conv_weight_grad_vjp)


def conv(x, w, b=None, stride=1, pad=0, dilation=1, groups=1) -> Tensor:
    """N-D convolution (cross-correlation, as ONNX Conv) of x (N, C_in, *spatial) with
    w (C_out, C_in/groups, *kernel), plus b (C_out,) when given.

    stride and dilation: an int or one per spatial axis; pad: an int, one per axis, or one
    (before, after) pair per axis. Output size per axis:
    floor((in + pad_before + pad_after - dilation*(k-1) - 1) / stride) + 1.
    """
    x, w, *b = _promote(x, w, *(() if b is None else (b,)))
    return apply("conv", [x, w, *b], **_conv_attrs(x, stride, pad, dilation, groups))


def conv_transpose(x, w, b=None, stride=1, pad=0, dilation=1, groups=1, output_padding=0) -> Tensor:
    """The transpose (adjoint in x) of conv, as ONNX ConvTranspose: x (N, C_in, *spatial),
    w (C_in, C_out/groups, *kernel), b (C_out,). Output size per axis:
    (in-1)*stride - pad_before - pad_after + dilation*(k-1) + output_padding + 1,
    with 0 <= output_padding < max(stride, dilation) per axis (it adds rows at the end).
    """
    x, w, *b = _promote(x, w, *(() if b is None else (b,)))
    attrs = _conv_attrs(x, stride, pad, dilation, groups)
    attrs["output_padding"] = _ints(output_padding, x.ndim - 2, "output_padding", 0)
    return apply("conv_transpose", [x, w, *b], **attrs)


# -- max pooling and its flat scatter/gather adjoints ----------------------------------------------------
def _pool_infer(x, kernel, stride, pad) -> tuple:
    _check_nchw(x, len(kernel), "x")
    if any(max(p) >= k for p, k in zip(pad, kernel)):
        raise ShapeError(f"pooling pad {pad} must be smaller than the kernel {kernel} on every axis")
    return x.shape[:2] + _out_sizes(x.shape[2:], kernel, stride, pad, (1,) * len(kernel))


def _max_pool_reference(x, *, kernel, stride, pad):
    out = _out_sizes(x.shape[2:], kernel, stride, pad, (1,) * len(kernel))
    xp = np.pad(x, ((0, 0), (0, 0)) + pad, constant_values=-np.inf)
    flat = np.pad(np.arange(x.size).reshape(x.shape), ((0, 0), (0, 0)) + pad, constant_values=-1)
    best = np.full(x.shape[:2] + out, -np.inf, x.dtype)
    index = np.full(best.shape, -1, np.int64)
    for tap in kernel_taps(kernel):        # as onnxruntime: a window's first element, then any greater one
        window = tap_window(tap, stride, (1,) * len(kernel), out)
        better = (xp[window] > best) | ((index < 0) & (flat[window] >= 0))
        best = np.where(better, xp[window], best)
        index = np.where(better, flat[window], index)
    return best, index


def _lower_max_pool(ctx, names, node):
    a = node.attrs
    attrs = _window_attrs(a["kernel"], a["stride"], a["pad"])
    if ctx.is_read(node, 1):
        return ctx.emit("MaxPool", names, n_out=2, storage_order=0, **attrs)
    return ctx.emit("MaxPool", names, **attrs)     # the single-output kernel is the faster one


def _pool_scatter_infer(types, shape):
    g, idx = types
    require_float(g, "the scattered values")
    if idx.dtype != np.int64 or idx.shape != g.shape:
        raise ShapeError(f"pool_scatter needs int64 indices shaped like the values {format_shape(g.shape)}, got "
                         f"{idx.dtype.name}{format_shape(idx.shape)}")
    return [tensor_type(g.dtype, shape)]


def _pool_scatter_reference(g, idx, shape):
    out = np.zeros(math.prod(shape), g.dtype)
    np.add.at(out, idx.ravel(), g.ravel())
    return out.reshape(shape)


def _unpool_accepts(window, pooled) -> bool:
    """Whether onnxruntime's MaxUnpool runs for this pooling: it refuses a size it infers below 1
    ((out - 1)·stride + kernel - pads, even with output_shape given), which happens where padding
    covers a whole window, and symbolic pooled sizes cannot be checked here."""
    kernel, stride, pad = window
    return all(isinstance(o, int) and (o - 1) * s + k - sum(p) >= 1
               for o, k, s, p in zip(pooled, kernel, stride, pad))


def _lower_pool_scatter(ctx, names, node):
    shape, window = node.attrs["shape"], node.attrs.get("window")
    dtype = node.outputs[0].dtype
    pooled = ctx.graph.type_of(node.inputs[0]).shape[2:]
    if window is not None and dtype != np.float64 and _unpool_accepts(window, pooled):   # no double kernel
        # Indices of disjoint windows never repeat, so a plain write is the scatter-add; MaxUnpool
        # is several times faster than ScatterElements with reduction="add".
        return ctx.emit("MaxUnpool", [*names, ctx.shape_tensor(shape)], **_window_attrs(*window))
    zero = helper.make_tensor("value", helper.np_dtype_to_tensor_dtype(dtype), [1], [0])
    zeros = ctx.emit("ConstantOfShape", [ctx.shape_tensor((dims.product(shape),))], value=zero)
    flat = [ctx.emit("Reshape", [n, ctx.int64s([-1])]) for n in names]
    out = ctx.emit("ScatterElements", [zeros, flat[1], flat[0]], axis=0, reduction="add")
    return ctx.emit("Reshape", [out, ctx.shape_tensor(shape)])


def _pool_gather_infer(types):
    h, idx = types
    if idx.dtype != np.int64:
        raise ShapeError(f"pool_gather needs int64 indices, got {idx.dtype.name}")
    return [tensor_type(h.dtype, idx.shape)]


def _lower_pool_gather(ctx, names, node):
    return ctx.emit("Gather", [ctx.emit("Reshape", [names[0], ctx.int64s([-1])]), names[1]], axis=0)


def _max_pool_infer(types, kernel, stride, pad):
    shape = _pool_infer(types[0], kernel, stride, pad)
    return [tensor_type(types[0].dtype, shape), tensor_type(np.int64, shape)]


def _max_pool_vjp(g, ins, outs, kernel, stride, pad):
    disjoint = all(s >= k for s, k in zip(stride, kernel))
    return [apply("pool_scatter", [g[0], outs[1]], shape=ins[0].shape,
                  window=(kernel, stride, pad) if disjoint else None)]


defop("max_pool", infer=_max_pool_infer, reference=_max_pool_reference, lower=_lower_max_pool, n_outputs=2,
      vjp=_max_pool_vjp)
# Zeros of `shape` with each value added at its flat index (repeats accumulate), and its adjoint.
# `window` (kernel, stride, pad) says the indices come from a max_pool whose windows are disjoint,
# so none repeats; it only picks the faster lowering and travels through the adjoints.
defop("pool_scatter", infer=lambda types, shape, window=None: _pool_scatter_infer(types, shape),
      reference=lambda g, idx, shape, window=None: _pool_scatter_reference(g, idx, shape),
      lower=_lower_pool_scatter,
      vjp=lambda g, ins, outs, shape, window=None: [apply("pool_gather", [g[0], ins[1]], window=window), None])
defop("pool_gather", infer=lambda types, window=None: _pool_gather_infer(types),
      reference=lambda h, idx, window=None: h.ravel()[idx], lower=_lower_pool_gather,
      vjp=lambda g, ins, outs, window=None: [
          apply("pool_scatter", [g[0], ins[1]], shape=ins[0].shape, window=window), None])


def _torch_windows(x: Tensor, attrs: dict, dilation, ceil_mode: bool):
    """The spatial sizes (static), PyTorch's output size and the end padding ceil_mode needs."""
    _check_nchw(x.type, len(attrs["kernel"]), "x")
    out, extra = pool_geometry(x.shape[2:], attrs["kernel"], attrs["stride"], attrs["pad"], dilation, ceil_mode)
    return x.shape[2:], out, extra


def max_pool(x, kernel, stride=None, pad=0, dilation=1, ceil_mode: bool = False, return_indices: bool = False):
    """Maximum over each window, as torch's max_pool: stride defaults to the kernel, padding counts
    as -inf and must be smaller than the (dilated) kernel; ceil_mode rounds the output size up (the
    last window still starts inside the input or its padding). The gradient goes to the first
    maximum of each window. return_indices=True also returns, as torch, the int64 flat index of
    each maximum within its (N, C) plane.

    Without dilation or ceil_mode's extra windows this is ONNX MaxPool; otherwise the windows are
    strided slices of the -inf-padded input and their first maximum is picked (a NaN wins)."""
    x = as_tensor(x)
    attrs = _pool_attrs(x, kernel, stride, pad)
    dilation = _ints(dilation, len(attrs["kernel"]), "dilation", 1)
    extra: tuple = ()
    if ceil_mode or any(d > 1 for d in dilation):
        in_size, out, extra = _torch_windows(x, attrs, dilation, ceil_mode)
        if any(max(p) >= d * (k - 1) + 1 for p, k, d in zip(attrs["pad"], attrs["kernel"], dilation)):
            raise ShapeError(f"max_pool: pad {attrs['pad']} must be smaller than the dilated kernel on every axis "
                             f"(at {user_location()})")
    if not any(extra) and all(d == 1 for d in dilation):
        y, index = apply_n("max_pool", [x], **attrs)
        if not return_indices:
            return y
        plane = math.prod(x.shape[2:])        # ONNX's index is flat over the whole tensor, torch's over (N, C)
        return y, index - cast(floor(divide(index, plane)), np.int64) * plane
    before = [p[0] for p in attrs["pad"]]
    xp = pad_tensor(x, ((0, 0), (0, 0), *((b, a + e) for (b, a), e in zip(attrs["pad"], extra))), value=-np.inf)
    y, tap = first_max(windows(xp, attrs["kernel"], attrs["stride"], dilation, out))
    if not return_indices:
        return y
    table = window_positions(in_size, attrs["kernel"], attrs["stride"], dilation, out, before)
    return y, squeeze(take_along_axis(broadcast_to(table, x.shape[:2] + table.shape), tap, -1), -1)


# -- average pooling and its adjoint ----------------------------------------------------------------------
def _pool_counts(in_size, kernel, stride, pad, count_include_pad):
    """How many values each window averages: the whole kernel, or only its positions inside the input."""
    if count_include_pad:
        out = _out_sizes(in_size, kernel, stride, pad, (1,) * len(kernel))
        return np.full(out, float(math.prod(kernel)))
    ones = np.ones((1, 1) + tuple(kernel))
    return _conv_reference(np.ones((1, 1) + tuple(in_size)), ones, stride=stride, pad=pad,
                           dilation=(1,) * len(kernel), groups=1)[0, 0]


def _ones_kernel(kernel, dtype):
    return np.ones((1, 1) + tuple(kernel), dtype)


def _avg_pool_reference(x, *, kernel, stride, pad, count_include_pad):
    n, c = x.shape[:2]
    sums = _conv_reference(x.reshape((n * c, 1) + x.shape[2:]), _ones_kernel(kernel, x.dtype), stride=stride,
                           pad=pad, dilation=(1,) * len(kernel), groups=1)
    counts = _pool_counts(x.shape[2:], kernel, stride, pad, count_include_pad)
    return sums.reshape((n, c) + sums.shape[2:]) / counts


def _avg_pool_grad_infer(types, kernel, stride, pad, count_include_pad, in_size):
    g = types[0]
    _check_nchw(g, len(kernel), "the output cotangent")
    out = _out_sizes(in_size, kernel, stride, pad, (1,) * len(kernel))
    if g.shape[2:] != out:
        raise ShapeError(f"the output cotangent {format_shape(g.shape)} does not have the pooling's output "
                         f"size {out}")
    return [tensor_type(g.dtype, g.shape[:2] + tuple(in_size))]


def _avg_pool_grad_padding(in_size, kernel, stride, pad) -> tuple:
    out = _out_sizes(in_size, kernel, stride, pad, (1,) * len(kernel))
    return _output_padding(in_size, out, kernel, stride, pad, (1,) * len(kernel))


def _avg_pool_grad_reference(g, *, kernel, stride, pad, count_include_pad, in_size):
    n, c = g.shape[:2]
    scaled = g / _pool_counts(in_size, kernel, stride, pad, count_include_pad)
    x = _conv_transpose_reference(scaled.reshape((n * c, 1) + g.shape[2:]), _ones_kernel(kernel, g.dtype),
                                  stride=stride, pad=pad, dilation=(1,) * len(kernel), groups=1,
                                  output_padding=_avg_pool_grad_padding(in_size, kernel, stride, pad))
    return x.reshape((n, c) + tuple(in_size))


def _lower_avg_pool_grad(ctx, names, node):
    """Divide by the window counts (a constant: the spatial dims are static), then a transposed
    window sum: a one-channel ConvTranspose with a ones kernel over (N*C, 1, *out)."""
    a = node.attrs
    kernel, in_size = a["kernel"], a["in_size"]
    g_type = ctx.graph.type_of(node.inputs[0])
    dtype = g_type.dtype
    counts = _pool_counts(in_size, kernel, a["stride"], a["pad"], a["count_include_pad"])
    g = ctx.emit("Mul", [names[0], ctx.const((1 / counts).astype(dtype))])
    g = ctx.emit("Reshape", [g, ctx.int64s([-1, 1, *g_type.shape[2:]])])
    x = ctx.emit("ConvTranspose", [g, ctx.const(_ones_kernel(kernel, dtype))],
                 output_padding=list(_avg_pool_grad_padding(in_size, kernel, a["stride"], a["pad"])),
                 **_window_attrs(kernel, a["stride"], a["pad"]))
    return ctx.emit("Reshape", [x, ctx.shape_tensor(g_type.shape[:2] + tuple(in_size))])


defop("avg_pool", infer=lambda types, kernel, stride, pad, count_include_pad: [
          tensor_type(types[0].dtype, _pool_infer(types[0], kernel, stride, pad))],
      reference=_avg_pool_reference,
      lower=lambda ctx, names, node: ctx.emit(
          "AveragePool", names, count_include_pad=int(node.attrs["count_include_pad"]),
          **_window_attrs(node.attrs["kernel"], node.attrs["stride"], node.attrs["pad"])),
      vjp=lambda g, ins, outs, **a: [apply("avg_pool_grad", [g[0]], in_size=ins[0].shape[2:], **a)])
defop("avg_pool_grad", infer=_avg_pool_grad_infer, reference=_avg_pool_grad_reference, lower=_lower_avg_pool_grad,
      vjp=lambda g, ins, outs, in_size, **a: [apply("avg_pool", [g[0]], **a)])


def _torch_divisors(in_size, out, kernel, stride, pad, count_include_pad: bool) -> np.ndarray:
    """torch's avg_pool divisor per output position: the window's positions inside the input and
    its padding (count_include_pad), or inside the input only; the part ceil_mode adds past the
    padding never counts."""
    per_axis = []
    for i, o, k, s, (p0, p1) in zip(in_size, out, kernel, stride, pad):
        start = np.arange(o) * s - p0
        if count_include_pad:
            per_axis.append(np.minimum(start + k, i + p1) - start)
        else:
            per_axis.append(np.minimum(start + k, i) - np.maximum(start, 0))
    divisors = np.ones(())
    for k, counts in enumerate(per_axis):
        divisors = divisors[..., None] * counts.reshape((1,) * k + (-1,))
    return divisors


def avg_pool(x, kernel, stride=None, pad=0, count_include_pad: bool = False, ceil_mode: bool = False,
             divisor_override: int | None = None) -> Tensor:
    """Mean over each window (ONNX AveragePool); stride defaults to the kernel. Padded positions
    count in the divisor only with count_include_pad=True (torch's default is True, gcompile's
    False). The pad must be smaller than the kernel. ceil_mode rounds the output size up as torch
    does (the positions it adds past the padding never count); divisor_override divides every
    window's sum by that number instead."""
    x = as_tensor(x)
    attrs = _pool_attrs(x, kernel, stride, pad)
    if not ceil_mode and divisor_override is None:
        return apply("avg_pool", [x], count_include_pad=bool(count_include_pad), **attrs)
    if divisor_override is not None and (not isinstance(divisor_override, (int, np.integer)) or divisor_override < 1):
        raise ShapeError(f"avg_pool: divisor_override must be a positive int, got {divisor_override!r} "
                         f"(at {user_location()})")
    kernel, stride, pads = attrs["kernel"], attrs["stride"], attrs["pad"]
    in_size, out, extra = _torch_windows(x, attrs, (1,) * len(kernel), ceil_mode)
    if any(extra):   # zeros past the end (an AveragePool pad may not reach the kernel's size)
        x = pad_tensor(x, ((0, 0), (0, 0), *((0, e) for e in extra)))
    sums = apply("avg_pool", [x], count_include_pad=True, kernel=kernel, stride=stride, pad=pads)   # sum / prod(k)
    divisors = (np.full(out, float(divisor_override)) if divisor_override is not None else
                _torch_divisors(in_size, out, kernel, stride, pads, count_include_pad))
    return sums * (math.prod(kernel) / divisors).astype(sums.dtype)


def global_avg_pool(x) -> Tensor:
    """Mean over all spatial axes, kept as size-1 axes (ONNX GlobalAveragePool): (N, C, 1, ...)."""
    x = as_tensor(x)
    return mean(x, tuple(range(2, 2 + _spatial_rank(x, "global_avg_pool"))), keepdims=True)
