"""ONNX Runtime CPU strategies for convolutions and max pooling's gradient (the `ort-cpu` target).

The plain forms (ops/conv.py) are one Conv, ConvTranspose or ScatterElements each. MLAS, ONNX
Runtime's CPU kernels, runs some of them far below its speed: a convolution with more filters
than output positions expands each image on one thread, a stride-1 ConvTranspose scatters each
image on one thread, and a weight gradient's Conv (huge kernels, tiny outputs) is several times
slower than products per kernel tap. The strategies below are plain ai.onnx all the same; what
each buys, and where its thresholds come from, is measured in docs/strategies.md.
tests/lowering/test_strategies.py checks each against the plain form on
both sides of every threshold.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ....ir import dims
from ....ir.graph import tensor_type
from ....ops.conv import kernel_taps, out_sizes, tap_window, transpose_geometry, window_attrs
from ..base import strategy
from .reduce import sum_or_product as leading_sum

# The fewest images for which a Conv with more filters than output positions is split in two (see
# _conv_in_halves): with one or two images the halves' per-image threads have nothing to share.
HALVES_MIN_BATCH = 8


def _conv_in_halves(node, groups: int, kernel, stride, pad) -> bool:
    """Whether a float32 Conv runs faster as two Convs of half the filters each, joined by a Concat.
    MLAS (ONNX Runtime's CPU kernels) convolves an image with more filters than output
    positions by expanding it whole and multiplying it with a GEMM that two threads do not
    speed up; with at most as many filters as positions it gives each thread whole images.
    Beyond twice as many filters as positions the halves still take the slow path, and more
    pieces expand each image once per piece. A pointwise Conv (1x1, stride 1, no padding) is a
    GEMM as it is. Measurements: docs/strategies.md."""
    out = node.outputs[0].shape
    if groups != 1 or node.outputs[0].dtype != np.float32 or not all(isinstance(d, int) for d in out):
        return False
    if all(k == 1 for k in kernel) and all(s == 1 for s in stride) and not any(map(any, pad)):
        return False
    positions = math.prod(out[2:])
    return out[0] >= HALVES_MIN_BATCH and positions < out[1] <= 2 * positions


# A depthwise convolution (one input and one output channel per group, 2-D, stride 1, no
# dilation) in float32 takes _banded_depthwise_conv from this many kernel taps (MLAS has a direct
# kernel for 3x3) while its output rows are at most BANDED_MAX_WIDTH kernel widths long: the
# band's products do (output width / kernel width) times the arithmetic of the taps
# (docs/strategies.md).
BANDED_MIN_TAPS = 25
BANDED_MAX_WIDTH = 3


def _conv_as_bands(ctx, node, groups: int, kernel, stride, dilation) -> bool:
    """Whether the Conv that computes node (of node's x, to node's output) takes
    _banded_depthwise_conv."""
    x_type, out = ctx.graph.type_of(node.inputs[0]), node.outputs[0].shape
    if x_type.dtype != np.float32 or len(kernel) != 2 or groups < 2 or not dims.is_static(x_type.shape[1:]) \
            or not dims.is_static(out[1:]) or not x_type.shape[1] == out[1] == groups:
        return False
    return all(s == 1 for s in stride) and all(d == 1 for d in dilation) and min(x_type.shape[2:]) > 0 \
        and min(out[2:]) > 0 and math.prod(kernel) >= BANDED_MIN_TAPS and out[3] <= BANDED_MAX_WIDTH * kernel[1]


def _banded_depthwise_conv(ctx, names, node, kernel, pad) -> str:
    """A depthwise convolution (see _conv_as_bands) as one product per kernel row. ONNX Runtime's
    CPU Conv convolves group by group, expanding each image and channel into a column per tap
    for a product with one filter row: a fixed cost per image and channel that small images do
    not repay (ConvNeXt's 7x7 layers at 14x14 and 7x7). Here each kernel row's taps form a band
    matrix per channel (input columns x output columns; the row's padding, the columns no tap
    reads, is left out of it), and x, channels first, its rows moved by the kernel row's offset,
    is one (images x output rows, width) matrix per channel: one batched MatMul per kernel row,
    summed.
    The band's zeros meet every input column of the rows a kernel row reads: for a finite x
    they add nothing; an infinite or NaN x, whose outputs are not finite already, also reaches
    the other outputs of those output rows."""
    x_type = ctx.graph.type_of(node.inputs[0])
    channels, width = x_type.shape[1], x_type.shape[3]
    (kh, kw), ((top, bottom), (left, _)) = kernel, pad
    out_h, out_w = node.outputs[0].shape[2:]
    band = np.zeros((kw, width, out_w), x_type.dtype)         # band[b, i, j] = 1 where tap b of column j reads i
    for b, j in itertools.product(range(kw), range(out_w)):
        if 0 <= j + b - left < width:
            band[b, j + b - left, j] = 1
    w = ctx.emit("Reshape", [names[1], ctx.int64s([channels * kh, kw])])
    bands = ctx.emit("MatMul", [w, ctx.const(band.reshape(kw, width * out_w))])     # (C x rows, width x out_w)
    bands = ctx.emit("Reshape", [bands, ctx.int64s([channels, kh, width, out_w])])
    bands = ctx.emit("Split", [bands, ctx.int64s([1] * kh)], n_out=kh, axis=1) if kh > 1 else [bands]
    x = ctx.emit("Transpose", [names[0]], perm=[1, 0, 2, 3])                       # (C, N, H, W)
    x = _zero_padded(ctx, x, [(top, bottom)], 2)
    rows, band_shape, axis = ctx.int64s([channels, -1, width]), ctx.int64s([channels, width, out_w]), ctx.int64s([2])
    parts = [ctx.emit("MatMul", [ctx.emit("Reshape", [ctx.emit("Slice", [x, ctx.int64s([a]), ctx.int64s([a + out_h]),
                                                                        axis]), rows]),
                                 ctx.emit("Reshape", [bands[a], band_shape])])
             for a in range(kh)]
    y = ctx.emit("Sum", parts) if kh > 1 else parts[0]                             # (C, N x out_h, out_w)
    if len(names) > 2:
        y = ctx.emit("Add", [y, ctx.emit("Reshape", [names[2], ctx.int64s([channels, 1, 1])])])
    y = ctx.emit("Reshape", [y, ctx.int64s([channels, -1, out_h, out_w])])
    return ctx.emit("Transpose", [y], perm=[1, 0, 2, 3])


def _emit_conv(ctx, names, node, groups: int, kernel, stride, pad, dilation) -> str:
    """A Conv of names = [x, w(, b)], as banded products or in two halves of the filters where
    that is faster."""
    if _conv_as_bands(ctx, node, groups, kernel, stride, dilation):
        return _banded_depthwise_conv(ctx, names, node, kernel, pad)
    attrs = dict(group=groups, **window_attrs(kernel, stride, pad, dilation))
    if not _conv_in_halves(node, groups, kernel, stride, pad):
        return ctx.emit("Conv", names, **attrs)
    filters = node.outputs[0].shape[1]
    sizes = ctx.int64s([(filters + 1) // 2, filters // 2])
    halves = [ctx.emit("Split", [name, sizes], n_out=2, axis=0) for name in names[1:]]
    return ctx.emit("Concat", [ctx.emit("Conv", [names[0], *part], **attrs) for part in zip(*halves)], axis=1)


def _as_conv(kernel, stride, pad, dilation, output_padding) -> bool:
    """Whether a conv_transpose is a Conv of the flipped kernel: at stride 1, when no side is
    padded more than the kernel's reach (the Conv's own padding is what is left of it)."""
    return all(s == 1 and op == 0 and max(p) <= d * (k - 1)
               for k, s, p, d, op in zip(kernel, stride, pad, dilation, output_padding))


def _conv_transpose_as_conv(ctx, names, node, pad, dilation, groups):
    """A stride-1 ConvTranspose as the Conv it equals: the kernel flipped in every spatial axis,
    input and output channels swapped within each group, padded by the kernel's reach less the
    transpose's padding. ONNX Runtime's ConvTranspose scatters each image's columns back into
    the image on one thread; its Conv gathers them on all (docs/strategies.md). The flip and the
    swap touch only the kernel."""
    w_shape = ctx.graph.type_of(node.inputs[1]).shape
    ci, co_g, kernel = w_shape[0], w_shape[1], tuple(w_shape[2:])
    nsp = len(kernel)
    spatial = list(range(2, 2 + nsp))
    w = ctx.reverse(names[1], spatial, kernel)
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
# products with so few columns run MLAS far below its speed (a 7x7 stem over RGB; docs/strategies.md).
FEW_CHANNELS = 8

# Output positions per chunk of the weight gradient's contraction below which whole images are
# grouped into chunks (see _weight_grad_chunks).
WEIGHT_GRAD_MIN_CONTRACTION = 512


def _weight_grad_chunks(batch, positions: int) -> int | None:
    """How many chunks the weight gradient's contraction over batch x output positions is split
    into, None for one per image: ONNX Runtime splits a product among threads by its rows and
    columns only, never along the contraction, and here those are two channel counts, so one
    long product runs on one core. Products per image, summed after, run on every core and need
    no transposes; but short ones spend their time starting up, so there images are grouped
    until a chunk contracts at least WEIGHT_GRAD_MIN_CONTRACTION positions, where the batch is
    static (docs/strategies.md)."""
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
# short (docs/strategies.md).
DEPTHWISE_FLAT_MIN_LENGTH = 128


def _depthwise_weight_grad(ctx, names, node, batch: int):
    """The weight gradient of a convolution with one input channel per group (depthwise) as one
    Conv with a group per image and channel: x as one image of N*C channels, g as N*Co kernels of
    the output's size; the forward's stride is its dilation, the forward's dilation its stride;
    the images' results are summed. Per kernel tap, a depthwise gradient is one multiply-and-sum
    per channel, which as products is N*C one-by-one GEMMs per tap, far slower than one grouped
    Conv at large kernels. At 3x3 and stride 1 the Conv is slower on one thread, hence
    DEPTHWISE_CONV_MIN_TAPS; strided, it is faster on one thread and two, hence
    DEPTHWISE_STRIDED_CONV_MIN_TAPS (docs/strategies.md)."""
    a = node.attrs
    kernel, nsp = a["kernel"], len(a["kernel"])
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    channels, co, out = x_type.shape[1], g_type.shape[1], g_type.shape[2:]
    x = ctx.emit("Reshape", [names[0], ctx.int64s([1, batch * channels, *x_type.shape[2:]])])
    g = ctx.emit("Reshape", [names[1], ctx.int64s([batch * co, 1, *out])])
    gw = ctx.emit("Conv", [x, g], group=batch * channels,
                  **window_attrs(out, a["dilation"], a["pad"], a["stride"]))        # (1, N*Co, >= kernel)
    reach = out_sizes(x_type.shape[2:], out, a["dilation"], a["pad"], a["stride"])
    if tuple(reach) != tuple(kernel):    # the positions past the kernel (a strided forward's leftover)
        gw = ctx.emit("Slice", [gw, ctx.int64s([0] * nsp), ctx.int64s(kernel), ctx.int64s(range(2, 2 + nsp))])
    gw = leading_sum(ctx, ctx.emit("Reshape", [gw, ctx.int64s([batch, co, *kernel])]),
                    tensor_type(x_type.dtype, (batch, co, *kernel)), [0], False)
    return ctx.emit("Reshape", [gw, ctx.int64s([co, 1, *kernel])])


def _flat_window_length(x_type, out, pad) -> int:
    """The length of _depthwise_flat_weight_grad's windows (the output's rows times the padded
    frame's row length), 0 where a size is not static or the output is empty."""
    if not (dims.is_static(x_type.shape[1:]) and dims.is_static(out)) or math.prod(out) == 0:
        return 0
    return out[0] * math.prod(n + sum(p) for n, p in zip(x_type.shape[3:], pad[1:]))


def _padded_to_frame(ctx, g: str, out, padded) -> str:
    """g (N, C, *out) padded with zeros at the end of every spatial axis but the first to the
    padded frame's sizes `padded`, so that its rows have the frame's strides; g itself if they match."""
    if list(out[1:]) == list(padded[1:]):
        return g
    return ctx.pad(g, [0] * (2 + len(out)), [0, 0, 0, *(p - o for p, o in zip(padded[1:], out[1:]))])


def _depthwise_flat_weight_grad(ctx, names, node, length: int):
    """The weight gradient of a stride-1 depthwise convolution (one input and one output channel
    per group) from flat windows. The padded x of each image and channel is one flat row (the
    padded frame, plus a spare row of zeros at the end for the last taps' reach); g, padded at
    the end of every spatial axis but the first to the frame's sizes, is a flat row with the
    same strides; so each kernel tap's window is one contiguous range of x's row (`length` long:
    _flat_window_length), offset by the tap's position in the frame, and the tap's weights are
    that range's dot products with g, one batched MatMul per tap. The per-tap windows cut on
    every spatial axis are copied one image row at a time and joined in a Concat, which this
    form avoids (faster on two threads, equal on one: docs/strategies.md).
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
    g = _padded_to_frame(ctx, names[1], out, padded)
    g = ctx.emit("Reshape", [g, ctx.int64s([0, channels, 1, length])])
    last, parts = ctx.int64s([3]), []
    for tap in kernel_taps(kernel):
        start = sum(t * d * f for t, d, f in zip(tap, a["dilation"], frame))
        window = ctx.emit("Slice", [x, ctx.int64s([start]), ctx.int64s([start + length]), last])
        parts.append(ctx.emit("MatMul", [g, ctx.emit("Transpose", [window], perm=[0, 1, 3, 2])]))   # (N, C, 1, 1)
    gw = ctx.emit("Concat", parts, axis=3) if len(parts) > 1 else parts[0]          # (N, C, 1, T)
    gw = leading_sum(ctx, gw, tensor_type(x_type.dtype, (x_type.shape[0], channels, 1, len(parts))),
                    [0], False)
    return ctx.emit("Reshape", [gw, ctx.int64s([channels, 1, *kernel])])


# The flat window length (output rows x padded row width, the length of the products MLAS runs)
# from which a stride-1 depthwise weight gradient of a 2-D convolution takes
# _depthwise_rows_weight_grad: below it the per-image-and-channel products are too short to make
# up for running on one thread (docs/strategies.md).
DEPTHWISE_ROWS_MIN_LENGTH = 80


def _depthwise_rows_weight_grad(ctx, names, node, batch: int):
    """The weight gradient of a stride-1 2-D convolution with one input channel per group
    (depthwise), as one Conv per kernel column that MLAS runs as a plain GEMM. MLAS multiplies
    without expanding the image when a kernel spans its input's whole width (one input channel,
    no padding, stride 1): each output row's window is then one contiguous run of the flat
    image. So g, padded at the right to the padded frame's width, is the kernel; x's padded frame
    per image and channel, flat, moved by the kernel column's offset, is the image; the Conv's
    output rows are the kernel rows' taps. The grouped Conv of depthwise_conv instead expands
    each image and channel into a column per tap.
    g's zero columns meet the x columns past each output row's reach (the next frame row's first
    ones among them): zero products for a finite x; an infinite or NaN x there, whose forward
    outputs are non-finite already, also reaches taps that never read it."""
    a = node.attrs
    (kh, kw), (dh, dw) = a["kernel"], a["dilation"]
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    groups, co, (out_h, out_w) = x_type.shape[1], g_type.shape[1], g_type.shape[2:]
    rows, cols = (n + sum(p) for n, p in zip(x_type.shape[2:], a["pad"]))
    reach = dw * (kw - 1)
    pad = [list(p) for p in a["pad"]]
    pad[0][1] += bool(reach)                                        # a spare row for the moved frames' ends
    x = _zero_padded(ctx, names[0], pad, 2)
    x = ctx.emit("Reshape", [x, ctx.int64s([batch * groups, (rows + bool(reach)) * cols])])
    g = _padded_to_frame(ctx, names[1], (out_h, out_w), (rows, cols))
    g = ctx.emit("Reshape", [g, ctx.int64s([batch * co, 1, out_h, cols])])
    frame, last, parts = ctx.int64s([1, batch * groups, rows, cols]), ctx.int64s([1]), []
    for column in range(kw):
        start = column * dw
        window = x if not reach else ctx.emit(
            "Slice", [x, ctx.int64s([start]), ctx.int64s([start + rows * cols]), last])
        parts.append(ctx.emit("Conv", [ctx.emit("Reshape", [window, frame]), g], group=batch * groups))
    gw = ctx.emit("Concat", parts, axis=3) if len(parts) > 1 else parts[0]      # (1, N*Co, reach rows, kw)
    if dh > 1:
        gw = ctx.emit("Slice", [gw, ctx.int64s([0]), ctx.int64s([dh * (kh - 1) + 1]), ctx.int64s([2]),
                                ctx.int64s([dh])])
    gw = leading_sum(ctx, ctx.emit("Reshape", [gw, ctx.int64s([batch, co, kh, kw])]),
                     tensor_type(x_type.dtype, (batch, co, kh, kw)), [0], False)
    return ctx.emit("Reshape", [gw, ctx.int64s([co, 1, kh, kw])])


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
    Co) against the patches as (images x positions, C x taps), where per tap a 16x16 patch
    embedding is 256 strided slices and products (docs/strategies.md)."""
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
    row, and a convolution's rows are short, so every move is one Pad of the joined positions
    (exact along the first spatial axis), and an inner axis's move, which then runs into the
    neighbouring row, is followed by a multiply by a 0/1 mask of the elements that came over the
    edge (an infinite value there gives NaN rather than 0). An inner axis that changes length,
    or moves in rows of FLAT_MOVE_MAX_ROW or more, pads as it is (docs/strategies.md)."""
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
    product per image takes every tap's g (T x Co columns) instead of slicing x's windows per
    tap (docs/strategies.md). A
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
    gw = leading_sum(ctx, gw, tensor_type(x_type.dtype, (x_type.shape[0], ci, taps * co)), [0], False)
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


def _taps_weight_grad(ctx, names, node):
    """gw[o, c, k] = sum over n, i of xpad[n, c, i*stride + k*dilation] * g[n, o, i]: each kernel
    tap's window of the padded x (at stride 1 a Pad of x that crops and zero-fills, _flat_move's,
    so the padded x is never made) contracted with g in one batched MatMul per tap, over the
    output positions of a chunk of images at once (per group; _weight_grad_chunks says how many);
    the chunks' products are summed and the taps' (Co, Ci) results joined last. Chunks of one
    image read x and g as they are; larger chunks first move the chunk's images next to the
    positions (a Transpose of each). The Conv of the plain form computes the same, but ONNX
    Runtime runs such huge-kernel, tiny-output convolutions several times slower; joining the
    windows first (im2col) and one long product copies x once more in the Concat.

    Strided: each tap's window is a plain slice of one of x's phases (the positions p, p + s,
    p + 2s, ... on each axis, one strided copy per phase a tap reads, where ONNX Runtime copies a
    strided slice of each tap element by element); with equal strides in 2-D, one SpaceToDepth
    makes every phase (_phase_blocks). Below FEW_CHANNELS input channels the taps' windows are
    joined and contracted in one product (products of so few columns run far below MLAS's speed)."""
    a = node.attrs
    groups, kernel = a["groups"], a["kernel"]
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    batch, out, nsp = x_type.shape[0], g_type.shape[2:], len(kernel)
    ci, co = x_type.shape[1] // groups, g_type.shape[1]
    nonempty = isinstance(batch, int) and batch > 0          # known when lowering
    strided = any(s > 1 for s in a["stride"])
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
        gw = leading_sum(ctx, gw, tensor_type(x_type.dtype, (taps, chunks or batch, co, ci)), [1], False)
    elif not nonempty:
        # onnxruntime's FusedMatMul leaves its output unwritten for an empty contraction (an empty
        # batch gave the arena's leftovers, 1e19), where the sum is zeros
        has_images = ctx.emit("Greater", [ctx.shape_tensor((batch,)), ctx.int64s([0])])
        gw = ctx.emit("Where", [has_images, gw, ctx.const(np.zeros((), x_type.dtype))])
    gw = ctx.emit("Transpose", [gw], perm=[1, 2, 0])                                 # (Co, Ci, T)
    return ctx.emit("Reshape", [gw, ctx.int64s([co, ci, *kernel])])



# -- registration ----------------------------------------------------------------------------------------
def _halves_guard(ctx, node) -> bool:
    a = node.attrs
    return _conv_in_halves(node, a["groups"], ctx.graph.type_of(node.inputs[1]).shape[2:], a["stride"], a["pad"])


def _banded_guard(ctx, node) -> bool:
    a = node.attrs
    return _conv_as_bands(ctx, node, a["groups"], ctx.graph.type_of(node.inputs[1]).shape[2:], a["stride"],
                          a["dilation"])


@strategy("ort-cpu", "conv", "depthwise_banded", _banded_guard, thresholds=("BANDED_MIN_TAPS", "BANDED_MAX_WIDTH"))
@strategy("ort-cpu", "conv", "halves", _halves_guard, thresholds=("HALVES_MIN_BATCH",))
def _conv_tuned(ctx, names, node):
    a = node.attrs
    kernel = ctx.graph.type_of(node.inputs[1]).shape[2:]
    return _emit_conv(ctx, names, node, a["groups"], kernel, a["stride"], a["pad"], a["dilation"])


def _as_conv_guard(ctx, node) -> bool:
    pad, extra, output_padding, crops = transpose_geometry(ctx, node)
    kernel = ctx.graph.type_of(node.inputs[1]).shape[2:]
    return not any(extra) and not crops and _as_conv(kernel, node.attrs["stride"], pad, node.attrs["dilation"],
                                                    output_padding)


@strategy("ort-cpu", "conv_transpose", "as_conv", _as_conv_guard)
def _conv_transpose_strategy(ctx, names, node):
    pad = transpose_geometry(ctx, node)[0]
    return _conv_transpose_as_conv(ctx, names, node, pad, node.attrs["dilation"], node.attrs["groups"])


def _weight_grad_facts(ctx, node) -> tuple:
    """(x's type, g's type, input channels per group, output channels, strided, a static nonempty batch)."""
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    batch = x_type.shape[0]
    return (x_type, g_type, x_type.shape[1] // node.attrs["groups"], g_type.shape[1],
            any(s > 1 for s in node.attrs["stride"]), isinstance(batch, int) and batch > 0)


def _depthwise_rows_guard(ctx, node) -> bool:
    x_type, g_type, ci, _, strided, nonempty = _weight_grad_facts(ctx, node)
    return ci == 1 and node.attrs["groups"] > 1 and nonempty and not strided and x_type.dtype == np.float32 \
        and len(node.attrs["kernel"]) == 2 and math.prod(node.attrs["kernel"]) > 1 \
        and _flat_window_length(x_type, g_type.shape[2:], node.attrs["pad"]) >= DEPTHWISE_ROWS_MIN_LENGTH


@strategy("ort-cpu", "conv_weight_grad", "depthwise_rows", _depthwise_rows_guard,
          thresholds=("DEPTHWISE_ROWS_MIN_LENGTH",))
def _depthwise_rows(ctx, names, node):
    return _depthwise_rows_weight_grad(ctx, names, node, ctx.graph.type_of(node.inputs[0]).shape[0])


def _depthwise_conv_guard(ctx, node) -> bool:
    x_type, _, ci, _, strided, nonempty = _weight_grad_facts(ctx, node)
    taps = math.prod(node.attrs["kernel"])
    return ci == 1 and nonempty and x_type.dtype != np.float64 \
        and taps >= (DEPTHWISE_STRIDED_CONV_MIN_TAPS if strided else DEPTHWISE_CONV_MIN_TAPS)


@strategy("ort-cpu", "conv_weight_grad", "depthwise_conv", _depthwise_conv_guard,
          thresholds=("DEPTHWISE_CONV_MIN_TAPS", "DEPTHWISE_STRIDED_CONV_MIN_TAPS"))
def _depthwise_conv(ctx, names, node):
    return _depthwise_weight_grad(ctx, names, node, ctx.graph.type_of(node.inputs[0]).shape[0])


def _depthwise_flat_guard(ctx, node) -> bool:
    x_type, g_type, ci, co, strided, _ = _weight_grad_facts(ctx, node)
    return ci == 1 and co == node.attrs["groups"] > 1 and not strided \
        and _flat_window_length(x_type, g_type.shape[2:], node.attrs["pad"]) >= DEPTHWISE_FLAT_MIN_LENGTH


@strategy("ort-cpu", "conv_weight_grad", "depthwise_flat", _depthwise_flat_guard,
          thresholds=("DEPTHWISE_FLAT_MIN_LENGTH",))
def _depthwise_flat(ctx, names, node):
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    return _depthwise_flat_weight_grad(ctx, names, node, _flat_window_length(x_type, g_type.shape[2:],
                                                                             node.attrs["pad"]))


def _patch_guard(ctx, node) -> bool:
    a = node.attrs
    x_type, _, _, _, _, nonempty = _weight_grad_facts(ctx, node)
    return tuple(a["stride"]) == tuple(a["kernel"]) and not any(any(p) for p in a["pad"]) and a["groups"] == 1 \
        and all(d == 1 for d in a["dilation"]) and nonempty and dims.is_static(x_type.shape) \
        and a["kernel"][-1] >= PATCH_MIN_WIDTH


@strategy("ort-cpu", "conv_weight_grad", "patches", _patch_guard, thresholds=("PATCH_MIN_WIDTH",))
def _patches(ctx, names, node):
    return _patch_weight_grad(ctx, names, node, ctx.graph.type_of(node.inputs[0]).shape[0])


def _shifts(ctx, node):
    """The shifts and axes of _shifted_weight_grad where it applies, else None."""
    a = node.attrs
    x_type, g_type, ci, co, strided, _ = _weight_grad_facts(ctx, node)
    out, kernel = g_type.shape[2:], a["kernel"]
    if a["groups"] != 1 or math.prod(kernel) <= 1 or not dims.is_static(x_type.shape[1:]) \
            or not dims.is_static(out) or math.prod(out) == 0:
        return None
    shifts = _tap_shifts(a, x_type.shape[2:], out)
    if not all(t[2] > 0 for tap in shifts for t in tap):
        return None
    x_axes = _shift_axes(shifts, ci, co)
    per_image = min(ci, co) >= FEW_CHANNELS and _weight_grad_chunks(x_type.shape[0], math.prod(out)) is None
    if strided and per_image or not strided and (co < FEW_CHANNELS <= ci and not x_axes
                                                 or per_image and len(x_axes) < len(kernel)):
        return shifts, x_axes
    return None


@strategy("ort-cpu", "conv_weight_grad", "shifted", lambda ctx, node: _shifts(ctx, node) is not None,
          thresholds=("FEW_CHANNELS", "WEIGHT_GRAD_MIN_CONTRACTION"))
def _shifted(ctx, names, node):
    shifts, x_axes = _shifts(ctx, node)
    return _shifted_weight_grad(ctx, names, node, shifts, x_axes)


strategy("ort-cpu", "conv_weight_grad", "taps", lambda ctx, node: True,
         thresholds=("FEW_CHANNELS", "WEIGHT_GRAD_MIN_CONTRACTION", "FLAT_MOVE_MAX_ROW"))(_taps_weight_grad)


def _unpool_accepts(window, pooled) -> bool:
    """Whether onnxruntime's MaxUnpool runs for this pooling: it refuses a size it infers below 1
    ((out - 1)·stride + kernel - pads, even with output_shape given), which happens where padding
    covers a whole window, and symbolic pooled sizes cannot be checked here."""
    kernel, stride, pad = window
    return all(isinstance(o, int) and (o - 1) * s + k - sum(p) >= 1
               for o, k, s, p in zip(pooled, kernel, stride, pad))


def _unpool_guard(ctx, node) -> bool:
    window = node.attrs.get("window")
    return window is not None and node.outputs[0].dtype != np.float64 \
        and _unpool_accepts(window, ctx.graph.type_of(node.inputs[0]).shape[2:])


@strategy("ort-cpu", "pool_scatter", "unpool", _unpool_guard)
def _unpool(ctx, names, node):
    """Indices of disjoint windows never repeat, so a plain write is the scatter-add: MaxUnpool,
    several times faster than ScatterElements with reduction="add" (no float64 kernel)."""
    return ctx.emit("MaxUnpool", [*names, ctx.shape_tensor(node.attrs["shape"])], **window_attrs(*node.attrs["window"]))
