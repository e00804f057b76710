"""The op registry: one OpDef per op, holding everything gcompile knows about it.

An op's shape/dtype rule, numpy reference, ONNX lowering and VJP rule sit side by side
in one `defop(...)` call, so adding an op is one self-contained change. The four rule
kinds have one signature each, written out as the Protocols below.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import UnsupportedError
from .graph import Graph, Node, TensorType, ValueRef, bodies

Rule = Callable[..., Any]   # a rule as defop receives it: its keyword arguments are the attributes it names


class InferRule(Protocol):
    """The output types from the operand types and the node's attributes; raises ShapeError on misuse."""
    def __call__(self, types: list[TensorType], /, **attrs: Any) -> list[TensorType]: ...


class ReferenceRule(Protocol):
    """The numpy reference, float64-exact: one array per operand in, one array (a tuple of them for
    several outputs) out. The evaluator (ir/evaluate.py) and constant folding run it."""
    def __call__(self, *arrays: np.ndarray, **attrs: Any) -> Any: ...


class LowerRule(Protocol):
    """Emits the ai.onnx nodes computing `node` through `ctx` (a lowering.context.LowerContext) from
    the ONNX value names of its operands; returns the name of its output (a list for several)."""
    def __call__(self, ctx: Any, names: list[str], node: Node, /) -> str | list[str]: ...


class Traced(Protocol):
    """A value being traced, as VJP rules receive and return them: the tracer's Tensor
    (frontend/tensor.py), which imports this registry, so the rule types name only what the
    registry itself relies on."""
    @property
    def shape(self) -> tuple: ...
    @property
    def dtype(self) -> np.dtype: ...


class VjpRule(Protocol):
    """Reverse mode, written with gcompile ops (so it differentiates again). `grads` has one entry
    per output, None where that output has no cotangent; the result has one entry per input, None
    where the input gets no gradient, with the input's dtype and its shape or one it broadcasts to:
    gc.grad sums the broadcast axes away (so a broadcasting op's rule returns its cotangents at the
    output's shape)."""
    def __call__(self, grads: Sequence[Traced | None], inputs: Sequence[Traced], outputs: Sequence[Traced], /,
                 **attrs: Any) -> Sequence[Traced | None]: ...


class Trait(enum.Enum):
    """A property an op declares in `defop(traits=...)`; each is read where said, so a new op gets
    that treatment by declaring it.

    NONDIFF            no gradient: gc.grad treats the output as a constant (zeros, never an error);
                       comparisons, rounding, fills, stop_gradient. Read by gradients/engine.py (via
                       OpDef.differentiable); an op without a vjp rule must declare it.
    RANDOM             draws random numbers when run: two nodes never hold the same value, and a copy
                       would draw others. Never merged (passes/cse.py), folded (passes/fold.py) nor
                       recomputed (passes/recompute.py, gradients/loops.py); a loop whose body holds
                       such an op counts as random too (is_random). A keyed draw (ops/random.py) is a
                       pure function of its key, not RANDOM.
    CHEAP              cheaper to compute again than to keep alive for the backward (elementwise math,
                       views, fills): passes/recompute.py with cheap=True copies it into the backward.
    BROADCASTS         the ONNX lowering broadcasts every operand to the output's shape (numpy rules),
                       so an operand expanded only to be broadcast can be read unexpanded: passes/simplify.py
                       drops such expands.
    ELEMENT_COPY       every output element is an element of the first operand (moved, repeated, or
                       converted by a cast, which keeps 0 and 1): a value that is 0 or 1 everywhere stays
                       so. passes/simplify.py looks through these for the neutral constants of x+0, x*1.
    NOOP_IF_SAME_TYPE  with a single operand of the output's exact type, the output is that operand (a
                       reshape to the same shape, a cast to the same dtype, a one-term add_n):
                       passes/simplify.py removes such nodes.
    ELEMENTWISE        each output element depends only on the operand elements at its own position, the
                       operands broadcast to the output's shape by numpy's rules (and, for a random op, on
                       that position's own draw); no attribute names an axis or a shape. Unary math,
                       activations, casts, comparisons, the broadcasting arithmetic. gradients/batching.py
                       batches such an op as it is, on operands whose ranks it aligns;
                       tests/ops/test_registry.py checks the promise on every op that declares it.
    """
    NONDIFF = "nondiff"
    RANDOM = "random"
    CHEAP = "cheap"
    BROADCASTS = "broadcasts"
    ELEMENT_COPY = "element_copy"
    NOOP_IF_SAME_TYPE = "noop_if_same_type"
    ELEMENTWISE = "elementwise"


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: InferRule
    reference: ReferenceRule
    lower: LowerRule
    vjp: VjpRule | None = None
    traits: frozenset[Trait] = field(default_factory=frozenset)
    n_outputs: int = 1

    @property
    def differentiable(self) -> bool:
        return Trait.NONDIFF not in self.traits


