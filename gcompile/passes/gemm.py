"""Turn 2-D matmuls into gemm nodes (lowered to ONNX Gemm): a following bias add, transposed
operands and a transposed result are folded into Gemm's C input and transA/transB flags,
so no Transpose is materialised. Backward graphs are full of these patterns (aᵀ·g, and
transposes of such products in double backward); onnxruntime's own fusions miss them
when dims are symbolic or a transpose sits on the output."""
from __future__ import annotations

from ..ir.dtypes import is_float
from ..ir.graph import Graph, Node, TensorType, ValueRef
from .base import PassResult, only_consumer


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
    if (node.op != "matmul" or not is_float(node.outputs[0].dtype)     # ONNX Gemm is float-only
            or any(graph.type_of(r).ndim != 2 for r in node.inputs)):
        return False
    (a, trans_a), (b, trans_b) = (_untransposed(graph, r) for r in node.inputs)
    graph.replace_inputs(node, [a, b])
    node.op, node.attrs = "gemm", {"trans_a": trans_a, "trans_b": trans_b}
    return True


def _absorb_bias(graph: Graph, node: Node) -> bool:
    """add(gemm(a, b), c) -> gemm(a, b, c) when c broadcasts onto the product (a bias, or another
    term of a sum of cotangents, which Gemm then accumulates for free)."""
    if node.op not in ("add", "add_n") or len(node.inputs) != 2:
        return False
    for pos in (0, 1):
        gemm, bias = graph.nodes[node.inputs[pos].node], node.inputs[1 - pos]
        if (gemm.op == "gemm" and len(gemm.inputs) == 2 and graph.type_of(node.inputs[pos]) == node.outputs[0]
                and only_consumer(graph, gemm, node) and _bias_fits(graph, bias, node.outputs[0].shape)):
            graph.replace_inputs(node, gemm.inputs + [bias])
            node.op, node.attrs = "gemm", dict(gemm.attrs)
            return True
    return False


def _absorb_output_transpose(graph: Graph, node: Node) -> bool:
    """transpose(gemm(a, b)) -> gemm(b, a) with both flags flipped: (AB)ᵀ = BᵀAᵀ."""
    if node.op != "transpose" or node.attrs["perm"] != (1, 0):
        return False
    gemm = graph.nodes[node.inputs[0].node]
    if gemm.op != "gemm" or len(gemm.inputs) != 2 or not only_consumer(graph, gemm, node):
        return False
    graph.replace_inputs(node, [gemm.inputs[1], gemm.inputs[0]])
    node.op, node.attrs = "gemm", {"trans_a": not gemm.attrs["trans_b"], "trans_b": not gemm.attrs["trans_a"]}
    return True


