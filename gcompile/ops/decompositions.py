"""Spectral decompositions and what is built on them: eigh, eigvalsh, svd, svdvals, pinv, lstsq,
matrix_rank and matrix_exp, for matrices of a static size (the shorter side at most MAX_SIZE;
leading batch dims may be symbolic).

ONNX has no eigensolver, and eigenvalues have no finite exact algorithm, so the forward is an
iteration run to convergence at run time, written with traced ops inside a `gc.while_loop` (an
ONNX Loop with a condition): cyclic Jacobi sweeps. Each sweep is n - 1 rounds (n for an odd n) of
disjoint rotations at once (the round-robin order), each round one product with a rotation matrix
assembled from the pairs' cosines and sines, so a sweep is O(n) nodes in the loop's body. eigh
rotates A's rows and columns until its off-diagonal part is below the dtype's rounding (two-sided
Jacobi: eigenvalues to high relative accuracy); svd rotates the columns of A (of Aᵀ when A is
wide) until they are orthogonal to the dtype's rounding (one-sided, Hestenes' Jacobi: no AᵀA,
whose squared condition number would cost small singular values their digits), the singular values
are the column norms and U is the Q of a Householder QR of the rotated columns, which completes it
to an orthonormal basis where A is rank-deficient or full_matrices asks for more columns than A has.
Both stop after MAX_SWEEPS sweeps at the latest (the iteration converges quadratically: a few
sweeps). Eigenvalues come ascending, singular values descending, and each eigenvector, left
singular vector, is signed so that its entry of largest magnitude (the first of ties) is positive,
its right singular vector following; a repeated eigenvalue's vectors are some orthonormal basis of
its eigenspace. Non-finite input gives NaN throughout.

matrix_exp is scaling and squaring: the degree-18 Taylor polynomial of A/2^s, evaluated with 7
products (Paterson-Stockmeyer), then squared s times, s chosen per matrix at run time from its
1-norm (the loop of squarings is a while loop too, each matrix squaring only its own s times).

The iterations are not differentiated: each decomposition's result goes through one node (the op
`eigh`, `svd`, `pinv` or `matrix_exp`, which passes its computed operands on) whose VJP is the
closed form, written with traced ops, so gradients of every order follow, as PyTorch's:
- eigh: gA = V (diag(gw) + F ∘ skew(Vᵀ gV)) Vᵀ, F_ij = 1/(w_j - w_i); through the eigenvalues
  alone (eigvalsh) it is V diag(gw) Vᵀ, finite everywhere.
- svd: torch's svd_backward (the divided differences 1/(s_j² - s_i²), and for a non-square A the
  terms through the extra dimensions, which divide by s).
- pinv: Golub and Pereyra's derivative at constant rank (torch's pinv_backward), finite at rank
  deficiency; lstsq is pinv(a) @ b, so its gradient is torch's.
- matrix_exp: the Fréchet derivative, the upper-right block of exp([[Aᵀ, G], [0, Aᵀ]]).
Degenerate spectra: where two eigenvalues (singular values) agree to within the dtype's rounding
(|w_i - w_j| <= 8 n eps max|w|), the eigenvectors (singular vectors) are not determined, and a
gradient that flows through them is NaN, by design and as PyTorch's and JAX's (they divide by the
difference): a loss of the eigenvectors is differentiable there only in special cases, and the
value would depend on the limit taken (docs/guide/limitations.md). Gradients through eigenvalues
or singular values alone, and through pinv, stay finite; so does svd's where a zero singular value
is simple and A is square.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.registry import defop
from .basic import cast, stop_gradient
from .control import while_loop
from .elementwise import _promote, abs, ceil, equal, greater, less, less_equal, log2, maximum, rsqrt, sqrt, where
from .indexing import concat, slice_axes, take, take_along_axis
from .linalg import matmul
from .matrices import _mT, _where
from .nonfinite import isfinite
from .reduce import all as reduce_all
from .reduce import any as reduce_any
from .reduce import max as reduce_max
from .reduce import sum as reduce_sum
from .shape import broadcast_to, expand_dims, reshape, squeeze
from .shape_rules import broadcast_shapes, require_float
from .solvers import householder
from .sorting import argmax, argsort

__all__ = ["eigh", "eigvalsh", "lstsq", "matrix_exp", "matrix_rank", "pinv", "svd", "svdvals"]

MAX_SIZE = 64            # the shorter side's bound: a sweep's body grows with it, and the SVD's QR is unrolled
MAX_SWEEPS = 30          # Jacobi sweeps at most (convergence is quadratic: 5 to 10 for n <= 32 in float64)


# -- operands ------------------------------------------------------------------------------------------------
def _matrices(a, what: str, square: bool = False) -> Tensor:
    a = as_tensor(a)
    a = a if is_float(a.dtype) else cast(a, np.float32)
    if a.ndim < 2 or not all(isinstance(d, int) for d in a.shape[-2:]):
        raise ShapeError(_where(f"{what} needs matrices (..., m, n) with static m and n, got {format_shape(a.shape)}"))
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(_where(f"{what} needs square matrices (..., n, n), got {format_shape(a.shape)}"))
    if min(a.shape[-2:]) > MAX_SIZE:
        raise UnsupportedError(_where(f"{what}: matrices of size {format_shape(a.shape[-2:])} are beyond the bound "
                                      f"({MAX_SIZE}) of the Jacobi iteration gcompile writes out (ONNX has no "
                                      "eigensolver or SVD op)"))
    return a


def _eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def _zeros(x: Tensor) -> np.ndarray:
    return np.zeros((), x.dtype)


def _ones(x: Tensor) -> np.ndarray:
    return np.ones((), x.dtype)


def _finite(a: Tensor) -> tuple[Tensor, Tensor]:
    """(a with its non-finite matrices replaced by zeros, the mask (..., 1, 1) of the finite ones):
    the iteration runs on finite numbers only (a NaN in its stopping test would stop every matrix of
    the batch), and the results of a non-finite matrix are made NaN after it."""
    ok = reduce_all(isfinite(a), (-2, -1), keepdims=True)
    return where(ok, a, _zeros(a)), ok


def _in_float32_for_float16(compute):
    """compute(a), run in float32 where a is float16 and its results cast back: the iterations'
    tolerances are the dtype's rounding, which float16's is too coarse for (numpy's linalg has no
    float16 either)."""
    def run(a: Tensor, *args):
        if a.dtype != np.float16:
            return compute(a, *args)
        out = compute(cast(a, np.float32), *args)
        return tuple(cast(t, np.float16) for t in out) if isinstance(out, tuple) else cast(out, np.float16)
    run.__name__, run.__doc__ = compute.__name__, compute.__doc__
    return run


def _nan_unless(ok: Tensor, x: Tensor) -> Tensor:
    """x where its matrix was finite, NaN where it was not (ok is (..., 1, 1); x is (..., k) or (..., k, l))."""
    ok = ok if x.ndim == ok.ndim else squeeze(ok, -1)
    return where(ok, x, np.asarray(np.nan, x.dtype))


# -- Jacobi rotations ------------------------------------------------------------------------------------------
def _round_robin(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The rounds of a sweep: n - 1 rounds (n for an odd n) of disjoint pairs (p < q) covering every
    pair of 0..n-1 once (the circle method on an even number of seats, 0 staying and the others
    turning; an odd n gets one more seat, and who sits beside it sits out that round)."""
    m = n + n % 2
    ring = list(range(1, m))
    rounds = []
    for _ in range(m - 1):
        seats = [0] + ring
        pairs = sorted(tuple(sorted((seats[i], seats[m - 1 - i]))) for i in range(m // 2))
        pairs = [(p, q) for p, q in pairs if q < n]
        rounds.append((np.array([p for p, _ in pairs], np.int64), np.array([q for _, q in pairs], np.int64)))
        ring = ring[-1:] + ring[:-1]
    return rounds


class _Rounds:
    """The rounds of one sweep on n indices, with the constants that assemble each round's rotation
    J = c @ cos + s @ sin + still, flattened (..., n*n), from the pairs' cosines c and sines s
    (..., pairs): J[p, p] = J[q, q] = c, J[p, q] = s, J[q, p] = -s, and 1 on the diagonal of the
    index that sits the round out."""

    def __init__(self, n: int, dtype):
        self.n = n
        self.rounds = []
        for p, q in _round_robin(n):
            k, at = len(p), np.arange(len(p))
            cos, sin = np.zeros((k, n, n), dtype), np.zeros((k, n, n), dtype)
            cos[at, p, p] = cos[at, q, q] = 1
            sin[at, p, q], sin[at, q, p] = 1, -1
            still = np.diag((~np.isin(np.arange(n), np.r_[p, q])).astype(dtype)).reshape(n * n)
            self.rounds.append((p, q, cos.reshape(k, n * n), sin.reshape(k, n * n), still))

    def rotation(self, c: Tensor, s: Tensor, cos: np.ndarray, sin: np.ndarray, still: np.ndarray) -> Tensor:
        flat = matmul(c, cos) + matmul(s, sin)
        if still.any():
            flat = flat + still
        return reshape(flat, c.shape[:-1] + (self.n, self.n))


def _angle(diff: Tensor, off: Tensor) -> tuple[Tensor, Tensor]:
    """Cosine and sine of the rotation that zeroes `off` between two entries differing by `diff`
    (τ = diff / 2·off; t = sign(τ)/(|τ| + sqrt(1 + τ²)), the smaller angle; t = 0 where off is 0)."""
    zero = equal(off, 0)
    tau = diff / (2 * where(zero, _ones(off), off))
    sign = where(less(tau, 0), -_ones(tau), _ones(tau))
    t = where(zero, _zeros(tau), sign / (abs(tau) + sqrt(1 + tau * tau)))
    c = rsqrt(1 + t * t)
    return c, t * c


def _eye(n: int, like: Tensor) -> Tensor:
    return broadcast_to(np.eye(n, dtype=like.dtype), like.shape[:-2] + (n, n))


def _jacobi_eigen(a: Tensor) -> tuple[Tensor, Tensor]:
    """Two-sided cyclic Jacobi on symmetric finite a (..., n, n): (diagonal, accumulated rotations)."""
    n = a.shape[-1]
    sweep = _Rounds(n, a.dtype)
    off_mask = (1 - np.eye(n)).astype(a.dtype)
    tol = _eps(a.dtype) * n

    def unconverged(state):
        x, _, k = state
        off = reduce_sum(x * x * off_mask, (-2, -1))
        return _within_sweeps(reduce_any(greater(off, tol * tol * reduce_sum(x * x, (-2, -1)))), k)

    def body(state):
        x, v, k = state
        for p, q, cos, sin, still in sweep.rounds:
            flat = reshape(x, x.shape[:-2] + (n * n,))
            app, aqq, apq = (take(flat, i * n + j, -1) for i, j in ((p, p), (q, q), (p, q)))
            c, s = _angle(aqq - app, apq)
            j = sweep.rotation(c, s, cos, sin, still)
            zeroed = np.ones((n, n), a.dtype)               # what the rotations zero, rounding aside
            zeroed[p, q] = zeroed[q, p] = 0
            x = matmul(_mT(j), matmul(x, j)) * zeroed
            v = matmul(v, j)
        return (x + _mT(x)) * 0.5, v, k + 1

    x, v, _ = while_loop(unconverged, body, (a, _eye(n, a), as_tensor(np.int64(0))))
    return take(reshape(x, x.shape[:-2] + (n * n,)), np.arange(n, dtype=np.int64) * (n + 1), -1), v


def _within_sweeps(go: Tensor, k: Tensor) -> Tensor:
    """go (a bool scalar) while fewer than MAX_SWEEPS sweeps ran."""
    return go & less(k, MAX_SWEEPS)


def _signs(v: Tensor, k: int, total: int) -> Tensor:
    """(..., total) signs making the entry of largest magnitude (the first of ties) of each of v's
    first k columns positive, and 1 for the others. The entry is picked with a one-hot mask, not a
    gather: OpenVINO 2026.4's CPU plugin fails to compile a GatherElements that reads a Slice."""
    first = slice_axes(v, (v.ndim - 1,), (0,), (k,), (1,))
    at = argmax(abs(first), axis=-2, keepdims=True)                                           # (..., 1, k)
    rows = np.arange(v.shape[-2], dtype=np.int64).reshape(-1, 1)
    top = reduce_sum(where(equal(at, rows), first, _zeros(v)), -2)                            # (..., k)
    sign = where(less(top, 0), -_ones(v), _ones(v))
    if total > k:
        sign = concat([sign, broadcast_to(_ones(v), sign.shape[:-1] + (total - k,))], -1)
    return sign


def _sort_columns(values: Tensor, vectors: list[Tensor], descending: bool) -> tuple[Tensor, list[Tensor]]:
    order = argsort(values, -1, descending=descending)
    columns = expand_dims(order, -2)
    return take_along_axis(values, order, -1), [take_along_axis(v, broadcast_to(columns, v.shape[:-2] + (
        v.shape[-2], columns.shape[-1])), -1) for v in vectors]


# -- eigh ----------------------------------------------------------------------------------------------------
def _symmetric(a: Tensor, uplo: str) -> Tensor:
    if uplo not in ("L", "U"):
        raise ShapeError(_where(f"eigh: UPLO must be 'L' or 'U', got {uplo!r}"))
    n = a.shape[-1]
    keep = np.tril(np.ones((n, n), bool)) if uplo == "L" else np.triu(np.ones((n, n), bool))
    return where(keep, a, _mT(a))


@_in_float32_for_float16
def _eigh_values(a: Tensor, uplo: str) -> tuple[Tensor, Tensor]:
    """(w ascending, V signed) of the triangle `uplo` of a, computed without gradient."""
    sym, ok = _finite(stop_gradient(_symmetric(a, uplo)))
    n = a.shape[-1]
    if n == 0:
        return reduce_sum(sym, -1), sym
    w, v = _jacobi_eigen(sym)
    w, (v,) = _sort_columns(w, [v], descending=False)
    v = v * expand_dims(_signs(v, n, n), -2)
    return _nan_unless(ok, w), _nan_unless(ok, v)


def _degenerate(d: Tensor, scale: Tensor, n: int) -> Tensor:
    """Where a pair's difference d (..., k, k) is within the rounding of the spectrum's scale
    (..., 1, 1), off the diagonal: its vectors are not determined."""
    return less_equal(abs(d), scale * (8 * n * _eps(d.dtype))) & ~np.eye(d.shape[-1], dtype=bool)


def _inverse_gaps(d: Tensor, degenerate: Tensor) -> Tensor:
    """1/d off the diagonal, 0 on it, NaN where `degenerate` (d is written so that none is 0 there)."""
    diagonal = np.eye(d.shape[-1], dtype=bool)
    safe = where(degenerate | diagonal, _ones(d), d)
    return where(degenerate, np.asarray(np.nan, d.dtype), where(diagonal, _zeros(d), 1 / safe))


def _diag_embed(x: Tensor) -> Tensor:
    return expand_dims(x, -1) * np.eye(x.shape[-1], dtype=x.dtype)


def _eigh_vjp(g, ins, outs):
    gw, gv = g
    w, v = outs
    n = w.shape[-1]
    middle = _diag_embed(gw) if gw is not None else None
    if gv is not None and n:
        vgv = matmul(_mT(v), gv)
        gaps = expand_dims(w, -2) - expand_dims(w, -1)                               # w_j - w_i
        scale = expand_dims(reduce_max(abs(w), -1, keepdims=True), -1)
        part = (vgv - _mT(vgv)) * 0.5 * _inverse_gaps(gaps, _degenerate(gaps, scale, n))
        middle = part if middle is None else middle + part
    if middle is None:
        return [None, None, None]
    return [matmul(v, matmul(middle, _mT(v))), None, None]


def _pass_on_infer(n_lead: int):
    """The types of a result node: its operands after the first `n_lead` (the matrix it is of)."""
    return lambda types, **_: list(types[n_lead:])


defop("eigh", infer=_pass_on_infer(1), reference=lambda a, w, v: (w.copy(), v.copy()),
      lower=lambda ctx, names, node: [ctx.emit("Identity", [n]) for n in names[1:]], vjp=_eigh_vjp, n_outputs=2)


def eigh(a, UPLO: str = "L") -> tuple[Tensor, Tensor]:
    """numpy.linalg.eigh / torch.linalg.eigh: (w, V) with a = V diag(w) Vᵀ for symmetric a (..., n, n),
    static n <= MAX_SIZE, reading only the lower (UPLO="L") or upper triangle, as LAPACK. w is
    ascending; each eigenvector is signed so that its entry of largest magnitude is positive (LAPACK
    signs them otherwise: compare |V| or V diag(w) Vᵀ). Cyclic Jacobi at run time (module docstring).
    The gradient is PyTorch's, for a symmetric a (the whole matrix's, as torch gives it); through V it
    is NaN where eigenvalues repeat (docs/guide/limitations.md), through w alone always finite."""
    a = _matrices(a, "eigh", square=True)
    w, v = _eigh_values(a, UPLO)
    w, v = apply_n("eigh", [a, w, v])
    return w, v


def eigvalsh(a, UPLO: str = "L") -> Tensor:
    """numpy.linalg.eigvalsh / torch.linalg.eigvalsh: the ascending eigenvalues of eigh; the gradient
    V diag(gw) Vᵀ is finite also where eigenvalues repeat."""
    return eigh(a, UPLO)[0]


# -- svd -----------------------------------------------------------------------------------------------------
def _jacobi_columns(b: Tensor) -> tuple[Tensor, Tensor]:
    """One-sided Jacobi on the columns of finite b (..., m, n), m >= n: (B V with orthogonal columns,
    the accumulated rotations V)."""
    rows, n = b.shape[-2:]
    sweep = _Rounds(n, b.dtype)
    off_mask = (1 - np.eye(n)).astype(b.dtype)
    tol = _eps(b.dtype) * max(rows, n)

    def unconverged(state):
        x, _, k = state
        gram = matmul(_mT(x), x)
        norms = reduce_sum(gram * np.eye(n, dtype=b.dtype), -1)                        # (..., n)
        bound = expand_dims(norms, -1) * expand_dims(norms, -2) * (tol * tol)
        return _within_sweeps(reduce_any(greater(gram * gram * off_mask, bound)), k)

    def body(state):
        x, v, k = state
        for p, q, cos, sin, still in sweep.rounds:
            xp, xq = take(x, p, -1), take(x, q, -1)                                    # (..., rows, pairs)
            alpha, beta, gamma = (reduce_sum(u * w, -2) for u, w in ((xp, xp), (xq, xq), (xp, xq)))
            c, s = _angle(beta - alpha, gamma)
            j = sweep.rotation(c, s, cos, sin, still)
            x, v = matmul(x, j), matmul(v, j)
        return x, v, k + 1

    x, v, _ = while_loop(unconverged, body, (b, _eye(n, b), as_tensor(np.int64(0))))
    return x, v


@_in_float32_for_float16
def _svd_values(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(U (..., m, m), s (..., k) descending, Vh (..., n, n)) of a, computed without gradient; U's
    first k columns and Vh's first k rows are the singular vectors, the rest complete the bases."""
    a, ok = _finite(stop_gradient(a))
    m, n = a.shape[-2:]
    wide = m < n
    b = _mT(a) if wide else a                                          # (..., big, small): tall
    big, small = max(m, n), min(m, n)
    if small == 0:
        s, left, right = reduce_sum(b, -2), _eye(big, b), _eye(small, b)
    else:
        x, v = _jacobi_columns(b)
        s, (x, v) = _sort_columns(sqrt(reduce_sum(x * x, -2)), [x, v], descending=True)
        q, r = householder(x, "complete")                   # x = q r, r diagonal but for rounding, up to signs
        diagonal = take(reshape(r, r.shape[:-2] + (big * small,)),
                        (np.arange(small) * (small + 1)).astype(np.int64), -1)
        flip = where(less(diagonal, 0), -_ones(diagonal), _ones(diagonal))
        if big > small:
            flip = concat([flip, broadcast_to(_ones(flip), flip.shape[:-1] + (big - small,))], -1)
        left, right = q * expand_dims(flip, -2), v
    u, vh = (right, _mT(left)) if wide else (left, _mT(right))
    if small:
        signs = _signs(u, small, m)
        u = u * expand_dims(signs, -2)
        vh = vh * expand_dims(slice_axes(signs, (signs.ndim - 1,), (0,), (small,), (1,)) if n < m else
                              concat([signs, broadcast_to(_ones(signs), signs.shape[:-1] + (n - m,))], -1), -1)
    return _nan_unless(ok, u), _nan_unless(ok, s), _nan_unless(ok, vh)


defop("svd", infer=_pass_on_infer(1), reference=lambda a, u, s, vh: (u.copy(), s.copy(), vh.copy()),
      lower=lambda ctx, names, node: [ctx.emit("Identity", [n]) for n in names[1:]],
      vjp=lambda g, ins, outs: _svd_vjp(g, ins, outs), n_outputs=3)


def _svd_vjp(g, ins, outs):
    gu, gs, gvh = g
    u, s, vh = outs
    m, n = u.shape[-2], vh.shape[-1]
    k = s.shape[-1]
    if k == 0:
        return [None] * 4
    if gu is None and gvh is None:
        if gs is None:
            return [None] * 4
        return [matmul(u * expand_dims(gs, -2), vh), None, None, None]
    s2 = s * s
    gaps = expand_dims(s2, -2) - expand_dims(s2, -1)                                     # s_j² - s_i²
    scale = expand_dims(reduce_max(s2, -1, keepdims=True), -1)
    inverse = _inverse_gaps(gaps, _degenerate(gaps, scale, k))
    row, col = expand_dims(s, -2), expand_dims(s, -1)
    middle = None
    if gu is not None:
        ugu = matmul(_mT(u), gu)
        middle = (ugu - _mT(ugu)) * row * inverse
    if gvh is not None:
        vgv = matmul(vh, _mT(gvh))
        part = col * (vgv - _mT(vgv)) * inverse
        middle = part if middle is None else middle + part
    if gs is not None:
        middle = middle + _diag_embed(gs)
    s_inv = _inverse_singular(s)
    if m > n and gu is not None:
        ga = matmul(u, middle)
        gus = gu * expand_dims(s_inv, -2)
        ga = matmul(ga + gus - matmul(u, matmul(_mT(u), gus)), vh)
    elif m < n and gvh is not None:
        ga = matmul(middle, vh)
        sgv = gvh * expand_dims(s_inv, -1)
        ga = matmul(u, ga + sgv - matmul(matmul(sgv, _mT(vh)), vh))
    else:
        ga = matmul(u, matmul(middle, vh))
    return [ga, None, None, None]


def _inverse_singular(s: Tensor) -> Tensor:
    """1/s, NaN where s is within rounding of 0 relative to the largest (its singular vector in the
    longer dimension is not determined)."""
    tiny = less_equal(s, reduce_max(s, -1, keepdims=True) * (8 * s.shape[-1] * _eps(s.dtype)))
    return where(tiny, np.asarray(np.nan, s.dtype), 1 / where(tiny, _ones(s), s))


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    """numpy.linalg.svd / torch.linalg.svd: (U, S, Vh) with a = U[..., :k] diag(S) Vh[..., :k, :],
    k = min(m, n), for a (..., m, n) with static m, n (min(m, n) <= MAX_SIZE); S descending;
    with full_matrices U is (..., m, m) and Vh (..., n, n) (the extra columns an orthonormal
    completion), else (..., m, k) and (..., k, n). With compute_uv=False, S alone (svdvals).
    hermitian is accepted for numpy and ignored. One-sided Jacobi at run time (module docstring); each
    left singular vector is signed so that its entry of largest magnitude is positive (LAPACK's
    signs differ: compare |U|, or U diag(S) Vh). The gradient is PyTorch's: the extra columns of
    full_matrices get none, and through U or Vh it is NaN where singular values repeat, or where one
    is 0 and a is not square (docs/guide/limitations.md)."""
    a = _matrices(a, "svd")
    m, n = a.shape[-2:]
    k = min(m, n)
    u_full, s, vh_full = _svd_values(a)
    u = slice_axes(u_full, (u_full.ndim - 1,), (0,), (k,), (1,))
    vh = slice_axes(vh_full, (vh_full.ndim - 2,), (0,), (k,), (1,))
    u, s, vh = apply_n("svd", [a, u, s, vh])
    if not compute_uv:
        return s
    if full_matrices:
        if m > k:
            u = concat([u, slice_axes(u_full, (u_full.ndim - 1,), (k,), (m,), (1,))], -1)
        if n > k:
            vh = concat([vh, slice_axes(vh_full, (vh_full.ndim - 2,), (k,), (n,), (1,))], -2)
    return u, s, vh


def svdvals(a) -> Tensor:
    """torch.linalg.svdvals: the singular values of svd, descending; the gradient U diag(gS) Vh is
    finite also where they repeat."""
    return svd(a, full_matrices=False, compute_uv=False)


# -- pinv, lstsq, matrix_rank, cond --------------------------------------------------------------------------
def _cutoff(top: Tensor, shape, atol, rtol) -> Tensor:
    """torch's threshold max(atol, rtol·top) for top (..., 1): rtol defaults to max(m, n)·eps where atol
    is not given (else to 0); atol and rtol may be numbers or tensors of the batch shape."""
    if rtol is None:
        rtol = max(shape[-2:]) * _eps(top.dtype) if atol is None else 0.0
    limit = top * _per_matrix(rtol, top)
    return limit if atol is None else maximum(limit, _per_matrix(atol, top))


def _per_matrix(value, like: Tensor):
    """A number, or a tensor of the batch shape given one more axis to meet (..., k)."""
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    value = cast(as_tensor(value), like.dtype)
    return expand_dims(value, -1) if value.ndim else value


def _pinv_backward(g, ins, outs):
    """Golub and Pereyra's derivative of the pseudo-inverse at constant rank (torch's pinv_backward)."""
    a, p = ins[0], outs[0]
    gh = _mT(g[0])
    ph = _mT(p)
    m, n = a.shape[-2:]
    if m <= n:
        k = matmul(gh, p)
        kph = matmul(k, ph)
        ga = -_mT(matmul(p, k)) + kph - matmul(matmul(a, p), kph) + matmul(matmul(ph, p), gh - matmul(k, a))
    else:
        k = matmul(p, gh)
        phk = matmul(ph, k)
        ga = -_mT(matmul(k, p)) + matmul(matmul(gh - matmul(a, k), p), ph) + phk - matmul(matmul(phk, p), a)
    return [ga, None]


defop("pinv", infer=_pass_on_infer(1), reference=lambda a, p: p.copy(),
      lower=lambda ctx, names, node: ctx.emit("Identity", [names[1]]), vjp=_pinv_backward)


def pinv(a, rtol=None, hermitian: bool = False, *, atol=None, rcond=None) -> Tensor:
    """torch.linalg.pinv / numpy.linalg.pinv: the pseudo-inverse of a (..., m, n), from svd (from eigh
    with hermitian=True, reading a's lower triangle), with singular values at or below max(atol,
    rtol·largest) taken as 0 (rtol defaults to max(m, n)·eps when atol is not given; numpy's rcond
    is rtol). The gradient is PyTorch's (Golub and Pereyra's formula, right wherever the rank does
    not change), finite also for rank-deficient a."""
    a = _matrices(a, "pinv", square=hermitian)
    rtol = rcond if rtol is None else rtol
    return apply("pinv", [a, _pseudo_inverse(a, hermitian, atol, rtol)])


@_in_float32_for_float16
def _pseudo_inverse(a: Tensor, hermitian: bool, atol, rtol) -> Tensor:
    """pinv's value, without gradient: V diag(1/s) Uᵀ over the singular values above the cutoff."""
    if hermitian:
        w, v = _eigh_values(a, "L")
        keep = greater(abs(w), _cutoff(reduce_max(abs(w), -1, keepdims=True), a.shape, atol, rtol))
        inverse = where(keep, 1 / where(keep, w, _ones(w)), _zeros(w))
        return matmul(v * expand_dims(inverse, -2), _mT(v))
    u, s, vh = _svd_values(a)
    k = min(a.shape[-2:])
    u = slice_axes(u, (u.ndim - 1,), (0,), (k,), (1,))
    vh = slice_axes(vh, (vh.ndim - 2,), (0,), (k,), (1,))
    keep = greater(s, _cutoff(slice_axes(s, (s.ndim - 1,), (0,), (min(k, 1),), (1,)), a.shape, atol, rtol))
    inverse = where(keep, 1 / where(keep, s, _ones(s)), _zeros(s))
    return matmul(_mT(vh) * expand_dims(inverse, -2), _mT(u))


def matrix_rank(a, tol=None, hermitian: bool = False, *, atol=None, rtol=None) -> Tensor:
    """numpy.linalg.matrix_rank / torch.linalg.matrix_rank: the number (int64) of singular values (of
    |eigenvalues| with hermitian=True) above max(atol, rtol·largest), rtol defaulting to max(m, n)·eps
    where atol is not given; numpy's tol is atol. A 1-d a is a one-column matrix. No gradient."""
    a = as_tensor(a)
    a = reshape(a, a.shape + (1,)) if a.ndim == 1 else a
    atol = tol if atol is None else atol
    s = abs(eigvalsh(a)) if hermitian else svdvals(a)
    s = stop_gradient(s)
    top = reduce_max(s, -1, keepdims=True) if s.shape[-1] else s
    return reduce_sum(cast(greater(s, _cutoff(top, a.shape, atol, rtol)), np.int64), -1)


def lstsq(a, b, rcond=None):
    """numpy.linalg.lstsq / torch.linalg.lstsq: (x, residuals, rank, s) with x the least-squares
    solution of minimal norm, pinv(a) @ b, for a (..., m, n) and b (..., m, k) or (m,) (batch dims
    broadcast); singular values at or below rcond·largest count as 0 (rcond defaults to max(m, n)·eps).
    residuals (..., k) are the squared residual norms of the columns of b where m > n, else empty
    (numpy gives them only when a has full rank as well: here they are always computed); rank and s
    (the singular values) as matrix_rank and svdvals give them. The gradient of x is PyTorch's
    (through pinv, right at constant rank)."""
    a, b = _promote(a, b)
    vector = b.ndim == 1
    b = expand_dims(b, -1) if vector else b
    a = _matrices(a, "lstsq")
    if b.ndim < 2 or b.shape[-2] != a.shape[-2]:
        raise ShapeError(_where(f"lstsq: b {format_shape(b.shape)} must have the {a.shape[-2]} rows of a "
                                f"{format_shape(a.shape)}"))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = broadcast_to(a, batch + a.shape[-2:]), broadcast_to(b, batch + b.shape[-2:])
    x = matmul(pinv(a, rtol=rcond), b)
    m, n = a.shape[-2:]
    r = matmul(a, x) - b
    residuals = reduce_sum(r * r, -2)
    if m <= n:
        residuals = slice_axes(residuals, (residuals.ndim - 1,), (0,), (0,), (1,))
    return squeeze(x, -1) if vector else x, residuals, matrix_rank(a, rtol=rcond), svdvals(a)


# -- matrix_exp ----------------------------------------------------------------------------------------------
# Scaling and squaring with the degree-18 Taylor polynomial: the largest 1-norms of A/2^s for which
# its truncation error is below the unit roundoff (Bader, Blanes and Casas, 2019; as torch).
_THETA_18 = {np.dtype(np.float64): 1.090863719290036, np.dtype(np.float32): 3.010066362817634}


def _taylor_18(x: Tensor) -> Tensor:
    """Σ_{k<=18} x^k/k! by Paterson-Stockmeyer with blocks of 4: x², x³, x⁴ and 4 Horner steps in x⁴."""
    n = x.shape[-1]
    eye = np.eye(n, dtype=x.dtype)
    powers: list = [eye, x, matmul(x, x)]
    powers.append(matmul(powers[2], x))
    x4 = matmul(powers[2], powers[2])
    coefficient = [1 / math.factorial(k) for k in range(19)]

    def block(j: int):
        terms = [powers[i] * coefficient[4 * j + i] for i in range(4) if 4 * j + i <= 18]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total
    result = block(4)
    for j in (3, 2, 1, 0):
        result = matmul(result, x4) + block(j)
    return result


@_in_float32_for_float16
def _matrix_exp_values(a: Tensor) -> Tensor:
    a, ok = _finite(stop_gradient(a))
    norm = reduce_max(reduce_sum(abs(a), -2), -1, keepdims=True)                     # (..., 1): the 1-norm
    theta = _THETA_18[np.dtype(a.dtype)]
    s = maximum(ceil(log2(where(greater(norm, theta), norm, _ones(norm)) / theta)), 0)   # (..., 1)
    scaled = a / expand_dims(2 ** s, -1)
    e = _taylor_18(scaled)
    count = cast(s, np.int64)
    most = reduce_max(count)                      # the lowest int64 for an empty batch: no squaring

    def squaring(state):
        e, i = state
        return where(expand_dims(less(i, count), -1), matmul(e, e), e), i + 1

    e, _ = while_loop(lambda state: less(state[1], most), squaring, (e, as_tensor(np.int64(0))))
    return _nan_unless(ok, e)


def _matrix_exp_vjp(g, ins, outs):
    """The Fréchet derivative of exp at Aᵀ applied to G: the upper-right block of exp([[Aᵀ, G], [0, Aᵀ]])."""
    a = ins[0]
    n = a.shape[-1]
    at = _mT(a)
    upper = concat([at, g[0]], -1)
    lower = concat([broadcast_to(_zeros(a), at.shape), at], -1)
    big = matrix_exp(concat([upper, lower], -2))
    return [slice_axes(big, (big.ndim - 2, big.ndim - 1), (0, n), (n, 2 * n), (1, 1)), None]


defop("matrix_exp", infer=_pass_on_infer(1), reference=lambda a, e: e.copy(),
      lower=lambda ctx, names, node: ctx.emit("Identity", [names[1]]), vjp=_matrix_exp_vjp)


def matrix_exp(a) -> Tensor:
    """torch.linalg.matrix_exp (scipy.linalg.expm): the exponential of square matrices (..., n, n),
    static n. Scaling and squaring with a degree-18 Taylor polynomial, the number of squarings
    chosen per matrix from its 1-norm at run time (module docstring); NaN for a non-finite matrix.
    The gradient is the Fréchet derivative (an exponential of the (2n, 2n) block matrix
    [[Aᵀ, G], [0, Aᵀ]]), so every order follows, as PyTorch's."""
    a = as_tensor(a)
    a = a if is_float(a.dtype) else cast(a, np.float32)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or not isinstance(a.shape[-1], int):
        raise ShapeError(_where(f"matrix_exp needs square matrices (..., n, n) with a static n, got "
                                f"{format_shape(a.shape)}"))
    require_float(a.type, "matrix_exp")
    if a.shape[-1] == 0:
        return a
    return apply("matrix_exp", [a, _matrix_exp_values(a)])
