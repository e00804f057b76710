"""NumPy semantics of the ops the fuzzer generates, written independently of gcompile's own
references (gcompile/ops/*), so a program's expected values do not share its bugs.

Ops with a kink (relu, abs, maximum, max reductions, max_pool, ...) or a jump (comparisons,
floor, round, casts to int) record how far their operands are from it: a gradient check is
only meaningful where no kink lies within the finite-difference step, and a float32 run only
agrees with float64 where no jump lies within rounding error. `recording()` collects them.

Control flow records its decisions too (kind "decision": a while loop's number of steps, the
branch a cond takes): a central difference through it means something only where the points
x ± εr it evaluates take the same path as x (tests/fuzz/checks.py compares them).
"""
from __future__ import annotations

import contextlib
import itertools
import math

import numpy as np

_MARGINS: list | None = None


@contextlib.contextmanager
def recording():
    """Collects (kind, distance) pairs, kind "kink" or "jump", from the ops run inside, and
    ("decision", value) pairs from the control flow."""
    global _MARGINS
    saved, _MARGINS = _MARGINS, []
    try:
        yield _MARGINS
    finally:
        _MARGINS = saved


def _note(kind: str, distance) -> None:
    d = np.abs(np.asarray(distance, np.float64))
    if _MARGINS is not None and d.size:
        _MARGINS.append((kind, float(d.min())))


def _decide(value) -> None:
    if _MARGINS is not None:
        _MARGINS.append(("decision", value))


def _gap(values, axis) -> None:
    """The distance between the two largest entries along `axis` (ties of a max are kinks)."""
    if values.shape[axis] > 1:
        top = np.sort(values, axis=axis)
        _note("kink", np.take(top, -1, axis) - np.take(top, -2, axis))


# -- elementwise ------------------------------------------------------------------------------------
def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softplus(x, beta=1.0):
    return np.logaddexp(0, beta * x) / beta


def relu(x):
    _note("kink", x)
    return np.where(x > 0, x, 0.0)


def abs(x):
    _note("kink", x)
    return np.abs(x)


def leaky_relu(x, slope):
    _note("kink", x)
    return np.where(x > 0, x, slope * x)


def elu(x, alpha):
    _note("kink", x)
    return np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))


def selu(x):
    _note("kink", x)
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return scale * np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(x)


def gelu(x, approximate=False):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def maximum(a, b):
    _note("kink", a - b)
    return np.maximum(a, b)


def minimum(a, b):
    _note("kink", a - b)
    return np.minimum(a, b)


def clip(x, lo, hi):
    _note("kink", x - lo)
    _note("kink", x - hi)
    return np.minimum(np.maximum(x, lo), hi)


def sign(x):
    _note("jump", x)
    return np.sign(x)


def floor(x):
    _note("jump", x - np.round(x))
    return np.floor(x)


def ceil(x):
    _note("jump", x - np.round(x))
    return np.ceil(x)


def round(x):
    _note("jump", np.abs(x - np.floor(x)) - 0.5)
    return np.round(x)


def trunc(x):
    """A float -> int -> float round trip (truncation toward zero)."""
    _note("jump", x - np.round(x))
    return np.trunc(x)


def greater(a, b):
    _note("jump", a - b)
    return a > b


def less(a, b):
    _note("jump", a - b)
    return a < b


# -- more math (independent of gcompile/ops/special.py: math's functions, bisection, differences) ----------
_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_lgamma = np.vectorize(math.lgamma, otypes=[np.float64])


def erfc(x):
    return _erfc(x)


def _erfinv_scalar(y: float) -> float:
    lo, hi = -7.0, 7.0
    for _ in range(80):                     # bisection on math.erf: erfinv to float64 resolution
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erf(mid) < y else (lo, mid)
    return (lo + hi) / 2


def erfinv(y):
    return np.vectorize(_erfinv_scalar, otypes=[np.float64])(y)


def lgamma(x):
    return _lgamma(x)


def digamma(x):
    """d/dx lgamma by Richardson-extrapolated central differences (error about 1e-11 for x >= 0.5)."""
    h = 1e-3
    return (8 * (_lgamma(x + h) - _lgamma(x - h)) - (_lgamma(x + 2 * h) - _lgamma(x - 2 * h))) / (12 * h)


def hardtanh(x, lo=-1.0, hi=1.0):
    _note("kink", x - lo)
    _note("kink", x - hi)
    return np.clip(x, lo, hi)


