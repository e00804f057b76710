"""The dtypes ONNX Runtime has few kernels for (ir/dtypes.py): uint16/32/64 and bfloat16 computed as
numpy and ml_dtypes compute them, through their compute dtype where no kernel exists (uint16 in int32
where lowering/kernels.py widens a node), on ONNX
Runtime and on the reference evaluator; the 8- and 4-bit formats through Cast and the ops that move
elements only, exchanged with onnxruntime exactly."""
import ml_dtypes
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply
from gcompile.frontend.trace import trace
from gcompile.ir import dtypes
from gcompile.ir.evaluate import evaluate

BF16 = dtypes.BFLOAT16
RNG = np.random.default_rng(3)

# every op of dtypes.KERNELS, as a function of two operands of the dtype
KERNEL_SAMPLES = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: apply("div", [a, b]), "equal": F.equal, "less": F.less, "less_equal": F.less_equal,
    "greater": F.greater, "greater_equal": F.greater_equal, "maximum": F.maximum, "minimum": F.minimum,
    "matmul": lambda a, b: F.matmul(F.reshape(a, (2, 3)), F.reshape(b, (3, 2))),
    "where": lambda a, b: F.where(F.less(a, b), a, b),
}
NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.floor_divide, "equal": np.equal,
    "less": np.less, "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "maximum": np.maximum, "minimum": np.minimum, "matmul": lambda a, b: a.reshape(2, 3) @ b.reshape(3, 2),
    "where": lambda a, b: np.where(a < b, a, b),
}


def _both(fn, *arrays):
    """fn's results on ONNX Runtime and on the reference evaluator."""
    ran = gc.compile(fn, *arrays, provider="cpu")(*arrays)
    traced = trace(fn, [gc.spec(a.shape, a.dtype) for a in arrays])
    return ran, evaluate(traced.graph, list(arrays))


def _unsigned(dtype):
    top = np.iinfo(dtype).max
    a = np.array([top, top - 1, 7, 1, 2 ** (8 * dtype.itemsize - 1), 0], dtype)
    b = np.array([3, top, 2, 1, 2 ** (8 * dtype.itemsize - 1) + 1, 5], dtype)
    return a, b


@pytest.mark.parametrize("dtype", [np.dtype(t) for t in ("uint16", "uint32", "uint64")])
def test_unsigned_kernels_and_routed_ops_compute_as_numpy(dtype):
    """Each op listed as an ONNX Runtime kernel runs in the dtype itself; the others (sums, products,
    orderings past 2**63 for uint64, negation) through the compute dtype, wrapping as numpy."""
    a, b = _unsigned(dtype)
    with np.errstate(all="ignore"):
        for op, fn in KERNEL_SAMPLES.items():
            if op not in dtypes.KERNELS.get(dtype, KERNEL_SAMPLES) and op != "div":      # uint16: every op
                continue
            divisor = np.where(b == 0, 1, b).astype(dtype) if op == "div" else b
            expected = NUMPY[op](a, divisor)
            ran, evaluated = _both(fn, a, divisor)
            for got in (ran, evaluated[0]):
                np.testing.assert_array_equal(got, expected, err_msg=op)
                assert got.dtype == expected.dtype, op

        def routed(x):
            return (F.sum(x), F.prod(x), -x, F.cumsum(x, 0), F.max(x), F.min(x), F.argmax(x), F.argmin(x),
                    F.clip(x, x[2], x[0]), F.topk(x, 2)[0])
        # F.sum, F.prod and F.cumsum accumulate in uint64, as numpy's do
        expected = (a.sum(), a.prod(), (-a).astype(dtype), np.cumsum(a), a.max(), a.min(),
                    np.argmax(a), np.argmin(a), np.clip(a, a[2], a[0]), np.sort(a)[::-1][:2])
    ran, evaluated = _both(routed, a)
    for got in (ran, evaluated):
        for g, e, name in zip(got, expected, ("sum", "prod", "neg", "cumsum", "max", "min", "argmax", "argmin",
                                                "clip", "topk")):
            np.testing.assert_array_equal(g, e, err_msg=name)
            assert g.dtype == e.dtype, name


def test_uint64_ops_that_int64_would_get_wrong_are_refused():
    for fn in (lambda a, b: F.power(a, b), lambda a, b: F.cumsum(a, 0) ** 3):
        with pytest.raises(gc.UnsupportedError, match=r"on uint64.*values below 2\*\*63"):
            trace(fn, [gc.spec((2,), "uint64")] * 2)


@pytest.mark.parametrize("dtype", [np.dtype(t) for t in ("uint16", "uint32", "uint64")])
def test_unsigned_bitwise_ops_keep_every_bit(dtype):
    """&, |, ^ and ~ (the onnx cases' uint64 ones were refused) at values with the top bit set."""
    a, b = _unsigned(dtype)
    ran, evaluated = _both(lambda a, b: (a & b, a | b, a ^ b, ~a, a >> 3, a << 5), a, b)
    for got in (ran, evaluated):
        for g, e in zip(got, (a & b, a | b, a ^ b, ~a, a >> dtype.type(3), a << dtype.type(5))):
            assert g.dtype == dtype
            np.testing.assert_array_equal(g, e)


