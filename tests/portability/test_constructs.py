"""Every artifact of the corpus, built for the portable target, passes onnx's checker (with its shape
inference), and none holds a construct that a runtime refuses (constructs.py): checked on the ONNX
files themselves, so it holds where those runtimes are not installed, and a failure names the
node and source line that brought the construct back. Constructs still emitted are listed in
known.py, as runtime failures are."""
import onnx
import pytest

from .constructs import CONSTRUCTS
from .harness import CASES
from .known import CONSTRUCT_FAILURES, expected


@pytest.mark.parametrize("case", CASES)
def test_portable_artifacts_pass_the_onnx_checker(case, cases):
    onnx.checker.check_model(cases[case].model, full_check=True)


@pytest.mark.parametrize("construct", CONSTRUCTS, ids=lambda c: c.name)
@pytest.mark.parametrize("case", CASES)
def test_portable_artifacts_avoid(construct, case, cases):
    found = construct.find(cases[case].model)
    known = expected(CONSTRUCT_FAILURES, construct.name, case)
    if known is None:
        assert not found, f"{case} has {construct.name} ({construct.runtime}: {construct.why}) at:\n" + "\n".join(found)
    elif not found:
        pytest.fail(f"{case} no longer has {construct.name}: remove it from known.CONSTRUCT_FAILURES and "
                    "docs/targets.md")
    else:
        assert all(known.match in where for where in found), found
        pytest.xfail(known.why)
