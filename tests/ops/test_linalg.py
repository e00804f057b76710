"""matmul, linear and einsum: forward through onnxruntime against numpy, and float64 gradient checks."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.lowering.lower import recorded_lowerings

from ..opcheck import check_forward, check_grads


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


MATMUL_SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                 ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)),
                 ((2, 2, 3, 4), (4, 5))]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_shapes_like_numpy(sa, sb, dtype):
    a, b = rand(*sa, seed=1, dtype=dtype), rand(*sb, seed=2, dtype=dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    check_forward(lambda a, b: (F.matmul(a, b), a @ b), [a, b], [a @ b, a @ b], rtol=tol, atol=tol)


def test_matmul_with_numpy_operands_on_either_side():
    x, w = rand(3, 4, seed=3), rand(4, 2, seed=4)
    v = rand(3, seed=5)
    check_forward(lambda x: (x @ w, v @ x, F.matmul(x, w)), [x], [x @ w, v @ x, x @ w], rtol=1e-5, atol=1e-6)


def test_matmul_on_a_symbolic_batch():
    w = rand(4, 3, seed=6)
    cf = gc.compile(lambda x, y: (x @ w, F.matmul(x, y)), gc.spec(("batch", 2, 4)), gc.spec(("batch", 4, 5)))
    for n in (1, 3):
        x, y = rand(n, 2, 4, seed=n), rand(n, 4, 5, seed=n + 10)
        got = cf(x, y)
        np.testing.assert_allclose(got[0], x @ w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], x @ y, rtol=1e-5, atol=1e-6)


def test_the_gradient_of_a_matrix_shared_by_a_batch_is_one_product_not_a_sum_of_products():
    x, w = rand(2, 3, 5, 4, seed=3), rand(4, 6, seed=4)
    cf = gc.compile(lambda x, w: gc.grad(F.sum(F.tanh(x @ w)), [w])[0], x, w, provider="cpu")
    ops = [n.op_type for n in cf.model.graph.node]
    assert "ReduceSum" not in ops and ops.count("Gemm") + ops.count("MatMul") == 2, ops
    expected = np.einsum("abmk,abmn->kn", x, 1 - np.tanh(x @ w) ** 2)
    np.testing.assert_allclose(cf(x, w), expected, rtol=1e-5, atol=1e-5)


def test_matmul_errors_name_both_shapes():
    with pytest.raises(gc.ShapeError, match=r"matmul.*\(3, 4\).*\(5, 2\)"):
        gc.compile(lambda a, b: a @ b, np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))
    with pytest.raises(gc.ShapeError, match="at least one dimension"):
        gc.compile(lambda a: F.matmul(a, 2.0), np.ones(3, np.float32))


def test_matmul_of_integers():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    b = np.arange(3, dtype=np.int64)
    out = check_forward(lambda a, b: a @ b, [a, b], a @ b)
    assert out[0].dtype == np.int64


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear(with_bias):
    x, w, b = rand(5, 4, seed=7), rand(4, 3, seed=8), rand(3, seed=9)
    if with_bias:
        check_forward(F.linear, [x, w, b], x @ w + b, rtol=1e-5, atol=1e-6)
    else:
        check_forward(F.linear, [x, w], x @ w, rtol=1e-5, atol=1e-6)


def test_linear_with_closed_over_weights_and_symbolic_batch():
    w, b = rand(4, 3, seed=10), rand(3, seed=11)
    cf = gc.compile(lambda x: F.linear(x, w, b), gc.spec(("batch", 4)))
    for n in (2, 6):
        x = rand(n, 4, seed=n)
        np.testing.assert_allclose(cf(x), x @ w + b, rtol=1e-5, atol=1e-6)


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),                      # implicit output
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->j", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ba", [(3, 4)]),                                  # implicit output sorts the indices: a transpose
    ("i,j->ij", [(3,), (4,)]),
    ("ij,k->jk", [(3, 4), (5,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),   # ellipsis dims broadcast
    ("...ij,jk", [(2, 2, 3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("i,i->", [(4,), (4,)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_einsum_like_numpy(equation, shapes, dtype):
    xs = [rand(*s, seed=i, dtype=dtype) for i, s in enumerate(shapes)]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    check_forward(lambda *xs: F.einsum(equation, *xs), xs, np.einsum(equation, *xs), rtol=tol, atol=tol)


def test_einsum_with_spaces_and_a_numpy_operand():
    x, w = rand(3, 4, seed=12), rand(4, 2, seed=13)
    check_forward(lambda x: F.einsum("ij, jk -> ik", x, w), [x], x @ w, rtol=1e-5, atol=1e-6)


def test_einsum_on_a_symbolic_batch():
    cf = gc.compile(lambda q, k: F.einsum("bqd,bkd->bqk", q, k), gc.spec(("batch", 3, 4)), gc.spec(("batch", 5, 4)))
    for n in (1, 2):
        q, k = rand(n, 3, 4, seed=n), rand(n, 5, 4, seed=n + 5)
        np.testing.assert_allclose(cf(q, k), np.einsum("bqd,bkd->bqk", q, k), rtol=1e-5, atol=1e-6)


def test_einsum_errors():
    with pytest.raises(gc.ShapeError, match="names 2 operands, got 1"):
        gc.compile(lambda a: F.einsum("ij,jk->ik", a), np.ones((2, 3), np.float32))
    with pytest.raises(gc.ShapeError, match="index 'j' has sizes 3 and 4"):
        gc.compile(lambda a, b: F.einsum("ij,jk->ik", a, b), np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(gc.ShapeError, match="rank 2"):
        gc.compile(lambda a: F.einsum("ijk->i", a), np.ones((2, 3), np.float32))


# -- gradients (float64, reference evaluator) ------------------------------------------------------
@pytest.mark.parametrize("sa, sb", [((3, 4), (4, 2)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((3, 4), (4,))],
                         ids=str)
def test_grad_matmul(sa, sb):
    a, b = rand(*sa, seed=14, dtype=np.float64), rand(*sb, seed=15, dtype=np.float64)
    check_grads(lambda a, b: F.matmul(a, b), [a, b])


def test_grad_linear():
    x, w, b = rand(3, 4, seed=16, dtype=np.float64), rand(4, 2, seed=17, dtype=np.float64), rand(2, seed=18,
                                                                                                     dtype=np.float64)
    check_grads(lambda x, w, b: F.tanh(F.linear(x, w, b)), [x, w, b])


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
    ("ij->j", [(3, 4)]),
    ("ij,k->jk", [(3, 4), (2,)]),                     # i is summed inside the first operand only
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 2)]),   # broadcast ellipsis dim
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 2), (1, 2, 2, 2)]),
    ("ij,ij->", [(2, 3), (2, 3)]),
], ids=lambda v: v if isinstance(v, str) else "")
def test_grad_einsum(equation, shapes):
    xs = [rand(*s, seed=20 + i, dtype=np.float64) for i, s in enumerate(shapes)]
    check_grads(lambda *xs: F.einsum(equation, *xs), xs)


@pytest.mark.parametrize("trans_a, trans_b, bias_shape", [(False, False, (5,)), (True, False, (3, 5)),
                                                          (False, True, (3, 1)), (True, True, None)])
def test_gemm_forward_and_gradients(trans_a, trans_b, bias_shape):
    from gcompile.frontend.tensor import apply
    a = rand(*((4, 3) if trans_a else (3, 4)), seed=1)
    b = rand(*((5, 4) if trans_b else (4, 5)), seed=2)
    extra = [rand(*bias_shape, seed=3)] if bias_shape else []

    def fn(a, b, *c):
        return apply("gemm", [a, b, *c], trans_a=trans_a, trans_b=trans_b)
    expected = (a.T if trans_a else a) @ (b.T if trans_b else b) + (extra[0] if extra else 0)
    check_forward(fn, [a, b, *extra], expected, rtol=1e-5)
    check_grads(fn, [a, b, *extra])


@pytest.mark.parametrize("k, m, n, trans_b", [(128, 512, 512, False), (1024, 512, 64, False), (128, 512, 512, True)],
                         ids=["a-moved", "b-moved", "b-given"])
def test_gemm_with_a_long_transposed_left_operand(k, m, n, trans_b):
    """A weight gradient's product (aᵀ·b of 2**25 multiply-adds), which ONNX Runtime's CPU target
    computes with an operand, or the product, transposed first (lowering/targets/ort_cpu/linalg.py)."""
    from gcompile.frontend.tensor import apply
    a = rand(k, m, seed=1) * 0.1
    b = rand(*((n, k) if trans_b else (k, n)), seed=2) * 0.1
    fn = lambda a, b: apply("gemm", [a, b], trans_a=True, trans_b=trans_b)    # noqa: E731
    with recorded_lowerings() as seen:
        check_forward(fn, [a, b], a.T @ (b.T if trans_b else b), rtol=1e-5, atol=1e-6)
    assert ("gemm", "explicit_transpose") in seen
    check_grads(fn, [a, b])


# -- edge cases ----------------------------------------------------------------------------------------
def test_matmul_gradient_with_an_empty_contraction_and_a_batched_left_operand():
    a, b = rand(2, 3, 0, seed=1), rand(0, 4, seed=2)
    check_forward(lambda a, b: gc.grad(F.sum(F.matmul(a, b)), [a, b]), [a, b], [np.zeros_like(a), np.zeros_like(b)])
    check_forward(lambda a, b: F.matmul(a, b), [a, b], np.zeros((2, 3, 4), np.float32))


def test_products_with_an_empty_contraction_are_zeros():
    """ONNX Runtime's FusedMatMul (a product reading a transposed operand) left all but the first
    matrix of a batch unwritten for an empty contraction, and its Einsum ended the process on
    "mk,nk->mn" with k = 0, statically empty or at a symbolic k given 0: both are zeros of the
    result's shape."""
    a, c = rand(3, 2, 0, seed=1, dtype=np.float64), rand(3, 4, 0, seed=2, dtype=np.float64)
    products = lambda a, c: (F.matmul(a, F.swapaxes(c, -1, -2)) + 1, F.einsum("bmk,bnk->bmn", a, c) + 1,  # noqa: E731
                             F.einsum("mk,nk->mn", a[0], c[0]) + 1)
    expected = [np.ones((3, 2, 4)), np.ones((3, 2, 4)), np.ones((2, 4))]
    check_forward(products, [a, c], expected)
    check_forward(products, [a, c], expected,
                  specs=[gc.spec((3, 2, "k"), np.float64), gc.spec((3, 4, "k"), np.float64)])
    check_grads(lambda a, c: F.matmul(a, F.swapaxes(c, -1, -2)), [a, c])


