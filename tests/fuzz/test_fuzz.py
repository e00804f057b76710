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
