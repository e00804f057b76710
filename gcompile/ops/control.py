"""Loops that stay loops: scan, fori_loop and while_loop (exported as gc.scan, gc.fori_loop, gc.while_loop).

The step function is traced once, into a body Graph held in the loop node's attributes (see
ir.graph.bodies), instead of once per step: the graph, the build time and the ONNX model stay
the same size whatever the trip count. A `scan` node reads [captured consts..., initial
carries..., xs...] and gives [final carries..., stacked ys...]; its body reads [consts...,
carries..., x slices...] and gives [new carries..., y slices...]. Tensors of the enclosing trace
used in the step are captured as consts (frontend.tensor._Frame.capture).

This module holds the front ends, the scan op's shape rule, reference and lowering, and the
`while` op. The scan op itself is registered with its VJP rule in gradients/loops.py: the rule
differentiates the body with gc.grad, which ops/ may not import (ARCHITECTURE.md §2); the front
ends only record it by name.

Lowering: a scan becomes an ONNX Scan whose body takes every operand as an input (one without
xs, a fori_loop whose index is unused, scans a placeholder); ONNX Runtime's CPU target reads
outer values directly and unrolls short loops (lowering/targets/ort_cpu/loops.py); while_loop
becomes a Loop with a condition.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import helper

from ..errors import GcompileError, ShapeError, TraceError
from ..frontend import pytree
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply_n, as_tensor, current_frame
from ..frontend.trace import inline, is_output_leaf, trace_body
from ..ir import dims
from ..ir.evaluate import bind_symbols, evaluate
from ..ir.graph import Graph, Node, TensorType, ValueRef, extract, tensor_type
from ..ir.registry import defop, supplied_vjp
from . import random
from .basic import arange, full
from .elementwise import logical_and
from .indexing import concat, stack
from .shape import reshape

_NO_Y = "no y"   # the y structure of a step function returning (carry, None)


# -- pytrees of loop values ------------------------------------------------------------------------
def _flatten(tree: Any, what: str) -> tuple[list[Tensor], Any]:
    try:
        leaves, treedef = pytree.flatten(tree, is_output_leaf)
    except TypeError as err:
        raise TraceError(f"{what} must be a Tensor, an array, a number or nested tuples/lists/dicts of them: "
                         f"{err} (at {user_location()})") from None
    return [as_tensor(leaf) for leaf in leaves], treedef


def _check_types(what: str, treedef, expected: list[TensorType], got: list[TensorType], where: str) -> None:
    for name, want, have in zip(pytree.paths(treedef, "carry"), expected, got):
        if want != have:
            raise TraceError(f"{what}: the carry returned by the step function has {name} of type {have}, but the "
                             f"initial carry's is {want}; a carry keeps its dtype and shape from step to step "
                             f"(at {where})")


# -- scan -----------------------------------------------------------------------------------------------
def scan(f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int | bool = 1, checkpoint: bool = False,
         checkpoint_every: int | tuple[int, ...] | None = None) -> tuple[Any, Any]:
    """Loop `f(carry, x) -> (carry, y)` over the leading axis of `xs`, as jax.lax.scan.

    `init` and the carry are a Tensor or nested tuples/lists/dicts of them (each leaf keeps its
    dtype and shape); `xs` likewise, every leaf stacked on axis 0, or None with `length` steps.
    Returns (final carry, ys): ys stacks each step's y (any structure, or None) on a new axis 0.
    reverse=True runs from the last step to the first (ys stay aligned with xs). `f` is traced
    once into a loop body (twice where it draws under gc.random_key: ops/random.py), lowered to
    an ONNX Scan; `unroll=k` traces k steps per body iteration (True or k >= length unrolls
    completely, as plain Python would). Tensors of the enclosing function used in `f` (weights)
    are read by the loop, and get gradients.

    Reverse mode keeps each step's intermediates for the backward loop; checkpoint=True keeps
    only the carries and recomputes each step in the backward loop instead (less memory, more
    compute; gc.checkpoint for a loop body).

    checkpoint_every=k keeps only the carry at the start of every k-th step: the loop becomes a
    scan over blocks of k steps whose body is an inner scan of those k steps (the last
    length % k steps, if any, are a scan of their own), and reverse mode recomputes a block
    from its saved carry when the backward reaches it. For n steps it keeps about n/k carries
    plus one block's worth at a time, so k near sqrt(n) keeps the least: with checkpoint=False
    a block keeps its k steps' intermediates (each step runs twice), with checkpoint=True only
    its k carries (each step runs three times). `unroll` then applies to the k steps inside a
    block. k >= length is the plain scan; the number of steps must be static. Steps that draw
    random numbers (dropout) are not recomputed: their blocks are kept whole.

    checkpoint_every=(k1, k2, ...), each smaller than the one before, nests the blocks: blocks
    of k1 steps, each a scan over blocks of k2 steps, and so on. Each level trades one more run
    of every step for fewer carries kept (about n/k1 + k1/k2 + k2 for two levels), for loops
    so long or carries so large that n/k + k carries are too many.
    """
    where = user_location()
    carry, carry_tree = _flatten(init, "scan's init")
    x_leaves, x_tree = _flatten(xs, "scan's xs") if xs is not None else ([], pytree.LEAF)
    length = _length(x_leaves, length, where)
    if unroll is not True and (isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1):
        raise GcompileError(f"scan: unroll must be a positive int or True, got {unroll!r} (at {where})")
    levels = _levels(checkpoint_every, where)
    if levels and not isinstance(length, int):
        raise GcompileError(f"scan: checkpoint_every={checkpoint_every!r} needs a static number of steps, not "
                            f"{length!r} (at {where})")

    loop = random.new_loop()

    def build(indexed: bool) -> tuple[Any, Any]:
        """The loop; with `indexed`, each step's index rides along as one more xs and is one more word
        of the key of the step's random draws (ops/random.py)."""
        y_tree: list = []

        def step(c: list[Tensor], x: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
            x, index = (x[:-1], x[-1]) if indexed else (x, None)
            with random.iteration(loop, index):
                result = f(pytree.unflatten(carry_tree, c), None if xs is None else pytree.unflatten(x_tree, x))
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise TraceError(f"scan: the step function must return a pair (carry, y), got "
                                 f"{type(result).__name__} (at {where})")
            new, new_tree = _flatten(result[0], "the carry returned by scan's step function")
            if new_tree != carry_tree:
                raise TraceError(f"scan: the step function returned a carry of another structure than init "
                                 f"({len(new)} leaves for {len(c)}) (at {where})")
            _check_types("scan", carry_tree, [t.type for t in c], [t.type for t in new], where)
            ys, tree = _flatten(result[1], "scan's y") if result[1] is not None else ([], _NO_Y)
            if y_tree and y_tree[0] != tree:
                raise TraceError(f"scan: the step function's y changed structure between steps (at {where})")
            y_tree[:] = [tree]
            return new, ys

        def run(c: list[Tensor], x: list[Tensor], steps) -> tuple[list[Tensor], list[Tensor]]:
            if unroll is not True and unroll == 1:
                return _scan_node(step, c, x, steps, reverse, checkpoint)
            if not isinstance(steps, int):
                raise GcompileError(f"scan: unroll={unroll!r} needs a static number of steps, not {steps!r} "
                                    f"(at {where})")
            if unroll is True or unroll >= steps:
                return _unrolled(step, c, x, steps, reverse)
            return _scan_blocks(step, c, x, steps, reverse, int(unroll), checkpoint)

        def nested(c: list[Tensor], x: list[Tensor], steps, levels: tuple[int, ...]):
            """`run` over `steps`, in blocks of the first level's size shorter than `steps` (each block,
            and the remainder, nested likewise with the next levels)."""
            levels = tuple(k for k in levels if k < steps)
            if not levels:
                return run(c, x, steps)
            return _checkpointed(lambda c, x, n: nested(c, x, n, levels[1:]), c, x, steps, reverse, levels[0])

        leaves = x_leaves + [arange(length)] if indexed else x_leaves
        final, ys = nested(carry, leaves, length, levels)
        return pytree.unflatten(carry_tree, final), (None if y_tree[0] is _NO_Y else pytree.unflatten(y_tree[0], ys))

    return random.with_step_index(build)


def _length(xs: list[Tensor], length: int | None, where: str):
    """The trip count: the leading dim shared by every xs leaf (an int or a symbol), or `length`."""
    if length is not None and (isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0):
        raise GcompileError(f"scan: length must be a non-negative int, got {length!r} (at {where})")
    for x in xs:
        if x.ndim == 0:
            raise ShapeError(f"scan: every leaf of xs needs a leading axis to scan over; got {x!r} (at {where})")
    leading = {x.shape[0] for x in xs}
    if len(leading) > 1:
        raise ShapeError(f"scan: the leaves of xs have different leading dims {sorted(map(str, leading))} "
                         f"(at {where})")
    if not xs:
        if length is None:
            raise GcompileError(f"scan: without xs, give the number of steps as length= (at {where})")
        return int(length)
    (dim,) = leading
    if length is not None and dim != length:
        raise ShapeError(f"scan: length={length} but xs has {dim!r} steps (at {where})")
    return dim


def _unrolled(step, carry, xs, length: int, reverse: bool):
    """The loop traced step by step, as plain Python would (unroll=True, or short loops)."""
    if length == 0:
        return _empty(step, carry, xs)
    ys: list = [None] * length
    for t in (reversed(range(length)) if reverse else range(length)):
        carry, ys[t] = step(carry, [x[t] for x in xs])
    return carry, [stack([y[j] for y in ys]) for j in range(len(ys[0]))]


def _empty(step, carry, xs):
    """Zero steps: the carry is unchanged and ys are empty, typed by tracing the step once (unrecorded)."""
    body, _ = trace_body(lambda v: sum(step(v[:len(carry)], v[len(carry):]), []),
                         [t.type for t in carry] + [_slice_type(x.type) for x in xs])
    ys = [body.type_of(r) for r in body.outputs[len(carry):]]
    return carry, [full((0, *t.shape), 0, t.dtype) for t in ys]


def _slice_type(t: TensorType) -> TensorType:
    return tensor_type(t.dtype, t.shape[1:])


def _scan_node(step, carry, xs, length, reverse: bool, checkpoint: bool):
    """One scan node whose body is `step` traced once."""
    if length == 0:
        return _empty(step, carry, xs)
    nk = len(carry)
    body, consts = trace_body(lambda v: sum(step(v[:nk], v[nk:]), []),
                              [t.type for t in carry] + [_slice_type(x.type) for x in xs])
    outs = apply_n("scan", [*consts, *carry, *xs], body=body, n_consts=len(consts), n_carry=nk,
                   reverse=bool(reverse), length=length, checkpoint=bool(checkpoint))
    return outs[:nk], outs[nk:]


def _scan_blocks(step, carry, xs, length: int, reverse: bool, k: int, checkpoint: bool):
    """unroll=k: a scan whose body runs k steps, over length // k blocks; the remaining steps unrolled
    after it (before it, reversed)."""
    blocks, main = length // k, length // k * k

    def block(c, xb):
        ys: list = [None] * k
        for i in (reversed(range(k)) if reverse else range(k)):
            c, ys[i] = step(c, [x[i] for x in xb])
        return c, [stack([y[j] for y in ys]) for j in range(len(ys[0]))]

    def blocked(c):
        x_main = [reshape(x[:main], (blocks, k, *x.shape[1:])) for x in xs]
        c, ys = _scan_node(block, c, x_main, blocks, reverse, checkpoint)
        return c, [reshape(y, (main, *y.shape[2:])) for y in ys]

    def rest(c):
        return _unrolled(step, c, [x[main:] for x in xs], length - main, reverse)

    return _then_rest(blocked, rest, carry, main == length, reverse)


def _then_rest(blocked, rest, carry, whole: bool, reverse: bool):
    """The loop as its blocks (`blocked`) then the remaining steps (`rest`), or the other way round
    when it runs in reverse; ys joined in step order. `whole`: no steps remain."""
    if whole:
        return blocked(carry)
    if reverse:
        carry, tail = rest(carry)
        carry, head = blocked(carry)
    else:
        carry, head = blocked(carry)
        carry, tail = rest(carry)
    return carry, [concat([a, b], axis=0) for a, b in zip(head, tail)]


def _levels(checkpoint_every, where: str) -> tuple[int, ...]:
    """scan's checkpoint_every as a tuple of block sizes, outermost first (empty for None)."""
    if checkpoint_every is None:
        return ()
    levels = checkpoint_every if isinstance(checkpoint_every, tuple) else (checkpoint_every,)
    if not levels or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in levels) \
            or any(a <= b for a, b in zip(levels, levels[1:])):
        raise GcompileError(f"scan: checkpoint_every must be a positive int, or a tuple of positive ints each smaller "
                            f"than the one before, got {checkpoint_every!r} (at {where})")
    return tuple(int(k) for k in levels)