@pytest.mark.parametrize("fn, expected", [
    (lambda x, w: F.matmul(F.swapaxes(x, -1, -2), w), lambda x, w: np.swapaxes(x, -1, -2) @ w),
    (lambda x, w: F.matmul(w, x), lambda x, w: w @ x),
    (lambda x, w: F.matmul(w, F.swapaxes(F.swapaxes(x, -1, -2) * 2, -1, -2)), lambda x, w: w @ (2 * x)),
    (lambda x, w: F.einsum("bkm,kn->bmn", x, w), lambda x, w: np.einsum("bkm,kn->bmn", x, w)),
], ids=["transposed_batch_times_matrix", "matrix_times_batch", "matrix_times_transposed_batch", "einsum"])
def test_products_of_an_empty_batch_and_a_shared_matrix(fn, expected):
    """ONNX Runtime (1.31) refused a matrix shared by an empty batch of matrices ("cannot broadcast
    on dim 0"), and a product reading a transposed batch: at a static batch of 0 and at a
    symbolic batch given 0, the value and both gradients are the empty results numpy gives."""
    w = rand(3, 3, seed=5, dtype=np.float64)
    both = lambda x, w: (fn(x, w), *gc.grad(F.sum(fn(x, w) ** 2), [x, w]))   # noqa: E731
    symbolic = gc.compile(both, gc.spec(("batch", 3, 4), np.float64), w, provider="cpu")
    for n in (0, 2):
        x = rand(n, 3, 4, seed=6, dtype=np.float64)
        y = expected(x, w)
        want = [y, *evaluate(trace(lambda x, w: gc.grad(F.sum(fn(x, w) ** 2), [x, w]), [x, w]).graph, [x, w])]
        assert want[2].shape == w.shape and (n or not want[2].any())
        got = check_forward(both, [x, w], want, rtol=1e-12, atol=1e-12)
        for g, e in zip(symbolic.run_flat(x, w), got):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    check_grads(fn, [rand(2, 3, 4, seed=7, dtype=np.float64), w])


