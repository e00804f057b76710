"""eigh, eigvalsh, svd, svdvals, pinv, lstsq, matrix_rank, matrix_exp, the spectral matrix norms and
cond: forward on ONNX Runtime against numpy (float64 and float32, batches, tall and wide, empty and
1 x 1 matrices, symbolic batches, non-finite input), their conventions (ascending / descending
order, signs), the degenerate cases (repeated eigenvalues and singular values, rank deficiency:
values right, gradients finite where PyTorch's are and NaN by design where they are not), and
float64 gradient checks to second order at static and symbolic sizes."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.ops.decompositions import MAX_SIZE, MAX_SWEEPS

from ..opcheck import check_forward, check_grads

nan, inf = np.nan, np.inf


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def sym(*shape, seed=0):
    a = rand(*shape, seed=seed)
    return a + np.swapaxes(a, -1, -2)


def mT(x):
    return np.swapaxes(x, -1, -2)


def symmetrised(fn):
    """fn of a + aᵀ: the gradient of a function of a symmetric matrix, checked in every direction."""
    return lambda a: fn(a + F.swapaxes(a, -1, -2))


def orthonormal(q, atol):
    np.testing.assert_allclose(mT(q) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2),
                               atol=atol)


def largest_entries_positive(v, k=None):
    """The convention of every vector basis here: each column's entry of largest magnitude is positive."""
    v = v[..., :k] if k is not None else v
    if not v.size:
        return
    top = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], -2)
    assert np.all(top > 0), top


# -- eigh ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (5, 5), (2, 4, 4), (8, 8)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eigh_matches_numpy(shape, dtype):
    a = sym(*shape, seed=shape[-1]).astype(dtype)
    w, v = gc.compile(F.eigh, a, provider="cpu")(a)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    want_w, want_v = np.linalg.eigh(a.astype(np.float64))
    np.testing.assert_allclose(w, want_w, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(np.abs(v), np.abs(want_v), atol=tol * 10)      # LAPACK signs them otherwise
    orthonormal(v.astype(np.float64), tol * 10)
    largest_entries_positive(v)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_reads_one_triangle(uplo):
    a = rand(4, 4, seed=1)
    a[(np.triu_indices(4, 1) if uplo == "L" else np.tril_indices(4, -1))] = nan      # never read
    full = np.tril(a) + np.tril(a, -1).T if uplo == "L" else np.triu(a) + np.triu(a, 1).T
    w, v = gc.compile(lambda a: F.eigh(a, UPLO=uplo), a, provider="cpu")(a)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(full), rtol=1e-12)
    np.testing.assert_allclose(v @ np.diag(w) @ v.T, full, atol=1e-12)
    check_forward(lambda a: F.eigvalsh(a, uplo), [a], np.linalg.eigvalsh(full), rtol=1e-12)


def test_eigh_on_a_symbolic_batch_empty_batches_and_empty_matrices():
    cf = gc.compile(lambda a: F.eigh(a), gc.spec(("batch", 3, 3), np.float64))
    for n in (0, 1, 4):
        a = sym(n, 3, 3, seed=n)
        w, v = cf(a)
        np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=1e-12)
        np.testing.assert_allclose(v @ (w[..., None] * mT(v)), a, atol=1e-12)
    check_forward(F.eigh, [np.zeros((2, 0, 0))], [np.zeros((2, 0)), np.zeros((2, 0, 0))])


def test_eigh_repeated_eigenvalues_and_the_iteration_bound():
    """A repeated eigenvalue's vectors are some orthonormal basis of its eigenspace; the identity and
    a rotated diag(1, 1, 2) are diagonalised, and no matrix needs MAX_SWEEPS sweeps."""
    q = np.linalg.qr(rand(3, 3, seed=2))[0]
    a = np.stack([np.eye(3), q @ np.diag([1.0, 1.0, 2.0]) @ q.T, np.zeros((3, 3))])
    w, v = gc.compile(F.eigh, a, provider="cpu")(a)
    np.testing.assert_allclose(w, [[1, 1, 1], [1, 1, 2], [0, 0, 0]], atol=1e-14)
    orthonormal(v, 1e-14)
    np.testing.assert_allclose(v @ (w[..., None] * mT(v)), a, atol=1e-14)
    assert MAX_SWEEPS >= 10


