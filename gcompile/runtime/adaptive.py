"""A CPU session that picks its thread count by timing itself, so a busy machine does not
slow gcompile down more than the work it shares the cores with.

ONNX Runtime splits each large kernel (a GEMM, a convolution) into one static piece per
thread: when another process holds a core, the piece on it finishes late and the whole
kernel waits for it, and small kernels pay a thread hand-off each. On a quiet machine all
cores are faster; with a busy neighbour one thread often is (a residual CNN step took
638 ms with two threads and two busy processes beside it, against PyTorch's 387 ms). Which
one wins depends on the machine's load at the moment and on the graph, so the session
measures: it runs the model with all cores and with one thread alternately for a few calls,
keeps the faster, and measures again: after 10 calls, then 20, 40, up to every 100 (a first
choice made while something else briefly held the cores had kept W1 on one thread, 20.4 ms
a step instead of 14.4, through a whole benchmark). The workers never spin while waiting
(`session.intra_op.allow_spinning` 0): spinning burns a core the neighbour needs, and ours
when the neighbour holds the other one.

Only the model's own calls are timed, wall-clock: what the user waits for. The one-thread
session is created on the third call (a function called once or twice never pays for it) and
only for graphs of at most ADAPT_MAX_NODES nodes and ADAPT_MAX_BYTES of model and weights (a
second session of a huge graph costs seconds, and each session holds its own copy of the
weights). After a run of the session not in use, its memory arena is shrunk, so the idle
variant holds no activations.
"""
from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

ADAPT_MAX_NODES = 20000
ADAPT_MAX_BYTES = 256 << 20
EXPLORE = 3          # timed calls of each variant per comparison
EXPLOIT = 100        # calls with the winner before comparing again (FIRST_EXPLOIT after the first
FIRST_EXPLOIT = 10   # comparison, doubling up to EXPLOIT: an early choice made while a burst of other
                     # work ran is revisited soon)
_LAZY_AT = 2         # calls before the one-thread session is made


class AdaptiveSession:
    """Duck-types onnxruntime.InferenceSession for what gcompile calls: run, io_binding,
    run_with_iobinding, get_inputs, get_outputs, get_providers (anything else is the
    all-cores session's)."""

    def __init__(self, make: Callable[[int], Any], threads: int) -> None:
        self._make, self._wide = make, threads
        self._sessions: dict[int, Any] = {threads: make(threads)}
        self._cold = {threads}                # sessions not run yet: a first run plans memory, untimed
        self._times: dict[int, list[float]] = {threads: [], 1: []}
        self._choice, self._calls, self._left, self._rounds = threads, 0, 0, 0
        self._lock = threading.Lock()         # the bookkeeping, for callers in several threads (runs overlap)

    @property
    def threads(self) -> int:
        """The thread count the next call will use."""
        return self._next()

    def _next(self) -> int:
        with self._lock:
            return self._choose()

    def _choose(self) -> int:
        if self._calls < _LAZY_AT:
            return self._wide
        if 1 not in self._sessions:
            self._sessions[1] = self._make(1)
            self._cold.add(1)
        if self._left > 0:
            return self._choice
        wide, narrow = (len(self._times[k]) for k in (self._wide, 1))
        if wide >= EXPLORE and narrow >= EXPLORE:   # both measured: keep the faster for a while
            self._choice = min(self._times, key=lambda k: statistics.median(self._times[k]))
            self._times = {self._wide: [], 1: []}
            self._left = min(EXPLOIT, FIRST_EXPLOIT << self._rounds)
            self._rounds += 1
            return self._choice
        return self._wide if wide <= narrow else 1

    def _timed(self, threads: int, run: Callable[..., Any]) -> Any:
        comparing = self._left == 0 and self._calls >= _LAZY_AT
        args = []
        if comparing and threads != self._choice:   # the variant not in use: give its arena back after
            import onnxruntime as ort
            options = ort.RunOptions()
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
            args.append(options)
        start = time.perf_counter()
        result = run(self._sessions[threads], *args)
        elapsed = time.perf_counter() - start
        with self._lock:
            self._calls += 1
            if threads in self._cold:
                self._cold.discard(threads)
            elif comparing:
                self._times[threads].append(elapsed)
            if self._left > 0:
                self._left -= 1
        return result

    # -- the InferenceSession surface gcompile uses ----------------------------------------------
    def run(self, output_names, input_feed, run_options=None):
        threads = self._next()
        if run_options is not None:
            return self._sessions[threads].run(output_names, input_feed, run_options)
        return self._timed(threads, lambda s, *o: s.run(output_names, input_feed, *o))

    def io_binding(self):
        threads = self._next()
        binding = self._sessions[threads].io_binding()
        binding.gcompile_threads = threads    # the session it belongs to (calls may come from threads)
        return binding

    def run_with_iobinding(self, binding, run_options=None):
        threads = getattr(binding, "gcompile_threads", self._wide)
        if run_options is not None:
            return self._sessions[threads].run_with_iobinding(binding, run_options)
        return self._timed(threads, lambda s, *o: s.run_with_iobinding(binding, *o))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sessions[self._wide], name)
