"""The new dtypes' artifact (tests/portability/dtypes_corpus.py), built as `gcompile build` builds it,
on every runtime of runtimes.py: Python's ONNX Runtime gives the reference outputs (checked against the
model's declared types), and onnx's ReferenceEvaluator, onnxruntime-node, onnxruntime-web and
OpenVINO must agree with them (integers exactly), but for the failures known.py lists. It is kept
out of the main corpus's matrix (docs/targets.md) because of OpenVINO's known differences there.
Runtimes that are not installed skip, or fail where GCOMPILE_REQUIRE_PORTABILITY is set (conftest.py)."""
import pytest

from .harness import problems
from .known import RUNTIME_FAILURES, judge
from .runtimes import RUNTIMES


@pytest.mark.parametrize("runtime", RUNTIMES, ids=lambda r: r.name)
def test_the_new_dtypes_run_as_onnxruntime_does(runtime, dtype_cases, dtype_outcomes):
    assert list(dtype_cases) == ["dtypes_and_quantization"]
    for name, case in dtype_cases.items():
        outcome = dtype_outcomes(runtime)[name]
        judge(RUNTIME_FAILURES, runtime.name, name, [outcome] if isinstance(outcome, str) else problems(case, outcome))