def test_eigh_of_non_finite_matrices_is_nan_and_leaves_the_others_alone():
    a = np.stack([sym(3, 3, seed=3), np.full((3, 3), inf), sym(3, 3, seed=4)])
    a[1, 0, 0] = nan
    w, v = gc.compile(F.eigh, a, provider="cpu")(a)
    assert np.isnan(w[1]).all() and np.isnan(v[1]).all()
    np.testing.assert_allclose(w[[0, 2]], np.linalg.eigvalsh(a[[0, 2]]), rtol=1e-12)


def test_eigh_gradients():
    check_grads(symmetrised(lambda a: F.eigh(a)), [rand(2, 3, 3, seed=5)])
    check_grads(symmetrised(F.eigvalsh), [rand(4, 4, seed=6)])


def test_eigh_gradient_is_torchs_on_the_whole_matrix():
    """The gradient of eigh of a non-symmetric a is PyTorch's: the symmetric V (diag(gw) + F ∘ skew(Vᵀ gV)) Vᵀ
    on every entry (as cholesky's: the matrix is taken as symmetric), not only on the triangle read."""
    a = rand(3, 3, seed=7)
    gw, gv = rand(3, seed=8), rand(3, 3, seed=9)
    got = gc.compile(lambda a: gc.grad(F.sum(F.eigh(a)[0] * gw) + F.sum(F.eigh(a)[1] * gv), [a])[0], a)(a)
    w, v = np.linalg.eigh(np.tril(a) + np.tril(a, -1).T)
    v = v * np.where(np.take_along_axis(v, np.argmax(np.abs(v), 0)[None], 0) < 0, -1, 1)
    vgv = v.T @ gv
    gaps = w[None, :] - w[:, None]
    np.fill_diagonal(gaps, 1)
    inner = (vgv - vgv.T) / 2 / gaps
    np.fill_diagonal(inner, gw)
    np.testing.assert_allclose(got, v @ inner @ v.T, rtol=1e-10, atol=1e-12)


def test_eigh_gradients_at_repeated_eigenvalues():
    """Through the eigenvalues alone the gradient is finite (V diag(gw) Vᵀ: here 3A² for Σw³, whose
    second derivative would need the eigenvectors); through the eigenvectors it is NaN by design
    (PyTorch and JAX divide by the difference too)."""
    q = np.linalg.qr(rand(3, 3, seed=10))[0]
    a = q @ np.diag([1.0, 1.0, 2.0]) @ q.T
    g = gc.compile(lambda a: gc.grad(F.sum(F.eigvalsh(a) ** 3), [a])[0], a)(a)
    np.testing.assert_allclose(g, 3 * a @ a, atol=1e-12)
    check_grads(symmetrised(lambda a: F.sum(F.eigvalsh(a) ** 3)), [a / 2], order=1)    # symmetric in w: smooth
    through_v = gc.compile(lambda a: gc.grad(F.sum(F.eigh(a)[1] * np.arange(9.0).reshape(3, 3)), [a])[0], a)(a)
    assert np.isnan(through_v).all()
    second = gc.compile(lambda a: gc.grad(F.sum(gc.grad(F.sum(F.eigvalsh(a) ** 3), [a])[0]), [a])[0], a)(a)
    assert np.isnan(second).all()


# -- svd -------------------------------------------------------------------------------------------------------
SVD_SHAPES = [(1, 1), (3, 3), (5, 3), (3, 5), (2, 4, 3), (2, 3, 4), (6, 1), (1, 6), (0, 3), (3, 0), (2, 0, 0)]