def _checkpointed(run, carry, xs, length: int, reverse: bool, k: int):
    """checkpoint_every=k (k < length): a checkpointing scan over length // k blocks, each block
    `run` over its k steps (an inner loop); the remaining length % k steps `run` after it (before
    it, reversed). The outer scan has checkpoint=True whatever the user asked: its backward then
    keeps only each block's starting carry and recomputes the block's inner loop from it, which
    keeps its own intermediates (or carries, with checkpoint=True) for that one block only."""
    blocks, main = length // k, length // k * k

    def block(c, xb):
        return run(c, xb, k)

    def blocked(c):
        x_main = [reshape(x[:main], (blocks, k, *x.shape[1:])) for x in xs]
        c, ys = _scan_node(block, c, x_main, blocks, reverse, True)
        return c, [reshape(y, (main, *y.shape[2:])) for y in ys]

    def rest(c):
        return run(c, [x[main:] for x in xs], length - main)

    return _then_rest(blocked, rest, carry, main == length, reverse)


def fori_loop(lower: int, upper: int, body: Callable[[Tensor, Any], Any], init: Any, unroll: int | bool = 1,
              checkpoint: bool = False, checkpoint_every: int | tuple[int, ...] | None = None) -> Any:
    """body(i, value) for i = lower, ..., upper - 1 (static ints), as jax.lax.fori_loop; returns the
    final value. A scan whose xs is the int64 index, so it differentiates like scan (unroll,
    checkpoint and checkpoint_every are scan's)."""
    for bound in (lower, upper):
        if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)):
            raise GcompileError(f"fori_loop: the bounds must be Python ints (the trip count is static; use "
                                f"gc.while_loop for a bound known at run time), got {bound!r} (at {user_location()})")
    index = np.arange(int(lower), max(int(lower), int(upper)), dtype=np.int64)
    value, _ = scan(lambda v, i: (body(i, v), None), init, index, unroll=unroll, checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every)
    return value


