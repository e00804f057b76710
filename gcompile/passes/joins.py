"""A sum of slice_scatters that together place pieces side by side along one axis becomes one
concatenation of the pieces.

A value read by several slices (q, k and v selected from one projection, a chunk, a split) gets
as its cotangent the sum of every slice's gradient, each its piece padded with zeros to the
whole value's shape (ops/indexing.py: slice_scatter). Where the pieces are contiguous slices of
one axis that together cover it, one piece each, the sum is their concatenation in order: one
write of the result instead of a zero-padded copy per piece and the sum of those (three
full-size tensors and their sum for a ViT's attention input, per layer).
"""
from __future__ import annotations

from ..ir.graph import Graph, Node
from .base import PassResult


def _pieces(graph: Graph, node: Node) -> tuple[int, list] | None:
    """(axis, the pieces' refs in the axis's order) where `node` sums slice_scatters that cover
    one axis of its shape side by side, with no overlap and no gap; else None."""
    if node.op not in ("add", "add_n") or len(node.inputs) < 2:
        return None
    shape = node.outputs[0].shape
    placed = []
    for ref in node.inputs:
        producer = graph.nodes[ref.node]
        a = producer.attrs
        if producer.op != "slice_scatter" or len(a.get("axes", ())) != 1 or a["steps"] != (1,) \
                or tuple(a["shape"]) != tuple(shape) or producer.outputs[0] != node.outputs[0]:
            return None
        placed.append((a["axes"][0], a["starts"][0], a["ends"][0], producer.inputs[0]))
    axis = placed[0][0]
    if any(p[0] != axis for p in placed) or not isinstance(shape[axis], int):
        return None
    placed.sort(key=lambda p: p[1])
    reach = 0
    for _, start, end, _ in placed:
        if start != reach:
            return None
        reach = end
    return (axis, [p[3] for p in placed]) if reach == shape[axis] else None


def join_slice_scatters(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        found = _pieces(graph, node)
        if found is None:
            continue
        axis, pieces = found
        graph.replace_inputs(node, pieces)      # the pieces were made before the sum: ids stay in order
        node.op, node.attrs = "concat", {"axis": axis}
        changed = True
    return PassResult(graph, changed)
