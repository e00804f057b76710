"""Convolution and pooling: forward (and backward graphs) through onnxruntime against direct
loops written here, and float64 gradient checks up to third order."""
import math

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply, apply_n
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.passes import optimize
from gcompile.testing import check_lowering

from ..opcheck import check_forward, check_grads

TOL = dict(rtol=1e-4, atol=1e-5)


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def distinct(*shape, seed=0, dtype=np.float32):
    """A random permutation of evenly spaced values: no ties inside any pooling window."""
    values = np.linspace(-1, 1, math.prod(shape))
    return np.random.default_rng(seed).permutation(values).reshape(shape).astype(dtype)


# -- direct loops (independent of the ops' own references) -----------------------------------------
def pairs(pad, n):
    if isinstance(pad, int):
        return [(pad, pad)] * n
    return [p if isinstance(p, tuple) else (p, p) for p in pad]


def per_axis(value, n):
    return [value] * n if isinstance(value, int) else list(value)


def inside(pos, shape):
    return all(0 <= p < s for p, s in zip(pos, shape))


def naive_conv(x, w, b=None, stride=1, pad=0, dilation=1, groups=1):
    n_sp = x.ndim - 2
    s, p, d = per_axis(stride, n_sp), pairs(pad, n_sp), per_axis(dilation, n_sp)
    c_out, c_in, kernel, spatial = w.shape[0], w.shape[1], w.shape[2:], x.shape[2:]
    out = [(spatial[a] + sum(p[a]) - d[a] * (kernel[a] - 1) - 1) // s[a] + 1 for a in range(n_sp)]
    y = np.zeros((x.shape[0], c_out, *out))
    for n, o, *pos in np.ndindex(*y.shape):
        group = o // (c_out // groups)
        total = 0.0 if b is None else float(b[o])
        for c in range(c_in):
            for k in np.ndindex(*kernel):
                src = [pos[a] * s[a] + k[a] * d[a] - p[a][0] for a in range(n_sp)]
                if inside(src, spatial):
                    total += x[(n, group * c_in + c, *src)] * w[(o, c, *k)]
        y[(n, o, *pos)] = total
    return y


def naive_conv_transpose(x, w, b=None, stride=1, pad=0, dilation=1, groups=1, output_padding=0):
    """Scatter form: every input value adds its kernel-weighted copy into the output."""
    n_sp = x.ndim - 2
    s, p, d = per_axis(stride, n_sp), pairs(pad, n_sp), per_axis(dilation, n_sp)
    op, kernel = per_axis(output_padding, n_sp), w.shape[2:]
    c_per_group, out_per_group = x.shape[1] // groups, w.shape[1]
    out = [(x.shape[2 + a] - 1) * s[a] - sum(p[a]) + d[a] * (kernel[a] - 1) + op[a] + 1 for a in range(n_sp)]
    y = np.zeros((x.shape[0], out_per_group * groups, *out))
    for n, c, *pos in np.ndindex(*x.shape):
        group = c // c_per_group
        for o in range(out_per_group):
            for k in np.ndindex(*kernel):
                dst = [pos[a] * s[a] + k[a] * d[a] - p[a][0] for a in range(n_sp)]
                if inside(dst, out):
                    y[(n, group * out_per_group + o, *dst)] += x[(n, c, *pos)] * w[(c, o, *k)]
    return y if b is None else y + b.reshape(-1, *[1] * n_sp)


def naive_input_grad(g, w, x_shape, stride=1, pad=0, dilation=1, groups=1):
    """d<g, conv(x, w)>/dx: each output cotangent goes back to the inputs its window read."""
    n_sp = len(x_shape) - 2
    s, p, d = per_axis(stride, n_sp), pairs(pad, n_sp), per_axis(dilation, n_sp)
    c_in, c_out, kernel = w.shape[1], w.shape[0], w.shape[2:]
    gx = np.zeros(x_shape)
    for n, o, *pos in np.ndindex(*g.shape):
        group = o // (c_out // groups)
        for c in range(c_in):
            for k in np.ndindex(*kernel):
                src = [pos[a] * s[a] + k[a] * d[a] - p[a][0] for a in range(n_sp)]
                if inside(src, x_shape[2:]):
                    gx[(n, group * c_in + c, *src)] += g[(n, o, *pos)] * w[(o, c, *k)]
    return gx


def naive_weight_grad(x, g, kernel, stride=1, pad=0, dilation=1, groups=1):
    """d<g, conv(x, w)>/dw: per kernel tap, the input position each output position reads
    (pos * stride + tap * dilation - pad before), the products summed where it lies inside x."""
    n_sp = x.ndim - 2
    s, p, d = per_axis(stride, n_sp), pairs(pad, n_sp), per_axis(dilation, n_sp)
    c_in, c_out = x.shape[1] // groups, g.shape[1]
    gw = np.zeros((c_out, c_in, *kernel))
    xg = x.astype(np.float64).reshape(x.shape[0], groups, c_in, *x.shape[2:])
    gg = g.astype(np.float64).reshape(g.shape[0], groups, c_out // groups, *g.shape[2:])
    positions = np.indices(g.shape[2:])
    for k in np.ndindex(*kernel):
        src = [positions[a] * s[a] + k[a] * d[a] - p[a][0] for a in range(n_sp)]
        valid = np.ones(g.shape[2:], bool)
        for a in range(n_sp):
            valid &= (src[a] >= 0) & (src[a] < x.shape[2 + a])
        clipped = tuple(np.clip(src[a], 0, x.shape[2 + a] - 1) for a in range(n_sp))
        window = np.where(valid, xg[(slice(None), slice(None), slice(None), *clipped)], 0.0)   # (n, G, c_in, *out)
        size = int(np.prod(g.shape[2:]))
        per_group = np.einsum("ngcp,ngop->goc", window.reshape(*window.shape[:3], size),
                              gg.reshape(*gg.shape[:3], size))
        gw[(slice(None), slice(None), *k)] = per_group.reshape(c_out, c_in)
    return gw


def pool_windows(x, kernel, stride, pad):
    """For each output position: the (flat index, value) pairs of its window inside x, row-major."""
    n_sp = x.ndim - 2
    k, p = per_axis(kernel, n_sp), pairs(pad, n_sp)
    s = k if stride is None else per_axis(stride, n_sp)
    out = [(x.shape[2 + a] + sum(p[a]) - k[a]) // s[a] + 1 for a in range(n_sp)]
    windows = {}
    for n, c, *pos in np.ndindex(*x.shape[:2], *out):
        cells = []
        for t in np.ndindex(*k):
            src = [pos[a] * s[a] + t[a] - p[a][0] for a in range(n_sp)]
            if inside(src, x.shape[2:]):
                cells.append((np.ravel_multi_index((n, c, *src), x.shape), x[(n, c, *src)]))
        windows[(n, c, *pos)] = cells
    return (*x.shape[:2], *out), windows


def naive_max_pool(x, kernel, stride=None, pad=0):
    """Window maxima and their flat indices into x (the first maximum in row-major order)."""
    shape, windows = pool_windows(x, kernel, stride, pad)
    y, index = np.zeros(shape), np.zeros(shape, np.int64)
    for pos, cells in windows.items():
        index[pos], y[pos] = max(cells, key=lambda cell: cell[1])
    return y, index


def naive_avg_pool(x, kernel, stride=None, pad=0, count_include_pad=False, r=None):
    """Window means and the gradient of <r, avg_pool(x)> (each r spread evenly over its window)."""
    shape, windows = pool_windows(x, kernel, stride, pad)
    y, grad = np.zeros(shape), np.zeros(x.size)
    size = math.prod(per_axis(kernel, x.ndim - 2))
    for pos, cells in windows.items():
        count = size if count_include_pad else len(cells)
        y[pos] = sum(v for _, v in cells) / count
        for i, _ in cells:
            grad[i] += (0.0 if r is None else r[pos]) / count
    return y, grad.reshape(x.shape)


# -- conv forward ------------------------------------------------------------------------------------
CONV_CASES = {
    "1d-stride-pad": ((2, 3, 7), (4, 3, 3), dict(stride=2, pad=1)),
    "2d-groups-bias-asym-pad-dilation": ((2, 4, 6, 7), (6, 2, 3, 2),
                                         dict(stride=(2, 1), pad=((1, 0), (2, 1)), dilation=(1, 2), groups=2)),
    "2d-depthwise-bias": ((2, 3, 5, 6), (3, 1, 3, 3), dict(pad=(1, 0), groups=3)),
    "3d-stride-dilation": ((2, 2, 5, 6, 5), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), pad=((0, 1), 1, 0),
                                                                    dilation=(2, 1, 1))),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_forward(case):
    x_shape, w_shape, kw = CONV_CASES[case]
    x, w, b = rand(*x_shape, seed=1), rand(*w_shape, seed=2), rand(w_shape[0], seed=3)
    check_forward(lambda x, w: F.conv(x, w, **kw), [x, w], naive_conv(x, w, **kw), **TOL)
    check_forward(lambda x, w, b: F.conv(x, w, b, **kw), [x, w, b], naive_conv(x, w, b, **kw), **TOL)


def test_conv_with_bias_lowers_to_one_conv_node():
    x, w, b = rand(1, 2, 5, 5), rand(3, 2, 3, 3), rand(3)
    model = gc.compile(lambda x, w, b: F.conv(x, w, b, pad=1), x, w, b, provider="cpu").model
    assert [n.op_type for n in model.graph.node if n.op_type != "Identity"] == ["Conv"]


def conv_ops(fn, *inputs) -> list:
    return [n.op_type for n in gc.compile(fn, *inputs, provider="cpu").model.graph.node]


# Convolutions with more filters than output positions, from enough images: two Convs of half the
# filters each (ops/conv.py _conv_in_halves). x shape, w shape, keywords.
HALVES_CASES = {
    "2d-odd-filters": ((8, 3, 3, 3), (11, 3, 3, 3), dict(pad=1)),             # 9 positions, 6 + 5 filters
    "1d-strided": ((9, 2, 9), (6, 2, 3), dict(stride=2, pad=1)),              # 5 positions
    "2d-1x1-strided": ((8, 4, 4, 4), (5, 4, 1, 1), dict(stride=2)),            # 4 positions
}


@pytest.mark.parametrize("case", HALVES_CASES)
def test_a_conv_with_more_filters_than_positions_runs_in_two_halves(case):
    x_shape, w_shape, kw = HALVES_CASES[case]
    x, w, b = rand(*x_shape, seed=1), rand(*w_shape, seed=2), rand(w_shape[0], seed=3)
    ops = conv_ops(lambda x, w, b: F.conv(x, w, b, **kw), x, w, b)
    assert ops.count("Conv") == 2 and ops.count("Split") == 2 and "Concat" in ops
    check_forward(lambda x, w, b: F.conv(x, w, b, **kw), [x, w, b], naive_conv(x, w, b, **kw), **TOL)
    check_forward(lambda x, w: F.conv(x, w, **kw), [x, w], naive_conv(x, w, **kw), **TOL)
    # the halves keep each filter's own non-finite values (NaN at the centre tap, which never meets
    # the zero padding: there onnxruntime's Conv, like PyTorch's, gives NaN and the loop skips it)
    x[0, 0, 0], w[(-1, 0, *(k // 2 for k in w_shape[2:]))] = np.inf, np.nan
    with np.errstate(invalid="ignore"):
        check_forward(lambda x, w: F.conv(x, w, **kw), [x, w], naive_conv(x, w, **kw), **TOL)


@pytest.mark.parametrize("x_shape, w_shape, kw", [
    ((2, 3, 3, 3), (11, 3, 3, 3), dict(pad=1)),     # two images: the halves have no images to share
    ((8, 3, 3, 3), (19, 3, 3, 3), dict(pad=1)),     # more than twice as many filters as positions
    ((8, 3, 3, 3), (9, 3, 3, 3), dict(pad=1)),      # as many filters as positions
    ((8, 4, 2, 2), (5, 4, 1, 1), {}),               # pointwise: a GEMM as it is
    ((8, 4, 3, 3), (12, 2, 3, 3), dict(pad=1, groups=2)),
])
def test_convs_outside_the_slow_path_stay_one_node(x_shape, w_shape, kw):
    assert conv_ops(lambda x, w: F.conv(x, w, **kw), rand(*x_shape), rand(*w_shape)).count("Conv") == 1


def test_the_gradients_of_a_conv_in_halves_through_onnxruntime():
    """The input gradient (a Conv of the flipped kernel with 5 filters over 4 positions) runs in
    halves too; the weight gradient takes its own products."""
    x, w, b = rand(8, 5, 2, 2, seed=1), rand(6, 5, 3, 3, seed=2), rand(6, seed=3)
    r = rand(8, 6, 2, 2, seed=9)

    def fn(x, w, b):
        value = F.sum(F.conv(x, w, b, pad=1) * r)
        return value, gc.grad(value, [x, w, b])

    assert conv_ops(fn, x, w, b).count("Conv") == 4
    expected = [(naive_conv(x, w, b, pad=1) * r).sum(), naive_input_grad(r, w, x.shape, pad=1),
                naive_weight_grad(x, r, (3, 3), pad=1), r.sum(axis=(0, 2, 3))]
    check_forward(fn, [x, w, b], expected, **TOL)


TRANSPOSE_CASES = {
    "1d-stride-output-padding": ((2, 3, 5), (3, 2, 3), dict(stride=3, pad=1, output_padding=2)),
    "2d-groups-bias-asym-pad-dilation": ((2, 4, 4, 3), (4, 3, 3, 2),
                                         dict(stride=(2, 3), pad=((1, 0), (2, 1)), dilation=(1, 2), groups=2,
                                              output_padding=(1, 2))),
    "3d": ((2, 2, 3, 4, 3), (2, 2, 2, 2, 3), dict(stride=(2, 1, 1), pad=(0, 1, (1, 0)), output_padding=(1, 0, 0))),
    # stride 1 lowers to a Conv of the flipped kernel, unless a side is padded past the kernel's reach
    "2d-stride1-groups-dilation": ((2, 4, 4, 5), (4, 3, 3, 2), dict(pad=((1, 2), (0, 1)), dilation=(2, 1), groups=2)),
    "3d-stride1": ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(pad=(1, (0, 2), 0))),
    "1d-stride1-pad-past-reach": ((2, 3, 6), (3, 2, 2), dict(pad=((2, 0),))),
}


@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose_forward(case):
    x_shape, w_shape, kw = TRANSPOSE_CASES[case]
    x, w = rand(*x_shape, seed=4), rand(*w_shape, seed=5)
    b = rand(w_shape[1] * kw.get("groups", 1), seed=6)
    check_forward(lambda x, w, b: F.conv_transpose(x, w, b, **kw), [x, w, b],
                  naive_conv_transpose(x, w, b, **kw), **TOL)


@pytest.mark.parametrize("case, op", [("2d-stride1-groups-dilation", "Conv"), ("3d-stride1", "Conv"),
                                      ("1d-stride1-pad-past-reach", "ConvTranspose"), ("3d", "ConvTranspose")])
def test_stride_one_conv_transpose_lowers_to_conv(case, op):
    """onnxruntime runs ConvTranspose's scatter on one thread and Conv on all (docs/notes/performance-history.md)."""
    x_shape, w_shape, kw = TRANSPOSE_CASES[case]
    model = gc.compile(lambda x, w: F.conv_transpose(x, w, **kw), rand(*x_shape), rand(*w_shape), provider="cpu").model
    ops = {n.op_type for n in model.graph.node}
    assert ops & {"Conv", "ConvTranspose"} == {op}


WEIGHT_GRAD_CASES = {   # the lowering's window count exceeds the kernel in the first two (a slice)
    "1d-stride-leftover": ((2, 3, 8), (3,), dict(stride=(2,), pad=((0, 0),), dilation=(1,), groups=1)),
    "2d-groups-dilation": ((2, 4, 7, 6), (3, 2),
                           dict(stride=(2, 1), pad=((1, 0), (2, 1)), dilation=(1, 2), groups=2)),
    "3d-depthwise": ((2, 2, 4, 5, 4), (2, 2, 2), dict(stride=(1, 2, 1), pad=((1, 1), (0, 1), (0, 0)),
                                                       dilation=(1, 1, 2), groups=2)),
    "2d-1x1": ((2, 4, 3, 5), (1, 1), dict(stride=(1, 1), pad=((0, 0), (0, 0)), dilation=(1, 1), groups=2)),
    # one input channel per group and 25 taps: one grouped Conv (a strided forward leaves a remainder)
    "2d-depthwise-5x5": ((2, 3, 9, 10), (5, 5), dict(stride=(2, 1), pad=((2, 1), (1, 1)), dilation=(1, 2),
                                                      groups=3)),
    # windows that tile the input (a patch embedding): one product of rearranged patches; the
    # 2-d case leaves rows and columns no window reads
    "1d-patches": ((3, 2, 12), (4,), dict(stride=(4,), pad=((0, 0),), dilation=(1,), groups=1)),
    "2d-patches-leftover": ((2, 3, 9, 11), (2, 4), dict(stride=(2, 4), pad=((0, 0), (0, 0)), dilation=(1, 1),
                                                        groups=1)),
    "3d-patches": ((2, 2, 4, 6, 2), (2, 3, 1), dict(stride=(2, 3, 1), pad=((0, 0),) * 3, dilation=(1, 1, 1),
                                                    groups=1)),
    # two output channels from nine: g shifted per tap, x read whole (_shifted_outputs_weight_grad)
    "2d-few-outputs": ((2, 9, 6, 7), (3, 2), dict(stride=(1, 1), pad=((1, 1), (0, 1)), dilation=(1, 2), groups=1)),
    # eight output channels from twelve, 16 x 17 positions: g moved per tap, one product per tap
    "2d-fewer-outputs": ((2, 12, 16, 17), (3, 3), dict(stride=(1, 1), pad=((2, 0), (1, 1)), dilation=(1, 2),
                                                       groups=1), 8),
    # equal channels: x moved along rows, g along columns (and depth), each move shared by its taps
    "2d-split-moves": ((2, 8, 16, 17), (3, 3), dict(stride=(1, 1), pad=((1, 1), (1, 1)), dilation=(1, 1),
                                                    groups=1), 8),
    "3d-split-moves": ((2, 8, 6, 7, 8), (3, 2, 3), dict(stride=(1, 1, 1), pad=((1, 1), (1, 0), (2, 0)),
                                                         dilation=(1, 1, 1), groups=1), 8),
    "1d-moves": ((2, 8, 300), (5,), dict(stride=(1,), pad=((2, 2),), dilation=(2,), groups=1), 8),
    # strided, 16 x 16 outputs: x's phases (SpaceToDepth's channel blocks where the stride is one
    # and divides the sizes, else one strided Slice each) moved with g into one frame per tap
    "2d-strided-blocks": ((2, 8, 32, 32), (3, 3), dict(stride=(2, 2), pad=((1, 1), (1, 1)), dilation=(1, 1),
                                                       groups=1), 8),
    "2d-strided-phases": ((2, 8, 33, 47), (3, 3), dict(stride=(2, 3), pad=((1, 0), (2, 1)), dilation=(1, 2),
                                                       groups=1), 12),
    "3d-strided-phases": ((2, 8, 16, 8, 17), (3, 2, 3), dict(stride=(2, 2, 2), pad=((1, 1), (0, 1), (3, 1)),
                                                             dilation=(1, 1, 1), groups=1), 8),
    "1d-strided-moves": ((2, 8, 600), (5,), dict(stride=(2,), pad=((2, 2),), dilation=(1,), groups=1), 8),
    # depthwise with 9 taps, strided: one grouped Conv, as from 25 taps
    "2d-depthwise-3x3-strided": ((2, 3, 9, 8), (3, 3), dict(stride=(2, 2), pad=((1, 1), (1, 0)), dilation=(1, 1),
                                                              groups=3)),
    # depthwise, one output channel per group, stride 1, windows of at least DEPTHWISE_FLAT_MIN_LENGTH:
    # one contiguous range of each flat padded frame per tap (_depthwise_flat_weight_grad)
    "1d-depthwise-flat": ((2, 2, 140), (5,), dict(stride=(1,), pad=((2, 1),), dilation=(1,), groups=2), 1),
    "2d-depthwise": ((2, 3, 12, 14), (3, 3), dict(stride=(1, 1), pad=((1, 2), (0, 1)), dilation=(2, 1),
                                                       groups=3), 1),
    "3d-depthwise-flat": ((2, 2, 4, 5, 6), (2, 3, 2), dict(stride=(1, 1, 1), pad=((0, 1), (1, 1), (0, 0)),
                                                            dilation=(1, 1, 2), groups=2), 1),
}


def weight_grad_inputs(case, dtype=np.float32):
    x_shape, kernel, kw, *per_group = WEIGHT_GRAD_CASES[case]     # output channels per group: 2 unless given
    c_out = (per_group or [2])[0] * kw["groups"]
    out = [(x_shape[2 + a] + sum(kw["pad"][a]) - kw["dilation"][a] * (kernel[a] - 1) - 1) // kw["stride"][a] + 1
           for a in range(len(kernel))]
    return rand(*x_shape, seed=7, dtype=dtype), rand(x_shape[0], c_out, *out, seed=8, dtype=dtype), kernel, kw


@pytest.mark.parametrize("case", WEIGHT_GRAD_CASES)
def test_conv_weight_grad_forward(case):
    x, g, kernel, kw = weight_grad_inputs(case)
    check_forward(lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw), [x, g],
                  naive_weight_grad(x, g, kernel, **kw), **TOL)


@pytest.mark.parametrize("case", ["2d-depthwise-5x5", "2d-depthwise-3x3-strided"])
def test_depthwise_weight_grad_of_a_large_or_strided_kernel_is_one_conv(case):
    """Per tap, a depthwise weight gradient is N*C one-by-one products; from 25 taps, or 9 when
    strided, it is one grouped Conv (its values are checked with the other weight-gradient
    cases); the images' sum is the one product left (a row of ones times the per-image results)."""
    x, g, kernel, kw = weight_grad_inputs(case)
    model = gc.compile(lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw), x, g,
                       provider="cpu").model
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 1 and ops.count("MatMul") == 1


@pytest.mark.parametrize("case", ["1d-depthwise-flat", "2d-depthwise", "3d-depthwise-flat"])
def test_stride_one_depthwise_weight_grad_reads_flat_windows(case):
    """Stride 1, one output channel per group, long enough rows: each tap's window is one range of
    the flat padded frame (one Slice and one product per tap, no Conv), for float64 too; in two
    dimensions and float32, one Conv per kernel column whose kernel spans the flat frame moved by
    the column's offset (MLAS multiplies it without expanding); with non-finite values inside.
    A non-finite x that g's zero columns meet (at the border) may also reach taps that never read
    it (in a training step such an x has made g non-finite already): such taps are NaN, and every
    other one is the exact sum."""
    x, g, kernel, kw = weight_grad_inputs(case)
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)     # noqa: E731
    taps = math.prod(kernel)
    per_tap = lambda ops: "Conv" not in ops and ops.count("Slice") == taps and ops.count("MatMul") == taps + 1  # noqa: E731
    ops = conv_ops(fn, x, g)
    if len(kernel) == 2:
        assert ops.count("Conv") == kernel[1] and ops.count("MatMul") == 1
        assert per_tap(conv_ops(fn, x.astype(np.float64), g.astype(np.float64)))
    else:
        assert per_tap(ops)
    inner = tuple(n // 2 for n in x.shape[2:])
    x[(1, 1) + inner], g[(0, 0) + tuple(n // 2 for n in g.shape[2:])] = np.inf, np.nan
    with np.errstate(invalid="ignore"):
        check_forward(fn, [x, g], naive_weight_grad(x, g, kernel, **kw), **TOL)
        x64, g64 = (np.nan_to_num(v).astype(np.float64) for v in (x, g))
        check_forward(fn, [x64, g64], naive_weight_grad(x64, g64, kernel, **kw), rtol=1e-12, atol=1e-12)
    for dtype, tol in ((np.float32, TOL), (np.float64, dict(rtol=1e-12, atol=1e-12))):
        xb, gb = x64.astype(dtype), g64.astype(dtype)
        xb[(0, 0) + (0,) * len(kernel)] = np.inf                  # the first element of a frame
        with np.errstate(invalid="ignore"):
            got = gc.compile(fn, xb, gb, provider="cpu")(xb, gb)
            want = naive_weight_grad(xb.astype(np.float64), g64, kernel, **kw)
        assert np.isnan(got[np.isnan(want)]).all()
        finite = np.isfinite(got)
        np.testing.assert_allclose(got[finite], want[finite], **tol)


@pytest.mark.parametrize("pad", [3, ((1, 4), (5, 0))], ids=["same", "uneven"])
def test_a_small_depthwise_conv_and_its_input_gradient_are_banded_products(pad):
    """A depthwise 7x7 on small images (ort-cpu's depthwise_banded, also taken by the input
    gradient's transposed convolution): products, no Conv; the values of a plain Conv, with a bias,
    and with non-finite inputs: every output the plain form makes non-finite is non-finite, every
    output row no non-finite input reaches is exact, and an output the banded form alone makes
    non-finite (a band's zero meeting the infinity in a row it reads) is NaN, never a wrong number."""
    x, w, b = rand(2, 6, 9, 8, seed=51), rand(6, 1, 7, 7, seed=52), rand(6, seed=53)
    fn = lambda x, w, b: F.conv(x, w, b, pad=pad, groups=6)                      # noqa: E731
    ops = conv_ops(fn, x, w, b)
    assert "Conv" not in ops and ops.count("MatMul") == 8
    g = rand(*gc.compile(fn, x, w, b, provider="cpu")(x, w, b).shape, seed=54)
    input_grad = lambda g, w: gc.vjp(lambda x: F.conv(x, w, pad=pad, groups=6), x)[1](g)[0]    # noqa: E731
    assert {"Conv", "ConvTranspose"}.isdisjoint(conv_ops(input_grad, g, w))
    x[1, 2, 4, 3], x[0, 5, 0, 7], g[0, 1, 3, 0], g[1, 4, 6, 6] = np.inf, np.nan, -np.inf, np.nan
    for f, inputs in ((fn, [x, w, b]), (input_grad, [g, w])):
        with np.errstate(invalid="ignore"):
            got = gc.compile(f, *inputs, provider="cpu")(*inputs)
            want = gc.compile(f, *inputs, provider="cpu", target="portable")(*inputs)
        assert not np.isfinite(got[~np.isfinite(want)]).any()
        rows = np.isfinite(want).all(axis=-1, keepdims=True) & np.isfinite(got).all(axis=-1, keepdims=True)
        assert rows.sum() > rows.size // 2
        np.testing.assert_allclose(np.where(rows, got, 0), np.where(rows, want, 0), **TOL)
        alone = np.isfinite(want) & ~np.isfinite(got)
        assert alone.any() and np.isnan(got[alone]).all()


def reversed_axes(model) -> list[list[int]]:
    """The axes of each Slice in `model` that steps backwards (a reversal)."""
    from onnx import numpy_helper
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return [[int(a) for a, step in zip(consts[n.input[3]], consts[n.input[4]]) if step < 0]
            for n in model.graph.node if n.op_type == "Slice" and len(n.input) > 4 and (consts[n.input[4]] < 0).any()]


def test_a_kernels_flip_leaves_out_its_axes_of_size_one():
    """A transposed convolution's kernel is flipped in every spatial axis, which changes nothing
    along an axis of size 1, and ONNX Runtime's Slice with a negative step copies element by
    element (a 1x1 convolution's input gradient spent more on that copy than on its product):
    a 1x1 kernel is not flipped, a 3x1 kernel only along its first axis, a 3x3 along both, and
    the input gradients are the reference evaluator's (ort-cpu writes a stride-1 transposed
    convolution as the Conv of the flipped kernel; the portable target keeps ConvTranspose)."""
    x = rand(2, 4, 5, 6, seed=61)
    for kernel, flipped in (((1, 1), []), ((3, 1), [[2]]), ((3, 3), [[2, 3]])):
        w = rand(3, 4, *kernel, seed=62)
        g = rand(2, 3, 5, 6, seed=63)
        pad = [(k - 1) // 2 for k in kernel]
        input_grad = lambda g, w, pad=pad: gc.vjp(lambda x: F.conv(x, w, pad=pad), x)[1](g)[0]    # noqa: E731
        cf = gc.compile(input_grad, g, w, provider="cpu")
        assert reversed_axes(cf.model) == flipped, kernel
        want = evaluate(trace(input_grad, [g, w]).graph, [g, w])[0]
        np.testing.assert_allclose(cf(g, w), want, **TOL)


def test_the_weight_gradient_of_tiling_windows_is_one_product():
    """kernel = stride, no padding, patches at least PATCH_MIN_WIDTH wide: the patches are x
    rearranged by one Transpose and the gradient one Gemm, with no slice per tap; with non-finite
    inputs too the values are the per-tap sums'."""
    x, g, kernel, kw = weight_grad_inputs("2d-patches-leftover")
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)     # noqa: E731
    ops = conv_ops(fn, x, g)
    assert ops.count("Gemm") == 1 and ops.count("Transpose") == 2 and "MatMul" not in ops
    x[0, 1, 2, 3], x[1, 0, 8, 10], g[1, 0, 0, 0] = np.inf, np.nan, -np.inf     # (8, 10): a leftover row
    with np.errstate(invalid="ignore"):
        check_forward(fn, [x, g], naive_weight_grad(x, g, kernel, **kw), **TOL)


def test_the_weight_gradient_of_few_output_channels_shifts_g():
    """Few output channels: g is moved to each tap's offset and x read as it is (no window of x
    is copied, x is not padded), for a static, an empty and a symbolic batch, with non-finite
    values inside. A non-finite x within the kernel's reach of the border also meets the zeros
    moved in around g for the taps that never read it: those taps' sums are NaN (0·inf), where
    the per-tap form keeps them (in a training step such an x makes the loss, and so g,
    non-finite anyway)."""
    x, g, kernel, kw = weight_grad_inputs("2d-few-outputs")
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)     # noqa: E731
    cf = gc.compile(fn, x, g, provider="cpu")
    ops = [n.op_type for n in cf.model.graph.node]
    pads_read = {n.input[0] for n in cf.model.graph.node if n.op_type == "Pad"}
    assert "Slice" not in ops and pads_read == {cf.input_names[1]} and ops.count("Pad") <= math.prod(kernel)
    x[1, 4, 2, 3], g[0, 1, 2, 2] = np.inf, np.nan         # read by every tap; reading no padding
    with np.errstate(invalid="ignore"):
        check_forward(fn, [x, g], naive_weight_grad(x, g, kernel, **kw), **TOL)
        check_forward(fn, [x[:0], g[:0]], np.zeros((g.shape[1], x.shape[1], *kernel), np.float32))
        symbolic = gc.compile(fn, gc.spec(("batch", *x.shape[1:])), gc.spec(("batch", *g.shape[1:])), provider="cpu")
        np.testing.assert_allclose(symbolic(x[:1], g[:1]), naive_weight_grad(x[:1], g[:1], kernel, **kw), **TOL)
        edge = np.where(np.isfinite(x), x, 0)
        edge[0, 3, 0, 3] = np.inf                         # the first row: the last row tap never reads it
        got, want = cf(edge, np.nan_to_num(g)), naive_weight_grad(edge, np.nan_to_num(g), kernel, **kw)
    assert np.isnan(got[:, 3, 2]).all()
    got[:, 3, 2] = want[:, 3, 2]
    np.testing.assert_allclose(got, want, **TOL)


def test_the_weight_gradient_of_equal_channels_moves_x_along_rows_and_g_along_columns():
    """A 3x3 layer of equal channels: x moved along rows (two Pads), g along columns (two), each
    shared by the three taps that need it, no window sliced; every Pad moves the flat positions
    (long rows), and the column moves, which run into the neighbouring row, are masked (one Mul
    each). Values are the per-tap sums' (the weight-gradient cases check the 3-D and 1-D forms
    too), also where the moved elements are infinite away from the edges."""
    x, g, kernel, kw = weight_grad_inputs("2d-split-moves")
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)     # noqa: E731
    model = gc.compile(fn, x, g, provider="cpu").model
    made_by = {out: n for n in model.graph.node for out in n.output}
    pads = [made_by[n.input[0]] for n in model.graph.node if n.op_type == "Pad"]
    assert "Slice" not in [n.op_type for n in model.graph.node] and len(pads) == 4
    assert all(p.op_type == "Reshape" for p in pads)
    assert sorted(p.input[0] for p in pads) == sorted(model.graph.input[i].name for i in (0, 0, 1, 1))
    masked = [made_by[n.input[0]] for n in model.graph.node if n.op_type == "Mul"]
    assert len(masked) == 2 and all(m.op_type == "Pad" for m in masked)
    x_inf, g_inf = x.copy(), g.copy()
    x_inf[0, 1, 3, 4] = np.inf
    g_inf[1, 2, 5, 6] = -np.inf
    with np.errstate(invalid="ignore"):                       # inf + -inf where both reach one entry
        expected = naive_weight_grad(x_inf, g_inf, kernel, **kw)
    check_forward(fn, [x_inf, g_inf], expected, **TOL)
    check_forward(fn, [x, g], naive_weight_grad(x, g, kernel, **kw), **TOL)
    check_forward(fn, [x[:0], g[:0]], np.zeros((g.shape[1], x.shape[1], *kernel), np.float32))
    symbolic = gc.compile(fn, gc.spec(("batch", *x.shape[1:])), gc.spec(("batch", *g.shape[1:])), provider="cpu")
    np.testing.assert_allclose(symbolic(x[:1], g[:1]), naive_weight_grad(x[:1], g[:1], kernel, **kw), **TOL)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    check_forward(fn, [x64, g64], naive_weight_grad(x64, g64, kernel, **kw), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case, phases", [("2d-strided-blocks", "SpaceToDepth"), ("2d-strided-phases", "Slice"),
                                          ("3d-strided-phases", "Slice"), ("1d-strided-moves", "Slice")])
def test_a_strided_weight_gradient_moves_x_phases_and_g(case, phases):
    """Strided, with enough output positions per image: x is copied once into its phases (one
    SpaceToDepth, or one strided Slice per phase a tap reads) and each tap pairs a phase with g in
    one frame, moved by a Pad where needed (no window of a zero-padded x sliced per tap); for an
    empty and a symbolic batch and float64 too."""
    x, g, kernel, kw = weight_grad_inputs(case)
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)     # noqa: E731
    ops = conv_ops(fn, x, g)
    read = {tuple((d * t - p[0]) % s for t, d, p, s in zip(tap, kw["dilation"], kw["pad"], kw["stride"]))
            for tap in np.ndindex(*kernel)}                    # the phases the taps read
    assert ops.count(phases) == (1 if phases == "SpaceToDepth" else len(read))
    assert ops.count("MatMul") == math.prod(kernel) + 1        # one per tap, and the images' sum
    assert phases == "Slice" or "Slice" not in ops
    check_forward(fn, [x, g], naive_weight_grad(x, g, kernel, **kw), **TOL)
    check_forward(fn, [x[:0], g[:0]], np.zeros((g.shape[1], x.shape[1], *kernel), np.float32))
    symbolic = gc.compile(fn, gc.spec(("batch", *x.shape[1:])), gc.spec(("batch", *g.shape[1:])), provider="cpu")
    np.testing.assert_allclose(symbolic(x[:1], g[:1]), naive_weight_grad(x[:1], g[:1], kernel, **kw), **TOL)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    check_forward(fn, [x64, g64], naive_weight_grad(x64, g64, kernel, **kw), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape, stride, pad, dilation", [((4, 16, 16, 16), 2, ((1, 1), (1, 1)), (1, 1)),
                                                       ((4, 8, 11, 9), 3, ((2, 1), (0, 2)), (2, 1))])