def scan_parts(node_inputs: list, n_consts: int, n_carry: int) -> tuple[list, list, list]:
    """A scan node's operands (or anything aligned with them) as (consts, carries, xs)."""
    return node_inputs[:n_consts], node_inputs[n_consts:n_consts + n_carry], node_inputs[n_consts + n_carry:]


def _scan_infer(types, *, body: Graph, n_consts: int, n_carry: int, reverse: bool, length, checkpoint: bool):
    inner = [body.type_of(r) for r in body.inputs]
    if len(inner) != len(types):
        raise ShapeError(f"scan: {len(types)} operands for a body of {len(inner)} inputs")
    consts, carries, xs = scan_parts(list(zip(types, inner)), n_consts, n_carry)
    outs = [body.type_of(r) for r in body.outputs]
    for (outer, step), new in zip(carries, outs):
        if not outer == step == new:
            raise ShapeError(f"scan: a carry of type {outer} has body input {step} and output {new}")
    for outer, step in consts:
        if outer != step:
            raise ShapeError(f"scan: a loop-invariant operand of type {outer} read as {step}")
    for outer, step in xs:
        if outer.dtype != step.dtype or outer.shape != (length, *step.shape):
            raise ShapeError(f"scan: an xs operand of type {outer} for {length!r} steps of {step}")
    return outs[:n_carry] + [tensor_type(t.dtype, (length, *t.shape)) for t in outs[n_carry:]]


