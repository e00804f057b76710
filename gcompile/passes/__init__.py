"""Graph -> graph rewrites, composed by `optimize` and run to a fixed point.

Levels: 0 none; 1 dead code + common subexpressions; 2 adds constant folding,
algebraic simplification and Gemm fusion.
"""
from __future__ import annotations

from ..ir.graph import Graph
from .base import PassResult, replace_uses, run_to_fixed_point
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold import fold_constants
from .gemm import fuse_gemm
from .simplify import simplify

PIPELINES = {
    0: [],
    1: [eliminate_common_subexpressions, eliminate_dead_code],
    2: [fold_constants, simplify, eliminate_common_subexpressions, fuse_gemm, eliminate_dead_code],
}


def optimize(graph: Graph, level: int = 2) -> Graph:
    """Run the level's passes on `graph` (in place) until nothing changes."""
    if level not in PIPELINES:
        raise ValueError(f"optimization level must be 0, 1 or 2, got {level}")
    return run_to_fixed_point(graph, PIPELINES[level])


__all__ = ["optimize", "PassResult", "replace_uses", "eliminate_dead_code", "eliminate_common_subexpressions",
           "fold_constants", "simplify", "fuse_gemm", "PIPELINES"]
