"""Targets: which runtime a model is lowered for, and the strategies tuned to it.

An op's `lower` rule (in its `defop`) emits the op's plain form: the standard `ai.onnx` nodes
the ONNX specification defines for it, which every runtime implements directly. A *strategy*
is a second lowering of one op for one target, tuned to how that runtime's kernels behave
(ONNX Runtime's CPU kernels split work per thread in ways that make some plain forms slow),
with a *guard* saying when it applies (sizes, dtypes, runtime version). Lowering a node asks
the target for the first of its strategies for the node's op whose guard holds, and falls
back to the plain form.

- `portable`: plain forms only, written to avoid what other runtimes refuse (docs/targets.md):
  the default of every artifact that leaves the machine (`gcompile build`, `.save`).
- `ort-cpu`: ONNX Runtime's CPU provider (`lowering/targets/ort_cpu/`); in-process compiles on
  the CPU use it.
- `cuda`: ONNX Runtime's CUDA provider; cuDNN has direct kernels for the plain forms, so it
  starts from them.

Every strategy is tested against the plain form, on both sides of each number its guard uses,
by tests/lowering/test_strategies.py; the measurements that justify it are in
docs/strategies.md, not in its docstring.
"""
from __future__ import annotations

from ...errors import UnsupportedError
from . import ort_cpu  # noqa: F401  (registers its strategies)
from .base import DEFAULT_TARGET, TARGETS, Strategy, Target, strategy


def get_target(name: str) -> Target:
    """The target called `name`."""
    if name not in TARGETS:
        raise UnsupportedError(f"unknown target {name!r}: choose one of {', '.join(TARGETS)}")
    return TARGETS[name]


def target_for_provider(provider: str) -> str:
    """The target of an in-process compile on `provider` ("cpu" or "cuda")."""
    return "cuda" if provider == "cuda" else "ort-cpu"


__all__ = ["DEFAULT_TARGET", "Strategy", "TARGETS", "Target", "get_target", "strategy", "target_for_provider"]
