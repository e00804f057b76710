"""Recompute (rematerialisation, ARCHITECTURE.md §9.4): trade compute for the memory reverse mode
keeps alive between the forward and the backward part.

A node read by nodes of a higher gradient order (its backward) keeps its output alive
until they run. This pass gives those consumers their own copy of the node, recorded at
their order and placed just before the first of them, so the forward original can be
freed once the forward is done with it. Copied are:
  - nodes marked by gc.checkpoint (their region's inputs and outputs stay kept);
  - with cheap=True, also cheap nodes (Trait.CHEAP: elementwise math, views, fills) whose
    operands are kept for the backward anyway (graph inputs, constants, values the
    backward reads directly, or other copied nodes), so copying never makes the backward
    keep a value it did not keep before.
Random ops (Trait.RANDOM, and loops holding one) are never copied (a copy would draw other
numbers). One copy is made per node and consumer order, shared by all consumers of that order.

A copy only depends on forward values, so a runtime free to reorder (onnxruntime is)
would run it early and keep its output as long as the original: nothing saved. So the
operands a group of copies reads from outside it pass through `after(x, token)`, which is
x but cannot run before `token`, the latest backward node already placed that depends on
the end of the forward; this keeps the copies in the backward, where they belong, and also stops
onnxruntime's CSE from merging them back. The graph is renumbered (Graph.renumber) so that id order stays
topological. Run it after the passes that merge equal nodes; it is idempotent. A graph that runs in
its id order (graph.run_in_order: its session keeps the file's order and merges no equal nodes,
runtime/providers.py) needs no `after`: sequenced=False places the copies without it.

A memory budget (within_budget) marks forward nodes for copying like gc.checkpoint does, chosen
so that the step's planned peak (ir/memory.py), with the copies placed as this pass places them,
fits the budget: at each round, among the saved values alive at the planned peak that copies
made after that point would free, those that free the most bytes per operation recomputed, as
the remat policies of JAX and Checkmate weigh them.
"""
from __future__ import annotations

import math
import warnings

from ..errors import GcompileError
from ..ir.dims import format_shape
from ..ir.graph import Graph, Node, ValueRef
from ..ir.memory import nbytes, peak
from ..ir.registry import Trait, has_trait, is_random
from .base import PassResult


def _candidates(graph: Graph, cheap: bool) -> set[int]:
    """Ids of the nodes whose higher-order uses get copies (see the module docstring)."""
    read_later = {r.node for n in graph.nodes.values() for r in n.inputs if graph.nodes[r.node].order < n.order}
    chosen: set[int] = set()
    for node in graph.topo_order():
        if node.op in ("input", "constant") or is_random(node):
            continue
        if node.recompute or cheap and has_trait(node.op, Trait.CHEAP) and all(
                graph.nodes[r.node].op in ("input", "constant") or r.node in chosen or r.node in read_later
                for r in node.inputs):
            chosen.add(node.id)
    return chosen


def _gradient_carriers(graph: Graph) -> dict[int, set[int]]:
    """Per order k >= 1: the nodes of order >= k that depend on the latest lower-order value the
    order-k part reads (in a backward, the end of the forward): a runtime cannot run them early."""
    carriers: dict[int, set[int]] = {}
    for k in sorted({n.order for n in graph.nodes.values() if n.order > 0}):
        last = max((r.node for n in graph.nodes.values() if n.order >= k for r in n.inputs
                    if graph.nodes[r.node].order < k and graph.nodes[r.node].op != "constant"), default=None)
        reached: set[int] = set()
        for node in graph.topo_order():
            if node.order >= k and any(r.node == last or r.node in reached for r in node.inputs):
                reached.add(node.id)
        carriers[k] = reached
    return carriers


