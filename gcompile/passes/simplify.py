"""Algebraic simplification: identities that hold for every value, NaN and Inf included.

x+0, x-0, x*1, x/1, -(-x), transpose∘transpose, reshape∘reshape, no-op reshape/expand/
cast/identity/stop_gradient, one-term sums and where with a constant condition. A rewrite
only applies when the surviving value has exactly the node's type (dtype and shape), so
broadcasting is never lost.
(x*0 and x-x are not rewritten: they are not 0 when x is Inf or NaN.)
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node, ValueRef
from .base import PassResult, replace_uses


def _constant_equal_to(graph: Graph, ref: ValueRef, value: float) -> bool:
    """Whether `ref` is `value` everywhere: a constant or fill, possibly reshaped, broadcast or cast
    (as the ones a gradient seed leaves behind)."""
    node = graph.nodes[ref.node]
    while node.op in ("reshape", "expand", "cast"):
        node = graph.nodes[node.inputs[0].node]
    if node.op == "constant":
        arr = node.attrs["value"]
        return arr.size > 0 and bool(np.all(arr == value))
    return node.op == "fill" and node.attrs["value"] == value


def _same_type(graph: Graph, ref: ValueRef, node: Node) -> bool:
    return graph.type_of(ref) == node.outputs[0]


def _neutral_operand(graph: Graph, node: Node, value: float, positions) -> ValueRef | None:
    """The other operand, when operand at one of `positions` is the constant `value`."""
    for pos in positions:
        other = node.inputs[1 - pos]
        if _constant_equal_to(graph, node.inputs[pos], value) and _same_type(graph, other, node):
            return other
    return None


def _passthrough(graph: Graph, node: Node) -> ValueRef | None:
    """The value this node can be replaced by, or None."""
    op = node.op
    if op in ("add",):
        return _neutral_operand(graph, node, 0, (0, 1))
    if op == "sub":
        return _neutral_operand(graph, node, 0, (1,))
    if op == "mul":
        return _neutral_operand(graph, node, 1, (0, 1))
    if op == "div":
        return _neutral_operand(graph, node, 1, (1,))
    if op in ("identity", "stop_gradient", "reshape", "expand", "cast", "add_n") and len(node.inputs) == 1:
        return node.inputs[0] if _same_type(graph, node.inputs[0], node) else None
    if op == "neg":
        inner = graph.nodes[node.inputs[0].node]
        return inner.inputs[0] if inner.op == "neg" else None
    if op == "where":
        for value, branch in ((True, 1), (False, 2)):
            if _constant_equal_to(graph, node.inputs[0], value) and _same_type(graph, node.inputs[branch], node):
                return node.inputs[branch]
    return None


def _fuse_with_producer(graph: Graph, node: Node) -> bool:
    """transpose∘transpose -> one transpose; reshape∘reshape -> one reshape."""
    if node.op not in ("transpose", "reshape"):
        return False
    inner = graph.nodes[node.inputs[0].node]
    if inner.op != node.op:
        return False
    if node.op == "transpose":
        node.attrs = {"perm": tuple(inner.attrs["perm"][p] for p in node.attrs["perm"])}
    graph.replace_inputs(node, [inner.inputs[0]])
    return True


def simplify(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        if node.op in ("input", "constant"):
            continue
        changed |= _fuse_with_producer(graph, node)
        replacement: ValueRef | None
        if node.op == "transpose" and node.attrs["perm"] == tuple(range(len(node.attrs["perm"]))):
            replacement = node.inputs[0]
        else:
            replacement = _passthrough(graph, node)
        if replacement is not None:
            replace_uses(graph, node.out(0), replacement)
            changed = True
    return PassResult(graph, changed)
