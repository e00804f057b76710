"""Merge emitted ONNX nodes that compute the same thing: same op, operands and attributes.

The IR's own CSE (passes/cse.py) merges equal IR nodes, but two different IR nodes can lower
to overlapping ONNX expressions: silu's first and second derivatives both start from 1 - s,
a lowering may rebuild a shape its neighbour already built. ONNX Runtime (1.31) left such
duplicates in place (its CSE did not merge them in our models), and each is one more pass
over memory. Random ops are never merged: two draws must stay two draws. Nodes with loop bodies
are left to the IR's CSE (which compares bodies), and a value a body reads from the outer scope
keeps its producer (lowering/reads.py).
"""
from __future__ import annotations

from .reads import has_subgraph, node_reads

_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "Dropout"})


def dedupe_nodes(nodes: list, keep: set[str]) -> list:
    """`nodes` (a topological order) without repeats; readers of a dropped node's outputs read the
    kept node's. Nodes writing a name in `keep` (the graph outputs) are never dropped."""
    keep = keep | {name for node in nodes if has_subgraph(node) for name in node_reads(node)}
    renamed: dict[str, str] = {}
    seen: dict[tuple, object] = {}
    result = []
    for node in nodes:
        inputs = [renamed.get(name, name) for name in node.input]
        if inputs != list(node.input):
            del node.input[:]
            node.input.extend(inputs)
        if node.op_type in _RANDOM or has_subgraph(node) or any(out in keep for out in node.output):
            result.append(node)
            continue
        key = (node.domain, node.op_type, tuple(inputs), len(node.output),
               tuple(sorted(a.SerializeToString() for a in node.attribute)))
        first = seen.setdefault(key, node)
        if first is node:
            result.append(node)
            continue
        for mine, theirs in zip(node.output, first.output):   # type: ignore[attr-defined]
            renamed[mine] = theirs
    return result