def hardsigmoid(x):
    return hardtanh(x / 6 + 0.5, 0.0, 1.0)


def hardswish(x):
    return x * hardsigmoid(x)


def celu(x, alpha):
    _note("kink", x)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0) / alpha))


def shrink(x, lambd, shift):
    """softshrink (shift = λ: kinks at ±λ) and hardshrink (shift = 0: jumps at ±λ)."""
    _note("kink" if shift else "jump", np.abs(x) - lambd)
    return np.where(np.abs(x) <= lambd, 0.0, x - np.sign(x) * shift)


def threshold(x, th, value):
    _note("jump", x - th)
    return np.where(x > th, x, value)


def frac(x):
    _note("jump", x - np.round(x))
    return x - np.trunc(x)


def copysign(a, b):
    _note("kink", a)
    _note("jump", b)
    return np.copysign(a, b)


def fmod(a, b):
    q = a / b
    _note("jump", (q - np.round(q)) * b)
    return np.fmod(a, b)


def remainder(a, b):
    q = a / b
    _note("jump", (q - np.round(q)) * b)
    return np.remainder(a, b)


def hypot(a, b):
    _note("kink", np.hypot(a, b))
    return np.hypot(a, b)


# -- reductions --------------------------------------------------------------------------------------
def _moved(x, axis):
    """x with the reduced axes (None, an int or a tuple) flattened into one last axis."""
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    rest = [a for a in range(x.ndim) if a not in axes]
    return np.transpose(x, rest + list(axes)).reshape([x.shape[a] for a in rest] + [-1])


def rmax(x, axis=None, keepdims=False):
    _gap(_moved(x, axis), -1)
    return np.max(x, axis=axis, keepdims=keepdims)


def rmin(x, axis=None, keepdims=False):
    _gap(-_moved(x, axis), -1)
    return np.min(x, axis=axis, keepdims=keepdims)


def var(x, axis=None, keepdims=False):
    return np.var(x, axis=axis, keepdims=keepdims)


def std(x, axis=None, keepdims=False):
    v = np.var(x, axis=axis, keepdims=keepdims)
    if _moved(x, axis).shape[-1] > 1:      # sqrt's kink at a zero variance (one entry: always 0, no kink)
        _note("kink", np.sqrt(v))
    return np.sqrt(v)


def vector_norm(x, ord, axis=None, keepdims=False):
    a = np.abs(x)
    if ord == 1:
        _note("kink", x)
        return np.sum(a, axis=axis, keepdims=keepdims)
    if ord == np.inf:
        _gap(_moved(a, axis), -1)
        _note("kink", np.max(a, axis=axis))
        return np.max(a, axis=axis, keepdims=keepdims)
    _note("kink", np.sqrt(np.sum(a * a, axis=axis)))
    return np.sum(a ** ord, axis=axis, keepdims=keepdims) ** (1 / ord)


def sort(x, axis=-1, descending=False):
    _gap_all(x, axis)
    s = np.sort(x, axis=axis)
    return np.flip(s, axis) if descending else s


def _gap_all(x, axis):
    """The smallest distance between two entries along `axis` (ties reorder a sort: a kink)."""
    if x.shape[axis] > 1:
        s = np.sort(x, axis=axis)
        _note("kink", np.diff(s, axis=axis))


def topk(x, k, axis=-1, largest=True):
    return np.take(sort(x, axis, descending=largest), np.arange(k), axis=axis)


