"""interpolate, adaptive pooling, grid_sample, pixel_shuffle, unfold/fold and the PyTorch pooling
options (dilation, ceil_mode, return_indices, divisor_override): forward through onnxruntime
against loops written from PyTorch's definitions, float64 gradient checks (orders 1 and 2), and
the edges (ties and NaN in max windows, samples outside the image, outputs of size 1, empty
batches, float64, symbolic batch). tests/ops/test_torch_parity.py compares with PyTorch's own
numbers."""
import itertools
import math

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ops.spatial import resample_matrix

from ..opcheck import check_forward, check_grads

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# -- interpolate ---------------------------------------------------------------------------------------
def naive_bilinear(x, out, align_corners):
    """Per output pixel, torch's upsample_bilinear2d: source = (dst + 0.5) * in/out - 0.5 clamped
    at 0 (or dst * (in-1)/(out-1)), the two neighbours weighted linearly."""
    n, c, h, w = x.shape
    y = np.zeros((n, c) + out)

    def source(d, size_in, size_out):
        if align_corners:
            return d * ((size_in - 1) / (size_out - 1) if size_out > 1 else 0)
        return max((d + 0.5) * size_in / size_out - 0.5, 0.0)
    for i, j in itertools.product(range(out[0]), range(out[1])):
        sy, sx = source(i, h, out[0]), source(j, w, out[1])
        y0, x0 = int(sy), int(sx)
        y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
        ly, lx = sy - y0, sx - x0
        y[:, :, i, j] = ((1 - ly) * ((1 - lx) * x[:, :, y0, x0] + lx * x[:, :, y0, x1])
                         + ly * ((1 - lx) * x[:, :, y1, x0] + lx * x[:, :, y1, x1]))
    return y


def naive_nearest(x, out, scales=None):
    idx = []
    for k, (i, o) in enumerate(zip(x.shape[2:], out)):
        step = np.float32(1 / scales[k]) if scales else np.float32(i / o)
        idx.append([min(int(np.floor(np.float32(d) * step)), i - 1) for d in range(o)])
    return x[np.ix_(range(x.shape[0]), range(x.shape[1]), *idx)]


@pytest.mark.parametrize("out", [(7, 9), (3, 4), (1, 1), (4, 5)])
@pytest.mark.parametrize("align", [False, True])
def test_bilinear_against_torchs_formula(out, align):
    x = rand(2, 3, 4, 5)
    check_forward(lambda x: F.interpolate(x, size=out, mode="bilinear", align_corners=align), [x],
                  naive_bilinear(x, out, align), atol=1e-5)


@pytest.mark.parametrize("size, scale", [((9, 3), None), (None, (1.7, 0.6)), (None, 2), ((4, 5), None)])
def test_nearest_uses_torchs_index_rule(size, scale):
    x = rand(1, 2, 4, 5)
    out = size or tuple(math.floor(i * s) for i, s in zip((4, 5), (scale,) * 2 if np.isscalar(scale) else scale))
    scales = None if scale is None else ((scale,) * 2 if np.isscalar(scale) else scale)
    check_forward(lambda x: F.interpolate(x, size=size, scale_factor=scale), [x], naive_nearest(x, out, scales))
    check_grads(lambda x: F.interpolate(x, size=size, scale_factor=scale), [x])


def test_resample_matrices_rows_sum_to_one_and_cubic_keeps_constants():
    for mode in ("nearest", "nearest-exact", "linear", "cubic"):
        for n_in, n_out in [(5, 9), (9, 5), (1, 4), (4, 1), (3, 3)]:
            m = resample_matrix(n_in, n_out, mode, align_corners=mode in ("linear", "cubic") and n_in > 3)
            np.testing.assert_allclose(m.sum(axis=1), 1, rtol=1e-12)


