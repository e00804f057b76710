"""Order statistics beyond sort and median (ops/sorting.py), with PyTorch's semantics: kthvalue,
nanmedian, mode, quantile and nanquantile.

Each is a composition: a stable sort (NaN last, as torch orders it) and a gather at positions
computed from the slice's size or its count of numbers, so the gradient of a value goes to the
element it was read from (the lerp's two neighbours for an interpolated quantile), as PyTorch's.
mode counts equal values with an (n, n) comparison along its axis, which needs a static size there.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from .basic import cast
from .division import floor_divide
from .elementwise import ceil, equal, floor, lerp, logical_and, logical_not, logical_or, maximum, minimum, where
from .elementwise import round as half_to_even
from .indexing import slice_axes, take_along_axis
from .nonfinite import isnan
from .rearrange import moveaxis
from .reduce import any as reduce_any
from .reduce import count
from .reduce import max as reduce_max
from .reduce import min as reduce_min
from .reduce import sum as reduce_sum
from .shape import expand_dims, ravel, reshape, squeeze
from .shape_rules import axis_for
from .sorting import argsort, sort, topk

__all__ = ["kthvalue", "mode", "nanmedian", "nanquantile", "quantile"]


def _where(what: str) -> str:
    return f"{what} (at {user_location()})"


def _operand(x, axis, what: str) -> tuple[Tensor, int, int]:
    """(x, its axis, its rank before a None axis flattened it)."""
    x = as_tensor(x)
    if x.dtype == np.bool_:
        raise ShapeError(_where(f"{what}: x must be a numeric tensor, got bool"))
    rank = x.ndim
    if axis is None:
        return ravel(x), 0, rank
    if x.ndim == 0:                            # torch takes dim 0 or -1 of a 0-d tensor as its one element
        return reshape(x, (1,)), 0, 0
    return x, axis_for(axis, x.ndim, what), rank


def _shaped(t: Tensor, ax: int, rank: int, axis, keepdims: bool) -> Tensor:
    """A result with a kept axis `ax` of size 1 as the function gives it (keepdims, axis None, 0-d)."""
    if axis is None:
        return reshape(t, (1,) * rank if keepdims else ())
    if rank == 0:
        return reshape(t, ())
    return t if keepdims else squeeze(t, ax)


def _numbers(x: Tensor, ax: int) -> Tensor:
    """The int64 count of the non-NaN entries along `ax`, kept."""
    kept = logical_not(isnan(x)) if is_float(x.dtype) else equal(x, x)
    return reduce_sum(cast(kept, np.int64), ax, keepdims=True)


# -- kthvalue and nanmedian ---------------------------------------------------------------------------------------
def kthvalue(x, k: int, axis: int = -1, keepdims: bool = False) -> tuple[Tensor, Tensor]:
    """torch.kthvalue: the k-th smallest entry (k from 1) along `axis` and its int64 index; NaN counts as
    the largest, and of equal values the one a stable sort puts k-th is taken. The gradient goes to
    that element."""
    x, ax, rank = _operand(x, axis, "kthvalue")
    n = x.shape[ax]
    k = int(k)
    if k < 1 or (isinstance(n, int) and k > n):
        raise ShapeError(_where(f"kthvalue: k={k} must be between 1 and the size {n!r} of axis {ax} of x "
                                f"{format_shape(x.shape)}"))
    values, indices = topk(x, k, ax, largest=False)
    values, indices = (slice_axes(t, (ax,), (k - 1,), (k,), (1,)) for t in (values, indices))
    return _shaped(values, ax, rank, axis, keepdims), _shaped(indices, ax, rank, axis, keepdims)


def nanmedian(x, axis: int | None = None, keepdims: bool = False, return_indices: bool = False):
    """torch.nanmedian: the lower median of the numbers along `axis` (None: of all elements), NaN
    ignored (NaN where there are none): the element at (c-1)//2 of the sorted numbers, c their count
    (numpy.nanmedian averages the two middle ones instead). With return_indices, also its int64
    index. The gradient goes to that element."""
    x, ax, rank = _operand(x, axis, "nanmedian")
    if x.shape[ax] == 0:
        raise ShapeError(_where(f"nanmedian: axis {ax} of x {format_shape(x.shape)} is empty"))
    position = maximum(floor_divide(_numbers(x, ax) - 1, 2), 0)
    middle = take_along_axis(sort(x, ax), position, ax)
    index = take_along_axis(argsort(x, ax), position, ax)
    middle, index = _shaped(middle, ax, rank, axis, keepdims), _shaped(index, ax, rank, axis, keepdims)
    return (middle, index) if return_indices else middle


# -- mode ----------------------------------------------------------------------------------------------------------
def mode(x, axis: int = -1, keepdims: bool = False) -> tuple[Tensor, Tensor]:
    """torch.mode: the most frequent value along `axis` (static size) and the int64 index of its last
    occurrence; of values equally frequent, the smallest (NaN equal to NaN, and the largest). The
    gradient goes to that occurrence."""
    x, ax, rank = _operand(x, axis, "mode")
    n = x.shape[ax]
    if not isinstance(n, int) or n == 0:
        raise ShapeError(_where(f"mode: axis {ax} of x {format_shape(x.shape)} must have a static, nonzero size"))
    last = moveaxis(x, ax, -1)                                                    # (..., n)
    a, b = expand_dims(last, -1), expand_dims(last, -2)
    same = equal(a, b)
    if is_float(x.dtype):
        same = logical_or(same, logical_and(isnan(a), isnan(b)))
        key = where(isnan(last), np.asarray(np.inf, x.dtype), last)
        beyond = np.asarray(np.inf, x.dtype)
    else:
        key, beyond = last, np.asarray(np.iinfo(x.dtype).max, x.dtype)
    counts = reduce_sum(cast(same, np.int64), -1)                                # (..., n)
    frequent = equal(counts, reduce_max(counts, -1, keepdims=True))
    smallest = reduce_min(where(frequent, key, beyond), -1, keepdims=True)
    positions = np.arange(n, dtype=np.int64)
    index = reduce_max(where(logical_and(frequent, equal(key, smallest)), positions, np.int64(-1)), -1, keepdims=True)
    value = take_along_axis(last, index, -1)
    value, index = moveaxis(value, -1, ax), moveaxis(index, -1, ax)
    return _shaped(value, ax, rank, axis, keepdims), _shaped(index, ax, rank, axis, keepdims)


# -- quantile ------------------------------------------------------------------------------------------------------
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(x, q, axis, keepdims: bool, interpolation: str, skip_nan: bool, what: str) -> Tensor:
    if interpolation not in _INTERPOLATIONS:
        raise ShapeError(_where(f"{what}: interpolation must be one of {', '.join(_INTERPOLATIONS)}, got "
                                f"{interpolation!r}"))
    x = as_tensor(x)
    x = x if is_float(x.dtype) else cast(x, np.float32)
    if not isinstance(q, Tensor):
        q = np.asarray(q, x.dtype)
        if q.ndim > 1 or not np.all((q >= 0) & (q <= 1)):
            raise ShapeError(_where(f"{what}: q must be a number or a 1-d array in [0, 1], got {q!r}"))
    q = cast(as_tensor(q), x.dtype)
    if q.ndim > 1:
        raise ShapeError(_where(f"{what}: q must be a number or a 1-d tensor, got {format_shape(q.shape)}"))
    x, ax, rank = _operand(x, axis, what)
    if x.shape[ax] == 0:
        raise ShapeError(_where(f"{what}: axis {ax} of x {format_shape(x.shape)} is empty"))
    scalar = q.ndim == 0
    x = expand_dims(x, 0)                                          # a leading axis for q's values
    ax += 1
    q = reshape(q, (1 if scalar else q.shape[0],) + (1,) * (x.ndim - 1))
    top = (_numbers(x, ax) if skip_nan else cast(count(x, (ax,)), np.int64)) - 1
    position = q * cast(top, x.dtype)                              # (q, ..., 1, ...)
    ordered = sort(x, ax)

    def at(p: Tensor) -> Tensor:                                  # the sorted values at positions p, in range
        return take_along_axis(ordered, minimum(maximum(cast(p, np.int64), 0), maximum(top, 0)), ax)
    if interpolation == "nearest":
        y = at(half_to_even(position))
    else:
        below, above = at(floor(position)), at(ceil(position))
        y = {"lower": lambda: below, "higher": lambda: above,
             "midpoint": lambda: lerp(below, above, 0.5),
             "linear": lambda: lerp(below, above, position - floor(position))}[interpolation]()
    if not skip_nan:                                               # a NaN anywhere in the slice: NaN, as torch
        y = where(reduce_any(isnan(x), ax, keepdims=True), np.asarray(np.nan, x.dtype), y)
    y = squeeze(y, 0) if scalar else y
    kept = ax - 1 if scalar else ax
    if axis is None:
        lead = () if scalar else (y.shape[0],)
        return reshape(y, lead + ((1,) * rank if keepdims else ()))
    if rank == 0:
        return reshape(y, () if scalar else (y.shape[0],))
    return y if keepdims else squeeze(y, kept)


def quantile(x, q, axis=None, keepdims: bool = False, interpolation: str = "linear") -> Tensor:
    """torch.quantile (numpy.quantile, whose `method` is `interpolation` here): the q-th quantiles along
    `axis` (None: of all elements) for q a number or a 1-d array in [0, 1], whose values come first
    in the result's shape. Position q·(n - 1) of the sorted slice, between its neighbours by
    "linear", "lower", "higher", "midpoint" or "nearest" (half to even); NaN where the slice holds
    NaN. The gradient goes to the neighbours read (weighted as the lerp weighs them)."""
    return _quantile(x, q, axis, keepdims, interpolation, False, "quantile")


def nanquantile(x, q, axis=None, keepdims: bool = False, interpolation: str = "linear") -> Tensor:
    """torch.nanquantile: quantile of the numbers of each slice, NaN ignored (NaN where there are none)."""
    return _quantile(x, q, axis, keepdims, interpolation, True, "nanquantile")
