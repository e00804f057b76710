"""The cyclic collector is paused during a build and restored after it, however it ends."""
import gc

import numpy as np
import pytest

import gcompile as gc_
import gcompile.functions as F
from gcompile.collector import collector_paused


def test_paused_inside_and_restored_after_return_and_raise():
    seen = []

    @collector_paused
    def build(fail):
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("boom")
        return "built"

    assert gc.isenabled()
    assert build(False) == "built"
    with pytest.raises(ValueError, match="boom"):
        build(True)
    assert seen == [False, False] and gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled():
    gc.disable()
    try:
        collector_paused(lambda: None)()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_compile_runs_with_the_collector_paused_and_leaves_it_running():
    states = []

    def fn(x):
        states.append(gc.isenabled())      # runs while tracing
        return F.sum(F.tanh(x))

    cf = gc_.compile(fn, np.ones(3, np.float32), provider="cpu")
    assert states == [False] and gc.isenabled()
    assert np.isclose(cf(np.zeros(3, np.float32)), 0.0)
