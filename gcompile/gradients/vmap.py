"""gc.vmap: map a per-example function over a leading batch axis, as batched ops in one graph.

vmap(fn)(xs) traces fn once on per-example placeholders (each batched argument without its batch
axis), then rewrites the nodes that trace recorded, in order, with a *batching rule* per op: a
node none of whose operands depends on a placeholder is kept as it is (weights, constants); the
others are emitted again on the batched values, whose batch axis is always axis 0. Last, the
per-example nodes are pruned. Nothing is unrolled: the graph holds one batched op per op of fn.

Because gc.grad inside fn records ordinary nodes, vmap(grad(f)) batches the gradient graph too,
which gives per-example gradients: the gradient of each example's loss w.r.t. parameters shared
by all examples, shaped (batch, *param.shape).

Rules exist for the ops declaring Trait.ELEMENTWISE (one generic rule), reductions,
softmax/log_softmax, layer_norm, shape ops (reshape, transpose, expand, slice, pad, concat),
gather/scatter (take, embedding, their gradients), matmul, einsum, convolution and pooling (and
their gradient ops; a batched weight gradient needs a static batch size). Any other op is refused
with its name.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import functions as F
from ..errors import GcompileError, ShapeError, UnsupportedError
from ..frontend import pytree
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply_n, as_tensor, current_frame, recording_order
from ..ir import dims
from ..ir.graph import Node
from ..ir.registry import Trait, has_trait
from .engine import prune_new_nodes

__all__ = ["vmap"]

Rule = Callable[[Node, list, list, Any], list]
RULES: dict[str, Rule] = {}


def batching_rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        for op in ops:
            RULES[op] = rule
        return rule
    return register


# -- helpers -----------------------------------------------------------------------------------------
def _rank(x: Tensor, batched: bool) -> int:
    return x.ndim - 1 if batched else x.ndim


def _align(x: Tensor, rank: int) -> Tensor:
    """A batched x whose per-example rank is below `rank`, with unit axes after the batch axis, so that
    numpy broadcasting lines its per-example axes up with the others' (right-aligned)."""
    missing = rank - (x.ndim - 1)
    return F.expand_dims(x, tuple(range(1, 1 + missing))) if missing > 0 else x


def _broadcast(x: Tensor, size) -> Tensor:
    """An unbatched x repeated along a new batch axis 0."""
    return F.broadcast_to(F.expand_dims(x, 0), (size,) + x.shape)


def _all_batched(ins: list, batched: list, size) -> list[Tensor]:
    return [x if b else _broadcast(x, size) for x, b in zip(ins, batched)]


def _merge(x: Tensor) -> Tensor:
    """(B, N, ...) -> (B·N, ...)."""
    return F.reshape(x, (dims.product(x.shape[:2]),) + x.shape[2:])


def _split(y: Tensor, size, n) -> Tensor:
    return F.reshape(y, (size, n) + y.shape[1:])


def _static(size, what: str) -> int:
    if not isinstance(size, int):
        raise UnsupportedError(f"vmap: {what} needs a static batch size, got {size!r} (at {user_location()})")
    return size


# -- elementwise ---------------------------------------------------------------------------------------
def _elementwise(node, ins, batched, size):
    """Trait.ELEMENTWISE: the op itself, its batched operands' per-example axes right-aligned with the
    shared ones' (a unary op needs nothing)."""
    rank = node.outputs[0].ndim
    return apply_n(node.op, [_align(x, rank) if b else x for x, b in zip(ins, batched)], **node.attrs)


