"""gc.grad: pruned reverse mode on the traced graph (ARCHITECTURE.md §9.1).

Three steps, as in Chainer's `grad`:
  1. backward enumeration: values the outputs depend on through differentiable ops;
  2. forward enumeration: values that depend on the requested inputs, inside that set;
  3. a sweep over the nodes in both, in reverse topological order (node ids are a
     topological order of a traced graph), calling each op's VJP rule.
Cotangents stay absent (None) until some rule produces one; a value reached along
several paths gets one n-ary add_n of its contributions. Rules emit ordinary ops, so
the gradient can itself be differentiated.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import GcompileError, TraceError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor, current_frame, recording_order
from ..ir.dims import format_type
from ..ir.dtypes import is_float
from ..ir.graph import Graph, ValueRef
from ..ir.registry import get_op
from ..logs import phase
from ..ops.basic import add_n, cast, ones_like, zeros_like
from ..ops.reduce import sum_to_shape
from ..ops.shape_rules import broadcasts_to


def _is_float(graph: Graph, ref: ValueRef) -> bool:
    return is_float(graph.type_of(ref).dtype)


def _backward_set(graph: Graph, outputs: list[ValueRef]) -> set[ValueRef]:
    """Values that reach an output through differentiable ops and float values."""
    seen: set[ValueRef] = set()
    stack = [r for r in outputs if _is_float(graph, r)]
    while stack:
        ref = stack.pop()
        if ref in seen:
            continue
        seen.add(ref)
        node = graph.nodes[ref.node]
        if get_op(node.op).differentiable:
            stack.extend(r for r in node.inputs if _is_float(graph, r) and r not in seen)
    return seen


def _forward_set(graph: Graph, inputs: list[ValueRef], within: set[ValueRef]) -> set[ValueRef]:
    """Values in `within` that depend on an input (walking consumers forward)."""
    reached = {r for r in inputs if r in within}
    within_nodes = {r.node for r in within}
    frontier = sorted({r.node for r in reached})
    visited: set[int] = set()
    while frontier:
        node_id = frontier.pop()
        for consumer in graph.consumers(node_id):
            if consumer.id not in within_nodes or not get_op(consumer.op).differentiable:
                continue
            if not any(r in reached for r in consumer.inputs):
                continue
            new = [consumer.out(i) for i in range(len(consumer.outputs)) if consumer.out(i) in within]
            if any(r not in reached for r in new):
                reached.update(new)
                if consumer.id not in visited:
                    visited.add(consumer.id)
                    frontier.append(consumer.id)
    return reached


def _refuse_outer_paths(graph: Graph, outputs: list[Tensor], inputs: list[Tensor]) -> None:
    """Inside a loop body, an output and an input that both belong to an enclosing trace are two
    captured values to the body, with no path between them there: the gradient would be zeros even
    where the output depends on the input outside. Refused, saying where to take it instead."""
    for y in outputs:
        if y.graph is graph:
            continue
        reach = _backward_set(y.graph, [y.ref])
        for x in inputs:
            if x.graph is y.graph and x.ref in reach and x.ref != y.ref:
                raise GcompileError(
                    f"gc.grad inside a loop body (or branch) of outputs computed outside it, with respect to inputs "
                    f"they depend on outside it: the body sees both as captured values, with no path between them. "
                    f"Compute the outputs inside the body (call the function there, e.g. gc.vjp inside the step) "
                    f"or take the gradient outside the loop (at {user_location()})")


def grad(outputs: Tensor | Sequence[Tensor], inputs: Sequence[Tensor], grad_outputs: Any = None) -> list[Tensor]:
    """Gradients of `outputs` (weighted by `grad_outputs`, default ones: gcompile's own callers
    rely on that; the public gc.grad refuses a non-scalar output without one) w.r.t. each of `inputs`.

    Each result has its input's shape and dtype. An input the outputs do not depend on
    gets zeros (as JAX does), not an error. Integer inputs are an error. A grad_outputs
    entry (None for ones) must have its output's shape; it is cast to the output's dtype.
    """
    try:
        graph = current_frame().graph
    except TraceError:
        raise TraceError("gc.grad(outputs, inputs) adds the gradient to a function being traced: call it inside "
                         "the function given to gc.compile, gc.jit or @gc.export; outside one, gc.grad(fn) is the "
                         "gradient function (JAX's form), which gc.compile compiles") from None
    if isinstance(inputs, Tensor):
        raise GcompileError("gc.grad(outputs, inputs): `inputs` must be a list of Tensors, e.g. [x]")
    if not isinstance(outputs, (Tensor, list, tuple)):
        raise GcompileError(f"gc.grad(outputs, inputs): `outputs` must be a Tensor or a list of them, got "
                            f"{_described(outputs)} (at {user_location()})")
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = list(inputs)
    for x in inputs + outputs:
        if not isinstance(x, Tensor):
            hint = (": an array the function closes over is a constant; to differentiate with respect to it, "
                    "make it an argument of the traced function (gc.compile(fn, x, W))"
                    if isinstance(x, (np.ndarray, np.generic, int, float)) else "")
            raise GcompileError(f"gc.grad takes Tensors of the function being traced, got {_described(x)} "
                                f"(at {user_location()}){hint}")
    # Inside a loop body, Tensors of the enclosing function are captured (the gradient is then the
    # body's, through the captured value); Tensors of unrelated traces are refused.
    _refuse_outer_paths(graph, outputs, inputs)
    inputs, outputs = [as_tensor(x) for x in inputs], [as_tensor(y) for y in outputs]
    for x in inputs:
        if not is_float(x.dtype):
            raise GcompileError(f"cannot take a gradient with respect to {x!r}: its dtype {x.dtype.name} "
                                f"is not floating point (at {user_location()})")
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor) or not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = [grad_outputs]
    if len(grad_outputs) != len(outputs):
        raise GcompileError(f"gc.grad: {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    for y, seed in zip(outputs, grad_outputs):
        shape = None if seed is None else seed.shape if isinstance(seed, Tensor) else np.shape(seed)
        if shape is not None and tuple(shape) != y.shape:
            raise GcompileError(f"gc.grad: a grad_outputs entry of shape {tuple(shape)} for an output {y.type}; "
                                "each cotangent must have its output's shape")

    relevant = _forward_set(graph, [x.ref for x in inputs], _backward_set(graph, [y.ref for y in outputs]))
    order = 1 + max([graph.nodes[r.node].order for r in relevant] or [0])
    cotangents: dict[ValueRef, list[Tensor]] = {}
    requested = {x.ref for x in inputs}

    with recording_order(order), phase("grad"):
        for y, seed in zip(outputs, grad_outputs):
            if y.ref not in relevant:
                continue
            seed = ones_like(y) if seed is None else cast(as_tensor(seed), y.dtype)
            cotangents.setdefault(y.ref, []).append(seed)

        for node_id in sorted({r.node for r in relevant}, reverse=True):
            node = graph.nodes[node_id]
            wanted = [i for i, r in enumerate(node.inputs) if r in relevant]
            if not wanted or node.op == "input":
                continue
            gs = [_total(cotangents.pop(node.out(i), None)) for i in range(len(node.outputs))]
            if all(g is None for g in gs):
                continue
            _run_rule(graph, node, gs, wanted, cotangents)
            for i, g in enumerate(gs):   # a requested intermediate keeps its total cotangent
                if g is not None and node.out(i) in requested:
                    cotangents[node.out(i)] = [g]

        results = []
        for x in inputs:
            total = _total(cotangents.get(x.ref))
            if total is not None:
                cotangents[x.ref] = [total]
            results.append(zeros_like(x) if total is None else total)
    return results


def _described(value: Any) -> str:
    """A value as an error names it: its type and, for an array, its dtype and shape, never its
    contents (a closed-over weight printed over a screen)."""
    if isinstance(value, np.ndarray):
        return f"a numpy array {format_type(value.dtype, value.shape)}"
    return f"a {type(value).__name__}" + (f" {value!r}" if isinstance(value, (int, float, str)) else "")


def _total(terms):
    return add_n(terms) if terms else None


def _run_rule(graph: Graph, node, gs, wanted, cotangents) -> None:
    """Apply the node's VJP rule; drop what it built only for inputs that need no gradient.

    A rule may return an input's gradient at a shape the input broadcasts to (the output's, for
    a broadcasting op): it is summed back to the input's shape here, once for every rule."""
    op = get_op(node.op)
    if op.vjp is None:   # the sweep only reaches differentiable ops
        raise AssertionError(f"{node.op} has no vjp rule")
    ins = [Tensor(graph, r, graph.type_of(r)) for r in node.inputs]
    outs = [Tensor(graph, node.out(i), t) for i, t in enumerate(node.outputs)]
    mark = graph.mark()
    results = op.vjp(gs, ins, outs, **node.attrs)
    if len(results) != len(ins):
        raise AssertionError(f"vjp of {node.op} returned {len(results)} gradients for {len(ins)} inputs")
    keep_refs = []
    for i in wanted:
        g = results[i]
        if g is None:
            continue
        if g.shape != ins[i].shape and broadcasts_to(ins[i].shape, g.shape):
            g = sum_to_shape(g, ins[i].shape)
        if g.shape != ins[i].shape or g.dtype != ins[i].dtype:
            raise AssertionError(f"vjp of {node.op}: gradient {g.type} for input of type {ins[i].type}")
        cotangents.setdefault(node.inputs[i], []).append(g)
        keep_refs.append(g.ref)
    prune_new_nodes(graph, mark, keep_refs)


def prune_new_nodes(graph: Graph, mark: int, keep_refs: list[ValueRef]) -> None:
    """Remove the nodes recorded since `mark` that none of `keep_refs` depends on, and forget the
    trace's cached lifts of arrays whose constant node went with them."""
    current_frame().forget_nodes(graph.prune_since(mark, keep_refs))
