"""The names an emitted ONNX node reads, its loop bodies' reads from the enclosing scope included.

A `Scan`/`Loop`/`If` body may read a value of the graph around it by name, without listing it
as an input (ONNX's outer-scope rule; LowerContext.subgraph emits loop-invariant operands that
way). Passes over emitted nodes (node order, merging repeats) must see those reads, or they
could place the producer after the loop or drop it as a repeat.
"""
from __future__ import annotations

from onnx import AttributeProto


def node_reads(node) -> list[str]:
    """`node`'s inputs, then the names its subgraphs read but do not define, in a fixed order."""
    names = [name for name in node.input if name]
    seen = set(names)
    for name in sorted(_outer_reads(node)):
        if name not in seen:
            names.append(name)
    return names


def drop_unread(nodes: list, outputs: set[str]) -> tuple[list, set[str]]:
    """`nodes` (in a topological order) less those whose outputs nothing reads: no later node, no
    subgraph and not the graph's `outputs`; and the names the nodes kept read, with `outputs`. A
    strategy may leave such a value behind (an If whose branches make their own), and ONNX Runtime
    runs every node of a graph, read or not."""
    needed = set(outputs)
    kept = []
    for node in reversed(nodes):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(node_reads(node))
    return kept[::-1], needed


def subgraphs(node) -> list:
    """The GraphProtos held in `node`'s attributes (a loop's body, an If's branches)."""
    bodies: list = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            bodies.append(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            bodies.extend(attr.graphs)
    return bodies


def _outer_reads(node) -> set[str]:
    reads: set[str] = set()
    for body in subgraphs(node):
        defined = {v.name for v in body.input} | {t.name for t in body.initializer}
        for inner in body.node:
            reads |= {name for name in inner.input if name and name not in defined}
            reads |= _outer_reads(inner) - defined
            defined |= set(inner.output)
        reads |= {v.name for v in body.output if v.name not in defined}
    return reads


def has_subgraph(node) -> bool:
    return bool(subgraphs(node))