def _scan_reference(*arrays, body: Graph, n_consts: int, n_carry: int, reverse: bool, length, checkpoint: bool):
    consts, carry, xs = scan_parts(list(arrays), n_consts, n_carry)
    steps = xs[0].shape[0] if xs else int(length)
    ys: list = [None] * steps
    for t in (reversed(range(steps)) if reverse else range(steps)):
        outs = evaluate(body, [*consts, *carry, *(x[t] for x in xs)])
        carry, ys[t] = outs[:n_carry], outs[n_carry:]
    if steps:
        stacked = [np.stack([y[j] for y in ys]) for j in range(len(body.outputs) - n_carry)]
    else:   # the y shapes, from the body's types with the symbols its operands bind
        bound = bind_symbols(body, [*consts, *carry, *(np.empty(x.shape[1:], x.dtype) for x in xs)])
        stacked = [np.zeros((0, *dims.resolve_shape(body.type_of(r).shape, bound)), body.type_of(r).dtype)
                   for r in body.outputs[n_carry:]]
    return tuple(carry) + tuple(stacked)


def _scalar(dtype) -> TensorType:
    return tensor_type(dtype, ())


def scan_lower(ctx, names, node: Node, emit) -> list[str]:
    """The scan node as `emit(ctx, names, node)` lowers it for a static length. ONNX Runtime
    refuses a Scan over zero steps, so with a symbolic length the loop sits in an If whose other
    branch, for zero steps, passes the initial carries on and gives empty ys."""
    length = node.attrs["length"]
    if isinstance(length, int):
        return _as_list(emit(ctx, names, node))
    nk = node.attrs["n_carry"]
    carries = scan_parts(names, node.attrs["n_consts"], nk)[1]

    def empty(branch) -> list[str]:
        return carries + [branch.fill(t.shape, 0, t.dtype) for t in node.outputs[nk:]]

    steps = ctx.dim_scalar(length)
    none = ctx.emit("Equal", [steps, ctx.const(np.asarray(0, np.int64))])
    return _as_list(ctx.emit("If", [none], n_out=len(node.outputs), then_branch=ctx.branch(empty, node.outputs),
                             else_branch=ctx.branch(lambda branch: _as_list(emit(branch, names, node)),
                                                    node.outputs)))


def _as_list(names) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


def _closed_scan(ctx, names, node: Node) -> list[str]:
    """A forward Scan whose body reads nothing from outside it (loop-invariant operands, constants
    and shape tensors are state variables passed on unchanged: LowerContext.closed); a reverse
    scan's xs are reversed by a Slice before it and its ys after it. The spec's Scan takes outer
    values this way, and other runtimes need it: OpenVINO's Scan converter refuses outer-scope
    reads, and onnx's ReferenceEvaluator (1.23) has no backward scan directions."""
    a = node.attrs
    nk = a["n_carry"]
    if len(names) == a["n_consts"] + nk:
        return _counted_loop(ctx, names, node)
    consts, carries, xs = scan_parts(names, a["n_consts"], nk)
    body: Graph = a["body"]
    graph = ctx.subgraph(body, consts + [None] * (len(names) - a["n_consts"]))
    graph, states = ctx.closed(graph, {name: body.type_of(ref) for name, ref in zip(consts, body.inputs)})
    if a["reverse"]:
        xs = [ctx.reverse(x, [0], [a["length"]]) for x in xs]
    outs = _as_list(ctx.emit("Scan", states + carries + xs, n_out=len(states) + len(node.outputs), body=graph,
                             num_scan_inputs=len(xs)))[len(states):]
    return outs[:nk] + [ctx.reverse(y, [0], [a["length"]]) for y in outs[nk:]] if a["reverse"] else outs