@pytest.mark.parametrize("shape", SVD_SHAPES)
@pytest.mark.parametrize("full", [True, False])
def test_svd_matches_numpy(shape, full):
    a = rand(*shape, seed=sum(shape))
    u, s, vh = gc.compile(lambda a: F.svd(a, full), a, provider="cpu")(a)
    want_u, want_s, want_vh = np.linalg.svd(a, full)
    k = want_s.shape[-1]
    assert u.shape == want_u.shape and vh.shape == want_vh.shape
    np.testing.assert_allclose(s, want_s, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.abs(u[..., :k]), np.abs(want_u[..., :k]), atol=1e-12)
    np.testing.assert_allclose(np.abs(vh[..., :k, :]), np.abs(want_vh[..., :k, :]), atol=1e-12)
    orthonormal(u, 1e-13)
    orthonormal(mT(vh), 1e-13)
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=1e-13)
    largest_entries_positive(u, k)
    check_forward(lambda a: F.svd(a, compute_uv=False), [a], want_s, rtol=1e-12, atol=1e-14)


def test_svd_in_float32_and_on_a_symbolic_batch():
    a = rand(3, 5, 4, seed=11).astype(np.float32)
    s = gc.compile(F.svdvals, a, provider="cpu")(a)
    np.testing.assert_allclose(s, np.linalg.svd(a.astype(np.float64), compute_uv=False), rtol=2e-6, atol=1e-6)
    cf = gc.compile(lambda a: F.svd(a, False), gc.spec(("batch", 4, 2), np.float64))
    for n in (0, 3):
        x = rand(n, 4, 2, seed=n)
        u, s, vh = cf(x)
        np.testing.assert_allclose((u * s[..., None, :]) @ vh, x, atol=1e-13)


def test_svd_of_rank_deficient_and_repeated_singular_values():
    """A zero column, a rank-one matrix, an orthogonal one (all singular values 1) and zero: the
    singular values are right, U and Vh orthonormal (completed where A has no direction)."""
    q = np.linalg.qr(rand(4, 4, seed=12))[0]
    cases = [np.c_[rand(4, 2, seed=13), np.zeros(4)], np.outer(rand(4, seed=14), rand(3, seed=15)),
             q[:, :3], np.zeros((4, 3))]
    for a in cases:
        u, s, vh = gc.compile(F.svd, a, provider="cpu")(a)
        np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-14)
        orthonormal(u, 1e-14)
        orthonormal(mT(vh), 1e-14)
        np.testing.assert_allclose((u[:, :3] * s) @ vh, a, atol=1e-14)


def test_svd_gradients():
    """Tall and wide (a batch), and the spectral norms and cond built on the singular values."""
    check_grads(lambda b, a: (*F.svd(a, full_matrices=False), *F.svd(b, full_matrices=False),
                              F.matrix_norm(b, "nuc"), F.cond(a)), [rand(2, 2, 3, seed=17), rand(4, 3, seed=16)])


def test_the_completing_vectors_of_full_matrices_get_no_gradient():
    """As PyTorch: the columns full_matrices adds are any completion of the basis, not functions of a."""
    a = rand(2, 4, seed=57)
    g = gc.compile(lambda a: gc.grad(F.sum(F.svd(a)[2][..., 2:, :]), [a])[0], a)(a)
    np.testing.assert_array_equal(g, np.zeros((2, 4)))
    cotangent = rand(4, 4, seed=58)
    full = gc.compile(lambda a: gc.grad(F.sum(F.svd(a)[2] * cotangent), [a])[0], a)(a)
    reduced = gc.compile(lambda a: gc.grad(F.sum(F.svd(a, False)[2] * cotangent[:2]), [a])[0], a)(a)
    np.testing.assert_allclose(full, reduced, rtol=1e-14)


