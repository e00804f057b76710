"""Inlining an ONNX graph into the current trace, one node at a time.

Each ONNX value becomes a Tensor (computed at run time), a numpy array (known at import time:
initializers, Constants and everything computed from them alone) or a SymInts (sizes computed
from symbolic dims, sizes.py; computed at run time where a translator needs them as data). A node
whose operands are all known is evaluated at import time, by tracing its translator into a scratch
graph and running that on the numpy reference evaluator, so shape subgraphs never become run-time
data and their results stay exact.

A subgraph (a loop body, an If branch) may be translated more than once: a Loop is unrolled, or
translated again as a while loop once its condition turns out to be computed at run time, and
loops nest, so the counts multiply. Their product is bounded by MAX_REPEATS (NodeContext.repeated):
a few kilobytes of nested Loops would otherwise keep the importer busy for hours.

That evaluation is bounded like the graph passes' constant folding: a node that would compute a
value of more than MAX_FOLD_ELEMENTS (4,096) elements is traced into the model instead, fed by its
known operands as constants, so a few hundred bytes of ConstantOfShape, Expand, Tile or Range
never make the importer allocate gigabytes; the runtime computes such values. A value that must
be known at import time (a shape, axes, pads, ...) but depends on one of those is refused.
"""
from __future__ import annotations

import contextlib
from collections import ChainMap, Counter
from collections.abc import Mapping

import numpy as np
from onnx import AttributeProto, helper

from .. import functions as F
from ..errors import GcompileError, ShapeError, TraceError, UnsupportedError
from ..frontend.tensor import Tensor, apply, as_tensor, tracing
from ..ir import dims
from ..ir.evaluate import evaluate
from ..ir.graph import Graph
from ..ops.reduce import count
from ..passes.fold import MAX_FOLD_ELEMENTS
from . import sizes
from .table import ALTERNATIVES, DOMAINS, TRANSLATORS, NotSymbolic, SymInts, TensorSequence
from .translators.control import if_node
from .validate import node_name, takes_sequence, tensor_array

_COUNTABLE = {np.dtype(t) for t in ("float32", "float64", "int32", "int64")}
MAX_REPEATS = 1024   # translations of one subgraph in one import, over every loop around it


def attribute_value(attr, what: str):
    """An ONNX attribute as a plain Python value (strings decoded, tensors as numpy arrays once
    their declared size is checked against their data)."""
    if attr.type == AttributeProto.TENSOR:
        return tensor_array(attr.t, what)
    if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR,
                     AttributeProto.TENSORS, AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
        return helper.get_attribute_value(attr)
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


