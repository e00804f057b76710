"""addmm, baddbmm, outer, inner, kron, tensordot, cross, trace, diagonal, diag, tril, triu, cdist
and the unrolled solvers (inv, solve, det, slogdet, cholesky): forward through onnxruntime
against numpy (float32 and float64, batches, a symbolic batch), float64 gradient checks at orders
1 and 2, and the edges: singular matrices, size-1 and empty diagonals, zero distances, ties of
pivots and the size bound."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.ops.solvers import MAX_SOLVE_SIZE

from ..opcheck import check_forward, check_grads

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# -- products and parts ---------------------------------------------------------------------------------
PRODUCTS = [
    ("addmm", lambda i, a, b: F.addmm(i, a, b, beta=0.5, alpha=2.0), lambda i, a, b: 0.5 * i + 2 * a @ b,
     [(4,), (3, 2), (2, 4)]),
    ("addmm_beta0", lambda i, a, b: F.addmm(i, a, b, beta=0), lambda i, a, b: a @ b, [(3, 4), (3, 2), (2, 4)]),
    ("baddbmm", lambda i, a, b: F.baddbmm(i, a, b, alpha=-1), lambda i, a, b: i - a @ b,
     [(2, 3, 4), (2, 3, 2), (2, 2, 4)]),
    ("outer", F.outer, np.outer, [(3,), (2, 2)]),
    ("inner", F.inner, np.inner, [(2, 3), (4, 3)]),
    ("inner_vectors", F.inner, np.inner, [(3,), (3,)]),
    ("kron", F.kron, np.kron, [(2, 3), (3, 1)]),
    ("kron_ranks", F.kron, np.kron, [(2,), (2, 2, 3)]),
    ("tensordot", F.tensordot, np.tensordot, [(2, 3, 4), (3, 4, 2)]),
    ("tensordot_pairs", lambda a, b: F.tensordot(a, b, ([0, 2], [2, 0])),
     lambda a, b: np.tensordot(a, b, ([0, 2], [2, 0])), [(2, 3, 4), (4, 1, 2)]),
    ("tensordot_0", lambda a, b: F.tensordot(a, b, 0), lambda a, b: np.tensordot(a, b, 0), [(2,), (3,)]),
    ("cross", F.cross, np.cross, [(4, 3), (1, 3)]),
    ("cross_axis", lambda a, b: F.cross(a, b, axis=0), lambda a, b: np.cross(a, b, axis=0), [(3, 2), (3, 2)]),
    ("trace", F.trace, np.trace, [(3, 4)]),
    ("trace_offset", lambda x: F.trace(x, -1, 1, 2), lambda x: np.trace(x, -1, 1, 2), [(2, 4, 3)]),
    ("diagonal", lambda x: F.diagonal(x, 1, 2, 0), lambda x: np.diagonal(x, 1, 2, 0), [(3, 2, 4)]),
    ("diag_of_vector", lambda v: F.diag(v, -2), lambda v: np.diag(v, -2), [(3,)]),
    ("diag_of_matrix", lambda v: F.diag(v, 1), lambda v: np.diag(v, 1), [(3, 4)]),
    ("tril", lambda x: F.tril(x, -1), lambda x: np.tril(x, -1), [(2, 3, 4)]),
    ("triu", lambda x: F.triu(x, 1), lambda x: np.triu(x, 1), [(4, 3)]),
]


@pytest.mark.parametrize("fn, np_fn, shapes", [c[1:] for c in PRODUCTS], ids=[c[0] for c in PRODUCTS])
def test_products_and_parts_match_numpy(fn, np_fn, shapes):
    xs = [rand(*s) for s in shapes]
    check_forward(fn, xs, np_fn(*xs), rtol=1e-12, atol=1e-12)
    check_grads(fn, xs)


def test_numpy_functions_on_tensors_dispatch_here():
    a, b = rand(3, 3), rand(3, 3)
    check_forward(lambda a, b: (np.trace(a), np.outer(a, b), np.kron(a, b), np.tril(a), np.cross(a, b),
                                np.linalg.inv(a + 4 * np.eye(3)), np.linalg.det(a)), [a, b],
                  [np.trace(a), np.outer(a, b), np.kron(a, b), np.tril(a), np.cross(a, b),
                   np.linalg.inv(a + 4 * np.eye(3)), np.linalg.det(a)], rtol=1e-10, atol=1e-10)


def test_empty_diagonals_and_traces():
    x = rand(2, 3)
    check_forward(lambda x: (F.diagonal(x, 5), F.trace(x, -4)), [x], [np.diagonal(x, 5), np.trace(x, -4)])
    check_forward(lambda x: F.trace(x), [np.zeros((0, 0))], np.trace(np.zeros((0, 0))))


# -- cdist ----------------------------------------------------------------------------------------------
def naive_cdist(a, b, p):
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    if p == 0:
        return (d != 0).sum(-1).astype(a.dtype)
    if p == np.inf:
        return d.max(-1)
    return (d ** p).sum(-1) ** (1 / p)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, np.inf, 0.0])
def test_cdist(p):
    """Away from the kink at a zero coordinate difference (tested below): every difference is at
    least 1 in size, of either sign, whatever the tests before drew from RNG. Near it p=0.5's second
    derivative grows as |d|^-1.5, past what a central difference resolves."""
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (2, 4, 3))
    b = rng.uniform(-1, 1, (2, 5, 3)) + rng.choice([-3.0, 3.0], (2, 5, 3))
    check_forward(lambda a, b: F.cdist(a, b, p), [a, b], naive_cdist(a, b, p), rtol=1e-12, atol=1e-12)
    if p != 0:
        check_grads(lambda a, b: F.cdist(a, b, p), [a, b])


@pytest.mark.parametrize("p", [np.inf, 2.0, 1.0, 0.0])
def test_cdist_without_coordinates_is_zero(p):
    """Points with no coordinates are at distance 0 for every p, inf's max included (it was -inf)."""
    a, b = np.zeros((3, 0)), np.zeros((2, 0))
    check_forward(lambda a, b: F.cdist(a, b, p), [a, b], np.zeros((3, 2)))
    cf = gc.compile(lambda a, b: F.cdist(a, b, p), gc.spec((3, "m")), gc.spec((2, "m")), provider="cpu")
    np.testing.assert_array_equal(cf(a.astype(np.float32), b.astype(np.float32)), np.zeros((3, 2)))


