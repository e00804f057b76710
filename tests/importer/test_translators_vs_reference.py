"""Translators of GridSample, AffineGrid, RotaryEmbedding, SwiGLU, TensorScatter, CausalConvWithState,
LinearAttention, DFT, STFT, Hardmax, Det, CumProd, LRN, MeanVarianceNormalization, the inverse
trigonometric functions, Pad's wrap mode and negative pads: each one-node model's values against
ONNX Runtime's, or onnx's ReferenceEvaluator's for the ops ONNX Runtime 1.31 lacks, at attributes the
conformance cases leave out, and its first- and second-order gradients (float64 central differences
on gcompile's reference evaluator; the gcompile ops they are written with are checked on ONNX Runtime
in tests/ops, and a few whole models here at static and symbolic sizes), and gc.vmap of a few."""
import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad

from .helpers import as_float64, assert_outputs_match, ort_run, sine_loss, single_node


def r(*shape, seed=0, lo=None, scale=1.0):
    x = np.random.default_rng(seed + 11 * len(shape) + sum(shape)).standard_normal(shape) * scale
    return np.abs(x) + lo if lo is not None else x


def u(*shape, seed=0, lo=-1.2, hi=1.2):
    return np.random.default_rng(seed + sum(shape)).uniform(lo, hi, shape)


def i64(*v):
    return np.asarray(v, np.int64)


def ramp(*shape):
    """Distinct values in a shuffled order: no ties for max pooling."""
    return np.random.default_rng(3).permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape) / 10


