"""Common-subexpression elimination: nodes with the same op, operands and attributes are
merged into the first one (random ops never are). Small constants are merged by content."""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from ..ir.registry import is_random
from .base import PassResult, replace_outputs, replace_uses

_MAX_CONSTANT_BYTES = 1 << 16   # larger constants are compared by identity only


def _attr_key(value):
    if isinstance(value, np.ndarray):
        if value.nbytes > _MAX_CONSTANT_BYTES:
            return ("array-id", id(value))
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _attr_key(v)) for k, v in value.items()))
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, Graph):
        return _graph_key(value)
    return value


def _graph_key(graph: Graph) -> tuple:
    """A loop body by structure: ops, operand positions, attributes and types, node ids and names aside,
    so two loops with equal bodies and operands merge."""
    position: dict[int, int] = {}
    rows: list = []
    for k, node in enumerate(graph.topo_order()):
        position[node.id] = k
        rows.append(_node_key(node, position))
    refs = (tuple((position[r.node], r.index) for r in refs) for refs in (graph.inputs, graph.outputs))
    return ("graph", tuple(rows), *refs)


def _node_key(node: Node, position: dict[int, int]) -> tuple:
    attrs = node.attrs["type"] if node.op == "input" else _attr_key(node.attrs)
    return (node.op, tuple((position[r.node], r.index) for r in node.inputs), attrs, tuple(map(str, node.outputs)))


def eliminate_common_subexpressions(graph: Graph) -> PassResult:
    seen: dict = {}
    replaced: dict = {}
    changed = False
    for node in graph.topo_order():
        if node.op == "input" or is_random(node):
            continue
        key = (node.op, tuple(node.inputs), _attr_key(node.attrs), node.outputs[0].dtype.str if node.outputs else None)
        first = seen.setdefault(key, node)
        if first is node:
            continue
        for i in range(len(node.outputs)):
            replace_uses(graph, node.out(i), first.out(i), outputs=False)
            replaced[node.out(i)] = first.out(i)
        first.order = min(first.order, node.order)
        graph.remove_node(node.id)
        changed = True
    replace_outputs(graph, replaced)
    return PassResult(graph, changed)