def median(x, axis=None, keepdims=False):
    flat = x.reshape(-1) if axis is None else x
    ax = 0 if axis is None else axis
    n = flat.shape[ax]
    m = np.take(sort(flat, ax), [(n - 1) // 2], axis=ax)
    if axis is None:
        return m.reshape((1,) * x.ndim if keepdims else ())
    return m if keepdims else np.squeeze(m, ax)


def scan(kind, x, axis, reverse=False, exclusive=False):
    """cumsum / cumprod with ONNX's reverse and exclusive options."""
    x = np.flip(x, axis) if reverse else x
    y = np.cumsum(x, axis=axis) if kind == "sum" else np.cumprod(x, axis=axis)
    if exclusive:
        first = np.zeros_like(np.take(y, [0], axis)) if kind == "sum" else np.ones_like(np.take(y, [0], axis))
        y = np.concatenate([first, np.take(y, np.arange(y.shape[axis] - 1), axis)], axis)
    return np.flip(y, axis) if reverse else y


def logcumsumexp(x, axis):
    return np.logaddexp.accumulate(x, axis=axis)


def logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=tuple(range(x.ndim)) if axis is None else axis)


# -- nn --------------------------------------------------------------------------------------------------
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    s = x - np.max(x, axis=axis, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def layer_norm(x, gamma, beta, axis=-1, eps=1e-5):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def batch_norm(x, gamma, beta, eps=1e-5):
    """Training-mode batch norm over every axis but 1, gamma and beta of shape (C,)."""
    axes = tuple(a for a in range(x.ndim) if a != 1)
    shape = [1] * x.ndim
    shape[1] = -1
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


def _reduced(loss, reduce):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduce](loss)


def softmax_cross_entropy(logits, labels, axis=-1, reduce="mean"):
    picked = np.take_along_axis(log_softmax(logits, axis), np.expand_dims(labels, axis % logits.ndim), axis)
    return _reduced(-np.squeeze(picked, axis), reduce)


def sigmoid_cross_entropy(x, t, reduce="mean"):
    return _reduced(np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x))), reduce)


def mse(a, b, reduce="mean"):
    return _reduced((a - b) ** 2, reduce)


# -- indexing ---------------------------------------------------------------------------------------------
def scatter_add(base, idx, updates, axis=0):
    out = base.copy()
    np.add.at(out, (slice(None),) * (axis % base.ndim) + (idx,), updates)
    return out


def take_along_axis(x, idx, axis):
    shape = np.broadcast_shapes(x.shape[:axis] + (1,) + x.shape[axis + 1:],
                                idx.shape[:axis] + (1,) + idx.shape[axis + 1:])
    x = np.broadcast_to(x, shape[:axis] + (x.shape[axis],) + shape[axis + 1:])
    idx = np.broadcast_to(idx, shape[:axis] + (idx.shape[axis],) + shape[axis + 1:])
    return np.take_along_axis(x, idx, axis)


def scatter_add_along_axis(base, idx, updates, axis):
    out = base.copy()
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx % base.shape[axis]
    np.add.at(out, tuple(where), updates)
    return out


# -- convolution and pooling (N, C, *spatial) -------------------------------------------------------------
def _windows(x, kernel, stride, dilation, out):
    """For each kernel tap: the (padded) input values it meets at every output position."""
    for tap in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(t * d, t * d + s * (o - 1) + 1, s) for t, s, d, o in zip(tap, stride, dilation, out))
        yield tap, x[(slice(None), slice(None)) + index]


def _out(size, kernel, stride, pad, dilation):
    return tuple((i + p0 + p1 - d * (k - 1) - 1) // s + 1
                 for i, k, s, (p0, p1), d in zip(size, kernel, stride, pad, dilation))


def conv(x, w, b=None, stride=(1,), pad=((0, 0),), dilation=(1,), groups=1):
    kernel = w.shape[2:]
    out = _out(x.shape[2:], kernel, stride, pad, dilation)
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pad))
    co, cig = w.shape[0], w.shape[1]
    cog = co // groups
    y = np.zeros((x.shape[0], co) + out)
    for tap, patch in _windows(xp, kernel, stride, dilation, out):
        for g in range(groups):
            wt = w[(slice(g * cog, (g + 1) * cog), slice(None)) + tap]
            y[:, g * cog:(g + 1) * cog] += np.tensordot(patch[:, g * cig:(g + 1) * cig], wt, ([1], [1])).transpose(
                [0, patch.ndim - 1] + list(range(1, patch.ndim - 1)))
    return y if b is None else y + b.reshape((-1,) + (1,) * len(out))