def test_cdist_gradient_is_zero_at_zero_distance():
    a = rand(3, 2)
    got = gc.compile(lambda a: gc.grad(F.sum(F.cdist(a, a)), [a])[0], a, provider="cpu")(a)
    rows = a[:, None, :] - a[None, :, :]
    dist = np.sqrt((rows ** 2).sum(-1))
    np.fill_diagonal(dist, 1)
    expected = 2 * (rows / dist[..., None]).sum(1)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


# -- solvers --------------------------------------------------------------------------------------------
def spd(*shape):
    x = rand(*shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


@pytest.mark.parametrize("n", [1, 2, 4, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solvers_match_numpy(n, dtype):
    a, b, s = rand(3, n, n), rand(3, n, 2), spd(3, n, n)
    tol = dict(rtol=1e-3, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-11)
    sign, logabs = np.linalg.slogdet(a)
    check_forward(lambda a, b, s: (F.inv(a), F.solve(a, b), F.det(a), *F.slogdet(a), F.cholesky(s)),
                  [a.astype(dtype), b.astype(dtype), s.astype(dtype)],
                  [np.linalg.inv(a), np.linalg.solve(a, b), np.linalg.det(a), sign, logabs, np.linalg.cholesky(s)],
                  **tol)


def test_solve_vector_broadcast_and_symbolic_batch():
    a, b = rand(4, 4) + 4 * np.eye(4), rand(4)
    check_forward(lambda a, b: F.solve(a, b), [a, b], np.linalg.solve(a, b), rtol=1e-10)
    bs = rand(2, 4, 3)
    check_forward(lambda a, b: F.solve(a, b), [a, bs], np.linalg.solve(a, bs), rtol=1e-10)
    cf = gc.compile(lambda a: (F.inv(a), F.det(a)), gc.spec(("batch", 3, 3)))
    for n in (1, 4):
        x = rand(n, 3, 3).astype(np.float32)
        inv, det = cf(x)
        np.testing.assert_allclose(inv, np.linalg.inv(x), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(det, np.linalg.det(x), rtol=1e-4, atol=1e-5)


def test_pivoting_handles_zero_leading_entries_and_singular_matrices():
    """A zero in the corner needs a row swap (elimination without pivoting would divide by 0); a
    singular matrix has det 0, slogdet (0, -inf) and a non-finite inverse."""
    p = np.array([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]])
    check_forward(lambda a: (F.inv(a), F.det(a)), [p], [np.linalg.inv(p), np.linalg.det(p)], rtol=1e-12)
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    det, (sign, logabs), inv = gc.compile(lambda a: (F.det(a), F.slogdet(a), F.inv(a)), singular,
                                          provider="cpu")(singular)
    assert det == 0 and sign == 0 and logabs == -np.inf and not np.isfinite(inv).all()
    ties = np.array([[1.0, 2.0], [-1.0, 3.0]])                       # |pivot| tie: the first row stays
    check_forward(F.det, [ties], np.linalg.det(ties), rtol=1e-12)


@pytest.mark.parametrize("fn", [
    F.inv, F.det, lambda a: F.slogdet(a)[1], lambda a: F.solve(a, np.arange(6.0).reshape(3, 2)),
    lambda a: F.solve(np.eye(3) * 2 + 0.1, a), lambda x: F.cholesky(x @ x.T + 3 * np.eye(3)),
], ids=["inv", "det", "slogdet", "solve_a", "solve_b", "cholesky"])
def test_solver_gradients(fn):
    check_grads(fn, [rand(3, 3) + 2 * np.eye(3)])


def test_batched_solver_gradients():
    # (with the batch symbolic too: check_grads)
    check_grads(lambda a, b: (F.solve(a, b), F.det(a), F.inv(a), F.slogdet(a)[1]),
                [rand(2, 3, 3) + 3 * np.eye(3), rand(2, 3, 1)])


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0), (0, 2, 2)])
def test_solvers_of_empty_matrices(shape):
    """A 0 x 0 matrix has det 1 (the empty product), slogdet (1, 0) and logdet 0, as numpy and torch
    give (the elimination had no first pivot: IndexError); its inverse, solve, Cholesky factor, QR
    and powers are empty, and so is every gradient. An empty batch gives empty results."""
    a, b = np.zeros(shape), np.zeros(shape[:-1] + (2,))
    sign, logabs = np.linalg.slogdet(a)
    solvers = lambda a, b: (F.det(a), *F.slogdet(a), F.logdet(a), F.inv(a), F.solve(a, b), F.cholesky(a),  # noqa: E731
                            *F.qr(a), F.matrix_power(a, -2))
    expected = [np.linalg.det(a), sign, logabs, logabs, a, b, a, a, a, a]
    check_forward(solvers, [a, b], expected)
    grads = lambda a: gc.grad(F.sum(F.det(a)) + F.sum(F.slogdet(a)[1]) + F.sum(F.logdet(a)) + F.sum(F.inv(a))  # noqa: E731
                              + F.sum(F.cholesky(a)) + F.sum(F.matrix_power(a, -2)), [a])
    check_forward(grads, [a], [a])
    check_grads(lambda a: (F.det(a), F.slogdet(a)[1], F.inv(a)), [a])