def recompute(graph: Graph, cheap: bool = True, sequenced: bool = True) -> PassResult:
    chosen = _candidates(graph, cheap)
    if not chosen:
        return PassResult(graph, False)
    carriers = _gradient_carriers(graph) if sequenced else {}
    originals = graph.topo_order()
    sequence: list[int] = []            # node ids in the new topological order
    made: dict[tuple, Node] = {}        # ("copy", id, order) or ("after", ref, token) -> the node added
    rewired: dict[int, list[ValueRef]] = {}    # original node id -> its operands once copies exist
    latest: dict[int, int] = {}         # order -> latest gradient-carrying node placed at >= that order

    def place(key: tuple, node: Node) -> Node:
        made[key] = node
        sequence.append(node.id)
        return node

    def operand(ref: ValueRef, order: int) -> ValueRef:
        producer = graph.nodes[ref.node]
        if ref.node in chosen and producer.order < order:
            return copy(producer, order).out(ref.index)
        return ref

    def boundary(ref: ValueRef, order: int) -> ValueRef:
        """An outside operand of a copy, made to wait for the backward's progress."""
        token = latest.get(order)
        if not sequenced or token is None or graph.nodes[ref.node].op == "constant":
            return ref
        key = ("after", ref, token)
        if key not in made:
            place(key, graph.add_node("after", [ref, ValueRef(token)], {}, [graph.type_of(ref)], order,
                                      name=f"after{order}_{graph.nodes[ref.node].name}"))
        return made[key].out(0)

    def copy(node: Node, order: int) -> Node:
        key = ("copy", node.id, order)
        if key not in made:   # node.inputs are still the original operands: rewiring waits for the end
            operands = [operand(r, order) if r.node in chosen else boundary(r, order) for r in node.inputs]
            made_copy = graph.add_node(node.op, operands, node.attrs, node.outputs, order, node.source,
                                       f"re{order}_{node.name}")
            made_copy.copy = True
            return place(key, made_copy)
        return made[key]

    for node in originals:
        operands = [operand(r, node.order) for r in node.inputs]
        if operands != node.inputs:
            rewired[node.id] = operands
        sequence.append(node.id)
        for k, reached in carriers.items():
            if node.id in reached:
                latest[k] = node.id
    if not made:   # (an "after" is only ever made for a copy)
        return PassResult(graph, False)
    for node_id, operands in rewired.items():
        graph.replace_inputs(graph.nodes[node_id], operands)
    graph.renumber(sequence)
    return PassResult(graph, True)


# -- a memory budget -----------------------------------------------------------------------------------------
_ROUNDS = 128         # rounds of choices before giving up on a budget
_ROUND_SHARE = 0.1    # the most of the planned peak one round's choices set out to free: the peak moves


def _flops(graph: Graph, node: Node) -> int:
    """About how many arithmetic operations running `node` again costs: products and
    convolutions by their contraction, anything else by the elements it reads and writes."""
    out = sum(math.prod(t.shape) for t in node.outputs)
    types = [graph.type_of(r) for r in node.inputs]
    if node.op in ("matmul", "gemm") and types:
        a = types[0]
        k = a.shape[-2] if node.attrs.get("trans_a") and a.ndim == 2 else a.shape[-1]
        return 2 * out * k
    if node.op in ("conv", "conv_transpose", "conv_weight_grad") and len(types) > 1:
        return 2 * out * math.prod(types[1].shape[1:])
    return out + sum(math.prod(t.shape) for t in types)


def _budget_steps(graph: Graph, chosen: set[int], size: dict) -> list:
    """The graph's nodes with the copies the recompute pass makes of `chosen` (each copied before
    its first reader of a higher order, its chosen operands copied before it), as
    ir.memory.peak takes them: copies' values are keyed ("copy", node id, order, output)."""
    steps: list = []
    made: set = set()

    def read(ref: ValueRef, order: int):
        producer = graph.nodes[ref.node]
        if ref.node in chosen and producer.order < order:
            copy(producer, order)
            return ("copy", ref.node, order, ref.index)
        return ref

    def copy(node: Node, order: int) -> None:
        if (node.id, order) in made:
            return
        made.add((node.id, order))
        reads = [read(r, order) for r in node.inputs]
        steps.append(([(("copy", node.id, order, i), size[node.out(i)]) for i in range(len(node.outputs))], reads))

    for node in graph.topo_order():
        if node.op in ("input", "constant"):
            continue
        reads = [read(r, node.order) for r in node.inputs]
        steps.append(([(node.out(i), size[node.out(i)]) for i in range(len(node.outputs))], reads))
    return steps


def _alive_at(steps: list, at: int, kept: set) -> set:
    """The values made at or before step `at` and still needed after it."""
    last: dict = {}
    for i, (_, reads) in enumerate(steps):
        for key in reads:
            last[key] = i
    return {key for i, (made, _) in enumerate(steps[:at + 1]) for key, _ in made
            if key in kept or last.get(key, i) > at}


