"""Elementwise ops: forward through onnxruntime against numpy, and float64 gradient checks."""
import math

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.testing import check_lowering

from ..opcheck import check_forward, check_grads

_erf = np.vectorize(math.erf, otypes=[float])
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def rand(*shape, seed=0, dtype=np.float32, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def away_from_zero(*shape, seed=0, dtype=np.float32):
    """Values with 0.2 <= |x| <= 2: clear of the kink of relu, abs, leaky_relu, elu, ..."""
    x = rand(*shape, seed=seed, dtype=np.float64, low=0.2, high=2.0)
    sign = np.where(np.random.default_rng(seed + 100).random(shape) < 0.5, -1.0, 1.0)
    return (x * sign).astype(dtype)


def gelu_np(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


# -- binary arithmetic ---------------------------------------------------------------------------
BINARY = [
    (F.add, np.add), (F.subtract, np.subtract), (F.multiply, np.multiply), (F.divide, np.divide),
    (F.maximum, np.maximum), (F.minimum, np.minimum), (F.power, np.power), (F.pow, np.power),
]


@pytest.mark.parametrize("fn, ref", BINARY, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_broadcasting(fn, ref, dtype):
    a = rand(3, 1, seed=1, dtype=dtype, low=0.5, high=2.0)
    b = rand(1, 4, seed=2, dtype=dtype, low=0.5, high=2.0)
    check_forward(fn, [a, b], ref(a, b).astype(dtype))


@pytest.mark.parametrize("fn, ref", BINARY, ids=lambda f: getattr(f, "__name__", ""))
def test_binary_with_numpy_array_and_scalar_operands(fn, ref):
    x = rand(2, 3, seed=3, low=0.5, high=2.0)
    c = rand(3, seed=4, low=0.5, high=2.0)                    # closed-over array, either side
    check_forward(lambda x: (fn(x, c), fn(c, x), fn(x, 1.5), fn(2.5, x)), [x],
                  [ref(x, c), ref(c, x), ref(x, np.float32(1.5)), ref(np.float32(2.5), x)])


def test_tensor_operators_with_python_scalars_on_either_side():
    def f(x):   # the same code runs on numpy arrays (the expectation) and on Tensors
        return 2 - x, x - 2, 3 * x, x * 3, 1 / x, x / 4, x ** 2, 2 ** x, x + 1, 1 + x, -x, +x
    x = rand(2, 3, seed=5, low=0.5, high=2.0)
    out = check_forward(f, [x], list(f(x)))
    assert all(o.dtype == np.float32 for o in out)    # Python scalars are weak: float32 stays float32


def test_tensor_operators_with_numpy_arrays_on_either_side():
    c = rand(4, seed=7, low=0.5, high=2.0)

    def f(x):
        return c + x, x - c, c - x, c * x, c / x, x ** c, c ** x, x + np.ones(4, np.float32)
    x = rand(3, 4, seed=6, low=0.5, high=2.0)
    check_forward(f, [x], list(f(x)))


def test_scalar_tensor_operand_broadcasts():
    x = rand(2, 3, seed=8)
    s = np.asarray(1.25, np.float32)
    check_forward(lambda x, s: (x * s, s - x), [x, s], [x * s, s - x])


def test_integer_arithmetic_stays_integer():
    a = np.array([[3, -7, 4]], np.int64)
    b = np.array([[2], [5]], np.int64)
    out = check_forward(lambda a, b: (a + b, a - b, a * b, F.maximum(a, b), F.minimum(a, b), -a, F.abs(a), a * 2),
                        [a, b], [a + b, a - b, a * b, np.maximum(a, b), np.minimum(a, b), -a, np.abs(a), a * 2])
    assert all(o.dtype == np.int64 for o in out)


def test_integer_true_division_is_float64_as_in_numpy():
    a = np.array([3, -7, 4], np.int64)
    out = check_forward(lambda a: (a / 2, F.divide(a, a)), [a], [a / 2, a / a])
    assert out[0].dtype == np.float64


def test_mixed_int_and_float_promote_like_numpy():
    i = np.array([1, 2, 3], np.int32)
    x = rand(3, seed=9)
    out = check_forward(lambda i, x: (i + x, i * 0.5), [i, x], [i + x, i * 0.5])
    assert out[0].dtype == np.float64 and out[1].dtype == np.float64     # numpy 2: int32 and float32 -> float64


def test_symbolic_batch_broadcasting_runs_at_several_sizes():
    b = rand(4, seed=10)
    cf = gc.compile(lambda x: F.maximum(x * b - 1, 0) / (1 + x * x), gc.spec(("batch", 4)))
    for n in (1, 5):
        x = rand(n, 4, seed=n)
        np.testing.assert_allclose(cf(x), np.maximum(x * b - 1, 0) / (1 + x * x), rtol=1e-6)


def test_binary_shape_mismatch_is_a_shape_error():
    with pytest.raises(gc.ShapeError, match=r"\(2, 3\).*\(4,\)"):
        gc.compile(lambda a, b: a + b, np.ones((2, 3), np.float32), np.ones(4, np.float32))


# -- comparisons, logic, where ---------------------------------------------------------------------
COMPARISONS = [(F.less, np.less), (F.less_equal, np.less_equal), (F.greater, np.greater),
               (F.greater_equal, np.greater_equal), (F.equal, np.equal), (F.not_equal, np.not_equal)]


@pytest.mark.parametrize("fn, ref", COMPARISONS, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_comparisons_return_bool(fn, ref, dtype):
    a = np.array([[1, 2, 3, 2]], dtype)
    b = np.array([[2], [3]], dtype)
    out = check_forward(lambda a, b: (fn(a, b), fn(a, 2), fn(2, a)), [a, b], [ref(a, b), ref(a, 2), ref(2, a)])
    assert all(o.dtype == np.bool_ for o in out)


def test_comparison_operators_and_logic():
    a, b = rand(3, 4, seed=11), rand(4, seed=12)
    check_forward(lambda a, b: (a < b, a <= 0.5, a > b, a >= b, a == a, a != b,
                                (a > 0) & (b > 0), (a > 0) | (b > 0), ~(a > 0),
                                F.logical_and(a > 0, b < 0), F.logical_or(a > 1, b > 1), F.logical_not(a < b)),
                  [a, b], [a < b, a <= 0.5, a > b, a >= b, a == a, a != b, (a > 0) & (b > 0), (a > 0) | (b > 0),
                           ~(a > 0), (a > 0) & (b < 0), (a > 1) | (b > 1), ~(a < b)])


def test_logical_ops_need_bool():
    with pytest.raises(gc.ShapeError, match="bool"):
        gc.compile(lambda a: F.logical_not(a), np.ones(3, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_where_broadcasts_all_three(dtype):
    c = np.array([[True], [False], [True]])
    a = np.arange(4).astype(dtype)
    b = np.full((3, 1), 7, dtype)
    check_forward(F.where, [c, a, b], np.where(c, a, b))


def test_where_with_scalars_and_non_bool_condition():
    x = rand(2, 3, seed=13)
    m = np.array([0, 2, 0], np.int64)          # nonzero means true, as in numpy
    check_forward(lambda x, m: (F.where(x > 0, x, 0.0), F.where(m, 1.0, x)), [x, m],
                  [np.where(x > 0, x, np.float32(0)), np.where(m, np.float32(1), x)])


# -- unary math ------------------------------------------------------------------------------------
UNARY = {  # name: (function, numpy expectation, input domain (low, high), runs in float64 on ORT CPU)
    "exp": (F.exp, np.exp, (-2, 2), True),
    "log": (F.log, np.log, (0.1, 3), True),
    "log1p": (F.log1p, np.log1p, (-0.9, 3), True),
    "expm1": (F.expm1, np.expm1, (-2, 2), True),
    "sqrt": (F.sqrt, np.sqrt, (0.1, 3), True),
    "rsqrt": (F.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 3), True),
    "square": (F.square, np.square, (-2, 2), True),
    "abs": (F.abs, np.abs, (-2, 2), True),
    "sign": (F.sign, np.sign, (-2, 2), True),
    "negative": (F.negative, np.negative, (-2, 2), True),
    "sin": (F.sin, np.sin, (-3, 3), True),
    "cos": (F.cos, np.cos, (-3, 3), True),
    "tan": (F.tan, np.tan, (-1.2, 1.2), False),
    "tanh": (F.tanh, np.tanh, (-3, 3), True),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-5, 5), True),
    "erf": (F.erf, _erf, (-2, 2), False),
    "relu": (F.relu, lambda x: np.maximum(x, 0), (-2, 2), True),
    "selu": (F.selu, lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * (np.exp(x) - 1)), (-2, 2), True),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x)), (-3, 3), True),
    "floor": (F.floor, np.floor, (-3, 3), True),
    "ceil": (F.ceil, np.ceil, (-3, 3), True),
    "gelu": (F.gelu, lambda x: gelu_np(x, False), (-3, 3), False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate=True), lambda x: gelu_np(x, True), (-3, 3), True),
    "leaky_relu": (F.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x), (-2, 2), True),
    "leaky_relu_0.05": (lambda x: F.leaky_relu(x, slope=0.05), lambda x: np.where(x > 0, x, 0.05 * x), (-2, 2), True),
    "elu": (F.elu, lambda x: np.where(x > 0, x, np.exp(x) - 1), (-2, 2), True),
    "elu_0.5": (lambda x: F.elu(x, alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * (np.exp(x) - 1)), (-2, 2), True),
    "softplus": (F.softplus, lambda x: np.log(1 + np.exp(x)), (-3, 3), True),
    "softplus_beta2": (lambda x: F.softplus(x, beta=2.0), lambda x: np.log(1 + np.exp(2 * x)) / 2, (-3, 3), True),
    "clip": (lambda x: F.clip(x, -0.5, 0.75), lambda x: np.clip(x, -0.5, 0.75), (-2, 2), True),
    "clip_lo": (lambda x: F.clip(x, lo=0.1), lambda x: np.maximum(x, 0.1), (-2, 2), True),
    "clip_hi": (lambda x: F.clip(x, hi=0.1), lambda x: np.minimum(x, 0.1), (-2, 2), True),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_forward(name, dtype):
    fn, ref, (low, high), has_float64 = UNARY[name]
    if dtype == np.float64 and not has_float64:
        dtype = np.float32            # ORT's CPU provider lacks the float64 kernel (test_runtime checks the error)
    x = rand(2, 3, 4, seed=len(name), dtype=dtype, low=low, high=high)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    check_forward(fn, [x], ref(x.astype(np.float64)).astype(dtype), rtol=rtol, atol=rtol)


