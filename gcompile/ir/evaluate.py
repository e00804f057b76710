"""The numpy reference evaluator: runs a Graph node by node with each op's reference rule.

It is the oracle for tests (float64 gradient checks, ORT-vs-reference comparisons) and
the engine behind constant folding. Attributes named `shape` may hold symbolic dims;
they are resolved from the sizes bound by the inputs.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from . import dims
from .graph import Graph
from .registry import get_op


def bind_symbols(graph: Graph, arrays) -> dict:
    """The sizes the inputs give their symbols; a symbol that only appears in a product of the form
    k·symbol (a loop body reading a flattened batch, "3*batch") is solved from it."""
    bindings: dict = {}
    for ref, arr in zip(graph.inputs, arrays):
        conflict = dims.bind(bindings, graph.type_of(ref).shape, np.shape(arr), "")
        if conflict:
            symbol, n, first_n, _ = conflict
            raise InputError(f"symbolic dim {symbol!r} bound to both {first_n} and {n}")
    result = {symbol: n for symbol, (n, _) in bindings.items()}
    for ref, arr in zip(graph.inputs, arrays):
        _bind_products(result, graph.type_of(ref).shape, np.shape(arr))
    return result


def _bind_products(bindings: dict, shape, sizes) -> None:
    for d, n in zip(shape, sizes):
        solved = dims.solve(d, n) if isinstance(d, str) and "*" in d else None
        if solved is not None:
            bindings.setdefault(*solved)


def evaluate(graph: Graph, arrays, outputs=None) -> list[np.ndarray]:
    """Values of `outputs` (default: the graph's outputs) given one array per graph input."""
    arrays = list(arrays)
    if len(arrays) != len(graph.inputs):
        raise InputError(f"expected {len(graph.inputs)} inputs, got {len(arrays)}")
    bindings = bind_symbols(graph, arrays)
    values: dict = {ref: np.asarray(a) for ref, a in zip(graph.inputs, arrays)}
    wanted = list(graph.outputs if outputs is None else outputs)
    needed = set()
    for ref in wanted:
        needed |= {ref.node} | graph.ancestors(ref.node)
    with np.errstate(all="ignore"):   # Inf/NaN propagate as they would at run time
        _run(graph, values, needed, bindings)
    return [values[r] for r in wanted]


def constant_value(graph: Graph, ref) -> np.ndarray:
    """The value of `ref`, which is computed from the graph's constants alone (no input among its
    ancestors: the importer's values too large to fold, which a translator may still need)."""
    values: dict = {}
    _run(graph, values, {ref.node} | graph.ancestors(ref.node), {})
    return values[ref]


def _run(graph: Graph, values: dict, needed: set, bindings: dict) -> None:
    for node in graph.topo_order():
        if node.id not in needed or node.op == "input":
            continue
        attrs = dict(node.attrs)
        if "shape" in attrs and attrs["shape"] is not None:
            attrs["shape"] = dims.resolve_shape(attrs["shape"], bindings)
        result = get_op(node.op).reference(*[values[r] for r in node.inputs], **attrs)
        results = result if isinstance(result, tuple) else (result,)
        for i, (r, t) in enumerate(zip(results, node.outputs)):
            values[node.out(i)] = np.asarray(r, dtype=t.dtype)
            for d, n in zip(t.shape, np.shape(r)):   # a dim known once the node ran (a while loop's steps)
                if isinstance(d, str) and "*" not in d:
                    bindings.setdefault(d, n)
            _bind_products(bindings, t.shape, np.shape(r))

