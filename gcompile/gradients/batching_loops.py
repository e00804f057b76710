"""Batching rules of gc.vmap for the loop ops: a batched loop is one loop whose body is batched.

The body (a Graph, ops/control.py) is recorded again with batching.batch_graph into a new body:
its consts are batched where the node's operands are, the xs slices where the xs are, and the
carries where the initial carry is or where a step makes them depend on a batched value. That
last set is found by tracing the new body, marking the carries whose new value came out batched,
and tracing again until none changes (at most once per carry). The batch axis of the loop's
stacked operands and results is axis 1 inside the node (axis 0 is time), moved first outside.

`scan`: per-example gradients through a recurrence (vmap(grad(rnn_loss))) batch the forward scan
and the backward scan gc.grad made, like any other op.

`while`: when the condition stays the same for every example (it reads no batched value), the
examples loop in step. Otherwise each one stops at its own step: the loop runs while any example's
condition holds, carrying an `active` mask, and a finished example's carries are kept as they
were (the body still runs on them; its results are discarded).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import functions as F
from ..errors import UnsupportedError
from ..frontend.tensor import Tensor, apply, apply_n
from ..frontend.trace import trace_body
from ..ir.graph import Graph, tensor_type
from ..ops.control import cond_node
from .batching import align, batch_graph, batching_rule, broadcast


def _slice_type(t: Tensor):
    return tensor_type(t.dtype, t.shape[1:])


def _as_batched(value: tuple[Tensor, bool], size) -> Tensor:
    t, b = value
    return t if b else broadcast(t, size)


def _batched_body(body: Graph, types: list, size, inputs: Callable[[list[Tensor]], list[tuple[Tensor, bool]]],
                  finish: Callable[[list[Tensor], list[tuple[Tensor, bool]]], list[Tensor]]):
    """A new body, of inputs of `types`: `body` batched, reading `inputs(params)` (each with whether it
    is batched), its outputs passed through `finish(params, outputs)`. Returns the Graph, the Tensors
    it captured, and whether each of `body`'s outputs came out batched."""
    out_flags: list[bool] = []

    def fn(params: list[Tensor]) -> list[Tensor]:
        outs = batch_graph(body, inputs(params), size)
        out_flags[:] = [b for _, b in outs]
        return finish(params, outs)

    new_body, captured = trace_body(fn, types)
    return new_body, captured, out_flags


def _carries(values: list[Tensor], batched: list[bool], wanted: list[bool], size) -> list[Tensor]:
    """The initial carries, broadcast where the batched loop carries them batched."""
    return [c if b or not want else broadcast(c, size) for c, b, want in zip(values, batched, wanted)]


def _keep_batched(outs: list[tuple[Tensor, bool]], wanted: list[bool], size) -> list[Tensor]:
    return [_as_batched(o, size) if want else o[0] for o, want in zip(outs, wanted)]


@batching_rule("scan")
def _scan(node, ins, batched, size):
    a = node.attrs
    body, nc, nk = a["body"], a["n_consts"], a["n_carry"]
    consts = ins[:nc]
    xs = [F.swapaxes(x, 0, 1) if b else x for x, b in zip(ins[nc + nk:], batched[nc + nk:])]   # time first
    n_ys = len(node.outputs) - nk
    kb = list(batched[nc:nc + nk])
    while True:         # carry batched where a step makes it so, until that no longer grows
        carries = _carries(ins[nc:nc + nk], batched[nc:nc + nk], kb, size)
        flags = batched[:nc] + kb + batched[nc + nk:]
        new_body, captured, out_flags = _batched_body(
            body, [t.type for t in consts + carries] + [_slice_type(x) for x in xs], size,
            lambda params, flags=flags: list(zip(params, flags)),
            lambda params, outs, kb=tuple(kb): _keep_batched(outs, [*kb, *[False] * n_ys], size))
        grown = [i for i in range(nk) if out_flags[i] and not kb[i]]
        if not grown:
            break
        for i in grown:
            kb[i] = True
    outs = apply_n("scan", [*captured, *consts, *carries, *xs], **{**a, "body": new_body,
                                                                    "n_consts": len(captured) + nc})
    ys = [F.swapaxes(y, 0, 1) if b else y for y, b in zip(outs[nk:], out_flags[nk:])]
    return outs[:nk] + ys   # the carries and ys no batched value reaches stay unbatched


