"""Fails the run when a differentiable op in the registry has no gradient check, or none at a
symbolic size (ONNX Runtime's model of it with one axis symbolic) unless NEEDS_STATIC says why,
or when a lowering (a checked op's plain form, any target's strategy) ran in no gradient check.

Only judged when every test file under tests/ops was collected and run and no -k/-m filter was
given, so running one file or one test stays quiet. Under pytest-xdist each worker runs part of
the tests: it hands what its checks recorded (tests/opcheck.py) to the controller, which judges
their union (tests/conftest.py calls these functions from its hooks).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import gcompile.functions  # noqa: F401  (registers every op: an xdist controller imports no test module)
from gcompile.ir.registry import REGISTRY
from gcompile.lowering.targets import TARGETS

from .opcheck import GRAD_CHECKED_OPS, LOWERINGS_CHECKED, SYMBOLIC_CHECKED_OPS

OPS = Path(__file__).resolve().parent / "ops"

# Differentiable ops no function of a symbolic size can reach, and why.
NEEDS_STATIC: dict[str, str] = {}

# Ops whose lowering no gradient check reaches, and why: an input is no node that lowers; the
# passes replace every identity; dropout draws random numbers, which check_grad cannot compare
# between ONNX Runtime and the reference evaluator (tests/ops/test_nn.py checks its model's
# statistics and its gradient's mask on ONNX Runtime instead).
NO_LOWERING = {"input", "identity", "dropout"}

_state: dict = {"complete": False, "ran": set()}


def collected(config, items) -> None:
    """Note whether this run holds every test file of tests/ops, unfiltered."""
    files = {Path(str(item.fspath)).resolve() for item in items}
    filtered = config.getoption("keyword") or config.getoption("markexpr") or any("::" in a for a in config.args)
    _state["complete"] = _wanted() <= files and not filtered


def ran(item) -> None:
    """Note the file of a test this process runs."""
    _state["ran"].add(Path(str(item.fspath)).resolve())


def records() -> dict:
    """What this process recorded, as plain data (an xdist worker's output to its controller)."""
    return {"complete": _state["complete"], "ran": sorted(str(p) for p in _state["ran"]),
            "grad": sorted(GRAD_CHECKED_OPS), "symbolic": sorted(SYMBOLIC_CHECKED_OPS),
            "lowerings": [[op, name, n] for (op, name), n in LOWERINGS_CHECKED.items()]}


def merge(worker: dict | None) -> None:
    """Add an xdist worker's records to this process's."""
    if not worker:
        return
    _state["complete"] = _state["complete"] or worker["complete"]
    _state["ran"].update(Path(p) for p in worker["ran"])
    GRAD_CHECKED_OPS.update(worker["grad"])
    SYMBOLIC_CHECKED_OPS.update(worker["symbolic"])
    for op, name, n in worker["lowerings"]:
        LOWERINGS_CHECKED[(op, name)] += n


def _wanted() -> set[Path]:
    return {p.resolve() for p in OPS.glob("test_*.py")}


def judge(session, exitstatus) -> None:
    """Fail the session, naming them, on ops or lowerings no gradient check reached."""
    if not _state["complete"] or not _wanted() <= _state["ran"] or exitstatus != 0:
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
