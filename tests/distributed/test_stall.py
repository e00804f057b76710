"""How the distributed trainer tells a stuck worker from a slow one (gcompile/distributed/stall.py):
the rule on made-up timings; tests/distributed/test_trainer.py hangs a real worker."""
from gcompile.distributed.stall import STALL_FACTOR, durations, stalled

PHASES = ("gradients", "reduce", "apply")


def test_a_worker_far_behind_its_peers_is_stuck_once_past_the_floor():
    done = {("gradients", 0): 0.2, ("gradients", 1): 0.3}          # both took ~0.2 s: reduce begins at 0.3
    done[("reduce", 0)] = 0.4                                         # worker 0 reduced in 0.1 s, worker 1 not yet
    assert stalled(PHASES, 2, 0.0, done, 0.3 + 1.9, stall=2.0, timeout=300, previous={}) is None
    phase, hung, ran, limit = stalled(PHASES, 2, 0.0, done, 0.3 + 2.1, stall=2.0, timeout=300, previous={})
    assert (phase, hung, limit) == ("reduce", {1}, 2.0) and abs(ran - 2.1) < 1e-9


def test_a_slow_phase_gets_ten_times_what_the_peers_took():
    done = {("gradients", 0): 5.0}                                    # worker 0 took 5 s: worker 1 gets 50 s
    assert stalled(PHASES, 2, 0.0, done, 49.0, stall=2.0, timeout=300, previous={}) is None
    assert stalled(PHASES, 2, 0.0, done, 51.0, stall=2.0, timeout=300, previous={})[1] == {1}
    assert STALL_FACTOR == 10


def test_without_peers_the_last_step_is_the_reference_and_else_the_timeout():
    assert stalled(PHASES, 1, 0.0, {}, 100.0, stall=2.0, timeout=300, previous={}) is None
    assert stalled(PHASES, 1, 0.0, {}, 301.0, stall=2.0, timeout=300, previous={})[:2] == ("gradients", {0})
    assert stalled(PHASES, 1, 0.0, {}, 2.5, stall=2.0, timeout=300, previous={"gradients": 0.1})[1] == {0}
    every = {("gradients", 0): 1.0, ("gradients", 1): 1.0}            # all stuck in reduce: the last step's reduce
    assert stalled(PHASES, 2, 0.0, every, 1.0 + 4.0, stall=2.0, timeout=300, previous={"reduce": 0.3})[1] == {0, 1}
    assert stalled(PHASES, 2, 0.0, every, 1.0 + 2.9, stall=2.0, timeout=300, previous={"reduce": 0.3}) is None


def test_the_timeout_bounds_the_whole_step_and_durations_are_per_phase():
    # worker 0 took 100 s, so worker 1 would get 1,000 s, but no step takes more than the timeout
    assert stalled(PHASES, 2, 0.0, {("gradients", 0): 100.0}, 299.0, stall=2.0, timeout=300, previous={}) is None
    assert stalled(PHASES, 2, 0.0, {("gradients", 0): 100.0}, 301.0, stall=2.0, timeout=300, previous={})[1] == {1}
    done = {("gradients", 0): 1.0, ("gradients", 1): 250.0}
    done.update({("reduce", 0): 251.0, ("reduce", 1): 252.0, ("apply", 0): 253.0, ("apply", 1): 253.5})
    assert durations(PHASES, 2, 0.0, done) == {"gradients": 250.0, "reduce": 2.0, "apply": 1.5}