class NodeContext:
    """What a translator sees of one ONNX node: attributes, opset, and helpers for its operands."""

    def __init__(self, proto, opset: int, inliner: Inliner, scope=None, path: tuple = ()):
        self.proto, self.opset, self.inliner = proto, opset, inliner
        self.op_type = proto.op_type
        self._attrs = {a.name: a for a in proto.attribute}
        self.scope = {} if scope is None else scope    # the values the node's subgraphs may read by name
        self.path = path      # where the node is in the model: node indices and the graph attributes between

    def run_graph(self, name: str, inputs: list) -> list:
        """Translate this node's subgraph `name` (a Loop or Scan body) on `inputs`, one per graph input,
        in the node's scope; returns its outputs. What the body learns about dims stays inside it."""
        graph = self.attr(name)
        names = [i.name for i in graph.input]
        if len(names) != len(inputs):
            raise self.unsupported(f"its {name} takes {len(names)} inputs, but {len(inputs)} are given to it")
        saved = dict(self.inliner.dim_sources), set(self.inliner.deferred)
        scope = ChainMap({**initializers(graph), **dict(zip(names, inputs))}, self.scope)
        try:
            self.inliner.run(graph, scope, (*self.path, name))
        finally:
            self.inliner.dim_sources, self.inliner.deferred = saved
        missing = [o.name for o in graph.output if o.name not in scope]
        if missing:
            raise GcompileError(f"{self.describe()}: its {name} does not compute its outputs {missing}")
        return [scope[o.name] for o in graph.output]

    @property
    def form(self) -> str | None:
        """What an earlier translation of this very node found it must become (a Loop whose condition
        is computed at run time: "while"), when it is translated again inside a body translated again."""
        return self.inliner.forms.get(self.path)

    @form.setter
    def form(self, value: str) -> None:
        self.inliner.forms[self.path] = value

    @contextlib.contextmanager
    def repeated(self, times: int, why: str):
        """Translate this node's subgraphs `times` over in the block (`why` says why, for the error):
        an UnsupportedError where that makes a subgraph translated more than MAX_REPEATS times in
        all, counting the loops this node is nested in."""
        total = self.inliner.repeats * times
        if total > MAX_REPEATS:
            raise self.unsupported(f"{why}, so its body would be translated {total} times, counting the loops around "
                                   f"it; gcompile translates a loop body at most {MAX_REPEATS} times (refused)")
        outer, self.inliner.repeats = self.inliner.repeats, total
        try:
            yield
        finally:
            self.inliner.repeats = outer

    def describe(self) -> str:
        return f"ONNX node {node_name(self.proto)!r} ({self.op_type}, opset {self.opset})"

    def attr(self, name: str, default=None):
        a = self._attrs.get(name)
        return default if a is None else attribute_value(a, f"the {name} of {self.describe()}")

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    @property
    def n_outputs(self) -> int:
        return len(self.proto.output)

    def wants(self, index: int) -> bool:
        return index < len(self.proto.output) and self.proto.output[index] != ""

    def only_reader(self, index: int) -> bool:
        """Whether this node is the one reader of its input `index` in the model: no other node, no
        subgraph and no graph output reads that value (so a translator may compute what this node
        needs of it without the value itself). A value from around a subgraph must be read once in
        the subgraph and, at each graph out to the one that defines it, only by the node holding
        the subgraph."""
        name = self.proto.input[index] if index < len(self.proto.input) else ""
        if not name:
            return False
        for counts, defined in reversed(self.inliner.readers):
            if counts[name] != 1:
                return False
            if name in defined:
                return True
        return True

    def unsupported(self, message: str) -> UnsupportedError:
        return UnsupportedError(f"{self.describe()}: {message}")

    def known(self, value, what: str) -> np.ndarray:
        """`value` as a numpy array; an error if it is only known at run time."""
        if isinstance(value, np.ndarray):
            return value
        if isinstance(value, SymInts):
            raise self.unsupported(f"its {what} must be known at import time, but it depends on the symbolic dims "
                                   f"({', '.join(str(v) for v in value.values.reshape(-1))})")
        if isinstance(value, Tensor) and value.ref in self.inliner.deferred:
            raise self.unsupported(f"its {what} depends on a value larger than the import-time bound "
                                   f"({MAX_FOLD_ELEMENTS} elements), which is left to the runtime; it must be known "
                                   "at import time (refused)")
        raise self.unsupported(f"its {what} must be known at import time (a constant, an initializer or a "
                               "computation on shapes), but it is computed at run time")

    def ints(self, value, what: str) -> list[int]:
        return [int(v) for v in self.known(value, what).reshape(-1)]

    def dims(self, value, what: str) -> tuple:
        """A 1-D shape operand as dims: ints, and dim names where it is symbolic. An entry that is an
        expression over dims but no product of them (batch + 1) cannot be a gcompile shape: refused."""
        if isinstance(value, SymInts):
            target = tuple(value.values.reshape(-1).tolist())
            odd = [str(d) for d in target if not sizes.is_dim(d)]
            if odd:
                raise self.unsupported(
                    f"its {what} [{', '.join(map(str, target))}] has the entries {', '.join(odd)}, which are not "
                    "products of the model's dims; gcompile's shapes are made of ints and products of dims (refused)")
            return target
        return tuple(self.ints(value, what))

    def shape(self, value, what: str = "shape") -> tuple:
        """A 1-D operand of sizes (ConstantOfShape's, Expand's): dims, none negative."""
        target = self.dims(value, what)
        if any(isinstance(d, int) and d < 0 for d in target):
            raise ShapeError(f"its {what} {target} has a negative dim")
        return target

    def note_dims(self, x) -> None:
        self.inliner.note_dims(x)


