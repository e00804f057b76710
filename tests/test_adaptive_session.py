"""runtime/adaptive.py: the CPU session that compares its variants (all cores with sleeping
workers, one thread, all cores with spinning workers) two at a time by timing and keeps the faster
(checked with stand-in sessions that advance a fake clock by the time the test sets for their
variant, so nothing is timed for real), and a compiled function that gives the same results
whichever variant runs."""
import io
import os
import time

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.runtime import adaptive
from gcompile.runtime.adaptive import AdaptiveSession, Variant

SPIN, SLEEP, ONE, OVER = Variant(2, True), Variant(2, False), Variant(1, False), Variant(4, False)


class Binding:
    def __init__(self, owner):
        self.owner = owner


class Clock:
    """The session's clock: a FakeSession's run advances it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeSession:
    """Runs in `delay[variant]` seconds of `clock` and records which variant ran, with what options."""

    def __init__(self, variant, delay, log, clock):
        self.variant, self.delay, self.log, self.clock = variant, delay, log, clock

    def run(self, names, feeds, *options):
        self.clock.now += self.delay[self.variant]
        self.log.append((self.variant, bool(options)))
        return [self.variant]

    def io_binding(self):
        return Binding(self.variant)

    def run_with_iobinding(self, binding, *options):
        assert binding.owner == self.variant
        self.run(None, None, *options)

    def get_providers(self):
        return ["CPUExecutionProvider"]


class Load:
    """The other processes' CPU seconds so far: `cores` busy cores, as the fake clock advances."""

    def __init__(self, clock, cores=0.0):
        self.clock, self.cores, self.total, self.at = clock, cores, 0.0, clock()

    def __call__(self):
        self.total += self.cores * (self.clock() - self.at)
        self.at = self.clock()
        return self.total


def adaptive_session(delay, log, made, load=None):
    clock = Clock()

    def make(threads, spin):
        assert not (spin and threads == 1)       # one thread has no workers to spin
        made.append(Variant(threads, spin))
        return FakeSession(Variant(threads, spin), delay, log, clock)
    return AdaptiveSession(make, 2, clock, load(clock) if load else lambda: None)


def run_comparison(session):
    """Calls until the session has timed every variant EXPLORE times; returns how many (asking for
    `session.variant` then makes the choice)."""
    calls = 0
    while any(len(times) < adaptive.EXPLORE for times in session._times.values()):
        session.run(None, {})
        calls += 1
    return calls


def compared(session):
    """The challenger of the comparison just run (before asking for `session.variant`)."""
    return next(v for v in session._times if v != session._choice)


def exploit(session):
    """The calls the current choice holds before the next comparison."""
    choice = session.variant                     # asking for it makes the choice
    while session._left > 0:
        assert session.run(None, {}) == [choice]


def test_compares_its_choice_with_one_challenger_at_a_time(monkeypatch):
    monkeypatch.setattr(adaptive, "EXPLOIT", 6)
    delay, log, made = {SLEEP: 0.02, ONE: 0.001, SPIN: 0.03}, [], []
    session = adaptive_session(delay, log, made)
    assert made == [SLEEP]
    for _ in range(2):
        session.run(None, {})
    assert made == [SLEEP]                       # a challenger's session only from the third call
    # EXPLORE timed calls each, after an untimed first run of the new session
    assert run_comparison(session) == 2 * adaptive.EXPLORE + 1
    assert made == [SLEEP, ONE] and session.variant == ONE
    exploit(session)
    assert run_comparison(session) == 2 * adaptive.EXPLORE + 1   # the next challenger: spinning workers
    assert made == [SLEEP, ONE, SPIN] and session.variant == ONE
    exploit(session)
    delay[ONE] = 0.05                            # the machine changed: all cores win the next comparison
    log.clear()
    assert session._challenger == SLEEP
    assert run_comparison(session) == 2 * adaptive.EXPLORE     # SLEEP's session is warm: nothing untimed
    assert session.variant == SLEEP
    # the challenger's last timed call gives its arena back (a run option)
    assert [v for v, shrink in log if shrink] == [SLEEP]
    exploit(session)
    challengers = []
    for _ in range(3):                           # then, in turn, one thread and spinning workers (the
        run_comparison(session)                  # load unknown, never twice the cores)
        challengers.append(compared(session))
        exploit(session)
    assert challengers == [ONE, SPIN, ONE] and OVER not in made


