"""Pass plumbing: a pass rewrites a Graph in place and says whether it changed anything;
the manager runs a pipeline of passes until none changes the graph (a fixed point)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir.graph import Graph, ValueRef


@dataclass
class PassResult:
    graph: Graph
    changed: bool


Pass = Callable[[Graph], PassResult]


def replace_uses(graph: Graph, old: ValueRef, new: ValueRef) -> None:
    """Make every consumer of `old` (and the graph outputs) read `new` instead."""
    for consumer in graph.consumers(old.node):
        if old in consumer.inputs:
            graph.replace_inputs(consumer, [new if r == old else r for r in consumer.inputs])
    graph.outputs = [new if r == old else r for r in graph.outputs]


def run_to_fixed_point(graph: Graph, passes: list[Pass], max_rounds: int = 10) -> Graph:
    for _ in range(max_rounds):
        changed = False
        for p in passes:
            changed |= p(graph).changed
        if not changed:
            break
    return graph