def _closure(graph: Graph, node: Node, alive: set, chosen: set[int], limit: int,
             cheap: bool = False) -> set[int] | None:
    """The nodes a copy of `node` needs copied too: its operands' producers whose values are not
    alive at the peak (`alive`) nor copied anyway (`chosen`), and theirs in turn, back to values
    that are; None where that takes more than `limit` nodes or reaches a random one (or, with
    `cheap`, one that is not Trait.CHEAP)."""
    needed: set[int] = set()
    stack = [node]
    while stack:
        for ref in stack.pop().inputs:
            producer = graph.nodes[ref.node]
            if producer.op in ("input", "constant") or ref in alive or producer.id in chosen | needed:
                continue
            if is_random(producer) or len(needed) >= limit \
                    or cheap and not has_trait(producer.op, Trait.CHEAP):
                return None
            needed.add(producer.id)
            stack.append(producer)
    return needed


def _sizes(graph: Graph) -> tuple[dict, Node | None]:
    """(each value's bytes, inputs' and constants' as 0 where symbolic; the first other node that
    makes a value of symbolic shape, or None)."""
    size: dict = {}
    symbolic = None
    for node in graph.nodes.values():
        for i, t in enumerate(node.outputs):
            n = nbytes(t)
            if n is None and node.op not in ("input", "constant") and symbolic is None:
                symbolic = node
            size[node.out(i)] = n or 0
    return size, symbolic


# -- saved elementwise values, recomputed -------------------------------------------------------------------
_ELEMENTWISE_SHARE = 0.1    # the most of the forward's operations (_flops) these copies may take
_ELEMENTWISE_CHAIN = 6      # the most cheap nodes one such copy may need copied before it


def recompute_elementwise(graph: Graph) -> tuple[int, int] | None:
    """Mark for recomputing (node.recompute) nodes whose copy in the backward costs a few passes
    over memory and keeps nothing alive that the backward does not keep anyway: elementwise
    nodes (Trait.ELEMENTWISE, not random) whose output a higher gradient order reads, computed
    from graph inputs, constants or values that order reads too, directly or through at most
    _ELEMENTWISE_CHAIN cheap nodes (Trait.CHEAP: elementwise math, views; marked with it).
    A gelu's output beside its input, which the gelu's own derivative reads, is the common case:
    reverse mode saves both, PyTorch's backward too, where the copy lets the output go between the
    forward and the point the backward needs it. Chains are the normalisation before an
    activation: an inference batch norm (one op) beside its x, kept for gamma's gradient, its
    relu or hardswish's x/6 + 1/2 after it, all recomputed from x. Chosen as a memory budget's
    copies are (within_budget), only values alive at the planned peak, with the plan as low as
    _ELEMENTWISE_SHARE of the forward's operations take it.
    Returns (planned peak before, after), or None where a size is symbolic, an input's too
    (nothing is marked)."""
    size, symbolic = _sizes(graph)
    if symbolic is not None or any(nbytes(t) is None for n in graph.nodes.values() for t in n.outputs):
        return None
    return _lower_peak(graph, size, 0, _ELEMENTWISE_SHARE, elementwise=True)


def within_budget(graph: Graph, budget: int) -> tuple[int, int]:
    """Mark forward nodes for recomputing (node.recompute) so that the planned peak of the step
    with their copies (see the module's docstring) is at most `budget` bytes, or as low as the
    rounds get it; returns (planned peak before, after). A budget it cannot reach is warned
    about with the figures. Needs static sizes; random nodes and loops are never marked, and the
    operations recomputed stay within those of one forward pass.

    Each round looks at the values alive at the planned peak that the backward reads after it and
    the forward no longer needs: a copy of such a value's node, made just before its first
    backward reader, frees it at the peak; the copy needs its operands, and those not alive at
    the peak are copied too (_closure). The values freeing the most bytes per operation of their
    copies go first, until the excess is covered or a tenth of the plan (a large batch of copies
    moves the peak into the backward, where the copies live at once); a round that does not lower
    the planned peak is taken back, its best choice alone tried, and failing that left out for
    good. The lowest plan any round reached is kept."""
    size, node = _sizes(graph)
    if node is not None:
        where = f" at {node.source}" if node.source else ""
        shape = next(t.shape for t in node.outputs if nbytes(t) is None)
        raise GcompileError(f"memory_budget needs static sizes, but {node.name} ({node.op}{where}) makes a "
                            f"value of shape {format_shape(shape)}: give static specs")
    first, final = _lower_peak(graph, size, budget, 1.0, elementwise=False)
    if final > budget:
        outputs = sum(size[key] for key in graph.outputs)
        floor = (f"; the step's outputs alone take {outputs / 2**20:.0f} MiB, which no recomputing frees"
                 if outputs > budget else "")
        warnings.warn(f"memory_budget of {budget / 2**20:.0f} MiB not reached: recomputing within one forward "
                      f"pass's operations plans {final / 2**20:.0f} MiB (without: {first / 2**20:.0f} MiB){floor}",
                      stacklevel=4)
    return first, final


