"""Loop pruning: a scan node computes only what is read.

Reverse mode makes scans that compute more than a given graph needs: a backward loop computes
the cotangent of every float operand and accumulates a gradient for every float const, and the
forward loop saves every value any backward read (gradients/loops.py). Pruning is what keeps
"the gradient of one input adds no work for the others" true through loops. For each scan:
  - a y output nobody reads is dropped from the body;
  - a carry the body passes on unchanged becomes a loop-invariant operand (a const), and readers
    of its final value read its initial one;
  - a carry whose final value nobody reads and that no kept output depends on is dropped;
  - consts and xs the kept outputs do not depend on are dropped (one xs stays when the number of
    steps is symbolic: it is what the evaluator counts them from);
  - a y that is the step's x slice reads the xs instead, and a y stacked twice is read once;
then dead-code elimination inside the body (run_to_fixed_point runs every pass in bodies too)
removes what only the dropped outputs needed. hoist_loop_sums (below) moves accumulations out.
"""
from __future__ import annotations

from ..ir.dims import product, shape_symbols
from ..ir.graph import Graph, Node, ValueRef, extract, tensor_type
from ..ops.control import narrow_scan, scan_uses
from .base import PassResult, replace_uses


def prune_loops(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        if node.op == "scan" and node.id in graph.nodes:
            changed |= _prune(graph, node)
    return PassResult(graph, changed)


def _prune(graph: Graph, node: Node) -> bool:
    a, body = node.attrs, node.attrs["body"]
    nc, nk = a["n_consts"], a["n_carry"]
    nx, ny = len(node.inputs) - nc - nk, len(node.outputs) - nk
    ins, outs = body.inputs, body.outputs
    frozen = [i for i in range(nk) if outs[i] == ins[nc + i]]
    same = {i: node.inputs[nc + i] for i in frozen}                   # a final carry that is its initial one
    xs_at = {ref: nc + nk + k for k, ref in enumerate(ins[nc + nk:])}
    for j, ref in enumerate(outs[nk:]):
        if ref in xs_at:                                              # a y that is the step's x: the xs
            same[nk + j] = node.inputs[xs_at[ref]]
        elif ref in outs[nk:nk + j]:                                  # a y stacked twice
            same[nk + j] = node.out(nk + outs[nk:].index(ref))
    rewired = False
    used = scan_uses(graph, node)
    for index, replacement in same.items():
        if index in used:
            replace_uses(graph, node.out(index), replacement)
            rewired = True
    used = scan_uses(graph, node)
    if not used:
        return rewired   # nothing read: dead-code elimination removes the node
    position = {r.node: k for k, r in enumerate(ins)}
    carries = {i for i in range(nk) if i in used and i not in frozen}
    ys = [j for j in range(ny) if nk + j in used]
    needed: set[int] = set()
    frontier: list[ValueRef] = [outs[i] for i in carries] + [outs[nk + j] for j in ys]
    while frontier:
        ref = frontier.pop()
        for k in (position[n] for n in body.ancestors(ref.node) | {ref.node} if n in position):
            if k in needed:
                continue
            needed.add(k)
            i = k - nc
            if 0 <= i < nk and i not in frozen and i not in carries:
                carries.add(i)
                frontier.append(outs[i])
    keep_consts = [i for i in range(nc) if i in needed]
    keep_frozen = [i for i in frozen if nc + i in needed]
    keep_xs = [j for j in range(nx) if nc + nk + j in needed]
    if nx and not keep_xs and not isinstance(a["length"], int):
        keep_xs = [0]    # a symbolic number of steps is only known from an xs at run time
    keep_carries = sorted(carries)
    if (len(keep_consts), len(keep_carries), len(keep_xs), len(ys)) == (nc, nk, nx, ny):
        return rewired
    narrow_scan(graph, node, keep_consts, keep_frozen, keep_carries, keep_xs, ys)
    return True


# -- sums over the steps, out of the loop ------------------------------------------------------------------------
def hoist_loop_sums(graph: Graph) -> PassResult:
    """A carry that only accumulates, acc' = acc + Σ terms, where each term is a product contracting the
    batch axis (x_tᵀ·g_t: a weight's gradient in a backward loop) or a sum over axes of a per-step value
    (a bias's gradient), becomes stacked ys and one product (or sum) after the loop: the long
    contraction over all steps at once instead of a small one per step (an LSTM step of 200 steps ran
    16% faster). Memory: the stacked operands (often saved for the backward anyway) against the
    accumulator, so loops made with checkpoint=True, which ask for less memory, keep theirs, and so
    does a loop whose operands to stack (those not already its stacked xs) would take more than
    HOIST_MAX_BYTES, or an unknown size (a while loop's steps): a 10,000-step gradient over a
    (16, 256) carry stacked 160 MiB per operand, more than the product per step saved in time
    (docs/loops.md)."""
    changed = False
    for node in list(graph.topo_order()):
        if node.op == "scan" and node.id in graph.nodes and not node.attrs["checkpoint"]:
            while _hoist_one(graph, node):
                changed = True
    return PassResult(graph, changed)


# The most bytes hoist_loop_sums stacks for one accumulator (see its docstring).
HOIST_MAX_BYTES = 64 << 20


def _stacked_bytes(node: Node, refs: list[ValueRef]) -> int | None:
    """Bytes of `refs`, per-step values of scan `node`'s body, stacked over its steps, less those
    that are its xs (stacked already); None where a size is symbolic."""
    body, start = node.attrs["body"], node.attrs["n_consts"] + node.attrs["n_carry"]
    total = 0
    for ref in refs:
        if ref in body.inputs[start:]:
            continue
        t = body.type_of(ref)
        if not all(isinstance(d, int) for d in (node.attrs["length"], *t.shape)):
            return None
        total += node.attrs["length"] * product(t.shape) * t.dtype.itemsize
    return total


def _hoist_one(graph: Graph, node: Node) -> bool:
    a, body = node.attrs, node.attrs["body"]
    nc, nk = a["n_consts"], a["n_carry"]
    used = scan_uses(graph, node)
    bound = shape_symbols(body.type_of(r).shape for r in body.inputs)   # the same at every step
    for i in range(nk):
        acc, out = body.inputs[nc + i], body.outputs[i]
        if i not in used or acc in body.outputs or body.outputs.count(out) != 1:
            continue
        if [c.id for c in body.consumers(acc.node)] != [out.node]:
            continue
        terms = _sum_terms(body, out, acc)
        per_step = [r for term in terms or () for r in term[1:] if isinstance(r, ValueRef)]
        if terms and all(_steady(body, r, bound) for r in per_step):
            size = _stacked_bytes(node, per_step)
            if size is not None and size <= HOIST_MAX_BYTES:
                _hoist(graph, node, i, terms, per_step)
                return True
    return False


def _steady(body: Graph, ref: ValueRef, bound: set[str]) -> bool:
    """Whether a per-step value has the same shape at every step, so that the loop can stack it: none
    of its dims is loop-local (the number of steps of a while loop inside the body, which a
    checkpointed while loop's backward runs, changes from step to step)."""
    return shape_symbols([body.type_of(ref).shape]) <= bound


def _sum_terms(body: Graph, out: ValueRef, acc: ValueRef) -> list[tuple] | None:
    """out = acc + Σ terms, each ("gemm", a, b) for aᵀ·b or ("sum", v, axes) for a sum of v over axes
    (maybe reshaped); None when `out` is not such a sum."""
    node = body.nodes[out.node]
    if node.op == "gemm" and len(node.inputs) == 3 and node.inputs[2] == acc:
        term = _term(body, ValueRef(node.id, 0), gemm_only=True)
        return None if term is None else [term]
    if node.op not in ("add", "add_n") or node.inputs.count(acc) != 1 or node.outputs[0] != body.type_of(acc):
        return None
    terms = []
    for ref in node.inputs:
        if ref != acc:
            term = _term(body, ref)
            if term is None or body.type_of(ref) != node.outputs[0]:
                return None
            terms.append(term)
    return terms


def _term(body: Graph, ref: ValueRef, gemm_only: bool = False) -> tuple | None:
    node = body.nodes[ref.node]
    if node.op == "gemm" and (gemm_only or len(node.inputs) == 2):
        if node.attrs["trans_a"] and not node.attrs["trans_b"]:   # contracts axis 0 of both: stacks along it
            return ("gemm", node.inputs[0], node.inputs[1])
        return None
    if gemm_only:
        return None
    if node.op == "reshape":
        node = body.nodes[node.inputs[0].node]
    if node.op == "reduce_sum":
        return ("sum", node.inputs[0], node.attrs["axes"])
    return None


def _hoist(graph: Graph, node: Node, i: int, terms: list[tuple], per_step: list[ValueRef]) -> None:
    """Move accumulator i's `terms` out of the loop; `per_step` are their per-step operands, in order."""
    a, body = node.attrs, node.attrs["body"]
    nc, nk = a["n_consts"], a["n_carry"]
    length = a["length"]
    ins, outs = body.inputs, body.outputs
    kept = [j for j in range(nk) if j != i]
    new_body = extract(body, ins[:nc] + [ins[nc + j] for j in kept] + ins[nc + nk:],
                       [outs[j] for j in kept] + outs[nk:] + per_step)
    operands = node.inputs
    init = operands[nc + i]
    graph.replace_inputs(node, operands[:nc] + [operands[nc + j] for j in kept] + operands[nc + nk:])
    old_outputs, n_old = list(node.outputs), len(node.outputs)
    stacked = [tensor_type(body.type_of(r).dtype, (length, *body.type_of(r).shape)) for r in per_step]
    node.outputs = [old_outputs[j] for j in kept] + old_outputs[nk:] + stacked
    node.attrs = {**a, "body": new_body, "n_carry": nk - 1}
    moved = {node.out(j): ValueRef(node.id, k) for k, j in enumerate(kept + list(range(nk, n_old)))}
    mark = graph.mark()
    total, k = init, n_old - 1
    acc_type = old_outputs[i]
    for term in terms:
        if term[0] == "gemm":
            xa, xb = (_flattened(graph, node, ValueRef(node.id, k + j)) for j in (0, 1))
            total = graph.add_node("gemm", [xa, xb, total], {"trans_a": True, "trans_b": False}, [acc_type],
                                   node.order).out(0)
            k += 2
        else:
            v = ValueRef(node.id, k)
            axes = (0, *(ax + 1 for ax in term[2]))
            t = graph.type_of(v)
            summed = graph.add_node("reduce_sum", [v], {"axes": axes, "keepdims": True},
                                    [tensor_type(t.dtype, tuple(1 if d in axes else s for d, s in enumerate(t.shape)))],
                                    node.order).out(0)
            shaped = graph.add_node("reshape", [summed], {"shape": acc_type.shape}, [acc_type], node.order).out(0)
            total = graph.add_node("add", [total, shaped], {}, [acc_type], node.order).out(0)
            k += 1
    moved[node.out(i)] = total
    added = [n.id for n in graph.nodes_since(mark)]
    for consumer in graph.consumers(node.id):
        if consumer.id not in added:
            graph.replace_inputs(consumer, [moved[r] if r.node == node.id else r for r in consumer.inputs])
    graph.outputs = [moved[r] if r.node == node.id else r for r in graph.outputs]
    order = [n for n in sorted(graph.nodes) if n <= node.id and n not in added] + added + [
        n for n in sorted(graph.nodes) if n > node.id and n not in added]
    graph.renumber(order)


def _flattened(graph: Graph, node: Node, ref: ValueRef) -> ValueRef:
    """A stacked (T, rows, cols) output as (T*rows, cols): the steps' rows one after another."""
    t = graph.type_of(ref)
    shape = (product(t.shape[:2]), t.shape[2])
    return graph.add_node("reshape", [ref], {"shape": shape}, [tensor_type(t.dtype, shape)], node.order).out(0)