@pytest.mark.parametrize("mode, shape, kw", [
    ("nearest", (2, 3, 5), dict(size=8)),
    ("nearest-exact", (1, 2, 4, 5), dict(scale_factor=1.5)),
    ("nearest", (1, 1, 2, 3, 4), dict(size=(3, 2, 5))),
    ("linear", (2, 2, 5), dict(size=3, align_corners=True)),
    ("bilinear", (1, 2, 4, 5), dict(size=(6, 3))),
    ("bilinear", (1, 2, 4, 5), dict(scale_factor=(1.7, 2.3))),
    ("bicubic", (1, 2, 4, 5), dict(size=(7, 6))),
    ("bicubic", (1, 1, 5, 4), dict(size=(3, 2), align_corners=True)),
    ("trilinear", (1, 1, 2, 3, 4), dict(size=(3, 5, 2))),
])
def test_interpolate_gradients(mode, shape, kw):
    check_grads(lambda x: F.interpolate(x, mode=mode, **kw) ** 2, [rand(*shape)])


def test_interpolate_float64_symbolic_batch_and_empty_batch():
    """float64 (no double Resize kernel on the CPU: matmuls), a symbolic batch, an empty batch, and a
    scale whose float32 product floors below torch's size (10 * float32(0.7) < 7: matmuls too)."""
    x = rand(2, 3, 4, 5, dtype=np.float64)
    expected = naive_bilinear(x, (7, 3), False)
    check_forward(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear"), [x], expected, rtol=1e-12, atol=1e-12)
    cf = gc.compile(lambda x: F.interpolate(x, size=(7, 3), mode="bilinear"), gc.spec(("batch", 3, 4, 5)))
    for n in (1, 2, 0):
        np.testing.assert_allclose(cf(x[:n].astype(np.float32)), expected[:n], rtol=1e-5, atol=1e-5)
    x10 = rand(1, 1, 10, 10)
    check_forward(lambda x: F.interpolate(x, scale_factor=0.7, mode="bilinear"), [x10],
                  np.einsum("oh,pw,nchw->ncop", resample_matrix(10, 7, "linear", scale=0.7),
                            resample_matrix(10, 7, "linear", scale=0.7), x10), atol=1e-5)


@pytest.mark.parametrize("call, message", [
    (lambda x: F.interpolate(x, size=3, mode="bilinear"), "does not apply to 1 spatial"),
    (lambda x: F.interpolate(x, size=3, align_corners=True), "align_corners applies"),
    (lambda x: F.interpolate(x), "exactly one of size and scale_factor"),
    (lambda x: F.interpolate(x, scale_factor=0.1), "must be positive"),
    (lambda x: F.interpolate(x, size=(2, 3)), "one value or 1"),
    (lambda x: F.interpolate(x, size=3, mode="lanczos"), "mode 'lanczos'"),
])
def test_interpolate_errors(call, message):
    with pytest.raises(gc.ShapeError, match=message):
        gc.compile(call, rand(1, 2, 5))


@pytest.mark.parametrize("shape, kw", [((2, 3, 7), dict(size=3)), ((1, 2, 4, 5), dict(size=(3, 7))),
                                       ((1, 2, 4, 4, 4), dict(scale_factor=0.6)),
                                       ((1, 1, 4, 5), dict(scale_factor=1.7))])
def test_interpolate_area_is_adaptive_average_pooling(shape, kw):
    """mode 'area' is torch's adaptive_avg_pool to the output size (from scale_factor: floor(in * s))."""
    x = rand(*shape)
    size = kw.get("size") or tuple(math.floor(i * kw["scale_factor"]) for i in shape[2:])
    size = (size,) if isinstance(size, int) else size
    check_forward(lambda x: F.interpolate(x, mode="area", **kw), [x], naive_adaptive(x, size, np.mean), atol=1e-6)
    check_grads(lambda x: F.interpolate(x, mode="area", **kw), [x.astype(np.float64)])


# -- adaptive pooling ----------------------------------------------------------------------------------------
def bins(n_in, n_out):
    return [(math.floor(i * n_in / n_out), math.ceil((i + 1) * n_in / n_out)) for i in range(n_out)]


def naive_adaptive(x, out, reduce):
    spatial = x.shape[2:]
    y = np.zeros(x.shape[:2] + out)
    for o in np.ndindex(*out):
        region = tuple(slice(*bins(i, n)[k]) for i, n, k in zip(spatial, out, o))
        y[(Ellipsis,) + o] = reduce(x[(Ellipsis,) + region].reshape(x.shape[:2] + (-1,)), axis=-1)
    return y


@pytest.mark.parametrize("shape, out", [((2, 3, 7), (3,)), ((2, 2, 7, 5), (3, 2)), ((1, 2, 5, 4, 6), (2, 3, 4)),
                                        ((1, 2, 4, 6), (4, 6)), ((1, 2, 3, 5), (7, 1)), ((1, 1, 5, 5), (None, 2))])
def test_adaptive_pools(shape, out):
    x = rand(*shape)
    full = tuple(i if o is None else o for i, o in zip(shape[2:], out))
    size = out if len(out) > 1 else out[0]
    check_forward(lambda x: (F.adaptive_avg_pool(x, size), F.adaptive_max_pool(x, size)), [x],
                  [naive_adaptive(x, full, np.mean), naive_adaptive(x, full, np.max)], atol=1e-6)
    check_grads(lambda x: (F.adaptive_avg_pool(x, size), F.adaptive_max_pool(x, size)), [x.astype(np.float64)])


@pytest.mark.parametrize("spatial, out", [((7,), (3,)), ((7, 5), (3, 2)), ((5, 4, 6), (2, 3, 4))],
                         ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("mode", ["adaptive", "linear", "nearest"])
def test_pools_and_interpolation_at_an_empty_batch(spatial, out, mode):
    """Adaptive pooling (and interpolate's "area") and the linear resamplings apply a matrix along
    each spatial axis, a product that ONNX Runtime (1.31) refused at an empty batch ("cannot
    broadcast on dim 0"); adaptive max pooling's and nearest's gradients are scatter_adds, refused
    there too. Values and gradients at a static batch of 0, and at a symbolic batch given 0 and 2."""
    nsp = len(spatial)
    if mode == "adaptive":
        fn = lambda x: (F.adaptive_avg_pool(x, out), F.adaptive_max_pool(x, out))             # noqa: E731
    else:
        kind = "nearest" if mode == "nearest" else {1: "linear", 2: "bilinear", 3: "trilinear"}[nsp]
        fn = lambda x: (F.interpolate(x, size=out, mode=kind), F.interpolate(x, size=out, mode="area"))  # noqa: E731
    both = lambda x: (*fn(x), gc.grad(F.sum(fn(x)[0] ** 2) + F.sum(fn(x)[1] ** 2), [x])[0])      # noqa: E731
    symbolic = gc.compile(both, gc.spec(("batch", 2) + spatial), provider="cpu")
    for n in (0, 2):
        x = rand(n, 2, *spatial)
        want = [np.asarray(v) for v in evaluate(trace(both, [x.astype(np.float64)]).graph, [x.astype(np.float64)])]
        assert [w.shape for w in want] == [(n, 2) + out] * 2 + [x.shape]
        if not n:
            check_forward(both, [x], want)
        for got, w in zip(symbolic.run_flat(x), want):
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)
    check_grads(fn, [rand(2, 2, *spatial).astype(np.float64)])


def test_adaptive_max_pool_ties_nan_and_indices():
    """The first maximum of a bin wins a tie and alone gets the gradient; a NaN wins its bin."""
    x = np.array([[[[1, 3, 3], [3, 0, 2]]]], np.float32)             # bins (1, 2) over (2, 3): rows, cols 0-1 / 1-2
    y, idx = gc.compile(lambda x: F.adaptive_max_pool(x, (1, 2), return_indices=True), x, provider="cpu")(x)
    np.testing.assert_array_equal(y, [[[[3, 3]]]])
    np.testing.assert_array_equal(idx, [[[[1, 1]]]])
    g = gc.compile(lambda x: gc.grad(F.sum(F.adaptive_max_pool(x, (1, 2)) * np.array([1.0, 10.0], np.float32)),
                                     [x])[0], x, provider="cpu")(x)
    np.testing.assert_array_equal(g, [[[[0, 11, 0], [0, 0, 0]]]])
    x[0, 0, 1, 2] = np.nan
    y = gc.compile(lambda x: F.adaptive_max_pool(x, (1, 2)), x, provider="cpu")(x)
    assert y[0, 0, 0, 0] == 3 and np.isnan(y[0, 0, 0, 1])


# -- grid_sample -------------------------------------------------------------------------------------------
def reflect(v, low2, high2):
    """torch's reflect_coordinates, one scalar at a time."""
    if low2 == high2:
        return 0.0
    low, span = low2 / 2, (high2 - low2) / 2
    v = abs(v - low)
    flips, extra = math.floor(v / span), math.fmod(v, span)
    return extra + low if flips % 2 == 0 else span - extra + low


def source(v, size, padding, align):
    if padding == "border":
        return min(max(v, 0), size - 1)
    if padding == "reflection":
        v = reflect(v, 0, 2 * (size - 1)) if align else reflect(v, -1, 2 * size - 1)
        return min(max(v, 0), size - 1)
    return v


def cubic(t, a=-0.75):
    near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1            # noqa: E731
    far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a        # noqa: E731
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def naive_grid_sample(x, grid, mode, padding, align):
    """Per output point, torch's grid_sampler_{2,3}d: grid coordinate k addresses spatial axis
    nsp-1-k; bilinear/trilinear weigh the 2^nsp corners, nearest rounds half to even, bicubic reads
    a 4x4 neighbourhood whose taps each go through the padding rule."""
    n, c, *spatial = x.shape
    nsp = len(spatial)
    sizes = spatial[::-1]
    out = np.zeros((n, c) + grid.shape[1:-1])

    def pixel(b, point):                        # point: integer coordinates in grid order (x, y, z)
        index = tuple(point[::-1])
        inside = all(0 <= i < s for i, s in zip(index, spatial))
        return x[(b, slice(None)) + index] if inside else np.zeros(c)
    for b, *o in np.ndindex(n, *grid.shape[1:-1]):
        g = grid[(b, *o)]
        pos = [(v + 1) / 2 * (s - 1) if align else ((v + 1) * s - 1) / 2 for v, s in zip(g, sizes)]
        if mode == "bicubic":
            base = [math.floor(p) for p in pos]
            wx, wy = cubic(pos[0] - base[0]), cubic(pos[1] - base[1])
            value = np.zeros(c)
            for i, j in itertools.product(range(4), range(4)):
                tap = [int(source(base[0] - 1 + i, sizes[0], padding, align)),
                       int(source(base[1] - 1 + j, sizes[1], padding, align))]
                value = value + wx[i] * wy[j] * pixel(b, tap)
            out[(b, slice(None), *o)] = value
            continue
        pos = [source(p, s, padding, align) for p, s in zip(pos, sizes)]
        if mode == "nearest":
            out[(b, slice(None), *o)] = pixel(b, [int(np.rint(p)) for p in pos])
            continue
        value = np.zeros(c)
        for corner in itertools.product((0, 1), repeat=nsp):
            low = [math.floor(p) for p in pos]
            weight = math.prod((p - lo) if bit else (1 - (p - lo)) for p, lo, bit in zip(pos, low, corner))
            value = value + weight * pixel(b, [lo + bit for lo, bit in zip(low, corner)])
        out[(b, slice(None), *o)] = value
    return out


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample(mode, padding, align):
    x = rand(2, 3, 4, 5)
    grid = RNG.uniform(-1.4, 1.4, (2, 3, 4, 2)).astype(np.float32)    # some samples fall outside
    check_forward(lambda x, g: F.grid_sample(x, g, mode, padding, align), [x, grid],
                  naive_grid_sample(x, grid, mode, padding, align), atol=1e-5)
    check_grads(lambda x, g: F.grid_sample(x, g, mode, padding, align), [x, grid])


@pytest.mark.parametrize("mode, padding, align", [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                                                  ("nearest", "border", False), ("bilinear", "border", True)])
def test_grid_sample_3d(mode, padding, align):
    """5-d x: grid (N, D, H, W, 3) of (x, y, z), trilinear for 'bilinear'."""
    x = rand(2, 2, 3, 4, 5)
    grid = RNG.uniform(-1.3, 1.3, (2, 2, 3, 2, 3)).astype(np.float32)
    check_forward(lambda x, g: F.grid_sample(x, g, mode, padding, align), [x, grid],
                  naive_grid_sample(x, grid, mode, padding, align), atol=1e-5)
    check_grads(lambda x, g: F.grid_sample(x, g, mode, padding, align), [x, grid])


def test_grid_sample_reflection_far_outside_and_size_one_axes():
    """Locations several widths outside fold back in (reflection), and a size-1 axis reflects to 0."""
    x = rand(1, 2, 1, 4, dtype=np.float64)
    grid = np.array([[[[-7.3, 0.2], [5.9, -3.1], [2.6, 9.4]]]])
    for align in (False, True):
        check_forward(lambda x, g, align=align: F.grid_sample(x, g, "bilinear", "reflection", align), [x, grid],
                      naive_grid_sample(x, grid, "bilinear", "reflection", align), rtol=1e-12, atol=1e-12)


def test_grid_sample_exact_pixel_centres_and_nearest_ties():
    """With align_corners the grid's -1 and 1 are the corner pixels' centres: the identity grid
    gives x back; nearest rounds half to even, as torch."""
    x = rand(1, 2, 3, 4)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 4), indexing="ij")
    identity = np.stack([xs, ys], -1)[None].astype(np.float32)
    check_forward(lambda x, g: F.grid_sample(x, g, align_corners=True), [x, identity], x, atol=1e-6)
    check_forward(lambda x, g: F.grid_sample(x, g, "bicubic", align_corners=True), [x, identity], x, atol=1e-5)
    half = np.array([[[[-1 + 1 / 3, -1.0]]]], np.float32)          # x = 0.5 (align_corners): rounds to 0
    check_forward(lambda x, g: F.grid_sample(x, g, "nearest", align_corners=True), [x, half], x[:, :, :1, :1])


