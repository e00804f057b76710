"""The corpora (the main one, and the dtypes artifact), each built once per test session, and each
runtime's outcomes on them, run once when first asked."""
import os

import pytest

from .harness import DTYPES_CORPUS, build_cases

REQUIRE = "GCOMPILE_REQUIRE_PORTABILITY"


@pytest.fixture(scope="session")
def cases():
    return {case.name: case for case in build_cases()}


@pytest.fixture(scope="session")
def dtype_cases():
    return {case.name: case for case in build_cases([DTYPES_CORPUS])}


@pytest.fixture(scope="session")
def outcomes(cases, tmp_path_factory):
    return runner(cases, tmp_path_factory)


@pytest.fixture(scope="session")
def dtype_outcomes(dtype_cases, tmp_path_factory):
    return runner(dtype_cases, tmp_path_factory)


def runner(cases: dict, tmp_path_factory):
    """outcomes(runtime) -> {case: outputs by name, or the runtime's error}. A runtime that is not
    installed skips the test with what is missing, or fails it where GCOMPILE_REQUIRE_PORTABILITY
    is set; a runner that breaks (not one case: the whole run) fails every test of its runtime."""
    done: dict = {}

    def of(runtime):
        if runtime.name not in done:
            reason = runtime.missing()
            if reason is not None:
                done[runtime.name] = ("missing", reason)
            else:
                try:
                    done[runtime.name] = ("ran", runtime.run_all(list(cases.values()),
                                                                 str(tmp_path_factory.mktemp(runtime.name))))
                except Exception as err:   # reported by every test of this runtime
                    done[runtime.name] = ("broken", f"{type(err).__name__}: {err}")
        state, value = done[runtime.name]
        if state == "missing":
            if os.environ.get(REQUIRE):
                pytest.fail(f"{runtime.name} is required ({REQUIRE} is set) but {value}")
            pytest.skip(f"{runtime.name}: {value}; set {REQUIRE}=1 to make this a failure")
        if state == "broken":
            pytest.fail(f"{runtime.name} could not run the corpus: {value}")
        return value
    return of