@pytest.mark.parametrize("spin, chosen", [(0.030, SLEEP), (0.0195, SLEEP), (0.0182, SLEEP), (0.0181, SPIN),
                                          (0.012, SPIN)])
def test_spinning_workers_must_win_by_the_handicap(monkeypatch, spin, chosen):
    """Spinning workers are chosen only where they beat sleeping ones by SPIN_HANDICAP (here 20 ms
    sleeping, 1.1 handicap: 18.2 ms loses, 18.1 wins): within a few percent, the safer sleeping
    workers are kept."""
    monkeypatch.setattr(adaptive, "FIRST_EXPLOIT", 1)
    delay, log, made = {SPIN: spin, SLEEP: 0.020, ONE: 0.040}, [], []
    session = adaptive_session(delay, log, made)
    run_comparison(session)                      # all cores (sleeping) against one thread
    exploit(session)
    run_comparison(session)                      # against spinning workers
    assert session.variant == chosen


def test_an_early_choice_is_revisited_soon(monkeypatch):
    """The first choice holds FIRST_EXPLOIT calls, each later one twice as many, up to EXPLOIT: a
    choice made while a burst of other work ran (a neighbour, another library's threads) does not
    stick for EXPLOIT calls."""
    monkeypatch.setattr(adaptive, "FIRST_EXPLOIT", 2)
    monkeypatch.setattr(adaptive, "EXPLOIT", 6)
    delay, log, made = {SPIN: 0.0, SLEEP: 0.0, ONE: 0.0}, [], []
    session = adaptive_session(delay, log, made)
    holds = []
    for _ in range(3):
        run_comparison(session)
        choice, held = session.variant, 0            # asking for it makes the choice
        while session._left > 0:                     # the calls the choice holds
            assert session.run(None, {}) == [choice]
            held += 1
        holds.append(held)
    assert holds == [2, 4, 6]


@pytest.mark.parametrize("shift, compares_early", [(1.0, True), (-0.6, True), (0.3, False), (None, False)])
def test_a_change_in_the_other_processes_load_starts_a_comparison(monkeypatch, shift, compares_early):
    """A choice holds its calls (here 20, the second round's) unless the other processes' load moves
    by LOAD_SHIFT cores or more in two readings in a row: then the next comparison starts at the
    first such reading after FIRST_EXPLOIT calls (a reading every LOAD_WINDOW = 0.25 s of the fake
    clock: every 5 calls of 50 ms). Where the load cannot be read (None), the choice holds."""
    monkeypatch.setattr(adaptive, "FIRST_EXPLOIT", 10)
    delay, log, made = {SLEEP: 0.05, ONE: 0.04, SPIN: 0.06}, [], []
    loads = []

    def load(clock):
        loads.append(Load(clock, cores=1.0))
        return loads[0]
    session = adaptive_session(delay, log, made, load=None if shift is None else load)
    run_comparison(session)
    assert session.variant == ONE                # chosen beside a busy neighbour
    exploit(session)
    run_comparison(session)
    assert session.variant == ONE and session._left == 20
    if loads:
        loads[0].cores += shift
    held = 0
    while session._left > 0:
        session.run(None, {})
        held += 1
    if not compares_early:
        assert held == 20
        return
    assert held <= adaptive.FIRST_EXPLOIT + 5
    delay[ONE] = 0.08                            # the neighbour left: all cores win the comparison now
    run_comparison(session)
    assert session.variant != ONE


def test_the_other_processes_load_is_read_from_the_machine(monkeypatch):
    """The machine's busy ticks (all but idle and iowait) less this process's own CPU time; the
    arithmetic on a fixed /proc/stat line, then the real reading, whose change over this process's own
    busy loop cannot go below zero by more than a tick (its own work is not counted, nor taken twice)."""
    first = adaptive.other_cpu_seconds()
    if not os.path.exists("/proc/stat"):
        assert first is None
        return
    assert first is not None and first >= 0
    start = time.process_time()
    while time.process_time() - start < 0.05:
        pass
    assert adaptive.other_cpu_seconds() - first > -2 / adaptive._TICKS_PER_SECOND
    line = b"cpu  100 20 30 5000 40 5 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    monkeypatch.setattr(adaptive, "open", lambda path, mode: io.BytesIO(line), raising=False)
    monkeypatch.setattr(adaptive.time, "process_time", lambda: 0.25)
    assert adaptive.other_cpu_seconds() == pytest.approx((100 + 20 + 30 + 5 + 6 + 7) / adaptive._TICKS_PER_SECOND
                                                         - 0.25)