def test_bfloat16_rounds_after_each_op_as_ml_dtypes_and_differentiates():
    x = (RNG.standard_normal(7) * 3).astype(BF16)
    y = RNG.standard_normal(7).astype(BF16)

    def fn(x, y):
        return x * y + x, F.exp(x), F.sum(x * y), F.tanh(x) - y, F.matmul(F.reshape(x, (1, 7)), F.reshape(y, (7, 1)))
    f32 = [v.astype(np.float32) for v in (x, y)]
    expected = ((x * y + x), np.exp(x), np.sum(f32[0] * (x * y).astype(np.float32) / f32[0]).astype(BF16),
                np.tanh(x) - y, (f32[0] @ f32[1]).reshape(1, 1).astype(BF16))
    ran, evaluated = _both(fn, x, y)
    for got in (ran, evaluated):
        for g, e in zip(got[:2] + got[3:], expected[:2] + expected[3:]):
            assert g.dtype == BF16
            np.testing.assert_array_equal(g.astype(np.float32), e.astype(np.float32))
        assert got[2].dtype == BF16     # the sum is accumulated in float32, then rounded once
        np.testing.assert_allclose(float(got[2]), float(np.sum((x * y).astype(np.float32))), rtol=2 ** -8)

    def grad(x):
        return gc.grad(lambda x: F.sum(F.sin(x) * x))(x)
    g = gc.compile(grad, x, provider="cpu")(x)
    assert g.dtype == BF16
    xf = x.astype(np.float32)
    np.testing.assert_allclose(g.astype(np.float32), np.sin(xf) + xf * np.cos(xf), rtol=2 ** -6, atol=2 ** -6)


@pytest.mark.parametrize("dtype", sorted(dtypes.TRACED - dtypes.NATIVE - {dtypes.FLOAT4}, key=str))
def test_every_new_dtype_moves_casts_and_crosses_onnxruntime_exactly(dtype):
    """Inputs and outputs of each dtype (ml_dtypes ones through the host types), Cast to and from
    float32, and the ops that only move elements (dtypes.MOVES), on ONNX Runtime and the evaluator."""
    values = np.array([0, 1, 2, 3, 5, 6, 4, 1, 0, 2, 3, 1], np.float32).reshape(3, 4)
    x = values.astype(dtype)

    def moves(x):
        return (F.reshape(x, (4, 3)), F.transpose(x), F.concat([x, x], 0), x[1:, ::2],
                F.take(x, np.array([2, 0]), 0), F.broadcast_to(x[:1], (2, 4)), F.identity(x), F.cast(x, np.float32),
                F.cast(F.cast(x, np.float32), dtype))
    expected = (x.reshape(4, 3), x.T, np.concatenate([x, x]), x[1:, ::2], x[[2, 0]], np.broadcast_to(x[:1], (2, 4)),
                x, x.astype(np.float32), x)
    ran, evaluated = _both(moves, x)
    for got in (ran, evaluated):
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g.astype(np.float32), e.astype(np.float32))


@pytest.mark.parametrize("dtype", sorted(dtypes.STORAGE, key=str))
def test_arithmetic_on_a_storage_format_is_refused_by_name(dtype):
    with pytest.raises(gc.UnsupportedError, match=rf"add on a {dtype.name} operand.*cast it to float32"):
        trace(lambda x: x + x, [gc.spec((2,), dtype)])


def test_casts_to_float8_saturate_unless_told_not_to():
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 0.3, -0.0], np.float32)
    for dtype in dtypes.FLOAT8:
        low, high = dtypes.limits(dtype)
        saturated = np.clip(x, low, high).astype(dtype)
        plain = x.astype(dtype)
        ran, evaluated = _both(lambda x, d=dtype: (F.cast(x, d), F.cast(x, d, saturate=False)), x)
        for got in (ran, evaluated):
            np.testing.assert_array_equal(got[0].astype(np.float32), saturated.astype(np.float32))
            np.testing.assert_array_equal(got[1].astype(np.float32), plain.astype(np.float32))


def test_float4_traces_but_onnxruntime_refuses_it_by_name():
    x = np.array([0.5, -6, 3], np.float32).astype(dtypes.FLOAT4)
    traced = trace(lambda x: F.cast(x, np.float32), [gc.spec((3,), dtypes.FLOAT4)])
    np.testing.assert_array_equal(evaluate(traced.graph, [x])[0], [0.5, -6, 3])
    with pytest.raises(gc.GcompileError, match="no kernel for float4_e2m1fn"):
        gc.compile(lambda x: F.cast(x, np.float32), x, provider="cpu")


def test_specs_take_the_new_dtypes_by_name():
    assert gc.spec((2,), "bfloat16").dtype == BF16
    assert gc.spec((2,), "float8_e4m3fn").dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert gc.spec((2,), "uint32").dtype == np.uint32
    with pytest.raises(gc.GcompileError, match="dtype complex64 is not supported"):
        gc.spec((2,), "complex64")


def test_check_numerics_sees_nan_in_bfloat16_and_float8():
    """ml_dtypes' floats are numpy kind 'V' (bfloat16, e4m3fn) or 'f' (e5m2): both are checked."""
    for dtype in (BF16, dtypes.FLOAT8[0]):
        x = np.array([1.0, np.nan], np.float32).astype(dtype)
        with pytest.raises(gc.InputError, match="1 NaN"):
            gc.compile(lambda x: F.identity(x), gc.spec((2,), dtype), provider="cpu", check_numerics=True)(x)


def test_an_imported_bfloat16_max_over_no_elements_is_minus_infinity():
    from onnx import TensorProto, helper
    m = helper.make_model(helper.make_graph(
        [helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 0])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])]), opset_imports=[helper.make_opsetid("", 20)])
    f = gc.load_onnx(m)
    got = gc.compile(f, gc.spec((2, 0), BF16), provider="cpu")(np.zeros((2, 0), BF16))
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32), [-np.inf, -np.inf])
