"""Translators of GridSample, AffineGrid, RotaryEmbedding, SwiGLU, TensorScatter, CausalConvWithState,
LinearAttention, DFT, STFT, Hardmax, Det, CumProd, LRN, MeanVarianceNormalization, the inverse
trigonometric functions, Pad's wrap mode and negative pads: each one-node model's values against
ONNX Runtime's, or onnx's ReferenceEvaluator's for the ops ONNX Runtime 1.31 lacks, at attributes the
conformance cases leave out, and its first- and second-order gradients (float64 central differences
on gcompile's reference evaluator; the gcompile ops they are written with are checked on ONNX Runtime
in tests/ops, and a few whole models here at static and symbolic sizes)."""
import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import gcompile as gc
import gcompile.functions as F
from gcompile.testing import check_grad

from .helpers import assert_outputs_match, ort_run, sine_loss, single_node


def r(*shape, seed=0, lo=None, scale=1.0):
    x = np.random.default_rng(seed + 11 * len(shape) + sum(shape)).standard_normal(shape) * scale
    return np.abs(x) + lo if lo is not None else x


def u(*shape, seed=0, lo=-1.2, hi=1.2):
    return np.random.default_rng(seed + sum(shape)).uniform(lo, hi, shape)


def i64(*v):
    return np.asarray(v, np.int64)


def scalar(v):
    return np.asarray(v, np.int64)


# name: (op, [(input name, array or None)], outputs, attributes, opset); float arrays are graph inputs,
# integer ones initializers (single_node)
CASES = {
    "grid_sample_linear_zeros": ("GridSample", [("x", r(1, 2, 3, 4)), ("g", u(1, 2, 3, 2))], 1, {}, 20),
    "grid_sample_nearest_border_align": ("GridSample", [("x", r(2, 1, 4, 3)), ("g", u(2, 3, 2, 2))], 1,
                                         dict(mode="nearest", padding_mode="border", align_corners=1), 20),
    "grid_sample_cubic_reflection": ("GridSample", [("x", r(1, 1, 4, 5)), ("g", u(1, 2, 4, 2, lo=-1.7, hi=1.7))],
                                     1, dict(mode="cubic", padding_mode="reflection"), 20),
    "grid_sample_bilinear_opset16": ("GridSample", [("x", r(1, 2, 3, 3)), ("g", u(1, 2, 2, 2))], 1,
                                     dict(mode="bilinear", align_corners=1), 16),
    "grid_sample_volumetric_reflection": ("GridSample", [("x", r(1, 1, 2, 3, 3)), ("g", u(1, 2, 2, 2, 3))], 1,
                                          dict(padding_mode="reflection"), 20),
    "affine_grid_2d_align": ("AffineGrid", [("t", r(2, 2, 3)), ("s", i64(2, 1, 3, 4))], 1,
                             dict(align_corners=1), 20),
    "affine_grid_3d": ("AffineGrid", [("t", r(1, 3, 4)), ("s", i64(1, 1, 2, 3, 2))], 1, {}, 20),
    "rotary_4d_positions": ("RotaryEmbedding", [("x", r(2, 2, 3, 4)), ("c", r(5, 2)), ("s", r(5, 2, seed=1)),
                                                ("p", i64([0, 2, 4], [1, 1, 3]))], 1, {}, 23),
    "rotary_3d_interleaved_partial": ("RotaryEmbedding", [("x", r(1, 3, 12)), ("c", r(1, 3, 2)),
                                                          ("s", r(1, 3, 2, seed=1))], 1,
                                      dict(num_heads=2, rotary_embedding_dim=4, interleaved=1), 23),
    "swiglu_alpha": ("SwiGLU", [("a", r(2, 5)), ("b", r(2, 5, seed=1))], 1, dict(alpha=1.7), 28),
    "tensor_scatter_circular": ("TensorScatter", [("c", r(2, 3, 5, 2)), ("u", r(2, 3, 3, 2, seed=1)),
                                                  ("w", i64(1, 4))], 1, dict(mode="circular"), 24),
    "tensor_scatter_axis": ("TensorScatter", [("c", r(2, 6, 3)), ("u", r(2, 2, 3, seed=1)), ("w", i64(0, 3))], 1,
                            dict(axis=1), 24),
    "causal_conv_state_bias_silu": ("CausalConvWithState", [("x", r(2, 3, 4)), ("w", r(3, 1, 3)), ("b", r(3)),
                                                            ("p", r(2, 3, 2, seed=1))], 2,
                                    dict(activation="silu"), 27),
    "linear_attention_gated_delta_gqa": ("LinearAttention", [
        ("q", r(1, 3, 8, scale=0.5)), ("k", r(1, 3, 4, scale=0.5)), ("v", r(1, 3, 6, scale=0.5)),
        ("s", r(1, 1, 4, 6, scale=0.3)), ("g", -r(1, 3, 4, lo=0.1, scale=0.2)), ("b", u(1, 3, 1, lo=0.2, hi=0.8))],
        2, dict(q_num_heads=2, kv_num_heads=1, update_rule="gated_delta"), 27),
    "linear_attention_linear_scale": ("LinearAttention", [("q", r(2, 2, 4)), ("k", r(2, 2, 4, seed=1)),
                                                          ("v", r(2, 2, 2))], 2,
                                      dict(q_num_heads=2, kv_num_heads=2, update_rule="linear", scale=0.7), 27),
    "dft_complex_length": ("DFT", [("x", r(2, 5, 2)), ("n", scalar(6)), ("a", scalar(1))], 1, {}, 20),
    "dft_real_onesided": ("DFT", [("x", r(3, 6, 1)), ("n", None), ("a", scalar(-2))], 1, dict(onesided=1), 20),
    "dft_inverse_axis0": ("DFT", [("x", r(4, 3, 2)), ("n", None), ("a", scalar(0))], 1, dict(inverse=1), 20),
    "dft_irfft_odd": ("DFT", [("x", r(2, 4, 2)), ("n", scalar(7)), ("a", scalar(1))], 1,
                      dict(inverse=1, onesided=1), 20),
    "dft_opset17_axis": ("DFT", [("x", r(3, 4, 1))], 1, dict(axis=1), 17),
    "stft_window": ("STFT", [("x", r(2, 10, 1)), ("step", scalar(3)), ("w", r(4)), ("len", scalar(4))], 1, {}, 17),
    "hardmax_opset11": ("Hardmax", [("x", r(2, 3, 4))], 1, dict(axis=1), 11),
    "det_batch": ("Det", [("x", r(2, 3, 3))], 1, {}, 21),
    "cumprod_exclusive_reverse": ("CumProd", [("x", r(2, 4)), ("a", scalar(1))], 1, dict(exclusive=1, reverse=1),
                                  26),
    "lrn": ("LRN", [("x", r(1, 5, 2, 2))], 1, dict(size=3, alpha=0.3, beta=0.6, bias=1.5), 21),
    "mvn_axes": ("MeanVarianceNormalization", [("x", r(2, 3, 4))], 1, dict(axes=[1, 2]), 21),
    "acos": ("Acos", [("x", u(5, lo=-0.9, hi=0.9))], 1, {}, 21),
    "asin": ("Asin", [("x", u(5, lo=-0.9, hi=0.9))], 1, {}, 21),
    "atan": ("Atan", [("x", r(5) * 3)], 1, {}, 21),
    "pad_wrap": ("Pad", [("x", r(2, 3)), ("p", i64(1, 2, 0, 3))], 1, dict(mode="wrap"), 21),
    "pad_negative_crop": ("Pad", [("x", r(4, 5)), ("p", i64(-1, 2, 1, -2))], 1, dict(mode="edge"), 21),
}
NOT_DIFFERENTIABLE = {"hardmax_opset11"}
NOT_IN_ONNXRUNTIME = {"SwiGLU", "CausalConvWithState", "LinearAttention"}       # (1.31: opsets 27 and 28)
# gcompile.functions ops with a float64 lowering on ONNX Runtime too, checked there as whole models
ON_ONNXRUNTIME = {"dft_irfft_odd", "linear_attention_gated_delta_gqa", "rotary_4d_positions", "tensor_scatter_circular"}


