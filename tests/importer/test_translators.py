"""Gradients, first and second order, of imported ONNX ops whose translation composes several
gcompile ops or maps non-default attributes (float64 numeric checks on the reference evaluator)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import gcompile as gc
from gcompile.testing import check_grad

from .helpers import model as onnx_model
from .helpers import single_node


def r(*shape, seed=0, lo=None):
    x = np.random.default_rng(seed + sum(shape)).standard_normal(shape)
    return np.abs(x) + lo if lo is not None else x


def ramp(*shape):
    """Distinct values in a shuffled order: no ties for max pooling."""
    return np.random.default_rng(3).permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape) / 10


def i64(*v):
    return np.asarray(v, np.int64)


CASES = {
    "gemm": ("Gemm", [("a", r(3, 2)), ("b", r(4, 3)), ("c", r(4))], 1, dict(transA=1, transB=1, alpha=0.5, beta=2.0)),
    "conv_same_upper": ("Conv", [("x", r(1, 2, 5, 5)), ("w", r(3, 2, 3, 3)), ("b", r(3))], 1,
                        dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "conv_transpose": ("ConvTranspose", [("x", r(1, 2, 3, 3)), ("w", r(2, 3, 3, 3))], 1,
                       dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    "max_pool_ceil": ("MaxPool", [("x", ramp(1, 1, 5, 5))], 1, dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    "avg_pool_pads": ("AveragePool", [("x", r(1, 2, 4, 4))], 1,
                      dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    "batch_norm_training": ("BatchNormalization", [("x", r(3, 2, 2)), ("s", r(2)), ("b", r(2)), ("m", r(2)),
                                                   ("v", r(2, lo=0.5))], 3, dict(training_mode=1, momentum=0.8)),
    "batch_norm": ("BatchNormalization", [("x", r(3, 2, 2)), ("s", r(2)), ("b", r(2)), ("m", r(2)),
                                          ("v", r(2, lo=0.5))], 1, {}),
    "layer_norm_stats": ("LayerNormalization", [("x", r(2, 3, 4)), ("s", r(3, 4)), ("b", r(4))], 3, dict(axis=1)),
    "instance_norm": ("InstanceNormalization", [("x", r(2, 3, 4)), ("s", r(3)), ("b", r(3))], 1, {}),
    "softmax_opset11": ("Softmax", [("x", r(2, 3, 4))], 1, dict(axis=1)),
    "log_softmax": ("LogSoftmax", [("x", r(2, 3))], 1, dict(axis=0)),
    "softmax_cross_entropy": ("SoftmaxCrossEntropyLoss", [("x", r(4, 3, 2)), ("t", i64([0, 2], [1, 1], [2, 0], [0, 1])),
                                                          ("w", r(3, lo=0.5))], 2, dict(ignore_index=1)),
    "nll_sum": ("NegativeLogLikelihoodLoss", [("x", r(3, 4)), ("t", i64(3, 0, 2))], 1, dict(reduction="sum")),
    "cumsum": ("CumSum", [("x", r(2, 4)), ("axis", i64(1))], 1, dict(exclusive=1, reverse=1)),
    "rms_norm": ("RMSNormalization", [("x", r(2, 4)), ("s", r(4))], 1, {}),
    "lp_norm": ("LpNormalization", [("x", r(2, 4))], 1, dict(axis=0)),
    "slice_negative_step": ("Slice", [("x", r(5, 4)), ("s", i64(-1, 3)), ("e", i64(-6, 0)), ("a", i64(0, 1)),
                                      ("st", i64(-2, -1))], 1, {}),
    "split_uneven": ("Split", [("x", r(7, 2))], 3, dict(num_outputs=3)),
    "pad_reflect": ("Pad", [("x", r(3, 4)), ("p", i64(1, 2, 1, 0))], 1, dict(mode="reflect")),
    "trilu_lower": ("Trilu", [("x", r(3, 4)), ("k", i64(1))], 1, dict(upper=0)),
    "expand": ("Expand", [("x", r(3, 1)), ("s", i64(2, 1, 4))], 1, {}),
    "tile": ("Tile", [("x", r(2, 3)), ("k", i64(2, 1))], 1, {}),
    "gather_negative": ("Gather", [("x", r(4, 3)), ("i", i64([-1, 0], [2, 2]))], 1, dict(axis=0)),
    "gather_elements": ("GatherElements", [("x", r(3, 3)), ("i", i64([1, 0, 2], [0, 0, 1]))], 1, dict(axis=0)),
    "einsum": ("Einsum", [("a", r(2, 3)), ("b", r(3, 4))], 1, dict(equation="ij,jk->ik")),
    "depth_to_space_crd": ("DepthToSpace", [("x", r(1, 8, 2, 3))], 1, dict(blocksize=2, mode="CRD")),
    "clip_inputs": ("Clip", [("x", r(3, 4)), ("lo", np.asarray(-0.5)), ("hi", np.asarray(0.8))], 1, {}),
    "max_variadic": ("Max", [("a", r(3)), ("b", r(2, 3)), ("c", r(1))], 1, {}),
    "mean_variadic": ("Mean", [("a", r(3)), ("b", r(2, 3))], 1, {}),
    "reduce_l2": ("ReduceL2", [("x", r(2, 3)), ("a", i64(1))], 1, {}),
    "reduce_log_sum_exp": ("ReduceLogSumExp", [("x", r(2, 3)), ("a", i64(0))], 1, dict(keepdims=0)),
    "reduce_prod": ("ReduceProd", [("x", r(2, 3, lo=0.5))], 1, {}),
    "prelu": ("PRelu", [("x", r(2, 3)), ("s", r(3))], 1, {}),
    "gelu_tanh": ("Gelu", [("x", r(3))], 1, dict(approximate="tanh")),
    **{op.lower(): (op, [("x", r(5, seed=1))], 1, {}) for op in ("Selu", "Celu", "HardSwish", "Mish", "Softsign",
                                                                  "Elu", "Erf", "Sinh", "Cosh", "Asinh", "Swish")},
    "atanh": ("Atanh", [("x", np.tanh(r(4)))], 1, {}),
    "pow": ("Pow", [("x", r(4, lo=0.5)), ("y", r(4))], 1, {}),
}
OPSETS = {"softmax_opset11": 11, "rms_norm": 23, "swish": 24}


@pytest.mark.parametrize("case", sorted(CASES))
def test_imported_op_gradients(case):
    op, inputs, n_out, attrs = CASES[case]
    model, arrays = single_node(op, inputs, n_out, opset=OPSETS.get(case, 21), **attrs)
    f = gc.load_onnx(model)
    # float64 models, some of ops without a float64 kernel in ONNX Runtime's CPU provider: the
    # reference evaluator only (the gcompile ops they import as are checked on ONNX Runtime in tests/ops)
    check_grad(lambda *xs: f(*xs), arrays, order=1, lowered=False)
    check_grad(lambda *xs: f(*xs), arrays, order=2, lowered=False)


@pytest.mark.parametrize("op, fmod", [("Div", None), ("Mod", 0), ("Mod", 1)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_division_by_zero_gives_numpys_zero(op, fmod, dtype):
    """ONNX Runtime fails a run on an integer division by zero ('Integer division by zero'): an
    imported Div or Mod of integers reached it raw. Where the divisor is 0 the result is now 0, as
    numpy's integer floor_divide, remainder and fmod give."""
    elem = {np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}[dtype]
    attrs = {} if fmod is None else {"fmod": fmod}
    m = onnx_model([helper.make_node(op, ["a", "b"], ["y"], **attrs)], [("a", [6], elem), ("b", [6], elem)],
              [("y", [6], elem)])
    a, b = np.array([7, -7, 7, -7, 3, 0], dtype), np.array([2, 2, -2, 0, 0, 0], dtype)
    f = gc.load_onnx(m)
    got = gc.compile(lambda a, b: f(a, b), a, b, provider="cpu")(a, b)
    with np.errstate(all="ignore"):
        safe = np.where(b == 0, 1, b)
        expected = {"Div": np.where(b == 0, 0, np.trunc(a / safe)), "Mod": np.remainder(a, b) if fmod == 0 else
                    np.fmod(a, b)}[op].astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
