"""gc.vmap: map a per-example function over a leading batch axis, as batched ops in one graph.

vmap(fn)(xs) traces fn once on per-example placeholders (each batched argument without its batch
axis), then rewrites the nodes that trace recorded, in order, with a *batching rule* per op: a
node none of whose operands depends on a placeholder is kept as it is (weights, constants); the
others are emitted again on the batched values, whose batch axis is always axis 0. Last, the
per-example nodes are pruned. Nothing is unrolled: the graph holds one batched op per op of fn.

Because gc.grad inside fn records ordinary nodes, vmap(grad(f)) batches the gradient graph too,
which gives per-example gradients: the gradient of each example's loss w.r.t. parameters shared
by all examples, shaped (batch, *param.shape).

Every op of the registry batches (tests/gradients/test_vmap_ops.py checks each numerically): the ops
declaring Trait.ELEMENTWISE (unary math, activations, casts, comparisons, the broadcasting
arithmetic, the closed-form derivatives) by one generic rule; the others by a rule each
(batching_rules.py): reductions, norms, scans, sorting and argmax/argmin along a shifted axis;
softmax, layer_norm, training-mode batch_norm (per-example statistics); the shape ops;
gather/scatter and their element-wise forms; matmul, einsum, gemm (as a batched matmul); the solvers
(the batch is one more leading matrix dim); convolution, pooling and resize (the batch merged into
the images' axis; per-example convolution weights need a static batch size);
and the loops (batching_loops.py: a scan or while loop with a batched body, so per-example
gradients through an RNN stay one loop each way). The ops in batching.NOT_BATCHED (input,
constant, fill, arange) have no operands, so no rule is ever asked for them: their nodes are kept
as they are.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from .. import functions as F
from ..errors import GcompileError, ShapeError
from ..frontend import pytree
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor, current_frame
from ..ir.graph import Node
from . import batching_loops, batching_rules  # noqa: F401 - they register the rules of the non-elementwise ops
from .batching import batch_node, broadcast
from .engine import prune_new_nodes

__all__ = ["vmap"]


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
        outs = batch_node(node, ins, batched, size)
        env.update((node.out(i), out) for i, out in enumerate(outs))


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
                value = broadcast(value, size)
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
