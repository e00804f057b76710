"""Input specs: the shape (ints and symbol names) and dtype of a traced function's argument."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..errors import GcompileError
from ..ir.dims import format_shape
from ..ir.graph import TensorType, tensor_type

_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}


@dataclass(frozen=True)
class Spec:
    shape: tuple
    dtype: np.dtype

    def __repr__(self) -> str:
        return f"spec({format_shape(self.shape)}, {self.dtype.name!r})"

    @property
    def type(self) -> TensorType:
        return tensor_type(self.dtype, self.shape)


def spec(shape: int | str | Iterable[int | str], dtype: DTypeLike = "float32") -> Spec:
    """Describe a graph input: `shape` holds ints and symbol names ("batch"), e.g. spec(("batch", 784))."""
    if isinstance(shape, (int, str)):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise GcompileError(f"bad spec: shape must be a tuple of ints and symbol names, got {shape!r}") from None
    for d in shape:
        if isinstance(d, bool) or not (isinstance(d, (int, np.integer)) and d >= 0
                                       or isinstance(d, str) and d.isidentifier()):
            raise GcompileError(f"bad spec: dim {d!r} in shape {shape!r} must be a non-negative int or "
                                "a symbol name such as 'batch'")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise GcompileError(f"bad spec: unknown dtype {dtype!r}") from None
    if dtype.name not in _DTYPES:
        raise GcompileError(f"bad spec: dtype {dtype.name} is not supported (use one of {', '.join(sorted(_DTYPES))})")
    return Spec(tuple(int(d) if not isinstance(d, str) else d for d in shape), dtype)


def as_spec(value: Any) -> Spec:
    """A Spec from a Spec or an example array (its exact shape and dtype)."""
    if isinstance(value, Spec):
        return value
    if isinstance(value, (np.ndarray, np.generic, int, float, bool, list)):
        arr = np.asarray(value)
        return spec(arr.shape, arr.dtype)
    raise GcompileError("bad spec: expected gc.spec(shape, dtype) or an example numpy array, "
                        f"got {type(value).__name__}")