def test_svd_gradients_at_degenerate_singular_values():
    """Through the singular values alone the gradient U diag(gS) Vh is finite where they repeat (the
    nuclear norm of an orthogonal matrix: UVh; Σs², which is ‖a‖², where two repeat and one is 0:
    2a); through U or Vh it is NaN where
    they repeat, and where one is 0 in a non-square matrix, by design (PyTorch divides there too)."""
    q = np.linalg.qr(rand(3, 3, seed=19))[0]
    g = gc.compile(lambda a: gc.grad(F.matrix_norm(a, "nuc"), [a])[0], q)(q)
    np.testing.assert_allclose(g, q, atol=1e-14)
    check_grads(lambda a: F.sum(F.svdvals(a) ** 2), [np.diag([2.0, 2.0, 0.0]) @ q], order=1)    # ‖a‖², smooth
    through_u = gc.compile(lambda a: gc.grad(F.sum(F.svd(a)[0] * rand(3, 3, seed=21)), [a])[0], q)(q)
    assert np.isnan(through_u).all()
    tall = np.c_[rand(4, 2, seed=22), np.zeros(4)]
    through_u = gc.compile(lambda a: gc.grad(F.sum(F.svd(a, False)[0] * rand(4, 3, seed=23)), [a])[0], tall)(tall)
    assert np.isnan(through_u).all()
    square = np.diag([3.0, 2.0, 0.0]) @ q
    finite = gc.compile(lambda a: gc.grad(F.sum(F.svd(a)[0] * rand(3, 3, seed=24)), [a])[0], square)(square)
    assert np.isfinite(finite).all()


# -- pinv, lstsq, matrix_rank -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 2), (0, 3), (1, 1)])
def test_pinv_and_matrix_rank_match_numpy(shape):
    a = rand(*shape, seed=25)
    check_forward(lambda a: (F.pinv(a), F.matrix_rank(a)), [a], [np.linalg.pinv(a), np.linalg.matrix_rank(a)],
                  rtol=1e-11, atol=1e-12)


def test_pinv_and_matrix_rank_of_rank_deficient_matrices_and_tolerances():
    low = rand(4, 2, seed=26) @ rand(2, 3, seed=27)                       # rank 2
    near = np.diag([1.0, 1e-3, 1e-9])
    check_forward(lambda a: (F.pinv(a), F.matrix_rank(a)), [low], [np.linalg.pinv(low), 2], rtol=1e-10, atol=1e-12)
    check_forward(lambda a: (F.pinv(a, rtol=1e-6), F.pinv(a, atol=1e-2), F.matrix_rank(a, tol=1e-2),
                             F.matrix_rank(a, rtol=1e-6)), [near],
                  [np.diag([1.0, 1e3, 0.0]), np.diag([1.0, 0.0, 0.0]), 1, 2], rtol=1e-12)
    h = sym(4, 4, seed=28)
    h[:, 0] = h[0, :] = 0
    check_forward(lambda a: (F.pinv(a, hermitian=True), F.matrix_rank(a, hermitian=True)), [h],
                  [np.linalg.pinv(h, hermitian=True), 3], rtol=1e-10, atol=1e-12)
    batch_tol = np.array([1e-6, 1e-2])
    check_forward(lambda a, t: F.matrix_rank(a, atol=t), [np.stack([near, near]), batch_tol], [[2, 1]])


def test_pinv_gradients_full_and_constant_rank():
    """Golub and Pereyra's derivative: at full rank, tall and wide (a batch), at rank 2 of 3 (with a
    tolerance the perturbation stays under, so the rank is constant: the gradient is finite and
    right), and of a symmetric matrix through eigh."""
    low = rand(4, 2, seed=30) @ rand(2, 3, seed=31)
    check_grads(lambda a, low, h: (F.pinv(a), F.pinv(F.swapaxes(a, -1, -2)), F.pinv(low, rtol=1e-4),
                                   F.pinv(h + F.swapaxes(h, -1, -2), hermitian=True)),
                [rand(2, 4, 3, seed=29), low, rand(3, 3, seed=32)])


