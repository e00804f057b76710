"""Random gcompile programs, each written twice: as gcompile code and as NumPy code.

A generator step appends one op to a straight-line program: it picks an operand (recent values
first, so chains get deep), draws the op's arguments (axes, slices, kernels, ...), and writes
the same computation with gcompile.functions (F) — sometimes through numpy's functions on
Tensors — and with numpy / tests.fuzz.npsem (N). Partners of binary ops are earlier values or
new inputs; weights, gamma/beta, recurrent states and int labels/indices are new inputs, so
nearly every float array is an input whose gradient gets checked (small constant arrays also
appear, for constant folding). Inputs may carry a symbolic leading "batch" dim.

Control flow: differentiable gc.while_loops (bounded, with a number of steps the data decides)
and gc.conds whose bodies are drawn from the same op tables (gen_loop, gen_cond); the numpy side
runs them as Python loops and branches and records the path taken.

Values are kept in safe domains (log and sqrt of softplus(x) + 0.1, division by x*x + 1, exp of
tanh) and bounded (a value whose magnitude bound grows past _SQUASH is squashed by tanh), so
float32 runs stay comparable with float64 ones. Kinks and jumps are not avoided here: the
numpy side records their margins and the checks only compare where the point is safe.

Draws go through a `Draw` (random.Random for tools/fuzz.py, hypothesis data in the tests);
index 0 of every choice is the simplest option, so hypothesis shrinks towards small programs.
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

MAX_RANK = 4
MAX_NUMEL = 48          # elements of a value, with the batch dim counted as 3
_SQUASH = 10.0          # magnitude bound above which a value is squashed by tanh
_PROXY = 97             # stands for "batch" when numpy computes a result shape (static dims stay < 97)


# -- dims: an int, or Sym(k) = k * batch ------------------------------------------------------------
@dataclass(frozen=True)
class Sym:
    k: int = 1


def concrete(d, batch: int) -> int:
    return d.k * batch if isinstance(d, Sym) else d


def concrete_shape(shape, batch: int) -> tuple:
    return tuple(concrete(d, batch) for d in shape)


def _from_proxy(shape) -> tuple:
    return tuple(Sym(d // _PROXY) if d >= _PROXY else d for d in shape)


def numel(shape, batch: int = 3) -> int:
    return math.prod(concrete_shape(shape, batch))


def is_static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def n_symbolic(shape) -> int:
    return sum(isinstance(d, Sym) for d in shape)


def broadcast(a, b):
    """numpy broadcasting of two shapes (a Sym matches only itself or 1); None if they do not."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def _fits(shape) -> bool:
    return len(shape) <= MAX_RANK and numel(shape) <= MAX_NUMEL and n_symbolic(shape) <= 1


# -- the program ----------------------------------------------------------------------------------------
@dataclass
class Input:
    name: str
    shape: tuple
    kind: str = "float"        # or "labels": int64 class indices in [0, classes)
    scale: float = 1.0
    offset: float = 0.0
    classes: int = 0

    def spec_shape(self) -> tuple:
        return tuple("batch" if isinstance(d, Sym) else d for d in self.shape)

    @property
    def dtype(self):
        return np.int64 if self.kind == "labels" else np.float32

    def sample(self, seed: int, batch: int) -> np.ndarray:
        """Values from (seed, the input's number): stable when other inputs come and go."""
        rng = np.random.default_rng([seed, int(self.name[1:])])
        shape = concrete_shape(self.shape, batch)
        if self.kind == "labels":
            return rng.integers(0, self.classes, shape).astype(np.int64)
        return (rng.standard_normal(shape) * self.scale + self.offset).astype(np.float32)


@dataclass
class Step:
    name: str
    op: str           # coverage label
    gc: str           # gcompile expression
    np: str           # numpy expression
    args: tuple       # names of the values it reads
    shape: tuple = ()


@dataclass
class Program:
    inputs: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    def ops(self) -> set:
        return {label for s in self.steps for label in s.op.split("+")}

    def source(self, which: str) -> str:
        """`def program(...)` (which="gc") or `def reference(...)` (which="np")."""
        head = "program" if which == "gc" else "reference"
        lines = [f"def {head}({', '.join(i.name for i in self.inputs)}):"]
        lines += [f"    {s.name} = {s.gc if which == 'gc' else s.np}" for s in self.steps]
        lines.append(f"    return ({''.join(o + ', ' for o in self.outputs)})")
        return "\n".join(lines) + "\n"

    def functions(self) -> tuple[Callable, Callable]:
        import gcompile as gc
        import gcompile.functions as F

        from . import npsem
        scope_gc, scope_np = {"F": F, "gc": gc, "np": np}, {"np": np, "N": npsem}
        exec(self.source("gc"), scope_gc)  # noqa: S102 - generated code
        exec(self.source("np"), scope_np)  # noqa: S102
        return scope_gc["program"], scope_np["reference"]

    def pruned(self) -> Program:
        """Without the steps and inputs the outputs do not need."""
        needed = set(self.outputs)
        steps = []
        for s in reversed(self.steps):
            if s.name in needed:
                steps.append(s)
                needed.update(s.args)
        return Program([i for i in self.inputs if i.name in needed], steps[::-1], list(self.outputs))

    def shape_of(self, name: str) -> tuple:
        return next(v.shape for v in self.inputs + self.steps if v.name == name)

    def bypassed(self, name: str, by: str) -> Program:
        """With the value `name` replaced by `by` in every later step and output (then pruned)."""
        import re
        pattern = re.compile(rf"\b{name}\b")
        steps = [s if s.name == name else replace(s, gc=pattern.sub(by, s.gc), np=pattern.sub(by, s.np),
                                                  args=tuple(by if a == name else a for a in s.args))
                 for s in self.steps]
        outputs = list(dict.fromkeys(by if o == name else o for o in self.outputs))
        return Program(list(self.inputs), steps, outputs).pruned()


# -- draws ------------------------------------------------------------------------------------------------
class Draw:
    """Random choices; index 0 / the low end is the simplest option."""

    def int(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def choice(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def bool(self) -> bool:
        return self.int(0, 1) == 1

    def subset(self, seq) -> list:
        return [x for x in seq if self.bool()]


class RandomDraw(Draw):
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo, hi):
        return self.rng.randint(lo, hi)


class HypothesisDraw(Draw):
    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def int(self, lo, hi):
        return self.data.draw(self.st.integers(lo, hi))


# -- the generator ------------------------------------------------------------------------------------------
@dataclass
class Value:
    name: str
    shape: tuple
    mag: float      # a loose bound on |value|


class Gen:
    def __init__(self, draw: Draw):
        self.d = draw
        self.program = Program()
        self.values: list[Value] = []
        self._n = 0

    # values
    def _fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n - 1}"

    def new_input(self, shape, kind="float", scale=1.0, offset=0.0, classes=0) -> Value:
        assert all(d == Sym(1) or isinstance(d, int) for d in shape), shape
        inp = Input(self._fresh("x"), tuple(shape), kind, scale, offset, classes)
        self.program.inputs.append(inp)
        value = Value(inp.name, inp.shape, abs(offset) + 2.5 * scale)
        if kind == "float":
            self.values.append(value)
        return value

    def add(self, op: str, gc: str, np_: str, shape, mag: float, args) -> Value:
        if _NUMPY_NAMES.search(gc) and self.d.int(0, 3) == 0:
            gc, op = _NUMPY_NAMES.sub(lambda m: f"np.{_RENAMED.get(m[1], m[1])}(", gc), op + "+numpy_dispatch"
        value = Value(self._fresh("v"), tuple(shape), mag)
        self.program.steps.append(Step(value.name, op, gc, np_, tuple(a.name for a in args), value.shape))
        self.values.append(value)
        if mag > _SQUASH:
            c = float(f"{2.0 / mag:.2g}")
            value = self.add("tanh+mul", f"F.tanh({value.name} * {c})", f"np.tanh({value.name} * {c})", shape,
                             1.0, [value])
        return value

    def pick(self, accept=lambda v: True) -> Value | None:
        """A value, the most recent ones most likely."""
        candidates = [v for v in reversed(self.values) if accept(v)]
        if not candidates:
            return None
        return candidates[min(self.d.int(0, 7) if self.d.bool() else 0, len(candidates) - 1)]

    def random_shape(self, batch_ok=True) -> tuple:
        rank = self.d.int(1, 3) if self.d.bool() else self.d.int(0, 4)
        shape = [self.d.choice((3, 2, 4, 1, 5)) for _ in range(rank)]
        if shape and batch_ok and self.d.bool():
            shape[0] = Sym(1)
        while numel(shape) > MAX_NUMEL:
            shape[self.d.int(0, len(shape) - 1)] = 1
        return tuple(shape)

    def input_like(self, shape, scale=1.0, offset=0.0) -> Value:
        """A new input of `shape`, where products of the batch dim broadcast (size 1)."""
        return self.new_input(tuple(1 if isinstance(d, Sym) and d.k != 1 else d for d in shape), scale=scale,
                              offset=offset)

    def partner(self, shape, exclude=None) -> Value:
        """A value that broadcasts against `shape` (an earlier one other than `exclude`, or a new input)."""
        if self.d.bool():
            found = self.pick(lambda v: v is not exclude and (b := broadcast(v.shape, shape)) is not None and _fits(b))
            if found is not None:
                return found
        dims = list(shape)
        if dims and self.d.bool():
            dims = dims[self.d.int(0, len(dims)):]          # fewer leading dims
        for i, d in enumerate(dims):
            if self.d.int(0, 3) == 0:
                dims[i] = 1
            elif d == 1 and self.d.int(0, 3) == 0:
                dims[i] = self.d.int(2, 3)                  # broadcasting both ways
        if len(dims) < MAX_RANK and self.d.int(0, 5) == 0:
            dims.insert(0, self.d.int(2, 3))
        dims = tuple(dims)
        if not _fits(broadcast(dims, shape) or (0,) * 9):
            dims = tuple(1 if isinstance(d, int) else d for d in shape)
        return self.input_like(dims)

    def static_axes(self, shape, minimum=1) -> list[int]:
        return [i for i, d in enumerate(shape) if isinstance(d, int) and d >= minimum]


# gcompile.functions called through numpy's own functions on Tensors (np.tanh(x), np.sum(x, axis=1))
_NUMPY_NAMES = re.compile(r"\bF\.(tanh|exp|log|sqrt|abs|sin|cos|tan|square|sign|floor|ceil|expm1|log1p|maximum|"
                          r"minimum|add|subtract|multiply|divide|power|negative|sum|mean|max|min|prod|transpose|"
                          r"reshape|expand_dims|squeeze|swapaxes|broadcast_to|ravel|concat|stack|split|tile|take|"
                          r"take_along_axis|matmul|einsum|where|clip|greater|less|greater_equal|equal|not_equal|"
                          r"logical_or|round)\(")
_RENAMED = {"concat": "concatenate"}


def _fmt_axis(d: Draw, axis: int, ndim: int) -> int:
    """The axis, sometimes written negatively."""
    return axis - ndim if d.bool() else axis


def _axes_arg(g: Gen, ndim: int):
    """None, an int or a tuple of axes (possibly negative) and the normalised tuple."""
    kind = g.d.int(0, 2)
    if kind == 0 or ndim == 0:
        return None, tuple(range(ndim))
    if kind == 1:
        a = g.d.int(0, ndim - 1)
        return _fmt_axis(g.d, a, ndim), (a,)
    axes = tuple(a for a in range(ndim) if g.d.bool()) or (0,)
    return tuple(_fmt_axis(g.d, a, ndim) for a in axes), axes


