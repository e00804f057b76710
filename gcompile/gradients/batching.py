"""The batching machinery of gc.vmap: the table of per-op batching rules, the generic rule of the
elementwise ops, and the walk that emits the batched version of recorded nodes.

A batching rule receives a node of the per-example trace and its operands already replaced: each
either batched (its batch axis is axis 0) or shared by every example (as it was). It records the
batched computation with ordinary traced ops and returns the outputs, each with the batch axis
first, or as it is (its per-example shape) where it is the same for every example: a count of
elements, a loop's step counter that reads no batched value (marked batched, it would make the
condition of an enclosing loop per-example). A rule is called only when some operand is batched;
a node reading none is copied as it is.

Which ops batch how: an op declaring Trait.ELEMENTWISE is batched generically (operand ranks
aligned, the op applied as it is); the others have a rule in RULES (batching_rules.py and
batching_loops.py register them), or are named in NOT_BATCHED with the reason.
tests/gradients/test_vmap_ops.py iterates the registry: each op batched on a sample call equals the
per-example results stacked, or is in NOT_BATCHED.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import functions as F
from ..errors import ShapeError, UnsupportedError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply_n, current_frame, recording_order
from ..ir import dims
from ..ir.graph import Graph, Node
from ..ir.registry import Trait, has_trait

Rule = Callable[[Node, list, list, Any], list]
RULES: dict[str, Rule] = {}

# Ops no batching rule is ever asked for, and why: they have no operands, so a node of theirs never
# reads a batched value and is kept as it is, shared by every example (vmap's per-example inputs are
# placeholders it replaces by the batched arguments, never batched `input` nodes).
NOT_BATCHED: dict[str, str] = {
    "input": "a graph input has no operands (vmap replaces its per-example placeholders itself)",
    "constant": "a constant has no operands: it is the same for every example",
    "fill": "a fill has no operands: it is the same for every example",
    "arange": "a range has no operands (its length is an attribute): it is the same for every example",
}

def batching_rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        for op in ops:
            RULES[op] = rule
        return rule
    return register


def rule_for(op: str) -> Rule:
    rule = RULES.get(op)
    if rule is not None:
        return rule
    if has_trait(op, Trait.ELEMENTWISE):
        return elementwise
    if op in NOT_BATCHED:
        raise UnsupportedError(f"vmap: op {op!r} is never batched: {NOT_BATCHED[op]}")
    raise UnsupportedError(f"vmap: op {op!r} has no batching rule (gradients/batching_rules.py lists the rules; an "
                           f"elementwise op declares Trait.ELEMENTWISE)")


# -- helpers for rules ---------------------------------------------------------------------------------------
def rank(x: Tensor, batched: bool) -> int:
    """The per-example rank of x."""
    return x.ndim - 1 if batched else x.ndim


def align(x: Tensor, rank: int) -> Tensor:
    """A batched x whose per-example rank is below `rank`, with unit axes after the batch axis, so that
    numpy broadcasting lines its per-example axes up with the others' (right-aligned)."""
    missing = rank - (x.ndim - 1)
    return F.expand_dims(x, tuple(range(1, 1 + missing))) if missing > 0 else x


def broadcast(x: Tensor, size) -> Tensor:
    """An unbatched x repeated along a new batch axis 0."""
    return F.broadcast_to(F.expand_dims(x, 0), (size,) + x.shape)


def all_batched(ins: list, batched: list, size) -> list[Tensor]:
    return [x if b else broadcast(x, size) for x, b in zip(ins, batched)]


def merge(x: Tensor) -> Tensor:
    """(B, N, ...) -> (B·N, ...)."""
    return F.reshape(x, (dims.product(x.shape[:2]),) + x.shape[2:])


def split(y: Tensor, size, n) -> Tensor:
    """(B·N, ...) -> (B, N, ...)."""
    return F.reshape(y, (size, n) + y.shape[1:])


def static(size, what: str) -> int:
    if not isinstance(size, int):
        raise UnsupportedError(f"vmap: {what} needs a static batch size, got {size!r} (at {user_location()})")
    return size


def shifted(axes) -> tuple[int, ...]:
    """Per-example axes (non-negative) as axes of the batched tensor."""
    return tuple(a + 1 for a in axes)


def elementwise(node, ins, batched, size):
    """Trait.ELEMENTWISE: the op itself, its batched operands' per-example axes right-aligned with the
    shared ones' (a unary op needs nothing)."""
    out_rank = node.outputs[0].ndim
    return apply_n(node.op, [align(x, out_rank) if b else x for x, b in zip(ins, batched)], **node.attrs)


# -- the walk ----------------------------------------------------------------------------------------------------
def batch_node(node: Node, ins: list[Tensor], batched: list[bool], size) -> list[tuple[Tensor, bool]]:
    """Record the batched version of `node` on its replaced operands into the current trace; returns
    each output with whether it is batched. A node reading no batched value is copied as it is."""
    graph = current_frame().graph
    if not any(batched):
        copy = graph.add_node(node.op, [t.ref for t in ins], node.attrs, node.outputs, order=node.order,
                              source=node.source)
        copy.recompute = node.recompute
        return [(Tensor(graph, copy.out(i), t), False) for i, t in enumerate(node.outputs)]
    mark = graph.mark()
    try:
        with recording_order(node.order):
            outs = rule_for(node.op)(node, ins, batched, size)
    except ShapeError as err:
        raise ShapeError(f"vmap: batching {node.op} (at {node.source}): {err}") from None
    if node.recompute:                       # a gc.checkpoint region stays one
        for new in graph.nodes_since(mark):
            new.recompute = new.recompute or new.op != "constant"
    result = []
    for out, per_example in zip(outs, node.outputs):
        shared = tuple(out.shape) == tuple(per_example.shape)   # the same for every example
        if not shared and tuple(out.shape) != (size, *per_example.shape):
            raise AssertionError(f"vmap rule of {node.op}: {out.type} for {per_example}")
        result.append((out, not shared))
    return result


def batch_graph(graph: Graph, inputs: list[tuple[Tensor, bool]], size) -> list[tuple[Tensor, bool]]:
    """Record all of `graph` (a loop body) batched into the current trace, its inputs read from `inputs`
    (a Tensor of the current trace and whether it is batched, per graph input); returns its outputs
    likewise."""
    env = dict(zip(graph.inputs, inputs))
    for node in graph.topo_order():
        if node.op == "input":
            continue
        operands = [env[r] for r in node.inputs]
        outs = batch_node(node, [t for t, _ in operands], [b for _, b in operands], size)
        env.update((node.out(i), out) for i, out in enumerate(outs))
    return [env[r] for r in graph.outputs]
