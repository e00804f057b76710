"""The scan op, registered with its VJP rule: reverse mode through a loop is a loop running backwards.

The forward front ends, shape rule, reference and lowering live in ops/control.py; the rule lives
here because it differentiates the body with gc.grad (ARCHITECTURE.md §2).

For a body B(consts c, carry k, x) -> (k', y), the rule traces a *joint* body J(c, k, x, k̄', ȳ)
by inlining B and asking gc.grad for the cotangents of k, x and the float consts, weighted by
(k̄', ȳ). J's nodes fall in two parts: the *primal* part (what does not depend on k̄' or ȳ:
B itself, and what the VJP rules compute from forward values alone) and the rest. The backward
loop runs the rest, over the steps in the other direction; the primal values it reads are either
recomputed in it (values that depend only on the consts, which are the same at every step, and
with checkpoint=True every non-random primal value, from the carry at the step's start) or saved
by the forward loop at each step, as extra stacked y outputs ("residuals"). For those the
forward scan node is rebuilt in place: its body becomes J's primal part, computing the residuals
too, and the new outputs are appended (existing outputs keep their indices, so the Tensors the
user holds stay valid; this is the one rule that edits a node it did not create). The backward
loop carries the carry's cotangent and one accumulator per float const (the sum of its per-step
gradients), and stacks the xs' cotangents as ys.

The backward loop is an ordinary scan node, so differentiating it calls this rule again: second
and third order come from the same code. Outputs no one reads (the gradient of an input nobody
asked for, residuals a pruned backward no longer needs) are removed by passes/loops.py.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..frontend.tensor import Tensor, apply_n, current_frame
from ..frontend.trace import inline, trace_body
from ..ir import dims
from ..ir.dtypes import is_float
from ..ir.graph import Graph, ValueRef, bodies, extract, tensor_type
from ..ir.registry import Trait, has_trait, is_random, supply_vjp
from ..ops.basic import zeros_like
from ..ops.control import steps_symbol
from .engine import grad


def _stacked(t, length):
    return tensor_type(t.dtype, (length, *t.shape))


def _scan_vjp(grads, inputs, outputs, *, body: Graph, n_consts: int, n_carry: int, reverse: bool, length,
              checkpoint: bool):
    nc, nk = n_consts, n_carry
    nx, ny = len(inputs) - nc - nk, len(outputs) - nk
    consts, init, xs = inputs[:nc], inputs[nc:nc + nk], inputs[nc + nk:]
    fk = [i for i in range(nk) if is_float(init[i].dtype)]     # carries with cotangents
    fx = [j for j in range(nx) if is_float(xs[j].dtype)]       # xs with cotangents
    fc = [i for i in range(nc) if is_float(consts[i].dtype)]   # consts with cotangents
    ys_in = [j for j in range(ny) if grads[nk + j] is not None]  # ys with a cotangent (None: a symbolic zero)

    # -- the joint body J(c, k, x, k̄', ȳ) -> (k̄, x̄, c̄) -----------------------------------------------
    primal: list[Tensor] = []

    def joint(v: list[Tensor]) -> list[Tensor]:
        c, k, x = v[:nc], v[nc:nc + nk], v[nc + nk:nc + nk + nx]
        seeds = v[nc + nk + nx:]
        primal[:] = inline(body, c + k + x)
        targets = [primal[i] for i in fk] + [primal[nk + j] for j in ys_in]
        return grad(targets, [k[i] for i in fk] + [x[j] for j in fx] + [c[i] for i in fc], seeds)

    step_types = [body.type_of(r) for r in body.inputs]
    out_types = [body.type_of(r) for r in body.outputs]
    joint_graph, captured = trace_body(joint, step_types + [out_types[i] for i in fk]
                                       + [out_types[nk + j] for j in ys_in])
    assert not captured, "the joint body reads only its inputs"
    j_inputs = joint_graph.inputs
    c_in, k_in, x_in = j_inputs[:nc], j_inputs[nc:nc + nk], j_inputs[nc + nk:nc + nk + nx]
    seed_in = j_inputs[nc + nk + nx:]

    # -- which primal values the backward loop reads from the forward one -------------------------------
    tangent = _depending_on(joint_graph, {r.node for r in seed_in})
    variant = _depending_on(joint_graph, {r.node for r in k_in + x_in}, tangent, random=True)
    read_c, read_x, saved = _cut(joint_graph, tangent, variant, checkpoint, c_in, x_in, seed_in)
    if nx and not (read_x or saved or ys_in) and not isinstance(length, int):
        # A backward reading nothing per step (the step is affine in what it differentiates: the
        # backward of a while loop's backward, say) still needs an xs: a symbolic number of steps
        # is only known from one at run time (prune_loops keeps one likewise).
        read_x = [0]
    primal_refs = [p.ref for p in primal]

    # -- the forward loop, extended with the saved values --------------------------------------------------
    graph = current_frame().graph
    forward = graph.nodes[outputs[0].ref.node]
    reused = {ref: outputs[nk + j] for j, ref in reversed(list(enumerate(primal_refs[nk:]))) if ref in saved}
    extra = [ref for ref in saved if ref not in reused]
    saved_tensors = dict(reused)
    if extra:
        first = len(forward.outputs)
        forward.attrs = {**forward.attrs, "body": extract(joint_graph, c_in + k_in + x_in, primal_refs + extra)}
        forward.outputs = forward.outputs + [_stacked(joint_graph.type_of(r), length) for r in extra]
        saved_tensors.update((ref, Tensor(graph, forward.out(first + i), forward.outputs[first + i]))
                             for i, ref in enumerate(extra))

    # -- the backward loop -------------------------------------------------------------------------------------
    core = extract(joint_graph, [c_in[i] for i in read_c] + seed_in[:len(fk)] + saved + [x_in[j] for j in read_x]
                   + seed_in[len(fk):], joint_graph.outputs)
    n_read, n_fk, n_fc = len(read_c), len(fk), len(fc)

    def backward(v: list[Tensor]) -> list[Tensor]:
        c, k_bar, acc = v[:n_read], v[n_read:n_read + n_fk], v[n_read + n_fk:n_read + n_fk + n_fc]
        rest = v[n_read + n_fk + n_fc:]
        outs = inline(core, c + k_bar + rest)
        k_prev, x_bar, c_bar = outs[:n_fk], outs[n_fk:n_fk + len(fx)], outs[n_fk + len(fx):]
        return [*k_prev, *(a + g for a, g in zip(acc, c_bar)), *x_bar]

    types = ([step_types[i] for i in read_c] + [step_types[nc + i] for i in fk] + [step_types[i] for i in fc]
             + [joint_graph.type_of(r) for r in saved] + [step_types[nc + nk + j] for j in read_x]
             + [out_types[nk + j] for j in ys_in])
    back_body, captured = trace_body(backward, types)
    assert not captured, "the backward body reads only its inputs"
    operands = ([consts[i] for i in read_c] + [zeros_like(init[i]) if grads[i] is None else grads[i] for i in fk]
                + [zeros_like(consts[i]) for i in fc] + [saved_tensors[r] for r in saved] + [xs[j] for j in read_x]
                + [grads[nk + j] for j in ys_in])
    outs = apply_n("scan", operands, body=back_body, n_consts=n_read, n_carry=n_fk + n_fc, reverse=not reverse,
                   length=length, checkpoint=checkpoint)
    result: list[Tensor | None] = [None] * len(inputs)
    for pos, i in enumerate(fk):
        result[nc + i] = outs[pos]
    for pos, i in enumerate(fc):
        result[i] = outs[n_fk + pos]
    for pos, j in enumerate(fx):
        result[nc + nk + j] = outs[n_fk + n_fc + pos]
    return result


def _depending_on(graph: Graph, sources: set[int], exclude: frozenset[int] | set[int] = frozenset(),
                  random: bool = False) -> set[int]:
    """Ids of the nodes of `graph` (outside `exclude`) that depend on a node in `sources` (sources
    included); with random=True, random ops count as sources too."""
    reached = set(sources)
    for node in graph.topo_order():
        if node.id in exclude:
            continue
        if any(r.node in reached for r in node.inputs) or random and is_random(node):
            reached.add(node.id)
    return reached - set(exclude)


def _cut(graph: Graph, tangent: set[int], variant: set[int], checkpoint: bool, c_in, x_in, seed_in):
    """Walk back from the joint body's outputs through what the backward loop computes itself: the
    tangent part, and the primal nodes it recomputes (those that do not vary per step, or with
    checkpoint every non-random one). Returns the consts and xs it reads (positions) and the values
    it needs saved by the forward loop (refs of `graph`, in id order)."""
    x_nodes = {r.node for r in x_in}
    bound = dims.shape_symbols(graph.type_of(r).shape for r in [*c_in, *x_in, *seed_in])
    _, _, first = _walk(graph, c_in, x_in, seed_in,
                        lambda ref, node: node.op == "input" or not (ref.node in tangent
                                                                     or _recomputed(node, variant, checkpoint)
                                                                     or _ragged(node, bound)))
    saved = _cheap_from_saved(graph, _before_copies(graph, first, variant, x_nodes), variant, x_nodes)
    return _walk(graph, c_in, x_in, seed_in, lambda ref, node: ref in saved)


def _walk(graph: Graph, c_in, x_in, seed_in, kept) -> tuple[list[int], list[int], list[ValueRef]]:
    """From the joint body's outputs back to the values `kept(ref, node)` says the forward loop
    saves: the consts and xs read on the way (positions) and those values (in id order)."""
    c_pos = {r.node: i for i, r in enumerate(c_in)}
    x_pos = {r.node: j for j, r in enumerate(x_in)}
    seeds = {r.node for r in seed_in}
    read_c: set[int] = set()
    read_x: set[int] = set()
    saved: set[ValueRef] = set()
    seen: set[ValueRef] = set()
    stack = list(graph.outputs)
    while stack:
        ref = stack.pop()
        if ref in seen:
            continue
        seen.add(ref)
        node = graph.nodes[ref.node]
        if ref.node in c_pos:
            read_c.add(c_pos[ref.node])
        elif ref.node in x_pos:
            read_x.add(x_pos[ref.node])
        elif ref.node in seeds:
            continue
        elif kept(ref, node):
            saved.add(ref)
        else:
            stack.extend(node.inputs)
    return sorted(read_c), sorted(read_x), sorted(saved)


def _before_copies(graph: Graph, saved: list[ValueRef], variant: set[int], free: set[int]) -> list[ValueRef]:
    """`saved`, each value made by moving elements of one per-step value (a transpose of the carry for a
    weight gradient, a reshape, a cast: Trait.ELEMENT_COPY) replaced by that value when it is no larger:
    the forward loop then runs no copy, and the backward one recomputes it where a Gemm flag or a
    view makes it free."""
    result = set(saved)
    changed = True
    while changed:
        changed = False
        for ref in sorted(result, reverse=True):
            node = graph.nodes[ref.node]
            if node.op == "input" or not has_trait(node.op, Trait.ELEMENT_COPY):
                continue
            per_step = {r for r in node.inputs if r.node in variant}
            if len(per_step) != 1:
                continue
            (source,) = per_step
            if source.node in free or _size(graph.type_of(source).shape) > _size(graph.type_of(ref).shape):
                continue
            result.discard(ref)
            result.add(source)
            changed = True
    return sorted(result)


def _size(shape) -> float:
    """Elements of a static shape; a symbolic one counts as unbounded."""
    return float(np.prod(shape)) if all(isinstance(d, int) for d in shape) else float("inf")


def _cheap_from_saved(graph: Graph, saved: list[ValueRef], variant: set[int], free: set[int]) -> set[ValueRef]:
    """`saved`, less the values that the backward loop can recompute by a chain of cheap nodes
    (Trait.CHEAP: 1 - s, 1 - t*t, a transpose of the carry, ...) each with one per-step operand,
    from a value saved anyway: one stacked value fewer, for a few cheap ops per step. (A node with
    several per-step operands stays saved: recomputing it would add more work than it saves.)"""
    kept = set(saved)

    def recomputable(ref: ValueRef, memo: dict) -> bool:
        if ref in kept or ref.node not in variant or ref.node in free:
            return True
        if ref not in memo:
            node = graph.nodes[ref.node]
            per_step = {r for r in node.inputs if r.node in variant and r.node not in free}
            memo[ref] = (node.op != "input" and has_trait(node.op, Trait.CHEAP) and not is_random(node)
                         and len(per_step) <= 1 and all(recomputable(r, memo) for r in per_step))
        return memo[ref]

    for ref in sorted(saved, reverse=True):   # the latest first: 1 - s goes before s is considered
        kept.discard(ref)
        if not recomputable(ref, {}):
            kept.add(ref)
    return kept


def _ragged(node, bound: set[str]) -> bool:
    """Whether an output of `node` has a dim no body input binds (a while loop's number of steps): its
    size may change from step to step, so the forward loop cannot stack it; the backward recomputes it."""
    return not is_random(node) and _unbound(node, bound)


def _unbound(node, bound: set[str]) -> bool:
    """Whether an output of `node` has a dim with a symbol not in `bound`."""
    return not dims.shape_symbols(t.shape for t in node.outputs) <= bound


def _recomputed(node, variant: set[int], checkpoint: bool) -> bool:
    if is_random(node):
        return False
    return checkpoint or node.id not in variant


supply_vjp("scan", _scan_vjp)


# -- while ----------------------------------------------------------------------------------------------------
def _while_vjp(grads, inputs, outputs, *, body: Graph, n_consts: int, source: str, n_ys: int = 0, steps=None,
               saved: bool = False):
    """Reverse mode through a while loop of body B(c, k) -> (go, k', y): the forward node is made to
    stack the carry at the start of each step as extra ys (saved=True; an ONNX Loop scan output of
    run-time length), and the backward is a reverse scan over those steps, its length the loop's
    `steps` symbol, whose body computes B again from the step's saved carry and asks gc.grad for the
    cotangents of the carry and the float consts, weighted by the new carry's and the y's
    cotangents; it carries the carry's cotangent and one accumulator per float const. Only the
    carries are kept (not every intermediate): the step runs twice, the memory is one carry per
    step. The backward is an ordinary scan reading the saved ys, so differentiating it again
    (second order) sends a cotangent to those ys, which this rule takes like any y's.

    A step that draws random numbers (dropout in training) would draw again when the backward
    computes it: the forward loop also stacks each step's draws (every output of each random node)
    as ys, and the backward step reads them in place of its own (_draws). Random draws inside a
    loop nested in the step (checkpoint_every's blocks, say) are refused: that loop's draws cannot
    be stacked step by step. (Keyed draws, ops/random.py, are no random nodes: pure functions of
    their key, which holds the step's index, they are computed again like any other value.)"""
    nc = n_consts
    nk = len(inputs) - nc - 1
    consts, init = inputs[:nc], inputs[nc + 1:]
    graph = current_frame().graph
    forward = graph.nodes[outputs[0].ref.node] if outputs else None
    if not saved:   # stack each step's draws and starting carries: B(c, k) -> (go, k', y, draws, k)
        assert forward is not None
        steps = steps or steps_symbol()
        first = len(forward.outputs)
        draws = _draw_refs(body, source)
        new_body = extract(body, list(body.inputs), list(body.outputs) + draws + list(body.inputs[nc:]))
        added = [body.type_of(r) for r in draws] + [t.type for t in init]
        forward.attrs = {**forward.attrs, "body": new_body, "n_ys": n_ys + len(added), "steps": steps, "saved": True}
        forward.outputs = forward.outputs + [_stacked(t, steps) for t in added]
        outputs = outputs + [Tensor(graph, forward.out(first + i), forward.outputs[first + i])
                             for i in range(len(added))]
        grads = grads + [None] * len(added)
        body, n_ys = new_body, n_ys + len(added)
    carried = outputs[nk + n_ys - nk:]                                     # the carries at each step's start
    drawn = _draws(body, nk, n_ys, source)                                 # the ys that are each step's draws
    fk = [i for i in range(nk) if is_float(init[i].dtype)]
    fc = [i for i in range(nc) if is_float(consts[i].dtype)]
    ys_in = [j for j in range(n_ys) if grads[nk + j] is not None and is_float(outputs[nk + j].dtype)]
    if not fk and not fc:
        return [None] * len(inputs)
    n_fk, n_fc = len(fk), len(fc)

    def joint(v: list[Tensor]) -> list[Tensor]:
        c, k_bar, acc = v[:nc], v[nc:nc + n_fk], v[nc + n_fk:nc + n_fk + n_fc]
        k, y_bar = v[nc + n_fk + n_fc:nc + n_fk + n_fc + nk], v[nc + n_fk + n_fc + nk:]
        outs = inline(body, c + k)
        targets = [outs[1 + i] for i in fk] + [outs[1 + nk + j] for j in ys_in]
        g = grad(targets, [k[i] for i in fk] + [c[i] for i in fc], k_bar + y_bar)
        return [*g[:n_fk], *(a + b for a, b in zip(acc, g[n_fk:])), *(outs[1 + nk + j] for j in drawn)]

    types = ([t.type for t in consts] + [init[i].type for i in fk] + [consts[i].type for i in fc]
             + [t.type for t in init] + [body.type_of(body.outputs[1 + nk + j]) for j in ys_in])
    back_body, captured = trace_body(joint, types)
    assert not captured, "the backward body reads only its inputs"
    if drawn:   # the step's own draws become inputs: the forward's, stacked, read step by step
        n_out = len(back_body.outputs) - len(drawn)
        back_body = extract(back_body, list(back_body.inputs) + list(back_body.outputs[n_out:]),
                            list(back_body.outputs[:n_out]))
    operands = ([*consts] + [zeros_like(init[i]) if grads[i] is None else grads[i] for i in fk]
                + [zeros_like(consts[i]) for i in fc] + list(carried) + [grads[nk + j] for j in ys_in]
                + [outputs[nk + j] for j in drawn])
    outs = apply_n("scan", operands, body=back_body, n_consts=nc, n_carry=n_fk + n_fc, reverse=True,
                   length=steps, checkpoint=False)
    result: list[Tensor | None] = [None] * len(inputs)
    for pos, i in enumerate(fk):
        result[nc + 1 + i] = outs[pos]
    for pos, i in enumerate(fc):
        result[i] = outs[n_fk + pos]
    return result


supply_vjp("while", _while_vjp)


def _draw_refs(body: Graph, source: str) -> list[ValueRef]:
    """Every output of each node of a while loop's step that draws random numbers; refused where
    such a node holds a body (a loop or branch draws inside it: the outputs are not the draws) or
    its values change shape from step to step."""
    refs = []
    bound = dims.shape_symbols(body.type_of(r).shape for r in body.inputs)
    for node in body.topo_order():
        if node.op == "input" or not is_random(node):
            continue
        if bodies(node) or _unbound(node, bound):
            raise UnsupportedError(
                f"reverse mode through a while loop whose step draws random numbers inside a nested loop or "
                f"branch ({node.op}; checkpoint_every makes a loop): the backward would draw them again, and "
                f"they cannot be saved step by step. Give the draws a key (F.dropout(..., key=k) or a "
                f"gc.random_key block: a keyed mask is computed again, the same), draw them outside the inner "
                f"{node.op}, or drop checkpoint_every (while_loop at {source})")
        refs += [node.out(i) for i in range(len(node.outputs))]
    return refs


def _draws(body: Graph, nk: int, n_ys: int, source: str) -> list[int]:
    """The positions among the ys (the forward stacks them: the first call of the rule adds them) of
    the draws of the step's random nodes."""
    ys = body.outputs[1 + nk:1 + nk + n_ys]
    positions = []
    for ref in _draw_refs(body, source):
        assert ref in ys, "the forward loop stacks every draw of its step"
        positions.append(ys.index(ref))
    return positions


# -- cond -----------------------------------------------------------------------------------------------------
def _cond_vjp(grads, inputs, outputs, *, then_body: Graph, else_body: Graph, source: str):
    """The backward of a branch is a branch: a cond on the same predicate whose bodies are each branch's
    VJP (gc.grad of the branch w.r.t. its float operands, weighted by the outputs' cotangents)."""
    pred, ops = inputs[0], inputs[1:]
    wrt = [i for i, t in enumerate(ops) if is_float(t.dtype)]
    seeded = [j for j, g in enumerate(grads) if g is not None and is_float(outputs[j].dtype)]
    result: list[Tensor | None] = [None] * len(inputs)
    if not wrt or not seeded:
        return result
    if any(is_random(n) for body in (then_body, else_body) for n in body.nodes.values()):
        raise UnsupportedError(f"reverse mode through a gc.cond whose branch draws random numbers (dropout in "
                               f"training): the backward branch would draw them again. Give the draws a key "
                               f"(F.dropout(..., key=k) or a gc.random_key block), or draw them outside the cond and "
                               f"pass them in as operands (cond at {source})")

    def branch(body: Graph) -> Graph:
        def fn(v: list[Tensor]) -> list[Tensor]:
            x, seeds = v[:len(ops)], v[len(ops):]
            outs = inline(body, x)
            return grad([outs[j] for j in seeded], [x[i] for i in wrt], seeds)
        traced, captured = trace_body(fn, [t.type for t in ops] + [outputs[j].type for j in seeded])
        assert not captured, "a branch's VJP reads only its inputs"
        return traced

    outs = apply_n("cond", [pred, *ops, *[grads[j] for j in seeded]], then_body=branch(then_body),
                   else_body=branch(else_body), source=source)
    for i, g in zip(wrt, outs):
        result[1 + i] = g
    return result


supply_vjp("cond", _cond_vjp)
