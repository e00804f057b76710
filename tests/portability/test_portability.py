"""Every artifact of the corpus (tests/portability/corpus.py) and of examples/, built as `gcompile
build` builds it (the portable target), runs on every runtime of runtimes.py with the outputs of
Python's ONNX Runtime (CPU) on the same file and the same seeded inputs, within float32 rounding
(harness.problems); the reference's own outputs have the model's declared types.

A runtime that is not installed makes its tests skip with what is missing, or fail where
GCOMPILE_REQUIRE_PORTABILITY is set (conftest.py; CI sets it, and .ci/run installs them all).
Failures whose cause is known are listed in known.py: such a test must fail with that message
(it is then reported as an expected failure) and fails once it passes, so that list and
docs/targets.md stay true.
"""
import pytest

from .harness import CASES, problems
from .known import RUNTIME_FAILURES, judge
from .runtimes import RUNTIMES


def test_the_corpus_is_what_is_listed(cases):
    assert list(cases) == CASES, "an artifact was added or removed: list it in CASES (and in docs/targets.md)"


@pytest.mark.parametrize("runtime", RUNTIMES, ids=lambda r: r.name)
@pytest.mark.parametrize("case", CASES)
def test_runs_as_onnxruntime_does(case, runtime, cases, outcomes):
    outcome = outcomes(runtime)[case]
    judge(RUNTIME_FAILURES, runtime.name, case,
          [outcome] if isinstance(outcome, str) else problems(cases[case], outcome))
