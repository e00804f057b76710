"""Pass plumbing: a pass rewrites a Graph in place and says whether it changed anything;
the manager runs a pipeline of passes until none changes the graph (a fixed point).

With LINT set, every pass run through here is followed by Graph.lint(), and a broken
invariant names the pass that broke it. The tests (tests/conftest.py) and the fuzzer
(tests/fuzz/checks.py, also for tools/fuzz.py) set it; compiles do not: one lint walks every
operand, about as long as a cheap pass, and on the gradient of a 92k-node deep MLP linting
after every pass made optimize(level=2) take 3.7 s instead of 2.3 s.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir.graph import Graph, Node, ValueRef, bodies


@dataclass
class PassResult:
    graph: Graph
    changed: bool


Pass = Callable[[Graph], PassResult]

LINT = False


def only_consumer(graph: Graph, producer: Node, node: Node) -> bool:
    """Whether `node` is the only reader of `producer`'s outputs, none of them a graph output: a
    rewrite may then change or drop what `producer` computes."""
    return [c.id for c in graph.consumers(producer.id)] == [node.id] and producer.id not in {
        r.node for r in graph.outputs}


def replace_uses(graph: Graph, old: ValueRef, new: ValueRef, outputs: bool = True) -> None:
    """Make every consumer of `old` (and the graph outputs, unless outputs=False) read `new` instead.

    A pass that replaces many values leaves the outputs out and calls replace_outputs once: a
    gradient has an output per parameter, and scanning them on every call made CSE of a
    12,500-layer MLP's gradient quadratic (11 s of a 40,000-node build)."""
    for consumer in graph.consumers(old.node):
        if old in consumer.inputs:
            graph.replace_inputs(consumer, [new if r == old else r for r in consumer.inputs])
    if outputs and old in graph.outputs:
        graph.outputs = [new if r == old else r for r in graph.outputs]


def replace_outputs(graph: Graph, replaced: dict[ValueRef, ValueRef]) -> None:
    """Point the graph outputs that read a key of `replaced` at its value."""
    if replaced:
        graph.outputs = [replaced.get(r, r) for r in graph.outputs]


def run_pass(graph: Graph, p: Pass) -> PassResult:
    """p(graph), linted afterwards when LINT is set."""
    result = p(graph)
    if LINT:
        try:
            graph.lint()
        except AssertionError as err:
            raise AssertionError(f"after the pass {getattr(p, '__name__', p)}: {err}") from None
    return result


def run_in_bodies(graph: Graph, p: Pass, seen: set[int] | None = None) -> bool:
    """p on every loop body inside `graph` (innermost first; a body shared by several nodes once),
    then on `graph`; whether any run changed something."""
    seen = set() if seen is None else seen
    changed = False
    for node in graph.topo_order():
        for body in bodies(node):
            if id(body) not in seen:
                seen.add(id(body))
                changed |= run_in_bodies(body, p, seen)
    return run_pass(graph, p).changed | changed


def run_to_fixed_point(graph: Graph, passes: list[Pass], max_rounds: int = 10) -> Graph:
    """The passes, in bodies too, until none changes anything (or max_rounds)."""
    for _ in range(max_rounds):
        changed = False
        for p in passes:
            changed |= run_in_bodies(graph, p)
        if not changed:
            break
    return graph
