"""Recompute (rematerialisation, ARCHITECTURE.md §9.4): trade compute for the memory reverse mode
keeps alive between the forward and the backward part.

A node read by nodes of a higher gradient order (its backward) keeps its output alive
until they run. This pass gives those consumers their own copy of the node, recorded at
their order and placed just before the first of them, so the forward original can be
freed once the forward is done with it. Copied are:
  - nodes marked by gc.checkpoint (their region's inputs and outputs stay kept);
  - with cheap=True, also cheap nodes (Trait.CHEAP: elementwise math, views, fills) whose
    operands are kept for the backward anyway (graph inputs, constants, values the
    backward reads directly, or other copied nodes), so copying never makes the backward
    keep a value it did not keep before.
Random ops (Trait.RANDOM, and loops holding one) are never copied (a copy would draw other
numbers). One copy is made per node and consumer order, shared by all consumers of that order.

A copy only depends on forward values, so a runtime free to reorder (onnxruntime is)
would run it early and keep its output as long as the original: nothing saved. So the
operands a group of copies reads from outside it pass through `after(x, token)`, which is
x but cannot run before `token`, the latest backward node already placed that depends on
the end of the forward; this keeps the copies in the backward, where they belong, and also stops
onnxruntime's CSE from merging them back. The graph is renumbered (Graph.renumber) so that id order stays
topological. Run it after the passes that merge equal nodes; it is idempotent.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, ValueRef
from ..ir.registry import Trait, has_trait, is_random
from .base import PassResult


def _candidates(graph: Graph, cheap: bool) -> set[int]:
    """Ids of the nodes whose higher-order uses get copies (see the module docstring)."""
    read_later = {r.node for n in graph.nodes.values() for r in n.inputs if graph.nodes[r.node].order < n.order}
    chosen: set[int] = set()
    for node in graph.topo_order():
        if node.op in ("input", "constant") or is_random(node):
            continue
        if node.recompute or cheap and has_trait(node.op, Trait.CHEAP) and all(
                graph.nodes[r.node].op in ("input", "constant") or r.node in chosen or r.node in read_later
                for r in node.inputs):
            chosen.add(node.id)
    return chosen


def _gradient_carriers(graph: Graph) -> dict[int, set[int]]:
    """Per order k >= 1: the nodes of order >= k that depend on the latest lower-order value the
    order-k part reads (in a backward, the end of the forward): a runtime cannot run them early."""
    carriers: dict[int, set[int]] = {}
    for k in sorted({n.order for n in graph.nodes.values() if n.order > 0}):
        last = max((r.node for n in graph.nodes.values() if n.order >= k for r in n.inputs
                    if graph.nodes[r.node].order < k and graph.nodes[r.node].op != "constant"), default=None)
        reached: set[int] = set()
        for node in graph.topo_order():
            if node.order >= k and any(r.node == last or r.node in reached for r in node.inputs):
                reached.add(node.id)
        carriers[k] = reached
    return carriers


def recompute(graph: Graph, cheap: bool = True) -> PassResult:
    chosen = _candidates(graph, cheap)
    if not chosen:
        return PassResult(graph, False)
    carriers = _gradient_carriers(graph)
    originals = graph.topo_order()
    sequence: list[int] = []            # node ids in the new topological order
    made: dict[tuple, Node] = {}        # ("copy", id, order) or ("after", ref, token) -> the node added
    rewired: dict[int, list[ValueRef]] = {}    # original node id -> its operands once copies exist
    latest: dict[int, int] = {}         # order -> latest gradient-carrying node placed at >= that order

    def place(key: tuple, node: Node) -> Node:
        made[key] = node
        sequence.append(node.id)
        return node

    def operand(ref: ValueRef, order: int) -> ValueRef:
        producer = graph.nodes[ref.node]
        if ref.node in chosen and producer.order < order:
            return copy(producer, order).out(ref.index)
        return ref

    def boundary(ref: ValueRef, order: int) -> ValueRef:
        """An outside operand of a copy, made to wait for the backward's progress."""
        token = latest.get(order)
        if token is None or graph.nodes[ref.node].op == "constant":
            return ref
        key = ("after", ref, token)
        if key not in made:
            place(key, graph.add_node("after", [ref, ValueRef(token)], {}, [graph.type_of(ref)], order,
                                      name=f"after{order}_{graph.nodes[ref.node].name}"))
        return made[key].out(0)

    def copy(node: Node, order: int) -> Node:
        key = ("copy", node.id, order)
        if key not in made:   # node.inputs are still the original operands: rewiring waits for the end
            operands = [operand(r, order) if r.node in chosen else boundary(r, order) for r in node.inputs]
            return place(key, graph.add_node(node.op, operands, node.attrs, node.outputs, order, node.source,
                                             f"re{order}_{node.name}"))
        return made[key]

    for node in originals:
        operands = [operand(r, node.order) for r in node.inputs]
        if operands != node.inputs:
            rewired[node.id] = operands
        sequence.append(node.id)
        for k, reached in carriers.items():
            if node.id in reached:
                latest[k] = node.id
    if not made:   # (an "after" is only ever made for a copy)
        return PassResult(graph, False)
    for node_id, operands in rewired.items():
        graph.replace_inputs(graph.nodes[node_id], operands)
    graph.renumber(sequence)
    return PassResult(graph, True)