# -- op families: each returns the new Value, or None when it does not apply to x ----------------------------
_UNARY = [  # label, gcompile, numpy, magnitude bound from the operand's
    ("tanh", "F.tanh({x})", "np.tanh({x})", lambda m: 1),
    ("neg", "-{x}", "-{x}", lambda m: m),
    ("exp+tanh", "F.exp(F.tanh({x}))", "np.exp(np.tanh({x}))", lambda m: 2.8),
    ("log+softplus", "F.log(F.softplus({x}) + 0.1)", "np.log(N.softplus({x}) + 0.1)", lambda m: m + 2.4),
    ("sqrt+softplus", "F.sqrt(F.softplus({x}) + 0.1)", "np.sqrt(N.softplus({x}) + 0.1)", lambda m: m + 1),
    ("rsqrt+softplus", "F.rsqrt(F.softplus({x}) + 0.1)", "1 / np.sqrt(N.softplus({x}) + 0.1)", lambda m: 3.2),
    ("log1p+softplus", "F.log1p(F.softplus({x}))", "np.log1p(N.softplus({x}))", lambda m: m + 1),
    ("expm1+tanh", "F.expm1(F.tanh({x}))", "np.expm1(np.tanh({x}))", lambda m: 1.8),
    ("abs", "F.abs({x})", "N.abs({x})", lambda m: m),
    ("abs", "abs({x})", "N.abs({x})", lambda m: m),
    ("sin", "F.sin({x})", "np.sin({x})", lambda m: 1),
    ("cos", "F.cos({x})", "np.cos({x})", lambda m: 1),
    ("tan+tanh", "F.tan(F.tanh({x}))", "np.tan(np.tanh({x}))", lambda m: 1.6),
    ("tanh", "{x}.tanh()", "np.tanh({x})", lambda m: 1),
    ("sigmoid", "F.sigmoid({x})", "N.sigmoid({x})", lambda m: 1),
    ("erf", "F.erf({x})", "N.erf({x})", lambda m: 1),
    ("relu", "F.relu({x})", "N.relu({x})", lambda m: m),
    ("square", "F.square({x})", "{x} ** 2", lambda m: m * m),
    ("silu", "F.silu({x})", "{x} * N.sigmoid({x})", lambda m: m),
    ("selu", "F.selu({x})", "N.selu({x})", lambda m: 1.1 * m + 1.8),
    ("sign", "F.sign({x})", "N.sign({x})", lambda m: 1),
    ("floor", "F.floor({x} * 2.0)", "N.floor({x} * 2.0)", lambda m: 2 * m + 1),
    ("ceil", "F.ceil({x} * 2.0)", "N.ceil({x} * 2.0)", lambda m: 2 * m + 1),
    ("round", "F.round({x} * 2.0)", "N.round({x} * 2.0)", lambda m: 2 * m + 1),
    ("cast", "F.cast(F.cast({x} * 2.0, np.int32), {x}.dtype)", "N.trunc({x} * 2.0)", lambda m: 2 * m),
    ("pow", "{x} ** 3", "{x} ** 3", lambda m: m ** 3),
    ("pow", "F.power({x}, 2)", "{x} ** 2", lambda m: m * m),
    ("pow+softplus", "(F.softplus({x}) + 0.5) ** -1.5", "(N.softplus({x}) + 0.5) ** -1.5", lambda m: 2.9),
    ("pow+softplus", "F.pow(F.softplus({x}) + 0.5, 0.5)", "(N.softplus({x}) + 0.5) ** 0.5", lambda m: m + 1),
    ("pow+tanh", "2.0 ** F.tanh({x})", "2.0 ** np.tanh({x})", lambda m: 2),
    ("mul", "{x} * 0.7", "{x} * 0.7", lambda m: m),
    ("sub", "1.5 - {x}", "1.5 - {x}", lambda m: m + 1.5),
    ("div", "{x} / 3.0", "{x} / 3.0", lambda m: m),
    ("div", "2.0 / ({x} * {x} + 1)", "2.0 / ({x} * {x} + 1)", lambda m: 2),
    ("stop_gradient", "{x} + F.stop_gradient({x}) * 0.0", "{x} + {x} * 0.0", lambda m: m),
    ("identity", "F.identity({x})", "{x}", lambda m: m),
    ("dropout", "F.dropout({x}, 0.3)", "{x}", lambda m: m),                           # inference: x
    ("dropout", "F.dropout({x}, 0.0, training=True, seed=3)", "{x}", lambda m: m),    # keeps every value
    # each element dropped (0) or kept as x / (1 - p): d·(d·(1 - p) - x) is 0 whatever the mask
    ("dropout+mul+sub", "(lambda d: d * (d * 0.5 - {x}))(F.dropout({x}, 0.5, training=True, seed=5))", "{x} * 0.0",
     lambda m: 1.0),
    ("arcsin+tanh", "F.arcsin(F.tanh({x}) * 0.9)", "np.arcsin(np.tanh({x}) * 0.9)", lambda m: 1.2),
    ("arccos+tanh", "F.arccos(F.tanh({x}) * 0.9)", "np.arccos(np.tanh({x}) * 0.9)", lambda m: 2.7),
    ("arctan", "F.arctan({x})", "np.arctan({x})", lambda m: 1.6),
    ("sinh+tanh", "F.sinh(F.tanh({x}) * 2.0)", "np.sinh(np.tanh({x}) * 2.0)", lambda m: 3.7),
    ("cosh+tanh", "F.cosh(F.tanh({x}) * 2.0)", "np.cosh(np.tanh({x}) * 2.0)", lambda m: 3.8),
    ("arcsinh", "F.arcsinh({x})", "np.arcsinh({x})", lambda m: math.log(2 * m + 1) + 1),
    ("arccosh+softplus", "F.arccosh(F.softplus({x}) + 1.1)", "np.arccosh(N.softplus({x}) + 1.1)",
     lambda m: math.log(2 * m + 5) + 1),
    ("arctanh+tanh", "F.arctanh(F.tanh({x}) * 0.9)", "np.arctanh(np.tanh({x}) * 0.9)", lambda m: 1.5),
    ("exp2+tanh", "F.exp2(F.tanh({x}))", "np.exp2(np.tanh({x}))", lambda m: 2),
    ("log2+softplus", "F.log2(F.softplus({x}) + 0.1)", "np.log2(N.softplus({x}) + 0.1)", lambda m: 1.5 * m + 4),
    ("log10+softplus", "F.log10(F.softplus({x}) + 0.1)", "np.log10(N.softplus({x}) + 0.1)", lambda m: m + 1),
    ("reciprocal", "F.reciprocal({x} * {x} + 1)", "(1 / ({x} * {x} + 1))", lambda m: 1),
    ("erfc", "F.erfc({x})", "N.erfc({x})", lambda m: 2),
    ("erfinv+tanh", "F.erfinv(F.tanh({x}) * 0.9)", "N.erfinv(np.tanh({x}) * 0.9)", lambda m: 1.2),
    ("lgamma+softplus", "F.lgamma(F.softplus({x}) + 0.5)", "N.lgamma(N.softplus({x}) + 0.5)",
     lambda m: (m + 2) * math.log(m + 2) + 1),
    ("polygamma+softplus", "F.digamma(F.softplus({x}) + 0.5)", "N.digamma(N.softplus({x}) + 0.5)",
     lambda m: math.log(m + 2) + 2),
    ("trunc", "F.trunc({x} * 2.0)", "N.trunc({x} * 2.0)", lambda m: 2 * m + 1),
    ("trunc+sub", "F.frac({x} * 2.0)", "N.frac({x} * 2.0)", lambda m: 1),
    ("softsign", "F.softsign({x})", "({x} / (1 + np.abs({x})))", lambda m: 1),
    ("softplus+neg", "F.logsigmoid({x})", "(-N.softplus(-{x}))", lambda m: m + 1),
    ("softplus+tanh", "F.mish({x})", "({x} * np.tanh(N.softplus({x})))", lambda m: m),
    ("tanh+sub", "F.tanhshrink({x})", "({x} - np.tanh({x}))", lambda m: m + 1),
    ("clip+mul", "F.hardswish({x} * 3.0)", "N.hardswish({x} * 3.0)", lambda m: 3 * m),
    ("clip", "F.hardsigmoid({x} * 3.0)", "N.hardsigmoid({x} * 3.0)", lambda m: 1),
    ("clip", "F.relu6({x} * 4.0)", "N.hardtanh({x} * 4.0, 0.0, 6.0)", lambda m: 6),
    ("clip", "F.hardtanh({x})", "N.hardtanh({x})", lambda m: 1),
    ("where+abs", "F.softshrink({x})", "N.shrink({x}, 0.5, 0.5)", lambda m: m),
    ("where+abs", "F.hardshrink({x})", "N.shrink({x}, 0.5, 0.0)", lambda m: m),
    ("elu", "F.celu({x}, 0.5)", "N.celu({x}, 0.5)", lambda m: m + 0.5),
    ("where+greater", "F.threshold({x}, 0.2, -0.5)", "N.threshold({x}, 0.2, -0.5)", lambda m: m + 0.5),
    ("log+log1p+sigmoid", "F.logit(F.sigmoid({x}) * 0.9 + 0.05)",
     "np.log((N.sigmoid({x}) * 0.9 + 0.05) / (0.95 - N.sigmoid({x}) * 0.9))", lambda m: 3),
    ("where+isnan", "F.nan_to_num({x})", "{x}", lambda m: m),
]


def gen_unary(g: Gen, x: Value):
    label, gc, np_, mag = g.d.choice(_UNARY)
    return g.add(label, gc.format(x=x.name), np_.format(x=x.name), x.shape, mag(x.mag), [x])


def gen_param_activation(g: Gen, x: Value):
    kind = g.d.int(0, 4)
    if kind == 0:
        b = g.d.choice((1.0, 2.0, 0.5))
        return g.add("softplus", f"F.softplus({x.name}, beta={b})", f"N.softplus({x.name}, {b})", x.shape,
                     x.mag + 1, [x])
    if kind == 1:
        a = g.d.bool()
        return g.add("gelu", f"F.gelu({x.name}, approximate={a})", f"N.gelu({x.name}, {a})", x.shape, x.mag, [x])
    if kind == 2:
        s = g.d.choice((0.2, 0.01, 1.5))
        return g.add("leaky_relu", f"F.leaky_relu({x.name}, {s})", f"N.leaky_relu({x.name}, {s})", x.shape,
                     x.mag * 1.5, [x])
    if kind == 3:
        a = g.d.choice((1.0, 0.5, 2.0))
        return g.add("elu", f"F.elu({x.name}, {a})", f"N.elu({x.name}, {a})", x.shape, x.mag + a, [x])
    lo = g.d.choice((-0.5, -1.0, None))
    hi = g.d.choice((0.7, None)) if lo is not None else 0.4
    return g.add("clip", f"F.clip({x.name}, {lo}, {hi})",
                 f"N.clip({x.name}, {'-np.inf' if lo is None else lo}, {'np.inf' if hi is None else hi})",
                 x.shape, x.mag, [x])


_BINARY = [
    ("add", "{a} + {b}", "{a} + {b}", lambda p, q: p + q),
    ("sub", "{a} - {b}", "{a} - {b}", lambda p, q: p + q),
    ("mul", "{a} * {b}", "{a} * {b}", lambda p, q: p * q),
    ("div", "{a} / ({b} * {b} + 1)", "{a} / ({b} * {b} + 1)", lambda p, q: p),
    ("maximum", "F.maximum({a}, {b})", "N.maximum({a}, {b})", max),
    ("minimum", "F.minimum({a}, {b})", "N.minimum({a}, {b})", max),
    ("logaddexp", "F.logaddexp({a}, {b})", "np.logaddexp({a}, {b})", lambda p, q: max(p, q) + 1),
    ("add", "F.add({a}, {b})", "{a} + {b}", lambda p, q: p + q),
    ("sub", "F.subtract({a}, {b})", "{a} - {b}", lambda p, q: p + q),
    ("mul", "F.multiply({a}, {b})", "{a} * {b}", lambda p, q: p * q),
    ("div", "F.divide({a}, F.exp(F.tanh({b})))", "{a} / np.exp(np.tanh({b}))", lambda p, q: 2.8 * p),
    ("pow+softplus+tanh", "(F.softplus({a}) + 0.5) ** F.tanh({b})", "(N.softplus({a}) + 0.5) ** np.tanh({b})",
     lambda p, q: p + 2),
    ("arctan2+softplus", "F.arctan2({a}, F.softplus({b}) + 0.2)", "np.arctan2({a}, N.softplus({b}) + 0.2)",
     lambda p, q: 1.6),
    ("hypot", "F.hypot({a}, {b})", "N.hypot({a}, {b})", lambda p, q: p + q),
    ("fmax", "F.fmax({a}, {b})", "N.maximum({a}, {b})", max),
    ("fmin", "F.fmin({a}, {b})", "N.minimum({a}, {b})", max),
    ("lerp", "F.lerp({a}, {b}, 0.3)", "{a} + 0.3 * ({b} - {a})", max),
    ("lerp+sigmoid", "F.lerp({a}, {b}, F.sigmoid({b}))", "{a} + N.sigmoid({b}) * ({b} - {a})", lambda p, q: p + 2 * q),
    ("xlogy+softplus", "F.xlogy({a}, F.softplus({b}) + 0.1)", "{a} * np.log(N.softplus({b}) + 0.1)",
     lambda p, q: p * (q + 3)),
    ("copysign", "F.copysign({a}, {b})", "N.copysign({a}, {b})", lambda p, q: p),
    ("fmod+softplus", "F.fmod({a}, F.softplus({b}) + 0.5)", "N.fmod({a}, N.softplus({b}) + 0.5)", lambda p, q: p),
    ("remainder+softplus", "F.remainder({a}, F.softplus({b}) + 0.5)", "N.remainder({a}, N.softplus({b}) + 0.5)",
     lambda p, q: q + 1.5),
]


def gen_binary(g: Gen, x: Value):
    label, gc, np_, mag = g.d.choice(_BINARY)
    y = g.partner(x.shape, exclude=x if label in ("maximum", "minimum", "fmax", "fmin") else None)
    a, b = (x, y) if g.d.bool() else (y, x)
    return g.add(label, gc.format(a=a.name, b=b.name), np_.format(a=a.name, b=b.name), broadcast(x.shape, y.shape),
                 mag(a.mag, b.mag), [a, b])


_CONDITIONS = [
    ("greater", "{p} > {q}", "N.greater({p}, {q})"),
    ("less", "F.less({p}, {q})", "N.less({p}, {q})"),
    ("less_equal", "{p} <= {q}", "N.less({p}, {q})"),
    ("greater_equal", "F.greater_equal({p}, {q})", "N.greater({p}, {q})"),
    ("greater+logical_not", "~({p} > {q})", "~N.greater({p}, {q})"),
    ("greater+less+logical_and", "({p} > {q}) & ({p} < 0.8)", "N.greater({p}, {q}) & N.less({p}, 0.8)"),
    ("less+logical_or", "F.logical_or(F.less({p}, {q}), F.less({q}, -0.6))", "N.less({p}, {q}) | N.less({q}, -0.6)"),
    ("greater+stop_gradient", "F.greater(F.stop_gradient({p}), {q})", "N.greater({p}, {q})"),
    ("equal+floor", "F.equal(F.floor({p}), F.floor({q}))", "N.floor({p}) == N.floor({q})"),
    ("not_equal+floor", "F.not_equal(F.floor({p}), F.floor({q}))", "N.floor({p}) != N.floor({q})"),
    ("floor+cast+bitwise_xor+bitwise_and+not_equal",
     "F.not_equal((F.cast(F.floor({p} * 4), np.int32) ^ F.cast(F.floor({q} * 4), np.int32)) & 1, 0)",
     "((N.floor({p} * 4).astype(np.int32) ^ N.floor({q} * 4).astype(np.int32)) & 1) != 0"),
]