def test_unary_on_a_symbolic_batch():
    cf = gc.compile(lambda x: F.gelu(F.tanh(x)) + F.softplus(x, 2.0) * F.sigmoid(x), gc.spec(("batch", 3)))
    for n in (2, 7):
        x = rand(n, 3, seed=n)
        np.testing.assert_allclose(
            cf(x), gelu_np(np.tanh(x), False) + np.log1p(np.exp(2 * x)) / 2 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)


def test_round_is_half_to_even_like_numpy():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7], np.float32)
    check_forward(F.round, [x], np.round(x))


def test_unary_math_on_integers_computes_in_float32():
    i = np.array([1, 2, 3], np.int64)
    out = check_forward(lambda i: (F.exp(i), F.sqrt(i), F.sign(-i)), [i],
                        [np.exp(i).astype(np.float32), np.sqrt(i).astype(np.float32), np.sign(-i)])
    assert out[0].dtype == np.float32 and out[2].dtype == np.int64


@pytest.mark.parametrize("fn, ref", [(F.log1p, np.log1p), (F.expm1, np.expm1)], ids=["log1p", "expm1"])
def test_log1p_expm1_are_accurate_for_tiny_inputs(fn, ref):
    x = np.array([1e-7, -1e-7, 3e-8, 1e-12, 1e-3, -0.4, 0.7, 2.5], np.float32)
    got = gc.compile(fn, x, provider="cpu")(x)
    exact = ref(x.astype(np.float64))
    assert np.max(np.abs(got - exact) / np.abs(exact)) < 1e-6     # naive log(1+x) in float32 is off by ~20%


