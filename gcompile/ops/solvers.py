"""Dense matrix solvers and what is built on them: det, slogdet, logdet, inv, solve, cholesky,
qr, solve_triangular, cholesky_solve, matrix_power and multi_dot (the spectral decompositions:
ops/decompositions.py).

ONNX has no matrix solver, so the solvers are written out as ai.onnx ops for a static matrix
size n <= MAX_SOLVE_SIZE (leading batch dims may be symbolic): Gauss-Jordan elimination with
partial pivoting (inv, solve), Gaussian elimination with partial pivoting (det, slogdet: the
product of the pivots and the permutation's sign), and Cholesky's column recurrence. Each step
works on whole rows, so a solver emits O(n) nodes. Their gradients are the standard matrix
identities written with these same ops (d inv = -inv^T g inv^T, d det = g det inv^T, ...), so
they differentiate again. qr is Householder's reflections written with traced ops (gradients
by composition).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import defop
from .basic import stop_gradient
from .elementwise import _promote, greater, greater_equal, sqrt, where
from .indexing import slice_axes
from .linalg import matmul
from .matrices import _mT, _where
from .reduce import sum as reduce_sum
from .shape import broadcast_to, expand_dims, squeeze
from .shape_rules import broadcast_shapes, require_float

__all__ = ["cholesky", "cholesky_solve", "det", "inv", "logdet", "matrix_power", "multi_dot", "qr", "slogdet", "solve",
           "solve_triangular"]

MAX_SOLVE_SIZE = 32


# -- the solvers -------------------------------------------------------------------------------------------
def _square(types, what: str):
    a = types[0]
    require_float(a, what)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or not isinstance(a.shape[-1], int):
        raise ShapeError(f"{what} needs square matrices (..., n, n) with a static n, got {format_shape(a.shape)}")
    if a.shape[-1] > MAX_SOLVE_SIZE:
        raise UnsupportedError(f"{what}: matrices of size {a.shape[-1]} are beyond the unrolled solver's bound "
                               f"({MAX_SOLVE_SIZE}): ONNX has no matrix solver op, and gcompile writes the "
                               "elimination out step by step. A large system solved for gc.custom_root or "
                               "gc.fixed_point takes adjoint='iterative' (conjugate gradients, no matrix)")
    return a


class _Rows:
    """Emits the row operations of an elimination on M (..., n, w) into a LowerContext."""

    def __init__(self, ctx, m: str, n: int, rank: int, dtype):
        self.ctx, self.m, self.n, self.rank, self.dtype = ctx, m, n, rank, np.dtype(dtype)
        self.rows = ctx.int64s(range(n))

    def scalar(self, value) -> str:
        return self.ctx.const(np.asarray(value, self.dtype))

    def column(self, k: int) -> str:
        """M[..., :, k] as (..., n, 1)."""
        return self.ctx.emit("Gather", [self.m, self.ctx.int64s([k])], axis=self.rank - 1)

    def row(self, k: int) -> str:
        """M[..., k, :] as (..., 1, w)."""
        return self.ctx.emit("Gather", [self.m, self.ctx.int64s([k])], axis=self.rank - 2)

    def pivot(self, k: int) -> str:
        """Swap into row k the row at or below k with the largest |M[.., k]| (the first of ties);
        returns the int64 pivot row (..., 1, 1)."""
        ctx = self.ctx
        col = ctx.emit("Abs", [self.column(k)])                                    # (..., n, 1)
        below = ctx.const((np.arange(self.n) >= k).reshape(self.n, 1))
        col = ctx.emit("Where", [below, col, self.scalar(-1)])
        p = ctx.emit("ArgMax", [col], axis=self.rank - 2, keepdims=1, select_last_index=0)   # (..., 1, 1)
        rows = ctx.const(np.arange(self.n, dtype=np.int64).reshape(self.n, 1))
        k_ = ctx.const(np.asarray(k, np.int64))
        perm = ctx.emit("Where", [ctx.emit("Equal", [rows, k_]), p,
                                  ctx.emit("Where", [ctx.emit("Equal", [rows, p]), k_, rows])])   # (..., n, 1)
        perm = ctx.emit("Expand", [perm, ctx.emit("Shape", [self.m])])
        self.m = ctx.emit("GatherElements", [self.m, perm], axis=self.rank - 2)
        return p

    def eliminate(self, k: int, pivot: str, jordan: bool) -> None:
        """Subtract multiples of row k from the rows below it (and above it with jordan=True, which
        also divides row k by its pivot)."""
        ctx = self.ctx
        row = ctx.emit("Div", [self.row(k), pivot])                               # (..., 1, w)
        factors = self.column(k)                                                   # (..., n, 1)
        others = np.arange(self.n) != k if jordan else np.arange(self.n) > k
        factors = ctx.emit("Mul", [factors, ctx.const(others.reshape(self.n, 1).astype(self.dtype))])
        self.m = ctx.emit("Sub", [self.m, ctx.emit("Mul", [factors, row])])
        if jordan:
            is_k = ctx.const((np.arange(self.n) == k).reshape(self.n, 1))
            self.m = ctx.emit("Where", [is_k, row, self.m])

    def diagonal_entry(self, k: int) -> str:
        """M[..., k, k] as (..., 1, 1)."""
        return self.ctx.emit("Gather", [self.row(k), self.ctx.int64s([k])], axis=self.rank - 1)


def _gauss_jordan(ctx, a: str, b: str, n: int, rank: int, dtype) -> str:
    """[A | B] reduced to [I | A^-1 B]; returns A^-1 B."""
    rows = _Rows(ctx, ctx.emit("Concat", [a, b], axis=rank - 1), n, rank, dtype)
    for k in range(n):
        rows.pivot(k)
        rows.eliminate(k, rows.diagonal_entry(k), jordan=True)
    width = ctx.const(np.asarray([n], np.int64))
    return ctx.emit("Slice", [rows.m, width, ctx.int64s([2 ** 62]), ctx.int64s([rank - 1])])


def _pivots(ctx, a: str, n: int, rank: int, dtype) -> tuple[list[str], str]:
    """Gaussian elimination with partial pivoting: the pivots (each (..., 1, 1)) and the sign of
    the row permutation (..., 1, 1). A zero pivot (singular A) is kept, and rows are divided by 1
    instead, so the elimination stays finite and the product of the pivots is 0."""
    rows = _Rows(ctx, a, n, rank, dtype)
    pivots, sign = [], rows.scalar(1)
    for k in range(n):
        p = rows.pivot(k)
        swapped = ctx.emit("Equal", [p, ctx.const(np.asarray(k, np.int64))])
        sign = ctx.emit("Mul", [sign, ctx.emit("Where", [swapped, rows.scalar(1), rows.scalar(-1)])])
        pivot = rows.diagonal_entry(k)
        pivots.append(pivot)
        safe = ctx.emit("Where", [ctx.emit("Equal", [pivot, rows.scalar(0)]), rows.scalar(1), pivot])
        rows.eliminate(k, safe, jordan=False)
    return pivots, sign


def _product(ctx, names: list[str]) -> str:
    out = names[0]
    for name in names[1:]:
        out = ctx.emit("Mul", [out, name])
    return out


def _batch(ctx, name: str, rank: int) -> str:
    """(..., 1, 1) -> (...)."""
    return ctx.emit("Squeeze", [name, ctx.int64s([rank - 2, rank - 1])])


def _linalg_reference(fn, like: int | None = None):
    """The reference of a numpy.linalg function: computed in float32 for float16 operands (numpy's
    linalg has no float16) and rounded back to the operands' dtype, and, where `like` is given, NaN
    (shaped like operand `like`) for a singular matrix instead of raising: ONNX Runtime cannot raise
    at run time, and constant folding must not crash."""
    def reference(*arrays):
        dtype = arrays[0].dtype
        wide = [a.astype(np.float32) if a.dtype == np.float16 else a for a in arrays]
        try:
            out = fn(*wide)
        except np.linalg.LinAlgError:
            if like is None:
                raise
            return np.full_like(arrays[like], np.nan)
        return tuple(np.asarray(o, dtype) for o in out) if isinstance(out, tuple) else np.asarray(out, dtype)
    return reference


# inv
def _lower_inv(ctx, names, node):
    t = ctx.graph.type_of(node.inputs[0])
    n = t.shape[-1]
    eye = ctx.emit("Expand", [ctx.const(np.eye(n, dtype=t.dtype)), ctx.emit("Shape", [names[0]])])
    return _gauss_jordan(ctx, names[0], eye, n, t.ndim, t.dtype)


def _inv_vjp(g, ins, outs):
    y = _mT(outs[0])
    return [-matmul(matmul(y, g[0]), y)]


defop("inv", infer=lambda types: [_square(types, "inv")], reference=_linalg_reference(np.linalg.inv, 0),
      lower=_lower_inv, vjp=_inv_vjp)


def inv(a) -> Tensor:
    """numpy.linalg.inv of square matrices (..., n, n) with a static n <= MAX_SOLVE_SIZE: Gauss-Jordan
    elimination with partial pivoting. A singular matrix gives infinities or NaN (no error at run
    time)."""
    a = as_tensor(a)
    return apply("inv", [a if is_float(a.dtype) else a.astype(np.float32)])


# solve
def _solve_infer(types):
    a, b = types
    _square([a], "solve")
    if b.dtype != a.dtype or b.ndim != a.ndim or b.shape[-2] != a.shape[-1] or b.shape[:-2] != a.shape[:-2]:
        raise ShapeError(f"solve: b {format_shape(b.shape)} must be (..., {a.shape[-1]}, k) with a's batch dims "
                         f"and dtype ({a.dtype.name}{format_shape(a.shape)})")
    return [b]


def _lower_solve(ctx, names, node):
    t = ctx.graph.type_of(node.inputs[0])
    return _gauss_jordan(ctx, names[0], names[1], t.shape[-1], t.ndim, t.dtype)


def _solve_vjp(g, ins, outs):
    a = ins[0]
    gb = apply("solve", [_mT(a), g[0]])
    return [-matmul(gb, _mT(outs[0])), gb]


defop("solve", infer=_solve_infer, reference=_linalg_reference(np.linalg.solve, 1), lower=_lower_solve, vjp=_solve_vjp)


def solve(a, b) -> Tensor:
    """numpy.linalg.solve: x with a @ x = b, for square a (..., n, n) (static n <= MAX_SOLVE_SIZE) and b
    (..., n, k), or a 1-d b (n,) (numpy 2's rule); batch dims broadcast. Gauss-Jordan elimination
    with partial pivoting."""
    a, b = _promote(a, b)
    if not is_float(a.dtype):
        a, b = a.astype(np.float32), b.astype(np.float32)
    vector = b.ndim == 1
    if vector:
        b = expand_dims(b, -1)
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(_where(f"solve: a {format_shape(a.shape)} must be (..., n, n)"))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    x = apply("solve", [broadcast_to(a, batch + a.shape[-2:]), broadcast_to(b, batch + b.shape[-2:])])
    return squeeze(x, -1) if vector else x


# det and slogdet
def _filled(ctx, node, value) -> str:
    """`value` in the batch shape: for 0 x 0 matrices, whose determinant is the empty product, 1
    (without an elimination, which would have no pivot to start from)."""
    t = node.outputs[0]
    return ctx.emit("Expand", [ctx.const(np.asarray(value, t.dtype)), ctx.shape_tensor(t.shape)])


def _lower_det(ctx, names, node):
    t = ctx.graph.type_of(node.inputs[0])
    if t.shape[-1] == 0:
        return _filled(ctx, node, 1)
    pivots, sign = _pivots(ctx, names[0], t.shape[-1], t.ndim, t.dtype)
    return _batch(ctx, ctx.emit("Mul", [sign, _product(ctx, pivots)]), t.ndim)


def _det_vjp(g, ins, outs):
    scale = expand_dims(g[0] * outs[0], (-2, -1))
    return [scale * _mT(apply("inv", [ins[0]]))]


defop("det", infer=lambda types: [tensor_type(_square(types, "det").dtype, types[0].shape[:-2])],
      reference=_linalg_reference(np.linalg.det), lower=_lower_det, vjp=_det_vjp)


def _lower_slogdet(ctx, names, node):
    t = ctx.graph.type_of(node.inputs[0])
    if t.shape[-1] == 0:
        return [_filled(ctx, node, 1), _filled(ctx, node, 0)]
    pivots, sign = _pivots(ctx, names[0], t.shape[-1], t.ndim, t.dtype)
    signs = [ctx.emit("Sign", [p]) for p in pivots]
    logs = [ctx.emit("Log", [ctx.emit("Abs", [p])]) for p in pivots]
    total = logs[0]
    for name in logs[1:]:
        total = ctx.emit("Add", [total, name])
    return [_batch(ctx, ctx.emit("Mul", [sign, _product(ctx, signs)]), t.ndim), _batch(ctx, total, t.ndim)]


def _slogdet_vjp(g, ins, outs):
    if g[1] is None:
        return [None]
    return [expand_dims(g[1], (-2, -1)) * _mT(apply("inv", [ins[0]]))]


defop("slogdet", infer=lambda types: [tensor_type(_square(types, "slogdet").dtype, types[0].shape[:-2])] * 2,
      reference=_linalg_reference(lambda a: tuple(np.linalg.slogdet(a))), lower=_lower_slogdet, vjp=_slogdet_vjp,
      n_outputs=2)


def det(a) -> Tensor:
    """numpy.linalg.det of square matrices (..., n, n), static n <= MAX_SOLVE_SIZE: the product of the
    pivots of Gaussian elimination with partial pivoting, signed by the row swaps (0 for a singular
    matrix). Its gradient g·det·inv(a)^T needs an invertible a."""
    a = as_tensor(a)
    return apply("det", [a if is_float(a.dtype) else a.astype(np.float32)])


def slogdet(a) -> tuple[Tensor, Tensor]:
    """numpy.linalg.slogdet: (sign, log|det|) of square matrices, from the same elimination as det
    (sign 0 and -inf for a singular matrix). The gradient of log|det| is inv(a)^T."""
    a = as_tensor(a)
    sign, logabs = apply_n("slogdet", [a if is_float(a.dtype) else a.astype(np.float32)])
    return sign, logabs


# cholesky
def _lower_cholesky(ctx, names, node):
    """Column by column: v = A[:, j] - L L[j, :]^T, L[j, j] = sqrt(v[j]), L[i, j] = v[i] / L[j, j]
    below; the columns not yet computed are zero in L, so the product needs no masking."""
    t = ctx.graph.type_of(node.inputs[0])
    n, rank = t.shape[-1], t.ndim
    rows = _Rows(ctx, names[0], n, rank, t.dtype)
    low = ctx.emit("Mul", [names[0], ctx.const(np.zeros((n, n), t.dtype))])      # zeros of A's shape
    for j in range(n):
        lj = ctx.emit("Gather", [low, ctx.int64s([j])], axis=rank - 2)           # (..., 1, n): L[j, :]
        v = ctx.emit("Sub", [rows.column(j), ctx.emit("MatMul", [low, ctx.emit("Transpose", [lj], perm=[
            *range(rank - 2), rank - 1, rank - 2])])])                            # (..., n, 1)
        d = ctx.emit("Sqrt", [ctx.emit("Gather", [v, ctx.int64s([j])], axis=rank - 2)])   # (..., 1, 1)
        below = ctx.const((np.arange(n) >= j).reshape(n, 1).astype(t.dtype))
        col = ctx.emit("Mul", [ctx.emit("Div", [v, d]), below])
        low = ctx.emit("Add", [low, ctx.emit("Mul", [col, ctx.const(np.eye(n, dtype=t.dtype)[j:j + 1])])])
    return low


def _cholesky_vjp(g, ins, outs):
    """gA = sym(L^-T Φ(L^T gL) L^-1), Φ keeping the lower triangle with its diagonal halved."""
    low = outs[0]
    n = low.shape[-1]
    phi = matmul(_mT(low), g[0]) * (np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)).astype(low.dtype)
    low_inv = apply("inv", [low])
    s = matmul(matmul(_mT(low_inv), phi), low_inv)
    return [(s + _mT(s)) * 0.5]


defop("cholesky", infer=lambda types: [_square(types, "cholesky")], reference=_linalg_reference(np.linalg.cholesky, 0),
      lower=_lower_cholesky, vjp=_cholesky_vjp)


def cholesky(a) -> Tensor:
    """numpy.linalg.cholesky: the lower-triangular L with L L^T = a, for symmetric positive-definite
    a (..., n, n), static n <= MAX_SOLVE_SIZE (only a's lower triangle is read, as LAPACK; a matrix
    that is not positive definite gives NaN). The gradient treats a as symmetric, as torch."""
    a = as_tensor(a)
    return apply("cholesky", [a if is_float(a.dtype) else a.astype(np.float32)])


# qr
def qr(a, mode: str = "reduced"):
    """numpy.linalg.qr / torch.linalg.qr of (..., m, n) with static m, n (min(m, n) <= MAX_SOLVE_SIZE):
    mode "reduced" gives Q (..., m, k) and R (..., k, n) with k = min(m, n), "complete" Q (..., m, m)
    and R (..., m, n), "r" R alone. Householder reflections as LAPACK's geqrf takes them (R's
    diagonal is -sign(a_jj)·‖column‖, a column already zero below the diagonal is left as it is),
    so Q and R carry LAPACK's signs, which numpy and torch return. Written with traced ops, so
    gradients of every order follow (where the column norms are nonzero)."""
    a = as_tensor(a)
    a = a if is_float(a.dtype) else a.astype(np.float32)
    if mode not in ("reduced", "complete", "r"):
        raise ShapeError(_where(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}"))
    if a.ndim < 2 or not all(isinstance(d, int) for d in a.shape[-2:]):
        raise ShapeError(_where(f"qr needs matrices (..., m, n) with static m and n, got {format_shape(a.shape)}"))
    k = min(a.shape[-2:])
    if k > MAX_SOLVE_SIZE:
        raise UnsupportedError(_where(f"qr: {k} reflections are beyond the unrolled bound ({MAX_SOLVE_SIZE})"))
    return householder(a, mode)


def householder(a: Tensor, mode: str):
    """qr's reflections on float matrices a (..., m, n) with static m, n, without qr's bound on their
    number (the SVD's completion of U takes as many as a has columns)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    r = a
    q = broadcast_to(np.eye(m, dtype=a.dtype), a.shape[:-2] + (m, m))
    rows = np.arange(m).reshape(m, 1)
    zero, one = np.zeros((), a.dtype), np.ones((), a.dtype)
    for j in range(k):
        col = slice_axes(r, (r.ndim - 1,), (j,), (j + 1,), (1,))                      # (..., m, 1)
        alpha = slice_axes(col, (col.ndim - 2,), (j,), (j + 1,), (1,))                 # (..., 1, 1)
        below = where(rows > j, col, zero)
        tail = reduce_sum(below * below, -2, keepdims=True)
        reflect = greater(tail, 0)                                                       # else H = I
        norm = sqrt(alpha * alpha + tail)
        beta = where(greater_equal(alpha, 0), -norm, norm)
        safe_beta = where(reflect, beta, one)
        tau = where(reflect, (beta - alpha) / safe_beta, zero)
        v = where(rows == j, one, below / where(reflect, alpha - beta, one))           # (..., m, 1)
        r = r - tau * matmul(v, matmul(_mT(v), r))
        q = q - tau * matmul(matmul(q, v), _mT(v))
    upper = np.triu(np.ones((m, n), a.dtype))                    # exact zeros below the diagonal, as LAPACK
    r = r * upper
    if mode == "r":
        return slice_axes(r, (r.ndim - 2,), (0,), (k,), (1,))
    if mode == "complete":
        return q, r
    return slice_axes(q, (q.ndim - 1,), (0,), (k,), (1,)), slice_axes(r, (r.ndim - 2,), (0,), (k,), (1,))


# -- compositions of the solvers ------------------------------------------------------------------------------
def logdet(a) -> Tensor:
    """torch.logdet: log(det(a)) of square matrices, NaN where det < 0 and -inf where it is 0; from
    slogdet, so its gradient is inv(a)^T."""
    sign, logabs = slogdet(a)
    return where(sign < 0, np.asarray(np.nan, logabs.dtype), logabs)


def matrix_power(a, n: int) -> Tensor:
    """numpy.linalg.matrix_power / torch.linalg.matrix_power: a^n for square a (..., m, m) by repeated
    squaring; n = 0 gives the identity, n < 0 the power of inv(a)."""
    a = as_tensor(a)
    if not isinstance(n, (int, np.integer)):
        raise ShapeError(_where(f"matrix_power: n must be an int, got {n!r}"))
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or not isinstance(a.shape[-1], int):
        raise ShapeError(_where(f"matrix_power needs square matrices (..., m, m) with a static m, got "
                                f"{format_shape(a.shape)}"))
    if n == 0:
        return broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    base = inv(a) if n < 0 else a
    n = -int(n) if n < 0 else int(n)
    result: Tensor | None = None
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return base if result is None else result


def multi_dot(tensors) -> Tensor:
    """numpy.linalg.multi_dot / torch.linalg.multi_dot: the product of a chain of matrices, the first
    may be a 1-d row vector and the last a 1-d column vector; multiplied left to right."""
    tensors = [as_tensor(t) for t in tensors]
    if len(tensors) < 2:
        raise ShapeError(_where(f"multi_dot needs at least two operands, got {len(tensors)}"))
    if any(t.ndim != 2 for t in tensors[1:-1]) or any(t.ndim not in (1, 2) for t in (tensors[0], tensors[-1])):
        raise ShapeError(_where(f"multi_dot: operands must be matrices (the first and last may be vectors), got "
                                f"{', '.join(format_shape(t.shape) for t in tensors)}"))
    out = tensors[0]
    for t in tensors[1:]:
        out = matmul(out, t)
    return out


def _triangle_of(a: Tensor, upper: bool, unitriangular: bool) -> Tensor:
    n = a.shape[-1]
    keep = (np.triu if upper else np.tril)(np.ones((n, n), bool))
    part = where(keep & ~np.eye(n, dtype=bool) if unitriangular else keep, a, np.zeros((), a.dtype))
    return part + np.eye(n, dtype=a.dtype) if unitriangular else part


def solve_triangular(a, b, upper: bool = False, left: bool = True, unitriangular: bool = False) -> Tensor:
    """torch.linalg.solve_triangular: x with a @ x = b (left=True) or x @ a = b (left=False), reading
    only a's upper or lower triangle (its diagonal taken as ones with unitriangular=True); batch dims
    broadcast. Solved by the elimination of `solve` on that triangle, so the gradient reaches only
    the triangle read."""
    a, b = _promote(a, b)
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(_where(f"solve_triangular: a {format_shape(a.shape)} and b {format_shape(b.shape)} must "
                                "be (..., n, n) and (..., n, k)"))
    tri = _triangle_of(a, bool(upper), bool(unitriangular))
    if left:
        return solve(tri, b)
    return _mT(solve(_mT(tri), _mT(b)))


def cholesky_solve(b, factor, upper: bool = False) -> Tensor:
    """torch.cholesky_solve: x with (L L^T) x = b for the Cholesky factor L (lower; with upper=True the
    factor is U and the matrix U^T U), batch dims broadcast. Only the factor's triangle is read, but
    the gradient is torch's: that of (L L^T)^-1 b in every entry of L (the triangle's value, the
    whole matrix's derivative)."""
    b, factor = _promote(b, factor)
    if factor.ndim < 2 or factor.shape[-1] != factor.shape[-2] or not isinstance(factor.shape[-1], int):
        raise ShapeError(_where(f"cholesky_solve: the factor must be square (..., n, n), got "
                                f"{format_shape(factor.shape)}"))
    n = factor.shape[-1]
    outside = ~(np.triu if upper else np.tril)(np.ones((n, n), bool))
    read = _triangle_of(factor, bool(upper), False)
    low = read + where(outside, factor - stop_gradient(factor), np.zeros((), factor.dtype))
    low = _mT(low) if upper else low
    return solve(matmul(low, _mT(low)), b)