def _scan_body():
    """A Scan body (h, x) -> (h', y): h' = tanh(h + x), y = h' · x."""
    from onnx import TensorProto, helper
    f = TensorProto.FLOAT
    return helper.make_graph([helper.make_node("Add", ["h", "x"], ["s"]), helper.make_node("Tanh", ["s"], ["h2"]),
                              helper.make_node("Mul", ["h2", "x"], ["y"])], "body",
                             [helper.make_tensor_value_info("h", f, [3]), helper.make_tensor_value_info("x", f, [3])],
                             [helper.make_tensor_value_info("h2", f, [3]), helper.make_tensor_value_info("y", f, [3])])


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
    # modes and attributes
    "max_pool_dilated_ceil": ("MaxPool", [("x", ramp(1, 2, 6, 7))], 1,
                              dict(kernel_shape=[2, 3], dilations=[2, 2], strides=[2, 1], ceil_mode=1), 21),
    "max_pool_indices": ("MaxPool", [("x", ramp(2, 2, 5, 4))], 2, dict(kernel_shape=[2, 2], pads=[1, 0, 0, 1]), 21),
    "max_pool_indices_column_major": ("MaxPool", [("x", ramp(1, 2, 4, 5))], 2,
                                      dict(kernel_shape=[3, 2], strides=[1, 2], storage_order=1), 21),
    "avg_pool_dilated_pads_included": ("AveragePool", [("x", r(1, 2, 6, 5))], 1,
                                       dict(kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 1, 0, 1],
                                            count_include_pad=1), 21),
    "avg_pool_ceil_pads_included": ("AveragePool", [("x", r(1, 1, 5, 5))], 1,
                                    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                         count_include_pad=1), 21),
    # ceil_mode with a kernel wider than the padded input (HF EfficientNet's last pooling): one window
    "avg_pool_ceil_kernel_past_input": ("AveragePool", [("x", r(1, 2, 2, 3))], 1,
                                        dict(kernel_shape=[7, 9], strides=[7, 9], pads=[1, 0, 0, 1], ceil_mode=1,
                                             count_include_pad=1), 21),
    "avg_pool_ceil_kernel_past_input_pads_excluded": ("AveragePool", [("x", r(1, 2, 2, 3))], 1,
                                                      dict(kernel_shape=[4, 2560], strides=[4, 2560], pads=[1, 0, 0, 0],
                                                           ceil_mode=1), 21),
    "max_pool_ceil_dilated_kernel_past_input": ("MaxPool", [("x", ramp(1, 2, 2, 3))], 1,
                                                dict(kernel_shape=[3, 3], dilations=[2, 2], strides=[4, 5],
                                                     ceil_mode=1), 21),
    "lp_pool_ceil_kernel_past_input": ("LpPool", [("x", r(1, 1, 3, 2))], 1,
                                       dict(kernel_shape=[5, 5], strides=[3, 5], ceil_mode=1, p=2), 21),
    "lp_pool_p3_dilated": ("LpPool", [("x", r(1, 2, 5, 6))], 1,
                           dict(kernel_shape=[2, 2], dilations=[1, 2], pads=[0, 1, 1, 0], p=3), 21),
    "global_lp_pool": ("GlobalLpPool", [("x", r(2, 3, 4))], 1, dict(p=2), 21),
    "max_unpool_output_shape": ("MaxUnpool", [("x", r(1, 2, 2, 2)), ("i", np.asarray([[[[0, 3], [9, 14]],
                                                                                      [[17, 18], [28, 31]]]])),
                                              ("s", i64(1, 2, 5, 5))], 1, dict(kernel_shape=[2, 2], strides=[2, 2]),
                                21),
    "col2im_3d_pads": ("Col2Im", [("x", r(1, 2 * 4, 2 * 2 * 2)), ("s", i64(3, 3, 2)), ("b", i64(2, 2, 1))], 1,
                       dict(pads=[0, 1, 0, 0, 0, 0], strides=[1, 2, 1]), 21),
    "conv_transpose_output_shape": ("ConvTranspose", [("x", r(1, 2, 3, 3)), ("w", r(2, 1, 3, 2))], 1,
                                    dict(strides=[2, 2], output_shape=[8, 7]), 21),
    "conv_transpose_same_lower": ("ConvTranspose", [("x", r(1, 1, 3, 2)), ("w", r(1, 2, 2, 3)), ("b", r(2))], 1,
                                  dict(strides=[2, 1], auto_pad="SAME_LOWER"), 21),
    "scatter_elements_max": ("ScatterElements", [("x", r(3, 4)), ("i", i64([2, 0], [2, 1])), ("u", r(2, 2, seed=1))],
                             1, dict(axis=0, reduction="max"), 21),
    "scatter_elements_mul": ("ScatterElements", [("x", r(3, 4)), ("i", i64([1, 1, 3], [0, 2, 2])),
                                                 ("u", r(2, 3, seed=1))], 1, dict(axis=1, reduction="mul"), 21),
    "scatter_nd_min": ("ScatterND", [("x", r(4, 3)), ("i", i64([1], [3], [1])), ("u", r(3, 3, seed=1))], 1,
                       dict(reduction="min"), 21),
    "resize_tf_crop_linear": ("Resize", [("x", r(1, 1, 4, 5)), ("roi", np.asarray([0.2, -0.3, 1.1, 0.9]), "const"),
                                         ("s", None), ("z", i64(3, 4))], 1,
                              dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", axes=[2, 3],
                                   extrapolation_value=0.5), 19),
    "scan_opset8": ("Scan", [("lens", None), ("h", r(2, 3)), ("xs", r(2, 4, 3))], 2,
                    dict(num_scan_inputs=1, directions=[1], body=_scan_body()), 8),
    "attention_probs_nonpad_causal": ("Attention", [("q", r(2, 1, 3, 4)), ("k", r(2, 1, 5, 4)),
                                                        ("v", r(2, 1, 5, 2)), ("m", None), ("pk", None), ("pv", None),
                                                        ("len", i64(4, 5))], 4,
                                          dict(is_causal=1, qk_matmul_output_mode=3), 24),
    "attention_window_softcap_mode1": ("Attention", [("q", r(1, 2, 4, 4)), ("k", r(1, 2, 4, 4)),
                                                     ("v", r(1, 2, 4, 3))], 4,
                                       dict(left_window_size=1, right_window_size=1, softcap=1.5,
                                            qk_matmul_output_mode=1), 25),
    "center_crop_pad": ("CenterCropPad", [("x", r(5, 2, 4)), ("s", i64(3, 7))], 1, dict(axes=[0, 2]), 18),
    "reverse_sequence_batch_first": ("ReverseSequence", [("x", r(3, 4, 2)), ("n", i64(4, 1, 2))], 1,
                                     dict(batch_axis=0, time_axis=1), 21),
    "deform_conv_groups_mask_bias": ("DeformConv", [("x", r(1, 4, 4, 5)), ("w", r(4, 2, 2, 2)),
                                                    ("o", r(1, 2 * 2 * 4, 3, 3, scale=0.7)), ("b", r(4)),
                                                    ("m", u(1, 2 * 4, 3, 3, lo=0.2, hi=1.0))], 1,
                                     dict(group=2, offset_group=2, strides=[1, 2], pads=[0, 0, 0, 1]), 22),
    "roi_align_avg_adaptive": ("RoiAlign", [("x", r(2, 2, 6, 5)), ("rois", np.asarray([[0.5, 1.0, 3.5, 4.2],
                                                                                      [1.2, 0.3, 4.0, 2.0]]),
                                                                     "const"), ("b", i64(1, 0))], 1,
                               dict(output_height=2, output_width=3, spatial_scale=0.9), 16),
    "roi_align_max_runtime_regions": ("RoiAlign", [("x", r(1, 2, 5, 6)), ("rois", np.asarray([[0.7, 1.1, 4.3, 3.9],
                                                                                             [2.2, 0.4, 5.1, 2.6]])),
                                                   ("b", i64(0, 0))], 1,
                                      dict(mode="max", output_height=2, output_width=2, sampling_ratio=2,
                                           coordinate_transformation_mode="output_half_pixel"), 16),
    # quantization (integer results: values only, but for the float scale of Dequantize and Dynamic)
    "quantize_per_axis_int8": ("QuantizeLinear", [("x", r(2, 3, 2) * 40), ("s", u(3, lo=0.3, hi=2.0)),
                                                  ("z", np.asarray([-3, 0, 5], np.int8))], 1, dict(axis=1), 21),
    "quantize_blocked_uint8": ("QuantizeLinear", [("x", r(3, 5) * 30 + 60), ("s", u(3, 3, lo=0.5, hi=2.0))], 1,
                               dict(axis=1, block_size=2), 21),
    "dequantize_per_axis": ("DequantizeLinear", [("x", np.asarray([[5, 200], [0, 128], [77, 3]], np.uint8)),
                                                 ("s", u(2, lo=0.1, hi=1.0)), ("z", np.asarray([128, 3], np.uint8))],
                            1, dict(axis=1), 21),
    "dynamic_quantize": ("DynamicQuantizeLinear", [("x", r(3, 4) * 5 + 1)], 3, {}, 21),
    "matmul_integer_column_zero_points": ("MatMulInteger", [("a", np.asarray([[3, 250, 17], [128, 0, 9]], np.uint8),
                                                               "input"),
                                                         ("b", np.asarray([[7, 1], [200, 30], [5, 255]], np.uint8)),
                                                         ("az", np.asarray(12, np.uint8)),
                                                         ("bz", np.asarray([2, 100], np.uint8))], 1, {}, 21),
    "qlinear_matmul_int8": ("QLinearMatMul", [("a", np.asarray([[-3, 120, 17], [-128, 0, 9]], np.int8), "input"),
                                              ("as", np.asarray(0.05), "const"), ("az", np.asarray(1, np.int8)),
                                              ("b", np.asarray([[7, -1], [20, 30], [-5, 127]], np.int8)),
                                              ("bs", np.asarray([0.02, 0.03]), "const"), ("bz", np.asarray(0, np.int8)),
                                              ("ys", np.asarray(0.04), "const"), ("yz", np.asarray(-2, np.int8))],
                            1, {}, 21),
    "conv_integer_pads_groups": ("ConvInteger", [("x", np.arange(2 * 4 * 5, dtype=np.uint8).reshape(1, 4, 2, 5) * 3,
                                                  "input"),
                                                 ("w", np.arange(4 * 2 * 2 * 3, dtype=np.uint8).reshape(4, 2, 2, 3)),
                                                 ("xz", np.asarray(9, np.uint8))], 1,
                                 dict(group=2, pads=[1, 0, 0, 1], strides=[1, 2]), 21),
    "qlinear_conv_per_channel": ("QLinearConv", [("x", np.arange(18, dtype=np.uint8).reshape(1, 2, 3, 3) * 7, "input"),
                                                 ("xs", np.asarray(0.1), "const"), ("xz", np.asarray(50, np.uint8)),
                                                 ("w", np.arange(3 * 2 * 2 * 2, dtype=np.uint8).reshape(3, 2, 2, 2)),
                                                 ("ws", np.asarray([0.01, 0.02, 0.05]), "const"),
                                                 ("wz", np.asarray(4, np.uint8)), ("ys", np.asarray(0.3), "const"),
                                                 ("yz", np.asarray(20, np.uint8)), ("b", np.asarray([5, -7, 100],
                                                                                                    np.int32))], 1,
                                 dict(pads=[1, 1, 0, 0]), 21),
    "tf_idf_skips": ("TfIdfVectorizer", [("x", np.asarray([[1, 4, 2, 4, 1, 2, 4], [2, 2, 4, 1, 3, 1, 4]], np.int32),
                                          "input")], 1,
                     dict(mode="TFIDF", min_gram_length=1, max_gram_length=2, max_skip_count=2,
                          ngram_counts=[0, 3], ngram_indexes=[4, 0, 2, 1, 3], pool_int64s=[4, 2, 1, 2, 4, 1, 2],
                          weights=[0.5, 2.0, 1.5, 0.25, 3.0]), 21),
    # edges: zero-size and length-1 axes, nothing to do
    "tensor_scatter_no_update": ("TensorScatter", [("c", r(2, 4, 3)), ("u", r(2, 0, 3)), ("w", i64(1, 3))], 1, {}, 24),
    "dft_length_one": ("DFT", [("x", r(3, 1, 2)), ("n", None), ("a", scalar(1))], 1, {}, 20),
    "reverse_sequence_zero_lengths": ("ReverseSequence", [("x", r(3, 2, 2)), ("n", i64(0, 3))], 1, {}, 21),
    "lp_pool_empty_batch": ("LpPool", [("x", r(0, 2, 5, 5))], 1, dict(kernel_shape=[2, 2], dilations=[2, 2]), 21),
    "grid_sample_empty_grid": ("GridSample", [("x", r(1, 2, 3, 3)), ("g", u(1, 0, 4, 2))], 1, {}, 20),
}
NOT_DIFFERENTIABLE = {"hardmax_opset11", "tf_idf_skips", "quantize_per_axis_int8", "quantize_blocked_uint8",
                      "matmul_integer_column_zero_points", "qlinear_matmul_int8", "conv_integer_pads_groups",
                      "qlinear_conv_per_channel"}