def gen_where(g: Gen, x: Value):
    q = g.partner(x.shape, exclude=x) if g.d.bool() else None
    shape = x.shape if q is None else broadcast(x.shape, q.shape)
    other = g.partner(shape, exclude=x) if g.d.bool() else None
    label, cond_gc, cond_np = g.d.choice(_CONDITIONS)
    q_text = q.name if q is not None else str(g.d.choice((0.3, -0.2)))
    b_text = other.name if other is not None else str(g.d.choice((0.0, -1.0)))
    if other is not None:
        shape = broadcast(shape, other.shape)
    args = [v for v in (x, q, other) if v is not None]
    gc = f"F.where({cond_gc.format(p=x.name, q=q_text)}, {x.name}, {b_text})"
    np_ = f"np.where({cond_np.format(p=x.name, q=q_text)}, {x.name}, {b_text})"
    return g.add(f"where+{label}", gc, np_, shape, max(x.mag, other.mag if other else 1.0), args)


_REDUCTIONS = [
    ("reduce_sum", "F.sum({x}, axis={axis}, keepdims={k})", "np.sum({x}, axis={axis}, keepdims={k})", "sum"),
    ("reduce_mean", "F.mean({x}, axis={axis}, keepdims={k})", "np.mean({x}, axis={axis}, keepdims={k})", "same"),
    ("reduce_mean", "{x}.mean(axis={axis}, keepdims={k})", "np.mean({x}, axis={axis}, keepdims={k})", "same"),
    ("reduce_max", "F.max({x}, axis={axis}, keepdims={k})", "N.rmax({x}, axis={axis}, keepdims={k})", "same"),
    ("reduce_min", "{x}.min(axis={axis}, keepdims={k})", "N.rmin({x}, axis={axis}, keepdims={k})", "same"),
    ("reduce_sum", "{x}.sum(axis={axis}, keepdims={k})", "np.sum({x}, axis={axis}, keepdims={k})", "sum"),
    ("reduce_prod+tanh", "F.prod(1 + 0.3 * F.tanh({x}), axis={axis}, keepdims={k})",
     "np.prod(1 + 0.3 * np.tanh({x}), axis={axis}, keepdims={k})", "prod"),
    ("logsumexp", "F.logsumexp({x}, axis={axis}, keepdims={k})", "N.logsumexp({x}, axis={axis}, keepdims={k})",
     "lse"),
    ("var", "F.var({x}, axis={axis}, correction=0, keepdims={k})", "N.var({x}, axis={axis}, keepdims={k})",
     "square"),
    ("std", "F.std({x}, axis={axis}, correction=0, keepdims={k})", "N.std({x}, axis={axis}, keepdims={k})", "same"),
    ("vector_norm", "F.vector_norm({x}, 2, axis={axis}, keepdims={k})",
     "N.vector_norm({x}, 2, axis={axis}, keepdims={k})", "norm"),
    ("vector_norm", "F.vector_norm({x}, 1, axis={axis}, keepdims={k})",
     "N.vector_norm({x}, 1, axis={axis}, keepdims={k})", "sum"),
    ("vector_norm", "F.vector_norm({x}, np.inf, axis={axis}, keepdims={k})",
     "N.vector_norm({x}, np.inf, axis={axis}, keepdims={k})", "same"),
    ("vector_norm", "F.vector_norm({x}, 3, axis={axis}, keepdims={k})",
     "N.vector_norm({x}, 3, axis={axis}, keepdims={k})", "norm"),
]


def gen_reduce(g: Gen, x: Value):
    label, gc, np_, rule = g.d.choice(_REDUCTIONS)
    axis, axes = _axes_arg(g, len(x.shape))
    if len(x.shape) > 1 and g.d.int(0, 2) == 0:       # leading axes (ort-cpu sums them as a product)
        axes = tuple(range(g.d.int(1, len(x.shape) - 1)))
        axis = axes
    keep = g.d.bool()
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    n = numel([x.shape[a] for a in axes])
    mag = {"sum": x.mag * n, "same": x.mag, "prod": 1.3 ** n, "lse": x.mag + math.log(n), "square": x.mag ** 2,
           "norm": x.mag * math.sqrt(n)}[rule]
    return g.add(label, gc.format(x=x.name, axis=axis, k=keep), np_.format(x=x.name, axis=axis, k=keep), shape, mag,
                 [x])


def gen_order(g: Gen, x: Value):
    """Scans, sorts, topk and median along one axis, and the activations that take one (softmin,
    glu, prelu's channel axis)."""
    r = len(x.shape)
    if not r:
        return None
    a = g.d.int(0, r - 1)
    ax, n = _fmt_axis(g.d, a, r), x.shape[a]
    kind = g.d.int(0, 8)
    static = isinstance(n, int)
    count = numel((n,))
    if kind <= 1:
        rev, ex = g.d.bool(), g.d.bool()
        opts = f"reverse={rev}, exclusive={ex}"
        if kind == 0:
            return g.add("cumsum", f"F.cumsum({x.name}, {ax}, {opts})", f"N.scan('sum', {x.name}, {ax}, {opts})",
                         x.shape, x.mag * count, [x])
        v = f"(1 + 0.3 * {{}}.tanh({x.name}))"
        return g.add("cumprod+tanh", f"F.cumprod({v.format('F')}, {ax}, {opts})",
                     f"N.scan('prod', {v.format('np')}, {ax}, {opts})", x.shape, 1.3 ** count, [x])
    if kind == 2 and static:
        return g.add("logcumsumexp+logaddexp", f"F.logcumsumexp({x.name}, {ax})", f"N.logcumsumexp({x.name}, {ax})",
                     x.shape, x.mag + math.log(count), [x])
    if kind == 3:
        d = g.d.bool()
        return g.add("topk", f"F.sort({x.name}, {ax}, descending={d})", f"N.sort({x.name}, {ax}, descending={d})",
                     x.shape, x.mag, [x])
    if kind == 4 and static and n:
        k, largest = g.d.int(1, n), g.d.bool()
        return g.add("topk", f"F.topk({x.name}, {k}, {ax}, largest={largest})[0]",
                     f"N.topk({x.name}, {k}, {ax}, largest={largest})", x.shape[:a] + (k,) + x.shape[a + 1:], x.mag,
                     [x])
    if kind == 5 and (n != 0):
        keep, whole = g.d.bool(), g.d.bool()
        axis = None if whole else ax
        shape = ((1,) * r if keep else ()) if whole else (x.shape[:a] + ((1,) if keep else ()) + x.shape[a + 1:])
        return g.add("topk+median", f"F.median({x.name}, {axis}, keepdims={keep})",
                     f"N.median({x.name}, {axis}, keepdims={keep})", shape, x.mag, [x])
    if kind == 6:
        return g.add("softmax+neg", f"F.softmin({x.name}, {ax})", f"N.softmax(-{x.name}, {ax})", x.shape, 1, [x])
    if kind == 7 and static and n and n % 2 == 0:
        h = n // 2
        first, second = (f"np.take({x.name}, np.arange({lo}, {lo + h}), {ax})" for lo in (0, h))
        return g.add("slice+sigmoid+mul", f"F.glu({x.name}, {ax})", f"{first} * N.sigmoid({second})",
                     x.shape[:a] + (h,) + x.shape[a + 1:], x.mag, [x])
    if kind == 8 and r >= 2 and isinstance(x.shape[1], int):
        w = g.new_input((x.shape[1],), scale=0.2, offset=0.3)
        wb = f"{w.name}.reshape({(x.shape[1],) + (1,) * (r - 2)})"
        return g.add("where+greater+mul", f"F.prelu({x.name}, {w.name})", f"np.where(N.greater({x.name}, 0), "
                     f"{x.name}, {wb} * {x.name})", x.shape, x.mag, [x, w])
    return None


def gen_matmul(g: Gen, x: Value):
    if not x.shape or isinstance(x.shape[-1], Sym) and x.shape[-1].k != 1:
        return None
    k = x.shape[-1]
    kind = g.d.int(0, 3)
    if kind == 3 and len(x.shape) >= 2 and isinstance(x.shape[-2], int):     # w @ x
        w = g.new_input((g.d.int(1, 4), x.shape[-2]), scale=0.7)
        shape = x.shape[:-2] + (w.shape[0], x.shape[-1])
        mag = x.mag * 2 * math.sqrt(x.shape[-2])
        if not _fits(shape):
            return None
        return g.add("matmul", f"{w.name} @ {x.name}", f"{w.name} @ {x.name}", shape, mag, [w, x])
    if kind == 2 and len(x.shape) >= 2:                                      # batched, broadcasting
        lead = tuple(1 if g.d.bool() else d for d in x.shape[:-2])
        y = g.input_like(lead[g.d.int(0, len(lead)):] + (k, g.d.int(1, 3)), scale=0.7)
        shape = broadcast(x.shape[:-2], y.shape[:-2]) + (x.shape[-2], y.shape[-1])
        gc = f"F.matmul({x.name}, {y.name})" if g.d.bool() else f"{x.name} @ {y.name}"
        return g.add("matmul", gc, f"np.matmul({x.name}, {y.name})", shape, x.mag * 2 * math.sqrt(numel((k,))),
                     [x, y]) if _fits(shape) else None
    if kind == 1 and g.d.bool():                                             # numpy's dot: a tensor product
        y = g.new_input(g.d.choice(((k,), (k, 2), (2, k, 3))), scale=0.7)
        shape = x.shape[:-1] + y.shape[:-2] + y.shape[-1:] if len(y.shape) > 1 else x.shape[:-1]
        return g.add("matmul+numpy_dispatch", f"np.dot({x.name}, {y.name})", f"np.dot({x.name}, {y.name})", shape,
                     x.mag * 2 * math.sqrt(numel((k,))), [x, y]) if _fits(shape) else None
    n = g.d.choice((None, 2, 3, 1))
    w = g.new_input((k,) if n is None else (k, n), scale=0.7)
    shape = x.shape[:-1] + (() if n is None else (n,))
    if len(x.shape) == 1 and n is None:
        shape = ()
    mag = x.mag * 2 * math.sqrt(numel((k,)))
    if kind == 1 and n is not None:
        b = g.new_input((n,), scale=0.5)
        return g.add("matmul+add+linear", f"F.linear({x.name}, {w.name}, {b.name})",
                     f"{x.name} @ {w.name} + {b.name}", shape, mag + 1.5, [x, w, b])
    return g.add("matmul", f"{x.name} @ {w.name}", f"{x.name} @ {w.name}", shape, mag, [x, w])


def gen_const(g: Gen, x: Value):
    """x combined with a constant array (in the program's float dtype) that gcompile ops transform:
    exercises constant lifting and folding."""
    shape = tuple(d if isinstance(d, int) and g.d.bool() else 1 for d in x.shape)[g.d.int(0, len(x.shape)):]
    values = np.round(np.random.default_rng(g.d.int(0, 999)).standard_normal(shape), 2)
    typed = next(v for v in g.values if v.name == g.program.inputs[0].name)   # a float input: its dtype
    const = f"np.array({values.tolist()!r}, dtype={typed.name}.dtype)"
    label, gc, np_, _ = g.d.choice([u for u in _UNARY if not u[1].startswith("{x}.")])  # no Tensor methods
    combine = g.d.choice(("{x} * {c}", "{c} - {x}", "F.maximum({x}, {c})", "F.where({c} > 0, {x}, -{x})"))
    gc_const, np_const = gc.format(x=const), np_.format(x=const)
    label = label + ("+mul" if "*" in combine else "+sub" if "-" in combine else "+maximum")
    if "maximum" in combine:
        combine_np = "N.maximum({x}, {c})"
    elif "where" in combine:
        combine_np, label = "np.where(N.greater({c}, 0), {x}, -{x})", label + "+where+greater"
    else:
        combine_np = combine
    return g.add(label, combine.format(x=x.name, c=gc_const), combine_np.format(x=x.name, c=np_const), x.shape,
                 x.mag * 3, [x, typed])


_LETTERS = "abcdefg"


def gen_einsum(g: Gen, x: Value):
    r = len(x.shape)
    xs = _LETTERS[:r]
    if r >= 2 and isinstance(x.shape[-1], int) and g.d.int(0, 3) == 0:     # '...' over the leading axes
        w = g.new_input((x.shape[-1], g.d.int(1, 3)), scale=0.7)
        shape = x.shape[:-1] + w.shape[1:]
        return g.add("einsum", f"F.einsum('...a,az->...z', {x.name}, {w.name})",
                     f"np.einsum('...a,az->...z', {x.name}, {w.name})", shape, x.mag * 2 * x.shape[-1], [x, w])
    if any(isinstance(d, Sym) and d.k != 1 for d in x.shape) or r == 0:
        return None
    sizes = dict(zip(xs, x.shape))
    ys = "".join(c for c in xs if g.d.bool())
    if g.d.bool():
        ys += "z"
        sizes["z"] = g.d.int(2, 3)
    ys = "".join(g.d.choice([ys, ys[::-1]]))
    letters = list(dict.fromkeys(xs + ys))
    out = [c for c in letters if g.d.bool()]
    if g.d.bool():
        out = out[::-1]
    shape = tuple(sizes[c] for c in out)
    if not _fits(shape):
        return None
    if not ys:
        eq = f"{xs}->{''.join(out)}"
        return g.add("einsum", f"F.einsum('{eq}', {x.name})", f"np.einsum('{eq}', {x.name})", shape,
                     x.mag * numel([sizes[c] for c in xs if c not in out]), [x])
    y = g.new_input(tuple(sizes[c] for c in ys), scale=0.7)
    eq = f"{xs},{ys}->{''.join(out)}"
    contracted = numel([sizes[c] for c in letters if c not in out])
    return g.add("einsum", f"F.einsum('{eq}', {x.name}, {y.name})", f"np.einsum('{eq}', {x.name}, {y.name})",
                 shape, x.mag * 2 * contracted, [x, y])


