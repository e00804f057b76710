"""Sample operands and attributes for every op that declares Trait.ELEMENTWISE, shared by the check of
the trait's promise (tests/ops/test_registry.py) and the batching of every such op
(tests/gradients/test_vmap_ops.py). A new ELEMENTWISE op with more than one operand, a bool operand,
attributes or a narrow domain gets its line here; the tests name an op they cannot call."""
from __future__ import annotations

import numpy as np

from gcompile.ir.registry import REGISTRY, Trait

# otherwise: the reference's ufunc arity, or 2 for the ops below
ARITY = {"add_n": 3, "batch_norm_inference": 5, "where": 3}
BINARY = {"div", "floor_divide", "fmod", "pow", "remainder", "silu_deriv", "xlogy"}
BOOL_OPERANDS = {"logical_and": (0, 1), "logical_or": (0, 1), "logical_not": (0,), "where": (0,)}
INT_OPS = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}      # int32 operands, negative ones too
ATTRS = {
    "batch_norm_inference": {"eps": 1.0},     # var + eps stays positive over the domain
    "cast": {"dtype": np.dtype(np.float32)},
    "clip": {"lo": -0.5, "hi": 0.25, "inclusive": True},
    "dropout": {"ratio": 0.0, "seed": 0},      # a draw per position: ratio 0 keeps the check deterministic
    "elu": {"alpha": 0.7},
    "gelu": {"approximate": True},
    "gelu_deriv": {"order": 3},
    "leaky_relu": {"slope": 0.1},
    "poly": {"coeffs": (0.5, -1.0, 0.0, 2.0)},
    "polygamma": {"n": 1},
    "silu_deriv": {"order": 2},
    "softplus": {"beta": 2.0},
}
DOMAIN = {"arccosh": (1.1, 3.0)}               # otherwise (-0.9, 0.9), where most ops are finite


def elementwise_ops() -> list[str]:
    return sorted(name for name, op in REGISTRY.items() if Trait.ELEMENTWISE in op.traits)


def arity(op: str) -> int:
    if op in ARITY:
        return ARITY[op]
    if op in BINARY:
        return 2
    return getattr(REGISTRY[op].reference, "nin", 1)


def shapes(n: int) -> list[tuple]:
    """Operand shapes broadcasting to (2, 3) in different ways, for an op of n operands."""
    return [(2, 3), (3,), (2, 1), (1, 3), ()][:n]


def operands(op: str, shapes, rng) -> list[np.ndarray]:
    """One array per operand of `op`, of the given shapes: bools where the op wants them, floats in
    its domain otherwise (integers for the bitwise ops)."""
    lo, hi = DOMAIN.get(op, (-0.9, 0.9))
    if op in INT_OPS:
        return [rng.integers(-300, 300, shape).astype(np.int32) for shape in shapes]
    return [rng.random(shape) < 0.5 if i in BOOL_OPERANDS.get(op, ()) else rng.uniform(lo, hi, shape)
            for i, shape in enumerate(shapes)]