@pytest.mark.parametrize("equation, shapes", [
    ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("iij->j", [(3, 3, 2)]), ("iji->ij", [(2, 4, 2)]),
    ("ii,i->i", [(3, 3), (3,)]), ("bii,bj->bij", [(2, 3, 3), (2, 4)]), ("iii->i", [(2, 2, 2)]),
    ("iijj->ij", [(2, 2, 3, 3)]), ("ij,jj->i", [(2, 3), (3, 3)]),
])
def test_einsum_with_repeated_indices_reads_diagonals_and_differentiates(equation, shapes):
    xs = [rand(*s, seed=k) for k, s in enumerate(shapes)]
    check_forward(lambda *xs: F.einsum(equation, *xs), xs, np.einsum(equation, *xs), rtol=1e-5, atol=1e-5)
    check_grads(lambda *xs: F.einsum(equation, *xs), xs)


def test_einsum_diagonal_gradient_is_a_diagonal_embedding():
    x = rand(3, 3, 2, seed=5)
    gx = gc.compile(lambda x: gc.grad(F.sum(F.einsum("iij->ij", x) * np.arange(6.0).reshape(3, 2)), [x])[0],
                    x, provider="cpu")(x)
    expected = np.zeros((3, 3, 2))
    for i in range(3):
        expected[i, i] = np.arange(6.0).reshape(3, 2)[i]
    np.testing.assert_array_equal(gx, expected)


