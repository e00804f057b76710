"""The lowering emits the ONNX patterns onnxruntime fuses or runs with dedicated kernels:
checked on the optimized model onnxruntime writes out (ORT_ENABLE_ALL)."""
import collections

import numpy as np
import onnx
import onnxruntime as ort

import gcompile as gc
import gcompile.functions as F

RNG = np.random.default_rng(0)


def _optimized_ops(cf, tmp_path) -> collections.Counter:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(cf.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)


def _emitted_ops(cf) -> collections.Counter:
    return collections.Counter(n.op_type for n in cf.model.graph.node)


def _r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_linear_layers_become_gemm(tmp_path):
    w, b = _r(8, 16), _r(16)
    cf = gc.compile(lambda x: F.relu(F.linear(x, w, b)), gc.spec(("batch", 8)), provider="cpu")
    ops = _optimized_ops(cf, tmp_path)
    assert ops["Gemm"] + ops["FusedGemm"] == 1 and ops["MatMul"] == 0   # FusedGemm: Gemm + Relu


def test_transposed_operands_of_backward_matmuls_are_fused(tmp_path):
    def step(x, w):
        return gc.grad(F.sum(F.tanh(x @ w)), [w])[0]
    cf = gc.compile(step, _r(4, 8), _r(8, 3), provider="cpu")
    ops = _optimized_ops(cf, tmp_path)
    assert ops["Transpose"] == 0 and ops["FusedMatMul"] + ops["Gemm"] >= 1


def test_normalisation_activation_and_softmax_use_native_ops():
    g, b = np.ones(16, np.float32), np.zeros(16, np.float32)

    def block(x):
        return F.softmax(F.gelu(F.layer_norm(x, g, b)), axis=-1), F.log_softmax(x, axis=-1)
    ops = _emitted_ops(gc.compile(block, gc.spec(("batch", 16)), provider="cpu"))
    assert ops["LayerNormalization"] == 1 and ops["Gelu"] == 1
    assert ops["Softmax"] == 1 and ops["LogSoftmax"] == 1


def test_conv_carries_its_bias():
    w, b = _r(4, 3, 3, 3), _r(4)
    ops = _emitted_ops(gc.compile(lambda x: F.conv(x, w, b, pad=1), _r(2, 3, 8, 8), provider="cpu"))
    assert ops["Conv"] == 1 and ops["Add"] == 0


def test_a_float64_product_times_a_scalar_keeps_float64_precision():
    """ONNX Runtime's MatMulScaleFusion would fold the scale into FusedMatMul's float32 alpha (an
    error of 1e-8); gcompile's sessions disable it."""
    a, b = RNG.standard_normal((2, 3, 4, 5)), RNG.standard_normal((2, 3, 5, 6))
    got = gc.compile(lambda a, b: F.matmul(a, b) * (1 / np.sqrt(5)), a, b, provider="cpu")(a, b)
    np.testing.assert_allclose(got, a @ b / np.sqrt(5), rtol=1e-14, atol=1e-15)