def test_io_binding_runs_on_the_session_it_was_made_for():
    delay, log, made = {SPIN: 0.0, SLEEP: 0.0, ONE: 0.0}, [], []
    session = adaptive_session(delay, log, made)
    for _ in range(20):
        binding, other = session.io_binding(), session.io_binding()   # as from two threads
        session.run_with_iobinding(other)        # FakeSession asserts the binding is its own
        session.run_with_iobinding(binding)
    assert {variant for variant, _ in log} == {SPIN, SLEEP, ONE}
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_a_compiled_function_gives_the_same_results_on_either_variant():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    x = rng.standard_normal((4, 6)).astype(np.float32)

    def step(x, w):
        loss = F.sum(F.tanh(x @ w) ** 2)
        return loss, gc.grad(loss, [w])[0]
    cf = gc.compile(step, x, w, provider="cpu")
    first = cf(x, w)
    for _ in range(20):
        loss, grad = cf(x, w)
        np.testing.assert_array_equal(loss, first[0])
        np.testing.assert_allclose(grad, first[1], rtol=1e-6, atol=1e-7)
    xv, wv = cf.to_device(x), cf.to_device(w)    # the io-binding path
    for _ in range(10):
        np.testing.assert_allclose(cf(xv, wv)[1], first[1], rtol=1e-6, atol=1e-7)


def _session_kinds(monkeypatch, **limits):
    """The sessions gc.compile makes for a small function, under patched limits."""
    from gcompile.runtime import providers
    for name, value in limits.items():
        monkeypatch.setattr(providers, name, value)
    x = np.ones((3, 3), np.float32)
    return gc.compile(lambda x: F.tanh(x) @ x, x, provider="cpu")._session


