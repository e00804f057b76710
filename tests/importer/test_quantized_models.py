"""Quantized ONNX models through gc.load_onnx (importer/translators/quantize.py): a QDQ model's float
path differentiated (central differences in the input and the weights' scale, at a static and a
symbolic batch, orders 1 and 2; the activations' Q->DQ pair with PyTorch's straight-through gradient),
and ConvInteger's exact integer convolution on both sides of the 4-bit split, against ONNX Runtime."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad

from .helpers import model, ort_run

RNG = np.random.default_rng(17)
W_Q = RNG.integers(-128, 128, (4, 3)).astype(np.int8)
W_ZERO = np.array([3, -2, 0], np.int8)
X_SCALE, X_ZERO = np.float32(0.05), np.uint8(128)


def _qdq_model(activations: bool, dtype=np.float32):
    """y = tanh(x' @ DequantizeLinear(W_q, w_scale, W_zero, axis=1) + b), x' the input through a
    QuantizeLinear/DequantizeLinear pair (fake quantization) where `activations`, else x itself;
    w_scale is an input so that its gradient can be taken."""
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=1),
             helper.make_node("MatMul", ["xq" if activations else "x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["y"])]
    if activations:
        nodes[:0] = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_u8"]),
                     helper.make_node("DequantizeLinear", ["x_u8", "x_scale", "x_zero"], ["xq"])]
    return model(nodes, [("x", ["batch", 4]), ("w_scale", [3])], [("y", ["batch", 3])],
                 [("w_q", W_Q), ("w_zero", W_ZERO), ("b", np.array([0.1, -0.2, 0.05], dtype)),
                  ("x_scale", X_SCALE.astype(dtype)), ("x_zero", X_ZERO)], opset=21, dtype=dtype)


def test_a_qdq_models_float_path_differentiates_in_its_input_and_scale():
    f = gc.load_onnx(_qdq_model(activations=False, dtype=np.float64))   # (float64: central differences)
    x, scale = RNG.standard_normal((2, 4)), np.array([0.01, 0.02, 0.015])
    v = RNG.standard_normal((2, 3))
    for order in (1, 2):        # at a static and a symbolic batch, on both targets
        check_grad(lambda x, s: F.sum(f(x, s) * v), [x, scale], order=order)


def test_a_qdq_models_activation_pair_is_fake_quantization():
    """The Q->DQ pair gives ONNX Runtime's values; its gradient in x is the straight-through one (the
    cotangent inside the quantization range, 0 outside: here x * 20 + 128 past 255 in one entry) and
    the scale's gradient is checked numerically with x held."""
    m = _qdq_model(activations=True)
    f = gc.load_onnx(m)
    x = np.array([[0.31, -1.13, 2.07, 0.64], [-0.52, 9.0, 0.12, -2.4]], np.float32)
    scale = np.array([0.01, 0.02, 0.015], np.float32)
    g = RNG.standard_normal((2, 3)).astype(np.float32)

    def fn(x, s, g):
        y = f(x, s)
        return y, gc.grad(F.sum(y * g), [x])[0]
    xq = (np.clip(np.round(x / X_SCALE) + 128, 0, 255) - 128) * X_SCALE
    w = (W_Q.astype(np.float64) - W_ZERO) * scale
    pre = xq @ w + np.array([0.1, -0.2, 0.05])
    expected_dx = ((g * (1 - np.tanh(pre) ** 2)) @ w.T) * (np.abs(np.round(x / X_SCALE)) <= 127)
    for specs in ([x, scale, g], [gc.spec(("batch", 4)), gc.spec((3,)), gc.spec(("batch", 3))]):
        y, dx = gc.compile(fn, *specs, provider="cpu")(x, scale, g)
        np.testing.assert_allclose(y, ort_run(m, {"x": x, "w_scale": scale})[0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(dx, expected_dx, rtol=1e-5, atol=1e-6)
    assert expected_dx[1, 1] == 0 and np.all(expected_dx[0] != 0)
    f64 = gc.load_onnx(_qdq_model(activations=True, dtype=np.float64))
    for order in (1, 2):
        check_grad(lambda x, s: F.sum(f64(F.stop_gradient(x), s) * g[:1]), [x, scale], order=order)


def _conv_integer(x, w, x_zero, w_zero):
    """ConvInteger exactly: int64 sums of products of the centred operands (stride 1, no padding)."""
    xc, wc = x.astype(np.int64) - x_zero, w.astype(np.int64) - w_zero
    kh, kw = w.shape[2:]
    out = np.zeros((x.shape[0], w.shape[0], x.shape[2] - kh + 1, x.shape[3] - kw + 1), np.int64)
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", xc[:, :, i:i + kh, j:j + kw], wc)
    return out


@pytest.mark.parametrize("channels,form", [(3, "whole"), (4, "split"), (810, "windows")])
def test_conv_integer_is_exact_whole_split_into_4_bit_halves_and_as_windows(channels, form):
    """A 9x9 kernel over `channels` channels sums 243, 324 or 65,610 products per output: 243·255² < 2**24
    (one float32 Conv is exact), 324·255² is not (split into 4-bit halves), 65,610·16² is not even for the
    halves (the windows contracted by an int32 Einsum; the sums pass 2**31 and wrap, as ONNX Runtime's
    int32 accumulator does). The extreme operands (255 - 0 times 0 - 255, the zero points at the other end)
    make every sum as large as it can be."""
    x = RNG.integers(0, 256, (2, channels, 10, 10)).astype(np.uint8)
    x[0] = 255
    x[0, 0, 0, 0] = 254                     # one odd sum: float32 cannot hold it past 2**24
    w = RNG.integers(0, 256, (2, channels, 9, 9)).astype(np.uint8)
    w[0] = 0
    x_zero, w_zero = np.uint8(0), np.uint8(255)      # (ONNX Runtime's ConvInteger takes per-tensor ones only)
    m = model([helper.make_node("ConvInteger", ["x", "w", "x_zero", "w_zero"], ["y"])],
              [("x", ["batch", channels, 10, 10], TensorProto.UINT8)], [("y", ["batch", 2, 2, 2], TensorProto.INT32)],
              [("w", w), ("x_zero", x_zero), ("w_zero", w_zero)], opset=21)
    exact = _conv_integer(x, w, x_zero, w_zero)
    assert (np.abs(exact).max() * 1.0 > 2 ** 24) == (form != "whole")        # past float32's exact integers
    expected = exact.astype(np.int32)                                         # int32 wraps
    np.testing.assert_array_equal(ort_run(m, {"x": x})[0], expected)
    f = gc.load_onnx(m)
    traced = trace(lambda x: f(x), [gc.spec(("batch", channels, 10, 10), np.uint8)])
    ops = [n.op for n in traced.graph.nodes.values()]
    assert (ops.count("conv"), ops.count("einsum")) == {"whole": (1, 0), "split": (4, 0), "windows": (0, 1)}[form]
    for got in (gc.compile(f, gc.spec(("batch", channels, 10, 10), np.uint8), provider="cpu")(x),
                evaluate(traced.graph, [x])[0]):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, expected)


def test_quantize_linears_precision_attribute_sets_the_division_dtype():
    """QuantizeLinear's precision (opset 25): x / scale computed in float16 rounds 101.49 to 101.5, which
    rounds half to even to 102 (in float32: 101); as onnx's reference implementation computes it."""
    from onnx.reference import ReferenceEvaluator
    x = np.array([101.49, 3.2, -7.7, 250.0], np.float32)
    for precision, want in ((TensorProto.FLOAT16, 102), (TensorProto.FLOAT, 101)):
        m = model([helper.make_node("QuantizeLinear", ["x", "s"], ["q"], precision=precision)],
                  [("x", [4])], [("q", [4], TensorProto.UINT8)], [("s", np.float32(1.0))], opset=25)
        expected = ReferenceEvaluator(m).run(None, {"x": x})[0]
        assert expected[0] == want
        np.testing.assert_array_equal(gc.compile(gc.load_onnx(m), gc.spec((4,)), provider="cpu")(x), expected)