def test_determinants_of_empty_matrices_on_a_symbolic_batch():
    cf = gc.compile(lambda a: (F.det(a), *F.slogdet(a)), gc.spec(("batch", 0, 0)))
    for n in (0, 3):
        det, sign, logabs = cf(np.zeros((n, 0, 0), np.float32))
        np.testing.assert_array_equal(det, np.ones(n))
        np.testing.assert_array_equal(sign, np.ones(n))
        np.testing.assert_array_equal(logabs, np.zeros(n))


def test_solver_limits_and_refusals():
    big = MAX_SOLVE_SIZE + 1
    with pytest.raises(gc.UnsupportedError, match=f"inv: matrices of size {big} are beyond"):
        gc.compile(F.inv, gc.spec((big, big)))
    with pytest.raises(gc.ShapeError, match="det needs square matrices"):
        gc.compile(F.det, rand(2, 3))
    with pytest.raises(gc.UnsupportedError, match="qr: 33 reflections are beyond"):
        gc.compile(F.qr, gc.spec((big, big)))


# -- qr ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3), (1, 1), (5, 0), (0, 4), (0, 3, 3)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_matches_lapacks_signs(shape, mode):
    """Q and R as numpy's LAPACK returns them (R's diagonal signs included), empty shapes too."""
    a = rand(*shape)
    q, r = np.linalg.qr(a, mode)
    check_forward(lambda a: F.qr(a, mode), [a], [q, r], rtol=1e-10, atol=1e-12)
    check_forward(lambda a: F.qr(a, "r"), [a], np.linalg.qr(a, "r"), rtol=1e-10, atol=1e-12)