def test_grid_sample_errors():
    with pytest.raises(gc.ShapeError, match="grid must have shape"):
        gc.compile(lambda x, g: F.grid_sample(x, g), rand(1, 2, 3, 4), rand(1, 3, 3))
    with pytest.raises(gc.UnsupportedError, match="padding_mode 'circular'"):
        gc.compile(lambda x, g: F.grid_sample(x, g, padding_mode="circular"), rand(1, 2, 3, 4), rand(1, 3, 3, 2))
    with pytest.raises(gc.UnsupportedError, match="mode 'bicubic'.*3 spatial dims"):
        gc.compile(lambda x, g: F.grid_sample(x, g, mode="bicubic"), rand(1, 2, 3, 4, 2), rand(1, 3, 3, 1, 3))


# -- pixel shuffle, unfold / fold ----------------------------------------------------------------------------
def test_pixel_shuffle_and_unshuffle():
    x = rand(2, 12, 3, 2)
    r = 2
    expected = x.reshape(2, 3, r, r, 3, 2).transpose(0, 1, 4, 2, 5, 3).reshape(2, 3, 6, 4)
    check_forward(lambda x: (F.pixel_shuffle(x, r), F.pixel_unshuffle(F.pixel_shuffle(x, r), r)), [x],
                  [expected, x])
    check_grads(lambda x: F.pixel_shuffle(x, 2) ** 2, [x])
    check_forward(lambda x: F.pixel_shuffle(x, 2), [x[0]], expected[0])              # unbatched (C, H, W)
    with pytest.raises(gc.ShapeError, match="needs"):
        gc.compile(lambda x: F.pixel_shuffle(x, 5), x)


