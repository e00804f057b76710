"""Fuse 2-D matmul + bias (and transposed operands) into one gemm node, which lowers to
ONNX Gemm: onnxruntime's fastest dense kernel, and what its own fusions need symbolic
batch dims to find."""
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


def fuse_gemm(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        if node.op != "add" or len(node.outputs[0].shape) != 2:
            continue
        for pos in (0, 1):
            mm, bias = _producer(graph, node.inputs[pos]), node.inputs[1 - pos]
            if (mm.op != "matmul" or graph.type_of(node.inputs[pos]) != node.outputs[0]
                    or any(graph.type_of(r).ndim != 2 for r in mm.inputs)
                    or len(graph.consumers(mm.id)) != 1 or not _bias_fits(graph, bias, node.outputs[0].shape)):
                continue
            (a, trans_a), (b, trans_b) = (_untransposed(graph, r) for r in mm.inputs)
            graph.replace_inputs(node, [a, b, bias])
            node.op, node.attrs = "gemm", {"trans_a": trans_a, "trans_b": trans_b}
            changed = True
            break
    return PassResult(graph, changed)
