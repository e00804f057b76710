"""Parameter initialisers: numpy arrays drawn as torch.nn's layers draw their defaults.

Every layer takes `rng` (a numpy Generator or a seed); without one it draws from this module's
generator, which `seed(n)` resets, so a script that seeds once builds the same model each run.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["generator", "kaiming_uniform", "normal", "ones", "seed", "uniform", "xavier_uniform", "zeros"]

_GENERATOR = np.random.default_rng(0)


def seed(n: int) -> None:
    """Reset the default generator that layers built without `rng` draw from."""
    global _GENERATOR
    _GENERATOR = np.random.default_rng(n)


def generator(rng: np.random.Generator | int | None = None) -> np.random.Generator:
    """`rng` as a Generator: itself, a new one seeded with an int, or the default one."""
    if rng is None:
        return _GENERATOR
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def zeros(shape: Sequence[int], dtype: DTypeLike = "float32") -> np.ndarray:
    return np.zeros(tuple(shape), dtype)


def ones(shape: Sequence[int], dtype: DTypeLike = "float32") -> np.ndarray:
    return np.ones(tuple(shape), dtype)


def uniform(shape: Sequence[int], bound: float, rng=None, dtype: DTypeLike = "float32") -> np.ndarray:
    """U(-bound, bound)."""
    return generator(rng).uniform(-bound, bound, tuple(shape)).astype(dtype)


def normal(shape: Sequence[int], std: float = 1.0, rng=None, dtype: DTypeLike = "float32") -> np.ndarray:
    return (generator(rng).standard_normal(tuple(shape)) * std).astype(dtype)


def kaiming_uniform(shape: Sequence[int], fan_in: int, rng=None, dtype: DTypeLike = "float32") -> np.ndarray:
    """torch's default for Linear and Conv weights, kaiming_uniform_(a=√5): U(±1/√fan_in)."""
    return uniform(shape, 1 / math.sqrt(max(fan_in, 1)), rng, dtype)


def xavier_uniform(shape: Sequence[int], fan_in: int, fan_out: int, rng=None, dtype: DTypeLike = "float32"
                   ) -> np.ndarray:
    """U(±√(6 / (fan_in + fan_out))), torch's default for MultiheadAttention's in_proj_weight."""
    return uniform(shape, math.sqrt(6 / max(fan_in + fan_out, 1)), rng, dtype)
