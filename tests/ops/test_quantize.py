"""Linear quantization (ops/quantize.py): values against onnx's reference implementation of
QuantizeLinear and DequantizeLinear on ONNX Runtime and the evaluator (ties, NaN, infinities,
saturation, per axis, per block), and the gradients: DequantizeLinear's in its scale numerically at
orders 1 and 2, fake quantization's straight-through gradient against PyTorch's formula, and the
derivative of that gradient numerically."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir import dtypes
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad

RNG = np.random.default_rng(11)


def _onnx_reference(op, inputs, **attrs):
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                                          a.shape) for n, a in zip(names, inputs)],
                              [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


def _both(fn, *arrays):
    ran = gc.compile(fn, *arrays, provider="cpu")(*arrays)
    return ran, evaluate(trace(fn, [gc.spec(a.shape, a.dtype) for a in arrays]).graph, list(arrays))[0]


EDGES = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1e9, -1e9, np.inf, -np.inf, np.nan, 0.0, 127.4], np.float32)


@pytest.mark.parametrize("zero_point", [np.uint8(128), np.int8(-3), np.uint16(9), dtypes.INT4.type(2)])
def test_quantize_and_dequantize_per_tensor_match_onnx(zero_point):
    x, scale, z = EDGES, np.float32(0.5), np.asarray(zero_point)
    expected = _onnx_reference("QuantizeLinear", [x, np.asarray(scale), z])
    # onnx's reference casts inf and NaN to int32 (undefined in C): ONNX saturates inf; NaN gives q_min here
    low, high = dtypes.limits(z.dtype)
    expected = np.where(x == np.inf, high, np.where((x == -np.inf) | np.isnan(x), low, expected.astype(np.float64)))
    expected = expected.astype(z.dtype)
    q, evaluated = _both(lambda x: F.quantize_linear(x, scale, z), x)
    for got in (q, evaluated):
        assert got.dtype == z.dtype
        np.testing.assert_array_equal(got.astype(np.int64), expected.astype(np.int64))
    back = _onnx_reference("DequantizeLinear", [expected, np.asarray(scale), z])   # from the saturated values
    for got in _both(lambda q: F.dequantize_linear(q, scale, z), expected):
        np.testing.assert_array_equal(got, back)


def test_per_axis_blocked_and_float8_quantization_match_onnx():
    x = RNG.standard_normal((3, 4)).astype(np.float32) * 4
    scale, z = np.array([0.5, 0.25, 1.0], np.float32), np.array([1, -2, 0], np.int8)
    got = _both(lambda x: F.quantize_linear(x, scale, z, axis=0), x)
    expected = _onnx_reference("QuantizeLinear", [x, scale, z], axis=0)
    for g in got:
        np.testing.assert_array_equal(g, expected)
    blocks = np.array([[0.5, 0.1], [1.0, 2.0], [0.3, 0.7]], np.float32)
    zb = np.zeros((3, 2), np.uint8) + 100
    expected = _onnx_reference("QuantizeLinear", [x, blocks, zb], axis=1, block_size=2)
    for g in _both(lambda x: F.quantize_linear(x, blocks, zb, axis=1, block_size=2), x):
        np.testing.assert_array_equal(g, expected)
    for dtype in dtypes.FLOAT8:
        expected = _onnx_reference("QuantizeLinear", [EDGES, np.float32(2.0), np.zeros((), dtype)])
        for g in _both(lambda x, d=dtype: F.quantize_linear(x, np.float32(2.0), dtype=d), EDGES):
            np.testing.assert_array_equal(g.astype(np.float32), expected.astype(np.float32))


def test_dequantize_differentiates_in_its_scale():
    q = np.array([[3, -7, 0], [127, -128, 5]], np.int8)
    z = np.array([1, 0, -2], np.int8)
    for order in (1, 2):
        check_grad(lambda s: F.sum(F.sin(F.dequantize_linear(q, s, z, axis=1))), [np.array([0.5, 0.2, 1.5])],
                   order=order, symbolic=False)


def _torch_fake_quant_grads(x, s, z, qmin, qmax, g):
    """PyTorch's _fake_quantize_learnable_per_tensor_affine_backward, written out: the cotangent of x
    where round(x/s) + z is inside [qmin, qmax]; of s: round(x/s) - x/s inside, qmin - z or qmax - z out."""
    u = x / s
    v = np.round(u) + z
    inside = (v >= qmin) & (v <= qmax)
    dx = np.where(inside, g, 0)
    ds = np.where(inside, np.round(u) - u, np.where(v < qmin, qmin - z, qmax - z)) * g
    return dx, ds.sum()


def test_fake_quantize_has_pytorchs_straight_through_gradient_and_value():
    x = np.array([-40.3, -3.3, -0.26, 0.1, 0.74, 2.2, 9.9, 80.1], np.float32)
    s, z = np.float32(0.25), np.int8(-5)
    g = RNG.standard_normal(x.shape).astype(np.float32)

    def fn(x, s):
        y = F.fake_quantize(x, s, z)
        return y, *gc.grad(F.sum(y * g), [x, s])
    y, dx, ds = gc.compile(fn, x, s, provider="cpu")(x, s)
    q = _onnx_reference("QuantizeLinear", [x, np.asarray(s), np.asarray(z)])
    np.testing.assert_array_equal(y, _onnx_reference("DequantizeLinear", [q, np.asarray(s), np.asarray(z)]))
    ex, es = _torch_fake_quant_grads(x.astype(np.float64), float(s), -5, -128, 127, g)
    np.testing.assert_allclose(dx, ex, rtol=1e-6)
    np.testing.assert_allclose(ds, es, rtol=1e-5)


def test_fake_quantize_second_order_is_straight_through_again():
    """Differentiated twice, the rounding again passes the cotangent inside the range (a numeric
    derivative would see the steps' zero slope): d/dx <grad_x sum(fq(x)^2), v> = 2·v inside, 0 outside."""
    x = np.array([0.31, -1.13, 2.07, 0.64, 90.0], np.float32)
    s, z = np.float32(0.2), np.uint8(3)
    v = RNG.standard_normal(5).astype(np.float32)

    def second(x):
        first = gc.grad(F.sum(F.fake_quantize(x, s, z) ** 2), [x])[0]
        return gc.grad(F.sum(first * v), [x])[0]
    inside = (np.round(x / s) + 3 >= 0) & (np.round(x / s) + 3 <= 255)
    np.testing.assert_allclose(gc.compile(second, x, provider="cpu")(x), np.where(inside, 2 * v, 0), rtol=1e-6)
