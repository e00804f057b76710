"""Random geometries for the strategy property test (tests/lowering/test_strategy_properties.py).

A sampler per op that has strategies: `SAMPLERS[op](rng, near)` draws one function holding the
op, with its inputs. `near` is None for a free draw; (name, side, value) to put the quantity the
guard compares with the module constant `name` (= value) just below it (side "below") or at or
just above it (side "at"); or (edge, "edge", None) for one of the op's EDGES, the cases every
form must get right whatever its guard (kernels wider than their input, whose taps lie wholly in
the padding on both sides of every axis, as a 3x3 on a 1x1 input; empty batches; negative
indices; zero steps). Free draws range over the rest: groups, strides, dilations, padding,
dtypes, symbolic batches, size-1 axes.

A new strategy for an op listed here is drawn for at once; a new op needs a sampler here, and a
new threshold a case in its op's sampler (the test says which is missing).
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply

Near = tuple[str, str, "int | None"]     # (threshold name, "below" or "at", its value) or (edge, "edge", None)


@dataclass
class Draw:
    what: str                   # the geometry, in words (for a failure's message)
    fn: Callable                # the function holding the op
    inputs: list                # its arguments (arrays)
    specs: list | None = None   # what to compile at where not the inputs' shapes (a symbolic batch)
    sides: dict = field(default_factory=dict)   # {threshold: "below" or "at"} this draw lies on


class Unplaceable(LookupError):
    """The sampler has no way to place a geometry around this threshold."""


def thresholds(strategy) -> list[tuple[str, int]]:
    """(name, value) of each module constant the strategy's guard compares with (its `thresholds`)."""
    module = sys.modules[strategy.lower.__module__]
    return [(name, getattr(module, name)) for name in strategy.thresholds]


def _value(rng, side: str, t: int, spread: int = 2) -> int:
    """A number just below t (side "below") or at or just above it (side "at")."""
    return int(t - rng.integers(1, spread + 1)) if side == "below" else int(t + rng.integers(0, spread))


def _uniform(rng, shape, dtype=np.float32, scale=1.0):
    return (rng.uniform(-1, 1, shape) * scale).astype(dtype)


def _batch_specs(rng, inputs: list, batched: list[int], draw_symbolic: float = 0.25, batch: int | None = None):
    """(inputs, specs): with probability draw_symbolic the inputs at `batched` positions get a
    symbolic axis 0 ("n"), run at `batch` or at one drawn from 0..3 (an empty batch included)."""
    if rng.random() >= draw_symbolic:
        return inputs, None
    n = int(rng.choice([0, 1, 2, 3], p=[0.15, 0.25, 0.3, 0.3])) if batch is None else batch
    arrays, specs = [], []
    for i, a in enumerate(inputs):
        if i in batched:
            a = np.resize(a, (n, *a.shape[1:])) if a.size else np.zeros((n, *a.shape[1:]), a.dtype)
            specs.append(gc.spec(("n", *a.shape[1:]), a.dtype))
        else:
            specs.append(gc.spec(a.shape, a.dtype))
        arrays.append(a)
    return arrays, specs


def _batched(rng, name: str | None, inputs: list, batched: list[int]):
    """_batch_specs for a free draw (a symbolic batch sometimes) and the edge "empty_batch" (a
    symbolic batch of none); static shapes around a threshold."""
    if name == "empty_batch":
        return _batch_specs(rng, inputs, batched, 1.0, 0)
    return _batch_specs(rng, inputs, batched) if name is None else (inputs, None)


def _sides(near: Near | None) -> dict:
    """Draw.sides of a draw placed at `near`."""
    return {near[0]: near[1]} if near and near[1] != "edge" else {}


# -- windows (convolutions and pooling) ------------------------------------------------------------------
@dataclass
class Window:
    size: tuple
    kernel: tuple
    stride: tuple
    pad: tuple          # (before, after) per spatial axis
    dilation: tuple

    def out(self) -> tuple:
        return tuple((n + p0 + p1 - d * (k - 1) - 1) // s + 1
                     for n, k, s, (p0, p1), d in zip(self.size, self.kernel, self.stride, self.pad, self.dilation))

    def text(self) -> str:
        return (f"size {self.size} kernel {self.kernel} stride {self.stride} pad {self.pad} "
                f"dilation {self.dilation}")