@batching_rule("while")
def _while(node, ins, batched, size):
    a = node.attrs
    body, nc = a["body"], a["n_consts"]
    consts, first = ins[:nc], ins[nc]
    nk = len(ins) - nc - 1
    masked = batched[nc]                # the examples may stop at different steps
    n_ys = a.get("n_ys", 0)
    kb = list(batched[nc + 1:])
    while True:
        if masked:
            kb = [True] * nk
        carries = _carries(ins[nc + 1:], batched[nc + 1:], kb, size)
        if masked:
            new_body, captured, out_flags = _masked_body(body, consts, batched[:nc], carries, size)
        else:
            flags = batched[:nc] + kb
            new_body, captured, out_flags = _batched_body(
                body, [t.type for t in consts + carries], size, lambda params, flags=flags: list(zip(params, flags)),
                lambda params, outs, kb=tuple(kb): _keep_batched(outs, [False, *kb, *[False] * n_ys], size))
            if out_flags[0]:
                masked = True
                continue
        grown = [i for i in range(nk) if out_flags[1 + i] and not kb[i]]
        if not grown:
            break
        for i in grown:
            kb[i] = True
    n_consts = len(captured) + nc
    if not masked:
        outs = apply_n("while", [*captured, *consts, first, *carries], **{**a, "body": new_body, "n_consts": n_consts})
        ys = [F.swapaxes(y, 0, 1) if b else y for y, b in zip(outs[nk:], out_flags[1 + nk:])]
        return outs[:nk] + ys   # the carries (a step counter) and ys no batched value reaches stay unbatched
    if n_ys:
        raise UnsupportedError(f"vmap: the while loop at {a['source']} stops at a different step for each example "
                               "and stacks a value per step (a gradient taken through it inside the vmapped "
                               "function, or an imported Loop's scan outputs): not supported; take the gradient "
                               "outside gc.vmap (of the sum of the per-example losses), or make the condition the "
                               "same for every example")
    active = first if batched[nc] else broadcast(first, size)
    outs = apply_n("while", [*captured, *consts, F.any(active), active, *carries],
                   **{**a, "body": new_body, "n_consts": n_consts})
    return outs[1:]


def _masked_body(body: Graph, consts: list[Tensor], const_flags: list[bool], carries: list[Tensor], size):
    """The body of a while loop whose examples stop at different steps: it carries an `active` mask (B,)
    before the (batched) carries, updates only the active examples' carries, and continues while any
    example is active."""
    nc = len(consts)

    def finish(params: list[Tensor], outs: list[tuple[Tensor, bool]]) -> list[Tensor]:
        active, old = params[nc], params[nc + 1:]
        still = F.logical_and(active, _as_batched(outs[0], size))
        new = [F.where(align(active, t.ndim - 1), _as_batched(o, size), t) for o, t in zip(outs[1:], old)]
        return [F.any(still), still, *new]

    types = [t.type for t in consts] + [tensor_type(np.bool_, (size,))] + [t.type for t in carries]
    return _batched_body(body, types, size,
                         lambda params: list(zip(params[:nc] + params[nc + 1:], const_flags + [True] * len(carries))),
                         finish)


@batching_rule("cond")
def _cond(node, ins, batched, size):
    """A shared predicate: one cond of the batched branches. A per-example one: both branches run,
    batched, and each example takes its branch's results (a where, as jax.vmap of lax.cond)."""
    a = node.attrs
    pred, ops, flags = ins[0], list(ins[1:]), batched[1:]

    def outputs(body: Graph, params: list[Tensor]) -> list[Tensor]:
        return [_as_batched(o, size) for o in batch_graph(body, list(zip(params, flags)), size)]
    if not batched[0]:
        (then_body, then_captured), (else_body, else_captured) = [
            trace_body(lambda params, body=body: outputs(body, params), [t.type for t in ops])
            for body in (a["then_body"], a["else_body"])]
        return cond_node(pred, ops, then_body, then_captured, else_body, else_captured, a["source"])
    taken, other = outputs(a["then_body"], ops), outputs(a["else_body"], ops)
    return [F.where(align(pred, t.ndim - 1), t, e) for t, e in zip(taken, other)]


@batching_rule("root")
def _root(node, ins, batched, size):
    """One root of the batched system: x stacks every example's (the implicit VJP then solves one
    block-diagonal system, of size B·n)."""
    a = node.attrs
    xi = a["x_index"]
    ins, flags = list(ins), list(batched)
    ins[xi], flags[xi] = _as_batched((ins[xi], batched[xi]), size), True
    body, captured = trace_body(
        lambda params: [_as_batched(batch_graph(a["body"], list(zip(params, flags)), size)[0], size)],
        [t.type for t in ins])
    return [apply("root", [*captured, *ins], body=body, x_index=len(captured) + xi,
                  **{k: v for k, v in a.items() if k not in ("body", "x_index")})]
