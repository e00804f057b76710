"""What the manifest and `gcompile inspect` report about a saved ONNX model: its signature,
size, op histogram and node counts per gradient order.

Worked out from the ONNX file alone, so the build's manifest reports exactly what `inspect`
shows for the same file.
"""
from __future__ import annotations

import collections
import re

import numpy as np

from ..lowering.lower import TARGET_KEY
from ..lowering.reads import subgraphs
from ..runtime.modelfile import graph_inputs, opset_of, optional_inputs, signature

_ORDER = re.compile(r"\border=(\d+)\b")


def order_counts(model) -> tuple[dict[int, int], int]:
    """(nodes per gradient order, untagged nodes) from the "order=N" gcompile writes in doc_strings.

    Untagged nodes are glue that belongs to no single traced op: output Identities and the
    run-time shape computations of symbolic dims.
    """
    counts: dict[int, int] = collections.Counter()
    untagged = 0
    for node in model.graph.node:
        order = node_order(node)
        if order is None:
            untagged += 1
        else:
            counts[order] += 1
    return dict(sorted(counts.items())), untagged


def node_order(node) -> int | None:
    """The gradient order gcompile wrote into a node's doc_string, or None for untagged glue."""
    match = _ORDER.search(node.doc_string or "")
    return int(match.group(1)) if match else None


def body_nodes(graph) -> int:
    """The nodes inside `graph`'s loop bodies and branches, at every depth (not its own)."""
    return sum(len(body.node) + body_nodes(body) for node in graph.node for body in subgraphs(node))


def describe(model) -> dict:
    """What the manifest and `inspect` report about a model. `optional_inputs` (inputs whose
    initializer is their default) and `loop_body_nodes` (the nodes inside Scan/Loop/If bodies,
    which `nodes` does not count) appear only where there are some."""
    by_order, untagged = order_counts(model)
    optional = signature(optional_inputs(model))
    inside = body_nodes(model.graph)
    return {
        "inputs": signature(graph_inputs(model)),
        **({"optional_inputs": optional} if optional else {}),
        "outputs": signature(model.graph.output),
        "opset": opset_of(model),
        "ir_version": model.ir_version,
        "target": {p.key: p.value for p in model.metadata_props}.get(TARGET_KEY, "unknown"),
        "parameters": sum(int(np.prod(t.dims)) for t in model.graph.initializer),   # values held, not inputs
        "initializers": len(model.graph.initializer),
        "nodes": len(model.graph.node),
        "nodes_by_order": {str(k): v for k, v in by_order.items()},
        "untagged_nodes": untagged,
        **({"loop_body_nodes": inside} if inside else {}),
    }


def op_histogram(model) -> list[tuple[str, int]]:
    """(op type, count), most frequent first."""
    counts = collections.Counter((f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type
                                 for n in model.graph.node)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def order_label(order: int) -> str:
    """A gradient order as `build` and `inspect` print it: fwd, bwd, 2nd, ..."""
    return {0: "fwd", 1: "bwd", 2: "2nd", 3: "3rd"}.get(order, f"{order}th")