def padding_taps(n: int, k: int, s: int, p0: int, d: int, out: int) -> tuple[bool, bool]:
    """Whether some tap of the window reads only padding before the input, and some only after it."""
    reads = [[i * s + t * d - p0 for i in range(out)] for t in range(k)]
    return any(max(r) < 0 for r in reads), any(min(r) >= n for r in reads)


def draw_window(rng, nsp: int, *, size=None, kernel=None, stride=None, pad=None, dilation=None,
                max_size: int = 6, pool: bool = False, in_padding: bool = False) -> Window:
    """A window over `nsp` spatial axes, what is not given (per axis: an int, or None) drawn: sizes
    1..max_size (1x1 inputs often), kernels up to 5 and wider than the input (padding up to the
    kernel's reach and one more on each side, or often "same" padding, the kernel's reach in all),
    strides up to 3, dilations up to 2; every output size at least 1. in_padding: on every axis
    some taps read only padding, before the input and after it (a 3x3 on a 1x1, a 5x5 on a 2x2).
    pool: padding below the kernel on each side, and no window wholly in the padding (max
    pooling's windows of padding are -inf)."""
    def given(v, a):
        return v[a] if isinstance(v, (tuple, list)) else v

    axes = []
    for a in range(nsp):
        for _ in range(500):
            n = given(size, a) or int(rng.choice([1, 2] if in_padding else [1, 1, 2, 3, 4, 5, max_size]))
            k = given(kernel, a) or int(rng.integers(3 if in_padding else 1, 6))
            d = given(dilation, a) or (1 if pool else int(rng.choice([1, 1, 2])))
            s = given(stride, a) or int(rng.choice([1, 1, 2, 3]))
            reach = d * (k - 1)
            top = k - 1 if pool else reach + 1
            p = given(pad, a)
            if p is None and not pool and rng.random() < 0.4:      # "same": the output as long as the input
                before = int(rng.integers(reach // 2, reach - reach // 2 + 1))
                p = (before, reach - before)
            elif p is None:
                p = tuple(int(rng.integers(0, top + 1)) if in_padding or rng.random() < 0.7 else 0 for _ in "ab")
            o = (n + p[0] + p[1] - reach - 1) // s + 1
            if o < 1 or pool and any(i * s - p[0] >= n or i * s - p[0] + reach < 0 for i in range(o)) \
                    or in_padding and not all(padding_taps(n, k, s, p[0], d, o)):
                continue
            axes.append((n, k, s, p, d))
            break
        else:
            raise AssertionError(f"no window over axis {a} from {size, kernel, stride, pad, dilation}")
    n, k, s, p, d = zip(*axes)
    return Window(n, k, s, p, d)


def _sized_for(rng, out: tuple, kernel: tuple, stride: tuple, dilation: tuple, pad=None) -> Window:
    """A window whose output has exactly the sizes `out` (the input sized for them)."""
    size, pads = [], []
    for o, k, s, d in zip(out, kernel, stride, dilation):
        p = pad or (int(rng.integers(0, d * (k - 1) + 1)), int(rng.integers(0, d * (k - 1) + 1)))
        n = max(1, (o - 1) * s + d * (k - 1) + 1 - p[0] - p[1] + int(rng.integers(0, s)))
        while (n + p[0] + p[1] - d * (k - 1) - 1) // s + 1 < o:
            n += 1
        while (n + p[0] + p[1] - d * (k - 1) - 1) // s + 1 > o:
            p = (p[0], p[1] - 1) if p[1] else (p[0] - 1, 0)
        size.append(n)
        pads.append(p)
    return Window(tuple(size), tuple(kernel), tuple(stride), tuple(pads), tuple(dilation))


def _split(rng, total: int, parts: int, largest: int = 64) -> tuple:
    """`total` as a product of `parts` factors, each at most `largest` where it can be."""
    factors = [total]
    while len(factors) < parts:
        n = factors.pop()
        divisors = [q for q in range(1, n + 1) if n % q == 0 and q <= largest and n // q <= largest] or [1]
        q = int(rng.choice(divisors))
        factors += [q, n // q]
    rng.shuffle(factors)
    return tuple(factors)


def _taps(rng, taps: int, nsp: int) -> tuple:
    """A kernel of exactly `taps` taps over nsp axes (13 at most per axis where it can be)."""
    return _split(rng, taps, nsp, largest=13)


# -- convolution geometries and weight gradients --------------------------------------------------------
def _channels(rng, kind: str, ci: int | None = None) -> tuple[int, int, int]:
    """(input channels, output channels, groups) of a convolution: one group, depthwise (one input
    channel per group, one or two outputs each) or grouped."""
    if kind == "depthwise":
        groups = int(rng.integers(1, 7))
        return groups, groups * int(rng.choice([1, 1, 2])), groups
    groups = 1 if kind == "one" else int(rng.integers(2, 4))
    ci = ci or int(rng.choice([1, 2, 3, 4, 5, 8, 9]))
    return groups * ci, groups * int(rng.choice([1, 2, 3, 4, 8, 9])), groups


@dataclass
class ConvGeometry:
    batch: int
    channels: int
    filters: int        # output channels
    groups: int
    window: Window

    def text(self) -> str:
        return f"{self.batch} images of {self.channels} channels to {self.filters}, {self.window.text()}, " \
               f"groups {self.groups}"


def conv_geometry(rng, near: Near | None) -> ConvGeometry:
    """A convolution (of 1 to 3 spatial axes) around a threshold of a strategy of conv or
    conv_weight_grad, or as an edge of theirs ("padding_taps", "padding_taps_strided"; "empty_batch"
    is the caller's), or free: one group, depthwise or grouped; with one group the filters often
    around the output positions or twice them (the halves' guard)."""
    nsp = int(rng.choice([1, 2, 2, 2, 3]))
    kind = str(rng.choice(["one", "one", "depthwise", "grouped"]))
    batch = int(rng.choice([1, 2, 3, 4, 8]))
    window = None
    ci = co = None
    name, side, t = near or (None, None, 0)
    if name == "HALVES_MIN_BATCH":
        kind, nsp, batch = "one", int(rng.choice([1, 2])), _value(rng, side, t)
        window = draw_window(rng, nsp, max_size=4)
        positions = math.prod(window.out())
        co = max(1, positions + int(rng.integers(1, positions + 1)))
    elif name == "FEW_CHANNELS":        # input channels per group around it, output ones around it or fewer
        kind, ci = str(rng.choice(["one", "one", "grouped"])), _value(rng, side, t)
        co = int(rng.choice([ci, 1, 2, 3, t, t + 1]))
        window = draw_window(rng, nsp, max_size=3 if nsp == 3 else 6, stride=1 if rng.random() < 0.6 else None)
    elif name == "WEIGHT_GRAD_MIN_CONTRACTION":
        kind = "one"
        ci, co = int(rng.choice([2, 8, 9, 16])), int(rng.choice([2, 8, 9, 16]))
        if rng.random() < 0.5:          # output positions per image around half the threshold
            positions = _value(rng, side, t // 2)
            nsp = int(rng.choice([1, 2]))
            out = _split(rng, positions, nsp)
        else:                           # few positions, images around a chunk's worth
            out = _split(rng, int(rng.integers(64, 160)), nsp)
            positions = math.prod(out)
            images = -(-t // positions)
            batch = images - 1 if side == "below" else images * int(rng.choice([1, 2, 3]))
        kernel = tuple(int(rng.integers(1, 4)) for _ in out)
        stride = tuple(int(rng.choice([1, 1, 2])) for _ in out)
        window = _sized_for(rng, out, kernel, stride, (1,) * len(out))
    elif name == "FLAT_MOVE_MAX_ROW":
        nsp = 2
        window = draw_window(rng, 2, size=(int(rng.integers(1, 4)), _value(rng, side, t)), stride=1,
                             kernel=(int(rng.integers(1, 4)), int(rng.integers(2, 4))))
    elif name in ("DEPTHWISE_CONV_MIN_TAPS", "DEPTHWISE_STRIDED_CONV_MIN_TAPS"):
        kind, nsp = "depthwise", int(rng.choice([1, 2, 2]))
        kernel = _taps(rng, _value(rng, side, t), nsp)
        stride = 1 if name == "DEPTHWISE_CONV_MIN_TAPS" else _strided(rng, nsp)
        window = draw_window(rng, nsp, kernel=kernel, stride=stride, dilation=1, max_size=8)
    elif name in ("BANDED_MIN_TAPS", "BANDED_MAX_WIDTH"):
        # depthwise, one filter per channel, stride 1, undilated, 2-D: taps around their threshold
        # with rows short enough, or rows around theirs (in kernel widths) with taps enough
        kind, nsp, co = "depthwise", 2, 1
        if name == "BANDED_MIN_TAPS":
            kernel = _taps(rng, _value(rng, side, t), 2)
            width = int(rng.integers(1, min(12, 3 * kernel[1]) + 1))
        else:                           # (below: rows of at most t kernel widths; at: longer)
            kernel = (int(rng.integers(5, 8)), int(rng.integers(5, 8)))
            width = _value(rng, side, t * kernel[1] + 1)
        window = _sized_for(rng, (int(rng.integers(1, 5)), width), kernel, (1, 1), (1, 1))
    elif name in ("DEPTHWISE_FLAT_MIN_LENGTH", "DEPTHWISE_ROWS_MIN_LENGTH"):
        # (flat windows of float32 in two dimensions are depthwise_rows' from its threshold on)
        kind, nsp = "depthwise", 1 if name == "DEPTHWISE_FLAT_MIN_LENGTH" else 2
        length = _value(rng, side, t)
        kernel = tuple(int(rng.integers(1, 4)) for _ in range(nsp))
        if nsp == 1:
            window = _sized_for(rng, (length,), kernel, (1,), (1,))
        else:                           # output rows x the padded frame's row length
            rows = int(rng.choice([q for q in range(1, 9) if length % q == 0]))
            row = length // rows
            pad = (int(rng.integers(0, kernel[1])), int(rng.integers(0, kernel[1])))
            if row - sum(pad) < 1:
                pad = (0, 0)
            first = _sized_for(rng, (rows,), kernel[:1], (1,), (1,))
            dilation = int(rng.choice([1, 2])) if name == "DEPTHWISE_ROWS_MIN_LENGTH" else 1   # (the rows' offsets)
            if row - dilation * (kernel[1] - 1) < 1:
                dilation = 1
            window = Window((first.size[0], row - sum(pad)), kernel, (1, 1), (first.pad[0], pad), (1, dilation))
    elif name == "PATCH_MIN_WIDTH":
        kind, nsp = "one", int(rng.choice([1, 2]))
        kernel = tuple(int(rng.integers(1, 5)) for _ in range(nsp - 1)) + (_value(rng, side, t),)
        out = tuple(int(rng.integers(1, 4)) for _ in kernel)
        window = _sized_for(rng, out, kernel, kernel, (1,) * nsp, pad=(0, 0))
    elif name in ("padding_taps", "padding_taps_strided"):
        window = draw_window(rng, nsp, in_padding=True, stride=1 if name == "padding_taps" else _strided(rng, nsp))
    elif name not in (None, "empty_batch"):
        raise Unplaceable(name)
    window = window or draw_window(rng, nsp, max_size=3 if nsp == 3 else 6)
    channels, filters, groups = _channels(rng, kind, ci)
    if co is not None:
        filters = co * groups
    elif kind == "one" and rng.random() < 0.5:      # filters around the positions and twice the positions
        positions = math.prod(window.out())
        filters = max(1, int(rng.choice([positions, 2 * positions])) + int(rng.integers(-1, 2)))
    return ConvGeometry(batch, channels, filters, groups, window)


def _strided(rng, nsp: int) -> tuple:
    """Strides of 1 to 3 over nsp axes, one at least 2."""
    stride = [int(rng.choice([1, 2, 3])) for _ in range(nsp)]
    stride[int(rng.integers(nsp))] = int(rng.choice([2, 3]))
    return tuple(stride)


def conv_weight_grad(rng, near: Near | None) -> Draw:
    """The weight gradient op itself, of (x, g): its forward is what the strategies compute; its
    gradients are convolutions of x and g, and its second order holds it again."""
    geo = conv_geometry(rng, near)
    window = geo.window
    x = _uniform(rng, (geo.batch, geo.channels, *window.size))
    g = _uniform(rng, (geo.batch, geo.filters, *window.out()))
    attrs = dict(kernel=window.kernel, stride=window.stride, pad=window.pad, dilation=window.dilation,
                 groups=geo.groups)
    inputs, specs = _batched(rng, near[0] if near else None, [x, g], [0, 1])
    return Draw(f"conv_weight_grad of x{x.shape} and g{g.shape}, {window.text()}, groups {geo.groups}"
                + (f", batch symbolic ({len(inputs[0])})" if specs else ""),
                lambda x, g: apply("conv_weight_grad", [x, g], **attrs), inputs, specs, _sides(near))


# -- convolutions and their transposes ----------------------------------------------------------------------
def conv(rng, near: Near | None) -> Draw:
    """F.conv with a bias sometimes, drawn as conv_geometry draws."""
    geo = conv_geometry(rng, near)
    window = geo.window
    x = _uniform(rng, (geo.batch, geo.channels, *window.size))
    w = _uniform(rng, (geo.filters, geo.channels // geo.groups, *window.kernel), scale=0.5)
    b = _uniform(rng, (geo.filters,)) if rng.random() < 0.5 else None
    kw = dict(stride=window.stride, pad=window.pad, dilation=window.dilation, groups=geo.groups)
    inputs, specs = _batched(rng, near[0] if near else None, [x, w] + ([b] if b is not None else []), [0])
    return Draw(f"conv of x{x.shape} and w{w.shape}{' with a bias' if b is not None else ''}, {window.text()}, "
                f"groups {geo.groups}" + (f", batch symbolic ({len(inputs[0])})" if specs else ""),
                lambda x, w, *b: F.conv(x, w, *b, **kw), inputs, specs, _sides(near))


def conv_transpose(rng, near: Near | None) -> Draw:
    """F.conv_transpose around the guard of its Conv form: stride 1 (or not), padding around the
    kernel's reach on each side, output padding (below the stride or the dilation, as torch); as
    the edge "padding_taps", the input gradient of a convolution whose taps read padding only."""
    name = near[0] if near else None
    nsp = int(rng.choice([1, 2, 2]))
    if name == "padding_taps":       # the adjoint of such a convolution: x of its output's size
        window = draw_window(rng, nsp, in_padding=True)
        size, kernel, stride, pad, dilation = window.out(), window.kernel, window.stride, window.pad, window.dilation
        output_padding = tuple(n + p0 + p1 - d * (k - 1) - 1 - (o - 1) * s for n, o, k, s, (p0, p1), d
                               in zip(window.size, size, kernel, stride, pad, dilation))
    elif name in (None, "empty_batch"):
        axes = []
        for _ in range(nsp):
            while True:
                n, k, s, d = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.choice([1, 1, 2, 3])), \
                    int(rng.choice([1, 1, 2]))
                reach = d * (k - 1)
                p = tuple(max(0, reach + int(rng.integers(-2, 2))) if rng.random() < 0.7 else 0 for _ in "ab")
                op = int(rng.integers(0, max(s, d))) if rng.random() < 0.3 else 0
                if (n - 1) * s - p[0] - p[1] + reach + op + 1 >= 1:
                    axes.append((n, k, s, p, d, op))
                    break
        size, kernel, stride, pad, dilation, output_padding = zip(*axes)
    else:
        raise Unplaceable(name)
    kind = str(rng.choice(["one", "one", "depthwise", "grouped"]))
    channels, co, groups = _channels(rng, kind)
    batch = int(rng.integers(1, 4))
    x = _uniform(rng, (batch, channels, *size))
    w = _uniform(rng, (channels, co // groups, *kernel), scale=0.5)
    b = _uniform(rng, (co,)) if rng.random() < 0.5 else None
    kw = dict(stride=stride, pad=pad, dilation=dilation, groups=groups, output_padding=output_padding)
    inputs, specs = _batched(rng, name if name != "padding_taps" else None, [x, w] + ([b] if b is not None else []),
                             [0])
    return Draw(f"conv_transpose of x{x.shape} and w{w.shape}, {kw}"
                + (f", batch symbolic ({len(inputs[0])})" if specs else ""),
                lambda x, w, *b: F.conv_transpose(x, w, *b, **kw), inputs, specs)


def pool_scatter(rng, near: Near | None) -> Draw:
    """Max pooling's gradient, x -> d/dx Σ max_pool(x)², which scatters into x's shape: windows
    disjoint or overlapping (strides around the kernel), padding below the kernel, x zero-padded
    first sometimes (then negative, so that the zeros win), float64 too; as the edge
    "one_by_one", over 1x1 inputs."""
    name = near[0] if near else None
    if name not in (None, "one_by_one"):
        raise Unplaceable(name)
    nsp = int(rng.choice([1, 2, 2]))
    kernel = tuple(int(rng.integers(1, 4)) for _ in range(nsp))
    stride = tuple(max(1, k + int(rng.integers(-1, 2))) for k in kernel)
    zeros = 0 if name or rng.random() < 0.5 else int(rng.integers(1, 3))   # zero padding first, as models write
    size = 1 if name else tuple(int(rng.integers(1, 5)) + 2 * zeros for _ in kernel) if zeros else None
    window = draw_window(rng, nsp, kernel=kernel, stride=stride, pool=True, size=size)
    dtype = np.float64 if rng.random() < 0.15 else np.float32
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 4)), *(n - 2 * zeros for n in window.size))
    x = rng.permutation(np.linspace(-1, 1, math.prod(shape))).reshape(shape).astype(dtype)   # no ties
    if zeros:
        x = x - 1.5         # negative: a padded zero is the maximum of every window that holds one
    kw = dict(kernel=window.kernel, stride=window.stride, pad=window.pad)
    padded = ((0, 0), (0, 0)) + ((zeros, zeros),) * nsp
    return Draw(f"max_pool's gradient at x{x.shape} {np.dtype(dtype).name}"
                + (f" padded with {zeros} zeros" if zeros else "") + f", {kw}",
                lambda x: gc.grad(F.sum(F.max_pool(F.pad(x, padded), **kw) ** 2), [x])[0], [x])


# -- softmax and friends --------------------------------------------------------------------------------------
def _logits(rng, name: str | None):
    """Logits of rank 1..4 (size-1 axes among them; an empty one as the edge "empty"), scaled up to
    60 (exp overflows float32 past 88), an axis, and a float dtype."""
    if name not in (None, "empty"):
        raise Unplaceable(name)
    rank = int(rng.integers(1, 5))
    shape = [int(rng.choice([1, 1, 2, 3, 5])) for _ in range(rank)]
    if name == "empty":
        shape[int(rng.integers(rank))] = 0
    axis = int(rng.integers(rank))
    dtype = np.float64 if rng.random() < 0.15 else np.float32
    return _uniform(rng, shape, dtype, scale=float(rng.choice([1.0, 4.0, 60.0]))), axis


def _normalised(fn: Callable, label: str):
    def sample(rng, near: Near | None) -> Draw:
        x, axis = _logits(rng, near[0] if near else None)
        inputs, specs = _batch_specs(rng, [x], [0])
        return Draw(f"{label} of x{x.shape} {x.dtype} along {axis}" + (", axis 0 symbolic" if specs else ""),
                    lambda x: fn(x, axis), inputs, specs)
    sample.__doc__ = f"F.{label} along any axis (the last, with only size-1 axes after it, or an inner one), " \
                     "axis 0 symbolic sometimes."
    return sample


softmax = _normalised(F.softmax, "softmax")
log_softmax = _normalised(F.log_softmax, "log_softmax")


def softmax_cross_entropy(rng, near: Near | None) -> Draw:
    """Per-position cross-entropy with integer labels, classes on any axis; some labels outside
    the classes (they count 0)."""
    x, axis = _logits(rng, near[0] if near else None)
    n = x.shape[axis]
    labels = rng.integers(-1, n + 1 if rng.random() < 0.3 else max(n, 1), x.shape[:axis] + x.shape[axis + 1:])
    return Draw(f"softmax_cross_entropy of x{x.shape} {x.dtype}, classes on axis {axis}, labels {labels.tolist()}",
                lambda x: F.softmax_cross_entropy(x, labels, axis, reduce="none"), [x])


# -- scatter_add --------------------------------------------------------------------------------------------------
def scatter_add(rng, near: Near | None) -> Draw:
    """scatter_add of rows at indices (repeated, every row hit or not; negative ones as the edge
    "negative_indices"), into zeros (a gather's gradient) or a tensor, along axis 0 or 1; the
    number of update elements around the sorted sums' threshold, or symbolic, or any (none as the
    edge "no_updates"); an infinite or NaN update as the edge "non_finite"."""
    name, side, t = near or (None, None, 0)
    axis = int(rng.choice([0, 0, 1]))
    rows = int(rng.choice([1, 3, 40, 300]))
    other = int(rng.choice([1, 2]))           # the axis before axis 1
    width = int(rng.integers(0, 5)) if name is None else int(rng.choice([1, 8, 16]))
    count = int(rng.choice([1, 5, 50]))
    if name == "SORTED_SUMS_MIN":
        per_index = width * (other if axis == 1 else 1)
        count = -(-_value(rng, side, t, 40) // per_index) if side == "at" else _value(rng, side, t, 40) // per_index
    elif name == "no_updates":
        count = 0
    elif name not in (None, "negative_indices", "non_finite"):
        raise Unplaceable(name)
    dtype = np.float64 if name is None and rng.random() < 0.15 else np.float32
    idx = rng.integers(-rows if name == "negative_indices" else 0, rows, count)
    into = rng.random() < 0.5
    if name == "non_finite" and rng.random() < 0.6:     # symbolic indices: the sorted sums' guard holds
        axis, into = 0, False
    u_shape = (count, width) if axis == 0 else (other, count, width)
    base_shape = (rows, width) if axis == 0 else (other, rows, width)
    u = _uniform(rng, u_shape, dtype)
    if name == "non_finite" and u.size:
        u.flat[int(rng.integers(u.size))] = rng.choice([np.inf, -np.inf, np.nan])
    what = (f"scatter_add of updates{u.shape} {np.dtype(dtype).name} at indices {idx.tolist()[:20]} into "
            f"{'a tensor' if into else 'zeros'}{base_shape} along axis {axis}")
    if into:
        base = _uniform(rng, base_shape, dtype)
        inputs, specs = _batch_specs(rng, [base, u], [0, 1]) if name is None and axis == 1 else ([base, u], None)
        return Draw(what, lambda b, u: F.scatter_add(b, idx, u, axis), inputs, specs, _sides(near))
    zeros = np.zeros(base_shape, dtype)
    if name is None and axis == 0 and rng.random() < 0.3:
        # zeros made at run time, of a table of symbolic width (an embedding's gradient)
        return Draw(what + ", the zeros of a table of symbolic width",
                    lambda x, u: F.scatter_add(F.zeros_like(x), idx, u, 0), [zeros, u],
                    [gc.spec((rows, "w"), dtype), gc.spec((count, "w"), dtype)], _sides(near))
    if name != "SORTED_SUMS_MIN" and axis == 0 and rng.random() < (0.9 if name == "non_finite" else 0.3):
        # the indices at run time, their number symbolic
        specs = [gc.spec(("n", width), dtype), gc.spec(("n",), np.int64)]
        return Draw(what + ", indices an input of symbolic length",
                    lambda u, i: F.scatter_add(zeros, i, u, 0), [u, idx.astype(np.int64)], specs, _sides(near))
    return Draw(what, lambda u: F.scatter_add(zeros, idx, u, axis), [u], None, _sides(near))


# -- scans -------------------------------------------------------------------------------------------------------
def scan(rng, near: Near | None) -> Draw:
    """A tanh recurrence through gc.scan (forwards or backwards, over a static or a symbolic
    number of steps, giving the final carry and the stacked outputs; none as the edge
    "zero_steps") or through gc.fori_loop (nothing to scan over), reading a closed-over weight."""
    name = near[0] if near else None
    if name not in (None, "zero_steps"):
        raise Unplaceable(name)
    width, steps = int(rng.integers(1, 4)), 0 if name else int(rng.choice([1, 2, 5]))
    w = _uniform(rng, (width, width), scale=0.6)
    h0 = _uniform(rng, (2, width))
    if name is None and rng.random() < 0.3:
        return Draw(f"fori_loop of {steps} steps over h{h0.shape}",
                    lambda h: gc.fori_loop(0, steps, lambda i, h: F.tanh(h @ w) + h * 0.5, h), [h0])
    reverse = bool(rng.random() < 0.4)
    xs = _uniform(rng, (steps, 2, width))

    def fn(h, xs):
        def step(c, x):
            c = F.tanh(c @ w + x)
            return c, c * c
        return gc.scan(step, h, xs, reverse=reverse)

    specs = [gc.spec(h0.shape), gc.spec(("t", 2, width))] if rng.random() < 0.4 else None
    return Draw(f"scan of {steps} steps{' backwards' if reverse else ''} over h{h0.shape}"
                + (", steps symbolic" if specs else ""), fn, [h0, xs], specs)


# -- matrix products --------------------------------------------------------------------------------------------
def gemm(rng, near: Near | None) -> Draw:
    """A 2-D product with flags (the gemm pass's op): aᵀ·b mostly, a or b transposed or not, a
    bias row or matrix sometimes, float32 or float64; its multiply-adds around the explicit
    transpose's threshold (K·M·N), or any; as the edge "empty_contraction", K = 0 (the product is
    zeros, or the bias)."""
    name, side, t = near or (None, None, 0)
    trans_a, trans_b = bool(rng.random() < 0.8), bool(rng.random() < 0.3)
    m, n = int(rng.choice([1, 3, 64, 512])), int(rng.choice([1, 5, 64, 512]))
    k = int(rng.choice([1, 2, 7, 300]))
    if name == "EXPLICIT_TRANSPOSE_MIN_WORK":
        trans_a = True
        m, n = int(rng.choice([64, 256, 512])), int(rng.choice([64, 256, 512]))
        k = -(-_value(rng, side, t, m * n) // (m * n)) if side == "at" else _value(rng, side, t, m * n) // (m * n)
    elif name == "empty_contraction":
        k = 0
    elif name is not None:
        raise Unplaceable(name)
    dtype = np.float64 if name is None and rng.random() < 0.15 else np.float32
    a = _uniform(rng, (k, m) if trans_a else (m, k), dtype)
    b = _uniform(rng, (n, k) if trans_b else (k, n), dtype)
    bias = [] if rng.random() < 0.6 else [_uniform(rng, (n,) if rng.random() < 0.5 else (m, n), dtype)]
    return Draw(f"gemm of a{a.shape} b{b.shape}{f' c{bias[0].shape}' if bias else ''} {np.dtype(dtype).name}, "
                f"trans_a={trans_a} trans_b={trans_b}",
                lambda a, b, *c: apply("gemm", [a, b, *c], trans_a=trans_a, trans_b=trans_b), [a, b, *bias],
                sides=_sides(near))


# -- sums and means ----------------------------------------------------------------------------------------------
def _reduction(fn: Callable, label: str):
    def sample(rng, near: Near | None) -> Draw:
        name = near[0] if near else None
        if name not in (None, "empty_axis", "empty_batch"):
            raise Unplaceable(name)
        rank = int(rng.integers(1, 5))
        shape = [int(rng.choice([1, 1, 2, 3, 4])) for _ in range(rank)]
        if rank > 1 and rng.random() < 0.5:        # leading axes (size-1 ones after them aside)
            axes = tuple(range(int(rng.integers(1, rank))))
        else:
            axes = tuple(int(a) for a in range(rank) if rng.random() < 0.5) or (0,)
        if name == "empty_axis":
            shape[int(rng.choice(axes))] = 0
        elif name == "empty_batch":
            axes = tuple(sorted({0, *axes}))
        keepdims = bool(rng.random() < 0.3)
        dtype = np.float64 if rng.random() < 0.2 else np.float32
        x = _uniform(rng, shape, dtype)
        inputs, specs = _batched(rng, None if name == "empty_axis" else name, [x], [0])
        return Draw(f"{label} of x{x.shape} {np.dtype(dtype).name} over {axes}{', keepdims' if keepdims else ''}"
                    + (", axis 0 symbolic" if specs else ""), lambda x: fn(x, axes, keepdims=keepdims), inputs, specs)
    sample.__doc__ = f"F.{label} over a random set of axes (leading or not; size-1 and symbolic axes among them), " \
                     "keeping the dims or not, float32 or float64; as the edge \"empty_axis\", an empty one among " \
                     "them, as \"empty_batch\", axis 0 among them, symbolic and empty at run time."
    return sample


reduce_sum = _reduction(F.sum, "sum")
reduce_mean = _reduction(F.mean, "mean")

SAMPLERS: dict[str, Callable[..., Draw]] = {
    "conv": conv, "conv_transpose": conv_transpose, "conv_weight_grad": conv_weight_grad,
    "pool_scatter": pool_scatter, "softmax": softmax, "log_softmax": log_softmax,
    "softmax_cross_entropy": softmax_cross_entropy, "scatter_add": scatter_add, "scan": scan,
    "reduce_sum": reduce_sum, "reduce_mean": reduce_mean, "gemm": gemm,
}
# The edges each op's sampler draws (near = (edge, "edge", None)), each drawn for every strategy of the op.
EDGES: dict[str, tuple[str, ...]] = {
    "conv": ("padding_taps", "empty_batch"),
    "conv_transpose": ("padding_taps", "empty_batch"),
    "conv_weight_grad": ("padding_taps", "padding_taps_strided", "empty_batch"),
    "pool_scatter": ("one_by_one",),
    "softmax": ("empty",), "log_softmax": ("empty",), "softmax_cross_entropy": ("empty",),
    "scatter_add": ("negative_indices", "no_updates", "non_finite"),
    "scan": ("zero_steps",),
    "reduce_sum": ("empty_axis", "empty_batch"), "reduce_mean": ("empty_axis", "empty_batch"),
    "gemm": ("empty_contraction",),
}
