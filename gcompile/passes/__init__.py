"""Graph -> graph rewrites, composed by `optimize` and run to a fixed point.

Levels: 0 none; 1 dead code + common subexpressions + loop pruning; 2 adds constant folding,
algebraic simplification, Gemm fusion, sums of products or reductions batched into one and sums
moved out of loops. Every pass also runs inside loop bodies. After them, the recompute pass
copies the regions marked with gc.checkpoint into the backward (at every level), and with
recompute=True also the cheap forward nodes (ARCHITECTURE.md §9.4).
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from ..collector import collector_paused
from ..errors import GcompileError
from ..ir.graph import Graph
from ..ir.memory import FILE_ORDER_MIN_BYTES, planned_peak
from .base import PassResult, replace_uses, run_pass, run_to_fixed_point
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold import fold_constants
from .gemm import batch_products, fuse_gemm
from .loops import hoist_loop_sums, prune_loops
from .recompute import recompute as recompute_pass
from .recompute import recompute_elementwise, within_budget
from .simplify import simplify
from .sink import sink_to_readers

PIPELINES: dict[int, list[Callable[[Graph], PassResult]]] = {
    0: [],
    1: [eliminate_common_subexpressions, prune_loops, eliminate_dead_code],
    2: [fold_constants, simplify, eliminate_common_subexpressions, fuse_gemm, batch_products, prune_loops,
        hoist_loop_sums, eliminate_dead_code],
}


@collector_paused
def optimize(graph: Graph, level: int = 2, recompute: bool = False, memory_budget: int | None = None) -> Graph:
    """Run the level's passes on `graph` (in place) until nothing changes, then the recompute
    pass once (last: CSE would merge its copies back).

    The graph is then marked to run in its id order (graph.run_in_order) when its planned peak is
    large or unknown (a symbolic size; ir/memory.py) or a `memory_budget` (bytes) is given.
    Such a graph's saved elementwise values that the backward can recompute from values it keeps
    anyway are marked for recomputing where that lowers the plan (passes/recompute.py
    recompute_elementwise), then the budget's recomputations are chosen (within_budget)."""
    if level not in PIPELINES:
        raise ValueError(f"optimization level must be 0, 1 or 2, got {level}")
    run_to_fixed_point(graph, PIPELINES[level])
    if memory_budget is not None and (not isinstance(memory_budget, (int, float)) or isinstance(memory_budget, bool)
                                      or memory_budget <= 0):
        raise GcompileError(f"memory_budget must be a positive number of bytes, got {memory_budget!r}")
    planned = planned_peak(graph)
    graph.run_in_order = memory_budget is not None or planned is None or planned >= FILE_ORDER_MIN_BYTES
    if graph.run_in_order:
        run_pass(graph, sink_to_readers)
        recompute_elementwise(graph)
    if memory_budget is not None:
        within_budget(graph, int(memory_budget))
    if run_pass(graph, functools.partial(recompute_pass, cheap=recompute, sequenced=not graph.run_in_order)).changed:
        run_pass(graph, eliminate_dead_code)
    return graph


__all__ = ["optimize", "PassResult", "replace_uses", "eliminate_dead_code", "eliminate_common_subexpressions",
           "fold_constants", "simplify", "fuse_gemm", "batch_products", "prune_loops", "hoist_loop_sums",
           "recompute_pass", "PIPELINES"]