def test_qr_edges():
    """A column already zero below its diagonal is left as it is (LAPACK's tau = 0), a zero column
    gives a zero R entry, and float32 runs."""
    a = np.array([[-2.0, 1.0, 0.0], [0.0, 3.0, 0.0], [0.0, 4.0, 0.0]])
    check_forward(lambda a: F.qr(a), [a], list(np.linalg.qr(a)), rtol=1e-12, atol=1e-12)
    x = rand(3, 4, 3).astype(np.float32)
    check_forward(lambda a: F.qr(a), [x], list(np.linalg.qr(x)), rtol=1e-4, atol=1e-5)
    with pytest.raises(gc.ShapeError, match="mode must be"):
        gc.compile(lambda a: F.qr(a, "full"), rand(2, 2))


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4)])
def test_qr_gradients(shape):
    check_grads(lambda a: F.qr(a), [rand(*shape)])


# -- compositions of the solvers ------------------------------------------------------------------------------
def np_solve_triangular(a, b, upper, left=True, unit=False):
    tri = np.triu(a) if upper else np.tril(a)
    if unit:
        tri = np.where(np.eye(a.shape[-1], dtype=bool), 1.0, tri)
    return np.linalg.solve(tri, b) if left else np.swapaxes(np.linalg.solve(np.swapaxes(tri, -1, -2),
                                                                            np.swapaxes(b, -1, -2)), -1, -2)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_reads_one_triangle(upper, left, unit):
    a = rand(2, 4, 4) + 3 * np.eye(4)
    b = rand(4, 3) if left else rand(1, 3, 4)                         # batch dims broadcast
    expected = np_solve_triangular(a, b, upper, left, unit)
    check_forward(lambda a, b: F.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit), [a, b],
                  expected, rtol=1e-10, atol=1e-12)
    check_grads(lambda a, b: F.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit), [a, b])


def test_solve_triangular_gradient_stays_in_the_triangle():
    a, b = rand(3, 3) + 3 * np.eye(3), rand(3, 2)
    g = gc.compile(lambda a, b: gc.grad(F.sum(F.solve_triangular(a, b, upper=True)), [a])[0], a, b,
                   provider="cpu")(a, b)
    assert np.all(np.tril(g, -1) == 0) and np.all(g[np.triu_indices(3)] != 0)