def test_gcompile_threads_pins_the_thread_count(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert isinstance(_session_kinds(monkeypatch), AdaptiveSession)
    monkeypatch.setenv("GCOMPILE_THREADS", "1")
    session = _session_kinds(monkeypatch)
    assert not isinstance(session, AdaptiveSession)
    assert session.get_session_options().intra_op_num_threads == 1
    monkeypatch.setenv("GCOMPILE_THREADS", "two")
    with pytest.raises(gc.GcompileError, match="GCOMPILE_THREADS must be a positive whole number.*'two'"):
        _session_kinds(monkeypatch)


def test_only_the_adaptive_all_cores_session_spins_and_stops_after_each_run(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)

    def config(session, key):
        return session.get_session_options().get_session_config_entry(key)
    wide = _session_kinds(monkeypatch)._make(2, True)     # the spinning variant's session
    assert config(wide, "session.intra_op.allow_spinning") == "1"
    assert config(wide, "session.force_spinning_stop") == "1"
    monkeypatch.setenv("GCOMPILE_THREADS", "2")              # a pinned count may share the machine
    assert config(_session_kinds(monkeypatch), "session.intra_op.allow_spinning") == "0"


def test_models_over_the_size_limits_keep_one_session(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert not isinstance(_session_kinds(monkeypatch, ADAPT_MAX_BYTES=10), AdaptiveSession)
    assert not isinstance(_session_kinds(monkeypatch, ADAPT_MAX_NODES=1), AdaptiveSession)


def test_without_one_thread_it_only_chooses_spinning(monkeypatch):
    """one_thread=False (a Trainer's sessions): the variants keep the thread count, whose products
    round alike, and the session still keeps the faster of spinning and sleeping workers."""
    monkeypatch.setattr(adaptive, "EXPLOIT", 6)
    delay, log, made = {SLEEP: 0.02, ONE: 0.001, SPIN: 0.01}, [], []
    clock = Clock()

    def make(threads, spin):
        made.append(Variant(threads, spin))
        return FakeSession(Variant(threads, spin), delay, log, clock)
    session = AdaptiveSession(make, 2, clock, lambda: None, thread_counts=False)
    for _ in range(3):
        run_comparison(session)
        exploit(session)
    assert ONE not in made and session.variant == SPIN
    assert {variant for variant, _ in log} == {SLEEP, SPIN}


class BusyFakeSession(FakeSession):
    """A FakeSession that also advances the process's CPU clock: `busy[variant]` cores over its run."""

    def __init__(self, variant, delay, log, clock, cpu, busy):
        super().__init__(variant, delay, log, clock)
        self.cpu, self.busy = cpu, busy

    def run(self, names, feeds, *options):
        self.cpu.now += self.delay[self.variant] * self.busy[self.variant]
        return super().run(names, feeds, *options)


@pytest.mark.parametrize("busy, others, challengers", [
    (1.9, 0.0, [SPIN, SPIN, SPIN]),     # a large step keeping both cores busy on a quiet machine
    (1.55, 0.4, [SPIN, SPIN, SPIN]),    # just past the threshold, the neighbours below LOAD_SHIFT
    (1.45, 0.0, [ONE, SPIN, ONE]),      # just below it: one thread may win
    (1.9, 0.6, [OVER, ONE, SPIN]),      # a busy neighbour: twice the cores and one thread may win
    (1.9, None, [ONE, SPIN, ONE]),      # the load is unknown: one thread may win, twice the cores not
])
def test_one_thread_is_not_tried_where_it_cannot_win(monkeypatch, busy, others, challengers):
    """A quiet machine (the other processes below LOAD_SHIFT cores) and calls of sleeping workers
    that kept ONE_THREAD_FUTILE cores or more busy: the comparisons try spinning workers only, and
    one thread's session is never made. Either side of each threshold, one thread takes its turn;
    twice the cores only beside a neighbour known to hold LOAD_SHIFT cores."""
    monkeypatch.setattr(adaptive, "EXPLOIT", 6)
    delay, log, made = {SLEEP: 0.3, ONE: 0.5, SPIN: 0.3, OVER: 0.4}, [], []
    clock, cpu = Clock(), Clock()
    load = Load(clock, cores=others or 0.0)

    def make(threads, spin):
        made.append(Variant(threads, spin))
        return BusyFakeSession(Variant(threads, spin), delay, log, clock, cpu,
                               {SLEEP: busy, ONE: 1.0, SPIN: 2.0, OVER: 2.0})
    session = AdaptiveSession(make, 2, clock, load if others is not None else lambda: None, cpu=cpu)
    seen = []
    for _ in range(3):
        run_comparison(session)
        seen.append(compared(session))
        exploit(session)
    assert seen == challengers and set(made) == {SLEEP, *challengers}
    assert session.variant == SLEEP


def test_spinning_workers_cpu_time_does_not_rule_out_one_thread(monkeypatch):
    """Spinning workers burn CPU while they wait, so their calls say nothing of the work done in
    parallel: chosen (here they are the fastest), they leave one thread its turn."""
    monkeypatch.setattr(adaptive, "EXPLOIT", 6)
    delay, log, made = {SLEEP: 0.4, ONE: 0.5, SPIN: 0.3}, [], []
    clock, cpu = Clock(), Clock()
    busy = {SLEEP: 1.0, ONE: 1.0, SPIN: 2.0}

    def make(threads, spin):
        made.append(Variant(threads, spin))
        return BusyFakeSession(Variant(threads, spin), delay, log, clock, cpu, busy)
    session = AdaptiveSession(make, 2, clock, Load(clock, cores=0.0), cpu=cpu)
    challengers = []
    for _ in range(2):
        run_comparison(session)
        challengers.append(compared(session))
        exploit(session)
    assert session.variant == SPIN and not session._futile(ONE)
    for _ in range(2):
        run_comparison(session)
        challengers.append(compared(session))
        exploit(session)
    assert challengers == [ONE, SPIN, SLEEP, ONE]


@pytest.mark.parametrize("parallel, leaves_at_once", [(1.9, True), (1.45, False)])
def test_one_thread_chosen_beside_a_neighbour_is_left_when_it_goes(monkeypatch, parallel, leaves_at_once):
    """A step whose calls keep `parallel` cores busy on a quiet machine (here 1.2 beside the
    neighbour, which is not taken as its measure) chooses one thread beside a busy neighbour; when
    the neighbour leaves, two readings later (a reading per call here) it runs on all cores again,
    without a comparison and before FIRST_EXPLOIT calls, where one thread cannot win (ONE_THREAD_FUTILE);
    below that threshold the choice holds its calls as any other."""
    monkeypatch.setattr(adaptive, "FIRST_EXPLOIT", 10)
    delay, log, made = {SLEEP: 0.3, ONE: 0.5, SPIN: 0.4, OVER: 0.7}, [], []
    clock, cpu = Clock(), Clock()
    load = Load(clock, cores=0.0)
    busy = {SLEEP: parallel, ONE: 1.0, SPIN: 2.0, OVER: 2.0}

    def make(threads, spin):
        made.append(Variant(threads, spin))
        return BusyFakeSession(Variant(threads, spin), delay, log, clock, cpu, busy)
    session = AdaptiveSession(make, 2, clock, load, cpu=cpu)
    run_comparison(session)
    exploit(session)
    assert session.variant == SLEEP
    load.cores, busy[SLEEP], delay[SLEEP], delay[ONE], delay[SPIN] = 1.0, 1.2, 0.6, 0.4, 0.8    # a neighbour arrives
    for _ in range(100):                         # its comparisons, after the first choice's calls
        if session.variant == ONE and session._left > 0:
            break
        session.run(None, {})
    assert session._left > adaptive.FIRST_EXPLOIT      # a choice that would hold more calls than that
    load.cores, busy[SLEEP], delay[SLEEP], delay[ONE] = 0.0, parallel, 0.3, 0.5     # and leaves
    held = 0
    while session.variant == ONE and held < 100:
        session.run(None, {})
        held += 1
    if not leaves_at_once:
        assert held >= adaptive.FIRST_EXPLOIT
        return
    assert held == 2 and session._left == adaptive.FIRST_EXPLOIT
    assert not any(session._times.values())      # no comparison: it holds all cores now
    log.clear()
    exploit(session)
    assert {variant for variant, _ in log} == {SLEEP}


def test_twice_the_cores_is_tried_beside_a_neighbour_and_left_when_it_goes(monkeypatch):
    """Beside a neighbour known to hold LOAD_SHIFT cores, the first challenger is twice the cores
    (sleeping workers), kept where it wins; when the neighbour leaves, two readings later the
    session runs on the cores again without a comparison, and twice the cores is not tried again
    while the machine stays quiet."""
    monkeypatch.setattr(adaptive, "FIRST_EXPLOIT", 10)
    delay, log, made = {SLEEP: 0.3, ONE: 0.5, SPIN: 0.4, OVER: 0.35}, [], []
    clock, cpu = Clock(), Clock()
    load = Load(clock, cores=0.0)

    def make(threads, spin):
        made.append(Variant(threads, spin))
        return BusyFakeSession(Variant(threads, spin), delay, log, clock, cpu, {SLEEP: 1.9, ONE: 1.0, SPIN: 2.0,
                                                                               OVER: 2.0})
    session = AdaptiveSession(make, 2, clock, load, cpu=cpu)
    run_comparison(session)
    assert compared(session) == SPIN and OVER not in made      # quiet: neither one thread nor twice the cores
    load.cores, delay[SLEEP], delay[SPIN], delay[OVER] = 1.0, 0.6, 0.8, 0.45     # a neighbour arrives
    for _ in range(100):
        if session.variant == OVER and session._left > 0:
            break
        session.run(None, {})
    assert session.variant == OVER and ONE not in made      # twice the cores came first, and won
    load.cores, delay[SLEEP], delay[OVER] = 0.0, 0.3, 0.35       # and leaves
    held = 0
    while session.variant == OVER and held < 100:
        session.run(None, {})
        held += 1
    assert held == 2 and session._left == adaptive.FIRST_EXPLOIT and not any(session._times.values())
    log.clear()
    exploit(session)
    run_comparison(session)
    assert compared(session) != OVER and {variant for variant, _ in log} <= {SLEEP, SPIN}
