"""A CPU session that picks how to use the cores by timing itself, so a busy machine does not
slow gcompile down more than the work it shares the cores with.

ONNX Runtime splits each large kernel (a GEMM, a convolution) into one static piece per
thread: when another process holds a core, the piece on it finishes late and the whole
kernel waits for it, and small kernels pay a thread hand-off each. On a quiet machine all
cores are faster; with a busy neighbour one thread often is.

Beside a busy neighbour, more threads than cores often beat both: each kernel is then split
into as many pieces as threads, the machine's scheduler spreads them over the cores the
neighbour leaves, and the process holds a larger share of the machine. On a quiet machine the
extra threads only switch places (a GEMM-bound step ran 20-30% slower), so twice the cores is
tried only where the other processes are known to hold LOAD_SHIFT cores or more, and a choice of
it is left, like one of one thread, as soon as they no longer do.

How a worker waits matters as much. A sleeping worker costs every parallel kernel a wake-up,
which graphs of many small kernels feel; but a spinning worker takes a core a busy neighbour
needs. Spinning workers stop when a run returns (`session.force_spinning_stop`: left spinning,
they burn a core after every call).

Which variant wins depends on the machine's load at the moment and on the graph, so the
session measures. It starts on all cores with sleeping workers and compares its choice with one
challenger at a time, a few calls each, in turn twice the cores, one thread, then all cores with
spinning workers (skipping those that cannot win, below), then the others again; it keeps the
faster and compares again after 10 calls, then 20, 40, up to every 100 (a first choice made
while something else briefly held the cores must not stay for a whole run). One challenger
per comparison spends as many calls on slower variants as two variants did. Spinning workers
must win by SPIN_HANDICAP: where they are within a few percent of sleeping ones (GEMM-bound
steps), the comparison's timings flatter them against other threads in the same process.
docs/strategies.md has the measurements behind each choice.

A choice is only as good as the load it was made under, and the load changes between
comparisons: a choice of one thread made beside a busy neighbour costs most of a core once the
neighbour stops, and the time of one thread barely changes when it does, so the session's own
timings cannot tell. Where the operating system says how much CPU time the machine spends
(Linux's /proc/stat), the session reads, at most every LOAD_WINDOW seconds, how many cores the
other processes used since the last reading, and starts a comparison at once when that moved by
LOAD_SHIFT cores or more from what it was when the choice was made, in two readings in a row (a
burst of another process's work is not a new load), and not before the choice has held
FIRST_EXPLOIT calls (so a machine whose load swings all the time costs at most one comparison per
FIRST_EXPLOIT calls).

One thread is not tried while it cannot win. On a machine whose other processes use less than
LOAD_SHIFT cores, a call of a variant with several threads that kept ONE_THREAD_FUTILE cores or
more busy (this process's CPU time over the call's wall-clock time, with no other call in flight,
and sleeping workers: spinning ones burn CPU while they wait) did that much work in parallel, and
one thread would take about that many times as long: a large model's training step spent a
comparison's calls on one thread at 1.5-1.8 times its time each. That measure is taken on a quiet
machine only (beside a neighbour a call keeps fewer cores busy, however parallel its work). So a
choice of one thread made beside a neighbour is left as soon as the machine is quiet again (two
readings in a row, whatever calls it has held), for all cores with sleeping workers, without a
comparison (it had held at least FIRST_EXPLOIT calls at one thread's pace).
Where the load is unknown or moves by LOAD_SHIFT, one thread is tried again in its turn.

Only the model's own calls are timed, wall-clock: what the user waits for. A challenger's
session is created when its first comparison starts, from the third call on (a function called
once or twice never pays for one), and only for graphs of at most ADAPT_MAX_NODES nodes and
ADAPT_MAX_BYTES of model and weights (a second session of a huge graph costs seconds, and each
session holds its own copy of the weights). The challenger gives its memory arena back after
its last timed call of a comparison, so an idle variant holds no activations (a choice that
loses holds its own until its next turn as challenger); the next call of a variant that gave its
arena back pages that memory in again and is not timed, nor is a session's first run, which
plans memory.
"""
from __future__ import annotations

import os
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
LOAD_WINDOW = 0.25   # seconds between readings of the other processes' load
LOAD_SHIFT = 0.5     # cores of other processes' load gained or lost since a choice that start a comparison
ONE_THREAD_FUTILE = 1.5   # cores a quiet machine's call kept busy past which one thread is not tried