def fuse_gemm(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        changed |= _to_gemm(graph, node) or _absorb_bias(graph, node) or _absorb_output_transpose(graph, node)
    return PassResult(graph, changed)


def _contraction_axes(gemm: Node) -> tuple[int, int]:
    """The axis of each operand that a gemm contracts (A's columns of op(A), B's rows of op(B))."""
    return (0 if gemm.attrs["trans_a"] else 1), (1 if gemm.attrs["trans_b"] else 0)


def _product_terms(graph: Graph, node: Node) -> list[Node]:
    """The gemm terms of an add_n that can become one product: two operands, the same flags and
    output type, read only by this add_n, static contraction sizes, distinct operands."""
    by_flags: dict[tuple, list[Node]] = {}
    for ref in node.inputs:
        term = graph.nodes[ref.node]
        if (term.op == "gemm" and len(term.inputs) == 2 and node.inputs.count(ref) == 1
                and graph.type_of(ref) == node.outputs[0] and only_consumer(graph, term, node)):
            by_flags.setdefault((term.attrs["trans_a"], term.attrs["trans_b"]), []).append(term)
    best = max(by_flags.values(), key=len, default=[])
    if len(best) < 2:
        return []
    a_axis, b_axis = _contraction_axes(best[0])
    for side, axis in ((0, a_axis), (1, b_axis)):
        refs = [t.inputs[side] for t in best]
        if len(set(refs)) != len(refs) or not all(isinstance(graph.type_of(r).shape[axis], int) for r in refs):
            return []
    return best


def _reduction(graph: Graph, term: Node, node: Node) -> tuple[Node, Node | None] | None:
    """(reduce_sum, reshape of it or None) when `term` is one of those, read only by `node`."""
    if term.op == "reshape" and only_consumer(graph, term, node):
        inner = graph.nodes[term.inputs[0].node]
        return (inner, term) if inner.op == "reduce_sum" and only_consumer(graph, inner, term) else None
    return (term, None) if term.op == "reduce_sum" and only_consumer(graph, term, node) else None


def _reduction_terms(graph: Graph, node: Node) -> tuple[list[Node], list[tuple], int]:
    """The reduce_sum terms (each possibly reshaped, as sum_to_shape leaves them) of an add_n that
    can become one reduction: same axes and output type, read only here, operands alike but along
    one reduced axis of static size. Returns the terms, their (reduce_sum, reshape) pairs, the axis."""
    groups: dict[tuple, list[tuple]] = {}
    for ref in node.inputs:
        pair = _reduction(graph, graph.nodes[ref.node], node)
        if pair is not None and node.inputs.count(ref) == 1 and graph.type_of(ref) == node.outputs[0]:
            reduce, reshape = pair
            key = (reduce.attrs["axes"], reduce.attrs["keepdims"], None if reshape is None else reshape.attrs["shape"])
            groups.setdefault(key, []).append(pair)
    best = max(groups.values(), key=len, default=[])
    if len(best) < 2:
        return [], [], 0
    shapes = [graph.type_of(r.inputs[0]).shape for r, _ in best]
    if len({r.inputs[0] for r, _ in best}) == len(best):
        for axis in best[0][0].attrs["axes"]:
            if all(isinstance(s[axis], int) for s in shapes) and len({s[:axis] + s[axis + 1:] for s in shapes}) == 1:
                return [shape or r for r, shape in best], best, axis
    return [], [], 0


def _concat(graph: Graph, refs: list[ValueRef], axis: int, at: Node) -> Node:
    types = [graph.type_of(r) for r in refs]
    shape = list(types[0].shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return graph.add_node("concat", refs, {"axis": axis}, [TensorType(types[0].dtype, tuple(shape))], at.order,
                          at.source)


def _batched(graph: Graph, node: Node) -> tuple[list[Node], list[Node]] | None:
    """(terms replaced, new nodes ending with the one that replaces them) for an add_n, or None."""
    terms = _product_terms(graph, node)
    if terms:
        a_axis, b_axis = _contraction_axes(terms[0])
        a, b = (_concat(graph, [t.inputs[side] for t in terms], axis, node)
                for side, axis in ((0, a_axis), (1, b_axis)))
        return terms, [a, b, graph.add_node("gemm", [a.out(0), b.out(0)], dict(terms[0].attrs), [node.outputs[0]],
                                            node.order, node.source)]
    terms, pairs, axis = _reduction_terms(graph, node)
    if terms:
        reduce, reshape = pairs[0]
        joined = _concat(graph, [r.inputs[0] for r, _ in pairs], axis, node)
        total = graph.add_node("reduce_sum", [joined.out(0)], dict(reduce.attrs), list(reduce.outputs), node.order,
                               node.source)
        new = [joined, total]
        if reshape is not None:
            new.append(graph.add_node("reshape", [total.out(0)], dict(reshape.attrs), [node.outputs[0]], node.order,
                                      node.source))
        return [n for pair in pairs for n in pair if n is not None], new
    return None


def batch_products(graph: Graph) -> PassResult:
    """add_n(gemm(a_1, b_1), ..., gemm(a_n, b_n), rest) -> add_n(gemm(concat(a), concat(b)), rest),
    and add_n(reduce_sum(x_1), ..., reduce_sum(x_n), rest) -> add_n(reduce_sum(concat(x)), rest):
    a sum of products that contract a shared-size axis is one product over the concatenation of
    those axes, a sum of sums one sum. A weight used at every step of a recurrence (an RNN's
    hidden-to-hidden matrix and its bias) gets its gradient as one long product instead of a
    small product per step and a sum of them all at the end, which also kept every step's
    weight-sized term alive until that sum; the concatenated step gradients are the ones the
    input weights' gradient concatenates already (CSE makes them one)."""
    sites = []
    for node in graph.topo_order():
        found = _batched(graph, node) if node.op == "add_n" and len(node.inputs) > 1 else None
        if found:
            sites.append((node, *found))
    if not sites:
        return PassResult(graph, False)
    placed: dict[int, list[int]] = {}
    for node, terms, new in sites:
        ids = {t.id for t in terms}
        graph.replace_inputs(node, [new[-1].out(0)] + [r for r in node.inputs if r.node not in ids])
        placed[node.id] = [n.id for n in new]
    new_ids = {i for ids in placed.values() for i in ids}
    sequence = []
    for node in graph.topo_order():
        if node.id not in new_ids:
            sequence.extend(placed.get(node.id, []))
            sequence.append(node.id)
    graph.renumber(sequence)
    return PassResult(graph, True)
