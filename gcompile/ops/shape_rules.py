"""Shared shape/dtype rules for op definitions: broadcasting, axes, dtype checks."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.graph import TensorType, tensor_type


def broadcast_shapes(*shapes) -> tuple:
    """numpy broadcasting over int and symbolic dims; a symbol only matches itself or 1."""
    ndim = max(len(s) for s in shapes)
    result = []
    for axis in range(ndim):
        dim = 1
        for shape in shapes:
            k = axis - (ndim - len(shape))
            if k < 0:
                continue
            d = shape[k]
            if d == 1 or d == dim:
                continue
            if dim == 1:
                dim = d
                continue
            raise ShapeError("shapes " + " and ".join(format_shape(s) for s in shapes) + " cannot be broadcast "
                             f"(dim {dim!r} vs {d!r})")
        result.append(dim)
    return tuple(result)


def broadcasts_to(shape, target) -> bool:
    """Whether numpy broadcasting takes `shape` to exactly `target` (each dim 1 or equal, aligned from the right)."""
    return len(shape) <= len(target) and all(d == 1 or d == t for d, t in zip(shape[::-1], target[::-1]))


def normalize_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """None -> all axes; an int or a sequence -> sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    axes = tuple(sorted(normalize_axis(int(a), ndim) for a in axis))
    if len(set(axes)) != len(axes):
        raise ShapeError(f"repeated axis in {axis}")
    return axes


def axis_for(axis, ndim: int, what: str) -> int:
    """normalize_axis, with the function's name and the user's line in the error."""
    try:
        return normalize_axis(axis, ndim)
    except ShapeError as err:
        raise ShapeError(f"{what}: {err} (at {user_location()})") from None


def axes_for(axis, ndim: int, what: str) -> tuple[int, ...]:
    """normalize_axes, with the function's name and the user's line in the error."""
    try:
        return normalize_axes(axis, ndim)
    except ShapeError as err:
        raise ShapeError(f"{what}: {err} (at {user_location()})") from None


def require_float(t: TensorType, what: str = "operand") -> None:
    if not is_float(t.dtype):
        raise ShapeError(f"{what} must be a float tensor, got {t.dtype.name}")


def same_dtype(types) -> np.dtype:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ShapeError("operands must have the same dtype, got " + ", ".join(sorted(d.name for d in dtypes)))
    return types[0].dtype


def unary_float(types, **_):
    """Rule for float elementwise ops: output has the input's type."""
    require_float(types[0])
    return [types[0]]


def unary_any(types, **_):
    return [types[0]]


def binary_broadcast(types, **_):
    dtype = same_dtype(types)
    return [tensor_type(dtype, broadcast_shapes(*(t.shape for t in types)))]


def binary_float(types, **_):
    """Rule for float binary ops (their public functions promote integer operands first)."""
    require_float(types[0])
    return binary_broadcast(types)


def _numbers(types) -> None:
    if types[0].dtype == np.bool_:
        raise ShapeError("operands must be numbers, got bool (cast them with .astype('int64') first)")


def unary_numeric(types, **_):
    """Rule for arithmetic with no meaning on bools (negation, sign), as in numpy and torch."""
    _numbers(types)
    return [types[0]]


def binary_numeric(types, **_):
    """Rule for binary arithmetic with no meaning on bools (subtraction, division), as in numpy and torch."""
    _numbers(types)
    return binary_broadcast(types)


def compare_broadcast(types, **_):
    same_dtype(types)
    return [tensor_type(np.bool_, broadcast_shapes(*(t.shape for t in types)))]


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)
