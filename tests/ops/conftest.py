"""Fails the run when a differentiable op in the registry has no gradient check, or none at a
symbolic size (ONNX Runtime's model of it with one axis symbolic) unless NEEDS_STATIC says why,
or when a lowering (a checked op's plain form, any target's strategy) ran in no gradient check.

Only judged when every test file under tests/ops was collected and no -k/-m filter was
given, so running one file or one test stays quiet.
"""
from pathlib import Path

import pytest

from gcompile.ir.registry import REGISTRY
from gcompile.lowering.targets import TARGETS

from ..opcheck import GRAD_CHECKED_OPS, LOWERINGS_CHECKED, SYMBOLIC_CHECKED_OPS

_state = {"complete": False}

# Differentiable ops no function of a symbolic size can reach, and why.
NEEDS_STATIC: dict[str, str] = {}

# Ops whose lowering no gradient check reaches, and why: an input is no node that lowers; the
# passes replace every identity; dropout draws random numbers, which check_grad cannot compare
# between ONNX Runtime and the reference evaluator (tests/ops/test_nn.py checks its model's
# statistics and its gradient's mask on ONNX Runtime instead).
NO_LOWERING = {"input", "identity", "dropout"}


def pytest_collection_modifyitems(session, config, items):
    files = {Path(str(item.fspath)).resolve() for item in items}
    wanted = {p.resolve() for p in Path(__file__).parent.glob("test_*.py")}
    filtered = config.getoption("keyword") or config.getoption("markexpr") or any("::" in a for a in config.args)
    _state["complete"] = wanted <= files and not filtered


def pytest_sessionfinish(session, exitstatus):
    if not _state["complete"] or exitstatus != 0:
        return
    missing = sorted(name for name, op in REGISTRY.items()
                     if op.differentiable and op.name not in GRAD_CHECKED_OPS)
    if missing:
        print(f"\nops with no gradient check: {', '.join(missing)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    static_only = sorted(name for name in GRAD_CHECKED_OPS - SYMBOLIC_CHECKED_OPS
                         if name in REGISTRY and REGISTRY[name].differentiable and name not in NEEDS_STATIC)
    if static_only:
        print(f"\nops gradient-checked at static sizes only: {', '.join(static_only)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    lowerings = {(op, "plain") for op in GRAD_CHECKED_OPS if REGISTRY.get(op) and REGISTRY[op].differentiable} | \
        {(s.op, s.name) for target in TARGETS.values() for found in target.strategies.values() for s in found}
    unreached = sorted(f"{op} ({name})" for op, name in lowerings - set(LOWERINGS_CHECKED) if op not in NO_LOWERING)
    if unreached:
        print(f"\nlowerings no gradient check ran on ONNX Runtime: {', '.join(unreached)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
