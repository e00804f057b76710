"""Dead-code elimination: drop nodes no graph output depends on (graph inputs always stay)."""
from __future__ import annotations

from ..ir.graph import Graph
from .base import PassResult


def eliminate_dead_code(graph: Graph) -> PassResult:
    live: set[int] = {r.node for r in graph.inputs}
    stack = [r.node for r in graph.outputs]
    while stack:
        i = stack.pop()
        if i in live and graph.nodes[i].op != "input":
            continue
        live.add(i)
        stack.extend(r.node for r in graph.nodes[i].inputs if r.node not in live)
    dead = [i for i in graph.nodes if i not in live]
    for i in dead:
        graph.remove_node(i)
    return PassResult(graph, bool(dead))
