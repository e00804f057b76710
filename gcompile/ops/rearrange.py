"""Rearranging data without computing on it: flip, roll, rot90, moveaxis/movedim, unflatten, the
numpy stacks (hstack, vstack, dstack, column_stack) and atleast_1d/2d/3d, meshgrid, unbind,
repeat_interleave and channel_shuffle.

Each is a composition of slices, concats, transposes, reshapes, broadcasts and gathers with
static indices, so their gradients (and every higher order) come from those ops' adjoint pairs
(ops/indexing.py). Sizes along the axes they move data on must be static; numpy's argument
conventions hold, with PyTorch's names where numpy has none (movedim, unflatten, unbind,
repeat_interleave).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from .elementwise import _promote
from .indexing import concat, slice_axes, take
from .shape import broadcast_to, reshape, transpose
from .shape_rules import normalize_axes, normalize_axis

__all__ = ["atleast_1d", "atleast_2d", "atleast_3d", "channel_shuffle", "column_stack", "dstack", "flip", "hstack",
           "meshgrid", "movedim", "moveaxis", "repeat_interleave", "roll", "rot90", "unbind", "unflatten", "vstack"]


def _static(x: Tensor, axis: int, what: str) -> int:
    d = x.shape[axis]
    if not isinstance(d, int):
        raise UnsupportedError(f"{what}: axis {axis} of {format_shape(x.shape)} has the symbolic size {d!r}; it "
                               f"needs a static size (at {user_location()})")
    return d


def _axes(axis, ndim: int, what: str) -> tuple[int, ...]:
    try:
        return normalize_axes(axis, ndim)
    except ShapeError as err:
        raise ShapeError(f"{what}: {err} (at {user_location()})") from None


def _axis(axis, ndim: int, what: str) -> int:
    try:
        return normalize_axis(int(axis), ndim)
    except ShapeError as err:
        raise ShapeError(f"{what}: {err} (at {user_location()})") from None


# -- flip, roll, rot90 -------------------------------------------------------------------------------
def flip(x, axis=None) -> Tensor:
    """numpy flip (torch.flip): x reversed along `axis` (an int, a tuple, or None for every axis)."""
    x = as_tensor(x)
    axes = [a for a in _axes(axis, x.ndim, "flip") if _static(x, a, "flip") > 1]
    n = len(axes)
    return slice_axes(x, axes, [x.shape[a] - 1 for a in axes], [-1] * n, [-1] * n) if axes else x


def roll(x, shift, axis=None) -> Tensor:
    """numpy roll (torch.roll): elements shifted by `shift` along `axis`, those past the end coming
    back at the start. shift and axis are ints or equal-length tuples; axis=None rolls the
    flattened x and restores its shape."""
    x = as_tensor(x)
    if axis is None:
        if not isinstance(shift, (int, np.integer)):
            raise ShapeError(f"roll: with axis=None the shift must be one int, got {shift!r} (at {user_location()})")
        return reshape(roll(reshape(x, (dims.product(x.shape),)), shift, 0), x.shape)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(shifts) != len(axes):
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        elif len(axes) == 1:
            axes = axes * len(shifts)
        else:
            raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes (at {user_location()})")
    for s, a in zip(shifts, axes):
        a = _axis(a, x.ndim, "roll")
        n = _static(x, a, "roll")
        k = int(s) % n if n else 0
        if k:
            x = concat([slice_axes(x, (a,), (n - k,), (n,), (1,)), slice_axes(x, (a,), (0,), (n - k,), (1,))], a)
    return x


def rot90(x, k: int = 1, axes=(0, 1)) -> Tensor:
    """numpy rot90 (torch.rot90): x rotated by 90 degrees k times in the plane of `axes`, from the
    first axis towards the second."""
    x = as_tensor(x)
    if len(axes) != 2:
        raise ShapeError(f"rot90: axes must be two axes, got {axes!r} (at {user_location()})")
    a, b = (_axis(ax, x.ndim, "rot90") for ax in axes)
    if a == b:
        raise ShapeError(f"rot90: the axes {axes!r} must differ (at {user_location()})")
    k = int(k) % 4
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    if k == 1:
        return transpose(flip(x, b), perm)
    if k == 2:
        return flip(x, (a, b))
    if k == 3:
        return flip(transpose(x, perm), b)
    return x


# -- moving and splitting axes -----------------------------------------------------------------------
def moveaxis(x, source, destination) -> Tensor:
    """numpy moveaxis (torch.movedim): the axes `source` moved to positions `destination`, the
    others keeping their order."""
    x = as_tensor(x)
    src = [source] if isinstance(source, (int, np.integer)) else list(source)
    dst = [destination] if isinstance(destination, (int, np.integer)) else list(destination)
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: {len(src)} source axes for {len(dst)} destinations (at {user_location()})")
    src = [_axis(a, x.ndim, "moveaxis") for a in src]
    dst = [_axis(a, x.ndim, "moveaxis") for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: repeated axis in {source!r} or {destination!r} (at {user_location()})")
    rest = [a for a in range(x.ndim) if a not in src]
    perm: list = [None] * x.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    fill = iter(rest)
    return transpose(x, [p if p is not None else next(fill) for p in perm])


movedim = moveaxis


def unflatten(x, axis: int, sizes) -> Tensor:
    """torch.unflatten: axis `axis` split into `sizes` (at most one -1, inferred)."""
    x = as_tensor(x)
    a = _axis(axis, x.ndim, "unflatten")
    sizes = tuple(int(s) if isinstance(s, (int, np.integer)) else s for s in sizes)
    if not sizes:
        raise ShapeError(f"unflatten: sizes must name at least one dim (at {user_location()})")
    if -1 in sizes:
        known = dims.product(s for s in sizes if s != -1)
        missing = dims.divide(x.shape[a], known)
        if missing is None or sizes.count(-1) > 1:
            raise ShapeError(f"unflatten: sizes {sizes} do not split axis {a} of {format_shape(x.shape)} "
                             f"(at {user_location()})")
        sizes = tuple(missing if s == -1 else s for s in sizes)
    if dims.product(sizes) != x.shape[a]:
        raise ShapeError(f"unflatten: sizes {sizes} multiply to {dims.product(sizes)!r}, not to the size "
                         f"{x.shape[a]!r} of axis {a} of {format_shape(x.shape)} (at {user_location()})")
    return reshape(x, x.shape[:a] + sizes + x.shape[a + 1:])


def unbind(x, axis: int = 0) -> tuple[Tensor, ...]:
    """torch.unbind: the slices of x along `axis`, each without that axis."""
    x = as_tensor(x)
    a = _axis(axis, x.ndim, "unbind")
    n = _static(x, a, "unbind")
    rest = x.shape[:a] + x.shape[a + 1:]
    return tuple(reshape(slice_axes(x, (a,), (i,), (i + 1,), (1,)), rest) for i in range(n))


# -- the numpy stacks ------------------------------------------------------------------------------------
def _at_least(x: Tensor, rank: int) -> Tensor:
    """numpy's atleast_1d/2d/3d: 0-d -> (1,)*rank; 1-d (N,) -> (1, N) or (1, N, 1); 2-d (M, N) -> (M, N, 1)."""
    if x.ndim >= rank:
        return x
    shape = {0: (1,) * rank, 1: ((1,) + x.shape + (1,))[:rank] if rank == 3 else (1,) + x.shape,
             2: x.shape + (1,)}[x.ndim]
    return reshape(x, shape)