def test_a_strided_weight_gradient_of_few_outputs_reads_phase_blocks(shape, stride, pad, dilation):
    """Equal strides and few outputs per image (the products run over chunks of images): x is
    padded once and moved into its phases by one SpaceToDepth, and each tap's window is a plain
    slice of one phase's block (no strided Slice); sizes that the stride does not divide are
    padded on. Values are the per-tap sums', for float64 too and with a one-image batch."""
    kernel, kw = (3, 3), dict(stride=(stride, stride), pad=pad, dilation=dilation, groups=1)
    out = [(n + sum(p) - d * (k - 1) - 1) // stride + 1 for n, p, d, k in zip(shape[2:], pad, dilation, kernel)]
    x, g = rand(*shape, seed=3), rand(shape[0], 12, *out, seed=4)
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)     # noqa: E731
    nodes = gc.compile(fn, x, g, provider="cpu").model.graph.node
    slices = [n for n in nodes if n.op_type == "Slice"]
    assert [n.op_type for n in nodes].count("SpaceToDepth") == 1 and len(slices) == math.prod(kernel)
    assert all(len(n.input) == 4 for n in slices)                               # no steps
    check_forward(fn, [x, g], naive_weight_grad(x, g, kernel, **kw), **TOL)
    check_forward(fn, [x[:1], g[:1]], naive_weight_grad(x[:1], g[:1], kernel, **kw), **TOL)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    check_forward(fn, [x64, g64], naive_weight_grad(x64, g64, kernel, **kw), rtol=1e-12, atol=1e-12)


