"""The memory a graph's run needs, as planned from its values' static sizes: what decides whether its
nodes run in their trace order (lowering/order.py) and what a memory budget (passes/recompute.py)
is held against.

A run holds a node's outputs from when the node runs until their last reader has run (the graph's
outputs until the end). Summed over the values alive at once, the largest such sum is the run's
planned peak: the runtime's own overheads (its arena, kernels' scratch) come on top.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence

from .dims import is_static
from .graph import Graph, TensorType

# Graphs whose planned peak in trace order is at least this many bytes, or unknown (a symbolic size: any
# call may be large), keep that order and run in it (lowering/order.py says why). ONNX Runtime's own
# order and memory pattern held several times the plan at every size measured; below this the bytes
# are few and the runtime's order is sometimes the faster (docs/performance.md has the figures).
FILE_ORDER_MIN_BYTES = 16 << 20


def nbytes(t: TensorType) -> int | None:
    """A value's size in bytes, None where its shape is symbolic."""
    return math.prod(t.shape) * t.dtype.itemsize if is_static(t.shape) else None


def peak(steps: Sequence[tuple[Sequence[tuple[Hashable, int]], Iterable[Hashable]]], kept: set) -> tuple[int, int]:
    """(the largest sum of live bytes, the step where it is reached) of a run of `steps`, each
    ([(value made, its bytes)], values read), in order: a value lives from its step to the last
    step that reads it, or to the end when in `kept`, or only through its own step when nothing
    reads it. Values read but never made (inputs, constants) cost nothing."""
    last: dict = {}
    for i, (_, reads) in enumerate(steps):
        for key in reads:
            last[key] = i
    size: dict = {}
    live = best = at = 0
    for i, (made, reads) in enumerate(steps):
        for key, n in made:
            size[key] = n
            live += n
        if live > best:
            best, at = live, i
        for key in set(reads):
            if last[key] == i and key in size and key not in kept:
                live -= size[key]
        for key, n in made:
            if key not in last and key not in kept:
                live -= n
    return best, at


def trace_steps(graph: Graph) -> list | None:
    """`graph`'s nodes in id order as peak() takes them (values by ValueRef), None where a size is
    symbolic. Inputs and constants are the caller's: not counted."""
    steps = []
    for node in graph.topo_order():
        if node.op in ("input", "constant"):
            continue
        made = []
        for i, t in enumerate(node.outputs):
            n = nbytes(t)
            if n is None:
                return None
            made.append((node.out(i), n))
        steps.append((made, node.inputs))
    return steps


def planned_peak(graph: Graph) -> int | None:
    """The planned peak (the module's docstring) of `graph` run in its trace (id) order; None where
    a value's shape is symbolic. Loop bodies' own values are not counted."""
    steps = trace_steps(graph)
    return None if steps is None else peak(steps, set(graph.outputs))[0]
