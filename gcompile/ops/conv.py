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

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from ..ir.graph import tensor_type
from ..ir.registry import defop
from .basic import cast
from .elementwise import _promote, divide, floor, rsqrt
from .indexing import pad as pad_tensor
from .indexing import slice_axes, take_along_axis
from .reduce import mean
from .reduce import sum as reduce_sum
from .shape import broadcast_to, reshape, squeeze
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
def out_sizes(in_size, kernel, stride, pad, dilation) -> tuple:
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
    out = out_sizes(x.shape[2:], w.shape[2:], stride, pad, dilation)
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
    out = out_sizes(x.shape[2:], kernel, stride, pad, dilation)
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
    out = out_sizes(x.shape[2:], kernel, stride, pad, dilation)
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


# -- ONNX lowerings: the plain forms (strategies for a runtime: lowering/targets) ---------------------
def onnx_pads(pad) -> list:
    return [p[0] for p in pad] + [p[1] for p in pad]


def window_attrs(kernel, stride, pad, dilation=None) -> dict:
    return dict(kernel_shape=list(kernel), strides=list(stride), pads=onnx_pads(pad),
                dilations=None if dilation is None else list(dilation))


def _lower_conv(ctx, names, node):
    a = node.attrs
    kernel = ctx.graph.type_of(node.inputs[1]).shape[2:]
    return ctx.emit("Conv", names, group=a["groups"], **window_attrs(kernel, a["stride"], a["pad"], a["dilation"]))


def transpose_geometry(ctx, node) -> tuple[list, list, list, list]:
    """A ConvTranspose's (pad, extra, output_padding, crops) for conv_transpose's node. ONNX
    Runtime refuses output_padding >= stride, which PyTorch allows below the dilation: the
    output_padding rows first take back rows the end padding crops; past the uncropped result the
    rows are zeros (plus the bias), `extra` of them per axis, padded on after the ConvTranspose.
    Where the begin padding crops into those rows (a ConvTranspose whose own output would be
    empty, which ONNX Runtime refuses), the axis is convolved uncropped (pad (0, 0)), padded, and
    `crops` holds (axis, start, end) of the slice that gives the result."""
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
    return pad, extra, output_padding, crops