@pytest.mark.parametrize("left", [True, False])
def test_solve_triangular_with_an_empty_right_hand_side(left):
    """torch's OpInfo samples: an empty b (batch 2, n = 3, k = 0; or n = 0 with left=False) gives
    an empty x, and a's gradient is 0 (ONNX Runtime's FusedMatMul left it unwritten: -1)."""
    a = rand(2, 3, 3) + 3 * np.eye(3) if left else rand(2, 1, 1) + 3
    b = np.zeros((2, 3, 0)) if left else np.zeros((2, 0, 1))
    fn = lambda a, b: F.solve_triangular(a, b, upper=True, left=left)        # noqa: E731
    check_forward(lambda a, b: (fn(a, b), *gc.grad(F.sum(fn(a, b)), [a, b])), [a, b], [b, np.zeros_like(a), b])
    check_grads(fn, [a, b])


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve(upper):
    s = spd(2, 4, 4)
    factor = np.linalg.cholesky(s)
    factor = np.swapaxes(factor, -1, -2) if upper else factor
    b = rand(4, 2)
    check_forward(lambda b, f: F.cholesky_solve(b, f, upper=upper), [b, factor], np.linalg.solve(s, b), rtol=1e-9)
    noisy = factor + (np.tril(rand(4, 4), -1) if upper else np.triu(rand(4, 4), 1))    # the other triangle
    check_forward(lambda b, f: F.cholesky_solve(b, f, upper=upper), [b, noisy], np.linalg.solve(s, b), rtol=1e-9)
    # the factor's gradient is torch's (every entry, see below); through a triangle mask it is the true one
    check_grads(lambda b, f: F.cholesky_solve(b, F.triu(f) if upper else F.tril(f), upper=upper), [b, factor])


def test_cholesky_solve_gradient_is_torchs_on_the_whole_factor():
    """torch's cholesky_solve_backward: dL = -(G X^T + X G^T) L for the lower factor, every entry."""
    low = np.linalg.cholesky(spd(3, 3))
    b, w = rand(3, 2), rand(3, 2)
    x = np.linalg.solve(low @ low.T, b)
    gb = np.linalg.solve(low @ low.T, w)
    expected = -(gb @ x.T + x @ gb.T) @ low
    got = gc.compile(lambda b, f: gc.grad(F.sum(F.cholesky_solve(b, f) * w), [f])[0], b, low, provider="cpu")(b, low)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, -1, -2])
def test_matrix_power(n):
    a = rand(2, 3, 3) + 2 * np.eye(3)
    check_forward(lambda a: F.matrix_power(a, n), [a], np.linalg.matrix_power(a, n), rtol=1e-9, atol=1e-12)
    check_grads(lambda a: F.matrix_power(a, n), [a[0]])


def test_logdet_and_multi_dot():
    a = rand(3, 3) + 3 * np.eye(3)
    assert np.linalg.det(a) > 0        # (logdet's gradient is checked where it is finite)
    negative = np.diag([-1.0, 2.0, 3.0])
    singular = np.ones((3, 3))
    check_forward(F.logdet, [np.stack([a, negative, singular])],
                  np.array([np.log(np.linalg.det(a)), np.nan, -np.inf]), rtol=1e-10)
    check_grads(F.logdet, [a])
    chain = [rand(4), rand(4, 3), rand(3, 5), rand(5)]
    check_forward(lambda *m: F.multi_dot(m), chain, np.linalg.multi_dot(chain), rtol=1e-10)
    check_forward(lambda *m: F.multi_dot(m), chain[1:3], np.linalg.multi_dot(chain[1:3]), rtol=1e-10)
    check_grads(lambda *m: F.multi_dot(m), chain)
    with pytest.raises(gc.ShapeError, match="multi_dot: operands must be matrices"):
        gc.compile(lambda a, b, c: F.multi_dot([a, b, c]), rand(2, 2), rand(2), rand(2, 2))
    with pytest.raises(gc.ShapeError, match="matrix_power needs square"):
        gc.compile(lambda a: F.matrix_power(a, 2), rand(2, 3))


