"""Merge emitted ONNX nodes that compute the same thing: same op, operands and attributes.

The IR's own CSE (passes/cse.py) merges equal IR nodes, but two different IR nodes can lower
to overlapping ONNX expressions: silu's first and second derivatives both start from 1 - s,
a lowering may rebuild a shape its neighbour already built. ONNX Runtime (1.31) left such
duplicates in place (its CSE did not merge them in our models), and each is one more pass
over memory. Random ops are never merged: two draws must stay two draws. Nodes with loop bodies
are left to the IR's CSE (which compares bodies); a body that reads a dropped node's output from
the outer scope reads the kept copy instead (lowering/reads.py says how such reads look): two
scatters by one index tensor, each an If, share the index's sort that way (ops/indexing.py).
"""
from __future__ import annotations

from .reads import subgraphs

_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "Dropout"})


def dedupe_nodes(nodes: list, keep: set[str]) -> list:
    """`nodes` (a topological order) without repeats; readers of a dropped node's outputs read the
    kept node's. Nodes writing a name in `keep` (the graph outputs) are never dropped."""
    renamed: dict[str, str] = {}
    seen: dict[tuple, object] = {}
    result = []
    for node in nodes:
        inputs = [renamed.get(name, name) for name in node.input]
        if inputs != list(node.input):
            del node.input[:]
            node.input.extend(inputs)
        bodies = subgraphs(node)
        for body in bodies:
            _rename_outer_reads(body, renamed)
        if node.op_type in _RANDOM or bodies or any(out in keep for out in node.output):
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


def _rename_outer_reads(body, renamed: dict[str, str]) -> None:
    """Point the reads of `body` (and of the bodies inside it) from the enclosing scope at the
    kept copies of dropped nodes' outputs; names the body defines itself are left alone."""
    defined = {v.name for v in body.input} | {t.name for t in body.initializer}
    for node in body.node:
        for i, name in enumerate(node.input):
            if name in renamed and name not in defined:
                node.input[i] = renamed[name]
        for inner in subgraphs(node):
            _rename_outer_reads(inner, {k: v for k, v in renamed.items() if k not in defined})
        defined |= set(node.output)
    for value in body.output:
        if value.name in renamed and value.name not in defined:
            value.name = renamed[value.name]