def _sequence(xs, what: str) -> list[Tensor]:
    xs = list(xs)
    if not xs:
        raise ShapeError(f"{what} needs at least one array (at {user_location()})")
    return _promote(*xs)


def hstack(xs) -> Tensor:
    """numpy hstack: joined along axis 1 (axis 0 for 1-d arrays)."""
    xs = [_at_least(x, 1) for x in _sequence(xs, "hstack")]
    return concat(xs, 0 if xs[0].ndim == 1 else 1)


def vstack(xs) -> Tensor:
    """numpy vstack: 1-d arrays as rows, joined along axis 0."""
    return concat([_at_least(x, 2) for x in _sequence(xs, "vstack")], 0)


def dstack(xs) -> Tensor:
    """numpy dstack: joined along axis 2, after numpy's atleast_3d."""
    return concat([_at_least(x, 3) for x in _sequence(xs, "dstack")], 2)


def column_stack(xs) -> Tensor:
    """numpy column_stack / torch.column_stack: 0-d and 1-d arrays as columns (n, 1), joined along axis 1
    with the 2-d ones."""
    return concat([reshape(x, (-1, 1)) if x.ndim < 2 else x for x in _sequence(xs, "column_stack")], 1)


def _each(rank: int, arrays) -> Tensor | tuple[Tensor, ...]:
    if len(arrays) == 1 and isinstance(arrays[0], (list, tuple)):
        return tuple(_at_least(as_tensor(a), rank) for a in arrays[0])
    out = tuple(_at_least(as_tensor(a), rank) for a in arrays)
    return out[0] if len(out) == 1 else out