# -- PyTorch's product forms, vecdot, block_diag and pdist -------------------------------------------------------
def test_addmv_addbmm_addr_and_vecdot():
    x, m, v = rand(3), rand(3, 4), rand(4)
    b, a1, a2 = rand(3, 5), rand(2, 3, 4), rand(2, 4, 5)
    r, u, w = rand(3, 4), rand(3), rand(4)
    check_forward(lambda x, m, v, b, a1, a2, r, u, w: (F.addmv(x, m, v), F.addmv(x, m, v, beta=0.5, alpha=2),
                                                      F.addbmm(b, a1, a2, beta=2, alpha=-1), F.addr(r, u, w),
                                                      F.addr(r, u, w, beta=0), F.vecdot(m, v), F.vecdot(a1, m, axis=1)),
                  [x, m, v, b, a1, a2, r, u, w],
                  [x + m @ v, 0.5 * x + 2 * (m @ v), 2 * b - (a1 @ a2).sum(0), r + np.outer(u, w), np.outer(u, w),
                   np.vecdot(m, v), (a1 * m).sum(1)], rtol=1e-12)      # torch's dim: after broadcasting
    check_forward(lambda x, m, v: F.addmv(x, m, v, beta=0), [np.full(3, np.nan), m, v], m @ v)   # beta=0 ignores input
    a1, a2, b = rand(3, 2, 4), rand(3, 4, 5), rand(2, 5)          # addbmm's batch of 3 symbolic with x's and m's rows
    check_grads(lambda x, m, v, b, a1, a2: (F.addmv(x, m, v, 2, 3), F.addbmm(b, a1, a2, 0.5), F.addr(m, x, v),
                                            F.vecdot(m, v)), [x, m, v, b, a1, a2])
    with pytest.raises(gc.ShapeError, match="addmv: mat and vec must be a matrix and a vector"):
        gc.compile(F.addmv, x, v, v)


def test_block_diag_of_matrices_vectors_scalars_and_empties():
    a, b, c, e = rand(2, 3), rand(4), np.array(7.0), np.zeros((0, 2))
    want = np.zeros((4, 10))
    want[:2, :3], want[2, 3:7], want[3, 7] = a, b, 7.0
    check_forward(lambda a, b, c, e: F.block_diag(a, b, c, e), [a, b, c, e], want)
    ints = np.array([[1, 2]])
    check_forward(lambda a, i: F.block_diag(a, i), [a, ints],
                  np.block([[a, np.zeros((2, 2))], [np.zeros((1, 3)), ints]]))
    check_grads(lambda a, b: F.block_diag(a, b, a), [a, rand(3, 1)])


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.0, np.inf])
def test_pdist(p):
    x = rand(5, 3)
    i, j = np.triu_indices(5, 1)
    want = np.array([np.linalg.norm(x[a] - x[b], p) for a, b in zip(i, j)])
    check_forward(lambda x: F.pdist(x, p), [x], want, rtol=1e-12)
    if p:
        check_grads(lambda x: F.pdist(x, p), [x])


def test_pdist_edges():
    """One row gives no distance, no columns zero distances; a repeated row's distance is 0 with a
    gradient of 0 (torch's), not NaN."""
    check_forward(lambda x: (F.pdist(x), F.pdist(x[:, :0])), [rand(1, 3)], [np.zeros(0), np.zeros(0)])
    x = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0]])
    check_forward(F.pdist, [x], np.array([0.0, np.sqrt(5), np.sqrt(5)]), rtol=1e-14)
    g = gc.compile(lambda x: gc.grad(F.sum(F.pdist(x)), [x])[0], x)(x)
    np.testing.assert_allclose(g, [[1 / np.sqrt(5), 2 / np.sqrt(5)]] * 2 + [[-2 / np.sqrt(5), -4 / np.sqrt(5)]])