@pytest.mark.parametrize("opset", [18, None])
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_lowering_at_old_and_new_opsets(opset, approximate):
    x = rand(3, 4, seed=14, low=-3, high=3)
    cf = gc.compile(lambda x: F.gelu(x, approximate=approximate), x, opset=opset, provider="cpu")
    assert ("Gelu" in {n.op_type for n in cf.model.graph.node}) == (opset is None)
    np.testing.assert_allclose(cf(x), gelu_np(x.astype(np.float64), approximate), rtol=1e-5, atol=1e-6)


def test_float32_gradients_of_activations_stay_float32():
    x = away_from_zero(2, 5, seed=15)

    def grads(x):
        acts = [F.leaky_relu(x, 0.1), F.elu(x, 0.5), F.selu(x), F.softplus(x, 2.0), F.gelu(x, True), F.relu(x),
                F.clip(x, -1.0, 1.0), F.silu(x), F.abs(x)]
        return [gc.grad(F.sum(a), [x])[0] for a in acts]
    out = check_lowering(grads, [x])
    assert all(o.dtype == np.float32 for o in out)
    np.testing.assert_allclose(out[0], np.where(x > 0, 1, 0.1), rtol=1e-6)


# -- gradients (float64, reference evaluator) ------------------------------------------------------
def test_grad_arithmetic_with_broadcasting():
    a, b = rand(3, 1, seed=16, low=0.5, high=2), rand(1, 4, seed=17, low=0.5, high=2)
    check_grads(lambda a, b: (a + b, a - b, a * b, a / b, -a), [a, b])


