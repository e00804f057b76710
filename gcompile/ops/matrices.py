"""Matrix products and parts beyond matmul and einsum (ops/linalg.py): the product forms
(addmm, baddbmm, addmv, addbmm, addr, outer, inner, vecdot, kron, tensordot), matrix parts (trace,
diagonal, diag, tril, triu, block_diag), cross, cdist and pdist, with numpy's and PyTorch's names.
Each is a composition of traced ops, so its gradients of every order come from theirs.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dims import format_shape
from .basic import cast
from .elementwise import _promote, abs, greater, maximum, not_equal, power, sqrt, where
from .indexing import concat, pad, slice_axes, take
from .linalg import einsum, matmul
from .reduce import max as reduce_max
from .reduce import sum as reduce_sum
from .shape import expand_dims, ravel, reshape, swapaxes, transpose
from .shape_rules import broadcast_shapes, normalize_axis, require_float

__all__ = ["addbmm", "addmm", "addmv", "addr", "baddbmm", "block_diag", "cdist", "cross", "diag", "diagonal", "inner",
           "kron", "outer", "pdist", "tensordot", "trace", "tril", "triu", "vecdot"]


def _where(what: str) -> str:
    return f"{what} (at {user_location()})"


def _mT(x: Tensor) -> Tensor:
    return swapaxes(x, -1, -2)


# -- products ------------------------------------------------------------------------------------------
def addmm(input, a, b, beta=1, alpha=1) -> Tensor:
    """torch.addmm: beta * input + alpha * (a @ b) for matrices a, b (input broadcasts); with beta=0
    input is ignored (NaN in it does not propagate), as torch."""
    return _scaled_product("addmm", (2, 2), "a and b must be matrices", matmul, input, a, b, beta, alpha)


def baddbmm(input, a, b, beta=1, alpha=1) -> Tensor:
    """torch.baddbmm: beta * input + alpha * (a @ b) for batches of matrices a (B, n, k), b (B, k, m)."""
    return _scaled_product("baddbmm", (3, 3), "a and b must be batches of matrices (rank 3)", matmul, input, a, b,
                           beta, alpha)


def addmv(input, mat, vec, beta=1, alpha=1) -> Tensor:
    """torch.addmv: beta * input + alpha * (mat @ vec) for a matrix (n, m) and a vector (m,)."""
    return _scaled_product("addmv", (2, 1), "mat and vec must be a matrix and a vector", matmul, input, mat, vec,
                           beta, alpha)


def addbmm(input, a, b, beta=1, alpha=1) -> Tensor:
    """torch.addbmm: beta * input + alpha * Σ_i a[i] @ b[i], the products of two batches of matrices
    (B, n, k) and (B, k, m) summed over the batch."""
    return _scaled_product("addbmm", (3, 3), "a and b must be batches of matrices (rank 3)",
                           lambda a, b: einsum("bnk,bkm->nm", a, b), input, a, b, beta, alpha)


def addr(input, vec1, vec2, beta=1, alpha=1) -> Tensor:
    """torch.addr: beta * input + alpha * the outer product of the vectors vec1 (n,) and vec2 (m,)."""
    return _scaled_product("addr", (1, 1), "vec1 and vec2 must be vectors", outer, input, vec1, vec2, beta, alpha)


def _scaled_product(what: str, ranks: tuple[int, int], rule: str, product, input, a, b, beta, alpha) -> Tensor:
    """torch's add*-forms: beta * input + alpha * product(a, b), a and b of the ranks given (`rule` says
    so in the error); with beta=0 input is not read, so NaN in it does not propagate."""
    a, b = _promote(a, b)
    if (a.ndim, b.ndim) != ranks:
        raise ShapeError(_where(f"{what}: {rule}, got {format_shape(a.shape)} and {format_shape(b.shape)}"))
    out = product(a, b)
    out = out if alpha == 1 else out * alpha
    if beta == 0:
        return out
    return out + (input if beta == 1 else input * beta)


def outer(a, b) -> Tensor:
    """numpy outer: the flattened a times the flattened b, (a.size, b.size)."""
    a, b = _promote(a, b)
    return expand_dims(ravel(a), 1) * expand_dims(ravel(b), 0)


def inner(a, b) -> Tensor:
    """numpy inner: sums over the last axes; shape a.shape[:-1] + b.shape[:-1] (0-d operands multiply)."""
    a, b = _promote(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    la, lb = "abcdefghij"[:a.ndim - 1], "klmnopqrst"[:b.ndim - 1]
    return einsum(f"{la}z,{lb}z->{la}{lb}", a, b)


def vecdot(x1, x2, axis: int = -1) -> Tensor:
    """numpy.vecdot / torch.linalg.vecdot (whose `dim` is `axis`): the dot products of the vectors along
    `axis`, the operands broadcast first (real numbers: no conjugation)."""
    x1, x2 = _promote(x1, x2)
    if x1.ndim == 0 or x2.ndim == 0:
        raise ShapeError(_where(f"vecdot needs vectors, got {format_shape(x1.shape)} and {format_shape(x2.shape)}"))
    return reduce_sum(x1 * x2, normalize_axis(axis, len(broadcast_shapes(x1.shape, x2.shape))))


def tensordot(a, b, axes=2) -> Tensor:
    """numpy tensordot: sums a's `axes` against b's (an int N: a's last N with b's first N)."""
    a, b = _promote(a, b)
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = list(range(a.ndim - int(axes), a.ndim)), list(range(int(axes)))
    else:
        axes_a, axes_b = ([axes[k]] if isinstance(axes[k], (int, np.integer)) else list(axes[k]) for k in (0, 1))
    if len(axes_a) != len(axes_b):
        raise ShapeError(_where(f"tensordot: {len(axes_a)} axes of a against {len(axes_b)} of b"))
    axes_a = [normalize_axis(x, a.ndim) for x in axes_a]
    axes_b = [normalize_axis(x, b.ndim) for x in axes_b]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    ta = [next(letters) for _ in range(a.ndim)]
    tb = [next(letters) for _ in range(b.ndim)]
    for x, y in zip(axes_a, axes_b):
        tb[y] = ta[x]
    out = [c for i, c in enumerate(ta) if i not in axes_a] + [c for i, c in enumerate(tb) if i not in axes_b]
    return einsum(f"{''.join(ta)},{''.join(tb)}->{''.join(out)}", a, b)


def kron(a, b) -> Tensor:
    """numpy kron: the block product, shape a.shape * b.shape (the shorter shape padded with 1s)."""
    a, b = _promote(a, b)
    r = max(a.ndim, b.ndim)
    a, b = reshape(a, (1,) * (r - a.ndim) + a.shape), reshape(b, (1,) * (r - b.ndim) + b.shape)
    spread_a = reshape(a, tuple(d for n in a.shape for d in (n, 1)))
    spread_b = reshape(b, tuple(d for n in b.shape for d in (1, n)))
    return reshape(spread_a * spread_b, tuple(p * q for p, q in zip(a.shape, b.shape)))


def cross(a, b, axis: int = -1) -> Tensor:
    """The cross product of 3-vectors along `axis` (numpy cross, torch.linalg.cross), broadcasting."""
    a, b = _promote(a, b)
    ax_a, ax_b = normalize_axis(axis, a.ndim), normalize_axis(axis, b.ndim)
    if a.shape[ax_a] != 3 or b.shape[ax_b] != 3:
        raise ShapeError(_where(f"cross: axis {axis} of {format_shape(a.shape)} and {format_shape(b.shape)} "
                                "must have size 3"))
    pa = [slice_axes(a, (ax_a,), (k,), (k + 1,), (1,)) for k in range(3)]
    pb = [slice_axes(b, (ax_b,), (k,), (k + 1,), (1,)) for k in range(3)]
    parts = [pa[1] * pb[2] - pa[2] * pb[1], pa[2] * pb[0] - pa[0] * pb[2], pa[0] * pb[1] - pa[1] * pb[0]]
    return concat(parts, axis)


# -- matrix parts ----------------------------------------------------------------------------------------
def _static_dims(x: Tensor, axes, what: str) -> tuple:
    sizes = tuple(x.shape[a] for a in axes)
    if not all(isinstance(d, int) for d in sizes):
        raise UnsupportedError(_where(f"{what}: axes {tuple(axes)} of {format_shape(x.shape)} must be static"))
    return sizes


def diagonal(x, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """numpy diagonal: the entries x[..., i, i + offset] of the (axis1, axis2) planes, as the last axis."""
    x = as_tensor(x)
    a, b = normalize_axis(axis1, x.ndim), normalize_axis(axis2, x.ndim)
    if a == b:
        raise ShapeError(_where(f"diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}"))
    n, m = _static_dims(x, (a, b), "diagonal")
    rest = [i for i in range(x.ndim) if i not in (a, b)]
    planes = reshape(transpose(x, rest + [a, b]), tuple(x.shape[i] for i in rest) + (n * m,))
    rows = np.arange(max(0, -offset), min(n, m - offset)) if min(n, m - offset) > max(0, -offset) else \
        np.zeros(0, np.int64)
    return take(planes, (rows * m + rows + offset).astype(np.int64), axis=-1)


def trace(x, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """numpy trace: the sum of diagonal(x, offset, axis1, axis2)."""
    d = diagonal(x, offset, axis1, axis2)
    return reduce_sum(d, -1) if d.shape[-1] else reduce_sum(d * 0, -1)


def diag(v, k: int = 0) -> Tensor:
    """numpy diag: a 1-d v as the k-th diagonal of a square matrix, or the k-th diagonal of a matrix."""
    v = as_tensor(v)
    if v.ndim == 2:
        return diagonal(v, k, 0, 1)
    if v.ndim != 1:
        raise ShapeError(_where(f"diag: v must be 1-d or 2-d, got {format_shape(v.shape)}"))
    (n,) = _static_dims(v, (0,), "diag")
    size = n + (k if k > 0 else -k)
    table = np.full((size, size), n, np.int64)                       # position n reads a 0 appended to v
    rows = np.arange(n) + max(0, -k)
    table[rows, rows + k] = np.arange(n)
    padded = concat([v, as_tensor(np.zeros(1, v.dtype))])
    return reshape(take(padded, table.ravel()), (size, size))


def _triangle(x, k: int, lower: bool, what: str) -> Tensor:
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(_where(f"{what}: x must have at least 2 dims, got {format_shape(x.shape)}"))
    n, m = _static_dims(x, (x.ndim - 2, x.ndim - 1), what)
    mask = np.tri(n, m, k, bool) if lower else ~np.tri(n, m, k - 1, bool)
    return where(mask, x, np.zeros((), x.dtype))


def tril(x, k: int = 0) -> Tensor:
    """numpy tril: x with the entries above the k-th diagonal of its last two axes zeroed."""
    return _triangle(x, k, True, "tril")


def triu(x, k: int = 0) -> Tensor:
    """numpy triu: x with the entries below the k-th diagonal of its last two axes zeroed."""
    return _triangle(x, k, False, "triu")


def block_diag(*arrays) -> Tensor:
    """torch.block_diag (scipy.linalg.block_diag): the matrices on the diagonal of one matrix of zeros, in
    order; a 0-d operand is a 1 x 1 matrix and a 1-d one a row. dtypes promote as arithmetic does."""
    if not arrays:
        raise ShapeError(_where("block_diag needs at least one matrix"))
    blocks = [b if b.ndim == 2 else reshape(b, (1, -1) if b.ndim == 1 else (1, 1)) for b in _promote(*arrays)]
    for b in blocks:
        if b.ndim != 2:
            raise ShapeError(_where(f"block_diag takes 0-, 1- or 2-d operands, got {format_shape(b.shape)}"))
        _static_dims(b, (0, 1), "block_diag")
    width = sum(b.shape[1] for b in blocks)
    rows, before = [], 0
    for b in blocks:
        rows.append(pad(b, ((0, 0), (before, width - before - b.shape[1]))))
        before += b.shape[1]
    return concat(rows, 0)


# -- cdist and pdist ---------------------------------------------------------------------------------------
def cdist(x1, x2, p: float = 2.0) -> Tensor:
    """torch.cdist: the p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M),
    (..., P, R), computed from the differences (exact; torch may use a matmul form for large
    p=2 inputs). Gradients as torch's: 0 where a distance is 0."""
    x1, x2 = _promote(x1, x2)
    require_float(x1.type, "x1")
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(_where(f"cdist: x1 {format_shape(x1.shape)} and x2 {format_shape(x2.shape)} must be "
                                "(..., P, M) and (..., R, M)"))
    if p < 0:
        raise ShapeError(_where(f"cdist: p must be >= 0, got {p}"))
    return _norms(expand_dims(x1, -2) - expand_dims(x2, -3), float(p))