def _counted_loop(ctx, names, node: Node) -> list[str]:
    """A scan without xs (a fori_loop, a scan given only `length`) as the ONNX construct for a
    counted loop: a Loop with a trip count, whose body passes its condition on and reads
    loop-invariant operands from the enclosing graph (as gc.while_loop's Loop does). OpenVINO ran a
    Scan over a placeholder that its body does not read for one step instead of `length` (it drops
    the unread input); ONNX Runtime's faster placeholder Scan is the ort-cpu target's."""
    a = node.attrs
    nc, nk = a["n_consts"], a["n_carry"]
    body: Graph = a["body"]
    graph = ctx.subgraph(body, names[:nc] + [None] * nk, head=_LOOP_HEAD, echo=[1])
    _ys_as_rows(ctx, graph, [body.type_of(r) for r in body.outputs[nk:]])
    trips = ctx.dim_scalar(a["length"])
    outs = _as_list(ctx.emit("Loop", [trips, ctx.const(np.asarray(True)), *names[nc:]], n_out=len(node.outputs),
                             body=graph))
    ys = _rows_stacked(ctx, outs[nk:], node.outputs[nk:])
    return outs[:nk] + ([ctx.reverse(y, [0], [a["length"]]) for y in ys] if a["reverse"] else ys)


# A Loop body's first inputs: the iteration number and the condition.
_LOOP_HEAD = [("iteration", _scalar(np.int64)), ("condition", _scalar(np.bool_))]


def _rows_stacked(ctx, stacked: list[str], types: list[TensorType]) -> list[str]:
    """A Loop's scan outputs, made of the rows of _ys_as_rows, as the ys of `types` (allowzero: a
    zero-sized dim, an empty batch, stays zero where ONNX would copy the rows' 1)."""
    return [ctx.emit("Reshape", [y, ctx.shape_tensor(t.shape)], allowzero=1) for y, t in zip(stacked, types)]


def _ys_as_rows(ctx, graph, ys: list[TensorType]) -> None:
    """Makes the last len(ys) outputs of the Loop body `graph` rows of shape (1, ...): onnx's
    ReferenceEvaluator (1.23) joins a Loop's scan outputs with numpy.vstack, which stacks only
    rows; a Reshape after the Loop drops the 1 where a runtime stacks them."""
    if not ys:
        return
    axes = ctx.int64s([0])
    for out, t in zip(graph.output[len(graph.output) - len(ys):], ys):
        row = ctx.fresh(f"{out.name}_row")
        graph.node.append(helper.make_node("Unsqueeze", [out.name, axes], [row]))
        out.CopyFrom(helper.make_tensor_value_info(row, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)),
                                                   [1, *t.shape]))


# The VJP rule differentiates the body with gc.grad, so gradients/loops.py supplies it (ARCHITECTURE.md §2).
defop("scan", infer=_scan_infer, reference=_scan_reference,
      lower=lambda ctx, names, node: scan_lower(ctx, names, node, _closed_scan), vjp=supplied_vjp("scan"))


# -- narrowing a scan node: what passes/loops.py prunes -------------------------------------------------------
def scan_uses(graph: Graph, node: Node) -> set[int]:
    """The output indices of `node` read by another node or by the graph's outputs."""
    used = {r.index for r in graph.outputs if r.node == node.id}
    for consumer in graph.consumers(node.id):
        used.update(r.index for r in consumer.inputs if r.node == node.id)
    return used


def narrow_scan(graph: Graph, node: Node, consts: list[int], frozen: list[int], carries: list[int], xs: list[int],
                ys: list[int]) -> None:
    """Rewrite a scan node in place to keep only the listed positions (indices within each group of
    its operands and outputs: consts, carries, xs, ys). The `frozen` carries, which the body passes
    on unchanged, become consts. Readers of the kept outputs follow their new indices; no one may
    read a dropped output. The node gets a new body (bodies may be shared)."""
    a, body = node.attrs, node.attrs["body"]
    nc, nk = a["n_consts"], a["n_carry"]
    ins, outs = body.inputs, body.outputs
    new_body = extract(body, [ins[i] for i in consts] + [ins[nc + i] for i in frozen + carries]
                       + [ins[nc + nk + i] for i in xs], [outs[i] for i in carries] + [outs[nk + j] for j in ys])
    operands = node.inputs
    graph.replace_inputs(node, [operands[i] for i in consts] + [operands[nc + i] for i in frozen + carries]
                         + [operands[nc + nk + i] for i in xs])
    kept = carries + [nk + j for j in ys]
    moved = {node.out(old): ValueRef(node.id, new) for new, old in enumerate(kept)}
    node.outputs = [node.outputs[i] for i in kept]
    node.attrs = {**a, "body": new_body, "n_consts": len(consts) + len(frozen), "n_carry": len(carries)}
    for consumer in graph.consumers(node.id):
        graph.replace_inputs(consumer, [moved[r] if r.node == node.id else r for r in consumer.inputs])
    graph.outputs = [moved[r] if r.node == node.id else r for r in graph.outputs]