def conv_transpose(x, w, b=None, stride=(1,), pad=((0, 0),), dilation=(1,), groups=1, output_padding=(0,)):
    """y[n, o, i*s + t*d - pad_before] += x[n, c, i] * w[c, o, t] (per group), cropped to the output size."""
    kernel, size = w.shape[2:], x.shape[2:]
    out = tuple((i - 1) * s - p0 - p1 + d * (k - 1) + op + 1
                for i, k, s, (p0, p1), d, op in zip(size, kernel, stride, pad, dilation, output_padding))
    full = tuple(p0 + o + p1 for o, (p0, p1) in zip(out, pad))
    cig, cog = x.shape[1] // groups, w.shape[1]
    y = np.zeros((x.shape[0], cog * groups) + full)
    for tap in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(t * d, t * d + s * (i - 1) + 1, s) for t, s, d, i in zip(tap, stride, dilation, size))
        for g in range(groups):
            wt = w[(slice(g * cig, (g + 1) * cig), slice(None)) + tap]
            contrib = np.tensordot(x[:, g * cig:(g + 1) * cig], wt, ([1], [0]))
            y[(slice(None), slice(g * cog, (g + 1) * cog)) + index] += np.moveaxis(contrib, -1, 1)
    y = y[(slice(None), slice(None)) + tuple(slice(p0, p0 + o) for (p0, _), o in zip(pad, out))]
    return y if b is None else y + b.reshape((-1,) + (1,) * len(out))


def max_pool(x, kernel, stride=None, pad=0):
    n = x.ndim - 2
    kernel = (kernel,) * n if isinstance(kernel, int) else tuple(kernel)
    stride = kernel if stride is None else (stride,) * n if isinstance(stride, int) else tuple(stride)
    pad = ((pad, pad),) * n if isinstance(pad, int) else tuple(pad)
    out = _out(x.shape[2:], kernel, stride, pad, (1,) * n)
    xp = np.pad(x, ((0, 0), (0, 0)) + pad, constant_values=-np.inf)
    stacked = np.stack([patch for _, patch in _windows(xp, kernel, stride, (1,) * n, out)], -1)
    _gap(stacked, -1)
    return stacked.max(-1)


def avg_pool(x, kernel, stride=None, pad=0, count_include_pad=False):
    n = x.ndim - 2
    kernel = (kernel,) * n if isinstance(kernel, int) else tuple(kernel)
    stride = kernel if stride is None else (stride,) * n if isinstance(stride, int) else tuple(stride)
    pad = ((pad, pad),) * n if isinstance(pad, int) else tuple(pad)
    out = _out(x.shape[2:], kernel, stride, pad, (1,) * n)
    xp = np.pad(x, ((0, 0), (0, 0)) + pad)
    inside = np.pad(np.ones(x.shape[2:]), pad)[None, None]
    total = sum(patch for _, patch in _windows(xp, kernel, stride, (1,) * n, out))
    count = (math.prod(kernel) if count_include_pad
             else sum(patch for _, patch in _windows(inside, kernel, stride, (1,) * n, out)))
    return total / count


def max_pool_torch(x, kernel, stride, pad, dilation, ceil_mode):
    """torch's max_pool with dilation and ceil_mode (extra windows past the end see -inf padding)."""
    out = []
    for i, k, s, p, d in zip(x.shape[2:], kernel, stride, pad, dilation):
        span = i + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        out.append(o - 1 if ceil_mode and (o - 1) * s >= i + p else o)
    reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out, stride, dilation, kernel)]
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple((p, max(r - i - p, p)) for p, r, i in zip(pad, reach, x.shape[2:])),
                constant_values=-np.inf)
    stacked = np.stack([patch for _, patch in _windows(xp, kernel, stride, dilation, tuple(out))], -1)
    _gap(stacked, -1)
    return stacked.max(-1)