def test_lstsq_matches_numpy():
    for a, b in [(rand(6, 3, seed=33), rand(6, 2, seed=34)), (rand(3, 5, seed=35), rand(3, 2, seed=36)),
                 (rand(4, 2, seed=37) @ rand(2, 3, seed=38), rand(4, 1, seed=39)), (rand(5, 2, seed=40),
                                                                                    rand(5, seed=41))]:
        x, residuals, rank, s = np.linalg.lstsq(a, b)
        got = gc.compile(lambda a, b: F.lstsq(a, b), a, b, provider="cpu")(a, b)
        np.testing.assert_allclose(got[0], x, rtol=1e-10, atol=1e-12)
        if residuals.size:
            np.testing.assert_allclose(got[1], residuals, rtol=1e-10)
        assert got[2] == rank
        np.testing.assert_allclose(got[3], s, rtol=1e-12, atol=1e-14)
    a, b = rand(2, 5, 3, seed=42), rand(5, 2, seed=43)                   # batch dims broadcast
    got = gc.compile(lambda a, b: F.lstsq(a, b)[0], a, b, provider="cpu")(a, b)
    np.testing.assert_allclose(got, np.linalg.pinv(a) @ b, rtol=1e-10)


def test_lstsq_gradients():
    check_grads(lambda a, b, c, d: (F.lstsq(a, b)[0], F.lstsq(c, d)[0]),
                [rand(2, 5, 3, seed=44), rand(2, 5, 2, seed=45), rand(3, 4, seed=46), rand(3, 2, seed=47)])


# -- matrix_exp ----------------------------------------------------------------------------------------------------
def expm(a):
    """exp(a) by its eigendecomposition (a diagonalisable: random matrices are)."""
    w, v = np.linalg.eig(a)
    return (v @ (np.exp(w)[..., None] * np.linalg.inv(v))).real


def test_matrix_exp_matches_the_eigendecomposition():
    """Norms that need no squaring and many (per matrix of one batch), negative definite, nilpotent
    (exactly I + N + N²/2) and zero matrices, 1 x 1 and float32."""
    a = rand(4, 3, 3, seed=48) * np.array([0.1, 1.0, 30.0, 300.0])[:, None, None]
    check_forward(F.matrix_exp, [a], expm(a), rtol=1e-11, atol=1e-12)
    check_forward(F.matrix_exp, [-50 * np.eye(2) + rand(2, 2, seed=49)], expm(-50 * np.eye(2) + rand(2, 2, seed=49)),
                  rtol=1e-10, atol=1e-30)
    n = np.triu(rand(3, 3, seed=50), 1)
    check_forward(lambda n, z, one: (F.matrix_exp(n), F.matrix_exp(z), F.matrix_exp(one)),
                  [n, np.zeros((2, 2)), np.array([[2.0]])],
                  [np.eye(3) + n + n @ n / 2, np.eye(2), np.array([[np.exp(2.0)]])], rtol=1e-14, atol=1e-15)
    x = rand(2, 4, 4, seed=51).astype(np.float32) * 3
    check_forward(F.matrix_exp, [x], expm(x.astype(np.float64)).astype(np.float32), rtol=2e-5, atol=1e-5)


def test_matrix_exp_edges():
    check_forward(F.matrix_exp, [np.zeros((3, 0, 0))], np.zeros((3, 0, 0)))
    bad = np.stack([rand(2, 2, seed=52), np.array([[inf, 0.0], [0.0, 1.0]]), np.array([[nan, 0.0], [0.0, 1.0]])])
    got = gc.compile(F.matrix_exp, bad, provider="cpu")(bad)
    np.testing.assert_allclose(got[0], expm(bad[0]), rtol=1e-12)
    assert np.isnan(got[1:]).all()
    cf = gc.compile(F.matrix_exp, gc.spec(("batch", 2, 2), np.float64))
    for size in (0, 3):
        x = rand(size, 2, 2, seed=53) * 10
        np.testing.assert_allclose(cf(x), expm(x), rtol=1e-11, atol=1e-12)