def test_grad_pow_in_base_and_exponent():
    x, y = rand(2, 3, seed=18, low=0.5, high=2), rand(3, seed=19, low=-1.5, high=1.5)
    check_grads(lambda x, y: (x ** y, F.power(2.0, y), x ** 3), [x, y])


def test_grad_maximum_minimum_without_ties():
    a = np.array([[0.3, -1.2, 0.8]])
    b = np.array([[0.1], [-0.5]])
    check_grads(lambda a, b: (F.maximum(a, b), F.minimum(a, b), F.maximum(a, 0.0)), [a, b])


def test_grad_where():
    c = np.array([[True, False, True]])
    a, b = rand(2, 3, seed=20), rand(3, seed=21)
    check_grads(lambda a, b: F.where(c, a * a, b), [a, b])


GRAD_UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "square", "abs", "negative", "sin", "cos", "tan",
              "tanh", "sigmoid", "erf", "relu", "selu", "silu", "gelu", "gelu_tanh", "leaky_relu_0.05", "elu_0.5",
              "softplus", "softplus_beta2", "clip"]


@pytest.mark.parametrize("name", GRAD_UNARY)
def test_grad_unary(name):
    fn, _, (low, high), _ = UNARY[name]
    if name == "clip":     # both sides of both bounds (-0.5, 0.75), none close to them
        x = np.array([[-1.3, -0.2, 0.3], [0.5, 1.1, -0.9]])
    else:
        x = np.clip(away_from_zero(2, 3, seed=22, dtype=np.float64), low + 0.05, high - 0.05)
    check_grads(fn, [x])