# -- while_loop -------------------------------------------------------------------------------------------------
def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any,
               checkpoint_every: int | None = None) -> Any:
    """Repeat value = body_fun(value) while cond_fun(value) (a bool scalar Tensor), as
    jax.lax.while_loop; returns the final value. The trip count is only known at run time: it
    lowers to an ONNX Loop with a condition.

    Reverse mode works (gradients/loops.py): the forward loop then also stacks the carry at the
    start of each step (an ONNX Loop scan output, of run-time length), and the backward is a loop
    over those steps in reverse (an ONNX Scan), applying the step's VJP to each saved carry (the
    step is computed again there: the memory kept is the carries only). Tensors of the enclosing
    function used in the loop get gradients too. Second order comes from the same rules.

    checkpoint_every=k keeps one carry every k steps instead: the loop becomes a loop over blocks of
    at most k steps (an inner while loop), so reverse mode saves the carry at each block's start and
    recomputes a block's carries when its backward runs (about n/k + k carries kept for n steps,
    each step run three times)."""
    where = user_location()
    carry, tree = _flatten(init_val, "while_loop's init_val")
    every = checkpoint_every
    if every is not None and (isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1):
        raise GcompileError(f"while_loop: checkpoint_every must be a positive int, got {checkpoint_every!r} "
                            f"(at {where})")

    loop = random.new_loop()

    def build(indexed: bool) -> Any:
        """The loop; with `indexed`, a step counter rides along as one more carry and is one more word of
        the key of the step's random draws (ops/random.py)."""
        n = len(carry)

        def condition(values: list[Tensor]) -> Tensor:
            c = as_tensor(cond_fun(pytree.unflatten(tree, values[:n])))
            if c.dtype != np.bool_ or c.shape != ():
                raise TraceError(f"while_loop: cond_fun must return a bool scalar Tensor, got {c.type} (at {where})")
            return c

        def step(values: list[Tensor]) -> tuple[Tensor, list[Tensor], list[Tensor]]:
            with random.iteration(loop, values[n] if indexed else None):
                new, new_tree = _flatten(body_fun(pytree.unflatten(tree, values[:n])), "the value returned by body_fun")
            if new_tree != tree:
                raise TraceError(f"while_loop: body_fun returned a value of another structure than init_val "
                                 f"(at {where})")
            _check_types("while_loop", tree, [t.type for t in values[:n]], [t.type for t in new], where)
            return condition(new), (new + [values[n] + 1] if indexed else new), []

        start = carry + [as_tensor(np.int64(0))] if indexed else carry
        if checkpoint_every is not None:
            k = int(checkpoint_every)

            def block(values: list[Tensor]) -> tuple[Tensor, list[Tensor], list[Tensor]]:
                def inner(v: list[Tensor]) -> tuple[Tensor, list[Tensor], list[Tensor]]:
                    go, new, _ = step(v[1:])
                    return logical_and(go, v[0] + 1 < k), [v[0] + 1, *new], []
                # the outer loop runs a block only while the condition holds: its first step always runs
                done, _ = while_node(inner, as_tensor(np.array(True)), [as_tensor(np.int64(0)), *values], where)
                return condition(done[1:]), done[1:], []
            finals, _ = while_node(block, condition(start), start, where)
        else:
            finals, _ = while_node(step, condition(start), start, where)
        return pytree.unflatten(tree, finals[:n])

    return random.with_step_index(build)


def while_node(step: Callable[[list[Tensor]], tuple[Tensor, list[Tensor], list[Tensor]]], first: Tensor,
               carry: list[Tensor], where: str) -> tuple[list[Tensor], list[Tensor]]:
    """One `while` node: while the condition holds (`first` before the first step), carry, ys =
    step(carry)[1:], where step(carry) returns (condition for the next step, new carry, ys). Returns
    the final carry and the ys stacked on a new axis 0 whose length, the number of steps taken, is a
    new symbolic dim (steps_symbol). The importer's run-time Loop is this; gc.while_loop has no ys."""
    def traced(values: list[Tensor]) -> list[Tensor]:
        go, new, ys = step(values)
        if len(new) != len(values):
            raise TraceError(f"while: the step returned {len(new)} carries for {len(values)} (at {where})")
        for old, now in zip(values, new):
            if old.type != now.type:
                raise TraceError(f"while: a carry of type {old.type} became {now.type}; a carry keeps its dtype "
                                 f"and shape from step to step (at {where})")
        ys_seen[:] = [len(ys)]
        return [go, *new, *ys]

    ys_seen = [0]
    body, consts = trace_body(traced, [t.type for t in carry])
    outs = apply_n("while", [*consts, first, *carry], body=body, n_consts=len(consts), source=where,
                   n_ys=ys_seen[0], steps=steps_symbol() if ys_seen[0] else None, saved=False)
    return outs[:len(carry)], outs[len(carry):]