def naive_unfold(x, kernel, dilation, pad, stride):
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (xp.shape[2] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    cols = np.zeros((x.shape[0], x.shape[1], kernel[0], kernel[1], oh, ow))
    for i, j, a, b in np.ndindex(kernel[0], kernel[1], oh, ow):
        cols[:, :, i, j, a, b] = xp[:, :, a * stride[0] + i * dilation[0], b * stride[1] + j * dilation[1]]
    return cols.reshape(x.shape[0], -1, oh * ow)


@pytest.mark.parametrize("kernel, dilation, pad, stride", [((2, 2), (1, 1), (0, 0), (1, 1)),
                                                           ((2, 3), (2, 1), (1, 0), (1, 2)),
                                                           ((3, 3), (1, 1), (1, 1), (2, 2))])
def test_unfold_and_fold_are_adjoint(kernel, dilation, pad, stride):
    x = rand(2, 3, 6, 7)
    cols = naive_unfold(x, kernel, dilation, pad, stride)
    kw = dict(kernel_size=kernel, dilation=dilation, padding=pad, stride=stride)
    check_forward(lambda x: F.unfold(x, **kw), [x], cols)
    c = rand(*cols.shape)
    folded = gc.compile(lambda c: F.fold(c, (6, 7), **kw), c, provider="cpu")(c)
    np.testing.assert_allclose(np.sum(folded * x), np.sum(c * cols), rtol=1e-4)     # <fold(c), x> = <c, unfold(x)>
    check_forward(lambda c: F.fold(c, (6, 7), **kw), [c[0]], folded[0], atol=1e-5)   # unbatched
    check_grads(lambda x: F.unfold(x, **kw) ** 2, [x[:1, :2]])
    check_grads(lambda c: F.fold(c, (6, 7), **kw) ** 2, [c[:1]])


def test_fold_errors():
    with pytest.raises(gc.ShapeError, match="need C\\*4 rows"):
        gc.compile(lambda c: F.fold(c, (4, 4), 2), rand(1, 6, 9))
    with pytest.raises(gc.ShapeError, match="does not fit"):
        gc.compile(lambda x: F.unfold(x, 5), rand(1, 1, 3, 3))


# -- torch's pooling options -----------------------------------------------------------------------------------
def naive_max_pool(x, kernel, stride, pad, dilation, ceil_mode):
    n, c, h, w = x.shape
    out = []
    for i, k, s, p, d in zip((h, w), kernel, stride, pad, dilation):
        span = i + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + p:
            o -= 1
        out.append(o)
    y, idx = np.zeros((n, c, *out)), np.zeros((n, c, *out), np.int64)
    for a, b in np.ndindex(*out):
        best, where = np.full((n, c), -np.inf), np.zeros((n, c), np.int64)
        for i, j in np.ndindex(*kernel):
            r, q = a * stride[0] + i * dilation[0] - pad[0], b * stride[1] + j * dilation[1] - pad[1]
            if 0 <= r < h and 0 <= q < w:
                better = x[:, :, r, q] > best
                best, where = np.where(better, x[:, :, r, q], best), np.where(better, r * w + q, where)
        y[:, :, a, b], idx[:, :, a, b] = best, where
    return y, idx


@pytest.mark.parametrize("kernel, stride, pad, dilation, ceil_mode", [
    ((3, 3), (2, 2), (1, 1), (2, 2), False), ((3, 2), (2, 2), (1, 0), (1, 1), True),
    ((2, 2), (3, 3), (0, 0), (2, 1), True), ((2, 2), (2, 2), (0, 0), (1, 1), False),
    ((9, 3), (9, 2), (0, 1), (1, 2), True),      # ceil_mode: one window reaching past the input's rows
])
def test_max_pool_dilation_ceil_mode_and_indices(kernel, stride, pad, dilation, ceil_mode):
    x = np.round(rand(2, 2, 7, 8), 1)                                  # ties inside windows
    y, idx = naive_max_pool(x, kernel, stride, pad, dilation, ceil_mode)
    check_forward(lambda x: F.max_pool(x, kernel, stride, pad, dilation=dilation, ceil_mode=ceil_mode,
                                       return_indices=True), [x], [y, idx])
    check_grads(lambda x: F.max_pool(x, kernel, stride, pad, dilation=dilation, ceil_mode=ceil_mode),
                [rand(1, 2, 7, 8)])


def test_dilated_max_pool_nan_wins():
    x = rand(1, 1, 5, 5)
    x[0, 0, 2, 2] = np.nan
    y = gc.compile(lambda x: F.max_pool(x, 2, 1, dilation=2), x, provider="cpu")(x)
    assert np.isnan(y[0, 0, 0, 0]) and np.isnan(y[0, 0, 2, 2]) and not np.isnan(y[0, 0, 1, 0])


def naive_avg_pool(x, kernel, stride, pad, ceil_mode, count_include_pad, divisor_override):
    n, c, h, w = x.shape
    out = []
    for i, k, s, p in zip((h, w), kernel, stride, pad):
        span = i + 2 * p - k
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + p:
            o -= 1
        out.append(o)
    y = np.zeros((n, c, *out))
    for a, b in np.ndindex(*out):
        r0, q0 = a * stride[0] - pad[0], b * stride[1] - pad[1]
        r1, q1 = min(r0 + kernel[0], h + pad[0]), min(q0 + kernel[1], w + pad[1])
        size = (r1 - r0) * (q1 - q0)
        rs, qs = slice(max(r0, 0), min(r1, h)), slice(max(q0, 0), min(q1, w))
        total = x[:, :, rs, qs].sum(axis=(2, 3))
        count = (rs.stop - rs.start) * (qs.stop - qs.start)
        y[:, :, a, b] = total / (divisor_override or (size if count_include_pad else count))
    return y


@pytest.mark.parametrize("cip", [False, True])
@pytest.mark.parametrize("kernel, stride, pad, ceil_mode, divisor", [
    ((3, 3), (2, 2), (1, 1), True, None), ((2, 3), (2, 2), (1, 1), True, None), ((2, 2), (2, 2), (1, 0), False, 3),
    ((3, 2), (3, 1), (0, 1), True, 5),
    ((10, 11), (8, 9), (1, 1), True, None),      # one window reaching past the padded input on both axes
])
def test_avg_pool_ceil_mode_and_divisor_override(kernel, stride, pad, ceil_mode, divisor, cip):
    x = rand(2, 2, 7, 8)
    check_forward(lambda x: F.avg_pool(x, kernel, stride, pad, count_include_pad=cip, ceil_mode=ceil_mode,
                                       divisor_override=divisor), [x],
                  naive_avg_pool(x, kernel, stride, pad, ceil_mode, cip, divisor), atol=1e-6)
    check_grads(lambda x: F.avg_pool(x, kernel, stride, pad, count_include_pad=cip, ceil_mode=ceil_mode,
                                     divisor_override=divisor), [x[:1]])


@pytest.mark.parametrize("pool, reduce", [(F.avg_pool, np.mean), (F.max_pool, np.max)])
def test_a_ceil_mode_window_wider_than_the_input_is_cut_to_it(pool, reduce):
    """transformers' EfficientNet pools its last 2x2 map with a 2560-wide window: one window, whose
    taps past the input are cut, not padded for (a 2560x2560 padding of every channel)."""
    x = rand(1, 3, 2, 2)
    cf = gc.compile(lambda x: pool(x, 2560, ceil_mode=True), x, provider="cpu")
    np.testing.assert_allclose(cf(x), reduce(x, axis=(2, 3), keepdims=True), rtol=1e-6)
    kernels = [list(a.ints) for node in cf.model.graph.node for a in node.attribute if a.name == "kernel_shape"]
    assert kernels and all(max(k) <= 2 for k in kernels), kernels


def test_pooling_option_errors():
    with pytest.raises(gc.ShapeError, match="divisor_override must be a positive int"):
        gc.compile(lambda x: F.avg_pool(x, 2, divisor_override=0), rand(1, 1, 4, 4))
    with pytest.raises(gc.ShapeError, match="smaller than the dilated kernel"):
        gc.compile(lambda x: F.max_pool(x, 2, pad=3, dilation=2), rand(1, 1, 8, 8))
    for ceil_mode in (False, True):     # ceil_mode's window may reach stride - 1 past the input, not further
        with pytest.raises(gc.ShapeError, match="larger than the padded input"):
            gc.compile(lambda x, c=ceil_mode: F.avg_pool(x, 7, 2, ceil_mode=c), rand(1, 1, 5, 5))
    gc.compile(lambda x: F.avg_pool(x, 7, 3, ceil_mode=True), rand(1, 1, 5, 5))


# -- max_unpool and channel_shuffle ------------------------------------------------------------------------------
def np_unpool(x, idx, size):
    n, c = x.shape[:2]
    out = np.zeros((n, c, int(np.prod(size))))
    flat_x, flat_i = x.reshape(n, c, -1), idx.reshape(n, c, -1)
    for a in range(n):
        for b in range(c):
            for v, i in zip(flat_x[a, b], flat_i[a, b]):
                out[a, b, i] = v                                   # in order: the last write wins
    return out.reshape((n, c) + tuple(size))


@pytest.mark.parametrize("shape, kernel, stride, pad", [((2, 3, 9), 3, 2, 1), ((1, 2, 6, 7), 2, 2, 0),
                                                        ((1, 2, 5, 6), (3, 2), (2, 1), (1, 0)),
                                                        ((1, 1, 4, 4, 6), 2, 2, 0)])
def test_max_unpool_inverts_max_pool(shape, kernel, stride, pad):
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    pooled, idx = gc.compile(lambda x: F.max_pool(x, kernel, stride, pad, return_indices=True), x)(x)
    size = shape[2:]
    check_forward(lambda p, i: F.max_unpool(p, i, kernel, stride, pad, output_size=size), [pooled, idx],
                  np_unpool(pooled, idx, size))
    check_grads(lambda p, i: F.max_unpool(p, i, kernel, stride, pad, output_size=shape), [pooled, idx])


def test_max_unpool_default_size_and_repeated_indices():
    """Without output_size the size is (in - 1)·stride - 2·pad + kernel; a repeated index (windows that
    overlap on one maximum) keeps the value written last, which alone gets the gradient."""
    p, idx = np.array([[[1.0, 2.0, 3.0]]]), np.array([[[1, 1, 4]]])
    check_forward(lambda p, i: F.max_unpool(p, i, 2), [p, idx], np.array([[[0.0, 2.0, 0.0, 0.0, 3.0, 0.0]]]))
    g = gc.compile(lambda p: gc.grad(F.sum(F.max_unpool(p, idx, 2) * np.arange(6.0)), [p])[0], p)(p)
    np.testing.assert_array_equal(g, [[[0.0, 1.0, 4.0]]])
    with pytest.raises(gc.ShapeError, match="max_unpool: x .* and indices .* must share one shape"):
        gc.compile(lambda p: F.max_unpool(p, idx[..., :2], 2), p)


def test_channel_shuffle():
    x = np.arange(2 * 6 * 3, dtype=np.float64).reshape(2, 6, 3)
    want = x.reshape(2, 3, 2, 3).transpose(0, 2, 1, 3).reshape(2, 6, 3)
    check_forward(lambda x: F.channel_shuffle(x, 3), [x], want)
    check_grads(lambda x: F.channel_shuffle(x, 2), [np.random.default_rng(9).standard_normal((2, 4, 2, 2))])
    with pytest.raises(gc.ShapeError, match="channel_shuffle: .* divisible by groups=4"):
        gc.compile(lambda x: F.channel_shuffle(x, 4), x)


def test_max_unpool_needs_static_images():
    """A symbolic spatial size is refused by name (it met Python arithmetic on the symbol before); a
    symbolic batch and channel count trace and run."""
    for out in (None, (4,)):
        with pytest.raises(gc.ShapeError, match=r"max_unpool: the spatial sizes of x \(1, 2, w\) must be static"):
            gc.compile(lambda x, out=out: F.max_unpool(x, F.cast(x, np.int64), 2, output_size=out),
                       gc.spec((1, 2, "w"), np.float64))
    pooled, idx = np.array([[[3.0, 5.0]], [[1.0, 2.0]]]), np.array([[[1, 2]], [[3, 0]]])
    cf = gc.compile(lambda p, i: F.max_unpool(p, i, 2), gc.spec(("n", "c", 2), np.float64),
                    gc.spec(("n", "c", 2), np.int64))
    np.testing.assert_array_equal(cf(pooled, idx), np_unpool(pooled, idx, (4,)))