@pytest.mark.parametrize("dtype, ulps", [(np.float32, 4), (np.float64, 4)])
def test_softplus_is_accurate_over_its_whole_range(dtype, ulps):
    """softplus as vectorised ops with a log1p of its own: within a few ulp of float64's (of
    float64's logaddexp for float64) from far left (the value as small as the dtype keeps) to
    far right, with beta; exact at the edges."""
    eps, tiny = np.finfo(dtype).eps, np.finfo(dtype).tiny
    x = np.concatenate([np.linspace(-700, 700, 20001), -np.logspace(-40, 2.8, 400), np.logspace(-40, 2.8, 400)])
    x = x.astype(dtype)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype)
    got, got_beta, got_edges = gc.compile(lambda x, e: (F.softplus(x), F.softplus(x, beta=3.0), F.softplus(e)),
                                          x, edges, provider="cpu")(x, edges)
    for y, beta in ((got, 1.0), (got_beta, 3.0)):
        want = np.logaddexp(0, (dtype(beta) * x).astype(np.float64)) / beta     # of the rounded beta·x
        normal = (want > tiny / eps) & np.isfinite(want.astype(dtype))
        err = np.abs(y[normal] - want[normal]) / want[normal]
        assert err.max() <= ulps * eps, (err.max(), x[normal][err.argmax()])
    np.testing.assert_array_equal(got_edges, np.array([np.log(2), np.log(2), np.inf, 0.0, np.nan], dtype))


def test_logaddexp_forward_matches_numpy_with_broadcasting_and_extremes():
    a = rand(3, 4, seed=1) * 50
    b = rand(4, seed=2) * 50
    check_forward(F.logaddexp, [a, b], np.logaddexp(a, b), rtol=1e-6)
    inf = np.inf
    x = np.array([inf, -inf, inf, -inf, 3.0, 0.0, 1e4, -1e4, np.nan, 2.0], np.float32)
    y = np.array([inf, -inf, -inf, 5.0, 3.0, -200.0, 1e4, 1e4, 1.0, np.nan], np.float32)
    with np.errstate(invalid="ignore"):
        expected = np.logaddexp(x, y)
    for dtype in (np.float32, np.float64):
        got = check_forward(F.logaddexp, [x.astype(dtype), y.astype(dtype)], expected.astype(dtype))
        assert got[0][0] == inf and got[0][1] == -inf and got[0][2] == inf


def test_logaddexp_of_integers_is_float64_as_in_numpy():
    a, b = np.arange(4), np.array([3, 2, 1, 0])
    check_forward(F.logaddexp, [a, b], np.logaddexp(a, b))


def test_grad_logaddexp_away_from_and_at_ties():
    a, b = rand(3, 4, seed=3), rand(4, seed=4)
    check_grads(F.logaddexp, [a, b], order=2)
    check_grads(F.logaddexp, [a, a.copy()], order=2)   # ties: half the gradient to each operand
    g = gc.compile(lambda a, b: gc.grad(F.sum(F.logaddexp(a, b)), [a, b]), a, a)(a, a)
    np.testing.assert_allclose(g[0], 0.5, rtol=1e-6)
    np.testing.assert_allclose(g[1], 0.5, rtol=1e-6)


def test_numpy_scalars_are_weak_beside_tensors_and_0d_arrays_are_not():
    """NumPy 2 gives float64 for float32_array * np.float64(s); PyTorch and JAX keep float32, and so do
    gcompile's Tensors: x * (1 / np.sqrt(d)) in an attention block stays float32."""
    x = rand(2, 3, seed=6)
    out = gc.compile(lambda x: (x * (1 / np.sqrt(16)), np.float64(2) * x, F.where(x > 0, x, np.float64(0)),
                                x + np.int64(3), F.maximum(x, np.float16(0)), x * np.array(0.5)), x)(x)
    assert [o.dtype for o in out] == [np.float32] * 5 + [np.float64]
    np.testing.assert_allclose(out[0], x / 4, rtol=1e-7)
    np.testing.assert_allclose(out[1], 2 * x, rtol=1e-7)
    i = np.arange(3, dtype=np.int32)
    assert gc.compile(lambda i: i * np.int64(2), i)(i).dtype == np.int32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log1p_expm1_at_infinities_nan_and_minus_one(dtype):
    x = np.array([np.inf, -np.inf, np.nan, -1.0, 0.0, -0.0, 3e4], dtype)
    with np.errstate(all="ignore"):
        check_forward(lambda x: (F.log1p(x), F.expm1(x)), [x], [np.log1p(x), np.expm1(x)])


