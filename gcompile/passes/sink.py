"""Sink: move a node that only one later node reads to just before that reader, where the move
frees more than it keeps (a graph that runs in its trace order: ir/memory.py, lowering/order.py).

In trace order a value lives from its node to its last reader. A node traced long before its only
reader (a tied embedding's product term, which the backward traces first and sums last; a mask
the forward makes for the backward) holds its output all that while. Moved to just before the
reader, it holds its output only there, and holds instead the operands it was the last to read,
from its old place to its new one. It moves where its output is larger than those operands:
then at every point between the two places the bytes alive fall, so the planned peak never
rises. Values of at least SINK_MIN_BYTES only (smaller moves are not worth reordering the
file for), static sizes only.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node
from ..ir.memory import nbytes
from ..ir.registry import is_random
from .base import PassResult

SINK_MIN_BYTES = 1 << 20


def sink_to_readers(graph: Graph) -> PassResult:
    """Move nodes as the module docstring says; graph ids are renumbered so that id order is the
    new order. Deterministic: nodes are visited from the last to the first, each one's place
    decided once, after every node that reads it."""
    nodes = graph.topo_order()
    # places are tuples compared in order: node i starts at (i, 0); a node moved before a node at
    # (..., k) takes (..., k - m, 0), m counting the nodes moved before that one (the later moved first)
    place: dict[int, tuple] = {node.id: (i, 0) for i, node in enumerate(nodes)}
    moved_before: dict[int, int] = {}
    steps_before = [0]        # nodes that run (not inputs or constants) before each position
    for node in nodes:
        steps_before.append(steps_before[-1] + (node.op not in ("input", "constant")))
    outputs = set(graph.outputs)
    moved = False
    for node in reversed(nodes):
        reader = _only_reader(graph, node, outputs)
        if reader is None:
            continue
        size = _bytes(node)
        if size is None or size < SINK_MIN_BYTES:
            continue
        target = place[reader.id]
        if steps_before[target[0]] == steps_before[place[node.id][0] + 1]:
            continue          # no node runs in between (only inputs and constants are placed there)
        kept = 0          # the operands whose last reader moves with it
        for ref in sorted(set(node.inputs), key=lambda r: (r.node, r.index)):
            if graph.nodes[ref.node].op in ("input", "constant") or ref in outputs:
                continue
            others = [place[c.id] for c in graph.consumers(ref.node) if c.id != node.id and ref in c.inputs]
            if not others or max(others) < target:
                extra = nbytes(graph.type_of(ref))
                kept += size if extra is None else extra
        if kept >= size:
            continue
        moved_before[reader.id] = moved_before.get(reader.id, 0) + 1
        place[node.id] = (*target[:-1], target[-1] - moved_before[reader.id], 0)
        moved = True
    if moved:
        graph.renumber(sorted(place, key=place.__getitem__))
    return PassResult(graph, moved)


def _only_reader(graph: Graph, node: Node, outputs: set) -> Node | None:
    """The one node reading `node`'s outputs, where there is one, no output of `node` is a graph
    output and `node` draws no random numbers; None otherwise."""
    if node.op in ("input", "constant") or any(node.out(i) in outputs for i in range(len(node.outputs))) \
            or is_random(node):
        return None
    readers = graph.consumers(node.id)
    return readers[0] if len(readers) == 1 else None


def _bytes(node: Node) -> int | None:
    total = 0
    for t in node.outputs:
        size = nbytes(t)
        if size is None:
            return None
        total += size
    return total
