"""The op registry: one OpDef per op, holding everything gcompile knows about it.

An op's shape/dtype rule, numpy reference, ONNX lowering and VJP rule sit side by side
in one `defop(...)` call, so adding an op is one self-contained change.

Rule signatures (one per rule kind, used by every op):
  infer(types: list[TensorType], **attrs) -> list[TensorType]      raise ShapeError on misuse
  reference(*arrays, **attrs) -> array | tuple[array, ...]          numpy, float64-exact
  lower(ctx, names: list[str], node) -> str | list[str]             emit ai.onnx nodes via ctx
  vjp(grads, inputs, outputs, **attrs) -> list[Tensor | None]       gcompile ops only
     `grads` has one entry per output, None where that output has no cotangent;
     return one entry per input, None where the input gets no gradient.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import UnsupportedError


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: Callable
    reference: Callable
    lower: Callable
    vjp: Callable | None = None
    # "nondiff": declared to have no gradient (comparisons, floor, ...): zeros, never an error.
    # "elementwise", "cheap": used by passes (recompute, simplification).
    # "random": never merged by CSE nor folded.
    traits: frozenset = field(default_factory=frozenset)
    n_outputs: int = 1

    @property
    def differentiable(self) -> bool:
        return "nondiff" not in self.traits


REGISTRY: dict[str, OpDef] = {}


def defop(name: str, *, infer, reference, lower, vjp=None, traits=(), n_outputs=1) -> OpDef:
    if name in REGISTRY:
        raise ValueError(f"op {name!r} registered twice")
    if vjp is None and "nondiff" not in traits:
        raise ValueError(f"op {name!r} needs a vjp rule or the 'nondiff' trait")
    op = OpDef(name, infer, reference, lower, vjp, frozenset(traits), n_outputs)
    REGISTRY[name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnsupportedError(f"unknown op {name!r}") from None