def _lower_peak(graph: Graph, size: dict, budget: int, share: float, elementwise: bool) -> tuple[int, int]:
    """within_budget's rounds (see its docstring), the operations recomputed within `share` of
    one forward pass's; with `elementwise`, among recompute_elementwise's nodes and chains only.
    Marks the choice of the lowest plan reached; returns (planned peak before, after)."""
    kept = set(graph.outputs)
    allowed = share * sum(_flops(graph, n) for n in graph.nodes.values()
                          if n.order == 0 and n.op not in ("input", "constant"))
    readers: dict[ValueRef, list[Node]] = {}
    for node in graph.topo_order():
        for ref in node.inputs:
            readers.setdefault(ref, []).append(node)
    saved = {ref for ref, nodes in readers.items() if any(r.order > graph.nodes[ref.node].order for r in nodes)}
    chosen = {n.id for n in graph.nodes.values() if n.recompute}
    first, _ = peak(_budget_steps(graph, chosen, size), kept)
    best = (first, set(chosen))        # the lowest plan seen, and its choice: a later round may do worse
    current, spent = first, 0
    left_out: set[int] = set()
    for _ in range(_ROUNDS):
        steps = _budget_steps(graph, chosen, size)
        current, at = peak(steps, kept)
        if current <= budget:
            break
        position = {key: i for i, (made, _) in enumerate(steps) for key, _ in made}
        alive = _alive_at(steps, at, kept)
        ranked = []
        for key in alive:
            if not isinstance(key, ValueRef) or key in kept or key.node in chosen | left_out:
                continue
            node = graph.nodes[key.node]
            if node.op in ("input", "constant") or is_random(node) or not size[key] \
                    or elementwise and not has_trait(node.op, Trait.ELEMENTWISE):
                continue
            later = [position[r.out(0)] for r in readers.get(key, []) if r.order > node.order]
            sooner = [position[r.out(0)] for r in readers.get(key, []) if r.order <= node.order]
            if not later or min(later) <= at or max(sooner, default=-1) >= at:
                continue      # a copy would not be made after the peak, or the value is read there anyway
            needed = _closure(graph, node, saved, chosen, _ELEMENTWISE_CHAIN, cheap=True) if elementwise \
                else _closure(graph, node, alive, chosen, limit=16)
            if needed is None:
                continue
            cost = _flops(graph, node) + sum(_flops(graph, graph.nodes[i]) for i in needed)
            ranked.append((size[key] / cost, -node.id, node.id, needed, size[key], cost))
        ranked.sort(key=lambda r: r[:2], reverse=True)
        picked, freed, round_cost = set(), 0, 0
        for _, _, node_id, needed, n, cost in ranked:
            if freed >= min(current - budget, current * _ROUND_SHARE) or spent + round_cost + cost > allowed:
                break
            picked |= {node_id} | needed
            freed += n
            round_cost += cost
        if not picked:
            break
        if peak(_budget_steps(graph, chosen | picked, size), kept)[0] >= current:
            _, _, node_id, needed, _, cost = ranked[0]
            picked, round_cost = {node_id} | needed, cost
            if peak(_budget_steps(graph, chosen | picked, size), kept)[0] >= current:
                left_out.add(node_id)
                continue
        chosen |= picked
        spent += round_cost
        planned = peak(_budget_steps(graph, chosen, size), kept)[0]
        if planned < best[0]:
            best = (planned, set(chosen))
    final, chosen = best
    for node_id in chosen:
        graph.nodes[node_id].recompute = True
    return first, final