def steps_symbol() -> str:
    """A new symbolic dim for the number of steps a while loop takes (the length of its stacked ys),
    known only once it has run: named after the node about to be recorded and the depth of nesting
    (lowering binds it where the loop runs, the evaluator from the loop's result)."""
    frame, depth = current_frame(), 0
    while frame.parent is not None:
        frame, depth = frame.parent, depth + 1
    return f"steps{depth}_{current_frame().graph.mark()}"


def _while_parts(node_inputs: list, n_consts: int) -> tuple[list, Any, list]:
    return node_inputs[:n_consts], node_inputs[n_consts], node_inputs[n_consts + 1:]


def _while_infer(types, *, body: Graph, n_consts: int, source: str, n_ys: int = 0, steps=None, saved: bool = False):
    inner = [body.type_of(r) for r in body.inputs]
    outs = [body.type_of(r) for r in body.outputs]
    consts, first, carries = _while_parts(types, n_consts)
    nk = len(carries)
    if len(inner) != n_consts + nk or len(outs) != 1 + nk + n_ys:
        raise ShapeError(f"while: {len(types)} operands and {n_ys} ys for a body of {len(inner)} inputs and "
                         f"{len(outs)} outputs")
    if first != _scalar(np.bool_) or outs[0] != _scalar(np.bool_):
        raise ShapeError(f"while: the condition must be a bool scalar, got {first} and {outs[0]}")
    for outer, step, new in zip(carries, inner[n_consts:], outs[1:]):
        if not outer == step == new:
            raise ShapeError(f"while: a carry of type {outer} has body input {step} and output {new}")
    if n_ys and steps is None:
        raise ShapeError("while: stacked ys need a symbol for the number of steps")
    return outs[1:1 + nk] + [tensor_type(t.dtype, (steps, *t.shape)) for t in outs[1 + nk:]]


def _while_reference(*arrays, body: Graph, n_consts: int, source: str, n_ys: int = 0, steps=None,
                     saved: bool = False):
    consts, go, carry = _while_parts(list(arrays), n_consts)
    go, carry = bool(go), list(carry)
    nk = len(carry)
    ys: list = []
    while go:
        outs = evaluate(body, consts + carry)
        go, carry = bool(outs[0]), outs[1:1 + nk]
        ys.append(outs[1 + nk:])
    if ys:
        stacked = [np.stack([y[j] for y in ys]) for j in range(n_ys)]
    else:   # the y shapes, from the body's types with the symbols its operands bind
        bound = bind_symbols(body, consts + carry)
        stacked = [np.zeros((0, *dims.resolve_shape(body.type_of(r).shape, bound)), body.type_of(r).dtype)
                   for r in body.outputs[1 + nk:]]
    return tuple(carry) + tuple(stacked)


def _while_lower(ctx, names, node: Node):
    """An ONNX Loop with a condition and no trip count; the ys are its scan outputs, each step's as a
    row (_ys_as_rows). ONNX Runtime (1.31) gives a zero-step Loop's scan outputs shape (0,): that Reshape
    gives them their rank back too. The number of steps (the `steps` symbol, for the shapes of what
    reads the ys) is the first one's leading dim."""
    a = node.attrs
    nc = a["n_consts"]
    body: Graph = a["body"]
    nk = len(names) - nc - 1
    graph = ctx.subgraph(body, names[:nc] + [None] * nk, head=_LOOP_HEAD)
    n_ys = a.get("n_ys", 0)
    _ys_as_rows(ctx, graph, [body.type_of(r) for r in body.outputs[1 + nk:]])
    outs = _as_list(ctx.emit("Loop", ["", *names[nc:]], n_out=len(node.outputs), body=graph))
    if not n_ys:
        return outs
    ctx.bind_symbol(a["steps"], ctx.emit("Shape", [outs[nk]], start=0, end=1))
    return outs[:nk] + _rows_stacked(ctx, outs[nk:], node.outputs[nk:])


# The VJP rule differentiates the body with gc.grad, so gradients/loops.py supplies it (ARCHITECTURE.md §2).
defop("while", infer=_while_infer, reference=_while_reference, lower=_while_lower, vjp=supplied_vjp("while"))