def _factorisations(n: int, d: Draw) -> list[int]:
    """n as a random product of 1-3 factors."""
    factors = []
    p = 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    parts = [1] * d.int(1, 3)
    for f in factors:
        parts[d.int(0, len(parts) - 1)] *= f
    return parts


def gen_reshape(g: Gen, x: Value):
    static = numel([d for d in x.shape if isinstance(d, int)])
    sym = [d for d in x.shape if isinstance(d, Sym)]
    kind = g.d.int(0, 4)
    if kind == 0 and x.shape:                                            # transpose
        perm = list(range(len(x.shape)))
        random.Random(g.d.int(0, 99)).shuffle(perm)
        shape = tuple(x.shape[p] for p in perm)
        text = g.d.choice([f"F.transpose({x.name}, {tuple(perm)})", f"{x.name}.transpose({tuple(perm)})"])
        return g.add("transpose", text, f"np.transpose({x.name}, {tuple(perm)})", shape, x.mag, [x])
    if kind == 1 and len(x.shape) >= 2:
        if g.d.bool():
            return g.add("transpose", f"{x.name}.T", f"{x.name}.T", x.shape[::-1], x.mag, [x])
        a, b = g.d.int(0, len(x.shape) - 1), g.d.int(-len(x.shape), -1)
        shape = list(x.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return g.add("transpose", f"F.swapaxes({x.name}, {a}, {b})", f"np.swapaxes({x.name}, {a}, {b})", shape,
                     x.mag, [x])
    if kind == 2 and x.shape:                                            # flatten / ravel
        if g.d.bool():
            start = g.d.int(0, len(x.shape) - 1)
            shape = x.shape[:start] + (_product(x.shape[start:]),)
            return g.add("reshape", f"F.flatten({x.name}, {start})",
                         f"{x.name}.reshape({x.name}.shape[:{start}] + (-1,))", shape, x.mag, [x])
        return g.add("reshape", f"F.ravel({x.name})", f"np.ravel({x.name})", (_product(x.shape),), x.mag, [x])
    parts = _factorisations(static, g.d)
    if sym:
        parts.insert(g.d.int(0, len(parts)), -1)
    elif g.d.bool():
        parts[g.d.int(0, len(parts) - 1)] = -1
    target = tuple(parts)
    if len(target) > MAX_RANK:
        return None
    rest = _product(sym + ([static // math.prod(p for p in parts if p != -1)] if -1 in parts else []))
    shape = tuple(rest if p == -1 else p for p in parts)
    text = g.d.choice([f"F.reshape({x.name}, {target})", f"{x.name}.reshape({target})"])
    return g.add("reshape", text, f"np.reshape({x.name}, {target})", shape, x.mag, [x])


def _product(dims) -> object:
    k, syms = 1, 0
    for d in dims:
        if isinstance(d, Sym):
            k, syms = k * d.k, syms + 1
        else:
            k *= d
    return Sym(k) if syms == 1 else k


def gen_dims(g: Gen, x: Value):
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    kind = g.d.int(0, 2)
    if kind == 0 and len(x.shape) < MAX_RANK:
        a = g.d.int(-len(x.shape) - 1, len(x.shape))
        shape = list(x.shape)
        shape.insert(a % (len(x.shape) + 1), 1)
        return g.add("reshape", f"F.expand_dims({x.name}, {a})", f"np.expand_dims({x.name}, {a})", shape, x.mag, [x])
    if kind == 1 and ones:
        axes = tuple(a for a in ones if g.d.bool()) or None
        shape = tuple(d for i, d in enumerate(x.shape) if i not in (ones if axes is None else axes))
        return g.add("reshape", f"F.squeeze({x.name}, {axes})", f"np.squeeze({x.name}, {axes})", shape, x.mag, [x])
    target = [d if d != 1 or g.d.bool() else g.d.int(2, 3) for d in x.shape]
    if len(target) < MAX_RANK and g.d.bool():
        target.insert(0, g.d.int(2, 3))
    target = tuple(target)
    if target == x.shape or not _fits(target):
        return None
    lead = len(target) - len(x.shape)
    text = "(" + "".join(f"{x.name}.shape[{i - lead}], " if isinstance(d, Sym) else f"{d}, "
                         for i, d in enumerate(target)) + ")"
    return g.add("expand", f"F.broadcast_to({x.name}, {text})", f"np.broadcast_to({x.name}, {text})", target, x.mag,
                 [x])


def _index_shape(shape, index_text: str) -> tuple:
    proxy = np.empty(concrete_shape(shape, _PROXY), np.int8)
    return _from_proxy(eval(f"proxy[{index_text}]", {"proxy": proxy}).shape)


def gen_getitem(g: Gen, x: Value):
    if not x.shape:
        return None
    items, array_used = [], False
    for d in x.shape:
        kind = g.d.int(0, 4) if isinstance(d, int) else 0
        if kind == 0:
            items.append(":")
        elif kind == 1:
            items.append(str(g.d.int(-d, d - 1)))
        elif kind == 2 or (kind == 4 and array_used):
            start = g.d.choice(("", "1", "-2", "0"))
            stop = g.d.choice(("", "-1", "3", "2"))
            step = g.d.choice(("", "2", "-1", "-2"))
            items.append(f"{start}:{stop}" + (f":{step}" if step else ""))
        elif kind == 3:
            items.append("None")
            items.append(":")
        else:
            array_used = True
            items.append(str([g.d.int(-d, d - 1) for _ in range(g.d.int(1, 3))]))
    if g.d.bool() and items[-1] == ":":
        items[-1] = "..."
    text = ", ".join(items)
    shape = _index_shape(x.shape, text)
    if 0 in shape or not _fits(shape):
        return None
    return g.add("getitem", f"{x.name}[{text}]", f"{x.name}[{text}]", shape, x.mag, [x])


def _indices(g: Gen, size: int, shape) -> str:
    return str(np.asarray([g.d.int(-size, size - 1) for _ in range(math.prod(shape))]).reshape(shape).tolist())


def gen_take(g: Gen, x: Value):
    axes = g.static_axes(x.shape)
    if not axes:
        return None
    a = g.d.choice(axes)
    size = x.shape[a]
    kind = g.d.int(0, 4)
    if kind == 1 and g.d.bool():                                        # indices computed at run time
        idx = g.new_input(g.d.choice(((2,), (Sym(1),), (3, 1))), kind="labels", classes=size)
        shape = x.shape[:a] + idx.shape + x.shape[a + 1:]
        if not _fits(shape):
            return None
        return g.add("gather", f"F.take({x.name}, {idx.name}, axis={a})", f"np.take({x.name}, {idx.name}, axis={a})",
                     shape, x.mag, [x, idx])
    if kind == 0 or kind == 1:
        idx_shape = g.d.choice(((2,), (3,), (2, 2), ()))
        idx = _indices(g, size, idx_shape)
        shape = x.shape[:a] + tuple(idx_shape) + x.shape[a + 1:]
        ax = _fmt_axis(g.d, a, len(x.shape))
        if kind == 1 and len(x.shape) == 2 and a == 0:
            return g.add("gather", f"F.embedding(np.array({idx}), {x.name})", f"{x.name}[np.array({idx})]", shape,
                         x.mag, [x]) if _fits(shape) else None
        return g.add("gather", f"F.take({x.name}, np.array({idx}), axis={ax})",
                     f"np.take({x.name}, np.array({idx}), axis={ax})", shape, x.mag, [x]) if _fits(shape) else None
    if kind == 2:                                                       # take_along_axis
        idx_shape = tuple(g.d.int(1, 3) if i == a else (d if isinstance(d, int) and g.d.bool() else 1)
                          for i, d in enumerate(x.shape))
        idx = _indices(g, size, idx_shape)
        shape = tuple(idx_shape[i] if i == a else (d if idx_shape[i] == 1 else idx_shape[i])
                      for i, d in enumerate(x.shape))
        axis_text = _fmt_axis(g.d, a, len(x.shape))
        return g.add("gather_elements", f"F.take_along_axis({x.name}, np.array({idx}), {axis_text})",
                     f"N.take_along_axis({x.name}, np.array({idx}), {a})", shape, x.mag, [x]) if _fits(shape) else None
    if kind == 3:                                                       # scatter_add
        if any(isinstance(d, Sym) and d.k != 1 for d in x.shape):
            return None
        idx_shape = g.d.choice(((2,), (3,), (2, 2)))
        idx = _indices(g, size, idx_shape)
        u = g.input_like(x.shape[:a] + idx_shape + x.shape[a + 1:])
        if not _fits(u.shape):
            return None
        return g.add("scatter_add", f"F.scatter_add({x.name}, np.array({idx}), {u.name}, axis={a})",
                     f"N.scatter_add({x.name}, np.array({idx}), {u.name}, {a})", x.shape, x.mag + 9, [x, u])
    if not is_static(x.shape):
        return None
    idx_shape = tuple(g.d.int(1, 3) if i == a else d for i, d in enumerate(x.shape))
    if not _fits(idx_shape):
        return None
    idx = _indices(g, size, idx_shape)
    u = g.new_input(idx_shape)
    return g.add("scatter_add_elements", f"F.scatter_add_along_axis({x.name}, np.array({idx}), {u.name}, {a})",
                 f"N.scatter_add_along_axis({x.name}, np.array({idx}), {u.name}, {a})", x.shape, x.mag + 9, [x, u])


def gen_join(g: Gen, x: Value):
    kind = g.d.int(0, 2)
    if kind == 0:                                                        # concat
        axes = g.static_axes(x.shape)
        if not axes:
            return None
        a = g.d.choice(axes)
        others = []
        for _ in range(g.d.int(1, 2)):
            shape = x.shape[:a] + (g.d.int(1, 3),) + x.shape[a + 1:]
            others.append(g.pick(lambda v, s=shape: v.shape == s and v is not x) or g.input_like(shape))
        if any(n_symbolic(o.shape) != n_symbolic(x.shape) for o in others):
            return None
        shape = x.shape[:a] + (sum(v.shape[a] for v in [x] + others),) + x.shape[a + 1:]
        names = ", ".join(v.name for v in [x] + others)
        ax = _fmt_axis(g.d, a, len(x.shape))
        return g.add("concat", f"F.concat([{names}], axis={ax})", f"np.concatenate([{names}], axis={ax})", shape,
                     max(v.mag for v in [x] + others), [x] + others) if _fits(shape) else None
    if kind == 1:                                                        # stack
        y = g.pick(lambda v: v.shape == x.shape and v is not x)
        if y is None:
            if any(isinstance(d, Sym) and d.k != 1 for d in x.shape):
                return None
            y = g.new_input(x.shape)
        a = g.d.int(-len(x.shape) - 1, len(x.shape))
        shape = list(x.shape)
        shape.insert(a % (len(x.shape) + 1), 2)
        return g.add("concat+reshape", f"F.stack([{x.name}, {y.name}], axis={a})",
                     f"np.stack([{x.name}, {y.name}], axis={a})", shape, max(x.mag, y.mag), [x, y]) \
            if _fits(shape) else None
    axes = g.static_axes(x.shape, 2)                                     # split
    if not axes:
        return None
    a = g.d.choice(axes)
    n = x.shape[a]
    divisors = [k for k in range(2, n + 1) if n % k == 0]
    if g.d.bool():
        k = g.d.choice(divisors)
        part = g.d.int(0, k - 1)
        spec, size = str(k), n // k
    else:
        cut = g.d.int(1, n - 1)
        spec, part = f"[{cut}]", g.d.int(0, 1)
        size = cut if part == 0 else n - cut
    shape = x.shape[:a] + (size,) + x.shape[a + 1:]
    call = f"split({x.name}, {spec}, axis={a})[{part}]"
    return g.add("slice", f"F.{call}", f"np.{call}", shape, x.mag, [x])


def gen_pad_tile(g: Gen, x: Value):
    if g.d.bool():
        mode = g.d.choice(("constant", "edge", "reflect"))
        pads = []
        for d in x.shape:
            limit = 0 if not isinstance(d, int) else (d - 1 if mode == "reflect" else 2)
            pads.append((g.d.int(0, min(limit, 2)), g.d.int(0, min(limit, 2))))
        shape = tuple(d if isinstance(d, Sym) else d + a + b for d, (a, b) in zip(x.shape, pads))
        if not _fits(shape) or shape == x.shape:
            return None
        pads = tuple(pads)
        if mode == "constant":
            value = g.d.choice((0.0, 0.5))
            gc = g.d.choice((f"F.pad({x.name}, {pads}, value={value})",
                             f"np.pad({x.name}, {pads}, constant_values={value})"))
            return g.add("pad", gc, f"np.pad({x.name}, {pads}, constant_values={value})", shape, max(x.mag, 1), [x])
        return g.add("pad", f"F.pad({x.name}, {pads}, mode='{mode}')", f"np.pad({x.name}, {pads}, mode='{mode}')",
                     shape, x.mag, [x])
    reps = tuple(g.d.int(1, 3) for _ in range(g.d.int(1, len(x.shape) + 1)))
    full = (1,) * (len(reps) - len(x.shape)) + x.shape
    reps_full = (1,) * (len(full) - len(reps)) + reps
    shape = tuple(_product((r, d)) for r, d in zip(reps_full, full))
    if not _fits(shape):
        return None
    return g.add("expand+reshape", f"F.tile({x.name}, {reps})", f"np.tile({x.name}, {reps})", shape, x.mag, [x])


def gen_nn(g: Gen, x: Value):
    kind = g.d.int(0, 5)
    r = len(x.shape)
    if kind <= 1 and r:
        a = _fmt_axis(g.d, g.d.int(0, r - 1), r)
        fn = ("softmax", "log_softmax")[kind]
        return g.add(fn, f"F.{fn}({x.name}, axis={a})", f"N.{fn}({x.name}, axis={a})", x.shape,
                     1 if kind == 0 else x.mag * 2 + math.log(numel(x.shape)), [x])
    if kind == 2 and r:
        axes = [a for a in range(r) if is_static(x.shape[a:])]
        if not axes:
            return None
        a = g.d.choice(axes)
        gamma = g.new_input(x.shape[a:], scale=0.3, offset=1.0)
        beta = g.new_input(x.shape[a:], scale=0.5)
        eps = g.d.choice((1e-5, 1e-3))
        ax = _fmt_axis(g.d, a, r)
        return g.add("layer_norm", f"F.layer_norm({x.name}, {gamma.name}, {beta.name}, axis={ax}, eps={eps})",
                     f"N.layer_norm({x.name}, {gamma.name}, {beta.name}, axis={ax}, eps={eps})", x.shape,
                     2 * math.sqrt(numel(x.shape[a:])) + 2, [x, gamma, beta])
    if kind == 3 and r >= 2 and isinstance(x.shape[1], int):
        c = x.shape[1]
        gamma = g.new_input((c,), scale=0.3, offset=1.0)
        beta = g.new_input((c,), scale=0.5)
        which = g.d.int(0, 3)
        if which == 3:                                                  # inference: running statistics
            mean, var = g.new_input((c,), scale=0.5), g.new_input((c,), scale=0.2, offset=1.0)
            return g.add("batch_norm+rsqrt", f"F.batch_norm({x.name}, {gamma.name}, {beta.name}, {mean.name}, "
                         f"{var.name}, training=False, eps=0.01)",
                         f"N.batch_norm_eval({x.name}, {gamma.name}, {beta.name}, {mean.name}, {var.name}, 0.01)",
                         x.shape, 2 * x.mag + 3, [x, gamma, beta, mean, var])
        if which == 0:
            return g.add("batch_norm+reduce_mean+rsqrt", f"F.batch_norm({x.name}, {gamma.name}, {beta.name})",
                         f"N.batch_norm({x.name}, {gamma.name}, {beta.name})", x.shape,
                         2 * math.sqrt(numel(x.shape) / c) + 2, [x, gamma, beta])
        return g.add("batch_norm+reduce_mean", f"F.batch_norm({x.name}, {gamma.name}, {beta.name}, "
                     f"return_stats=True)[{which}]", f"N.batch_stats({x.name})[{which - 1}]", (c,),
                     x.mag * x.mag, [x, gamma, beta])
    reduce = g.d.choice(("mean", "sum", "none"))
    if kind == 4:
        y = g.partner(x.shape)
        shape = broadcast(x.shape, y.shape)
        fn = g.d.choice(("mse", "sigmoid_cross_entropy"))
        mag = (x.mag + y.mag) ** 2 if fn == "mse" else x.mag * (1 + y.mag) + 1
        if reduce == "sum":
            mag *= numel(shape)
        t = y.name if fn == "mse" else f"F.sigmoid({y.name})"
        t_np = y.name if fn == "mse" else f"N.sigmoid({y.name})"
        return g.add(fn, f"F.{fn}({x.name}, {t}, reduce='{reduce}')", f"N.{fn}({x.name}, {t_np}, reduce='{reduce}')",
                     () if reduce != "none" else shape, mag, [x, y])
    axes = [a for a in g.static_axes(x.shape, 2)
            if all(d == Sym(1) or isinstance(d, int) for i, d in enumerate(x.shape) if i != a)]
    if not axes:
        return None
    a = g.d.choice(axes)
    labels_shape = x.shape[:a] + x.shape[a + 1:]
    labels = g.new_input(labels_shape, kind="labels", classes=x.shape[a])
    ax = _fmt_axis(g.d, a, r)
    mag = 2 * x.mag + math.log(x.shape[a])
    call = f"softmax_cross_entropy({x.name}, {labels.name}, axis={ax}, reduce='{reduce}')"
    return g.add("softmax_cross_entropy+log_softmax", f"F.{call}", f"N.{call}",
                 labels_shape if reduce == "none" else (), mag * (numel(labels_shape) if reduce == "sum" else 1),
                 [x, labels])


def gen_fill(g: Gen, x: Value):
    """Fills shaped like x (symbolic dims too), add_n and sum_to_shape."""
    kind = g.d.int(0, 2)
    if kind == 0:
        gc, np_ = g.d.choice([("{x} + F.ones_like({x}) * 0.5", "{x} + 0.5"),
                              ("F.zeros_like({x}) - {x}", "-{x}"),
                              ("F.full({x}.shape, 0.25, {x}.dtype) * {x}", "0.25 * {x}")])
        return g.add("fill+mul", gc.format(x=x.name), np_.format(x=x.name), x.shape, x.mag + 1, [x])
    if kind == 1:
        others, shape = [], x.shape
        for _ in range(g.d.int(1, 2)):
            others.append(g.partner(shape))
            shape = broadcast(shape, others[-1].shape)
        names = [v.name for v in [x] + others]
        return g.add("add_n", f"F.add_n([{', '.join(names)}])", " + ".join(names), shape,
                     sum(v.mag for v in [x] + others), [x] + others) if _fits(shape) else None
    target = list(x.shape[g.d.int(0, len(x.shape)):])
    target = [1 if g.d.bool() else d for d in target]
    lead = len(x.shape) - len(target)
    text = "(" + "".join(f"{x.name}.shape[{i + lead}], " if isinstance(d, Sym) else f"{d}, "
                         for i, d in enumerate(target)) + ")"
    return g.add("sum_to_shape+reduce_sum", f"F.sum_to_shape({x.name}, {text})", f"N.sum_to_shape({x.name}, {text})",
                 target, x.mag * numel(x.shape) / max(1, numel(target)), [x])


_INT_EXPRESSIONS = [  # on an int64 tensor t of values in [0, 4); the result's shape from t's
    ("mul+sub", "{t} * 2 - 3", "{t} * 2 - 3", lambda s: s),
    ("maximum+sub", "F.maximum({t} - 2, -1)", "np.maximum({t} - 2, -1)", lambda s: s),
    ("abs+sub", "F.abs({t} - 2)", "np.abs({t} - 2)", lambda s: s),
    ("neg+add", "-{t} + 1", "-{t} + 1", lambda s: s),
    ("div", "F.divide({t}, 2)", "{t} / 2", lambda s: s),
    ("where+greater", "F.where({t} > 1, {t}, 0)", "np.where({t} > 1, {t}, 0)", lambda s: s),
    ("reduce_sum", "F.sum({t}, axis=-1, keepdims=True)", "np.sum({t}, axis=-1, keepdims=True)",
     lambda s: s[:-1] + (1,)),
    ("reduce_max", "F.max({t}, axis=0, keepdims=True)", "np.max({t}, axis=0, keepdims=True)",
     lambda s: (1,) + s[1:]),
]


def gen_int(g: Gen, x: Value):
    """x times (a cast of) integer arithmetic on a new int64 input broadcasting against x."""
    shape = g.partner(x.shape).shape if g.d.bool() else x.shape
    if not shape or any(isinstance(d, Sym) and d.k != 1 for d in shape):
        return None
    t = g.new_input(shape, kind="labels", classes=4)
    label, gc, np_, result = g.d.choice(_INT_EXPRESSIONS)
    out = broadcast(x.shape, result(shape))
    if out is None or not _fits(out):
        return None
    return g.add(f"{label}+cast+mul", f"{x.name} * F.cast({gc.format(t=t.name)}, {x.name}.dtype)",
                 f"{x.name} * ({np_.format(t=t.name)})", out, x.mag * 6, [x, t])


def gen_while(g: Gen, x: Value):
    """x times (a cast of) a gc.while_loop over int64 carries of a new labels input's shape: each
    step takes one off the positive counts and adds them up (a triangular number, 0 to 6, per
    element), as long as any count is left, so the trip count (0 to 3) is the data's. Integer
    carries keep the float32 and float64 runs on the same trip; x's gradient flows through the
    product only (the loop is forward-only)."""
    shape = g.partner(x.shape).shape if g.d.bool() else x.shape
    if not shape or any(isinstance(d, Sym) and d.k != 1 for d in shape):
        return None
    t = g.new_input(shape, kind="labels", classes=4)
    out = broadcast(x.shape, shape)
    if out is None or not _fits(out):
        return None
    body = "lambda c: (c[0] - F.cast(c[0] > 0, np.int64), c[1] + c[0])"
    return g.add("while+greater+cast+sub+add+reduce_max+mul",
                 f"{x.name} * F.cast(gc.while_loop(lambda c: F.any(c[0] > 0), {body}, ({t.name}, {t.name} * 0))[1], "
                 f"{x.name}.dtype)",
                 f"{x.name} * N.while_loop(lambda c: np.any(c[0] > 0), lambda c: (c[0] - (c[0] > 0), c[1] + c[0]), "
                 f"({t.name}, {t.name} * 0))[1]", out, x.mag * 6, [x, t])


# -- differentiable control flow: gc.while_loop and gc.cond over float values --------------------------------
def _closed_over(g: Gen, shape) -> Value:
    """A value a loop body or branch reads from the enclosing function (so it gets a gradient
    there): an earlier value or a new input, broadcasting against `shape` without changing it."""
    if g.d.bool():
        found = g.pick(lambda v: broadcast(v.shape, shape) == tuple(shape))
        if found is not None:
            return found
    dims = [1 if g.d.int(0, 2) == 0 else d for d in shape]
    if dims and g.d.bool():
        dims = dims[g.d.int(0, len(dims)):]
    return g.input_like(dims, scale=0.5)


# Loop bodies and branches draw no random op: check_grad cannot compare ONNX Runtime's draws with the
# reference evaluator's, and reverse mode refuses draws in a gc.cond branch or a checkpointed step.
_BODY_UNARY = [u for u in _UNARY if "training=True" not in u[1]]


def _term(g: Gen, shape, h: str, h_mag: float, reads: list, labels: list, bound: float = 2.0):
    """An expression in the loop-local `h` (a name; the value has `shape`) of one or two ops drawn
    from the unary and binary tables, partners closed over (appended to `reads`, their labels to
    `labels`), squashed by tanh where its magnitude bound passes `bound`: (gcompile, numpy, bound)."""
    gc, np_, mag = h, h, h_mag
    for _ in range(g.d.int(1, 2)):
        if g.d.int(0, 2):
            label, t_gc, t_np, rule = g.d.choice(_BODY_UNARY)
            gc, np_, mag = t_gc.format(x=f"({gc})"), t_np.format(x=f"({np_})"), rule(mag)
        else:
            label, t_gc, t_np, rule = g.d.choice(_BINARY)
            p = _closed_over(g, shape)
            reads.append(p)
            a, b = (f"({gc})", f"({np_})", mag), (p.name, p.name, p.mag)
            if g.d.bool():
                a, b = b, a
            gc, np_, mag = t_gc.format(a=a[0], b=b[0]), t_np.format(a=a[1], b=b[1]), rule(a[2], b[2])
        labels.append(label)
    if mag > bound:
        c = float(f"{bound / mag:.2g}")
        gc, np_, mag = f"F.tanh(({gc}) * {c})", f"np.tanh(({np_}) * {c})", 1.0
        labels.append("tanh")
    return gc, np_, mag


def _branches(g: Gen, shape, h: str, h_mag: float, reads: list, labels: list):
    """gc.cond(pred, a, b, h) with pred a comparison of a statistic of h (a jump the numpy side
    records) and branches drawn by _term: (gcompile, numpy, bound)."""
    q = g.d.choice((0.0, 0.3, -0.3))
    if g.d.bool():
        stat_gc, stat_np = g.d.choice((f"F.mean({h})", f"{h}.mean()")), f"np.mean({h})"
    else:
        a = _closed_over(g, shape)
        reads.append(a)
        stat_gc, stat_np = f"F.sum({h} * {a.name})", f"np.sum({h} * {a.name})"
    t_gc, t_np, t_mag = _term(g, shape, "z", h_mag, reads, labels)
    f_gc, f_np, f_mag = ("z", "z", h_mag) if g.d.int(0, 3) == 0 else _term(g, shape, "z", h_mag, reads, labels)
    labels += ["cond", "greater"]
    return (f"gc.cond({stat_gc} > {q}, lambda z: {t_gc}, lambda z: {f_gc}, {h})",
            f"N.cond(N.greater({stat_np}, {q}), lambda z: {t_np}, lambda z: {f_np}, {h})", max(t_mag, f_mag))


_LOOP_STATS = [  # a statistic of the carry {h} (and a closed-over {a}) the loop's condition compares, thresholds
    ("F.mean(F.square({h}))", "np.mean(np.square({h}))", (1.0, 0.5, 2.0), "reduce_mean+square"),
    ("F.max(F.abs({h}))", "np.max(np.abs({h}))", (1.5, 1.0, 2.5), "reduce_max+abs"),
    ("F.mean({h})", "np.mean({h})", (0.0, 0.3, -0.3), "reduce_mean"),
    ("F.sum({h} * {a})", "np.sum({h} * {a})", (0.0, 1.0, -1.0), "reduce_sum+mul"),
]


def gen_loop(g: Gen, x: Value):
    """A differentiable gc.while_loop whose carry starts at x and whose number of steps the data
    decides, bounded so that it ends: the body updates the carry with an expression drawn from the
    unary and binary tables (sometimes through a gc.cond) reading closed-over values of the
    enclosing function; optionally checkpoint_every=k. Three forms:
      counted      (h, k): h <- rho h + sigma u(h) while k < K and a statistic of h, drifting by 0.4 k
                   towards a threshold, has not reached it (K = 0 too: no step);
      contraction  h: h <- h (0.3 + 0.4 sigmoid(u(h))) while max |h| > tol (each step takes |h| to
                   0.7 of itself at most; a bare Tensor carry, no counter);
      budget       (h, t), t = tanh(mean x): h as counted, t <- t + 0.25 + mean(sigmoid(h)) / 2 while
                   t < L <= 1.5 (at most 10 steps); the result is h or t.
    The numpy side runs the same loop in float64 (N.while_loop) and records its number of steps,
    and each comparison's margin: the checks compare gradients only where the difference's
    points take as many steps as x."""
    kind = g.d.int(0, 2)
    reads: list[Value] = [x]
    labels = ["while"]
    every = g.d.choice((None, 2, None, 1, 3))
    extra = f", checkpoint_every={every}" if every else ""
    if kind == 1:
        tol = g.d.choice((1.0, 0.5, 1.5))
        u_gc, u_np, _ = _term(g, x.shape, "h", x.mag, reads, labels, bound=math.inf) if g.d.int(0, 3) else \
            _branches(g, x.shape, "h", x.mag, reads, labels)
        labels += ["reduce_max", "abs", "greater", "sigmoid", "mul"]
        return g.add("+".join(dict.fromkeys(labels)),
                     f"gc.while_loop(lambda h: F.max(F.abs(h)) > {tol}, lambda h: h * (0.3 + 0.4 * F.sigmoid({u_gc})), "
                     f"{x.name}{extra})",
                     f"N.while_loop(lambda h: N.greater(np.max(np.abs(h)), {tol}), "
                     f"lambda h: h * (0.3 + 0.4 * N.sigmoid({u_np})), {x.name})", x.shape, x.mag, reads)
    rho, sigma = g.d.choice(((1.0, 0.5), (0.5, 1.0), (0.8, 0.5)))
    steps = g.d.choice((3, 2, 4, 1, 0)) if kind == 0 else 10
    mag = x.mag + 2 * sigma * steps if rho == 1.0 else max(x.mag, 2 * sigma / (1 - rho))
    u_gc, u_np, _ = _term(g, x.shape, "c[0]", mag, reads, labels) if g.d.int(0, 3) else \
        _branches(g, x.shape, "c[0]", mag, reads, labels)
    h_gc, h_np = f"{rho} * c[0] + {sigma} * ({u_gc})", f"{rho} * c[0] + {sigma} * ({u_np})"
    labels += ["mul", "add"]
    if kind == 0:
        stat_gc, stat_np, limits, label = g.d.choice(_LOOP_STATS)
        if "{a}" in stat_gc:
            a = _closed_over(g, x.shape)
            reads.append(a)
            stat_gc, stat_np = stat_gc.replace("{a}", a.name), stat_np.replace("{a}", a.name)
        limit, below = g.d.choice(limits), g.d.bool()
        labels += label.split("+") + ["cast", "less" if below else "greater", "logical_and"]
        # the statistic drifts towards the limit by 0.4 a step: where it starts decides the count
        drift = "+" if below else "-"
        stat_gc = f"{stat_gc.format(h='c[0]')} {drift} F.cast(c[1], c[0].dtype) * 0.4"
        stat_np = f"{stat_np.format(h='c[0]')} {drift} c[1] * 0.4"
        compare = f"{stat_gc} {'<' if below else '>'} {limit}"
        return g.add("+".join(dict.fromkeys(labels)),
                     f"gc.while_loop(lambda c: (c[1] < {steps}) & ({compare}), lambda c: ({h_gc}, c[1] + 1), "
                     f"({x.name}, np.int64(0)){extra})[0]",
                     f"N.while_loop(lambda c: c[1] < {steps} and N.{'less' if below else 'greater'}({stat_np}, "
                     f"{limit}), lambda c: ({h_np}, c[1] + 1), ({x.name}, 0))[0]", x.shape, mag, reads)
    limit, out = g.d.choice((1.0, 0.0, 1.5)), g.d.int(0, 1)
    labels += ["tanh", "reduce_mean", "sigmoid", "less"]
    return g.add("+".join(dict.fromkeys(labels)),
                 f"gc.while_loop(lambda c: c[1] < {limit}, lambda c: ({h_gc}, c[1] + 0.25 + "
                 f"F.mean(F.sigmoid(c[0])) / 2), ({x.name}, F.tanh(F.mean({x.name}))){extra})[{out}]",
                 f"N.while_loop(lambda c: N.less(c[1], {limit}), lambda c: ({h_np}, c[1] + 0.25 + "
                 f"np.mean(N.sigmoid(c[0])) / 2), ({x.name}, np.tanh(np.mean({x.name}))))[{out}]",
                 x.shape if out == 0 else (), mag if out == 0 else limit + 0.75, reads)


def gen_cond(g: Gen, x: Value):
    """gc.cond on x: a predicate from x's data (and a closed-over value), branches drawn from the
    unary and binary tables; the numpy side runs the branch taken (N.cond records which)."""
    reads: list[Value] = [x]
    labels = ["cond"]
    gc, np_, mag = _branches(g, x.shape, x.name, x.mag, reads, labels)
    return g.add("+".join(dict.fromkeys(labels)), gc, np_, x.shape, mag, reads)


def gen_recurrent(g: Gen, x: Value):
    """An LSTM or GRU cell on a (N, I) value, or one layer over a (T, N, I) value."""
    if len(x.shape) not in (2, 3) or not is_static(x.shape[:-2] + x.shape[-1:]) or \
            isinstance(x.shape[-2], Sym) and x.shape[-2].k != 1:
        return None
    n, i, hidden = x.shape[-2], x.shape[-1], g.d.int(1, 3)
    lstm = g.d.bool()
    gates = 4 if lstm else 3
    scale = 1 / math.sqrt(i + hidden)
    h = g.new_input(((1,) if len(x.shape) == 3 else ()) + (n, hidden), scale=0.5)
    c = g.new_input(h.shape, scale=0.5) if lstm else None
    w_ih, w_hh = g.new_input((gates * hidden, i), scale=scale), g.new_input((gates * hidden, hidden), scale=scale)
    b_ih, b_hh = g.new_input((gates * hidden,), scale=0.3), g.new_input((gates * hidden,), scale=0.3)
    weights = f"{w_ih.name}, {w_hh.name}, {b_ih.name}, {b_hh.name}"
    state = f"{h.name}, {c.name}" if lstm else h.name
    fn = "lstm" if lstm else "gru"
    args = [v for v in (x, h, c, w_ih, w_hh, b_ih, b_hh) if v is not None]
    if len(x.shape) == 2:
        pick = "[0]" if lstm else ""
        return g.add(f"{fn}_cell+matmul+sigmoid+tanh+slice", f"F.{fn}_cell({x.name}, {state}, {weights}){pick}",
                     f"N.{fn}_cell({x.name}, {state}, {weights}){pick}", (n, hidden), 1.0, args)
    out = g.d.int(0, 1)
    shape = x.shape[:2] + (hidden,) if out == 0 else h.shape
    return g.add(f"{fn}+matmul+sigmoid+tanh+slice+concat", f"F.{fn}({x.name}, {state}, [({weights})])[{out}]",
                 f"N.{fn}({x.name}, {state}, {weights})[{out}]", shape, 1.0, args)


_SCAN_BODIES = [  # (new carry, y) in c (the carry), t (the step's slice) and {a}, {w} (closed over)
    ("F.tanh(c * {a} + t)", "np.tanh(c * {a} + t)", "F.tanh(c * {a} + t) * t", "np.tanh(c * {a} + t) * t"),
    ("c * F.sigmoid(t) + {a} * t", "c * N.sigmoid(t) + {a} * t", "F.square(c) - t", "np.square(c) - t"),
    ("F.tanh(c @ {w} + t)", "np.tanh(c @ {w} + t)", "F.sin(c @ {w}) + t", "np.sin(c @ {w}) + t"),
]


def gen_scan(g: Gen, x: Value):
    """gc.scan over axis 0 of a value (a symbolic axis too): a carry of one slice's shape updated by
    a small recurrence that reads operands of the enclosing function; the final carry or the
    stacked per-step outputs, forward or reversed."""
    if not 1 <= len(x.shape) <= 3 or not is_static(x.shape[1:]) or isinstance(x.shape[0], Sym) and x.shape[0].k != 1:
        return None
    step = x.shape[1:]
    kind = g.d.int(0, 2 if len(step) == 2 and step[1] > 1 else 1)
    init, a = g.new_input(step, scale=0.5), g.new_input(step, scale=0.5)
    w = g.new_input((step[-1], step[-1]), scale=0.7 / math.sqrt(step[-1])) if kind == 2 else None
    names = {"a": a.name, "w": w.name if w else ""}
    carry_gc, carry_np, y_gc, y_np = (text.format(**names) for text in _SCAN_BODIES[kind])
    reverse, out = g.d.bool(), g.d.int(0, 1)
    steps = concrete(x.shape[0], 3)     # the batch is 2 or 3 in the checks
    mag = (1.0 if kind != 1 else 0.5 + steps * 0.5 * x.mag) if out == 0 else \
        (x.mag if kind == 0 else (0.5 + steps * 0.5 * x.mag) ** 2 + x.mag if kind == 1 else 1.0 + x.mag)
    return g.add("scan+tanh+sigmoid+mul+add", f"gc.scan(lambda c, t: ({carry_gc}, {y_gc}), {init.name}, {x.name}, "
                 f"reverse={reverse})[{out}]", f"N.scan_loop(lambda c, t: ({carry_np}, {y_np}), {init.name}, {x.name}, "
                 f"reverse={reverse})[{out}]", step if out == 0 else x.shape, mag,
                 [v for v in (x, init, a, w) if v is not None])


def gen_conv(g: Gen, x: Value):
    if len(x.shape) not in (3, 4) or not is_static(x.shape[1:]):
        return None
    n, c, spatial = len(x.shape) - 2, x.shape[1], x.shape[2:]
    kind = g.d.int(0, 4)
    if kind == 4:
        axes = tuple(range(2, 2 + n))
        return g.add("reduce_mean", f"F.global_avg_pool({x.name})", f"np.mean({x.name}, axis={axes}, keepdims=True)",
                     x.shape[:2] + (1,) * n, x.mag, [x])
    stride = tuple(g.d.int(1, 2) for _ in spatial)
    if kind >= 2:                                                       # pooling: pad < kernel
        kernel = tuple(g.d.int(1, min(3, s + 1)) for s in spatial)
        pad = tuple((g.d.int(0, k - 1), g.d.int(0, k - 1)) for k in kernel)
        out = tuple((s + p0 + p1 - k) // st + 1 for s, k, st, (p0, p1) in zip(spatial, kernel, stride, pad))
        if min(out) < 1:
            return None
        shape = x.shape[:2] + out
        pad_arg = g.d.choice((pad, pad[0][0] if all(p == (pad[0][0],) * 2 for p in pad) else pad))
        if kind == 2:      # of x, of relu(x) as most CNNs pool (simplify masks relu's gradient before the
            # scatter), or of x padded with zeros first (as a model's ZeroPad before a pool)
            form = g.d.int(0, 3)
            src, src_np, label = x.name, x.name, "max_pool"
            if form == 0:
                src, src_np, label = f"F.relu({x.name})", f"N.relu({x.name})", "max_pool+relu"
            elif form == 1:
                zeros = ((0, 0), (0, 0)) + ((1, 1),) * n
                src, src_np, label = f"F.pad({x.name}, {zeros})", f"np.pad({x.name}, {zeros})", "max_pool+pad"
                shape = x.shape[:2] + tuple((s + 2 + p0 + p1 - k) // st + 1
                                            for s, k, st, (p0, p1) in zip(spatial, kernel, stride, pad))
            return g.add(label, f"F.max_pool({src}, {kernel}, {stride}, {pad_arg})",
                         f"N.max_pool({src_np}, {kernel}, {stride}, {pad})", shape, x.mag, [x])
        cip = g.d.bool()
        return g.add("avg_pool", f"F.avg_pool({x.name}, {kernel}, {stride}, {pad_arg}, count_include_pad={cip})",
                     f"N.avg_pool({x.name}, {kernel}, {stride}, {pad}, count_include_pad={cip})", shape, x.mag, [x])
    groups = g.d.choice([k for k in (1, c, 2) if c % k == 0])
    dilation = tuple(g.d.int(1, 2) for _ in spatial)
    pad = tuple((g.d.int(0, 2), g.d.int(0, 2)) for _ in spatial)
    # kernels as wide as the padded input allows, wider than the input itself too: taps whose
    # windows lie wholly in the padding (a 3x3 on a 1x1, a 5x5 on a 2x2)
    kernel = tuple(g.d.int(1, min(5, (s + p0 + p1 - 1) // d + 1)) for s, (p0, p1), d in zip(spatial, pad, dilation))
    bias = g.d.bool()
    if kind == 0:                                                       # conv
        co = groups * g.d.int(1, 2)
        out = tuple((s + p0 + p1 - d * (k - 1) - 1) // st + 1
                    for s, k, st, (p0, p1), d in zip(spatial, kernel, stride, pad, dilation))
        w = g.new_input((co, c // groups) + kernel, scale=1 / math.sqrt(c // groups * math.prod(kernel)))
        label = "conv"
        ops = "F.conv", "N.conv"
        extra = ""
    else:                                                               # conv_transpose
        co = groups * g.d.int(1, 2)
        output_padding = tuple(g.d.int(0, max(st, d) - 1) for st, d in zip(stride, dilation))   # as torch
        out = tuple((s - 1) * st - p0 - p1 + d * (k - 1) + op + 1
                    for s, k, st, (p0, p1), d, op in zip(spatial, kernel, stride, pad, dilation, output_padding))
        w = g.new_input((c, co // groups) + kernel, scale=1 / math.sqrt(c // groups * math.prod(kernel)))
        label = "conv_transpose"
        ops = "F.conv_transpose", "N.conv_transpose"
        extra = f", output_padding={output_padding}"
    shape = (x.shape[0], co) + out
    if min(out) < 1 or not _fits(shape):
        return None
    b = g.new_input((co,), scale=0.3) if bias else None
    b_text = b.name if b else "None"
    args = f"({x.name}, {w.name}, {b_text}, stride={stride}, pad={pad}, dilation={dilation}, groups={groups}{extra})"
    gc, np_ = ops[0] + args, ops[1] + args
    return g.add(label, gc, np_, shape, x.mag * 3 + 1, [v for v in (x, w, b) if v is not None])


def _conv_nears() -> list:
    """Where gen_conv_geometry draws: free, around each threshold of a target's strategies for conv
    and its weight gradient (both sides), or as an edge of theirs (tests/lowering/geometries.py)."""
    from gcompile.lowering.targets import TARGETS
    from tests.lowering.geometries import EDGES, thresholds
    ops = ("conv", "conv_weight_grad")
    found = {t for target in TARGETS.values() for op in ops for s in target.strategies.get(op, ())
             for t in thresholds(s)}
    return [None] + [(name, side, value) for name, value in sorted(found) for side in ("below", "at")] \
        + [(edge, "edge", None) for op in ops for edge in EDGES[op] if edge != "empty_batch"]


def gen_conv_geometry(g: Gen, x: Value):
    """A convolution of a new input, its geometry drawn as the strategy property test draws them
    (tests/lowering/geometries.conv_geometry): around a threshold of a target's strategy for conv or
    its weight gradient, with taps wholly in the padding, or free, so that the programs reach every
    strategy (ONNX Runtime's CPU forms need more images, channels or positions than the values
    here have). Larger than MAX_NUMEL allows (up to 4096 elements), it is averaged at once over
    all but the batch axis."""
    from tests.lowering.geometries import conv_geometry
    near = g.d.choice(_conv_nears())
    geo = conv_geometry(np.random.default_rng(g.d.int(0, 2 ** 31 - 1)), near)
    w_ = geo.window
    x_shape, out = (geo.batch, geo.channels, *w_.size), (geo.batch, geo.filters, *w_.out())
    if max(numel(x_shape), numel(out)) > 4096:
        return None
    img = g.new_input(x_shape)
    fan_in = geo.channels // geo.groups * math.prod(w_.kernel)
    w = g.new_input((geo.filters, geo.channels // geo.groups, *w_.kernel), scale=1 / math.sqrt(fan_in))
    args = f"({img.name}, {w.name}, None, stride={w_.stride}, pad={w_.pad}, dilation={w_.dilation}, " \
           f"groups={geo.groups})"
    y = g.add("conv", f"F.conv{args}", f"N.conv{args}", out, img.mag * 3 + 1, [img, w])
    axes = tuple(range(1, len(out)))
    return g.add("reduce_mean", f"F.mean({y.name}, axis={axes})", f"np.mean({y.name}, axis={axes})", out[:1], y.mag,
                 [y])


def gen_long_product(g: Gen, x: Value):
    """A linear layer of a new input whose weight gradient (inputᵀ·cotangent, a gemm with trans_a)
    has just below or at least EXPLICIT_TRANSPOSE_MIN_WORK multiply-adds, the threshold of ONNX
    Runtime's CPU form of such products (lowering/targets/ort_cpu/linalg.py): far larger than
    MAX_NUMEL allows, it is averaged at once, and no other step reads its operands or product."""
    from gcompile.lowering.targets.ort_cpu.linalg import EXPLICIT_TRANSPOSE_MIN_WORK as work
    m, n = g.d.choice(((512, 256), (256, 256), (512, 512)))
    rows = -(-work // (m * n)) if g.d.bool() else work // (m * n) - 1
    inp = g.new_input((rows, m))
    w = g.new_input((m, n), scale=1 / math.sqrt(m))
    y = g.add("matmul", f"{inp.name} @ {w.name}", f"{inp.name} @ {w.name}", (rows, n), inp.mag * 3 + 1, [inp, w])
    large = {inp.name, w.name, y.name}
    g.values = [v for v in g.values if v.name not in large]
    return g.add("reduce_mean", f"F.mean({y.name})", f"np.mean({y.name})", (), y.mag, [y])


def _phase_shapes(g: Gen, x: Value, step: int) -> list[int]:
    return [a for a in g.static_axes(x.shape, step) if x.shape[a] % step == 0]


def gen_phases(g: Gen, x: Value):
    """Every strided phase of one axis or of two taken and joined again: interleaved halves
    (x[..., 0::2] and x[..., 1::2], as rotary embeddings take them), or Swin's patch merging
    (x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2] concatenated on the last
    axis), written as one slice of both axes or as two one-axis slices (PyTorch's dynamo export
    writes it so); in any order, a phase sometimes taken twice; or every piece of a split joined
    again. Their gradients are sums of slice_scatters, each placing a phase or a piece, which
    simplify interleaves or joins (_interleave_phases, _tiling_pieces)."""
    kind, step = g.d.int(0, 2), g.d.choice((2, 3))
    if kind == 1:
        step = 2
    need = 2 if kind == 1 else 1
    if len(_phase_shapes(g, x, step)) < need:
        x = g.new_input(g.d.choice(((Sym(1), 4, 2, 3), (2, 2, 4, 2), (Sym(1), 2, 6), (1, 6, 2, 2), (2, 6, 3))))
        if len(_phase_shapes(g, x, step)) < need:
            return None
    axes = sorted(g.d.choice(_phase_shapes(g, x, step)) for _ in range(need))
    if kind == 1 and axes[0] == axes[1]:
        return None
    r = len(x.shape)

    def sliced(axis: int, start: int) -> str:
        return "[" + ":, " * axis + f"{start}::{step}]"

    if kind == 2:                                                       # a split's pieces, each scaled, joined
        a = axes[0]
        parts = [f"F.split({x.name}, {step}, axis={a})[{i}] * {1 + i / 2}" for i in range(step)]
        return g.add("slice+concat", f"F.concat([{', '.join(parts)}], axis={a})",
                     f"np.concatenate([{', '.join(p.replace('F.', 'np.') for p in parts)}], axis={a})",
                     x.shape, x.mag * (1 + (step - 1) / 2), [x])
    starts = [(p,) for p in range(step)] if kind == 0 else [(p, q) for p in range(step) for q in range(step)]
    order = [starts.pop(g.d.int(0, len(starts) - 1)) for _ in range(len(starts))]
    if g.d.bool():
        order.append(g.d.choice(order))                                 # a phase taken twice
    chained = kind == 1 and g.d.bool()
    pieces = []
    for phase in order:
        if kind == 0:
            pieces.append(x.name + sliced(axes[0], phase[0]))
        elif chained:
            pieces.append(x.name + sliced(axes[0], phase[0]) + sliced(axes[1], phase[1]))
        else:
            index = [":"] * (max(axes) + 1)
            index[axes[0]], index[axes[1]] = f"{phase[0]}::{step}", f"{phase[1]}::{step}"
            pieces.append(f"{x.name}[{', '.join(index)}]")
    piece_shape = tuple(d // step if i in axes else d for i, d in enumerate(x.shape))
    join = g.d.int(0, r - 1) if g.d.bool() else r - 1
    if not isinstance(piece_shape[join], int):
        join = r - 1
    if not isinstance(piece_shape[join], int):
        return None
    shape = tuple(d * len(pieces) if i == join else d for i, d in enumerate(piece_shape))
    if not _fits(shape):
        return None
    return g.add("slice+concat", f"F.concat([{', '.join(pieces)}], axis={join})",
                 f"np.concatenate([{', '.join(pieces)}], axis={join})", shape, x.mag, [x])


def gen_slice_update(g: Gen, x: Value):
    """Slices written back and pieces joined again, as exported vision transformers have them: x
    with x[s:e] + c written over x[s:e] along an axis (torch's x[:, 1:] += c, an F.slice_scatter), a
    class token cut off through a transpose and joined to the rest again, a slice of a slice along
    another axis, or the pieces of a cut each transposed and joined. Their gradients are
    slice_scatters, transposes and concats that simplify puts back together (_rejoined,
    _transposes_before_scatters, _merge_scatters, _transposes_joined)."""
    axes = g.static_axes(x.shape, 2)
    if not axes or len(x.shape) < 2:
        x = g.new_input(g.d.choice(((Sym(1), 3, 4), (2, 5, 3), (3, 4))))
        axes = g.static_axes(x.shape, 2)
    a = g.d.choice(axes)
    n, k, kind = x.shape[a], g.d.int(1, x.shape[a] - 1), g.d.int(0, 3)

    def cut(axis: int, start, end="") -> str:
        return "[" + ":, " * axis + f"{start}:{end}]"

    head, rest = x.name + cut(a, "", k), x.name + cut(a, k)
    if kind == 0:
        start, c = g.d.int(0, n - 1), g.d.int(1, 3) / 4
        end = g.d.int(start + 1, n)
        return g.add("slice_scatter", f"F.slice_scatter({x.name}, {x.name}{cut(a, start, end)} + {c}, axis={a}, "
                     f"start={start}, end={end})", f"np.concatenate([{x.name}{cut(a, '', start)}, "
                     f"{x.name}{cut(a, start, end)} + {c}, {x.name}{cut(a, end)}], axis={a})", x.shape, x.mag + c, [x])
    if kind == 1:
        b = g.d.choice([i for i in range(len(x.shape)) if i != a])
        token = f"F.swapaxes(F.swapaxes({x.name}, {b}, {a}){cut(b, '', k)}, {b}, {a})"
        return g.add("slice+concat", f"F.concat([{token}, F.tanh({rest})], axis={a})",
                     f"np.concatenate([{token.replace('F.', 'np.')}, np.tanh({rest})], axis={a})", x.shape, x.mag, [x])
    if kind == 2:
        others = [i for i in g.static_axes(x.shape, 2) if i != a]
        if not others:
            return None
        b = g.d.choice(others)
        kb = g.d.int(1, x.shape[b] - 1)
        text = f"{x.name}{cut(a, k)}{cut(b, kb)}"
        shape = [d - k if i == a else d - kb if i == b else d for i, d in enumerate(x.shape)]
        return g.add("getitem", f"F.tanh({text})", f"np.tanh({text})", shape, x.mag, [x])
    b = g.d.choice([i for i in range(len(x.shape)) if i != a])
    parts = [f"F.swapaxes({piece}, {a}, {b})" for piece in (head, rest)]
    shape = list(x.shape)
    shape[a], shape[b] = shape[b], shape[a]
    return g.add("slice+concat", f"F.concat([{', '.join(parts)}], axis={b})",
                 f"np.concatenate([{', '.join(p.replace('F.', 'np.') for p in parts)}], axis={b})", shape, x.mag, [x])


_PER_EXAMPLE = [   # gc.vmap bodies of v (one example) and w (a weight of its shape), F and numpy text
    ("F.sum(F.tanh(v) * {w}, axis=-1)", "np.sum(np.tanh(v) * {w}, axis=-1)"),
    ("F.reshape(v * {w}, (-1,))", "np.reshape(v * {w}, (-1,))"),
]


def gen_vmap(g: Gen, x: Value):
    """gc.vmap of a per-example function over an axis k > 0 of a value of rank 3 or more: the axis
    moves first and the others keep their order (numpy: a stack over np.moveaxis(x, k, 0)), the
    function reading a weight of one example's shape, so another order of the axes shows."""
    axes = [a for a in g.static_axes(x.shape) if a > 0]
    if len(x.shape) < 3 or not axes:
        x = g.new_input(g.d.choice(((2, 3, 4), (Sym(1), 3, 2), (2, 2, 3, 2))))
        axes = [a for a in g.static_axes(x.shape) if a > 0]
    k = g.d.choice(axes)
    example = x.shape[:k] + x.shape[k + 1:]
    if any(isinstance(d, Sym) and d.k != 1 for d in example):
        return None
    body, body_np = g.d.choice(_PER_EXAMPLE)
    if "reshape" in body:
        if not is_static(example):
            return None
        shape, mag = (x.shape[k], numel(example)), x.mag
    else:
        shape, mag = (x.shape[k],) + example[:-1], numel(example[-1:])
    if not _fits(shape):
        return None
    w = g.new_input(example)
    body, body_np = body.format(w=w.name), body_np.format(w=w.name)
    return g.add("vmap+mul", f"gc.vmap(lambda v: {body}, in_axes={k})({x.name})",
                 f"np.stack([(lambda v: {body_np})(e) for e in np.moveaxis({x.name}, {k}, 0)])", shape,
                 mag * w.mag, [x, w])


_CHECKPOINTED = [   # bodies of gc.checkpoint (F and numpy text of v), magnitude bound from v's
    ("F.sin(F.tanh(v) * 1.5) + v * v * 0.1", "np.sin(np.tanh(v) * 1.5) + v * v * 0.1", lambda m: 1 + 0.1 * m * m),
    ("F.exp(F.tanh(v)) * v", "np.exp(np.tanh(v)) * v", lambda m: 2.8 * m),
]


def gen_checkpoint(g: Gen, x: Value):
    """gc.checkpoint around a few elementwise ops: the recompute pass copies them into the backward."""
    body, body_np, mag = g.d.choice(_CHECKPOINTED)
    return g.add("checkpoint+tanh+mul", f"gc.checkpoint(lambda v: {body}, {x.name})",
                 f"(lambda v: {body_np})({x.name})", x.shape, mag(x.mag), [x])


def gen_rearrange(g: Gen, x: Value):
    """flip, roll, rot90, moveaxis and repeat_interleave along static axes (ops/rearrange.py)."""
    axes = g.static_axes(x.shape)
    if not axes:
        return None
    a = g.d.choice(axes)
    r = len(x.shape)
    ax = _fmt_axis(g.d, a, r)
    kind = g.d.int(0, 4)
    if kind == 0:
        return g.add("flip", f"F.flip({x.name}, {ax})", f"np.flip({x.name}, {ax})", x.shape, x.mag, [x])
    if kind == 1:
        shift = g.d.int(-5, 5)
        return g.add("roll", f"F.roll({x.name}, {shift}, {ax})", f"np.roll({x.name}, {shift}, {ax})",
                     x.shape, x.mag, [x])
    if kind == 2 and len(axes) >= 2:
        b = g.d.choice([c for c in axes if c != a])
        k = g.d.int(-1, 3)
        shape = list(x.shape)
        if k % 2:
            shape[a], shape[b] = shape[b], shape[a]
        return g.add("rot90", f"F.rot90({x.name}, {k}, ({a}, {b}))", f"np.rot90({x.name}, {k}, ({a}, {b}))",
                     tuple(shape), x.mag, [x])
    if kind == 3:
        b = g.d.int(0, r - 1)
        shape = list(x.shape)
        shape.insert(b, shape.pop(a))
        return g.add("movedim", f"F.movedim({x.name}, {a}, {b})", f"np.moveaxis({x.name}, {a}, {b})", tuple(shape),
                     x.mag, [x])
    reps = g.d.int(0, 2)
    shape = x.shape[:a] + (x.shape[a] * reps,) + x.shape[a + 1:]
    if not _fits(shape) or 0 in shape:
        return None
    return g.add("repeat_interleave", f"F.repeat_interleave({x.name}, {reps}, {ax})",
                 f"np.repeat({x.name}, {reps}, {ax})", shape, x.mag, [x])


def gen_spatial(g: Gen, x: Value):
    """adaptive pooling, nearest upsampling, nearest and bilinear resampling to a drawn size,
    pixel_shuffle, torch's max_pool options and a scatter on a (N, C, H, W) value (ops/spatial.py,
    ops/scatter.py)."""
    if len(x.shape) != 4 or not is_static(x.shape[1:]):
        x = g.new_input(g.d.choice(((1, 4, 2, 3), (Sym(1), 2, 3, 3), (2, 1, 4, 4))))
    n, c, h, w = x.shape
    kind = g.d.int(0, 5)
    if kind == 0:
        out = (g.d.int(1, h + 1), g.d.int(1, w + 1))
        fn = g.d.choice(("adaptive_avg_pool", "adaptive_max_pool"))
        shape = (n, c) + out
        return g.add(fn, f"F.{fn}({x.name}, {out})",
                     f"N.{fn}({x.name}, {out})", shape, x.mag, [x]) if _fits(shape) else None
    if kind == 1:
        shape = (n, c, 2 * h, 2 * w)
        return g.add("interpolate", f"F.interpolate({x.name}, scale_factor=2)",
                     f"np.repeat(np.repeat({x.name}, 2, 2), 2, 3)", shape, x.mag, [x]) if _fits(shape) else None
    if kind == 5:                               # resampling to a drawn size: ops/spatial.py's resize
        size = (g.d.int(1, 2 * h), g.d.int(1, 2 * w))
        shape = (n, c) + size
        if not _fits(shape):
            return None
        if g.d.bool():
            return g.add("interpolate", f"F.interpolate({x.name}, size={size})", f"N.nearest({x.name}, {size})",
                         shape, x.mag, [x])
        corners = g.d.bool()
        return g.add("resize", f"F.interpolate({x.name}, size={size}, mode='bilinear', align_corners={corners})",
                     f"N.bilinear({x.name}, {size}, {corners})", shape, x.mag, [x])
    if kind == 2 and c % 4 == 0:
        return g.add("pixel_shuffle", f"F.pixel_shuffle({x.name}, 2)", f"N.pixel_shuffle({x.name}, 2)",
                     (n, c // 4, 2 * h, 2 * w), x.mag, [x])
    if kind == 3:
        kernel, stride = (g.d.int(1, 2), g.d.int(1, 2)), (g.d.int(1, 2), g.d.int(1, 2))
        dilation, pad = (g.d.int(1, 2), g.d.int(1, 2)), (g.d.int(0, 1), g.d.int(0, 1))
        pad = tuple(min(p, (d * (k - 1) + 1) // 2) for p, k, d in zip(pad, kernel, dilation))
        ceil = g.d.bool()
        if any(d * (k - 1) + 1 > s + 2 * p for d, k, s, p in zip(dilation, kernel, (h, w), pad)):
            return None
        out = []
        for i, k, s, p, d in zip((h, w), kernel, stride, pad, dilation):
            span = i + 2 * p - d * (k - 1) - 1
            o = (-(-span // s) if ceil else span // s) + 1
            out.append(o - 1 if ceil and (o - 1) * s >= i + p else o)
        for i, k, s, p, d, o in zip((h, w), kernel, stride, pad, dilation, out):
            if any(all(not 0 <= j * s - p + t * d < i for t in range(k)) for j in range(o)):
                return None     # a window of padding only: -inf, in torch as here
        args = f"{kernel}, {stride}, {pad}, {dilation}, {ceil}"
        return g.add("max_pool", f"F.max_pool({x.name}, {kernel}, {stride}, {pad}, dilation={dilation}, "
                     f"ceil_mode={ceil})", f"N.max_pool_torch({x.name}, {args})", (n, c) + tuple(out), x.mag, [x])
    idx = np.random.default_rng(g.d.int(0, 99)).integers(0, c, (1, c, h, w)).tolist()
    value = g.d.choice((0.5, -1.0))
    return g.add("scatter", f"F.scatter({x.name}, 1, np.array({idx}), {value})",
                 f"N.scatter({x.name}, 1, np.broadcast_to(np.array({idx}), {x.name}.shape), {value})",
                 x.shape, max(x.mag, 1), [x]) if isinstance(n, int) and n == 1 else None


def gen_linalg_loss(g: Gen, x: Value):
    """tril/triu, normalize, rms_norm and the l1/huber losses (ops/matrices.py, ops/normalization.py,
    ops/losses.py)."""
    r = len(x.shape)
    kind = g.d.int(0, 3)
    if kind == 0 and r >= 2 and is_static(x.shape[-2:]):
        fn, k = g.d.choice(("tril", "triu")), g.d.int(-1, 1)
        return g.add(fn, f"F.{fn}({x.name}, {k})", f"np.{fn}({x.name}, {k})", x.shape, x.mag, [x])
    if kind == 1 and r:
        a = g.d.int(0, r - 1)
        return g.add("normalize", f"F.normalize({x.name}, axis={a})", f"N.normalize({x.name}, {a})", x.shape, 1.0,
                     [x])
    if kind == 2 and r and isinstance(x.shape[-1], int):
        w = g.new_input(x.shape[-1:], scale=0.3, offset=1.0)
        return g.add("rms_norm", f"F.rms_norm({x.name}, {x.shape[-1]}, {w.name}, eps=1e-3)",
                     f"{x.name} / np.sqrt(np.mean({x.name} ** 2, -1, keepdims=True) + 1e-3) * {w.name}", x.shape,
                     1.3 * math.sqrt(numel(x.shape[-1:])) + 1, [x, w])
    y = g.partner(x.shape)
    shape = broadcast(x.shape, y.shape)
    if shape is None or not _fits(shape):
        return None
    if g.d.bool():
        return g.add("l1_loss", f"F.l1_loss({x.name}, {y.name}, reduction='none')", f"N.abs({x.name} - {y.name})",
                     shape, x.mag + y.mag, [x, y])
    delta = g.d.choice((1.0, 0.5))
    return g.add("huber_loss", f"F.huber_loss({x.name}, {y.name}, reduction='none', delta={delta})",
                 f"N.huber({x.name} - {y.name}, {delta})", shape, (x.mag + y.mag) ** 2, [x, y])


def gen_matrix(g: Gen, x: Value):
    """solve, inv, det, slogdet and cholesky (ops/solvers.py) of a well-conditioned square
    matrix (2I plus a small input: no pivot ties, no near-singularity), applied to a value whose
    last dim is the matrix's size."""
    if not x.shape or not isinstance(x.shape[-1], int) or not 1 <= x.shape[-1] <= 4:
        return None
    n = x.shape[-1]
    a = g.new_input((n, n), scale=0.3)
    m, mn = f"({a.name} + np.eye({n}, dtype=np.float32) * 2.0)", f"({a.name} + np.eye({n}) * 2.0)"
    kind = g.d.int(0, 4)
    if kind == 0:
        return g.add("solve", f"F.solve({m}, {x.name}[..., None])[..., 0]",
                     f"np.linalg.solve({mn}, {x.name}[..., None])[..., 0]", x.shape, x.mag, [x, a])
    if kind == 1:
        return g.add("inv+matmul", f"{x.name} @ F.inv({m})", f"{x.name} @ np.linalg.inv({mn})", x.shape, x.mag,
                     [x, a])
    if kind == 2:
        return g.add("det+mul", f"{x.name} * F.det({m})", f"{x.name} * np.linalg.det({mn})", x.shape,
                     x.mag * 3.0 ** n, [x, a])
    if kind == 3:
        return g.add("slogdet+mul", f"{x.name} * F.slogdet({m})[1]", f"{x.name} * np.linalg.slogdet({mn})[1]",
                     x.shape, x.mag * (n + 1), [x, a])
    return g.add("cholesky+matmul", f"{x.name} @ F.cholesky({m} @ F.swapaxes({m}, -1, -2))",
                 f"{x.name} @ np.linalg.cholesky({mn} @ {mn}.T)", x.shape, x.mag * 3.0, [x, a])


def gen_image(g: Gen, x: Value):
    """A (N, C, *spatial) value for the conv family, from x."""
    s = g.d.choice(((Sym(1), 2, 4), (2, 2, 3, 3), (Sym(1), 1, 3, 3), (1, 3, 5)))
    img = g.new_input(s)
    return gen_conv(g, img)


GENERATORS = [gen_unary, gen_binary, gen_reduce, gen_reshape, gen_dims, gen_getitem, gen_param_activation,
              gen_where, gen_matmul, gen_einsum, gen_take, gen_join, gen_pad_tile, gen_nn, gen_conv, gen_image,
              gen_const, gen_fill, gen_recurrent, gen_int, gen_rearrange, gen_spatial, gen_linalg_loss, gen_order,
              gen_scan, gen_matrix, gen_while, gen_conv_geometry, gen_phases, gen_checkpoint, gen_vmap,
              gen_slice_update, gen_long_product,
              gen_unary, gen_unary, gen_unary, gen_binary]    # the unary table is long: drawn more often
# Differentiable control flow. tools/fuzz.py draws it among the rest; the tests run it on its own
# (test_loop_programs, test_cond_programs): in the 200 random programs it made the run twice as long.
CONTROL_FLOW = [gen_loop, gen_cond]


def generate(draw: Draw, min_ops: int = 5, max_ops: int = 40, control_flow: bool = True) -> Program:
    """A random program of min_ops..max_ops generated ops (plus the tanh squashes it needs), with
    gc.while_loop and gc.cond among them where `control_flow`."""
    g = Gen(draw)
    generators = GENERATORS + CONTROL_FLOW if control_flow else GENERATORS
    target = draw.int(min_ops, max_ops)
    g.new_input(g.random_shape())
    made, attempts = 0, 0
    while made < target and attempts < 20 * target:
        attempts += 1
        fn = draw.choice(generators)
        x = g.pick()
        if fn(g, x) is not None:
            made += 1
    if not g.program.steps:
        gen_unary(g, g.values[0])
    consumed = {a for s in g.program.steps for a in s.args}
    last = g.program.steps[-1].name
    extra = [v.name for v in g.values if v.name not in consumed and v.name != last and not v.name.startswith("x")]
    outputs = [last] + [n for n in extra if draw.bool()][:3]
    if draw.int(0, 7) == 0:                     # an output repeated, or an input returned as is
        outputs.append(draw.choice(outputs + [g.program.inputs[0].name]))
    g.program.outputs = outputs
    program = g.program.pruned()
    if draw.int(0, 7) == 0:                     # an input no output depends on: its gradient is zeros
        program.inputs.append(Input(g._fresh("x"), g.random_shape()))
    return program
