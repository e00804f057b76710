"""A CPU session that picks how to use the cores by timing itself, so a busy machine does not
slow gcompile down more than the work it shares the cores with.

ONNX Runtime splits each large kernel (a GEMM, a convolution) into one static piece per
thread: when another process holds a core, the piece on it finishes late and the whole
kernel waits for it, and small kernels pay a thread hand-off each. On a quiet machine all
cores are faster; with a busy neighbour one thread often is (a residual CNN step took
638 ms with two threads and two busy processes beside it, against PyTorch's 387 ms).

How a worker waits matters as much. A sleeping worker costs every parallel kernel a wake-up,
which graphs of many small kernels feel: a WGAN-GP step (W4) took 7.4 ms with sleeping workers
and 4.1 with spinning ones, an LSTM step (W8) 12.4 and 9.0, a ResNet-18-like step 49.6 and 44.7.
But a spinning worker takes a core a busy neighbour needs: with one, W1 took 23.0 ms on sleeping
workers, 26.4 on spinning ones or on one thread. Spinning workers stop when a run returns
(`session.force_spinning_stop`; spinning on had burnt 40 ms of a core after every call).

Which variant wins depends on the machine's load at the moment and on the graph, so the
session measures. It starts on all cores with sleeping workers and compares its choice with one
challenger at a time, a few calls each, in turn one thread, then all cores with spinning
workers, then the other again; it keeps the faster and compares again after 10 calls, then 20,
40, up to every 100 (a first choice made while something else briefly held the cores had kept W1
on one thread, 20.4 ms a step instead of 14.4, through a whole benchmark). One challenger per
comparison spends as many calls on slower variants as two variants did. Those calls are what a
2 ms step (W9) pays for the third variant: 3–12% quiet and 6–10% with a busy neighbour, against
6% and 24% when all three were timed in every comparison (tools/session_ab.py against the
sessions before; docs/notes/performance-history.md). Spinning workers must win by SPIN_HANDICAP: where they
are within a few percent of sleeping ones (the GEMM-bound MLP steps), the benchmark's timed
calls ran up to 5% slower than the comparison's, beside PyTorch's and JAX's threads in the same
process.

Only the model's own calls are timed, wall-clock: what the user waits for. A challenger's
session is created when its first comparison starts, from the third call on (a function called
once or twice never pays for one), and only for graphs of at most ADAPT_MAX_NODES nodes and
ADAPT_MAX_BYTES of model and weights (a second session of a huge graph costs seconds, and each
session holds its own copy of the weights). The challenger gives its memory arena back after
its last timed call of a comparison, so an idle variant holds no activations (a choice that
loses holds its own until its next turn as challenger); the next call of a variant that gave its
arena back pages that memory in again (a quarter of a W3 step) and is not timed, nor is a
session's first run, which plans memory.
"""
from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

ADAPT_MAX_NODES = 20000
ADAPT_MAX_BYTES = 256 << 20
EXPLORE = 3          # timed calls of each variant per comparison
EXPLOIT = 100        # calls with the winner before comparing again (FIRST_EXPLOIT after the first
FIRST_EXPLOIT = 10   # comparison, doubling up to EXPLOIT: an early choice made while a burst of other
                     # work ran is revisited soon)
_LAZY_AT = 2         # calls before the first challenger's session is made
SPIN_HANDICAP = 1.1  # spinning workers must be 10% faster to be chosen (see the module's docstring)


class Variant(NamedTuple):
    """One way to run the model: intra-op threads, and whether idle workers spin during a run."""
    threads: int
    spin: bool


class AdaptiveSession:
    """Duck-types onnxruntime.InferenceSession for what gcompile calls: run, io_binding,
    run_with_iobinding, get_inputs, get_outputs, get_providers (anything else is the first
    variant's). `make(threads, spin)` makes one variant's session; `clock` times the calls, in
    seconds (a test's stand-in sessions advance a fake one)."""

    def __init__(self, make: Callable[[int, bool], Any], threads: int,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._make, self._clock = make, clock
        # the first choice, then the challengers in turn
        self._variants = [Variant(threads, False), Variant(1, False), Variant(threads, True)]
        first = self._variants[0]
        self._sessions: dict[Variant, Any] = {first: make(*first)}
        self._cold = {first}       # variants whose next run is untimed: a first run, or one after a shrink
        self._choice, self._challenger = first, self._variants[1]
        self._times: dict[Variant, list[float]] = {first: [], self._challenger: []}   # the two compared
        self._calls, self._left, self._rounds = 0, 0, 0
        self._lock = threading.Lock()         # the bookkeeping, for callers in several threads (runs overlap)

    @property
    def variant(self) -> Variant:
        """The variant the next call will use."""
        return self._next()

    def _next(self) -> Variant:
        with self._lock:
            return self._choose()

    def _choose(self) -> Variant:
        if self._calls < _LAZY_AT:
            return self._choice
        if self._challenger not in self._sessions:
            self._sessions[self._challenger] = self._make(*self._challenger)
            self._cold.add(self._challenger)
        if self._left > 0:
            return self._choice
        if all(len(times) >= EXPLORE for times in self._times.values()):   # both measured: keep the faster a while
            self._choice = min(self._times, key=lambda v: statistics.median(self._times[v])
                               * (SPIN_HANDICAP if v.spin else 1))
            self._challenger = self._next_challenger()
            self._times = {self._choice: [], self._challenger: []}
            self._left = min(EXPLOIT, FIRST_EXPLOIT << self._rounds)
            self._rounds += 1
            return self._choice
        return min(self._times, key=lambda v: len(self._times[v]))

    def _next_challenger(self) -> Variant:
        """The other variants in turn (in the order of self._variants, after the last challenger)."""
        others = [v for v in self._variants if v != self._choice]
        at = self._variants.index(self._challenger)
        return next((v for v in others if self._variants.index(v) > at), others[0])

    def _timed(self, variant: Variant, run: Callable[..., Any]) -> Any:
        with self._lock:
            comparing = self._left == 0 and self._calls >= _LAZY_AT
            last = (comparing and variant == self._challenger and variant not in self._cold
                    and len(self._times[variant]) == EXPLORE - 1)
        args = []
        if last:                              # the challenger's last timed call: give its arena back after
            import onnxruntime as ort
            options = ort.RunOptions()
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
            args.append(options)
        start = self._clock()
        result = run(self._sessions[variant], *args)
        elapsed = self._clock() - start
        with self._lock:
            self._calls += 1
            if variant in self._cold:
                self._cold.discard(variant)
            elif comparing and variant in self._times:    # (a binding made before the round changed)
                self._times[variant].append(elapsed)
            if last:
                self._cold.add(variant)
            if self._left > 0:
                self._left -= 1
        return result

    # -- the InferenceSession surface gcompile uses ----------------------------------------------
    def run(self, output_names, input_feed, run_options=None):
        variant = self._next()
        if run_options is not None:
            return self._sessions[variant].run(output_names, input_feed, run_options)
        return self._timed(variant, lambda s, *o: s.run(output_names, input_feed, *o))

    def io_binding(self):
        variant = self._next()
        binding = self._sessions[variant].io_binding()
        binding.gcompile_variant = variant    # the session it belongs to (calls may come from threads)
        return binding

    def run_with_iobinding(self, binding, run_options=None):
        variant = getattr(binding, "gcompile_variant", self._variants[0])
        if run_options is not None:
            return self._sessions[variant].run_with_iobinding(binding, run_options)
        return self._timed(variant, lambda s, *o: s.run_with_iobinding(binding, *o))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sessions[self._variants[0]], name)