class Inliner:
    """Runs ONNX graphs (the model's, or an If branch) into the current trace."""

    def __init__(self, opsets: dict, overrides: dict | None = None):
        self.opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}
        self.overrides = dict(overrides or {})   # op type -> Translator used instead of the registered one
        self.dim_sources: dict = {}     # dim name -> (Tensor, axis) holding it, to compute it at run time
        self.deferred: set = set()      # refs of Tensors known in principle but too large to compute at import
        self.repeats = 1                # how many times the subgraph being translated is translated (repeated)
        self.forms: dict[tuple, str] = {}   # NodeContext.form, by the node's path
        self.notes: dict = {}           # what translators tell each other about values (note, noted)
        # per graph being run, innermost last: its reads of each value and the values it defines
        # (NodeContext.only_reader)
        self.readers: list[tuple[Counter, Mapping]] = []

    def note(self, kind: str, value: Tensor, fact) -> None:
        """Tell later translators `fact` about `value` (translators/quantize.py, translators/nn.py)."""
        self.notes.setdefault(kind, {})[value.ref] = (value.graph, fact)

    def noted(self, kind: str, value):
        """What was noted of `kind` about `value`, or None. A value is known by its ref and its
        graph both: a loop body's values and those of the graph around it are numbered alike."""
        if not isinstance(value, Tensor):
            return None
        graph, fact = self.notes.get(kind, {}).get(value.ref, (None, None))
        return fact if graph is value.graph else None

    def note_dims(self, x) -> None:
        if isinstance(x, Tensor):
            for axis, d in enumerate(x.shape):
                if isinstance(d, str):
                    self.dim_sources.setdefault(d, (x, axis))

    # -- run-time values of SymInts ---------------------------------------------------------------
    def materialize(self, value) -> Tensor:
        if isinstance(value, Tensor):
            return value
        if isinstance(value, TensorSequence):
            raise UnsupportedError(f"a sequence of {len(value.items)} tensors is used where a tensor is expected "
                                   "(a model output or an operand): gcompile's imported values are tensors")
        if not isinstance(value, SymInts):
            return as_tensor(value)
        parts = [self._entry_tensor(d) for d in value.values.reshape(-1).tolist()]
        flat = F.stack(parts) if parts else as_tensor(np.zeros(0, np.int64))
        return F.cast(F.reshape(flat, value.shape), value.dtype)

    def _entry_tensor(self, entry) -> Tensor:
        """One entry of a SymInts (an int, a dim or a sizes.Size) computed at run time, as an int64 scalar."""
        if isinstance(entry, str):
            return self._dim_tensor(entry)
        if not isinstance(entry, sizes.Size):
            return as_tensor(np.asarray(entry, np.int64))
        total = None
        for monomial, coef in entry.terms:
            term = as_tensor(np.asarray(coef, np.int64))
            for atom in monomial:
                term = term * (self._dim_tensor(atom) if isinstance(atom, str) else self._atom_tensor(atom))
            total = term if total is None else total + term
        return as_tensor(np.asarray(0, np.int64)) if total is None else total

    def _atom_tensor(self, atom) -> Tensor:
        """An opaque atom of a sizes.Size, with ONNX's meaning of the op it stands for."""
        op, *args = atom
        a, *others = [self._entry_tensor(arg) for arg in args]
        if op == "abs":
            return F.abs(a)
        b = others[0]
        if op in ("max", "min"):
            return (F.maximum if op == "max" else F.minimum)(a, b)
        quotient = apply("div", [a, b])             # truncates toward zero, as ONNX's integer Div
        if op == "div":
            return quotient
        remainder = a - quotient * b                    # fmod: the sign of a
        if op == "fmod":
            return remainder
        zero = np.int64(0)
        wrong_sign = F.logical_and(F.not_equal(remainder, zero), F.not_equal(F.less(remainder, zero), F.less(b, zero)))
        return F.where(wrong_sign, remainder + b, remainder)

    def _dim_tensor(self, dim: str) -> Tensor:
        if dim in self.dim_sources:
            x, axis = self.dim_sources[dim]
            if x.dtype not in _COUNTABLE:
                x = F.cast(x, np.int64)
            return F.cast(count(x, (axis,)), np.int64)
        names = dims.symbols(dim)
        if len(names) == 1 and names[0] == dim:
            raise UnsupportedError(f"symbolic dim {dim!r} is needed as a run-time value, but no tensor of the "
                                   "model carries it")
        result = as_tensor(np.asarray(dims.divide(dim, dims.product(names)), np.int64))
        for name in names:
            result = result * self._dim_tensor(name)
        return result

    # -- graphs and nodes ---------------------------------------------------------------------------
    def run(self, graph, env, path: tuple = ()) -> None:
        """Translate every node of `graph` (an onnx GraphProto, at `path` in the model: see
        NodeContext.path), reading and writing `env`."""
        self.readers.append((reads(graph), env.maps[0] if isinstance(env, ChainMap) else env))
        try:
            for index, proto in enumerate(graph.node):
                self.run_node(proto, env, (*path, index))
        finally:
            self.readers.pop()

    def _opset(self, proto) -> int:
        domain = "" if proto.domain in DOMAINS else proto.domain
        return self.opsets.get(domain, 0)

    def run_node(self, proto, env, path: tuple) -> None:
        ctx = NodeContext(proto, self._opset(proto), self, env, path)
        translator = self.overrides.get(proto.op_type) or TRANSLATORS.get(proto.op_type) if proto.domain in DOMAINS \
            else None
        if proto.op_type == "If" and proto.domain in DOMAINS:
            outs = self._if(ctx, env)
        elif translator is None:
            instead = ALTERNATIVES.get(proto.op_type) if proto.domain in DOMAINS else \
                "gcompile imports the ai.onnx domain only: export the model without other domains' ops"
            raise UnsupportedError(
                f"ONNX op {proto.domain or 'ai.onnx'}::{proto.op_type} (opset {ctx.opset}) in node "
                f"{node_name(proto)!r} is not supported by gcompile's importer "
                f"(supported: {len(TRANSLATORS) + 1} ai.onnx ops, listed in gcompile.importer.table.TRANSLATORS)"
                + (f"; {instead}" if instead else ""))
        else:
            operands = []
            for index, name in enumerate(proto.input):
                if name and name not in env:
                    raise GcompileError(f"{ctx.describe()} reads {name!r}, which no earlier node produces")
                if isinstance(env.get(name), TensorSequence) and not takes_sequence(proto.op_type, ctx.opset, index):
                    raise ctx.unsupported(f"its input {index} ({name!r}) is a sequence of tensors, where "
                                          f"{proto.op_type} takes a tensor")
                operands.append(env[name] if name else None)
            implicit = [env[name] for name in sorted(outer_names(proto)) if name in env]
            try:
                outs = self._translate(translator, ctx, operands, implicit)
            except (ShapeError, TraceError) as err:
                raise type(err)(f"{ctx.describe()}: {err}") from None
            except (ValueError, IndexError, KeyError, ArithmeticError) as err:
                # numpy or a translator refusing operands or attributes no valid model has
                raise ShapeError(f"{ctx.describe()}: cannot be imported ({type(err).__name__}: {err})") from err
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        for i, name in enumerate(proto.output):
            if not name:
                continue
            if i >= len(outs) or outs[i] is None:
                raise ctx.unsupported(f"output {i} ({name!r}) is not supported")
            env[name] = outs[i]

    def _translate(self, translator, ctx, operands, implicit=()):
        """Translate one node; `implicit` holds the outer values its subgraphs read, which decide, with
        the operands, whether it can be evaluated at import time."""
        present = [v for v in [*operands, *implicit] if v is not None]
        if all(isinstance(v, np.ndarray) for v in present) and not translator.draws:
            outs = translator.fn(ctx, *operands) if translator.numpy_only else self._fold(translator, ctx, operands)
            return self._defer(outs)
        if translator.numpy_only:
            raise ctx.unsupported(f"{ctx.op_type} is only supported on values known at import time (such as "
                                  "shape computations); here an operand is only known at run time (computed from data "
                                  "or from a symbolic dim, or too large to compute at import time)")
        if any(isinstance(v, SymInts) for v in present):
            if translator.symbolic:
                try:
                    return translator.fn(ctx, *operands)
                except NotSymbolic:
                    pass
            operands = [self.materialize(v) if isinstance(v, SymInts) else v for v in operands]
        outs = translator.fn(ctx, *operands)
        if all(isinstance(v, np.ndarray) or (isinstance(v, Tensor) and v.ref in self.deferred) for v in present):
            self._defer(outs)
        return outs

    def _defer(self, outs):
        """`outs` itself; those computed at run time although their operands were known are noted in
        self.deferred, so a translator needing their values refuses them clearly."""
        for out in outs if isinstance(outs, (tuple, list)) else [outs]:
            if isinstance(out, Tensor):
                self.deferred.add(out.ref)
        return outs

    def _fold(self, translator, ctx, operands):
        """Evaluate a node on known operands at import time (numpy reference of the ops it uses), or
        trace it into the model when it computes a value over MAX_FOLD_ELEMENTS elements."""
        scratch = Graph()
        with tracing(scratch):
            outs = translator.fn(ctx, *operands)
        if any(not dims.is_static(t.shape) or int(dims.product(t.shape)) > MAX_FOLD_ELEMENTS
               for node in scratch.topo_order() if node.op != "constant" for t in node.outputs):
            return translator.fn(ctx, *operands)
        many = isinstance(outs, (tuple, list))
        outs = list(outs) if many else [outs]
        refs = [o.ref for o in outs if isinstance(o, Tensor)]
        values = iter(evaluate(scratch, [], refs) if refs else [])
        outs = [next(values) if isinstance(o, Tensor) else o for o in outs]
        return outs if many else outs[0]

    def _if(self, ctx, env):
        if not ctx.proto.input or ctx.proto.input[0] not in env:
            raise GcompileError(f"{ctx.describe()} reads a condition that no earlier node produces")
        value = env[ctx.proto.input[0]]
        if isinstance(value, Tensor) and value.ref not in self.deferred:   # computed from data: both branches
            return if_node(ctx, value, lambda name: self._branch(ctx, env, name, restore=True))
        cond = ctx.known(value, "condition")
        if cond.size != 1:
            raise ctx.unsupported(f"the condition has {cond.size} elements, not one")
        name = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
        branch = ctx.attr(name)
        if branch is None:
            raise ctx.unsupported(f"the condition selects its {name}, which it lacks")
        return self._branch(ctx, env, name)

    def _branch(self, ctx, env, name: str, restore: bool = False) -> list:
        """Translate the If's branch `name` on `env`; with restore=True (a branch traced into a body of
        its own) what it learns about dims stays inside it."""
        branch = ctx.attr(name)
        saved = dict(self.dim_sources), set(self.deferred)
        scope = ChainMap(initializers(branch), env)
        try:
            self.run(branch, scope, (*ctx.path, name))
        finally:
            if restore:
                self.dim_sources, self.deferred = saved
        missing = [o.name for o in branch.output if o.name not in scope]
        if missing:
            raise GcompileError(f"{ctx.describe()}: its {name} does not compute its outputs {missing}")
        return [scope[o.name] for o in branch.output]


def initializers(graph) -> dict:
    """The initializers of a subgraph (a loop body, an If branch) as numpy arrays, by name."""
    return {t.name: tensor_array(t, f"initializer {t.name!r} of graph {graph.name!r}") for t in graph.initializer}


def reads(graph) -> Counter:
    """How many times each value is read in `graph`: by its nodes' inputs, its nodes' subgraphs
    (once per node) and its outputs."""
    counts: Counter = Counter(o.name for o in graph.output)
    for node in graph.node:
        counts.update(n for n in node.input if n)
        counts.update(outer_names(node))
    return counts


def outer_names(proto) -> set[str]:
    """The names a node's subgraphs read from outside them (every level of nesting)."""
    names: set[str] = set()
    for attr in proto.attribute:
        for graph in [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs):
            defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
            for node in graph.node:
                names.update(n for n in [*node.input, *outer_names(node)] if n and n not in defined)
                defined.update(node.output)
    return names