NOT_IN_ONNXRUNTIME = {"SwiGLU", "CausalConvWithState", "LinearAttention", "DeformConv"}
# gradients checked on ONNX Runtime too, at static and symbolic sizes, as whole models (float64 ones: not those
# with a Conv, which ONNX Runtime's CPU provider lacks in float64)
ON_ONNXRUNTIME = {"dft_irfft_odd", "linear_attention_gated_delta_gqa", "rotary_4d_positions", "tensor_scatter_circular",
                  "deform_conv_groups_mask_bias", "stft_window", "scatter_nd_min", "resize_tf_crop_linear",
                  "attention_window_softcap_mode1", "dequantize_per_axis", "max_pool_indices"}


def _reference_only(case) -> bool:
    """Ops and opsets ONNX Runtime 1.31 lacks: checked against onnx's ReferenceEvaluator."""
    op, *_, opset = CASES[case]
    return op in NOT_IN_ONNXRUNTIME or op == "Attention" and opset > 23


def _model(case, dtype):
    op, inputs, n_out, attrs, opset = CASES[case]
    inputs = [(name, v.astype(dtype) if v is not None and v.dtype.kind == "f" else v, *rest)
              for name, v, *rest in inputs]
    model, arrays = single_node(op, inputs, n_out, opset=opset, **attrs)
    return (as_float64(model) if dtype == np.float64 else model), arrays


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_match_onnxruntime_or_the_reference_evaluator(case):
    """float32, against ONNX Runtime where it has the op (its ReferenceEvaluator computes LRN over the
    wrong axis and Hardmax of opset 11 as opset 13's), else against onnx's ReferenceEvaluator."""
    model, arrays = _model(case, np.float32)
    feeds = {i.name: a for i, a in zip(model.graph.input, arrays)}
    expected = ReferenceEvaluator(model).run(None, feeds) if _reference_only(case) else \
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


@pytest.mark.parametrize("case", ["grid_sample_linear_zeros", "dft_complex_length", "rotary_4d_positions",
                                  "lp_pool_p3_dilated", "roi_align_avg_adaptive", "max_pool_indices",
                                  "linear_attention_linear_scale", "stft_window", "deform_conv_groups_mask_bias",
                                  "scatter_nd_min", "attention_window_softcap_mode1"])
def test_vmap_of_an_imported_model_is_its_examples_stacked(case):
    """gc.vmap over a new batch axis of every input: the per-example results stacked (the translators'
    gcompile ops batch by their own rules)."""
    model, arrays = _model(case, np.float64)
    f = gc.load_onnx(model)
    batched = [np.stack([a * (1 + 0.1 * k) for k in range(3)]) for a in arrays]
    got = evaluate(trace(lambda *xs: gc.vmap(lambda *ys: f(*ys))(*xs), batched).graph, batched)
    for k in range(3):
        example = [b[k] for b in batched]
        for g, e in zip(got, evaluate(trace(lambda *xs: f(*xs), example).graph, example)):
            np.testing.assert_allclose(g[k], e, rtol=1e-12, atol=1e-12)