def _model(case, dtype):
    op, inputs, n_out, attrs, opset = CASES[case]
    inputs = [(name, v.astype(dtype) if v is not None and v.dtype.kind == "f" else v) for name, v in inputs]
    return single_node(op, inputs, n_out, opset=opset, **attrs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_match_onnxruntime_or_the_reference_evaluator(case):
    """float32, against ONNX Runtime where it has the op (its ReferenceEvaluator computes LRN over the
    wrong axis and Hardmax of opset 11 as opset 13's), else against onnx's ReferenceEvaluator."""
    model, arrays = _model(case, np.float32)
    feeds = {i.name: a for i, a in zip(model.graph.input, arrays)}
    expected = ReferenceEvaluator(model).run(None, feeds) if CASES[case][0] in NOT_IN_ONNXRUNTIME else \
        ort_run(model, feeds)
    f = gc.load_onnx(model)
    assert_outputs_match(gc.compile(lambda *xs: f(*xs), *arrays, provider="cpu").run_flat(*arrays), expected, 1e-5)


@pytest.mark.parametrize("case", sorted(set(CASES) - NOT_DIFFERENTIABLE))
def test_gradients_to_second_order(case):
    model, arrays = _model(case, np.float64)
    f = gc.load_onnx(model)
    for order in (1, 2):
        check_grad(sine_loss(f), arrays, order=order, lowered=case in ON_ONNXRUNTIME)


def test_hardmax_passes_no_gradient_and_picks_the_first_maximum():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    model, arrays = single_node("Hardmax", [("x", x)], 1, opset=13)
    f = gc.load_onnx(model)
    cf = gc.compile(lambda x: [f(x), gc.grad(F.sum(f(x) * x), [x])[0]], x, provider="cpu")
    y, g = cf(x)
    np.testing.assert_array_equal(y, [[0, 1, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(g, y)      # d/dx Σ hardmax(x)·x = hardmax(x): the one-hot is a constant
