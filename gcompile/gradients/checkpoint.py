"""gc.checkpoint: a region whose intermediates are recomputed in the backward pass.

Chainer's `forget`: reverse mode normally keeps every intermediate the VJP rules read
alive until the backward pass reaches it. Inside a checkpoint only the region's inputs
and outputs stay alive; the recompute pass (gcompile/passes/recompute.py) gives the
backward part its own copies of the region's other nodes, so the forward ones can be
freed as soon as the forward pass is done with them: less peak memory, more compute.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..frontend import pytree
from ..frontend.tensor import Tensor, current_frame

__all__ = ["checkpoint"]

_R = TypeVar("_R")


def checkpoint(fn: Callable[..., _R], *args: Any) -> _R:
    """fn(*args), with the intermediates of fn recomputed for the backward pass instead of kept.

    The values it returns (and its arguments) are kept as usual. Tracing is unchanged and so
    are the results; the marks take effect when the graph passes run (gc.compile at any
    optimisation level, or passes.recompute on a graph).
    """
    graph = current_frame().graph
    mark = graph.mark()
    result = fn(*args)
    leaves, _ = pytree.flatten(result, lambda o: True)
    kept = {leaf.ref.node for leaf in leaves if isinstance(leaf, Tensor)}
    for node in graph.nodes_since(mark):
        if node.id not in kept and node.op not in ("input", "constant"):
            node.recompute = True
    return result