def _lower_conv_transpose(ctx, names, node):
    """A ConvTranspose, with the rows transpose_geometry says it cannot give padded on or sliced;
    grouped with more than one channel per group, for a target that does not take that
    (Target.grouped_conv_transpose), the Conv of _conv_transpose_as_conv."""
    a = node.attrs
    w_shape = ctx.graph.type_of(node.inputs[1]).shape
    if a["groups"] > 1 and (w_shape[0] // a["groups"], w_shape[1]) != (1, 1) and not ctx.target.grouped_conv_transpose:
        reach = _stuffed_reach(ctx, node)
        if reach is not None:
            return _conv_transpose_as_conv(ctx, names, node, *reach)
    kernel = w_shape[2:]
    pad, extra, output_padding, crops = transpose_geometry(ctx, node)
    attrs = dict(group=a["groups"], output_padding=output_padding, **window_attrs(kernel, a["stride"], pad,
                                                                                   a["dilation"]))
    if not any(extra) and not crops:
        return ctx.emit("ConvTranspose", names, **attrs)
    y = ctx.emit("ConvTranspose", names[:2], **attrs)
    if any(extra):
        y = ctx.pad(y, [0] * (2 + len(extra)), [0, 0, *extra])
    if len(names) == 3:
        y = ctx.emit("Add", [y, ctx.emit("Reshape", [names[2], ctx.int64s([-1] + [1] * len(extra))])])
    if crops:
        axes, starts, ends = zip(*crops)
        y = ctx.emit("Slice", [y, ctx.int64s(starts), ctx.int64s(ends), ctx.int64s([2 + k for k in axes])])
    return y


def _stuffed_reach(ctx, node) -> tuple[list, list] | None:
    """For _conv_transpose_as_conv: the amounts per spatial axis to pad x, stuffed with stride - 1
    zeros after each element (stride x its length), on each side (negative: crop) for the Conv;
    None where a crop would take all of a static axis (its rows then are all padding)."""
    a = node.attrs
    x_size, w_shape = ctx.graph.type_of(node.inputs[0]).shape[2:], ctx.graph.type_of(node.inputs[1]).shape
    begins, ends = [], []
    for size, k, s, d, (p0, p1), op in zip(x_size, w_shape[2:], a["stride"], a["dilation"], a["pad"],
                                          a["output_padding"]):
        begins.append(d * (k - 1) - p0)
        ends.append(d * (k - 1) - p1 + op - (s - 1))
        if isinstance(size, int) and size * s + min(0, begins[-1]) + min(0, ends[-1]) <= 0:
            return None
    return begins, ends


def _conv_transpose_as_conv(ctx, names, node, begins: list, ends: list):
    """A grouped ConvTranspose as the Conv it is the adjoint of: x with stride - 1 zeros after each
    element of each spatial axis, padded by dilation x (kernel - 1) less the padding (plus the
    output_padding at the end; a negative amount crops), convolved (stride 1, the same dilation and
    groups) with the kernel regrouped to (C_out, C_in/groups, *kernel) and flipped (`begins`, `ends`:
    _stuffed_reach's amounts). onnx's
    ReferenceEvaluator (1.23) computes a ConvTranspose with groups of more than one channel wrongly
    (it slices the weight by output channels and writes one channel per group; onnx/onnx#8446)."""
    a = node.attrs
    groups, stride, dilation = a["groups"], a["stride"], a["dilation"]
    w_shape = ctx.graph.type_of(node.inputs[1]).shape
    nsp, per_in, per_out, kernel = len(stride), w_shape[0] // groups, w_shape[1], list(w_shape[2:])
    spatial = list(range(2, 2 + nsp))
    w = ctx.emit("Reshape", [names[1], ctx.int64s([groups, per_in, per_out, *kernel])])
    w = ctx.emit("Transpose", [w], perm=[0, 2, 1, *(k + 1 for k in spatial)])
    w = ctx.reverse(ctx.emit("Reshape", [w, ctx.int64s([groups * per_out, per_in, *kernel])]), spatial, kernel)
    x = names[0]
    if any(s > 1 for s in stride):
        rows = ctx.emit("Unsqueeze", [x, ctx.int64s([3 + 2 * k for k in range(nsp)])])   # (N, C, S0, 1, S1, 1, ...)
        rows = ctx.pad(rows, [0] * (2 + 2 * nsp), [0, 0, *(v for s in stride for v in (0, s - 1))])
        size = ctx.emit("Mul", [ctx.emit("Shape", [x]), ctx.int64s([1, 1, *stride])])
        x = ctx.emit("Reshape", [rows, size])
    if min(0, *begins, *ends) < 0:
        x = ctx.emit("Slice", [x, ctx.int64s([max(0, -b) for b in begins]),
                               ctx.int64s([e if e < 0 else ctx.INT64_MAX for e in ends]), ctx.int64s(spatial)])
    pads = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    return ctx.emit("Conv", [x, w, *names[2:]], group=groups,
                    **window_attrs(kernel, [1] * nsp, pads, dilation))


def _lower_conv_weight_grad(ctx, names, node):
    """gw[o, c, k] = sum over n, i of xpad[n, c, i*stride + k*dilation] * g[n, o, i] is itself a
    convolution, with the images as what it contracts: x with channels and images swapped (per
    group: (C/groups, groups x N, *S)) convolved with g as its kernels ((Co, N, *out), one group of
    images per group of channels), the forward's dilation its stride and the forward's stride its
    dilation, under the forward's padding; its output, (C/groups, Co, *reach), reaches at least the
    kernel's size (past it: the positions a strided forward never read), and is cropped to it and
    moved to (Co, C/groups, *kernel). A symbolic batch is a symbolic channel count of its kernels.
    Taps whose windows lie wholly in the padding read only zeros, as the forward did. With a
    symbolic batch that Conv's kernels would have a shape known only at run time, which some
    runtimes refuse (OpenVINO): there, _weight_grad_per_tap."""
    a = node.attrs
    groups, kernel = a["groups"], a["kernel"]
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    if not isinstance(x_type.shape[0], int):
        return _weight_grad_per_tap(ctx, names, node)
    nsp, channels, size, out = len(kernel), x_type.shape[1], x_type.shape[2:], g_type.shape[2:]
    spatial = list(range(2, 2 + nsp))
    if groups == 1:
        x = ctx.emit("Transpose", [names[0]], perm=[1, 0, *spatial])                    # (C, N, *S)
    else:
        x = ctx.emit("Reshape", [names[0], ctx.int64s([0, groups, channels // groups, *size])])
        x = ctx.emit("Transpose", [x], perm=[2, 1, 0, *(k + 1 for k in spatial)])         # (C/G, G, N, *S)
        x = ctx.emit("Reshape", [x, ctx.int64s([channels // groups, -1, *size])])
    g = ctx.emit("Transpose", [names[1]], perm=[1, 0, *spatial])                        # (Co, N, *out)
    gw = ctx.emit("Conv", [x, g], group=groups, **window_attrs(out, a["dilation"], a["pad"], a["stride"]))
    reach = out_sizes(size, out, a["dilation"], a["pad"], a["stride"])
    if tuple(reach) != tuple(kernel):
        gw = ctx.emit("Slice", [gw, ctx.int64s([0] * nsp), ctx.int64s(kernel), ctx.int64s(spatial)])
    return ctx.emit("Transpose", [gw], perm=[1, 0, *spatial])


def _weight_grad_per_tap(ctx, names, node):
    """The weight gradient one kernel tap at a time: x zero-padded once, each tap's window one
    strided Slice of it (N, C, *out), its products with g summed over positions (one MatMul per
    group and image) and over the images (a ReduceSum, zeros for no image), the taps joined."""
    a = node.attrs
    groups, kernel, stride, dilation = a["groups"], a["kernel"], a["stride"], a["dilation"]
    x_type, g_type = (ctx.graph.type_of(r) for r in node.inputs)
    nsp, co, out = len(kernel), g_type.shape[1], g_type.shape[2:]
    ci, positions = x_type.shape[1] // groups, math.prod(out)
    x = names[0]
    if any(any(p) for p in a["pad"]):
        x = ctx.pad(x, [0, 0, *(p[0] for p in a["pad"])], [0, 0, *(p[1] for p in a["pad"])])
    g = ctx.emit("Reshape", [names[1], ctx.int64s([0, groups, co // groups, positions])])
    g = ctx.emit("Transpose", [g], perm=[0, 1, 3, 2])                                   # (N, G, P, Co/G)
    axes, steps = ctx.int64s(range(2, 2 + nsp)), ctx.int64s(stride)
    parts = []
    for tap in kernel_taps(kernel):
        starts = [t * d for t, d in zip(tap, dilation)]
        window = ctx.emit("Slice", [x, ctx.int64s(starts),
                                    ctx.int64s([b + s * (o - 1) + 1 for b, s, o in zip(starts, stride, out)]),
                                    axes, steps])
        window = ctx.emit("Reshape", [window, ctx.int64s([0, groups, ci, positions])])   # (N, G, Ci/G, P)
        product = ctx.emit("MatMul", [window, g])                                          # (N, G, Ci/G, Co/G)
        parts.append(ctx.emit("ReduceSum", [product, ctx.int64s([0])], keepdims=1))
    gw = ctx.emit("Concat", parts, axis=0) if len(parts) > 1 else parts[0]               # (T, G, Ci/G, Co/G)
    gw = ctx.emit("Transpose", [gw], perm=[1, 3, 2, 0])                                  # (G, Co/G, Ci/G, T)
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


def conv_batch_norm(x, w, b, scale, shift, mean, var, eps: float, transpose: bool = False, **conv_params) -> Tensor:
    """An inference-mode batch norm (scale, shift, running mean and var, each (C_out,)) of
    conv(x, w, b, **conv_params), or of conv_transpose with transpose=True, as one such op: its
    filters scaled by s = scale/sqrt(var + eps) per output channel and its bias (b - mean)·s +
    shift. For callers that know nothing else reads the convolution's output (an imported model's
    graph, a gc.nn.Sequential): the same function, rounded differently, and its gradients to any
    order; the normalisation's passes over the output are gone from the forward and from the
    backward, where scale's and the statistics' gradients come through the filters' gradient
    (Σ w·∂L/∂w' over each filter) instead of passes over the saved output."""
    s = scale * rsqrt(var + np.asarray(eps, as_tensor(var).dtype))
    shape = tuple(w.shape)
    if transpose:     # w: (C_in, C_out/groups, *kernel); group k's column j is output channel k·C_out/groups + j
        groups = conv_params["groups"]
        per_group = (groups, shape[0] // groups, shape[1]) + shape[2:]
        filters = reshape(reshape(w, per_group) * reshape(s, (groups, 1, shape[1]) + (1,) * (len(shape) - 2)), shape)
    else:             # w: (C_out, C_in/groups, *kernel)
        filters = w * reshape(s, (-1,) + (1,) * (len(shape) - 1))
    bias = shift - mean * s if b is None else (b - mean) * s + shift
    return (conv_transpose if transpose else conv)(x, filters, bias, **conv_params)


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
    return x.shape[:2] + out_sizes(x.shape[2:], kernel, stride, pad, (1,) * len(kernel))


def _max_pool_reference(x, *, kernel, stride, pad):
    out = out_sizes(x.shape[2:], kernel, stride, pad, (1,) * len(kernel))
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
    attrs = window_attrs(a["kernel"], a["stride"], a["pad"])
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


def _lower_pool_scatter(ctx, names, node):
    """The values added into zeros at their flat indices: a ScatterElements with reduction add."""
    shape = node.attrs["shape"]
    dtype = node.outputs[0].dtype
    zeros = ctx.fill((dims.product(shape),), 0, dtype)
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
    """The spatial sizes (static), PyTorch's output size, the end padding ceil_mode needs and the
    kernel to take (windows.pool_geometry)."""
    _check_nchw(x.type, len(attrs["kernel"]), "x")
    out, extra, kernel = pool_geometry(x.shape[2:], attrs["kernel"], attrs["stride"], attrs["pad"], dilation,
                                       ceil_mode)
    return x.shape[2:], out, extra, kernel


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
    kernel = attrs["kernel"]
    if ceil_mode or any(d > 1 for d in dilation):
        if any(max(p) >= d * (k - 1) + 1 for p, k, d in zip(attrs["pad"], kernel, dilation)):
            raise ShapeError(f"max_pool: pad {attrs['pad']} must be smaller than the dilated kernel on every axis "
                             f"(at {user_location()})")
        in_size, out, extra, kernel = _torch_windows(x, attrs, dilation, ceil_mode)
    if not any(extra) and all(d == 1 for d in dilation):
        y, index = apply_n("max_pool", [x], **{**attrs, "kernel": kernel})
        if not return_indices:
            return y
        plane = math.prod(x.shape[2:])        # ONNX's index is flat over the whole tensor, torch's over (N, C)
        return y, index - cast(floor(divide(index, plane)), np.int64) * plane
    before = [p[0] for p in attrs["pad"]]
    xp = pad_tensor(x, ((0, 0), (0, 0), *((b, a + e) for (b, a), e in zip(attrs["pad"], extra))), value=-np.inf)
    y, tap = first_max(windows(xp, kernel, attrs["stride"], dilation, out))
    if not return_indices:
        return y
    table = window_positions(in_size, kernel, attrs["stride"], dilation, out, before)
    return y, squeeze(take_along_axis(broadcast_to(table, x.shape[:2] + table.shape), tap, -1), -1)


# -- average pooling and its adjoint ----------------------------------------------------------------------
def _pool_counts(in_size, kernel, stride, pad, count_include_pad):
    """How many values each window averages: the whole kernel, or only its positions inside the input."""
    if count_include_pad:
        out = out_sizes(in_size, kernel, stride, pad, (1,) * len(kernel))
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
    out = out_sizes(in_size, kernel, stride, pad, (1,) * len(kernel))
    if g.shape[2:] != out:
        raise ShapeError(f"the output cotangent {format_shape(g.shape)} does not have the pooling's output "
                         f"size {out}")
    return [tensor_type(g.dtype, g.shape[:2] + tuple(in_size))]


def _avg_pool_grad_padding(in_size, kernel, stride, pad) -> tuple:
    out = out_sizes(in_size, kernel, stride, pad, (1,) * len(kernel))
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
                 **window_attrs(kernel, a["stride"], a["pad"]))
    return ctx.emit("Reshape", [x, ctx.shape_tensor(g_type.shape[:2] + tuple(in_size))])


defop("avg_pool", infer=lambda types, kernel, stride, pad, count_include_pad: [
          tensor_type(types[0].dtype, _pool_infer(types[0], kernel, stride, pad))],
      reference=_avg_pool_reference,
      lower=lambda ctx, names, node: ctx.emit(
          "AveragePool", names, count_include_pad=int(node.attrs["count_include_pad"]),
          **window_attrs(node.attrs["kernel"], node.attrs["stride"], node.attrs["pad"])),
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
    stride, pads = attrs["stride"], attrs["pad"]
    in_size, out, extra, kernel = _torch_windows(x, attrs, (1,) * len(attrs["kernel"]), ceil_mode)
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
