"""trace(fn, specs): run a Python function on Tensor proxies and record its graph."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..collector import collector_paused
from ..errors import GcompileError, TraceError
from ..ir.graph import Graph, TensorType
from . import pytree
from .spec import Spec, as_spec
from .tensor import Tensor, as_tensor, current_frame, tracing, tracing_body


@dataclass
class Traced:
    """A traced function: its graph, input names and specs, and how to rebuild its outputs."""
    graph: Graph
    input_names: list[str]
    specs: list[Spec]
    out_tree: Any
    name: str
    in_trees: list = field(default_factory=list)   # one pytree.TreeDef per argument (leaves: one input each)
    arg_names: list = field(default_factory=list)  # the arguments' names, prefixes of their leaves' input names


def argument_names(fn, n: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:n]
    return names + [f"arg{i}" for i in range(len(names), n)]


def is_output_leaf(value) -> bool:
    """What a traced function may return as one output: a Tensor, or a constant array or number."""
    return isinstance(value, (Tensor, np.ndarray, np.generic, int, float))


@collector_paused
def trace(fn, args, name: str | None = None, input_names: list[str] | None = None) -> Traced:
    """Trace `fn` with one graph input per leaf of `args`, each argument a pytree (frontend/pytree.py)
    of Specs or example arrays. A leaf's input is named by its argument and path ("params.fc1.weight")."""
    flat = [pytree.flatten(a) for a in args]
    names = input_names or argument_names(fn, len(args))
    leaf_names = [n for (_, tree), prefix in zip(flat, names) for n in pytree.paths(tree, prefix)]
    specs = [as_spec(leaf) for leaves, _ in flat for leaf in leaves]
    clashes = sorted({n for n in leaf_names if leaf_names.count(n) > 1})
    if clashes:
        raise GcompileError(f"two inputs of {getattr(fn, '__name__', 'function')} would both be named {clashes[0]!r}; "
                            "rename a dict key or argument")
    graph = Graph()
    with tracing(graph):
        params = []
        for arg_name, s in zip(leaf_names, specs):
            node = graph.add_node("input", [], {"name": arg_name, "type": s.type}, [s.type], name=arg_name)
            graph.inputs.append(node.out(0))
            params.append(Tensor(graph, node.out(0), s.type))
        tensors_in = iter(params)
        result = fn(*[pytree.unflatten(tree, tensors_in) for _, tree in flat])
        try:
            leaves, tree = pytree.flatten(result, is_output_leaf)
        except TypeError as err:
            raise TraceError(f"{getattr(fn, '__name__', 'function')} must return Tensors (or tuples, lists, "
                             f"dicts of them): {err}") from None
        if not leaves:
            raise GcompileError(f"{getattr(fn, '__name__', 'function')} returned no Tensor")
        tensors = [as_tensor(leaf) for leaf in leaves]
    graph.outputs = [t.ref for t in tensors]
    graph.output_names = _unique(pytree.output_names(tree), taken=set(leaf_names))
    return Traced(graph, leaf_names, specs, tree, name or str(getattr(fn, "__name__", "function")),
                  [t for _, t in flat], list(names[:len(flat)]))


def _unique(names: list[str], taken: set[str]) -> list[str]:
    """`names`, each renamed "<name>_out" (then "<name>_out_2", ...) where it clashes with
    `taken` (the input names) or an earlier output name."""
    result = []
    for name in names:
        candidate, k = name, 1
        while candidate in taken:
            k += 1
            candidate = f"{name}_out" if k == 2 else f"{name}_out_{k - 1}"
        taken.add(candidate)
        result.append(candidate)
    return result


def trace_body(fn: Callable[[list[Tensor]], list[Any]], types: list[TensorType]) -> tuple[Graph, list[Tensor]]:
    """Trace `fn` (a list of Tensors of `types` -> a list of Tensors, arrays or numbers) into a new
    Graph nested in the current trace: a loop body. Tensors of the enclosing traces that `fn` uses
    are captured: they become the body's first inputs, before one input per entry of `types`.
    Returns the body and the captured Tensors (of the current trace), in its input order."""
    body = Graph()
    with tracing_body(body) as frame:
        params = []
        for i, t in enumerate(types):
            node = body.add_node("input", [], {"name": f"arg_{i}", "type": t}, [t])
            params.append(Tensor(body, node.out(0), t))
        outputs = [as_tensor(o) for o in fn(params)]
    captured = [outer for outer, _ in frame.captures.values()]
    body.inputs = [inner.ref for _, inner in frame.captures.values()] + [p.ref for p in params]
    body.outputs = [o.ref for o in outputs]
    return body, captured


def inline(graph: Graph, inputs: list[Tensor]) -> list[Tensor]:
    """Record a copy of `graph`'s nodes (with their gradient orders) into the current trace, its inputs
    read from `inputs` (Tensors of the current trace, one per graph input); returns its outputs.
    Loop rules build new bodies from old ones with it (gradients/loops.py)."""
    frame = current_frame()
    env = {ref: as_tensor(t).ref for ref, t in zip(graph.inputs, inputs)}
    for node in graph.topo_order():
        if node.op == "input":
            continue
        copy = frame.graph.add_node(node.op, [env[r] for r in node.inputs], node.attrs, node.outputs,
                                    order=node.order, source=node.source)
        copy.recompute = node.recompute
        env.update((node.out(i), copy.out(i)) for i in range(len(node.outputs)))
    return [Tensor(frame.graph, env[r], graph.type_of(r)) for r in graph.outputs]
