"""Tensor sequences (importer/translators/sequence.py): SplitToSequence and SequenceAt as the dynamo
exporter writes torch.split (GPT-2's query/key/value), SequenceConstruct, SequenceLength and
ConcatFromSequence, against ONNX Runtime with a symbolic batch, differentiated; a sequence where a
tensor is expected (a model output) is refused by name."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import gcompile as gc
import gcompile.functions as F
from gcompile.testing import check_grad

from .helpers import model, ort_run

RNG = np.random.default_rng(5)


def _split_model(dtype=np.float32):
    """x (batch, 7): split along axis 1 into 3 + 3 + 1 (a scalar split), 2 + 5 (a 1-D split) and 7 single
    columns without the axis (no split, keepdims 0); picked by SequenceAt (one negative position), joined
    again by SequenceConstruct and ConcatFromSequence (with and without a new axis), scaled by
    SequenceLength."""
    nodes = [helper.make_node("SplitToSequence", ["x", "three"], ["s3"], axis=1),
             helper.make_node("SequenceAt", ["s3", "p0"], ["a"]),
             helper.make_node("SequenceAt", ["s3", "pm1"], ["last"]),                  # the 1-column rest
             helper.make_node("SplitToSequence", ["x", "sizes"], ["s25"], axis=1),
             helper.make_node("SequenceAt", ["s25", "p1"], ["five"]),
             helper.make_node("SplitToSequence", ["x"], ["cols"], axis=1, keepdims=0),
             helper.make_node("SequenceLength", ["cols"], ["count"]),
             helper.make_node("ConcatFromSequence", ["cols"], ["stacked"], axis=-1, new_axis=1),   # x again
             helper.make_node("SequenceConstruct", ["a", "last", "five"], ["joined"]),
             helper.make_node("ConcatFromSequence", ["joined"], ["cat"], axis=1),                  # (batch, 9)
             helper.make_node("Cast", ["count"], ["countf"], to=TensorProto.FLOAT if dtype == np.float32
                              else TensorProto.DOUBLE),
             helper.make_node("Mul", ["stacked", "countf"], ["scaled"]),
             helper.make_node("Concat", ["cat", "scaled"], ["y"], axis=1)]
    return model(nodes, [("x", ["batch", 7])], [("y", ["batch", 16])],
                 [("three", np.int64(3)), ("sizes", np.array([2, 5], np.int64)), ("p0", np.int64(0)),
                  ("pm1", np.int64(-1)), ("p1", np.int64(1))], opset=20, dtype=dtype)


def test_sequences_match_onnxruntime_with_a_symbolic_batch():
    m = _split_model()
    f = gc.load_onnx(m)
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    for b in (1, 4):
        x = RNG.standard_normal((b, 7)).astype(np.float32)
        np.testing.assert_allclose(cf(x), ort_run(m, {"x": x})[0], rtol=1e-6)


def test_sequences_differentiate():
    f = gc.load_onnx(_split_model(np.float64))
    w = RNG.standard_normal((3, 16))
    for order in (1, 2):
        check_grad(lambda x: F.sum(F.sin(f(x)) * w), [RNG.standard_normal((3, 7))], order=order)


def test_a_sequence_output_is_refused():
    m = model([helper.make_node("SplitToSequence", ["x", "two"], ["y"], axis=0)], [("x", [4])], [("y", [2])],
              [("two", np.int64(2))], opset=20)
    m.graph.output[0].type.CopyFrom(helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    f = gc.load_onnx(m)
    with pytest.raises(gc.UnsupportedError, match="a sequence of 2 tensors is used where a tensor is expected"):
        gc.compile(lambda x: f(x), gc.spec((4,)), provider="cpu")


@pytest.mark.parametrize("kind, type_proto", [
    ("a sequence", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))),
    ("an optional", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))),
])
def test_a_sequence_or_optional_input_is_refused_by_what_it_is(kind, type_proto):
    """Calling the model said "ONNX element type UNDEFINED is not supported" (its tensor type was read off
    a value that has none); input_specs() named it already. Both now say what the input is."""
    first = "SequenceAt" if kind == "a sequence" else "OptionalGetElement"
    m = model([helper.make_node(first, ["s", "p0"] if kind == "a sequence" else ["s"], ["y"])], [("s", [2])],
              [("y", [2])], [("p0", np.int64(0))], opset=20)
    m.graph.input[0].type.CopyFrom(type_proto)
    f = gc.load_onnx(m)
    message = f"input 's' is {kind}, not a tensor"
    with pytest.raises(gc.UnsupportedError, match=message):
        f.input_specs()
    with pytest.raises(gc.UnsupportedError, match=message):
        gc.compile(lambda x: f(x), gc.spec((2,)), provider="cpu")
