"""Constant folding: a node whose operands are all known (constants, or empty) becomes a constant, computed
with the op's numpy reference. Bounded: results larger than MAX_FOLD_ELEMENTS are left to
the runtime, so folding never bloats the model with big initializers.

No weight is stored twice: a copy of a constant (an ELEMENT_COPY op: transpose, reshape, cast,
...) is not folded while the constant itself stays in the graph for another reader, unless the
copy is tiny. A gradient reads each weight W as it is and transposed (g @ Wᵀ); folding Wᵀ would
store every weight twice (a 500-layer 64x64 MLP's gradient model grew from 7.9 to 16.3 MiB).
Left unfolded, the Gemm pass reads W through transB instead, and onnxruntime folds whatever
copy remains in memory when it loads the model. A named constant (a module's parameter) is not
folded away either, so the model keeps it as the initializer of that name."""
from __future__ import annotations

import numpy as np

from ..ir import dims
from ..ir.graph import Graph
from ..ir.registry import Trait, get_op, has_trait, is_random
from .base import PassResult

MAX_FOLD_ELEMENTS = 4096
MAX_COPY_ELEMENTS = 64   # a constant's copy this small is folded even while the constant stays


def _duplicates_a_kept_constant(graph: Graph, node, operands) -> bool:
    """Whether folding `node` would store a second copy of a constant that other readers keep."""
    if not has_trait(node.op, Trait.ELEMENT_COPY) or int(dims.product(node.outputs[0].shape)) <= MAX_COPY_ELEMENTS:
        return False
    source = operands[0]
    kept_as_output = any(r.node == source.id for r in graph.outputs)
    return kept_as_output or any(c.id != node.id for c in graph.consumers(source.id))


def _known_value(graph: Graph, ref):
    """The value of an operand known before the model runs, None if it is not: an unnamed
    constant's, or an empty array for a value of static shape with no elements (an empty batch
    fixed at trace time carries no data, so what is computed from it alone is known too; ONNX
    Runtime 1.31 crashes the process, SIGFPE, on some optimised graphs of such empty tensors)."""
    producer = graph.nodes[ref.node]
    if producer.op == "constant" and "name" not in producer.attrs:
        return producer.attrs["value"]
    t = graph.type_of(ref)
    if dims.is_static(t.shape) and 0 in t.shape:
        return np.zeros(t.shape, t.dtype)
    return None


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
        values = [_known_value(graph, r) for r in node.inputs]
        if any(v is None for v in values) or _duplicates_a_kept_constant(graph, node, operands):
            continue
        value = get_op(node.op).reference(*values, **node.attrs)
        if isinstance(value, (tuple, list)):   # an op that can have several outputs, here with one (a loop)
            value, = value
        value = np.asarray(value, dtype=node.outputs[0].dtype)
        if value.shape != node.outputs[0].shape:
            continue                           # never fold into a value of another shape: leave it to the runtime
        graph.replace_inputs(node, [])
        node.op, node.attrs = "constant", {"value": value}
        changed = True
    return PassResult(graph, changed)