REGISTRY: dict[str, OpDef] = {}


def defop(name: str, *, infer: Rule, reference: Rule, lower: Rule, vjp: Rule | None = None,
          traits: Iterable[Trait] = (), n_outputs: int = 1) -> OpDef:
    """Register an op. The rules follow InferRule, ReferenceRule, LowerRule and VjpRule, each taking
    the node's attributes as the keyword arguments it names (so no Protocol can check them here)."""
    traits = frozenset(traits)
    if name in REGISTRY:
        raise ValueError(f"op {name!r} registered twice")
    if not all(isinstance(t, Trait) for t in traits):
        raise TypeError(f"op {name!r}: traits must be Trait members, got {sorted(map(str, traits))}")
    if vjp is None and Trait.NONDIFF not in traits:
        raise ValueError(f"op {name!r} needs a vjp rule or the Trait.NONDIFF trait")
    op = OpDef(name, infer, reference, lower, vjp, traits, n_outputs)
    REGISTRY[name] = op
    return op


_SUPPLIED: dict[str, Rule] = {}   # VJP rules supplied from a room above ops/ (supply_vjp)


def supplied_vjp(name: str) -> Rule:
    """The VJP rule of an op defined in ops/ whose rule needs a room ops/ may not import (the scan
    op's VJP differentiates its body with gc.grad): it calls the rule that room passes to
    `supply_vjp` when it is imported, which every gradient computation does first."""
    def vjp(grads, inputs, outputs, **attrs):
        if name not in _SUPPLIED:
            raise AssertionError(f"the VJP rule of {name!r} was never supplied (gcompile.gradients not imported?)")
        return _SUPPLIED[name](grads, inputs, outputs, **attrs)
    return vjp


def supply_vjp(name: str, rule: Rule) -> None:
    if name in _SUPPLIED:
        raise ValueError(f"the VJP rule of {name!r} is supplied twice")
    _SUPPLIED[name] = rule


def has_trait(op_name: str, trait: Trait) -> bool:
    return trait in get_op(op_name).traits


def constant_equal_to(graph: Graph, ref: ValueRef, value: float) -> bool:
    """Whether `ref` is `value` everywhere: a constant or fill, possibly reshaped, broadcast or
    cast (as the ones a gradient seed leaves behind, or the zeros a scatter's gradient adds
    into): Trait.ELEMENT_COPY."""
    node = graph.nodes[ref.node]
    while has_trait(node.op, Trait.ELEMENT_COPY):
        node = graph.nodes[node.inputs[0].node]
    if node.op == "constant":
        arr = node.attrs["value"]
        return arr.size > 0 and bool(np.all(arr == value))
    return node.op == "fill" and node.attrs["value"] == value


def is_random(node: Node) -> bool:
    """Whether running `node` draws random numbers: an op with Trait.RANDOM, or a loop whose body
    holds one (the passes that must not merge, fold or copy random ops ask this)."""
    return has_trait(node.op, Trait.RANDOM) or any(is_random(n) for body in bodies(node) for n in body.nodes.values())


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnsupportedError(f"unknown op {name!r}") from None