def _adaptive(x, out, reduce):
    spatial = x.shape[2:]
    y = np.zeros(x.shape[:2] + tuple(out))
    for o in np.ndindex(*out):
        region = tuple(slice(k * n // m, -(-(k + 1) * n // m)) for k, n, m in zip(o, spatial, out))
        patch = x[(Ellipsis,) + region].reshape(x.shape[:2] + (-1,))
        if reduce is np.max:
            _gap(patch, -1)
        y[(Ellipsis,) + o] = reduce(patch, axis=-1)
    return y


def adaptive_avg_pool(x, out):
    return _adaptive(x, out, np.mean)


def adaptive_max_pool(x, out):
    return _adaptive(x, out, np.max)


def _linear_taps(n_in: int, n_out: int, align_corners: bool):
    """torch's linear resampling along one axis: for each output index, the two source indices
    and the second one's weight (align_corners: the corner samples meet; otherwise pixel centres
    meet, and a source coordinate below 0 is clamped to 0)."""
    o = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        src = np.maximum((o + 0.5) * (n_in / n_out) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    return lo, np.minimum(lo + 1, n_in - 1), src - lo


def bilinear(x, size, align_corners):
    """torch.nn.functional.interpolate(x, size, mode="bilinear") on (N, C, H, W): along H, then W."""
    for axis, n_out in ((2, size[0]), (3, size[1])):
        lo, hi, w = _linear_taps(x.shape[axis], n_out, align_corners)
        shape = [1] * x.ndim
        shape[axis] = n_out
        w = w.reshape(shape)
        x = np.take(x, lo, axis) * (1 - w) + np.take(x, hi, axis) * w
    return x


def nearest(x, size):
    """torch's mode="nearest" to an output size: source index floor(out_index * in / out)."""
    for axis, n_out in ((2, size[0]), (3, size[1])):
        n_in = x.shape[axis]
        x = np.take(x, np.minimum(np.arange(n_out) * n_in // n_out, n_in - 1), axis)
    return x


def pixel_shuffle(x, r):
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def scatter(x, axis, idx, value):
    """torch.scatter with a scalar value: the last duplicate wins (all write the same value here)."""
    out = x.copy()
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = idx
    out[tuple(where)] = value
    return out


def huber(d, delta):
    """torch's huber_loss of the difference d: its second derivative jumps where |d| = delta."""
    _note("kink", np.abs(d) - delta)
    return np.where(np.abs(d) < delta, 0.5 * d * d, delta * (np.abs(d) - 0.5 * delta))


def normalize(x, axis):
    norm = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    # x/|x| is singular at 0: its k-th derivatives grow as 1/|x|^k, so near 0 rounding swamps them and
    # a finite difference of step eps is off by about (eps/|x|)^2. Counted as a kink 10 times closer
    # than the norm, points are redrawn until |x| >= 10 SAFE.
    _note("kink", norm / 10)
    return x / np.maximum(norm, 1e-12)


# -- normalisation in inference mode, sum_to_shape ----------------------------------------------------------
def batch_norm_eval(x, gamma, beta, mean, var, eps=1e-5):
    shape = [1] * x.ndim
    shape[1] = -1
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)


def batch_stats(x):
    """The per-channel mean and biased variance training-mode batch_norm uses."""
    axes = tuple(a for a in range(x.ndim) if a != 1)
    return np.mean(x, axis=axes), np.var(x, axis=axes)


def sum_to_shape(x, shape):
    lead = x.ndim - len(shape)
    x = np.sum(x, axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and x.shape[i] != 1)
    return np.sum(x, axis=axes, keepdims=True) if axes else x


# -- recurrent cells (PyTorch's gate order and (out, in) weights) -------------------------------------------
def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    i, f, g, o = np.split(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=-1)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c), c


def gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    x_r, x_z, x_n = np.split(x @ w_ih.T + b_ih, 3, axis=-1)
    h_r, h_z, h_n = np.split(h @ w_hh.T + b_hh, 3, axis=-1)
    r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
    n = np.tanh(x_n + r * h_n)
    return (1 - z) * n + z * h


def lstm(xs, h, c, w_ih, w_hh, b_ih, b_hh):
    """One layer over xs (T, N, I): (ys, h_n, c_n) with h_n, c_n of shape (1, N, H)."""
    h, c, ys = h[0], c[0], []
    for x in xs:
        h, c = lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh)
        ys.append(h)
    return np.stack(ys), h[None], c[None]


def gru(xs, h, w_ih, w_hh, b_ih, b_hh):
    h, ys = h[0], []
    for x in xs:
        h = gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)
        ys.append(h)
    return np.stack(ys), h[None]


def while_loop(cond, body, value):
    """jax.lax.while_loop's meaning by a Python loop; records the number of steps taken."""
    steps = 0
    while cond(value):
        value, steps = body(value), steps + 1
    _decide(steps)
    return value


def cond(pred, true_fun, false_fun, *operands):
    """jax.lax.cond's meaning: one branch runs; records which."""
    _decide(bool(pred))
    return true_fun(*operands) if pred else false_fun(*operands)


def scan_loop(f, init, xs, reverse=False):
    """jax.lax.scan's meaning by a Python loop: (final carry, ys stacked on axis 0)."""
    carry, ys = init, []
    for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        carry, y = f(carry, xs[t])
        ys.append(y)
    if not ys:      # no step: ys of the shape one step would give
        return carry, np.zeros((0,) + np.shape(f(init, np.zeros(xs.shape[1:], xs.dtype))[1]), xs.dtype)
    return carry, np.stack(ys[::-1] if reverse else ys)
