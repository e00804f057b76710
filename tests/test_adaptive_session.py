"""runtime/adaptive.py: the CPU session that times its all-cores and one-thread variants and keeps
the faster (checked with stand-in sessions whose speed the test sets, so nothing is timed for
real), and a compiled function that gives the same results whichever variant runs."""
import time

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.runtime import adaptive
from gcompile.runtime.adaptive import AdaptiveSession


class Binding:
    def __init__(self, owner):
        self.owner = owner


class FakeSession:
    """Runs in `delay[threads]` seconds and records which variant ran, with what options."""

    def __init__(self, threads, delay, log):
        self.threads, self.delay, self.log = threads, delay, log

    def run(self, names, feeds, *options):
        time.sleep(self.delay[self.threads])
        self.log.append((self.threads, bool(options)))
        return [self.threads]

    def io_binding(self):
        return Binding(self.threads)

    def run_with_iobinding(self, binding, *options):
        assert binding.owner == self.threads
        self.run(None, None, *options)

    def get_providers(self):
        return ["CPUExecutionProvider"]


def adaptive_session(delay, log, made):
    def make(threads):
        made.append(threads)
        return FakeSession(threads, delay, log)
    return AdaptiveSession(make, 2)


def test_keeps_the_faster_variant_and_compares_again_later(monkeypatch):
    monkeypatch.setattr(adaptive, "EXPLOIT", 6)
    delay, log, made = {2: 0.02, 1: 0.001}, [], []
    session = adaptive_session(delay, log, made)
    assert made == [2]
    calls = 2 + 2 * adaptive.EXPLORE + 1          # two calls, then both measured (a first run is untimed)
    for _ in range(calls):
        session.run(None, {})
    assert made == [2, 1]                        # the one-thread session only from the third call
    assert session.threads == 1
    for _ in range(6):
        assert session.run(None, {}) == [1]
    delay[1] = 0.05                              # the machine changed: all cores win the next comparison
    for _ in range(2 * adaptive.EXPLORE):
        session.run(None, {})
    assert session.threads == 2
    # comparison runs of the variant not in use shrink its arena afterwards (a run option)
    assert any(threads == 1 and options for threads, options in log)


def test_an_early_choice_is_revisited_soon(monkeypatch):
    """The first choice holds FIRST_EXPLOIT calls, each later one twice as many, up to EXPLOIT: a
    choice made while a burst of other work ran (a neighbour, another library's threads) does not
    stick for EXPLOIT calls."""
    monkeypatch.setattr(adaptive, "FIRST_EXPLOIT", 2)
    monkeypatch.setattr(adaptive, "EXPLOIT", 6)
    delay, log, made = {2: 0.0, 1: 0.0}, [], []
    session = adaptive_session(delay, log, made)
    for _ in range(2 + 2 * adaptive.EXPLORE + 1):   # two calls, a first (untimed) run, both measured
        session.run(None, {})
    holds = []
    for _ in range(3):
        choice, held = session.threads, 0            # asking for it makes the choice
        while session._left > 0:                     # the calls the choice holds
            assert session.run(None, {}) == [choice]
            held += 1
        holds.append(held)
        for _ in range(2 * adaptive.EXPLORE):        # the next comparison
            session.run(None, {})
    assert holds == [2, 4, 6]


def test_io_binding_runs_on_the_session_it_was_made_for():
    delay, log, made = {2: 0.0, 1: 0.0}, [], []
    session = adaptive_session(delay, log, made)
    for _ in range(12):
        binding, other = session.io_binding(), session.io_binding()   # as from two threads
        session.run_with_iobinding(other)        # FakeSession asserts the binding is its own
        session.run_with_iobinding(binding)
    assert {threads for threads, _ in log} == {1, 2}
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


def test_models_over_the_size_limits_keep_one_session(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert not isinstance(_session_kinds(monkeypatch, ADAPT_MAX_BYTES=10), AdaptiveSession)
    assert not isinstance(_session_kinds(monkeypatch, ADAPT_MAX_NODES=1), AdaptiveSession)
