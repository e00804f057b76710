"""The onnx package's own node test cases (generated in-process), imported with gc.load_onnx and
run on gcompile's numpy reference evaluator.

A case is *op-supported* when every node of its model (If branches included) has a translator.
Each such case either passes, is refused with an UnsupportedError (a feature gcompile does not
express, such as pooling with dilations: never a wrong result), or
is listed in EXCLUDED with a reason. Anything else fails the test.

Node tests feed every operand as a graph input, where exporters write axes, shapes, pads and the
like as constants. So a case refused because such an operand is only known at run time is run
again with its integer and bool inputs bound as constants, as an exporter would have written them,
then with every input but the first bound (float parameters such as Resize's scales), and last with
every input bound (an op all of whose inputs are parameters: MelWeightMatrix's sizes and frequencies).
"""
import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import gcompile as gc
import gcompile.functions as F
from gcompile.errors import UnsupportedError
from gcompile.frontend.tensor import Tensor
from gcompile.frontend.trace import trace
from gcompile.importer.table import SUPPORTED_DTYPES, TRANSLATORS
from gcompile.ir.dtypes import BFLOAT16, NARROW_FLOATS, is_float
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad

from .helpers import as_float64

# Only goes up: the number of op-supported cases that pass.
PASS_FLOOR = 1744

EXCLUDED = {
    "test_maxunpool_export_with_output_shape": "its expectation counts the indices in the shape MaxPool's geometry "
                                               "inverts to and pads that to output_shape; ONNX Runtime and PyTorch "
                                               "(whose exporter writes MaxUnpool) count them in output_shape, as "
                                               "gcompile does (tests/importer/test_translators_vs_reference.py)",
}

TOLERANCE = {np.dtype(np.float16): dict(rtol=2e-3, atol=2e-3), BFLOAT16: dict(rtol=1e-2, atol=1e-2),
             **{d: dict(rtol=0, atol=0) for d in NARROW_FLOATS}}
# Cases whose expected outputs onnx writes by hand to 4 decimal places (gridsample.py: -0.1406 for
# -0.140625): compared to one unit of that last place, as some are cut rather than rounded (roialign.py:
# 0.9727 where onnx's own ReferenceEvaluator computes 0.97278).
ROUNDED = {name: dict(rtol=0, atol=1e-4) for name in ("test_gridsample_bicubic",
                                                     "test_averagepool_2d_ceil_last_window_starts_on_pad",
                                                     "test_roialign_aligned_false", "test_roialign_aligned_true")}


def _ops(graph):
    for node in graph.node:
        yield node.domain, node.op_type
        for attr in node.attribute:
            yield from _ops(attr.g)
            for g in attr.graphs:
                yield from _ops(g)


def _op_supported(case) -> bool:
    return all(d in ("", "ai.onnx") and (op in TRANSLATORS or op == "If") for d, op in _ops(case.model.graph))


def _leaves(values):
    """The arrays of a case's inputs or outputs: TensorProtos (the Cast and int16 cases store theirs so,
    for the dtypes numpy lacks) read as numpy or ml_dtypes arrays, sequences (lists) flattened."""
    for v in values:
        if isinstance(v, list):
            yield from _leaves(v)
        elif v is not None:          # an absent optional
            yield numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


def _rebuild(values, leaves):
    """`values`' structure (lists for sequences) with the leaves taken from the iterator `leaves`."""
    return [_rebuild(v, leaves) if isinstance(v, list) else None if v is None else next(leaves) for v in values]


def _bound(arrays, bind: str) -> list[bool]:
    return [bind == "all" or bind == "all_but_first" and i > 0 or bind == "ints" and a.dtype.kind in "biu"
            for i, a in enumerate(arrays)]


def _run(f, inputs, bind: str):
    """Evaluate with the inputs `bind` names held as constants: none, the integer and bool ones, all
    but the first (float parameters such as Resize's scales), or all."""
    arrays = list(_leaves(inputs))
    known = _bound(arrays, bind)
    runtime = [a for a, k in zip(arrays, known) if not k]

    def fn(*xs):
        it = iter(xs)
        return f(*_rebuild(inputs, iter([a if k else next(it) for a, k in zip(arrays, known)])))
    traced = trace(fn, [gc.spec(a.shape, a.dtype) for a in runtime])
    return evaluate(traced.graph, runtime)


