"""Constant folding: a node whose operands are all constants becomes a constant, computed
with the op's numpy reference. Bounded: results larger than MAX_FOLD_ELEMENTS are left to
the runtime, so folding never bloats the model with big initializers."""
from __future__ import annotations

import numpy as np

from ..ir import dims
from ..ir.graph import Graph
from ..ir.registry import get_op, is_random
from .base import PassResult

MAX_FOLD_ELEMENTS = 4096


def fold_constants(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        if node.op in ("input", "constant") or is_random(node):
            continue
        if len(node.outputs) != 1 or not dims.is_static(node.outputs[0].shape):
            continue
        if int(dims.product(node.outputs[0].shape)) > MAX_FOLD_ELEMENTS:
            continue
        operands = [graph.nodes[r.node] for r in node.inputs]
        if not all(o.op == "constant" for o in operands):
            continue
        value = get_op(node.op).reference(*[o.attrs["value"] for o in operands], **node.attrs)
        value = np.asarray(value, dtype=node.outputs[0].dtype)
        graph.replace_inputs(node, [])
        node.op, node.attrs = "constant", {"value": value}
        changed = True
    return PassResult(graph, changed)
