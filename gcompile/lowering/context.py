"""LowerContext: what an op's `lower` rule uses to emit ONNX nodes.

It hands out readable unique names, turns numpy constants into initializers, and builds
int64 shape tensors for shapes with symbolic dims (from Shape slices of the graph inputs
that carry each symbol), so symbolic dims stay symbolic in the exported model.

A loop's body (a Graph in a node's attributes) is lowered by a child context (`subgraph`) into
an ONNX GraphProto for the Scan or Loop attribute. Names are unique across the whole model
(ONNX's single-assignment rule spans subgraphs), constants are initializers of the main graph,
which a body reads from the outer scope, and so are the shape tensors of the symbolic dims the
main graph can compute: the body reads them instead of recomputing them at every step.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import LoweringError
from ..ir import dims
from ..ir.graph import Graph, Node, TensorType, ValueRef
from ..ir.registry import get_op
from . import kernels
from .reads import node_reads, subgraphs
from .targets.base import DEFAULT_TARGET, TARGETS, Target

# onnxruntime's CPU provider has no float64 kernel for these (ARCHITECTURE.md §10).
NO_FLOAT64_CPU_KERNEL = frozenset({"Conv", "ConvTranspose", "AveragePool", "GlobalAveragePool", "Erf", "Tan", "Asin",
                                   "Acos", "Atan"})

# With this set (the tests set it, as passes.base.LINT), a node emitted for a float64 node fails
# where a float attribute of it (an ONNX float attribute is float32) is not a float32 value: its
# op then computes with a rounded constant (a float64 layer norm's epsilon of 1e-3 moved its result
# by 5e-7, relative), and the lowering should write the float64 form out instead.
CHECK_FLOAT64_ATTRIBUTES = False

# int64 constants of at most this many elements that a loop body of the portable target reads are
# Constant nodes in the body rather than state variables (LowerContext.closed).
INLINED_INT64_LIMIT = 16


def _rounds_in_float32(value) -> bool:
    """Whether an attribute value is a float (or holds floats) that float32 does not hold exactly."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(v, float) and np.isfinite(v) and float(np.float32(v)) != v for v in values)


def value_info(name: str, t: TensorType):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
    return helper.make_tensor_value_info(name, elem, [d for d in t.shape])


