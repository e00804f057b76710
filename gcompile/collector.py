"""Python's cyclic garbage collector, paused while gcompile builds a graph.

Tracing, differentiating, optimising and lowering allocate millions of small objects, most of
which stay alive until the build ends. Each full collection walks every live object, and the
number of full collections grows with the number of allocations, so with the collector running
a 100k-node build spent 30-45% of its time in it and the per-node cost grew with graph size.
Reference counting still frees a build's temporaries while the collector is paused; only
reference cycles wait, and a build makes few. The collector resumes (if it was running) when
the outermost paused call returns or raises.
"""
from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def collector_paused(fn: F) -> F:
    """Run `fn` with the cyclic collector disabled; nested calls leave it to the outermost one."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()
    return wrapper  # type: ignore[return-value]
