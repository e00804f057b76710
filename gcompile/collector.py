"""Python's cyclic garbage collector, paused while gcompile builds a graph.

Tracing, differentiating, optimising and lowering allocate millions of small objects, most of
which stay alive until the build ends. Each full collection walks every live object, and the
number of full collections grows with the number of allocations, so with the collector running
a 100k-node build spent 30-45% of its time in it and the per-node cost grew with graph size.
Reference counting still frees a build's temporaries while the collector is paused; only
reference cycles wait, and a build makes few. The collector resumes (if it was running) when
the last paused call returns or raises: the collector is one switch for the whole process, so
builds in several threads share one count of the calls under way.
"""
from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


class _Pause:
    """How many paused calls are under way in any thread, and whether the first found the collector on."""
    lock = threading.Lock()
    depth = 0
    resume = False


def _enter() -> None:
    with _Pause.lock:
        if _Pause.depth == 0:
            _Pause.resume = gc.isenabled()
            gc.disable()
        _Pause.depth += 1


def _leave() -> None:
    with _Pause.lock:
        _Pause.depth -= 1
        if _Pause.depth == 0 and _Pause.resume:
            gc.enable()


def collector_paused(fn: F) -> F:
    """Run `fn` with the cyclic collector disabled; nested calls, and calls overlapping in other
    threads, leave it to the last one to finish to turn it back on (if it was on)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _enter()
        try:
            return fn(*args, **kwargs)
        finally:
            _leave()
    return wrapper  # type: ignore[return-value]
