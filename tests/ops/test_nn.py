"""nn functions: forward through onnxruntime against numpy written here, numeric gradient
checks to second (and third) order, and the exact gradient identities of ARCHITECTURE.md §9.2."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply_n
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_lowering

from ..opcheck import check_forward, check_grads, check_values

DTYPES = [np.float32, np.float64]


def rand(*shape, lo=-2.0, hi=2.0, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def labels_for(shape, n, seed=1):
    return np.random.default_rng(seed).integers(0, n, shape).astype(np.int64)


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-12}


# numpy expectations, written independently of the ops' reference rules
def np_log_softmax(x, axis):
    return x - np.log(np.sum(np.exp(x), axis=axis, keepdims=True))


def np_softmax(x, axis):
    return np.exp(np_log_softmax(x, axis))


def np_onehot(t, n, axis):
    return (np.expand_dims(t, axis) == np.arange(n).reshape((n,) + (1,) * (t.ndim - axis))).astype(np.float64)


def np_reduce(loss, reduce):
    return {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduce](loss)


def run_ref(fn, inputs):
    """Trace fn and evaluate it on the numpy reference evaluator (float64)."""
    return evaluate(trace(fn, inputs).graph, inputs)


# -- softmax / log_softmax ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_forward(dtype, axis):
    x = rand(2, 3, 4, lo=-5, hi=5, dtype=dtype)
    check_forward(lambda x: (F.softmax(x, axis), F.log_softmax(x, axis)), [x],
                  [np_softmax(x.astype(np.float64), axis), np_log_softmax(x.astype(np.float64), axis)], **tol(dtype))


def test_softmax_symbolic_batch_and_large_logits():
    x = np.array([[1000.0, 0.0, -1000.0], [3.0, 3.0, 3.0]], np.float32)
    expected_log = np.array([[0.0, -1000.0, -2000.0], [-np.log(3)] * 3], np.float32)
    check_forward(lambda x: (F.softmax(x), F.log_softmax(x)), [x], [np.exp(expected_log), expected_log],
                  specs=[gc.spec(("batch", 3))])


def test_softmax_over_a_middle_axis_is_written_out_and_agrees_with_onnx_softmax():
    """Over a middle axis softmax is its own ops (onnxruntime's Softmax moves the axis last and
    back); its values are the native op's over the last axis of the transposed input, with large
    logits, a fully masked (-inf) column, +inf (NaN, as the native op gives) and NaN; a trailing
    axis of size 1 keeps the native op."""
    x = rand(2, 4, 3, 5, lo=-5, hi=5, dtype=np.float32)
    x[0, :, 0, 0] = [1000.0, 0.0, -1000.0, 5.0]
    x[0, :, 1, 1] = -np.inf
    x[1, 2, 0, 0], x[1, 1, 1, 1] = np.inf, np.nan
    moved = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    native = gc.compile(lambda m: (F.softmax(m, -1), F.log_softmax(m, -1)), moved, provider="cpu")(moved)
    fn = lambda x: (F.softmax(x, 1), F.log_softmax(x, 1))        # noqa: E731
    got = gc.compile(fn, x, provider="cpu")(x)
    for g, n in zip(got, native):
        np.testing.assert_allclose(g, np.moveaxis(n, -1, 1), rtol=1e-5, atol=1e-6)
    assert not {"Softmax", "LogSoftmax"} & {n.op_type for n in gc.compile(fn, x, provider="cpu").model.graph.node}
    column = rand(3, 4, 1, lo=-5, hi=5, dtype=np.float32)
    ops = [n.op_type for n in gc.compile(lambda c: F.softmax(c, 1), column, provider="cpu").model.graph.node]
    assert "Softmax" in ops


@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_grads_to_third_order(axis):
    x = rand(2, 3, 4)
    check_grads(lambda x: F.softmax(x, axis), [x], order=3)
    check_grads(lambda x: F.log_softmax(x, axis), [x], order=3)


@pytest.mark.parametrize("axis", [-1, 0])
def test_log_softmax_gradient_identities(axis):
    """dx = dy - softmax(x)·Σdy; d<dx, g>/dx = softmax's VJP of g·(-Σdy); d<dx, g>/ddy = g - Σ g·softmax."""
    x, dy, g = rand(3, 4, seed=1), rand(3, 4, seed=2), rand(3, 4, seed=3)

    def fn(x, dy, g):
        (dx,) = gc.grad(F.log_softmax(x, axis), [x], grad_outputs=[dy])
        return [dx] + gc.grad(F.sum(dx * g), [x, dy])

    dx, ddx, ddy = run_ref(fn, [x, dy, g])
    s = np_softmax(x, axis)
    np.testing.assert_allclose(dx, dy - s * dy.sum(axis, keepdims=True), rtol=1e-10, atol=1e-14)
    u = -g * dy.sum(axis, keepdims=True)
    np.testing.assert_allclose(ddx, s * (u - np.sum(u * s, axis, keepdims=True)), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(ddy, g - np.sum(g * s, axis, keepdims=True), rtol=1e-10, atol=1e-14)


# -- softmax cross-entropy ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,axis", [((4, 5), -1), ((2, 5, 3), 1)])
def test_softmax_cross_entropy_forward(dtype, reduce, shape, axis):
    x = rand(*shape, lo=-4, hi=4, dtype=dtype)
    ax = axis % len(shape)
    t = labels_for(shape[:ax] + shape[ax + 1:], shape[ax])
    loss = -np.sum(np_onehot(t, shape[ax], ax) * np_log_softmax(x.astype(np.float64), ax), axis=ax)
    check_forward(lambda x, t: F.softmax_cross_entropy(x, t, axis=axis, reduce=reduce), [x, t],
                  np_reduce(loss, reduce), **tol(dtype))


@pytest.mark.parametrize("reduce", ["mean", "none"])
def test_softmax_cross_entropy_symbolic_batch(reduce):
    x, t = rand(3, 5, dtype=np.float32), labels_for((3,), 5).astype(np.int32)
    loss = -np_log_softmax(x.astype(np.float64), 1)[np.arange(3), t]
    check_forward(lambda x, t: F.softmax_cross_entropy(x, t, reduce=reduce), [x, t], np_reduce(loss, reduce),
                  specs=[gc.spec(("batch", 5)), gc.spec(("batch",), "int32")])


@pytest.mark.parametrize("reduce", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,axis", [((4, 5), -1), ((2, 5, 3), 1)])
def test_softmax_cross_entropy_grads(reduce, shape, axis):
    ax = axis % len(shape)
    t = labels_for(shape[:ax] + shape[ax + 1:], shape[ax])
    check_grads(lambda x, t: F.softmax_cross_entropy(x, t, axis=axis, reduce=reduce), [rand(*shape), t])


def test_softmax_cross_entropy_gradient_identities():
    """dx = (softmax(x) - onehot(t))·dz/N; d<dx, g>/dx = softmax's VJP of g·dz/N;
    d<dx, g>/ddz = Σ g·(softmax - onehot)/N."""
    x, g, t, dz = rand(4, 5, seed=1), rand(4, 5, seed=2), labels_for((4,), 5), np.asarray(0.7)

    def fn(x, t, dz, g):
        (dx,) = gc.grad(F.softmax_cross_entropy(x, t), [x], grad_outputs=[dz])
        return [dx] + gc.grad(F.sum(dx * g), [x, dz])

    dx, ddx, ddz = run_ref(fn, [x, t, dz, g])
    s, onehot, n = np_softmax(x, 1), np_onehot(t, 5, 1), x.shape[0]
    np.testing.assert_allclose(dx, (s - onehot) * dz / n, rtol=1e-10, atol=1e-15)
    u = g * dz / n
    np.testing.assert_allclose(ddx, s * (u - np.sum(u * s, 1, keepdims=True)), rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(ddz, np.sum(g * (s - onehot)) / n, rtol=1e-10)


def test_softmax_cross_entropy_with_masked_classes_and_labels_out_of_range():
    """A class masked with -inf logits costs nothing (the loss is finite, its gradient 0, as torch);
    a label outside [0, n) counts 0 and sends no gradient, as a one-hot of it would."""
    x = np.array([[0.5, -np.inf, 1.0], [2.0, 0.0, -np.inf], [1.0, 2.0, 3.0], [-np.inf, 1.0, 0.0]])
    t = np.array([0, 1, 3, -1])
    s, rows = np_softmax(np.where(np.isinf(x), -1e300, x), 1), np.arange(2)
    loss = np.concatenate([-np.log(s[rows, t[:2]]), [0.0, 0.0]])
    onehot = np_onehot(t, 3, 1)
    grad = (s - onehot) * np.array([1, 1, 0, 0])[:, None] / 4
    check_values(lambda x: (F.softmax_cross_entropy(x, t, reduce="none"),
                            gc.grad(F.softmax_cross_entropy(x, t), [x])[0]), [x], [loss, grad], rtol=1e-12)
    logp = np.array([[-0.5, -np.inf, -1.0], [-1.0, -0.25, -np.inf], [-np.inf, -2.0, -3.0]])
    check_values(lambda a: F.nll_loss(a, np.array([0, 1, 0]), ignore_index=0), [logp], [np.asarray(0.25)])


@pytest.mark.parametrize("shape, axis, dtype", [((4, 5), -1, np.int64), ((2, 5, 3, 2), 1, np.int32)])
def test_softmax_cross_entropy_gradients_on_onnxruntime_to_second_order(shape, axis, dtype):
    """The op's VJP scatters the label's share onto softmax·g (one scatter, not a one-hot): on
    ONNX Runtime, first and second order equal the reference evaluator's, labels out of range too."""
    ax = axis % len(shape)
    x, w = rand(*shape, seed=3), rand(*shape, seed=4)
    t = labels_for(shape[:ax] + shape[ax + 1:], shape[ax]).astype(dtype)
    t.flat[0] = shape[ax]                                  # outside [0, n): counts 0

    def grads(x):
        (dx,) = gc.grad(F.softmax_cross_entropy(x, t, axis=axis), [x])
        return [dx, gc.grad(F.sum(dx * w), [x])[0]]
    check_lowering(grads, [x], rtol=1e-9, atol=1e-12)


def test_softmax_cross_entropy_over_no_classes_is_zero():
    x, t = np.zeros((3, 0)), np.zeros(3, np.int64)
    loss, (dx,) = gc.compile(lambda x: (F.softmax_cross_entropy(x, t, reduce="none"),
                                        gc.grad(F.softmax_cross_entropy(x, t), [x])), x, provider="cpu")(x)
    np.testing.assert_array_equal(loss, np.zeros(3))
    assert dx.shape == (3, 0)


def test_softmax_cross_entropy_errors():
    x = rand(4, 5)
    with pytest.raises(gc.ShapeError, match=r"expected \(4,\)"):
        trace(lambda x, t: F.softmax_cross_entropy(x, t), [x, labels_for((5,), 5)])
    with pytest.raises(gc.ShapeError, match="integer class indices"):
        trace(lambda x, t: F.softmax_cross_entropy(x, t), [x, rand(4)])
    with pytest.raises(gc.GcompileError, match="reduce must be"):
        trace(lambda x, t: F.softmax_cross_entropy(x, t, reduce="avg"), [x, labels_for((4,), 5)])


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_one_hot(axis):
    t = np.array([[0, 3, 1], [4, 2, -1]], np.int32)     # 4 and -1 are out of range: all-zero rows
    expected = np_onehot(t, 4, axis % 3).astype(np.float32)
    check_forward(lambda t: F.one_hot(t, 4, axis=axis), [t], expected)


# -- sigmoid cross-entropy and mse -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["mean", "sum", "none"])
def test_sigmoid_cross_entropy_forward(dtype, reduce):
    x = np.array([[-60.0, -3.0, -0.5, 0.0], [0.25, 2.0, 40.0, 1e-3]], dtype)
    t = rand(2, 4, lo=0, hi=1, dtype=dtype, seed=4)
    loss = np.logaddexp(0, x.astype(np.float64)) - x * t.astype(np.float64)
    check_forward(lambda x, t: F.sigmoid_cross_entropy(x, t, reduce=reduce), [x, t], np_reduce(loss, reduce),
                  specs=[gc.spec(("batch", 4), dtype)] * 2, **tol(dtype))


def test_sigmoid_cross_entropy_grads_and_exact_gradient_at_zero():
    x, t = rand(2, 3), rand(2, 3, lo=0, hi=1, seed=4)
    check_grads(lambda x, t: F.sigmoid_cross_entropy(x, t, reduce="none"), [x, t])
    check_grads(lambda x, t: F.sigmoid_cross_entropy(x, t), [x, t])
    x[0] = 0.0
    (dx,) = run_ref(lambda x, t: gc.grad(F.sigmoid_cross_entropy(x, t, reduce="sum"), [x]), [x, t])
    np.testing.assert_allclose(dx, 1 / (1 + np.exp(-x)) - t, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["mean", "sum", "none"])
def test_mse_forward(dtype, reduce):
    a, b = rand(3, 4, dtype=dtype), rand(4, dtype=dtype, seed=5)
    d = a.astype(np.float64) - b
    check_forward(lambda a, b: F.mse(a, b, reduce=reduce), [a, b], np_reduce(d ** 2, reduce), **tol(dtype))


def test_mse_grads():
    check_grads(lambda a, b: F.mse(a, b), [rand(3, 4), rand(4, seed=5)])
    check_grads(lambda a, b: F.mse(a, b, reduce="none"), [rand(3, 4), rand(3, 4, seed=5)])


# -- layer_norm --------------------------------------------------------------------------------------
def np_layer_norm(x, gamma, beta, axis, eps=1e-5):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,eps", [(-1, 1e-5), (1, 1e-3)])
def test_layer_norm_forward(dtype, axis, eps):
    x = rand(2, 3, 4, dtype=dtype)
    shape = x.shape[axis % 3:]
    gamma, beta = rand(*shape, dtype=dtype, seed=6), rand(*shape, dtype=dtype, seed=7)
    f64 = [a.astype(np.float64) for a in (x, gamma, beta)]
    # ONNX stores epsilon as a float32 attribute: 1e-3 becomes 1e-3·(1 + 5e-8), hence rtol 1e-8 in float64.
    got = check_forward(lambda x, g, b: F.layer_norm(x, g, b, axis=axis, eps=eps), [x, gamma, beta],
                        np_layer_norm(*f64, axis, eps), rtol=1e-4 if dtype == np.float32 else 1e-8,
                        atol=1e-5 if dtype == np.float32 else 1e-12)
    assert got[0].dtype == dtype



@pytest.mark.parametrize("shape, axis", [((3, 0), -1), ((0, 4), -1), ((2, 0, 3), 1)])
def test_layer_norm_of_nothing(shape, axis):
    """An empty normalised shape (or batch) gives an empty result and gradients (zeros for gamma and
    beta), as torch; ONNX Runtime's LayerNormalization refused an empty normalised shape."""
    x = np.zeros(shape, np.float32)
    g = np.ones(shape[axis:], np.float32)
    check_forward(lambda x, g: (F.layer_norm(x, g, g, axis=axis), *gc.grad(F.sum(F.layer_norm(x, g, g, axis=axis)),
                                                                            [x, g])), [x, g], [x, x, np.zeros_like(g)])


def test_layer_norm_lowers_to_fused_op_with_symbolic_batch():
    x, gamma, beta = rand(5, 4, dtype=np.float32), rand(4, dtype=np.float32, seed=6), rand(4, dtype=np.float32, seed=7)
    fn = lambda x, g, b: F.layer_norm(x, g, b)  # noqa: E731
    check_forward(fn, [x, gamma, beta], np_layer_norm(x, gamma, beta, -1), rtol=1e-4, atol=1e-5,
                  specs=[gc.spec(("batch", 4)), gc.spec((4,)), gc.spec((4,))])
    model = gc.compile(fn, gc.spec(("batch", 4)), gamma, beta, provider="cpu").model
    assert [n.op_type for n in model.graph.node].count("LayerNormalization") == 1


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm_grads(axis):
    x = rand(2, 3, 4)
    shape = x.shape[axis % 3:]
    check_grads(lambda x, g, b: F.layer_norm(x, g, b, axis=axis), [x, rand(*shape, seed=6), rand(*shape, seed=7)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_gradients_through_onnxruntime_match_the_reference(dtype):
    x, g, b = rand(3, 4, 5, dtype=dtype), rand(4, 5, seed=6, dtype=dtype), rand(4, 5, seed=7, dtype=dtype)

    def fn(x, g, b):
        gx, gg = gc.grad(F.sum(F.tanh(F.layer_norm(x, g, b, axis=1)) * x), [x, g])
        return gx, gg, gc.grad(F.sum(gx * gx), [x])[0]

    check_lowering(fn, [x, g, b], rtol=1e-4 if dtype == np.float32 else 1e-9)


def test_layer_norm_third_order():
    check_grads(lambda x, g, b: F.layer_norm(x, g, b), [rand(2, 3), rand(3, seed=6), rand(3, seed=7)], order=3)


def test_layer_norm_shape_error():
    with pytest.raises(gc.ShapeError, match="gamma must have the normalised shape"):
        trace(lambda x, g, b: F.layer_norm(x, g, b, axis=1), [rand(2, 3, 4), rand(4), rand(3, 4)])


# -- batch_norm --------------------------------------------------------------------------------------
def np_batch_norm(x, gamma, beta, axis, mean=None, var=None, eps=1e-5):
    axes = tuple(i for i in range(x.ndim) if i != axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    if mean is None:
        mean, var = x.mean(axes), x.var(axes)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)
    return y, mean, var


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((4, 3, 2), 1), ((5, 3), -1)])
def test_batch_norm_training_forward(dtype, shape, axis):
    x, gamma, beta = rand(*shape, dtype=dtype), rand(3, dtype=dtype, seed=6), rand(3, dtype=dtype, seed=7)
    expected = np_batch_norm(*(a.astype(np.float64) for a in (x, gamma, beta)), axis % len(shape))
    check_forward(lambda x, g, b: F.batch_norm(x, g, b, axis=axis, return_stats=True), [x, gamma, beta],
                  list(expected), **({"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else tol(dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_inference_forward(dtype):
    x, gamma, beta = rand(2, 3, 2, dtype=dtype), rand(3, dtype=dtype, seed=6), rand(3, dtype=dtype, seed=7)
    mean, var = rand(3, dtype=dtype, seed=8), rand(3, lo=0.5, hi=1.5, dtype=dtype, seed=9)
    expected, _, _ = np_batch_norm(*(a.astype(np.float64) for a in (x, gamma, beta)), 1, mean, var, eps=1e-3)
    check_forward(lambda x, g, b, m, v: F.batch_norm(x, g, b, m, v, eps=1e-3, training=False),
                  [x, gamma, beta, mean, var], expected, specs=[gc.spec(("batch", 3, 2), dtype)] +
                  [gc.spec((3,), dtype)] * 4, **tol(dtype))


def test_batch_norm_grads():
    x, gamma, beta = rand(4, 3, 2), rand(3, seed=6), rand(3, seed=7)
    check_grads(lambda x, g, b: F.batch_norm(x, g, b), [x, gamma, beta])
    check_grads(lambda x, g, b: F.batch_norm(x, g, b, axis=-1), [x[:, 0], rand(2, seed=6), rand(2, seed=7)])
    mean, var = rand(3, seed=8), rand(3, lo=0.5, hi=1.5, seed=9)
    check_grads(lambda x, g, b, m, v: F.batch_norm(x, g, b, m, v, training=False), [x, gamma, beta, mean, var])


def test_batch_norm_inference_grads_to_third_order_on_each_lowering():
    # channel axis 1 lowers to ONNX BatchNormalization in float32 (the ONNX Runtime model check_grads
    # runs), another axis to x·scale + shift; gradients reach the running statistics too
    x, gamma, beta = rand(4, 3, 2), rand(3, seed=6), rand(3, seed=7)
    mean, var = rand(3, seed=8), rand(3, lo=0.5, hi=1.5, seed=9)
    check_grads(lambda x, g, b, m, v: F.tanh(F.batch_norm(x, g, b, m, v, eps=0.1, training=False)),
                [x, gamma, beta, mean, var], order=3)
    check_grads(lambda x, g, b, m, v: F.batch_norm(x, g, b, m, v, axis=-1, training=False) ** 2,
                [x[:, 0], rand(2, seed=6), rand(2, seed=7), rand(2, seed=8), rand(2, lo=0.5, hi=1.5, seed=9)])


def test_batch_norm_inference_is_one_onnx_batch_normalization_in_its_layout():
    # one pass over x where ONNX's layout fits (channel axis 1, float32); x·scale + shift elsewhere
    args = [rand(2, 3, 4, dtype=np.float32)] + [rand(3, seed=s, dtype=np.float32) for s in (6, 7, 8)] + \
        [rand(3, lo=0.5, hi=1.5, seed=9, dtype=np.float32)]
    ops = [n.op_type for n in gc.compile(lambda x, g, b, m, v: F.batch_norm(x, g, b, m, v, training=False), *args,
                                         provider="cpu").model.graph.node]
    assert ops.count("BatchNormalization") == 1 and not {"Sub", "Mul", "Add", "Div"} & set(ops), ops
    ops = [n.op_type for n in gc.compile(lambda x, g, b, m, v: F.batch_norm(x, g, b, m, v, axis=2, training=False),
                                         args[0].transpose(0, 2, 1), *args[1:], provider="cpu").model.graph.node]
    assert "BatchNormalization" not in ops and "Mul" in ops, ops


def test_batch_norm_inference_edges():
    # ±inf and NaN in x, gamma 0 (inf·0 is NaN, as the composition), a zero variance, no batch
    x = rand(3, 3, 2)
    x[0, 0, 0], x[1, 1, 1], x[2, 2, 0] = np.inf, -np.inf, np.nan
    gamma, beta, mean, var = np.array([1.5, 0.0, -2.0]), rand(3, seed=7), rand(3, seed=8), np.array([1.0, 0.0, 2.0])

    def bn(x, g, b, m, v):
        return F.batch_norm(x, g, b, m, v, eps=1e-3, training=False)
    with np.errstate(invalid="ignore"):
        expected, _, _ = np_batch_norm(x, gamma, beta, 1, mean, var, eps=1e-3)
    for dtype in (np.float64, np.float32):
        args = [a.astype(dtype) for a in (x, gamma, beta, mean, var)]
        got = np.asarray(gc.compile(bn, *args, provider="cpu")(*args))
        np.testing.assert_allclose(got, expected.astype(dtype), rtol=1e-5, atol=1e-6)
    empty = np.zeros((0, 3, 2), np.float32)
    args = [empty] + [a.astype(np.float32) for a in (gamma, beta, mean, var)]
    grads = gc.compile(lambda x, g, b, m, v: gc.grad(F.sum(bn(x, g, b, m, v)), [x, g, b]), *args,
                       provider="cpu")(*args)
    assert np.asarray(grads[0]).shape == (0, 3, 2)
    np.testing.assert_array_equal(np.asarray(grads[1]), np.zeros(3))
    np.testing.assert_array_equal(np.asarray(grads[2]), np.zeros(3))


def test_batch_norm_inference_gamma_gradient_centres_before_its_product():
    # x and its running mean near 1e4, spread 1: Σ g·x - mean·Σ g would lose the float32 digits
    rng = np.random.default_rng(3)
    x = (1e4 + rng.standard_normal((8, 2, 5))).astype(np.float32)
    g = rng.standard_normal((8, 2, 5)).astype(np.float32)
    mean, var = np.full(2, 1e4, np.float32), np.ones(2, np.float32)
    cf = gc.compile(lambda x, gm, b, m, v, g: gc.grad(F.sum(F.batch_norm(x, gm, b, m, v, training=False) * g), [gm])[0],
                    x, np.ones(2, np.float32), np.zeros(2, np.float32), mean, var, g, provider="cpu")
    got = np.asarray(cf(x, np.ones(2, np.float32), np.zeros(2, np.float32), mean, var, g))
    x64 = x.astype(np.float64)
    want = (g * (x64 - 1e4)).sum((0, 2)) / np.sqrt(1 + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_batch_norm_training_through_its_statistics_and_to_third_order():
    x, gamma, beta = rand(5, 3, 2), rand(3, seed=6), rand(3, seed=7)
    for i in (1, 2):     # the returned mean and variance carry gradients too
        check_grads(lambda x, g, b, i=i: F.batch_norm(x, g, b, return_stats=True)[i], [x, gamma, beta])
    check_grads(lambda x, g, b: F.batch_norm(x, g, b) * F.reshape(F.batch_norm(x, g, b, return_stats=True)[2],
                                                                  (3, 1)), [x, gamma, beta])
    check_grads(lambda x, g, b: F.tanh(F.batch_norm(x, g, b)), [x, gamma, beta], order=3)


def test_batch_norm_training_edges():
    # a constant channel (variance 0: eps keeps it finite), zero gamma, one element per channel
    x = rand(4, 3, 2)
    x[:, 1] = 0.7
    gamma = np.array([1.5, 2.0, 0.0])
    y, mu, var = (np.asarray(v) for v in gc.compile(lambda x, g, b: F.batch_norm(x, g, b, return_stats=True),
                                                      x, gamma, np.zeros(3), provider="cpu")(x, gamma, np.zeros(3)))
    expected = np_batch_norm(x, gamma, np.zeros(3), 1)
    for got, want in zip((y, mu, var), expected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert var[1] == 0 and np.all(y[:, 1] == 0)
    check_grads(lambda x, g, b: F.batch_norm(x, g, b, eps=0.1), [x, gamma, rand(3, seed=7)])
    one = rand(1, 3, seed=3)
    np.testing.assert_array_equal(gc.compile(lambda x: F.batch_norm(x, np.ones(3), np.zeros(3)), one,
                                             provider="cpu")(one), np.zeros((1, 3)))


def test_batch_norm_in_float64_keeps_its_epsilon_exact():
    # ONNX BatchNormalization's epsilon is a float32 attribute: a float64 channel of small variance
    # with eps=1e-3 moved by 5e-6, relative, through it
    rng = np.random.default_rng(0)
    x, gamma, beta = rng.standard_normal((4, 3, 5)) * 0.01, rng.random(3) + 0.5, rng.random(3)
    mean, var = rng.standard_normal(3) * 0.01, rng.random(3) * 1e-4
    got = gc.compile(lambda x, g, b: F.batch_norm(x, g, b, eps=1e-3), x, gamma, beta, provider="cpu")(x, gamma, beta)
    np.testing.assert_allclose(np.asarray(got), np_batch_norm(x, gamma, beta, 1, eps=1e-3)[0], rtol=1e-12, atol=0)
    got = gc.compile(lambda x, g, b, m, v: F.batch_norm(x, g, b, m, v, eps=1e-3, training=False),
                     x, gamma, beta, mean, var, provider="cpu")(x, gamma, beta, mean, var)
    np.testing.assert_allclose(np.asarray(got), np_batch_norm(x, gamma, beta, 1, mean, var, eps=1e-3)[0],
                               rtol=1e-12, atol=0)


def test_layer_norm_in_float64_keeps_its_epsilon_exact():
    # ONNX LayerNormalization's epsilon is a float32 attribute too: 5e-7 off, relative, at eps=1e-3
    rng = np.random.default_rng(1)
    x, gamma, beta = rng.standard_normal((4, 2, 16)) * 0.01, rng.standard_normal((2, 16)), rng.standard_normal((2, 16))
    got = gc.compile(lambda x, g, b: F.layer_norm(x, g, b, axis=1, eps=1e-3), x, gamma, beta, provider="cpu")(
        x, gamma, beta)
    xc = x - x.mean(axis=(1, 2), keepdims=True)
    want = xc / np.sqrt((xc * xc).mean(axis=(1, 2), keepdims=True) + 1e-3) * gamma + beta
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-15)


def test_batch_norm_training_with_a_symbolic_batch():
    specs = [gc.spec(("batch", 3, 2)), gc.spec((3,)), gc.spec((3,))]
    cf = gc.compile(lambda x, g, b: gc.grad(F.sum(F.batch_norm(x, g, b) ** 3), [x, g, b]), *specs, provider="cpu")
    gamma, beta = rand(3, seed=6, dtype=np.float32), rand(3, seed=7, dtype=np.float32)
    for n in (2, 7):
        x = rand(n, 3, 2, seed=n, dtype=np.float32)
        fixed = gc.compile(lambda x, g, b: gc.grad(F.sum(F.batch_norm(x, g, b) ** 3), [x, g, b]), x, gamma, beta,
                           provider="cpu")
        for got, want in zip(cf(x, gamma, beta), fixed(x, gamma, beta)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_norm_errors():
    x = rand(4, 3)
    with pytest.raises(gc.GcompileError, match="needs running_mean and running_var"):
        trace(lambda x: F.batch_norm(x, np.ones(3), np.zeros(3), training=False), [x])
    with pytest.raises(gc.ShapeError, match="gamma must have shape \\(3,\\)"):
        trace(lambda x: F.batch_norm(x, np.ones(4), np.zeros(3)), [x])


# -- dropout -----------------------------------------------------------------------------------------
def test_dropout_inference_is_identity():
    x = rand(3, 4)
    graph = trace(lambda x: F.dropout(x, 0.5), [x]).graph
    assert "dropout" not in {n.op for n in graph.nodes.values()}
    check_forward(lambda x: F.dropout(x, 0.5, training=False), [x], x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ratio,seed", [(0.5, 3), (0.3, None)])
def test_dropout_training_through_onnxruntime(dtype, ratio, seed):
    """ORT's random stream is its own: check its outputs statistically and y == x·mask/(1 - ratio)."""
    x = rand(64, 64, lo=1, hi=2, dtype=dtype)
    cf = gc.compile(lambda x: apply_n("dropout", [x], ratio=ratio, seed=seed), gc.spec(("batch", 64), dtype),
                    provider="cpu")
    assert "Dropout" in {n.op_type for n in cf.model.graph.node}
    y, mask = cf(x)
    assert mask.dtype == np.bool_ and y.dtype == dtype
    assert abs(mask.mean() - (1 - ratio)) < 0.03        # 4096 draws: 4 standard deviations is ~0.03
    np.testing.assert_array_equal(y == 0, ~mask)
    scaled = x * mask / dtype(1 - ratio)
    if ratio == 0.5:
        np.testing.assert_array_equal(y, scaled)
    else:
        np.testing.assert_allclose(y, scaled, rtol=1e-6)
    (y2,) = gc.compile(lambda x: F.dropout(x, ratio, training=True, seed=seed), x, provider="cpu").run_flat(x)
    assert abs((y2 != 0).mean() - (1 - ratio)) < 0.03


def test_dropout_inside_a_graph_is_kept_by_onnxruntime():
    """onnxruntime's EliminateDropout (in its inference builds) removes a Dropout whose output is
    not a graph output even in training mode; gcompile's sessions disable it. Here the dropout sits
    between a product and an exp, as in a training step."""
    x = rand(64, 64, lo=1, hi=2)
    cf = gc.compile(lambda x: F.exp(F.dropout(x @ np.eye(64, dtype=np.float32), 0.3, training=True)), x,
                    provider="cpu")
    dropped = np.asarray(cf(x)) == 1                     # exp(0): every dropped element; kept ones are > e
    assert abs(dropped.mean() - 0.3) < 0.03


def test_dropout_reference_mask_follows_the_seed():
    x = rand(8, 8, lo=1, hi=2)
    y1 = run_ref(lambda x: F.dropout(x, 0.25, training=True, seed=7), [x])[0]
    y2 = run_ref(lambda x: F.dropout(x, 0.25, training=True, seed=7), [x])[0]
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1[y1 != 0], x[y1 != 0] / 0.75, rtol=1e-15)


def test_dropout_grads():
    # (on the reference evaluator only: ONNX Runtime draws other masks)
    check_grads(lambda x: F.dropout(F.sin(x), 0.4, training=True, seed=11), [rand(3, 4)], lowered=False)
    dx = run_ref(lambda x: gc.grad(F.sum(F.dropout(x, 0.4, training=True, seed=11)), [x]), [rand(3, 4)])[0]
    y = run_ref(lambda x: F.dropout(x, 0.4, training=True, seed=11), [np.ones((3, 4))])[0]
    np.testing.assert_allclose(dx, y, rtol=1e-15)     # d/dx = mask / (1 - ratio)


def test_dropout_ratio_error():
    with pytest.raises(gc.GcompileError, match="ratio must be in"):
        trace(lambda x: F.dropout(x, 1.5, training=True), [rand(2)])
    with pytest.raises(gc.GcompileError, match="ratio must be in"):
        trace(lambda x: F.dropout(x, -0.1, training=True), [rand(2)])


def test_dropout_of_everything_gives_zeros_as_pytorch():
    """ratio=1 in training: x * 0 (NaN where x is not finite, as torch), and a zero gradient."""
    x = np.array([1.5, -2.0, np.inf, np.nan, 0.0], np.float32)
    check_forward(lambda x: F.dropout(x, 1.0, training=True), [x], np.array([0, 0, np.nan, np.nan, 0], np.float32))
    check_forward(lambda x: gc.grad(F.sum(F.dropout(x, 1.0, training=True, seed=1)), [x])[0], [x], np.zeros_like(x))
    check_grads(lambda x: F.dropout(F.sin(x), 1.0, training=True), [rand(3, 4)])


def test_softmax_over_an_empty_axis():
    """Empty in, empty out, on both the reference evaluator and ONNX Runtime."""
    x = np.zeros((3, 0))
    check_values(lambda x: (F.softmax(x, 1), F.log_softmax(x, 1)), [x], [x, x])
