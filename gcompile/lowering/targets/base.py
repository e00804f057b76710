"""The registry of targets and their strategies (see lowering/targets/__init__.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Strategy:
    """A lowering of `op` for one target: `lower(ctx, names, node)` as an op's plain `lower` rule,
    applied where `guard(ctx, node)` holds. `thresholds` names the module constants the guard
    compares sizes with (the strategy tests cross each)."""
    target: str
    op: str
    name: str
    guard: Callable[[Any, Any], bool]
    lower: Callable[..., Any]
    thresholds: tuple[str, ...] = ()


@dataclass
class Target:
    """A runtime gcompile lowers for: its name, what it promises, what its ONNX interpreter takes of
    the spec's constructs where runtimes differ (`negative_pads`: a Pad that crops with negative
    amounts, which onnx's ReferenceEvaluator 1.23 refuses; `grouped_conv_transpose`: a ConvTranspose
    with groups of more than one channel, which that evaluator computes wrongly; `cumprod`: the
    CumProd op of opset 26, which OpenVINO 2026.4 cannot convert), and its strategies by op (tried
    in registration order)."""
    name: str
    summary: str
    negative_pads: bool = True
    grouped_conv_transpose: bool = True
    cumprod: bool = True
    strategies: dict[str, list[Strategy]] = field(default_factory=dict)

    def strategy_for(self, ctx: Any, node: Any) -> Strategy | None:
        """The first strategy for node's op whose guard holds, None for the plain form."""
        for candidate in self.strategies.get(node.op, ()):
            if candidate.guard(ctx, node):
                return candidate
        return None


TARGETS: dict[str, Target] = {
    "portable": Target("portable", "the plain ai.onnx form of every op, avoiding constructs other runtimes "
                                   "refuse: runs on any ONNX runtime (the default for saved models)",
                       negative_pads=False, grouped_conv_transpose=False,
                       cumprod=False),
    "ort-cpu": Target("ort-cpu", "ONNX Runtime's CPU provider: plain forms, and where its kernels run them "
                                 "slowly, forms tuned to them (still plain ai.onnx, loadable anywhere)"),
    "cuda": Target("cuda", "ONNX Runtime's CUDA provider: the plain forms, which cuDNN runs directly"),
}
DEFAULT_TARGET = "portable"


def strategy(target: str, op: str, name: str, guard: Callable[[Any, Any], bool],
             thresholds: tuple[str, ...] = ()) -> Callable:
    """Register the decorated function as `target`'s lowering `name` of `op` where `guard` holds."""
    def register(lower: Callable) -> Callable:
        found = TARGETS[target].strategies.setdefault(op, [])
        if any(s.name == name for s in found):
            raise ValueError(f"target {target} already has a strategy {name!r} for {op}")
        found.append(Strategy(target, op, name, guard, lower, thresholds))
        return lower
    return register