# -- cond: a branch chosen at run time ------------------------------------------------------------------------
def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
    """true_fun(*operands) if pred else false_fun(*operands), as jax.lax.cond, with pred a bool scalar
    Tensor known only at run time: an ONNX If, which runs one branch. Each operand is a Tensor or
    nested tuples/lists/dicts of them, as jax.lax.cond's; both branches return the same structure
    of Tensors of the same dtypes and shapes. Differentiable: the backward is a `cond` on the same
    pred whose branches are the two branches' VJPs (so every order is one too)."""
    where = user_location()
    pred = as_tensor(pred)
    if pred.dtype != np.bool_ or pred.shape != ():
        raise TraceError(f"cond: pred must be a bool scalar Tensor, got {pred.type} (at {where})")
    args, args_tree = _flatten(operands, "cond's operands")
    trees: list = []

    def branch(fun):
        def traced(v: list[Tensor]) -> list[Tensor]:
            leaves, tree = _flatten(fun(*pytree.unflatten(args_tree, v)), "cond's branch result")
            trees.append(tree)
            return leaves
        return trace_body(traced, [t.type for t in args])
    then_body, then_captured = branch(true_fun)
    else_body, else_captured = branch(false_fun)
    if trees[0] != trees[1]:
        raise TraceError(f"cond: the two branches return values of different structures (at {where})")
    outs = cond_node(pred, args, then_body, then_captured, else_body, else_captured, where)
    return pytree.unflatten(trees[0], outs)


def cond_node(pred: Tensor, args: list[Tensor], then_body: Graph, then_captured: list[Tensor], else_body: Graph,
              else_captured: list[Tensor], where: str) -> list[Tensor]:
    """One `cond` node from two bodies traced on `args` (each reading its captured Tensors first):
    both are made to read [args, then's captures, else's captures]."""
    n, nt = len(args), len(then_captured)
    types = [t.type for t in args + then_captured + else_captured]
    for body, other in ((then_body, else_body), (else_body, then_body)):
        mine = [body.type_of(r) for r in body.outputs]
        theirs = [other.type_of(r) for r in other.outputs]
        if mine != theirs:
            raise TraceError(f"cond: the branches return {[str(t) for t in mine]} and {[str(t) for t in theirs]}; "
                             f"both must return the same dtypes and shapes (at {where})")
    then_all, _ = trace_body(lambda v: inline(then_body, v[n:n + nt] + v[:n]), types)
    else_all, _ = trace_body(lambda v: inline(else_body, v[n + nt:] + v[:n]), types)
    return apply_n("cond", [pred, *args, *then_captured, *else_captured], then_body=then_all, else_body=else_all,
                   source=where)


def _cond_infer(types, *, then_body: Graph, else_body: Graph, source: str):
    if types[0] != _scalar(np.bool_):
        raise ShapeError(f"cond: the predicate must be a bool scalar, got {types[0]}")
    for body in (then_body, else_body):
        if [body.type_of(r) for r in body.inputs] != list(types[1:]):
            raise ShapeError("cond: a branch's inputs differ from the operands")
    return [then_body.type_of(r) for r in then_body.outputs]


def _cond_reference(pred, *arrays, then_body: Graph, else_body: Graph, source: str):
    return tuple(evaluate(then_body if bool(pred) else else_body, list(arrays)))


def _cond_lower(ctx, names, node: Node):
    """An ONNX If whose branches read the operands from the enclosing graph."""
    a = node.attrs
    return ctx.emit("If", [names[0]], n_out=len(node.outputs),
                    then_branch=ctx.inline_branch(a["then_body"], names[1:], node.outputs),
                    else_branch=ctx.inline_branch(a["else_body"], names[1:], node.outputs))


# The VJP rule differentiates the branches with gc.grad: gradients/loops.py supplies it.
defop("cond", infer=_cond_infer, reference=_cond_reference, lower=_cond_lower, vjp=supplied_vjp("cond"))


# -- root: implicit differentiation ---------------------------------------------------------------------------
def _root_infer(types, *, body: Graph, x_index: int, source: str, adjoint: str, tol: float, adjoint_steps: int):
    inner = [body.type_of(r) for r in body.inputs]
    if inner != list(types):
        raise ShapeError(f"root: operands {[str(t) for t in types]} for a body of inputs {[str(t) for t in inner]}")
    (residual,) = [body.type_of(r) for r in body.outputs]
    if residual != types[x_index]:
        raise ShapeError(f"root: the function whose root is found gives {residual} for an x of type {types[x_index]}; "
                         "it must give one value per element of x")
    return [types[x_index]]


def _root_lower(ctx, names, node: Node):
    return ctx.emit("Identity", [names[node.attrs["x_index"]]])


# x = root(..., x*, ...): the solution x* of body(..., x, ...) = 0 found by any solver, passed on; its VJP,
# by the implicit function theorem, is one linear solve, by the method `adjoint` names (gradients/implicit.py
# supplies it).
defop("root", infer=_root_infer, reference=lambda *arrays, body, x_index, **_: arrays[x_index],
      lower=_root_lower, vjp=supplied_vjp("root"))

__all__: list[str] = []   # gc.scan, gc.fori_loop, gc.while_loop: exported by gcompile/__init__.py
