"""The new dtypes' artifact (tests/portability/dtypes_corpus.py), built as `gcompile build` builds it,
on the runtimes it has been run on: Python's ONNX Runtime gives the reference outputs (checked against
the model's declared types) and onnx's ReferenceEvaluator, numpy's exact integers, must agree with
them. onnxruntime-node, onnxruntime-web and OpenVINO have not run it yet (docs/targets.md, section 3):
it is kept out of the main corpus until they have."""
import pytest

from .harness import DTYPES_CORPUS, build_cases, problems
from .runtimes import RUNTIMES

CHECKED = ("onnxruntime-python", "onnx-reference")


@pytest.fixture(scope="module")
def dtype_cases():
    return build_cases([DTYPES_CORPUS])


@pytest.mark.parametrize("runtime", [r for r in RUNTIMES if r.name in CHECKED], ids=lambda r: r.name)
def test_the_new_dtypes_run_as_onnxruntime_does(runtime, dtype_cases, tmp_path):
    assert [c.name for c in dtype_cases] == ["dtypes_and_quantization"]
    outcomes = runtime.run_all(dtype_cases, str(tmp_path))
    for case in dtype_cases:
        outcome = outcomes[case.name]
        found = [outcome] if isinstance(outcome, str) else problems(case, outcome)
        assert not found, f"{case.name} on {runtime.name}:\n" + "\n".join(found)