def test_einsum_repeated_index_of_unequal_sizes_is_refused():
    with pytest.raises(gc.ShapeError, match="repeated index 'i'"):
        gc.compile(lambda x: F.einsum("ii->i", x), rand(2, 3))


def test_einsum_gradient_where_a_size_one_index_meets_a_larger_one():
    """numpy's einsum broadcasts an index of size 1 against the same index of another size (torch's
    tensordot too): the size-1 operand's gradient sums over it, the other's spreads over it."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((1, 1, 3)), rng.standard_normal((2, 4, 2))
    check_forward(lambda a, b: F.einsum("abc,bea->ce", a, b), [a, b], np.einsum("abc,bea->ce", a, b), rtol=1e-12)
    check_grads(lambda a, b: F.einsum("abc,bea->ce", a, b), [a, b])


def test_bilinear():
    rng = np.random.default_rng(12)
    x1, x2, w, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 5)), rng.standard_normal((6, 4, 5)), \
        rng.standard_normal(6)
    want = np.einsum("nbi,oij,bj->nbo", x1, w, x2)
    check_forward(lambda x1, x2, w, b: (F.bilinear(x1, x2, w), F.bilinear(x1, x2, w, b)), [x1, x2, w, b],
                  [want, want + b], rtol=1e-12)
    check_grads(lambda x1, x2, w, b: F.bilinear(x1, x2, w, b), [x1, x2, w, b])
    with pytest.raises(gc.ShapeError, match="bilinear: x1 .* must end in the in1 and in2"):
        gc.compile(F.bilinear, x1, x1, w)


def test_bilinear_and_products_of_zero_size_operands():
    """An empty batch gives an empty result, an empty contraction (in1 = 0, or addbmm's batch, addmv's
    columns) sums nothing, so the result is the bias or the input alone, as numpy's einsum and torch."""
    w, b = rand(4, 3, 2, seed=1, dtype=np.float64), rand(4, seed=2, dtype=np.float64)
    ones = np.ones
    check_forward(lambda x1, x2, w, b: (F.bilinear(x1, x2, w, b),
                                        F.bilinear(ones((2, 0)), ones((2, 2)), ones((4, 0, 2)), b)),
                  [np.zeros((0, 3)), np.zeros((0, 2)), w, b], [np.zeros((0, 4)), np.broadcast_to(b, (2, 4))])
    x = rand(3, seed=3, dtype=np.float64)
    check_forward(lambda x: (F.addmv(x, ones((3, 0)), ones(0), 2.0), F.addbmm(ones((2, 3)), ones((0, 2, 4)),
                                                                              ones((0, 4, 3))),
                             F.addr(ones((0, 2)), ones(0), ones(2)), F.vecdot(ones((0, 4)), ones((0, 4)))),
                  [x], [2 * x, ones((2, 3)), ones((0, 2)), ones(0)])
    check_forward(lambda z: (F.column_stack([z, z]), F.atleast_3d(z), *F.meshgrid(z[:, 0], ones(3))),
                  [np.zeros((0, 4))], [np.zeros((0, 8)), np.zeros((0, 4, 1)), np.zeros((3, 0)), np.zeros((3, 0))])
