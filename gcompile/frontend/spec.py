"""Input specs: the shape (ints and symbol names) and dtype of a traced function's argument."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..errors import GcompileError
from ..ir import dtypes
from ..ir.dims import dtype_name, format_shape
from ..ir.graph import TensorType, tensor_type


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
    """Describe a graph input: `shape` holds ints and symbol names ("batch"), e.g. spec(("batch", 784)).

    Anything else is refused, not converted: a dict or set would give its keys as dims (spec({"batch":
    None, "features": 784}) used to be the shape (batch, features), dropping 784), and a float, a bool,
    a negative int or a string that is no identifier is no size."""
    if isinstance(shape, (int, str)):
        shape = (shape,)
    if isinstance(shape, (Mapping, AbstractSet)) or not isinstance(shape, Iterable):
        raise GcompileError(f"bad spec: the shape must be a tuple of ints and symbol names, in order, got "
                            f"{type(shape).__name__} {_short(shape)}{_the_right_form(shape)}")
    shape = tuple(shape)
    for d in shape:
        if not _is_dim(d):
            raise GcompileError(f"bad spec: dim {d!r} in shape {_short(shape)} must be a non-negative int or "
                                f"a symbol name such as 'batch'{_the_right_form(shape)}")
    try:
        dtype = dtypes.as_dtype(dtype)
    except TypeError:
        raise GcompileError(f"bad spec: unknown dtype {dtype!r}") from None
    if dtype not in dtypes.TRACED:
        raise GcompileError(f"bad spec: dtype {dtype_name(dtype)} is not supported (use one of "
                            f"{', '.join(sorted(d.name for d in dtypes.TRACED))})")
    return Spec(tuple(int(d) if not isinstance(d, str) else d for d in shape), dtype)


def _is_dim(d: Any) -> bool:
    """A non-negative int (not a bool) or a symbol name."""
    return not isinstance(d, bool) and bool(isinstance(d, (int, np.integer)) and d >= 0
                                            or isinstance(d, str) and d.isidentifier())


def _short(value: Any) -> str:
    """repr(value), cut where a user's value is long."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _the_right_form(shape: Any) -> str:
    """'; write gc.spec(("batch", 784))': the shape a user most likely meant, where one can be
    guessed (a dict of symbol -> size, None for a symbolic dim; whole floats), else the form."""
    if isinstance(shape, Mapping):
        dims = [v if _is_dim(v) and not isinstance(v, str) else k for k, v in shape.items()]
    elif isinstance(shape, tuple):
        dims = [int(d) if isinstance(d, float) and d.is_integer() and d >= 0 else d for d in shape]
    else:
        dims = []
    if dims and all(map(_is_dim, dims)):
        return f"; write gc.spec({tuple(dims)!r})"
    return "; write it as gc.spec((\"batch\", 784)): ints for fixed sizes, names for symbolic ones"


def as_spec(value: Any) -> Spec:
    """A Spec from a Spec or an example array (its exact shape and dtype)."""
    if isinstance(value, Spec):
        return value
    if isinstance(value, (np.ndarray, np.generic, int, float, bool, list)):
        arr = np.asarray(value)
        return spec(arr.shape, arr.dtype)
    raise GcompileError("bad spec: expected gc.spec(shape, dtype) or an example numpy array, "
                        f"got {type(value).__name__}")