def _norms(diff: Tensor, p: float) -> Tensor:
    """The p-norms of differences over their last axis, with torch's gradient: 0 where a norm is 0."""
    diff = abs(diff)
    if p == 0:
        return reduce_sum(cast(not_equal(diff, 0), diff.dtype), -1)
    if p == np.inf:                              # with no coordinates the distance is 0, as torch
        return reduce_max(diff, -1) if isinstance(diff.shape[-1], int) and diff.shape[-1] else \
            maximum(reduce_max(diff, -1), 0)
    if p == 1:
        return reduce_sum(diff, -1)
    total = reduce_sum(power(diff, p), -1)
    positive = greater(total, 0)                 # the root's derivative is infinite at 0: keep it out
    root = power(where(positive, total, np.ones((), diff.dtype)), 1 / p) if p != 2 else \
        sqrt(where(positive, total, np.ones((), diff.dtype)))
    return where(positive, root, np.zeros((), diff.dtype))


def pdist(x, p: float = 2.0) -> Tensor:
    """torch.pdist: the p-norm distances between the rows of x (N, M) for each pair i < j, in that
    order (row-major over the upper triangle), (N (N - 1) / 2,); gradients as cdist's."""
    x = as_tensor(x)
    require_float(x.type, "x")
    if x.ndim != 2:
        raise ShapeError(_where(f"pdist needs a matrix (N, M), got {format_shape(x.shape)}"))
    if p < 0:
        raise ShapeError(_where(f"pdist: p must be >= 0, got {p}"))
    (n,) = _static_dims(x, (0,), "pdist")
    i, j = np.triu_indices(n, 1)
    return _norms(take(x, i.astype(np.int64), 0) - take(x, j.astype(np.int64), 0), float(p))
