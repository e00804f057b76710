"""The IR: a Graph of Nodes, each one op application, stored in a networkx DiGraph.

A node keeps its operands as an ordered list of ValueRef(producer id, output index),
so `x * x` has two operands even though the DiGraph holds a single edge; the DiGraph
exists for topology queries (ancestors, descendants, consumers). Node ids grow with
creation and a node only reads values created before it, so id order is a topological
order; passes keep that invariant (Graph.lint checks it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from .dims import Shape, format_shape


class ValueRef(NamedTuple):
    """One output of one node."""
    node: int
    index: int = 0  # type: ignore[assignment]  # the output index; shadows tuple.index, never called on refs


@dataclass(frozen=True)
class TensorType:
    dtype: np.dtype
    shape: Shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}{format_shape(self.shape)}"


def tensor_type(dtype, shape) -> TensorType:
    return TensorType(np.dtype(dtype), tuple(shape))


@dataclass
class Node:
    id: int
    name: str
    op: str
    inputs: list[ValueRef]
    attrs: dict[str, Any]
    outputs: list[TensorType]
    order: int = 0          # 0 forward, 1 backward, 2 double backward, ...
    source: str = ""        # "file.py:12" of the user code that created it
    recompute: bool = False  # inside a gc.checkpoint region: recomputed for the backward (passes/recompute.py)
    copy: bool = False       # such a node computed again for the backward: lowering never merges it with another

    def out(self, index: int = 0) -> ValueRef:
        return ValueRef(self.id, index)


@dataclass(repr=False)
class Graph:
    """Owns the nodes; `inputs` and `outputs` are ValueRefs in the caller's order.

    Read nodes through `nodes` (id -> Node), `topo_order`, `consumers` and `ancestors`. Add, remove,
    rewire and renumber nodes only through the methods here, which keep the DiGraph in step with
    the operand lists and the ids in creation order (a pass may still change a node's op and attrs
    in place).

    A loop's body is a Graph too, held in its node's attributes (see `bodies`): its inputs and
    outputs are the step's, and passes rewrite it like any graph. Bodies may be shared between
    nodes (a copied node shares its attributes), so code that changes a body's inputs or outputs
    gives the node a new Graph instead of editing the old one.
    """
    nodes: dict[int, Node] = field(default_factory=dict)
    inputs: list[ValueRef] = field(default_factory=list)
    outputs: list[ValueRef] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    # The nodes are to run in id order (set by passes.optimize: a large planned peak, ir/memory.py,
    # or a memory budget); lowering then keeps that order (lowering/order.py).
    run_in_order: bool = False
    _dag: nx.DiGraph = field(default_factory=nx.DiGraph, repr=False)
    _next_id: int = 0
    _name_counts: dict[str, int] = field(default_factory=dict, repr=False)

    def add_node(self, op: str, inputs: list[ValueRef], attrs: dict, outputs: list[TensorType],
                 order: int = 0, source: str = "", name: str | None = None) -> Node:
        if name is None:   # readable: "mul_3" forward, "grad1_mul_0" in a first-order backward
            key = f"grad{order}_{op}" if order else op
            count = self._name_counts.get(key, 0)
            self._name_counts[key] = count + 1
            name = f"{key}_{count}"
        node = Node(self._next_id, name, op, list(inputs), dict(attrs), list(outputs), order, source)
        self._next_id += 1
        self.nodes[node.id] = node
        self._dag.add_node(node.id)
        for ref in node.inputs:
            self._dag.add_edge(ref.node, node.id)
        return node

    def type_of(self, ref: ValueRef) -> TensorType:
        return self.nodes[ref.node].outputs[ref.index]

    def topo_order(self) -> list[Node]:
        """Nodes in creation order, which is topological: see `lint`."""
        return [self.nodes[i] for i in sorted(self.nodes)]

    def lint(self) -> None:
        """Check the invariants every pass keeps: operands exist and were created before their
        consumer (so id order is a topological order), and the DiGraph mirrors the operand lists."""
        for node in self.nodes.values():
            for ref in node.inputs:
                if ref.node not in self.nodes or ref.node >= node.id:
                    raise AssertionError(f"{node.name} reads {ref}, which is missing or not created before it")
                if not self._dag.has_edge(ref.node, node.id):
                    raise AssertionError(f"edge {ref.node} -> {node.name} missing from the DiGraph")
        for ref in self.outputs:
            if ref.node not in self.nodes:
                raise AssertionError(f"graph output {ref} was removed")
        for ref in self.inputs:
            if ref.node not in self.nodes or self.nodes[ref.node].op != "input":
                raise AssertionError(f"graph input {ref} is not an input node")
        for node in self.nodes.values():
            for body in bodies(node):
                try:
                    body.lint()
                except AssertionError as err:
                    raise AssertionError(f"in the body of {node.name}: {err}") from None

    def replace_inputs(self, node: Node, new_inputs: list[ValueRef]) -> None:
        for ref in node.inputs:
            if self._dag.has_edge(ref.node, node.id):
                self._dag.remove_edge(ref.node, node.id)
        node.inputs = list(new_inputs)
        for ref in node.inputs:
            self._dag.add_edge(ref.node, node.id)

    def remove_node(self, node_id: int) -> None:
        self._dag.remove_node(node_id)
        del self.nodes[node_id]

    # -- regions of nodes recorded after a point (the gradient engine, gc.checkpoint) ----------------
    def mark(self) -> int:
        """An opaque position in the recording: the nodes added after it are `nodes_since(mark)`.
        Valid until `renumber`."""
        return self._next_id

    def nodes_since(self, mark: int) -> list[Node]:
        """The nodes added after `mark` and still present, in creation order."""
        return [self.nodes[i] for i in range(mark, self._next_id) if i in self.nodes]

    def prune_since(self, mark: int, keep: list[ValueRef]) -> list[Node]:
        """Remove the nodes added after `mark` that none of `keep` depends on; return them.

        The gradient engine records a VJP rule's whole result and keeps only what the wanted
        gradients need."""
        kept: set[int] = set()
        stack = [r.node for r in keep if r.node >= mark]
        while stack:
            i = stack.pop()
            if i not in kept:
                kept.add(i)
                stack.extend(r.node for r in self.nodes[i].inputs if r.node >= mark)
        dropped = [n for n in reversed(self.nodes_since(mark)) if n.id not in kept]
        for node in dropped:
            self.remove_node(node.id)
        return dropped

    def renumber(self, order: list[int]) -> None:
        """Give the nodes ids 0, 1, ... in `order` (every node id once, a topological order): a
        pass that added nodes meant to run before existing ones (passes/recompute.py) restores
        the id order invariant with it. Operand lists, graph inputs and outputs follow; marks expire."""
        if len(order) != len(self.nodes) or set(order) != self.nodes.keys():
            raise ValueError("renumber needs every node id exactly once")
        new_id = {old: new for new, old in enumerate(order)}
        nodes = [self.nodes[i] for i in order]
        self.nodes.clear()
        self._dag.clear()
        for node in nodes:
            node.id = new_id[node.id]
            node.inputs = [ValueRef(new_id[r.node], r.index) for r in node.inputs]
            self.nodes[node.id] = node
            self._dag.add_node(node.id)
            self._dag.add_edges_from((r.node, node.id) for r in node.inputs)
        self.inputs = [ValueRef(new_id[r.node], r.index) for r in self.inputs]
        self.outputs = [ValueRef(new_id[r.node], r.index) for r in self.outputs]
        self._next_id = len(nodes)

    # -- topology queries ------------------------------------------------------------------------------
    def ancestors(self, node_id: int) -> set[int]:
        """Ids of the nodes `node_id` depends on (itself excluded)."""
        return nx.ancestors(self._dag, node_id)

    def consumers(self, node_id: int) -> list[Node]:
        """The nodes reading an output of `node_id`, in id order."""
        return [self.nodes[i] for i in sorted(self._dag.successors(node_id))]

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"Graph({len(self.nodes)} nodes, {len(self.inputs)} inputs, {len(self.outputs)} outputs)"

    def count_by_order(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for node in self.nodes.values():
            if node.op not in ("input", "constant"):
                counts[node.order] = counts.get(node.order, 0) + 1
        return dict(sorted(counts.items()))

    def __str__(self) -> str:
        lines = []
        for node in self.topo_order():
            args = ", ".join(f"{self.nodes[r.node].name}" + (f"[{r.index}]" if r.index else "")
                             for r in node.inputs)
            outs = ", ".join(str(t) for t in node.outputs)
            attrs = {k: v for k, v in node.attrs.items() if k != "value"}
            lines.append(f"{node.name}: {outs} = {node.op}({args}){' ' + str(attrs) if attrs else ''}")
        return "\n".join(lines)


def bodies(node: Node) -> list[Graph]:
    """The graphs held in a node's attributes (a loop's body), in attribute order."""
    return [v for v in node.attrs.values() if isinstance(v, Graph)]


def extract(graph: Graph, inputs: list[ValueRef], outputs: list[ValueRef]) -> Graph:
    """A new Graph computing `outputs` from `inputs` (values of `graph`, each produced by any node):
    one input node per entry of `inputs`, then copies of the nodes between them, in id order.
    Loop rules cut bodies apart with it. Raises ValueError when an output also depends on an
    input node of `graph` that is not in `inputs`."""
    stop = set(inputs)
    needed: set[int] = set()
    stack = [r for r in outputs if r not in stop]
    while stack:
        ref = stack.pop()
        if ref.node in needed:
            continue
        node = graph.nodes[ref.node]
        if node.op == "input":
            raise ValueError(f"{node.name} is needed but not among the inputs")
        needed.add(ref.node)
        stack.extend(r for r in node.inputs if r not in stop and r.node not in needed)
    new = Graph()
    env: dict[ValueRef, ValueRef] = {}
    for i, ref in enumerate(inputs):
        t = graph.type_of(ref)
        env[ref] = new.add_node("input", [], {"name": f"arg_{i}", "type": t}, [t]).out(0)
    new.inputs = [env[ref] for ref in inputs]
    for node_id in sorted(needed):
        node = graph.nodes[node_id]
        copy = new.add_node(node.op, [env[r] for r in node.inputs], node.attrs, node.outputs, node.order,
                            node.source, node.name)
        copy.recompute = node.recompute
        for i in range(len(node.outputs)):
            env.setdefault(node.out(i), copy.out(i))
    new.outputs = [env[ref] for ref in outputs]
    return new
