"""Finite differences and the trapezoidal rule along an axis: diff, trapezoid and
cumulative_trapezoid, with numpy's arguments (torch's dim is axis).

Compositions of slices, subtractions and a cumulative sum, so gradients of every order come from
those ops; the axis needs a static size (the slices' bounds).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dims import format_shape
from .cumulative import cumsum
from .elementwise import _promote, promote_float
from .indexing import concat, slice_axes
from .reduce import sum as reduce_sum
from .shape import broadcast_to, reshape
from .shape_rules import normalize_axis

__all__ = ["cumulative_trapezoid", "diff", "trapezoid"]


def _axis(x: Tensor, axis: int, what: str) -> tuple[int, int]:
    if x.ndim == 0:
        raise ShapeError(f"{what} needs at least one axis, got a 0-d array (at {user_location()})")
    ax = normalize_axis(axis, x.ndim)
    n = x.shape[ax]
    if not isinstance(n, int):
        raise ShapeError(f"{what}: axis {ax} of {format_shape(x.shape)} must be static (at {user_location()})")
    return ax, n


def _part(x: Tensor, ax: int, start: int, end: int) -> Tensor:
    return slice_axes(x, (ax,), (start,), (end,), (1,))


def diff(x, n: int = 1, axis: int = -1, prepend=None, append=None) -> Tensor:
    """numpy.diff / torch.diff: the n-th difference along `axis`, out[i] = x[i + 1] - x[i] applied n
    times, after `prepend` and `append` (scalars broadcast to one slice) are joined to x there. n = 0
    gives x as it is (without them, as torch). Booleans differ by xor, as numpy's."""
    x = as_tensor(x)
    n = int(n)
    if n < 0:
        raise ShapeError(f"diff: n must be >= 0, got {n} (at {user_location()})")
    if n == 0:
        return x
    ax, _ = _axis(x, axis, "diff")
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        parts = _promote(*parts)
        one = tuple(1 if i == ax else d for i, d in enumerate(x.shape))
        x = concat([broadcast_to(reshape(p, ()), one) if p.ndim == 0 else p for p in parts], ax)
    size = x.shape[ax]
    for _ in range(n):
        later, earlier = _part(x, ax, 1, size), _part(x, ax, 0, size - 1)
        x = later != earlier if x.dtype == np.bool_ else later - earlier
        size = max(size - 1, 0)
    return x


def _segments(y: Tensor, x, dx, ax: int, n: int, what: str) -> Tensor:
    """The area of each trapezoid along `ax`: (y[i] + y[i + 1]) / 2 times its width, x[i + 1] - x[i]
    (x 1-d along the axis, or of y's shape) or dx."""
    mean = (_part(y, ax, 1, n) + _part(y, ax, 0, n - 1)) * 0.5
    if x is None:
        return mean * (1.0 if dx is None else dx)
    x = as_tensor(x)
    if x.ndim == 1:
        if x.shape[0] != n:
            raise ShapeError(f"{what}: x {format_shape(x.shape)} must have the {n} samples of y's axis {ax} "
                             f"(at {user_location()})")
        width = reshape(diff(x), (n - 1,) + (1,) * (y.ndim - ax - 1))
    else:
        width = diff(x, axis=ax)
    return mean * width


def trapezoid(y, x=None, dx=None, axis: int = -1) -> Tensor:
    """numpy.trapezoid / torch.trapezoid: the integral of y along `axis` by the trapezoidal rule, at
    the sample points x (1-d, or y's shape) or spaced dx apart (1 by default)."""
    y = promote_float(y)[0]
    ax, n = _axis(y, axis, "trapezoid")
    if n < 2:
        return reduce_sum(_part(y, ax, 0, 0), ax)                  # no interval: 0
    return reduce_sum(_segments(y, x, dx, ax, n, "trapezoid"), ax)


def cumulative_trapezoid(y, x=None, dx=None, axis: int = -1) -> Tensor:
    """torch.cumulative_trapezoid (scipy's without `initial`): the running integrals of trapezoid, one
    per interval (the axis one shorter)."""
    y = promote_float(y)[0]
    ax, n = _axis(y, axis, "cumulative_trapezoid")
    if n < 2:
        return _part(y, ax, 0, 0)
    return cumsum(_segments(y, x, dx, ax, n, "cumulative_trapezoid"), ax)
