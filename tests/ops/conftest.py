"""Fails the run when a differentiable op in the registry has no gradient check.

Only judged when every test under tests/ops ran (no -k / node-id selection), so a
partial run stays quiet.
"""
import pytest

from gcompile.ops.registry import REGISTRY

from ..opcheck import GRAD_CHECKED_OPS

_state = {"selected": 0, "collected_all": True}


def pytest_collection_modifyitems(session, config, items):
    _state["collected_all"] = not (config.getoption("keyword") or config.getoption("markexpr")
                                   or any("::" in a for a in config.args))


def pytest_sessionfinish(session, exitstatus):
    if not _state["collected_all"] or exitstatus != 0:
        return
    missing = sorted(name for name, op in REGISTRY.items()
                     if op.differentiable and op.name not in GRAD_CHECKED_OPS)
    if missing:
        print(f"\nops with no gradient check: {', '.join(missing)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