# -- axes -----------------------------------------------------------------------------------------------
@batching_rule("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(node, ins, batched, size):
    return apply_n(node.op, ins, axes=tuple(a + 1 for a in node.attrs["axes"]), keepdims=node.attrs["keepdims"])


@batching_rule("count")
def _count(node, ins, batched, size):   # the per-example count, the same for every example: unbatched
    return apply_n("count", ins, axes=tuple(a + 1 for a in node.attrs["axes"]))


@batching_rule("softmax", "log_softmax")
def _softmax(node, ins, batched, size):
    return apply_n(node.op, ins, axis=node.attrs["axis"] % node.outputs[0].ndim + 1)


@batching_rule("layer_norm")
def _layer_norm(node, ins, batched, size):
    x, gamma, beta = ins
    axis, eps = node.attrs["axis"] % node.outputs[0].ndim, node.attrs["eps"]
    if not batched[0]:
        x = _broadcast(x, size)
    if not any(batched[1:]):
        return apply_n("layer_norm", [x, gamma, beta], axis=axis + 1, eps=eps)
    axes = tuple(range(axis + 1, x.ndim))          # batched gamma or beta: written out with broadcasting ops
    xc = x - F.mean(x, axes, keepdims=True)
    y = xc * F.rsqrt(F.mean(xc * xc, axes, keepdims=True) + eps)
    rank = x.ndim - 1
    gamma, beta = (_align(t, rank) if b else t for t, b in zip((gamma, beta), batched[1:]))
    return [y * gamma + beta]


@batching_rule("transpose")
def _transpose(node, ins, batched, size):
    return apply_n("transpose", ins, perm=(0,) + tuple(p + 1 for p in node.attrs["perm"]))


@batching_rule("reshape")
def _reshape(node, ins, batched, size):
    return [F.reshape(ins[0], (size,) + tuple(node.attrs["shape"]))]


@batching_rule("expand")
def _expand(node, ins, batched, size):
    shape = tuple(node.attrs["shape"])
    return [F.broadcast_to(_align(ins[0], len(shape)), (size,) + shape)]


@batching_rule("slice")
def _slice(node, ins, batched, size):
    a = node.attrs
    return apply_n("slice", ins, axes=tuple(x + 1 for x in a["axes"]), starts=a["starts"], ends=a["ends"],
                   steps=a["steps"])


@batching_rule("slice_scatter")
def _slice_scatter(node, ins, batched, size):
    a = node.attrs
    return apply_n("slice_scatter", ins, shape=(size,) + tuple(a["shape"]), axes=tuple(x + 1 for x in a["axes"]),
                   starts=a["starts"], ends=a["ends"], steps=a["steps"])


@batching_rule("pad")
def _pad(node, ins, batched, size):
    a = node.attrs
    return apply_n("pad", ins, pads=((0, 0),) + tuple(a["pads"]), mode=a["mode"], value=a["value"])


@batching_rule("concat")
def _concat(node, ins, batched, size):
    return apply_n("concat", _all_batched(ins, batched, size), axis=node.attrs["axis"] % node.outputs[0].ndim + 1)


# -- gather and scatter ------------------------------------------------------------------------------------
def _offsets(idx: Tensor, size: int, n) -> Tensor:
    """Batched indices into axis 0 of a (B·n, ...) merge: example b's index i becomes b·n + i."""
    base = np.arange(size, dtype=np.int64).reshape((size,) + (1,) * (idx.ndim - 1)) * n
    return F.cast(idx, np.int64) + base


def _axis_first(x: Tensor, axis: int) -> Tensor:
    """Batched x with its per-example `axis` moved right after the batch axis."""
    perm = [0, axis + 1] + [i for i in range(1, x.ndim) if i != axis + 1]
    return F.transpose(x, tuple(perm))


@batching_rule("gather")
def _gather(node, ins, batched, size):
    x, idx = ins
    axis = node.attrs["axis"] % _rank(x, batched[0])
    if batched[0] and not batched[1]:
        return apply_n("gather", [x, idx], axis=axis + 1)
    if not batched[0]:                          # shared table, batched indices: the batch axis lands at `axis`
        y = apply_n("gather", [x, idx], axis=axis)[0]
        perm = [axis] + [i for i in range(y.ndim) if i != axis]
        return [F.transpose(y, tuple(perm))]
    b = _static(size, "gather with batched table and indices")
    xs = _axis_first(x, axis)                   # (B, n, ...rest): merge the batch into the gathered axis
    n = xs.shape[1]
    y = apply_n("gather", [_merge(xs), _offsets(idx, b, n)], axis=0)[0]   # (B, *idx, ...rest)
    k = idx.ndim - 1                            # put the rest back after the per-example axes before `axis`
    perm = [0] + [1 + k + i for i in range(axis)] + [1 + i for i in range(k)] + \
        [1 + k + axis + i for i in range(y.ndim - 1 - k - axis)]
    return [F.transpose(y, tuple(perm))]


@batching_rule("scatter_add")
def _scatter_add(node, ins, batched, size):
    base, idx, updates = ins
    axis = node.attrs["axis"] % node.outputs[0].ndim
    if not batched[1]:
        base = base if batched[0] else _broadcast(base, size)
        updates = updates if batched[2] else _broadcast(updates, size)
        return apply_n("scatter_add", [base, idx, updates], axis=axis + 1)
    b = _static(size, "scatter_add with batched indices")
    base = _axis_first(base if batched[0] else _broadcast(base, size), axis)
    n, k = base.shape[1], idx.ndim - 1
    upd = updates if batched[2] else _broadcast(updates, size)
    # updates (B, *pre, *idx, *rest) -> (B, *idx, *pre, *rest), as base's axis was moved first
    perm = [0] + [1 + axis + i for i in range(k)] + [1 + i for i in range(axis)] + \
        [1 + axis + k + i for i in range(upd.ndim - 1 - axis - k)]
    upd = F.transpose(upd, tuple(perm))
    flat_upd = F.reshape(upd, (dims.product(upd.shape[:1 + k]),) + upd.shape[1 + k:])
    flat_idx = F.reshape(_offsets(idx, b, n), (-1,))
    y = apply_n("scatter_add", [_merge(base), flat_idx, flat_upd], axis=0)[0]
    y = _split(y, b, n)                          # (B, n, *pre, *rest) -> per-example axis back in place
    back = [0] + [2 + i for i in range(axis)] + [1] + [2 + axis + i for i in range(y.ndim - 2 - axis)]
    return [F.transpose(y, tuple(back))]


@batching_rule("gather_elements", "scatter_add_elements")
def _elements(node, ins, batched, size):
    return apply_n(node.op, _all_batched(ins, batched, size), axis=node.attrs["axis"] % node.outputs[0].ndim + 1)


# -- products ---------------------------------------------------------------------------------------------
@batching_rule("matmul")
def _matmul(node, ins, batched, size):
    rank = max(_rank(x, b) for x, b in zip(ins, batched))
    return apply_n("matmul", [_align(x, rank) if b else x for x, b in zip(ins, batched)])


@batching_rule("einsum")
def _einsum(node, ins, batched, size):
    terms, out = node.attrs["equation"].split("->")
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    letter = next(ch for ch in letters if ch not in node.attrs["equation"])
    terms = [letter + t if b else t for t, b in zip(terms.split(","), batched)]
    return apply_n("einsum", ins, equation=",".join(terms) + "->" + letter + out)


# -- convolution and pooling --------------------------------------------------------------------------------
@batching_rule("conv", "conv_transpose")
def _conv(node, ins, batched, size):
    x, w, *bias = ins
    if any(batched[1:]):
        if node.op == "conv" and batched[1]:
            return _conv_batched_weights(node, ins, batched, size)
        raise UnsupportedError(f"vmap: {node.op} with a batched weight or bias is not supported (at {node.source})")
    n = x.shape[1]
    return [_split(apply_n(node.op, [_merge(x), w, *bias], **node.attrs)[0], size, n)]


def _conv_batched_weights(node, ins, batched, size):
    """Per-example weights: the batch becomes groups of one grouped convolution."""
    b = _static(size, "conv with batched weights")
    x, w, *bias = _all_batched(ins, [batched[0], True, *([True] * (len(ins) - 2))], size)
    n, groups = x.shape[1], node.attrs["groups"]
    xg = F.reshape(F.swapaxes(x, 0, 1), (n, b * x.shape[2]) + x.shape[3:])          # (N, B·C, ...)
    wg = F.reshape(w, (b * w.shape[1],) + w.shape[2:])                               # (B·Co, C/g, ...)
    bg = [F.reshape(bias[0], (b * bias[0].shape[1],))] if bias else []
    y = apply_n("conv", [xg, wg, *bg], **{**node.attrs, "groups": groups * b})[0]   # (N, B·Co, ...)
    y = F.reshape(y, (n, b, w.shape[1]) + y.shape[2:])
    return [F.swapaxes(y, 0, 1)]


@batching_rule("conv_weight_grad")
def _conv_weight_grad(node, ins, batched, size):
    """Per-example weight gradients: x and g grouped by example along the channels."""
    b = _static(size, "a per-example convolution weight gradient")
    x, g = _all_batched(ins, batched, size)
    n = x.shape[1]
    xg = F.reshape(F.swapaxes(x, 0, 1), (n, b * x.shape[2]) + x.shape[3:])
    gg = F.reshape(F.swapaxes(g, 0, 1), (n, b * g.shape[2]) + g.shape[3:])
    y = apply_n("conv_weight_grad", [xg, gg], **{**node.attrs, "groups": node.attrs["groups"] * b})[0]
    return [F.reshape(y, (b, g.shape[2]) + y.shape[1:])]


@batching_rule("max_pool", "avg_pool", "avg_pool_grad", "pool_gather", "pool_scatter")
def _pool(node, ins, batched, size):
    """Pooling and its adjoints on (B·N, C, ...); max_pool's flat indices then count in the merged
    tensor, which is what pool_scatter and pool_gather, merged the same way, read."""
    ins = _all_batched(ins, batched, size)
    n = ins[0].shape[1]
    attrs = dict(node.attrs)
    if node.op == "pool_scatter":
        attrs["shape"] = (dims.product((size, attrs["shape"][0])),) + tuple(attrs["shape"][1:])
    outs = apply_n(node.op, [_merge(x) for x in ins], **attrs)
    return [_split(y, size, n) for y in outs]


_UNBATCHED_OUTPUTS = {"count"}


# -- the transform ------------------------------------------------------------------------------------------
def _rule(op: str) -> Rule:
    rule = RULES.get(op)
    if rule is not None:
        return rule
    if has_trait(op, Trait.ELEMENTWISE):
        return _elementwise
    raise UnsupportedError(f"vmap: op {op!r} has no batching rule (gradients/vmap.py lists the rules; an "
                           f"elementwise op declares Trait.ELEMENTWISE)")


def _batch_region(graph, nodes: Sequence[Node], env: dict, size) -> None:
    """Emit the batched version of every node of `nodes` that reads a batched value; env maps a value
    of the region to (its replacement Tensor, whether it is batched)."""
    for node in nodes:
        if not any(r in env for r in node.inputs):
            continue
        ins, batched = [], []
        for ref in node.inputs:
            value, is_batched = env.get(ref, (None, False))
            ins.append(value if value is not None else Tensor(graph, ref, graph.type_of(ref)))
            batched.append(is_batched)
        if not any(batched):     # reads only unbatched replacements (a per-example count)
            with recording_order(node.order):
                outs = apply_n(node.op, ins, **node.attrs)
            env.update({node.out(i): (o, False) for i, o in enumerate(outs)})
            continue
        try:
            with recording_order(node.order):
                outs = _rule(node.op)(node, ins, batched, size)
        except ShapeError as err:
            raise ShapeError(f"vmap: batching {node.op} (at {node.source}): {err}") from None
        unbatched = node.op in _UNBATCHED_OUTPUTS
        for i, out in enumerate(outs):
            expected = node.outputs[i].shape if unbatched else (size,) + tuple(node.outputs[i].shape)
            if tuple(out.shape) != tuple(expected):
                raise AssertionError(f"vmap rule of {node.op}: {out.type} for {node.outputs[i]}")
            env[node.out(i)] = (out, not unbatched)


def _axes_per_leaf(in_axes: Any, args: tuple) -> list[list]:
    if isinstance(in_axes, (int, type(None))):
        in_axes = (in_axes,) * len(args)
    in_axes = tuple(in_axes)
    if len(in_axes) != len(args):
        raise GcompileError(f"vmap: in_axes has {len(in_axes)} entries for {len(args)} arguments")
    for a in in_axes:
        if not isinstance(a, (int, type(None))):
            raise GcompileError(f"vmap: in_axes entries are ints or None (one per argument), got {a!r}")
    return [[a] * len(pytree.leaves(arg)) for a, arg in zip(in_axes, args)]


def vmap(fn: Callable, in_axes: int | None | Sequence[int | None] = 0, out_axes: int = 0) -> Callable:
    """fn mapped over an axis of its arguments: in_axes gives, per positional argument (or for all),
    the batched axis of its leaves or None for an argument shared by every example; the outputs get
    the batch axis at out_axes. Use it inside a traced function (gc.jit, gc.compile)."""
    @functools.wraps(fn)
    def batched_fn(*args):
        graph = current_frame().graph
        axes = _axes_per_leaf(in_axes, args)
        flat = [pytree.flatten(a) for a in args]
        size = None
        moved: list = []
        for (leaves, _), leaf_axes in zip(flat, axes):
            for leaf, axis in zip(leaves, leaf_axes):
                t = as_tensor(leaf)
                if axis is None:
                    moved.append((t, False))
                    continue
                if t.ndim == 0:
                    raise GcompileError(f"vmap: a batched argument must have an axis to map over, got {t.type}")
                axis = axis % t.ndim
                t = F.transpose(t, (axis,) + tuple(i for i in range(t.ndim) if i != axis)) if axis else t
                if size is not None and t.shape[0] != size:
                    raise ShapeError(f"vmap: batched arguments have batch sizes {size} and {t.shape[0]} "
                                     f"(at {user_location()})")
                size = t.shape[0]
                moved.append((t, True))
        if size is None:
            raise GcompileError("vmap: no argument is batched (every in_axes entry is None)")
        mark = graph.mark()
        env: dict = {}
        per_example = []
        for t, is_batched in moved:
            if not is_batched:
                per_example.append(t)
                continue
            type_ = t.type.__class__(t.dtype, t.shape[1:])
            node = graph.add_node("input", [], {"name": "vmap", "type": type_}, [type_], order=current_frame().order)
            placeholder = Tensor(graph, node.out(0), type_)
            env[placeholder.ref] = (t, True)
            per_example.append(placeholder)
        it = iter(per_example)
        result = fn(*[pytree.unflatten(tree, [next(it) for _ in leaves]) for leaves, tree in flat])
        leaves, tree = pytree.flatten(result)
        outs = [as_tensor(leaf) for leaf in leaves]
        _batch_region(graph, graph.nodes_since(mark), env, size)
        final = []
        for out in outs:
            value, is_batched = env.get(out.ref, (out, False))
            if not is_batched:
                value = _broadcast(value, size)
            if out_axes % value.ndim:
                value = F.transpose(value, _moved(value.ndim, out_axes % value.ndim))
            final.append(value)
        prune_new_nodes(graph, mark, [t.ref for t in final])
        return pytree.unflatten(tree, final)
    return batched_fn


def _moved(ndim: int, target: int) -> tuple[int, ...]:
    """The permutation moving axis 0 to `target`."""
    order = list(range(1, ndim))
    order.insert(target, 0)
    return tuple(order)