class LowerContext:
    def __init__(self, graph: Graph, opset: int, input_names: Sequence[str], reserved: Sequence[str] = (),
                 parent: LowerContext | None = None, target: Target | None = None):
        self.graph, self.opset, self.parent = graph, opset, parent
        self.target: Target = parent.target if parent is not None else target or TARGETS[DEFAULT_TARGET]
        self.nodes: list = []
        self.apart: set[str] = set()      # outputs of the nodes emitted for recomputed copies: never merged away
        self._shape_cache: dict = {}
        self._current: Node | None = None
        if parent is None:
            self.initializers: list = []
            self.float64_ops: list[str] = []      # "Conv in conv_3 (model.py:12)" where the CPU provider lacks a kernel
            self.lowerings: Counter[tuple[str, str]] = Counter()   # (op, strategy or "plain"): nodes lowered so
            self._const_cache: dict = {}
            self._unnamed = [0]                   # unnamed initializers so far: const_0, const_1, ...
            self._used_names: set[str] = set(input_names) | set(reserved)
            self.dtypes: dict[str, np.dtype] = {}   # the dtype of each ONNX value whose dtype is known (kernels.py)
        else:                                     # a loop body: one namespace and one set of initializers
            self.initializers, self.float64_ops, self.lowerings = parent.initializers, parent.float64_ops, \
                parent.lowerings
            self._const_cache, self._used_names = parent._const_cache, parent._used_names
            self._unnamed = parent._unnamed
            self.dtypes = parent.dtypes
        self._symbol_sources: dict[str, tuple[str, int]] = {}
        self._local_symbols: set[str] = set()     # bound here by a loop's result (bind_symbol), not by an input
        for name, ref in zip(input_names, graph.inputs):
            self.dtypes[name] = np.dtype(graph.type_of(ref).dtype)
            for axis, d in enumerate(graph.type_of(ref).shape):
                if isinstance(d, str):      # a product ("3*batch") too: its size is read off as it is
                    self._symbol_sources.setdefault(d, (name, axis))

    # -- graphs --------------------------------------------------------------------------------
    def lower_nodes(self, names: dict[ValueRef, str]) -> None:
        """Emit every node of self.graph in id order (a topological order) with its op's lowering
        rule; `names` maps the values bound beforehand (the graph inputs) and receives the rest."""
        for node in self.graph.topo_order():
            if node.op == "input":
                continue
            self.begin(node)
            if node.op == "constant":
                names[node.out(0)] = self.const(node.attrs["value"], name=node.attrs.get("name"))
                continue
            chosen = self.target.strategy_for(self, node)
            self.lowerings[node.op, chosen.name if chosen else "plain"] += 1
            rule = chosen.lower if chosen else get_op(node.op).lower
            start = len(self.nodes)
            outs = rule(self, [names[r] for r in node.inputs], node)
            if node.copy:
                self.apart.update(out for emitted in self.nodes[start:] for out in emitted.output)
            outs = [outs] if isinstance(outs, str) else list(outs)
            for i, out in enumerate(outs):
                names[node.out(i)] = out
                if i < len(node.outputs) and out:
                    self.dtypes[out] = np.dtype(node.outputs[i].dtype)
        self.begin(None)

    def subgraph(self, body: Graph, outer: Sequence[str | None], head: Sequence[tuple[str, TensorType]] = (),
                 echo: Sequence[int] = (), tail: Sequence[tuple[str, TensorType]] = ()) -> onnx.GraphProto:
        """`body` (the Graph attribute of the node being lowered) as an ONNX subgraph.

        outer[i] is the name of the outer-scope value body input i reads (a loop-invariant operand),
        or None where input i is an input of the subgraph. The subgraph's inputs are `head` ((name
        hint, type) pairs: a Loop's iteration number and condition), then the body inputs bound to
        None, in order, then `tail` (unread inputs: the step of a Scan over a placeholder); its
        outputs are the head inputs at positions `echo` (a Loop's condition, passed on), then the
        body's outputs."""
        owner = self._current
        prefix = owner.name if owner is not None else "body"
        head_names = [self.fresh(f"{prefix}_{hint}") for hint, _ in head]
        inputs = [value_info(name, t) for name, (_, t) in zip(head_names, head)]
        self.dtypes.update((name, np.dtype(t.dtype)) for name, (_, t) in zip(head_names, head))
        names: dict[ValueRef, str] = {}
        for ref, name in zip(body.inputs, outer):
            if name is None:
                name = self.fresh(f"{prefix}_in")
                inputs.append(value_info(name, body.type_of(ref)))
            names[ref] = name
        inputs += [value_info(self.fresh(f"{prefix}_{hint}"), t) for hint, t in tail]
        child = LowerContext(body, self.opset, [names[ref] for ref in body.inputs], parent=self)
        child.lower_nodes(names)
        produced = {o for n in child.nodes for o in n.output}
        outputs, used = [], set()
        results = [(head_names[i], head[i][1]) for i in echo] + [(names[r], body.type_of(r)) for r in body.outputs]
        for name, t in results:
            if name not in produced or name in used:   # an input, an outer value, a constant, a repeat
                name = child.emit("Identity", [name])
            used.add(name)
            outputs.append(value_info(name, t))
        return helper.make_graph(child.nodes, f"{prefix}_body", inputs, outputs)

    def closed(self, graph: onnx.GraphProto, known: dict[str, TensorType]) -> tuple[onnx.GraphProto, list[str]]:
        """`graph`, a loop body from `subgraph`, made to read nothing from the graphs around it (for
        the portable target): each name it or its nested branches read from outside (an operand
        bound to an outer value, a constant, a shape tensor) becomes a new input in front of its
        inputs, passed on unchanged as a new output in front of its outputs, i.e. a loop state
        variable. Returns the graph and the names to feed those inputs, in order. OpenVINO's Scan
        converter refuses a body that reads outer values; the ONNX Scan operator's text asks for
        them as state variables. Small int64 constants (axes, target shapes, indices: at most
        INLINED_INT64_LIMIT elements) are Constant nodes in the body instead: OpenVINO infers the
        rank of a Reshape or a reduction only from a constant shape or axes, and with a state
        variable there it failed to convert the loop (an If or TensorIterator "with dynamic rank",
        or "Arguments do not have the same element type" in the Scan). `known` types the outer names
        that are neither initializers nor shape tensors (the loop's own operands)."""
        free = node_reads(helper.make_node("Scan", [], [], body=graph))   # what the body reads, sorted
        if not free:
            return graph, []
        small = {t.name: t for t in self.initializers if t.name in free and t.data_type == onnx.TensorProto.INT64
                 and int(np.prod(t.dims)) <= INLINED_INT64_LIMIT}
        free = [name for name in free if name not in small]
        inner = {name: self.fresh(f"{name}_state") for name in free}
        inner.update({name: self.fresh(f"{name}_in_body") for name in small})
        _rename_reads(graph, inner)
        constants = [helper.make_node("Constant", [], [inner[name]], value=_renamed(small[name], inner[name]))
                     for name in sorted(small)]
        passed = [helper.make_node("Identity", [inner[name]], [self.fresh(f"{name}_passed")]) for name in free]
        inputs = [self._outer_value_info(name, inner[name], known) for name in free]
        outputs = [onnx.ValueInfoProto() for _ in free]
        for out, node, typed in zip(outputs, passed, inputs):
            out.CopyFrom(typed)
            out.name = node.output[0]
        closed = helper.make_graph(constants + passed + list(graph.node), graph.name, inputs + list(graph.input),
                                   outputs + list(graph.output), initializer=list(graph.initializer))
        return closed, free

    def _outer_value_info(self, outer: str, name: str, known: dict[str, TensorType]):
        """The type of the outer value `outer` (an operand in `known`, an initializer, or a shape
        tensor of this context or one around it), as the value info of `name`."""
        if outer in known:
            return value_info(name, known[outer])
        for tensor in self.initializers:
            if tensor.name == outer:
                return helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims))
        ctx: LowerContext | None = self
        while ctx is not None:
            if outer in ctx._shape_cache.values():   # a Concat of one [1] tensor per dim, or one dim's tensor
                producer = next(n for n in ctx.nodes if outer in n.output)
                length = len(producer.input) if producer.op_type == "Concat" else 1
                return helper.make_tensor_value_info(name, onnx.TensorProto.INT64, [length])
            ctx = ctx.parent
        raise LoweringError(f"a loop body reads {outer!r} from outside and its type is unknown")

    def branch(self, build: Callable[[LowerContext], list[str]], types: Sequence[TensorType]) -> onnx.GraphProto:
        """A graph without inputs for an If branch: `build` emits its nodes through the context it is
        given and returns the names of its outputs, of dtypes `types` (their shapes are left out:
        the branches of one If may differ in them)."""
        child = LowerContext(self.graph, self.opset, [], parent=self)
        child._current = self._current
        outs = build(child)
        produced = {o for n in child.nodes for o in n.output}
        outs = [name if name in produced else child.emit("Identity", [name]) for name in outs]
        infos = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), None)
                 for name, t in zip(outs, types)]
        owner = self._current.name if self._current is not None else "if"
        return helper.make_graph(child.nodes, f"{owner}_branch", [], infos)

    def inline_branch(self, body: Graph, outer: Sequence[str], types: Sequence[TensorType]) -> onnx.GraphProto:
        """`body` (a Graph attribute of the node being lowered) as an If branch: no inputs, its inputs
        read from the outer values `outer`; outputs of dtypes `types` (shapes left out, as branch's)."""
        child = LowerContext(body, self.opset, list(outer), parent=self)
        child._current = self._current
        names: dict[ValueRef, str] = dict(zip(body.inputs, outer))
        child.lower_nodes(names)
        produced = {o for n in child.nodes for o in n.output}
        outs, used = [], set()
        for ref in body.outputs:
            name = names[ref]
            if name not in produced or name in used:
                name = child.emit("Identity", [name])
            used.add(name)
            outs.append(name)
        infos = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), None)
                 for name, t in zip(outs, types)]
        owner = self._current.name if self._current is not None else "if"
        return helper.make_graph(child.nodes, f"{owner}_branch", [], infos)

    # -- names -------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self._used_names:
            name, k = f"{hint}_{k}", k + 1
        self._used_names.add(name)
        return name

    def begin(self, node: Node | None) -> None:
        self._current = node

    # -- emission ----------------------------------------------------------------------------
    def emit(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs):
        """Add one ai.onnx node; returns its output name (or list of names when n_out > 1). Where the
        runtime has no kernel for the node's dtype, it is computed in a wider one (kernels.py)."""
        known = [self.dtypes.get(name) if name else None for name in inputs]
        wider = kernels.widening(op_type, self.opset, known, attrs)
        if wider is not None:
            return self._widened(op_type, inputs, n_out, attrs, *wider)
        outs = self._emit(op_type, inputs, n_out, attrs)
        for name, dtype in zip(outs, kernels.output_dtypes(op_type, self.opset, known, attrs, n_out)):
            if dtype is not None:
                self.dtypes[name] = dtype
        return outs[0] if n_out == 1 else outs

    def _widened(self, op_type: str, inputs: list[str], n_out: int, attrs: dict, param: str, narrow: np.dtype,
                 wide: np.dtype):
        """An op_type node computed in `wide`: its operands of type `param` (of dtype `narrow`) cast
        to `wide` before it, its results of that type cast back after it."""
        formal_in, formal_out = kernels.formal_params(op_type, self.opset, len(inputs), n_out)
        to_wide, to_narrow = helper.np_dtype_to_tensor_dtype(wide), helper.np_dtype_to_tensor_dtype(narrow)
        cast = [self.emit("Cast", [name], to=to_wide) if name and formal == param else name
                for name, formal in zip(inputs, formal_in)]
        outs = self.emit(op_type, cast, n_out, **attrs)
        outs = [outs] if n_out == 1 else list(outs)
        outs = [self.emit("Cast", [name], to=to_narrow) if formal == param else name
                for name, formal in zip(outs, formal_out)]
        return outs[0] if n_out == 1 else outs

    def _emit(self, op_type: str, inputs: list[str], n_out: int, attrs: dict) -> list[str]:
        owner = self._current
        hint = owner.name if owner is not None else op_type.lower()
        outputs = [self.fresh(hint) for _ in range(n_out)]
        doc = ""
        if owner is not None:
            doc = f"{owner.source} order={owner.order}" if owner.source else f"order={owner.order}"
            if op_type in NO_FLOAT64_CPU_KERNEL and self._touches_float64(owner):
                self.float64_ops.append(f"{op_type} in {owner.name}" + (f" ({owner.source})" if owner.source else ""))
            if CHECK_FLOAT64_ATTRIBUTES and self._touches_float64(owner):
                rounded = sorted(k for k, v in attrs.items() if _rounds_in_float32(v))
                assert not rounded, f"{op_type} for the float64 {owner.name} rounds attribute(s) {rounded} to float32"
        node = helper.make_node(op_type, list(inputs), outputs, name=outputs[0], doc_string=doc or None,
                                **{k: v for k, v in attrs.items() if v is not None})
        self.nodes.append(node)
        return outputs

    def pad(self, x: str, begins: Sequence[int], ends: Sequence[int], fill: str = "", mode: str = "constant") -> str:
        """An ONNX Pad of every axis of x (`begins`/`ends` hold one amount per axis). Its `axes`
        input lists every axis, in order: a partial list is permuted wrongly by onnxruntime's
        transpose optimizer (1.31), and with any `axes` input onnxruntime's Pad_Fusion leaves
        the Pad alone; that rule would merge zero padding into a following MaxPool, whose pads
        count as -inf, or into an AveragePool, which then refuses pads as large as its kernel.

        A negative amount removes elements. For a target without negative pads (the portable
        one: onnx's ReferenceEvaluator 1.23 refuses them) those become a Slice first and the Pad
        gets the rest (none: no Pad). ONNX Runtime's Pad also slices before it pads, in every mode."""
        rank = len(begins)
        if not self.target.negative_pads and min(0, *begins, *ends) < 0:
            cut = [a for a in range(rank) if begins[a] < 0 or ends[a] < 0]
            x = self.emit("Slice", [x, self.int64s([max(0, -begins[a]) for a in cut]),
                                    self.int64s([ends[a] if ends[a] < 0 else self.INT64_MAX for a in cut]),
                                    self.int64s(cut)])
            begins, ends = [max(0, b) for b in begins], [max(0, e) for e in ends]
            if not any(begins) and not any(ends):
                return x
        return self.emit("Pad", [x, self.int64s([*begins, *ends]), fill, self.int64s(range(rank))], mode=mode)

    # Slice bounds past either end of any axis.
    INT64_MAX = 2 ** 63 - 1

    # A Slice end for a negative step that means "past the first element".
    INT64_MIN = -(2 ** 63)

    def reverse(self, x: str, axes: Sequence[int], sizes: Sequence) -> str:
        """x with each of `axes` (of `sizes`, static or symbolic) in reverse order: a Slice from the
        last element down to INT64_MIN. Axes of size 1 are left out, and x is returned as it is
        when none is left: reversing them changes nothing, and ONNX Runtime copies a Slice with a
        negative step element by element (a 1x1 kernel's flip, in a convolution's input gradient)."""
        axes = [axis for axis, size in zip(axes, sizes, strict=True) if size != 1]
        if not axes:
            return x
        n = len(axes)
        return self.emit("Slice", [x, self.int64s([-1] * n), self.int64s([self.INT64_MIN] * n), self.int64s(axes),
                                   self.int64s([-1] * n)])

    def is_read(self, node: Node, index: int) -> bool:
        """Whether output `index` of `node` is a graph output or another node's operand (ops with
        optional outputs emit them only then)."""
        ref = node.out(index)
        return ref in self.graph.outputs or any(ref in c.inputs for c in self.graph.consumers(node.id))

    def _touches_float64(self, node: Node) -> bool:
        types = [self.graph.type_of(r) for r in node.inputs] + node.outputs
        return any(t.dtype == np.float64 for t in types)

    def const(self, value, dtype=None, name: str | None = None) -> str:
        """An initializer holding `value`, deduplicated by content; a named one (a parameter) is
        its own initializer, called `name` where that is free."""
        arr = np.asarray(value, dtype=dtype)
        arr = np.ascontiguousarray(arr).reshape(arr.shape)   # ascontiguousarray makes 0-d arrays 1-d
        key = (arr.dtype.str, arr.shape, arr.tobytes(), name)   # a copy of a named constant (recompute) shares it
        emitted = self._const_cache.get(key)
        if emitted is None:
            emitted = self.fresh(name if name is not None else f"const_{self._unnamed[0]}")
            self._unnamed[0] += name is None
            self.initializers.append(numpy_helper.from_array(arr, emitted))
            self._const_cache[key] = emitted
            self.dtypes[emitted] = arr.dtype
        return emitted

    def int64s(self, values) -> str:
        return self.const(self._int64(values).reshape(-1))

    def fill(self, shape, value, dtype) -> str:
        """`value` everywhere in a tensor of `shape` (static or symbolic) and `dtype`, made at run
        time: a ConstantOfShape, whose value is an attribute, so the file stores one element."""
        value_attr = numpy_helper.from_array(np.full(1, value, dtype), "value")
        return self.emit("ConstantOfShape", [self.shape_tensor(shape)], value=value_attr)

    def _int64(self, values) -> np.ndarray:
        """Sizes as int64, a LoweringError naming the node being lowered for one that does not fit (a
        shape of more than 2**63 - 1 elements, which no runtime counts)."""
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:
            node = self._current
            where = f"{node.op} (at {node.source or 'an unknown line'}): " if node is not None else ""
            raise LoweringError(f"{where}the sizes {values} do not fit in int64: a tensor of 2**63 or more elements "
                                "cannot be computed") from None

    def dim_scalar(self, size) -> str:
        """A dim, static or symbolic, as a 0-d int64 tensor (a count for Range, Mod, Equal)."""
        if isinstance(size, int):
            return self.const(self._int64(size))
        return self.emit("Reshape", [self.shape_tensor((size,)), self.int64s([])])

    def index_range(self, size) -> str:
        """0, 1, ..., size - 1 as int64 (size static or symbolic)."""
        return self.emit("Range", [self.dim_scalar(0), self.dim_scalar(size), self.dim_scalar(1)])

    def _computes(self, shape) -> bool:
        """Whether every symbol of `shape` comes from an input of this context's graph or an outer one."""
        return all(s in self._symbol_sources or self.parent is not None and self.parent._computes((s,))
                   for d in shape if isinstance(d, str) for s in dims.symbols(d))

    def shape_tensor(self, shape) -> str:
        """A 1-D int64 tensor holding `shape`, computed at run time where dims are symbolic (in the
        outermost graph that can, so that a loop body reads it instead of computing it at each step)."""
        shape = tuple(shape)
        if dims.is_static(shape):
            return self.int64s(shape)
        local = any(s in self._local_symbols for d in shape if isinstance(d, str) for s in dims.symbols(d))
        if self.parent is not None and not local and self.parent._computes(shape):
            saved, self.parent._current = self.parent._current, None
            try:
                return self.parent.shape_tensor(shape)
            finally:
                self.parent._current = saved
        if shape in self._shape_cache:
            return self._shape_cache[shape]
        saved, self._current = self._current, None
        parts = [self.int64s([d]) if isinstance(d, int) else self._dim_tensor(d) for d in shape]
        name = self.emit("Concat", parts, axis=0) if len(parts) > 1 else parts[0]
        self._current = saved
        self._shape_cache[shape] = name
        return name

    def bind_symbol(self, symbol: str, count: str) -> None:
        """Make `count` (a [1] int64 tensor of this graph) the run-time value of `symbol`, a dim no input
        carries: the number of steps a while loop took (ops/control.py). It takes precedence over an
        outer graph's symbol of the same name (the loop's copies in other bodies)."""
        self._symbol_sources[symbol] = (count, 0)
        self._shape_cache[("dim", symbol)] = count
        self._local_symbols.add(symbol)

    def _dim_tensor(self, dim) -> str:
        key = ("dim", dim)
        if key in self._shape_cache:
            return self._shape_cache[key]
        if dim in self._symbol_sources:
            source, axis = self._symbol_sources[dim]
            name = self.emit("Shape", [source], start=axis, end=axis + 1)
        elif "*" not in dim:
            if self.parent is None or not self.parent._computes((dim,)):
                raise LoweringError(f"symbolic dim {dim!r} does not appear in any graph input's shape")
            # a body whose inputs carry it only in products ("3*batch"): the enclosing graph's, read
            # from the outer scope
            saved, self.parent._current = self.parent._current, None
            try:
                name = self.parent._dim_tensor(dim)
            finally:
                self.parent._current = saved
        else:
            factors = dim.split("*")
            name = self.int64s([int(factors[0])]) if factors[0].isdigit() else self._dim_tensor(factors[0])
            for f in factors[1:]:
                other = self.int64s([int(f)]) if f.isdigit() else self._dim_tensor(f)
                name = self.emit("Mul", [name, other])
        self._shape_cache[key] = name
        return name


def _renamed(tensor: onnx.TensorProto, name: str) -> onnx.TensorProto:
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy


def _rename_reads(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Make the nodes of `graph` and of the graphs nested in them read names[x] wherever they read x."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in names:
                node.input[i] = names[name]
        for body in subgraphs(node):
            _rename_reads(body, names)