def atleast_1d(*arrays):
    """numpy atleast_1d / torch.atleast_1d: each array with at least one axis (a 0-d one as (1,)); one
    Tensor for one array, a tuple for several (or for a list of them, as torch)."""
    return _each(1, arrays)


def atleast_2d(*arrays):
    """numpy atleast_2d: each array with at least two axes, (1, N) for a 1-d one; one or a tuple."""
    return _each(2, arrays)


def atleast_3d(*arrays):
    """numpy atleast_3d: each array with at least three axes ((1, N, 1) for 1-d, (M, N, 1) for 2-d)."""
    return _each(3, arrays)


def meshgrid(*xs, indexing: str = "xy", sparse: bool = False) -> tuple[Tensor, ...]:
    """numpy meshgrid (torch.meshgrid, whose default is indexing="ij"): the coordinate arrays of the
    grid of 1-d (or 0-d) arrays xs, each of shape (len(x0), len(x1), ...) with "ij" and with the
    first two lengths swapped with "xy"; sparse=True gives their broadcastable forms instead."""
    if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
        xs = tuple(xs[0])
    if indexing not in ("xy", "ij"):
        raise ShapeError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r} (at {user_location()})")
    xs = tuple(reshape(as_tensor(x), (-1,)) if as_tensor(x).ndim < 2 else as_tensor(x) for x in xs)
    if any(x.ndim != 1 for x in xs):
        raise ShapeError(f"meshgrid needs 0-d or 1-d arrays, got {', '.join(format_shape(x.shape) for x in xs)} "
                         f"(at {user_location()})")
    n = len(xs)
    order = list(range(n))
    if indexing == "xy" and n >= 2:
        order[0], order[1] = 1, 0
    shape = [1] * n
    for axis, x in zip(order, xs):
        shape[axis] = x.shape[0]
    out = []
    for axis, x in zip(order, xs):
        column = reshape(x, tuple(x.shape[0] if k == axis else 1 for k in range(n)))
        out.append(column if sparse else broadcast_to(column, tuple(shape)))
    return tuple(out)


# -- repeat_interleave -------------------------------------------------------------------------------------
def repeat_interleave(x, repeats, axis=None) -> Tensor:
    """numpy repeat (torch.repeat_interleave): each element repeated `repeats` times along `axis`
    (None: of the flattened x). repeats is an int, or one non-negative int per element along the
    axis, known when tracing (a run-time count would make the result size data-dependent)."""
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (dims.product(x.shape),)), 0
    a = _axis(axis, x.ndim, "repeat_interleave")
    if isinstance(repeats, Tensor):
        raise UnsupportedError(f"repeat_interleave: repeats must be known when tracing (an int or a list), not a "
                               f"Tensor: the result's size would depend on run-time values (at {user_location()})")
    reps = np.asarray(repeats)
    if reps.dtype.kind not in "iu" or reps.ndim > 1 or (reps < 0).any():
        raise ShapeError(f"repeat_interleave: repeats must be a non-negative int or a 1-d list of them, got "
                         f"{repeats!r} (at {user_location()})")
    if reps.ndim == 0:
        r = int(reps)
        if r == 1:
            return x
        spread = reshape(x, x.shape[:a + 1] + (1,) + x.shape[a + 1:])
        spread = broadcast_to(spread, x.shape[:a + 1] + (r,) + x.shape[a + 1:])
        return reshape(spread, x.shape[:a] + (dims.product((x.shape[a], r)),) + x.shape[a + 1:])
    n = _static(x, a, "repeat_interleave")
    if reps.shape != (n,):
        raise ShapeError(f"repeat_interleave: {reps.size} repeats for axis {a} of size {n} in "
                         f"{format_shape(x.shape)} (at {user_location()})")
    return take(x, np.repeat(np.arange(n, dtype=np.int64), reps), axis=a)


# -- channel_shuffle ---------------------------------------------------------------------------------------
def channel_shuffle(x, groups: int) -> Tensor:
    """torch's channel_shuffle of x (N, C, *): the C channels as `groups` rows of C/groups, read by
    columns (channel g·(C/groups) + i goes to i·groups + g)."""
    x = as_tensor(x)
    groups = int(groups)
    c = x.shape[1] if x.ndim >= 3 else None
    if not isinstance(c, int) or groups < 1 or c % groups:
        raise ShapeError(f"channel_shuffle: x {format_shape(x.shape)} needs (N, C, *) with a static C divisible by "
                         f"groups={groups} (at {user_location()})")
    rest = tuple(x.shape[2:])
    y = reshape(x, (x.shape[0], groups, c // groups) + rest)
    return reshape(transpose(y, [0, 2, 1] + list(range(3, y.ndim))), tuple(x.shape))
