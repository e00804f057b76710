"""Turn 2-D matmuls into gemm nodes (lowered to ONNX Gemm): a following bias add, transposed
operands and a transposed result are folded into Gemm's C input and transA/transB flags,
so no Transpose is materialised. Backward graphs are full of these patterns (aᵀ·g, and
transposes of such products in double backward); onnxruntime's own fusions miss them
when dims are symbolic or a transpose sits on the output."""
from __future__ import annotations

from ..ir.graph import Graph, Node, ValueRef
from .base import PassResult


def _producer(graph: Graph, ref: ValueRef) -> Node:
    return graph.nodes[ref.node]


def _untransposed(graph: Graph, ref: ValueRef) -> tuple[ValueRef, bool]:
    node = _producer(graph, ref)
    if node.op == "transpose" and node.attrs["perm"] == (1, 0):
        return node.inputs[0], True
    return ref, False


def _bias_fits(graph: Graph, bias: ValueRef, out_shape) -> bool:
    """Gemm's C broadcasts one way onto (M, N): shapes (N,), (1, N), (M, N), (M, 1), ()."""
    shape = graph.type_of(bias).shape
    return len(shape) <= 2 and all(d == 1 or d == o for d, o in zip(shape[::-1], out_shape[::-1]))


def _to_gemm(graph: Graph, node: Node) -> bool:
    """matmul(a, b) with 2-D operands -> gemm, absorbing transposed operands."""
    if (node.op != "matmul" or node.outputs[0].dtype.kind != "f"     # ONNX Gemm is float-only
            or any(graph.type_of(r).ndim != 2 for r in node.inputs)):
        return False
    (a, trans_a), (b, trans_b) = (_untransposed(graph, r) for r in node.inputs)
    graph.replace_inputs(node, [a, b])
    node.op, node.attrs = "gemm", {"trans_a": trans_a, "trans_b": trans_b}
    return True


def _only_consumer(graph: Graph, producer: Node, node: Node) -> bool:
    return [c.id for c in graph.consumers(producer.id)] == [node.id] and producer.id not in {
        r.node for r in graph.outputs}


def _absorb_bias(graph: Graph, node: Node) -> bool:
    """add(gemm(a, b), c) -> gemm(a, b, c) when c broadcasts onto the product (a bias, or another
    term of a sum of cotangents, which Gemm then accumulates for free)."""
    if node.op not in ("add", "add_n") or len(node.inputs) != 2:
        return False
    for pos in (0, 1):
        gemm, bias = graph.nodes[node.inputs[pos].node], node.inputs[1 - pos]
        if (gemm.op == "gemm" and len(gemm.inputs) == 2 and graph.type_of(node.inputs[pos]) == node.outputs[0]
                and _only_consumer(graph, gemm, node) and _bias_fits(graph, bias, node.outputs[0].shape)):
            graph.replace_inputs(node, gemm.inputs + [bias])
            node.op, node.attrs = "gemm", dict(gemm.attrs)
            return True
    return False


def _absorb_output_transpose(graph: Graph, node: Node) -> bool:
    """transpose(gemm(a, b)) -> gemm(b, a) with both flags flipped: (AB)ᵀ = BᵀAᵀ."""
    if node.op != "transpose" or node.attrs["perm"] != (1, 0):
        return False
    gemm = graph.nodes[node.inputs[0].node]
    if gemm.op != "gemm" or len(gemm.inputs) != 2 or not _only_consumer(graph, gemm, node):
        return False
    graph.replace_inputs(node, [gemm.inputs[1], gemm.inputs[0]])
    node.op, node.attrs = "gemm", {"trans_a": not gemm.attrs["trans_b"], "trans_b": not gemm.attrs["trans_a"]}
    return True


def fuse_gemm(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        changed |= _to_gemm(graph, node) or _absorb_bias(graph, node) or _absorb_output_transpose(graph, node)
    return PassResult(graph, changed)