def _check_case(case) -> str:
    """Runs the case and compares its outputs; returns the binding its inputs needed (_bound)."""
    tolerance = ROUNDED.get(case.name)
    f = gc.load_onnx(case.model)
    for inputs, expected in case.data_sets:
        if any(a.dtype not in SUPPORTED_DTYPES for a in _leaves(inputs)):
            raise UnsupportedError("an input dtype gcompile does not trace")
        for bind in ("none", "ints", "all_but_first", "all"):
            try:
                got = _run(f, inputs, bind)
                break
            except UnsupportedError as err:
                if "must be known at import time" not in str(err) or bind == "all":
                    raise
        expected = list(_leaves(expected))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert (g.dtype, g.shape) == (e.dtype, e.shape)
            if is_float(e.dtype) or e.dtype in NARROW_FLOATS:
                np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64),
                                           **(tolerance or TOLERANCE.get(e.dtype, dict(rtol=1e-4, atol=1e-5))))
            else:
                np.testing.assert_array_equal(g, e)
    return bind


@pytest.fixture(scope="module")
def cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases()


@pytest.fixture(scope="module")
def outcomes(cases):
    """Each op-supported case's outcome: ("pass", the binding it needed), or ("refused" | "failed", the
    error's first line)."""
    result = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in cases:
            if not _op_supported(case) or case.name in EXCLUDED:
                continue
            try:
                result[case.name] = ("pass", _check_case(case))
            except UnsupportedError as err:
                result[case.name] = ("refused", str(err))
            except Exception as err:  # noqa: BLE001 - collected and reported below
                result[case.name] = ("failed", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    return result


def test_onnx_node_conformance(cases, outcomes):
    passed = [name for name, o in outcomes.items() if o[0] == "pass"]
    refused = [name for name, o in outcomes.items() if o[0] == "refused"]
    failed = [f"{name}: {o[1]}" for name, o in outcomes.items() if o[0] == "failed"]
    print(f"\nONNX node conformance: {len(outcomes) + len(EXCLUDED)}/{len(cases)} cases op-supported; {len(passed)} "
          f"pass, {len(refused)} refused with UnsupportedError, {len(EXCLUDED)} excluded")
    assert not failed, "supported cases failing:\n" + "\n".join(failed)
    assert len(passed) >= PASS_FLOOR


# The ops (and the cases of modes) whose cases' gradients are checked here, each case that passes above and has a
# float input and output: float64 central differences on the reference evaluator at the case's inputs
# moved by a little noise (1e-2 relative: the cases sample kinks on purpose, such as grid points on pixel
# centres and ties for Hardmax). GCOMPILE_CONFORMANCE_GRADIENTS=all checks every case (a few minutes).
GRADIENT_OPS = {"AffineGrid", "BitShift", "CausalConvWithState", "CenterCropPad", "Col2Im", "CumProd", "DeformConv",
                "DequantizeLinear", "DFT", "Det", "DynamicQuantizeLinear", "GlobalLpPool", "GridSample", "Hardmax",
                "LinearAttention", "LpPool", "LRN", "MaxUnpool", "MeanVarianceNormalization", "ReverseSequence",
                "RoiAlign", "RotaryEmbedding", "STFT", "SwiGLU", "TensorScatter", "Acos", "Asin", "Atan",
                "SequenceMap", "SequenceInsert", "SequenceErase", "SequenceConstruct", "SplitToSequence",
                "ConcatFromSequence", "Optional", "OptionalGetElement"}
GRADIENT_CASES = ("test_wrap_pad", "test_maxpool_2d_dilations", "test_maxpool_3d_dilations", "test_maxpool_with_argmax",
                  "test_averagepool_2d_dilations", "test_averagepool_3d_dilations",
                  "test_averagepool_2d_ceil_last_window", "test_scatter_elements_with_reduction", "test_scatternd_m",
                  "test_resize_tf_crop_and_resize", "test_convtranspose_autopad_same",
                  "test_convtranspose_kernel_shape", "test_convtranspose_output_shape", "test_scan_sum",
                  "test_attention_4d_with_qk_matmul", "test_attention_4d_causal_nonpad", "test_attention_local_window",
                  "test_attention_24_qk_matmul")
# Cases whose gradient has no finite-difference reference, and why.
_FULLY_MASKED = ("a fully masked query row: the function body's softmax of a row of -inf has a NaN gradient there, "
                 "as in every reverse-mode tool (the Attention op itself gives zeros)")
NO_GRADIENT_REFERENCE = {
    **{f"test_attention_{name}_expanded": _FULLY_MASKED for name in (
        "causal_boolmask_nan_robustness", "23_boolmask_fullymasked_row_nan_robustness",
        "4d_causal_nonpad_negative_offset_structural_empty", "23_fullymasked_qk_matmul_output_mode3_zero",
        "24_fullymasked_qk_matmul_output_mode3_zero", "local_window_gqa_rank4_mask")},
    **{f"test_mod_float_edge_cases_fmod_0_{t}": "its inputs hold infinities, where the divisor's derivative "
                                                  "-floor(a/b) is infinite and 0·inf is NaN (as in PyTorch)"
       for t in ("float32", "float64")},
    "test_range_float_type_positive_delta_expanded": "its output's length is decided by the values (a Loop over a "
                                                     "run-time trip count): check_grad needs static output sizes",
}


def _gradient_checked(case) -> bool:
    if os.environ.get("GCOMPILE_CONFORMANCE_GRADIENTS") == "all":
        return True
    return case.name.startswith(GRADIENT_CASES) and not case.name.endswith("_expanded") or \
        any(op in GRADIENT_OPS for _, op in _ops(case.model.graph))


_WIDE = (np.dtype(np.float32), np.dtype(np.float64))


def _check_gradient(case, bind: str) -> bool:
    """check_grad (order 1) of the case's float64 model, its inputs bound as its forward check needed
    and the finite entries of its float outputs weighted (an output entry of ±inf, such as a masked
    score, has no derivative); False where it has no float input or output that the gradient connects."""
    inputs = list(_leaves(case.data_sets[0][0]))
    if any(a.dtype == np.float16 or a.dtype == BFLOAT16 for a in inputs):
        return False                 # as_float64 keeps their casts: no float64 reference
    f = gc.load_onnx(as_float64(case.model))
    rng = np.random.default_rng(0)
    known = _bound(inputs, bind)
    arrays = [a.astype(np.float64) if a.dtype in _WIDE else a for a in inputs]     # (float8 inputs are data)
    arrays = [a if k or a.dtype not in _WIDE else
              np.where(np.isfinite(a), a + 1e-2 * (1 + np.abs(a)) * rng.standard_normal(a.shape), a)
              for a, k in zip(arrays, known)]               # the run-time floats moved, their infinities kept
    runtime = [a for a, k in zip(arrays, known) if not k]

    def fn(*xs):
        it = iter(xs)
        outs = f(*_rebuild(case.data_sets[0][0], iter([a if k else next(it) for a, k in zip(arrays, known)])))
        return [F.where(F.isfinite(o), o, np.zeros((), o.dtype)) for o in
                (outs if isinstance(outs, (tuple, list)) else (outs,)) if isinstance(o, Tensor) and o.dtype in _WIDE]
    if not any(a.dtype in _WIDE for a in runtime) or not _float_outputs(fn, runtime):
        return False
    check_grad(fn, runtime, order=1, lowered=False, rtol=1e-4)
    return True


def _float_outputs(fn, runtime) -> int:
    """How many float Tensors `fn` computes (an output known at import time, such as Shape's, is none)."""
    seen: list = []
    trace(lambda *xs: seen.extend(fn(*xs)) or list(xs), runtime)
    return len(seen)


def test_onnx_node_conformance_gradients(cases, outcomes):
    checked, failed = 0, []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in cases:
            outcome = outcomes.get(case.name, ("",))
            if outcome[0] != "pass" or case.name in NO_GRADIENT_REFERENCE or not _gradient_checked(case):
                continue
            try:
                checked += _check_gradient(case, outcome[1])
            except Exception as err:  # noqa: BLE001 - collected and reported below
                failed.append(f"{case.name}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    print(f"\nONNX node conformance gradients: {checked} cases checked, {len(failed)} failed")
    assert not failed, "gradients failing:\n" + "\n".join(failed)
