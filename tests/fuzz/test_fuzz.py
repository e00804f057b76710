"""200 random programs (tests/fuzz/programs.py), each checked forward on onnxruntime against
NumPy, with its gradient and double gradient on onnxruntime against the float64 reference
evaluator, and with the numeric gradient checks (tests/fuzz/checks.py); then programs of single
generators over a few seeds each: loops (gc.scan, gc.while_loop), conds, strided phases and pooling
among them.

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
    program = generate(HypothesisDraw(data), min_ops=5, max_ops=40, control_flow=False)
    result = run_program(program, seed)
    if result.failures:
        report = "\n\n".join(f"[{f.check}] {f.message}" for f in result.failures)
        raise AssertionError(f"{report}\n\n{program.source('gc')}\n{program.source('np')}\ninputs: {program.inputs}")


def _programs_of(generator, label: str, seeds: int):
    """Programs of one generator's `label` steps over `seeds` seeds, each checked like the random
    ones; yields each step's gcompile source and the program's Result (tests/fuzz/checks.py)."""
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
        yield step.gc, result


def test_scan_programs():
    """gen_scan's loops (every body, forward and reversed, over a static and a symbolic axis,
    giving the final carry or the stacked outputs) through every check, up to third order."""
    from .programs import gen_scan
    seen = {(src.split("lambda c, t: (")[1].split(",")[0], "reverse=True" in src, src[-3:])
            for src, _ in _programs_of(gen_scan, "scan", 40)}
    assert len(seen) >= 8, seen    # bodies x directions x outputs drawn


def test_while_programs():
    """gen_while's loops (int64 carries, a trip count drawn by the data) times a float value,
    through every check."""
    from .programs import gen_while
    assert len(list(_programs_of(gen_while, "while", 20))) >= 10


def test_loop_programs():
    """gen_loop's differentiable while loops over float carries (counted, contracting and budgeted
    forms, bodies from the op tables reading closed-over values, some through a gc.cond, some with
    checkpoint_every) through every check up to third order, the gradient checks only where the
    points of the central difference take as many steps as x: zero steps and several."""
    from .programs import gen_loop
    forms, steps, checked = set(), set(), 0
    for src, result in _programs_of(gen_loop, "while", 8):
        forms.add("np.int64(0)" if "np.int64(0)" in src else "lambda h" if "lambda h" in src else "budget")
        forms |= {k for k in ("checkpoint_every", "gc.cond") if k in src}
        steps.add(min(result.decisions[-1], 2))
        checked += "triple_grad" not in result.skipped
    assert forms == {"np.int64(0)", "lambda h", "budget", "checkpoint_every", "gc.cond"}, forms
    assert {0, 2} <= steps and checked >= 6, (steps, checked)      # no step, and several


def test_cond_programs():
    """gen_cond's gc.cond on a predicate of the data, through every check, on either branch."""
    from .programs import gen_cond
    branches = {result.decisions[-1] for _, result in _programs_of(gen_cond, "cond", 4) if result.decisions}
    assert branches == {False, True}, branches


def test_resize_programs():
    """gen_spatial's bilinear resampling to a drawn size (the resize op), with and without
    align_corners, through every check up to third order."""
    from .programs import gen_spatial
    seen = {"align_corners=True" in src for src, _ in _programs_of(gen_spatial, "resize", 120)}
    assert seen == {False, True}, seen


def test_phase_programs():
    """gen_phases's strided phases joined again (interleaved halves, Swin's patch merging as one
    two-axis slice or as chained one-axis slices, a phase taken twice) and split pieces joined,
    through every check: their gradients are the sums of slice_scatters simplify rewrites."""
    from .programs import gen_phases
    forms = set()
    for src, _ in _programs_of(gen_phases, "slice", 40):
        pieces = [p.rstrip("]") for p in src[src.index("[") + 1:src.rindex("]")].split("], ")]
        forms.add("split" if "split" in src else "chained" if "][" in src else
                  "two axes" if any(p.count("::") == 2 for p in pieces) else "one axis")
        if len(set(pieces)) < len(pieces):
            forms.add("a phase twice")
    assert forms == {"split", "chained", "two axes", "one axis", "a phase twice"}, forms


def test_pooling_programs():
    """gen_conv's max pooling of x, of relu(x) (simplify moves relu's mask before the pool's
    scatter) and of x padded with zeros first (ONNX Runtime's Pad_Fusion once merged such a Pad
    into the pool, whose pads count as -inf), through every check."""
    from .programs import gen_conv
    forms = {"relu" if "F.relu(" in src else "zero-padded" if "F.pad(" in src else "plain"
             for src, _ in _programs_of(gen_conv, "max_pool", 150)}
    assert forms == {"plain", "relu", "zero-padded"}, forms


def test_a_difference_across_a_change_of_trip_count_is_not_compared():
    """same_path compares the loop's decisions at the central difference's points x ± εr with
    those at x: a step count that one of them changes rules the gradient checks out there."""
    import numpy as np

    from . import npsem as N
    from .checks import _decisions, same_path

    def reference(x, limit):
        return (N.while_loop(lambda c: c[1] < 3 and N.less(np.sum(c[0]), limit), lambda c: (c[0] + 1.0, c[1] + 1),
                             (x, 0))[0],)

    x = np.array([0.25, -0.5], np.float32)
    for limit, same in ((float(x.sum()) + 1e-7, False), (float(x.sum()) + 0.5, True)):
        arrays = [x, np.array(limit)]
        decisions = _decisions(reference, [a.astype(np.float64) for a in arrays])
        assert decisions == [1] and same_path(reference, arrays, decisions) == same