def test_where_between_bools_runs_on_onnx_runtime():
    """ONNX Runtime has no bool Where kernel: the node is computed in int32 (lowering/kernels.py), broadcasting too."""
    a, b = np.array([[1.0], [-1.0], [3.0]]), np.array([True, False])
    check_forward(lambda a, b: F.where(F.greater(a, 0), F.less(a, 2), b), [a, b],
                  np.where(a > 0, a < 2, b))


# -- PyTorch's pointwise names: logaddexp2, addcmul, addcdiv, logical_xor, heaviside -----------------------
def test_logaddexp2_matches_numpy_and_differentiates():
    a = np.array([-3.0, 0.0, 2.0, 50.0, -np.inf, np.inf, 1.0, np.nan])
    b = np.array([1.0, 0.0, -2.0, 49.0, -np.inf, 1.0, np.inf, 1.0])
    with np.errstate(invalid="ignore"):
        check_forward(F.logaddexp2, [a, b], np.logaddexp2(a, b), rtol=1e-14)
    check_forward(F.logaddexp2, [np.zeros((0, 2)), np.zeros(2)], np.zeros((0, 2)))
    x, y = rand(3, 4, seed=20, dtype=np.float64), rand(4, seed=21, dtype=np.float64)
    check_grads(F.logaddexp2, [x, y])
    check_grads(F.logaddexp2, [x, x.copy()])                           # ties: half to each


def test_addcmul_addcdiv_broadcast_and_scale():
    x, a, b = rand(2, 3, seed=22), rand(3, seed=23), rand(2, 1, seed=24) + 3
    check_forward(lambda x, a, b: (F.addcmul(x, a, b), F.addcmul(x, a, b, value=-0.5), F.addcdiv(x, a, b),
                                   F.addcdiv(x, a, b, value=2)), [x, a, b],
                  [x + a * b, x - 0.5 * a * b, x + a / b, x + 2 * a / b])
    check_grads(lambda x, a, b: (F.addcmul(x, a, b, value=3), F.addcdiv(x, a, b, value=-2)),
                [x.astype(np.float64), a.astype(np.float64), b.astype(np.float64)])
    ints = np.array([3, 4]), np.array([2, 8])          # integer operands divide as floats
    check_forward(lambda x, a: F.addcdiv(x, x, a), list(ints), ints[0] + ints[0] / ints[1])


def test_logical_xor_reads_numbers_as_truth_values():
    a = np.array([0.0, -2.0, np.nan, 0.0, 1.0])
    b = np.array([0.0, 0.0, 1.0, -0.0, 3.0])
    check_forward(F.logical_xor, [a, b], np.logical_xor(a, b))
    t, f = np.array([True, False]), np.array([[True], [False]])
    check_forward(F.logical_xor, [t, f], np.logical_xor(t, f))
    check_forward(F.logical_xor, [np.array(3), np.array([0, 5])], np.logical_xor(3, [0, 5]))


def test_heaviside_values_at_zero_infinities_and_nan():
    x = np.array([-1.0, -0.0, 0.0, 2.0, np.inf, -np.inf, np.nan])
    v = np.array([0.5, 0.25, 7.0, 0.5, 0.5, 0.5, 0.5])
    check_forward(F.heaviside, [x, v], np.heaviside(x, v))
    check_forward(F.heaviside, [np.array([-2, 0, 3]), np.array(5)], np.heaviside([-2, 0, 3], 5))
    g = gc.compile(lambda x, v: gc.grad(F.sum(F.heaviside(x, v) * np.arange(7.0)), [x, v]), x, v)(x, v)
    np.testing.assert_array_equal(g[0], np.zeros(7))                  # the step is flat
    np.testing.assert_array_equal(g[1], [0, 1, 2, 0, 0, 0, 0])        # values counts where x == 0
    check_grads(lambda v: F.heaviside(np.array([-1.0, 0.0, 1.0]), v), [np.array([[0.3, 0.2, 0.1], [0.4, -0.5, 0.6]])])