def other_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot, less this process's own: the
    other processes' load, summed (None where /proc/stat cannot be read)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 8 or fields[0] != b"cpu":
        return None
    # user nice system idle iowait irq softirq [steal ...]: everything but idle and iowait is busy
    ticks = [int(v) for v in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / _TICKS_PER_SECOND - time.process_time()


try:
    _TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _TICKS_PER_SECOND = 100


class Variant(NamedTuple):
    """One way to run the model: intra-op threads, and whether idle workers spin during a run."""
    threads: int
    spin: bool


class AdaptiveSession:
    """Duck-types onnxruntime.InferenceSession for what gcompile calls: run, io_binding,
    run_with_iobinding, get_inputs, get_outputs, get_providers (anything else is the first
    variant's). `make(threads, spin)` makes one variant's session; `clock` times the calls, in
    seconds, and `load` gives the other processes' CPU seconds so far, or None where unknown (a
    test's stand-in sessions advance a fake clock, and its load is a fake too).
    thread_counts=False leaves out the variants of another thread count (one thread, twice the
    cores): every variant then computes the same numbers (ONNX Runtime's matrix products split
    their sums differently for another thread count, which changes their rounding), only how
    fast differs."""

    def __init__(self, make: Callable[[int, bool], Any], threads: int,
                 clock: Callable[[], float] = time.perf_counter,
                 load: Callable[[], float | None] = other_cpu_seconds, thread_counts: bool = True,
                 cpu: Callable[[], float] = time.process_time) -> None:
        self._make, self._clock, self._load, self._cpu = make, clock, load, cpu
        self._parallel: float | None = None   # cores the last lone call of several threads kept busy
        self._in_flight = 0
        self._reading = (clock(), load())     # the last reading of the other processes' load
        self._cores_used: float | None = None  # by the other processes, over the last LOAD_WINDOW
        self._cores_at_choice: float | None = None
        self._since_choice, self._moved = 0, False
        # the first choice, then the challengers in turn
        self._threads = threads
        self._variants = [Variant(threads, False),
                          *([Variant(2 * threads, False), Variant(1, False)] if thread_counts else []),
                          Variant(threads, True)]
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
        if self._calls < _LAZY_AT or self._left > 0:
            return self._choice
        if not any(self._times.values()) and self._futile(self._choice):
            # one thread or twice the cores, chosen beside a neighbour that has left: it cannot win now
            return self._keep(self._variants[0], FIRST_EXPLOIT)
        if not self._times[self._challenger] and self._futile(self._challenger):
            while self._futile(self._challenger):          # a comparison about to start: skip those
                self._challenger = self._next_challenger()
            self._times = {self._choice: self._times[self._choice], self._challenger: []}
        if self._challenger not in self._sessions:
            self._sessions[self._challenger] = self._make(*self._challenger)
            self._cold.add(self._challenger)
        if all(len(times) >= EXPLORE for times in self._times.values()):   # both measured: keep the faster a while
            faster = min(self._times, key=lambda v: statistics.median(self._times[v])
                         * (SPIN_HANDICAP if v.spin else 1))
            calls = min(EXPLOIT, FIRST_EXPLOIT << self._rounds)
            self._rounds += 1
            return self._keep(faster, calls)
        return min(self._times, key=lambda v: len(self._times[v]))

    def _keep(self, choice: Variant, calls: int) -> Variant:
        """Make `choice` the choice for the next `calls` calls, as of the load read last; the next
        comparison's challenger is the next variant in turn."""
        self._choice = choice
        self._challenger = self._next_challenger()
        self._times = {choice: [], self._challenger: []}
        self._left = calls
        self._cores_at_choice, self._since_choice, self._moved = self._cores_used, 0, False
        return choice

    def _futile(self, variant: Variant) -> bool:
        """Whether `variant` cannot win now (see the module's docstring): one thread on a quiet
        machine for a call that kept ONE_THREAD_FUTILE cores busy there; more threads than cores
        where no neighbour is known to hold LOAD_SHIFT cores."""
        if variant.threads == 1:
            return (self._parallel is not None and self._parallel >= ONE_THREAD_FUTILE
                    and self._cores_used is not None and self._cores_used < LOAD_SHIFT)
        if variant.threads > self._threads:
            return self._cores_used is None or self._cores_used < LOAD_SHIFT
        return False

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
            self._in_flight += 1
            alone = self._in_flight == 1
        args = []
        if last:                              # the challenger's last timed call: give its arena back after
            import onnxruntime as ort
            options = ort.RunOptions()
            options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
            args.append(options)
        start, cpu = self._clock(), self._cpu()
        try:
            result = run(self._sessions[variant], *args)
        finally:
            with self._lock:
                self._in_flight -= 1
        elapsed, cpu = self._clock() - start, self._cpu() - cpu
        with self._lock:
            self._calls += 1
            cores = self._read_load()
            quiet = cores is not None and cores < LOAD_SHIFT          # (read at the call's end: over it)
            if alone and quiet and self._in_flight == 0 and variant.threads > 1 and not variant.spin \
                    and variant not in self._cold and elapsed > 0:        # (spinning workers burn CPU idle)
                self._parallel = cpu / elapsed
            if variant in self._cold:
                self._cold.discard(variant)
            elif comparing and variant in self._times:    # (a binding made before the round changed)
                self._times[variant].append(elapsed)
            if last:
                self._cold.add(variant)
            if self._left > 0:
                self._left -= 1
                self._since_choice += 1
                if cores is not None and self._cores_at_choice is None:
                    self._cores_at_choice = cores
                elif cores is not None and self._cores_at_choice is not None:
                    moved = abs(cores - self._cores_at_choice) >= LOAD_SHIFT
                    # two readings in a row: a burst of another process's work is not a new load
                    if moved and self._moved and (self._since_choice >= FIRST_EXPLOIT or self._futile(self._choice)):
                        self._left = 0
                    self._moved = moved
        return result

    def _read_load(self) -> float | None:
        """The cores the other processes used since the last reading, when LOAD_WINDOW has passed
        since it (also kept in self._cores_used); None otherwise, or where the load is unknown."""
        now = self._clock()
        then, used = self._reading
        if now - then < LOAD_WINDOW:
            return None
        total = self._load()
        self._reading = (now, total)
        if total is None or used is None:
            return None
        self._cores_used = (total - used) / (now - then)
        return self._cores_used

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