def test_a_downsampling_blocks_strided_weight_gradients_share_one_space_to_depth():
    """A ResNet downsampling block reads x twice at stride 2 (a 3x3 convolution and a 1x1 shortcut):
    both weight gradients take x's phases from one SpaceToDepth of x (the shortcut's x needs no
    padding, so none is added and the two are one node); values are the sums'."""
    x, w3, w1 = rand(2, 8, 32, 32, seed=1), rand(8, 8, 3, 3, seed=2), rand(8, 8, 1, 1, seed=3)
    r = rand(2, 8, 16, 16, seed=4)

    def fn(x, w3, w1):
        return gc.grad(F.sum((F.conv(x, w3, stride=2, pad=1) + F.conv(x, w1, stride=2)) * r), [w3, w1])

    assert conv_ops(fn, x, w3, w1).count("SpaceToDepth") == 1
    kw3 = dict(stride=(2, 2), pad=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    kw1 = dict(stride=(2, 2), pad=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    check_forward(fn, [x, w3, w1], [naive_weight_grad(x, r, (3, 3), **kw3), naive_weight_grad(x, r, (1, 1), **kw1)],
                  **TOL)


def test_a_weight_gradient_of_few_outputs_moves_the_joined_positions():
    """Stride 1 and few outputs per image (the products run over chunks of images): each tap's
    window is one Pad of x's joined spatial positions (long rows, where a Pad of 8-element rows
    spent its time per row), followed by a mask where the window moves along columns; values are
    the per-tap sums', with infinite values away from the border, for float64 and one image."""
    kernel, kw = (3, 3), dict(stride=(1, 1), pad=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    x, g = rand(4, 16, 8, 8, seed=3), rand(4, 12, 8, 8, seed=4)
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)     # noqa: E731
    nodes = gc.compile(fn, x, g, provider="cpu").model.graph.node
    made_by = {out: n for n in nodes for out in n.output}
    pads = [n for n in nodes if n.op_type == "Pad"]
    assert len(pads) == math.prod(kernel) - 1 and all(made_by[p.input[0]].op_type == "Reshape" for p in pads)
    masked = [made_by[n.input[0]] for n in nodes if n.op_type == "Mul"]
    assert len(masked) == 6 and all(m.op_type == "Pad" for m in masked)      # the taps off the middle column
    check_forward(fn, [x, g], naive_weight_grad(x, g, kernel, **kw), **TOL)
    check_forward(fn, [x[:1], g[:1]], naive_weight_grad(x[:1], g[:1], kernel, **kw), **TOL)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    check_forward(fn, [x64, g64], naive_weight_grad(x64, g64, kernel, **kw), rtol=1e-12, atol=1e-12)
    x_inf, g_inf = x.copy(), g.copy()
    x_inf[1, 2, 3, 4], g_inf[2, 5, 4, 3] = np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        expected = naive_weight_grad(x_inf, g_inf, kernel, **kw)
    check_forward(fn, [x_inf, g_inf], expected, **TOL)


@pytest.mark.parametrize("joined", [False, True])
@pytest.mark.parametrize("chunks", [None, 1, 2])
@pytest.mark.parametrize("case", WEIGHT_GRAD_CASES)
def test_conv_weight_grad_in_chunks_of_images(monkeypatch, case, chunks, joined):
    """The weight gradient's contraction runs per image (None), in one product (1), or in two
    chunks of three images summed after (the lowering picks by output size; the limit is lowered
    here to take each way at test sizes), also for an empty and a symbolic batch; each as one
    product per kernel tap or one of all taps' windows joined (below FEW_CHANNELS, set here)."""
    from gcompile.lowering.targets.ort_cpu import conv
    x, g, kernel, kw = weight_grad_inputs(case)
    positions = math.prod(g.shape[2:])
    monkeypatch.setattr(conv, "WEIGHT_GRAD_MIN_CONTRACTION", {None: 2, 1: 7 * positions, 2: 3 * positions}[chunks])
    monkeypatch.setattr(conv, "FEW_CHANNELS", 10 ** 6 if joined else 0)
    assert conv._weight_grad_chunks(6, positions) == chunks
    x, g = np.concatenate([x] * 3), np.concatenate([g * 2, g, -g])
    f = lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw)   # noqa: E731
    # float32 rounding grows with the sums' length (the cases with 256 outputs per image and more)
    tol = dict(TOL, atol=TOL["atol"] * max(1.0, math.sqrt(positions / 64)))
    check_forward(f, [x, g], naive_weight_grad(x, g, kernel, **kw), **tol)
    zeros = np.zeros((g.shape[1], x.shape[1] // kw["groups"], *kernel), np.float32)
    check_forward(f, [x[:0], g[:0]], zeros)
    cf = gc.compile(f, gc.spec(("batch", *x.shape[1:])), gc.spec(("batch", *g.shape[1:])), provider="cpu")
    np.testing.assert_allclose(cf(x[:5], g[:5]), naive_weight_grad(x[:5], g[:5], kernel, **kw), **tol)
    # an empty batch after a full one: onnxruntime's product over nothing leaves the arena's leftovers
    np.testing.assert_array_equal(cf(x[:0], g[:0]), zeros)


@pytest.mark.parametrize("case", ["1d-stride-pad", "2d-groups-bias-asym-pad-dilation", "3d-stride-dilation"])
def test_conv_backward_graph_through_onnxruntime(case):
    x_shape, w_shape, kw = CONV_CASES[case]
    x, w, b = rand(*x_shape, seed=1), rand(*w_shape, seed=2), rand(w_shape[0], seed=3)
    r = rand(*naive_conv(x, w, **kw).shape, seed=9)
    expected = [naive_input_grad(r, w, x.shape, **kw), naive_weight_grad(x, r, w_shape[2:], **kw),
                r.sum(axis=(0, *range(2, r.ndim)))]
    check_forward(lambda x, w, b: gc.grad(F.sum(F.conv(x, w, b, **kw) * r), [x, w, b]), [x, w, b], expected, **TOL)


# -- pools forward, and their backward graphs -----------------------------------------------------------
POOL_CASES = {
    "1d": ((2, 3, 7), dict(kernel=3, stride=2, pad=1)),
    "2d": ((2, 2, 6, 7), dict(kernel=(3, 2), stride=(2, 1), pad=((1, 0), (1, 1)))),
    "2d-overlap": ((1, 2, 5, 5), dict(kernel=3, stride=1, pad=((2, 0), (0, 2)))),
    "3d-default-stride": ((2, 2, 4, 5, 4), dict(kernel=2, pad=(0, 1, 1))),
}


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool_forward_and_gradient(case):
    shape, kw = POOL_CASES[case]
    x = distinct(*shape, seed=10)
    y, index = naive_max_pool(x, **kw)
    r = rand(*y.shape, seed=11)
    grad = np.zeros(x.size)
    np.add.at(grad, index.ravel(), r.ravel())
    check_forward(lambda x: (F.max_pool(x, **kw), gc.grad(F.sum(F.max_pool(x, **kw) * r), [x])[0]), [x],
                  [y, grad.reshape(x.shape)])


@pytest.mark.parametrize("ties", [False, True])
def test_max_pool_indices_match_onnxruntime(ties):
    x = np.round(rand(2, 3, 5, 6, seed=12)) if ties else distinct(2, 3, 5, 6, seed=12)   # ties: the first wins
    kw = dict(kernel=(2, 3), stride=(1, 2), pad=((1, 0), (1, 1)))
    pool = lambda x: tuple(apply_n("max_pool", [x], **kw))      # noqa: E731
    check_forward(pool, [x], list(naive_max_pool(x, **kw)))
    check_lowering(pool, [x])                                    # the reference evaluator agrees too


def test_max_pool_of_minus_infinity_windows_picks_their_first_element():
    """A window of -inf (beside padding, which never wins) has its maximum at its first element:
    the gradient goes there, inside the window and inside its (N, C) plane; the reference
    evaluator agrees (it had given every such window flat index 0)."""
    x = distinct(2, 2, 4, 5, seed=14)
    x[1, 1, :2, :3] = -np.inf
    kw = dict(kernel=(2, 3), stride=(2, 3), pad=((1, 0), (1, 1)))
    pool = lambda x: tuple(apply_n("max_pool", [x], **kw))      # noqa: E731
    y, index = check_forward(pool, [x], list(naive_max_pool(x, **kw)))
    assert y[1, 1, 0, 0] == -np.inf and index[1, 1, 0, 0] == 3 * 20
    check_lowering(pool, [x])
    grad = gc.compile(lambda x: gc.grad(F.sum(F.max_pool(x, **kw)), [x])[0], x, provider="cpu")(x)
    assert grad[1, 1, 0, 0] == 1 and grad.sum() == y.size


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("case", POOL_CASES)
def test_avg_pool_forward_and_gradient(case, count_include_pad):
    shape, kw = POOL_CASES[case]
    x = rand(*shape, seed=13)
    r = rand(*naive_avg_pool(x, **kw)[0].shape, seed=14)
    y, grad = naive_avg_pool(x, count_include_pad=count_include_pad, r=r, **kw)

    def f(x):
        y = F.avg_pool(x, count_include_pad=count_include_pad, **kw)
        return y, gc.grad(F.sum(y * r), [x])[0]
    check_forward(f, [x], [y, grad])


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_avg_pool_forward(shape):
    x = rand(*shape, seed=15)
    expected = x.reshape(*shape[:2], -1).mean(-1).reshape(*shape[:2], *[1] * (len(shape) - 2))
    check_forward(F.global_avg_pool, [x], expected)


# -- symbolic batch --------------------------------------------------------------------------------------
def test_symbolic_batch_forward_and_backward():
    w = rand(4, 3, 3, 3, seed=16)
    kw = dict(stride=2, pad=((1, 0), (0, 1)))
    max_kw, avg_kw = dict(kernel=2, stride=1, pad=((1, 0), (0, 1))), dict(kernel=2, stride=1, pad=((0, 1), (1, 0)))
    r, r_max, r_avg = rand(1, 4, 3, 3, seed=17), rand(1, 3, 6, 6, seed=18), rand(1, 3, 6, 6, seed=19)

    def f(x, w):
        y = F.conv(x, w, **kw)
        pooled = F.max_pool(y, **max_kw) + F.avg_pool(y, **avg_kw)
        loss = F.sum(y * r) + F.sum(F.max_pool(x, **max_kw) * r_max) + F.sum(F.avg_pool(x, **avg_kw) * r_avg)
        gx, gw = gc.grad(loss, [x, w])
        return y, pooled, gx, gw

    cf = gc.compile(f, gc.spec(("batch", 3, 6, 6)), gc.spec((4, 3, 3, 3)), provider="cpu")
    for batch in (2, 3):
        x = distinct(batch, 3, 6, 6, seed=batch)
        y = naive_conv(x, w, **kw)
        pooled = naive_max_pool(y, **max_kw)[0] + naive_avg_pool(y, **avg_kw)[0]
        rb = np.broadcast_to(r, y.shape)
        gx = naive_input_grad(rb, w, x.shape, **kw) + naive_avg_pool(x, r=np.broadcast_to(r_avg, x.shape), **avg_kw)[1]
        np.add.at(gx.reshape(-1), naive_max_pool(x, **max_kw)[1].ravel(), np.broadcast_to(r_max, x.shape).ravel())
        for got, want in zip(cf(x, w), [y, pooled, gx, naive_weight_grad(x, rb, (3, 3), **kw)]):
            np.testing.assert_allclose(got, want, **TOL)


# -- taps wholly in the padding -------------------------------------------------------------------------
# A kernel wider than its input (a ResNet's last stage at 1x1, EfficientNet's 5x5 depthwise layers at
# 2x2) has taps whose windows read padding only: their weight gradient is 0. Each case reaches a lowering
# of the weight gradient (per tap, joined taps, chunks of images, moves of x and g, depthwise as one Conv
# or from flat windows, phases of a stride, two halves of the filters) with such taps, at a static batch
# and (check_grads) a symbolic one, on ONNX Runtime against central differences.
PADDING_TAP_CASES = {
    "3x3_on_1x1_few_channels": ((2, 3, 1, 1), (3, 3, 3, 3), dict(pad=1)),
    "3x3_on_1x1_chunks": ((8, 16, 1, 1), (16, 16, 3, 3), dict(pad=1)),
    "5x5_on_2x2": ((2, 3, 2, 2), (3, 3, 5, 5), dict(pad=2)),
    "depthwise_5x5_on_2x2": ((2, 16, 2, 2), (16, 1, 5, 5), dict(pad=2, groups=16)),
    "depthwise_3x3_on_rows_of_one": ((2, 4, 1, 130), (4, 1, 3, 3), dict(pad=1, groups=4)),
    "moves_on_rows_of_one": ((2, 8, 1, 300), (8, 8, 3, 3), dict(pad=1)),
    "strided_3x3_on_2x2": ((2, 8, 2, 2), (8, 8, 3, 3), dict(pad=1, stride=2)),
    "strided_5x5_on_1x1": ((2, 3, 1, 1), (4, 3, 5, 5), dict(pad=2, stride=2)),
    "dilated_on_2x3": ((2, 3, 2, 3), (2, 3, 3, 3), dict(pad=2, dilation=2)),
    "halves_5x5_on_2x2": ((8, 4, 2, 2), (8, 4, 5, 5), dict(pad=2)),
    "1d_kernel_5_on_1": ((2, 3, 1), (2, 3, 5), dict(pad=((4, 1),))),
    "grouped_3x3_on_1x2": ((2, 4, 1, 2), (6, 2, 3, 3), dict(pad=1, groups=2)),
}


@pytest.mark.parametrize("case", PADDING_TAP_CASES)
def test_weight_gradients_of_taps_wholly_in_the_padding(case):
    x_shape, w_shape, kw = PADDING_TAP_CASES[case]
    x, w = rand(*x_shape, seed=1), rand(*w_shape, seed=2)
    check_grads(lambda x, w: F.conv(x, w, **kw), [x, w])
    g = rand(*gc.compile(lambda x, w: F.conv(x, w, **kw), x, w, provider="cpu")(x, w).shape, seed=3)
    want = naive_weight_grad(x.astype(np.float64), g.astype(np.float64), w_shape[2:], **kw)
    for batch in (x_shape[0], "n"):
        specs = [gc.spec((batch, *x_shape[1:])), gc.spec((batch, *g.shape[1:])), gc.spec(w_shape)]
        cf = gc.compile(lambda x, g, w: gc.grad(F.sum(F.conv(x, w, **kw) * g), [w])[0], *specs, provider="cpu")
        np.testing.assert_allclose(cf(x, g, w), want, rtol=1e-5, atol=1e-5)


# -- gradient checks (float64, reference evaluator) -----------------------------------------------------
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_grads(case):
    x_shape, w_shape, kw = CONV_CASES[case]
    check_grads(lambda x, w, b: F.conv(x, w, b, **kw), [rand(*x_shape, seed=1), rand(*w_shape, seed=2),
                                                         rand(w_shape[0], seed=3)])


@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose_grads(case):
    x_shape, w_shape, kw = TRANSPOSE_CASES[case]
    b = rand(w_shape[1] * kw.get("groups", 1), seed=6)
    check_grads(lambda x, w, b: F.conv_transpose(x, w, b, **kw), [rand(*x_shape, seed=4), rand(*w_shape, seed=5), b])


@pytest.mark.parametrize("case", WEIGHT_GRAD_CASES)
def test_conv_weight_grad_grads(case):
    x, g, kernel, kw = weight_grad_inputs(case, np.float64)
    check_grads(lambda x, g: apply("conv_weight_grad", [x, g], kernel=kernel, **kw), [x, g])


def test_conv_third_order():
    x, w, b = rand(2, 2, 5, 4, seed=18), rand(3, 2, 2, 3, seed=19), rand(3, seed=20)
    check_grads(lambda x, w, b: F.tanh(F.conv(x, w, b, stride=(2, 1), pad=(1, 0))), [x, w, b], order=3)


@pytest.mark.parametrize("case", ["2d", "2d-overlap", "3d-default-stride"])
def test_max_pool_grads(case):
    shape, kw = POOL_CASES[case]
    check_grads(lambda x: F.max_pool(x, **kw) ** 2, [distinct(*shape, seed=21)])


@pytest.mark.parametrize("case", POOL_CASES)
def test_relu_under_max_pool(case):
    """relu then max_pool: after simplification relu's gradient selects on the pooled gradient
    (the window maxima), before the scatter, while the traced VJP is the plain select. Checked
    against direct loops on onnxruntime, with the relu output's own gradient (which no mask
    touches) asked for too, and numerically to second order."""
    shape, kw = POOL_CASES[case]
    x = distinct(*shape, seed=30)
    pooled, index = naive_max_pool(np.maximum(x, 0), **kw)
    r = rand(*pooled.shape, seed=31)
    grad_h = np.zeros(x.size)
    np.add.at(grad_h, index.ravel(), r.ravel())
    grad_h = grad_h.reshape(x.shape)

    def f(x):
        h = F.relu(x)
        p = F.max_pool(h, **kw)
        gx, gh = gc.grad(F.sum(p * r), [x, h])
        return p, gx, gh

    check_forward(f, [x], [pooled, np.where(x > 0, grad_h, 0), grad_h])
    graph = trace(lambda x: gc.grad(F.sum(F.max_pool(F.relu(x), **kw) * r), [x])[0], [x]).graph
    assert [n.outputs[0].shape for n in graph.nodes.values() if n.op == "where"] == [x.shape]
    optimize(graph)
    assert [n.outputs[0].shape for n in graph.nodes.values() if n.op == "where"] == [pooled.shape]
    check_grads(lambda x: F.max_pool(F.relu(x), **kw) ** 2, [x.astype(np.float64)])


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("case", ["1d", "2d", "3d-default-stride"])
def test_avg_pool_grads(case, count_include_pad):
    shape, kw = POOL_CASES[case]
    check_grads(lambda x: F.avg_pool(x, count_include_pad=count_include_pad, **kw) ** 2, [rand(*shape, seed=22)])


@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool_grad_op_grads(count_include_pad):
    attrs = dict(kernel=(3, 2), stride=(2, 1), pad=((1, 0), (1, 1)), count_include_pad=count_include_pad,
                 in_size=(6, 7))
    g = rand(2, 2, 3, 8, seed=23)
    check_grads(lambda g: apply("avg_pool_grad", [g], **attrs) ** 2, [g])


def test_pool_scatter_and_gather_grads():
    index = np.array([[0, 5, 5], [11, 2, 0]], np.int64)      # repeats accumulate in the scatter
    values, table = rand(2, 3, seed=24), rand(3, 4, seed=25)
    check_grads(lambda v, i: apply("pool_scatter", [v * v, i], shape=(3, 4)), [values, index])
    check_grads(lambda t, i: apply("pool_gather", [t * t, i]), [table, index])


def test_pool_scatter_and_gather_forward():
    index = np.array([[0, 5, 5], [11, 2, 0]], np.int64)
    values, table = rand(2, 3, seed=24), rand(3, 4, seed=25)
    scattered = np.zeros(12)
    np.add.at(scattered, index.ravel(), values.ravel())
    check_forward(lambda v, i: apply("pool_scatter", [v, i], shape=(3, 4)), [values, index], scattered.reshape(3, 4))
    check_forward(lambda t, i: apply("pool_gather", [t, i]), [table, index], table.ravel()[index])


@pytest.mark.parametrize("case", ["2d", "2d-overlap", "3d-default-stride", "2x2"])
def test_max_pool_gradients_through_onnxruntime_match_the_reference(case):
    # Disjoint windows (stride >= kernel) lower the scatter to MaxUnpool, overlapping ones to
    # ScatterElements; both, and the gather of the second order, must agree with numpy in float32.
    shape, kw = POOL_CASES[case] if case in POOL_CASES else ((3, 2, 8, 6), dict(kernel=2))
    x, v = distinct(*shape, seed=27), rand(*shape, seed=28)

    def f(x, v):
        g, = gc.grad(F.sum(F.max_pool(x, **kw) ** 3), [x])
        return g, gc.grad(F.sum(g * v), [x])[0]

    check_lowering(f, [x, v])
    ops = {n.op_type for n in gc.compile(f, x, v, provider="cpu").model.graph.node}
    disjoint = case in ("3d-default-stride", "2x2")
    assert ("MaxUnpool" in ops) == disjoint and ("ScatterElements" in ops) != disjoint


def test_pool_scatter_of_disjoint_windows_keeps_a_symbolic_batch():
    x = distinct(4, 3, 6, 6, seed=29)
    cf = gc.compile(lambda x: gc.grad(F.sum(F.max_pool(x, 3) ** 2), [x])[0], gc.spec(("n", 3, 6, 6)), provider="cpu")
    y = x.reshape(4, 3, 2, 3, 2, 3).max(axis=(3, 5), keepdims=True)
    expected = np.where(x.reshape(y.shape[:3] + (3,) + y.shape[4:5] + (3,)) == y, 2 * y, 0).reshape(x.shape)
    np.testing.assert_allclose(cf(x), expected, rtol=1e-6)


def test_global_avg_pool_grads():
    check_grads(lambda x: F.global_avg_pool(x) ** 2, [rand(2, 3, 4, 3, seed=26)])


# -- errors -----------------------------------------------------------------------------------------------
def test_float64_conv_on_cpu_is_refused_naming_conv():
    x, w = rand(1, 2, 5, 5, dtype=np.float64), rand(3, 2, 3, 3, dtype=np.float64)
    with pytest.raises(gc.GcompileError, match="Conv"):
        gc.compile(lambda x, w: F.conv(x, w), x, w, provider="cpu")


def test_channel_mismatch_names_both_shapes():
    with pytest.raises(gc.ShapeError, match=r"x \(2, 3, 5, 5\).*w \(4, 2, 3, 3\)"):
        gc.compile(lambda x, w: F.conv(x, w), rand(2, 3, 5, 5), rand(4, 2, 3, 3), provider="cpu")


def test_symbolic_spatial_dims_are_refused():
    with pytest.raises(gc.ShapeError, match="spatial dims must be static"):
        gc.compile(lambda x: F.max_pool(x, 2), gc.spec((1, 2, "h", 4)), provider="cpu")


@pytest.mark.parametrize("call, message", [
    (lambda x: F.max_pool(x, 2, pad=2), "smaller than the kernel"),
    (lambda x: F.conv(x, rand(2, 2, 7, 1)), "larger than the padded input"),
    (lambda x: F.conv(x, rand(2, 2, 1, 1), pad=((1, 2, 3), 0)), "pad must be"),
    (lambda x: F.conv_transpose(x, rand(2, 2, 1, 1), stride=2, output_padding=2), "output_padding"),
])
def test_argument_errors(call, message):
    with pytest.raises(gc.ShapeError, match=message):
        gc.compile(call, rand(1, 2, 5, 5), provider="cpu")


@pytest.mark.parametrize("stride, dilation, pad, output_padding", [
    (1, 2, 0, 1), (1, 3, 1, 2), (2, 3, 0, 2), (1, 2, (0, 1), 1), ((1, 2), (2, 1), 0, (1, 1)),
])
def test_conv_transpose_output_padding_below_the_dilation(stride, dilation, pad, output_padding):
    """PyTorch allows output_padding < max(stride, dilation); ONNX Runtime only below the stride, so
    the rows past the uncropped result are padded on (zeros, plus the bias)."""
    x, w, b = rand(1, 2, 3, 4, seed=1), rand(2, 3, 2, 3, seed=2), rand(3, seed=3)
    kw = dict(stride=stride, dilation=dilation, pad=pad, output_padding=output_padding)
    check_forward(lambda x, w, b: F.conv_transpose(x, w, b, **kw), [x, w, b], naive_conv_transpose(x, w, b, **kw),
                  **TOL)
    check_forward(lambda x, w: F.conv_transpose(x, w, **kw), [x, w], naive_conv_transpose(x, w, **kw), **TOL)
    check_grads(lambda x, w, b: F.conv_transpose(x, w, b, **kw), [x, w, b])


@pytest.mark.parametrize("length, kernel, pad, dilation, output_padding", [
    (2, 1, (2, 0), 2, 1), (1, 1, (1, 0), 2, 1), (2, 2, (3, 1), 3, 2),
])
def test_conv_transpose_whose_begin_padding_crops_into_the_output_padding(length, kernel, pad, dilation,
                                                                          output_padding):
    """The uncropped result is shorter than the begin padding: ONNX Runtime refused the ConvTranspose
    ("Computed output dimension is <= 0"), so that axis is convolved uncropped, padded, then sliced
    (fuzz seeds 10400327 and 10400997)."""
    x, w, b = rand(2, 1, length, seed=4), rand(1, 2, kernel, seed=5), rand(2, seed=6)
    kw = dict(stride=1, dilation=dilation, pad=(pad,), output_padding=output_padding)
    check_forward(lambda x, w, b: F.conv_transpose(x, w, b, **kw), [x, w, b], naive_conv_transpose(x, w, b, **kw),
                  **TOL)
    check_grads(lambda x, w, b: F.conv_transpose(x, w, b, **kw), [x, w, b])


def test_weight_gradients_of_an_empty_batch_on_onnxruntime():
    """An empty batch, static (the gradient is known without data: folded) and symbolic (fed zero
    images), through the weight gradient's lowerings: zeros. Before folding, ONNX Runtime 1.31 killed
    the process (SIGFPE) running the optimised graph of a strided, dilated depthwise one."""
    kw = dict(pad=4, stride=2, dilation=2, groups=16)
    x, w = np.zeros((0, 16, 2), np.float32), rand(16, 1, 5)
    g = np.zeros((0, 16, 1), np.float32)
    for batch in (0, "n"):
        cf = gc.compile(lambda x, g, w: gc.grad(F.sum(F.conv(x, w, **kw) * g), [x, w]),
                        gc.spec((batch, 16, 2)), gc.spec((batch, 16, 1)), w, provider="cpu")
        gx, gw = cf(x, g, w)
        assert gx.shape == x.shape and np.array_equal(gw, np.zeros_like(w))


def test_empty_batches_on_the_reference_evaluator():
    """An empty batch through convolution, its transpose and average pooling, values and gradients of
    both orders, on the float64 reference evaluator (numpy's reshape(-1) cannot size an empty batch)."""
    x, w = np.zeros((0, 4, 5, 6)), np.ones((2, 2, 3, 3))

    def fn(x, w):
        y = F.conv(x, w, groups=2) + F.conv_transpose(x, np.ones((4, 1, 2, 2)), stride=2, groups=2)[..., :3, :4]
        return F.sum(F.avg_pool(y, (2, 2), 1) ** 2)

    def second(x, w):
        gx, gw = gc.grad(fn(x, w), [x, w])
        return gc.grad(F.sum(gx) + F.sum(gw), [x, w])
    gx, gw = evaluate(trace(second, [x, w]).graph, [x, w])
    assert gx.shape == x.shape and np.array_equal(gw, np.zeros_like(w))


@pytest.mark.parametrize("x_shape, w_shape, kw", [
    ((8, 4, 3, 3), (12, 4, 3, 3), dict(pad=1)),     # ort-cpu's Conv in two halves of the filters (8 images)
    ((2, 3, 8, 8), (5, 3, 4, 4), dict(stride=4)),   # its weight gradient from 4x4 patches (stride = kernel)
    ((2, 3, 8, 8), (6, 1, 7, 7), dict(pad=3, groups=3)),    # a depthwise one from the flat frame's rows
    ((2, 3, 8, 8), (3, 1, 5, 5), dict(pad=2, groups=3)),    # a depthwise conv as banded products
], ids=["halves", "patches", "depthwise_rows", "depthwise_banded"])
def test_gradients_through_onnxruntime_cpu_forms(x_shape, w_shape, kw):
    """Sizes at which the ort-cpu target takes its conv strategies (tests/lowering/test_strategies.py
    has both sides of each threshold), checked to second order against central differences."""
    check_grads(lambda x, w: F.conv(x, w, **kw), [rand(*x_shape, seed=41), rand(*w_shape, seed=42)])
