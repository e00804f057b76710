"""200 random programs (tests/fuzz/programs.py), each checked forward on onnxruntime against
NumPy, with its gradient and double gradient on onnxruntime against the float64 reference
evaluator, and with the numeric gradient checks (tests/fuzz/checks.py).

Deterministic (derandomize=True); a failure shrinks to a small program and the message shows
its gcompile and NumPy source. tools/fuzz.py runs many more.
"""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .checks import run_program
from .programs import HypothesisDraw, generate


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.integers(0, 2 ** 16))
def test_random_programs(data, seed):
    program = generate(HypothesisDraw(data), min_ops=5, max_ops=40)
    result = run_program(program, seed)
    if result.failures:
        report = "\n\n".join(f"[{f.check}] {f.message}" for f in result.failures)
        raise AssertionError(f"{report}\n\n{program.source('gc')}\n{program.source('np')}\ninputs: {program.inputs}")


def _programs_of(generator, label: str, seeds: int):
    """Programs of one generator's `label` steps over `seeds` seeds, each checked like the random
    ones; yields each step's gcompile source."""
    from .programs import Gen, RandomDraw
    for seed in range(seeds):
        g = Gen(RandomDraw(seed))
        x = g.new_input(g.random_shape())
        step = next((s for s in g.program.steps if s.op.startswith(label)), None) \
            if generator(g, x) is not None else None
        if step is None:
            continue
        program = g.program
        program.outputs = [program.steps[-1].name]
        result = run_program(program.pruned(), seed)
        report = "\n".join(f"[{f.check}] {f.message}" for f in result.failures)
        assert not result.failures, report + program.source("gc")
        assert label in result.ops or result.skipped
        yield step.gc


def test_scan_programs():
    """gen_scan's loops (every body, forward and reversed, over a static and a symbolic axis,
    giving the final carry or the stacked outputs) through every check, up to third order."""
    from .programs import gen_scan
    seen = {(src.split("lambda c, t: (")[1].split(",")[0], "reverse=True" in src, src[-3:])
            for src in _programs_of(gen_scan, "scan", 40)}
    assert len(seen) >= 8, seen    # bodies x directions x outputs drawn


def test_while_programs():
    """gen_while's loops (int64 carries, a trip count drawn by the data) times a float value,
    through every check."""
    from .programs import gen_while
    assert len(list(_programs_of(gen_while, "while", 20))) >= 10


def test_resize_programs():
    """gen_spatial's bilinear resampling to a drawn size (the resize op), with and without
    align_corners, through every check up to third order."""
    from .programs import gen_spatial
    seen = {"align_corners=True" in src for src in _programs_of(gen_spatial, "resize", 120)}
    assert seen == {False, True}, seen