def test_matrix_exp_gradients():
    """Orders 1 and 2 (the second differentiates the exponential of the 2n x 2n block matrix), with
    squarings and without."""
    check_grads(F.matrix_exp, [rand(2, 3, 3, seed=54) * np.array([0.3, 4.0])[:, None, None]])


# -- norms and cond ------------------------------------------------------------------------------------------------
def test_spectral_norms_and_cond_match_numpy():
    a = rand(2, 4, 3, seed=55)
    check_forward(lambda a: (F.matrix_norm(a, 2), F.matrix_norm(a, -2), F.matrix_norm(a, "nuc"),
                             F.matrix_norm(a, "nuc", axis=(0, 2), keepdims=True), F.norm(a[0], 2), F.cond(a),
                             F.cond(a, -2), F.cond(a[:, :3], "fro"), F.cond(a[:, :3], np.inf)), [a],
                  [np.linalg.norm(a, 2, axis=(-2, -1)), np.linalg.norm(a, -2, axis=(-2, -1)),
                   np.linalg.norm(a, "nuc", axis=(-2, -1)),
                   np.linalg.norm(a, "nuc", axis=(0, 2), keepdims=True), np.linalg.norm(a[0], 2), np.linalg.cond(a),
                   np.linalg.cond(a, -2), np.linalg.cond(a[:, :3], "fro"), np.linalg.cond(a[:, :3], np.inf)],
                  rtol=1e-11)
    check_forward(lambda a: (F.matrix_norm(a, 2), F.matrix_norm(a, "nuc")), [np.zeros((2, 0))], [0.0, 0.0])
    with np.errstate(divide="ignore"):
        check_forward(F.cond, [np.diag([1.0, 0.0])], np.linalg.cond(np.diag([1.0, 0.0])))


def test_per_example_gradients_through_decompositions():
    a = sym(3, 3, 3, seed=56)
    per_example = gc.compile(gc.vmap(gc.grad(lambda a: F.sum(F.eigvalsh(a) ** 2) + F.matrix_norm(a, "nuc")
                                            + F.sum(F.matrix_exp(a * 0.1)))), a)(a)
    for x, g in zip(a, per_example):
        single = gc.compile(gc.grad(lambda a: F.sum(F.eigvalsh(a) ** 2) + F.matrix_norm(a, "nuc")
                                    + F.sum(F.matrix_exp(a * 0.1))), x)(x)
        np.testing.assert_allclose(g, single, rtol=1e-11, atol=1e-12)


BIG = MAX_SIZE + 1


@pytest.mark.parametrize("error, message, fn, args", [
    (gc.UnsupportedError, f"svd: matrices of size \\({BIG}, {BIG}\\) are beyond", F.svd, [gc.spec((BIG, BIG))]),
    (gc.ShapeError, "eigh needs square matrices", F.eigh, [rand(2, 3)]),
    (gc.ShapeError, "UPLO must be 'L' or 'U'", lambda a: F.eigh(a, "X"), [rand(2, 2)]),
    (gc.ShapeError, "static m and n", F.svdvals, [gc.spec((3, "n"))]),
    (gc.ShapeError, "lstsq: b .* must have the 3 rows", F.lstsq, [rand(3, 2), rand(4, 1)])])
def test_refusals_name_the_bound_and_the_shape(error, message, fn, args):
    with pytest.raises(error, match=message):
        gc.compile(fn, *args)


def test_float16_runs_the_iterations_in_float32():
    """float16's rounding is too coarse a tolerance for the sweeps: they run in float32 and the
    results come back in float16 (numpy's linalg has no float16 either)."""
    a = sym(3, 3, seed=59)
    got = gc.compile(lambda a: (F.eigvalsh(a), F.svdvals(a), F.pinv(a), F.matrix_exp(a / 4)), a.astype(np.float16),
                     provider="cpu")(a.astype(np.float16))
    assert all(g.dtype == np.float16 for g in got)
    want = [np.linalg.eigvalsh(a), np.linalg.svd(a, compute_uv=False), np.linalg.pinv(a), expm(a / 4)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=5e-3, atol=5e-3)
