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


def test_a_sequence_output_is_a_list():
    m = model([helper.make_node("SplitToSequence", ["x", "two"], ["y"], axis=0)], [("x", [4])], [("y", [2])],
              [("two", np.int64(2))], opset=20)
    m.graph.output[0].type.CopyFrom(helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    f = gc.load_onnx(m)
    x = np.arange(4, dtype=np.float32)
    got = gc.compile(lambda x: f(x), gc.spec((4,)), provider="cpu")(x)
    assert isinstance(got, list) and len(got) == 2
    np.testing.assert_array_equal(got[1], x[2:])


def _seq_type(elem=TensorProto.DOUBLE):
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None))


def _list_ops_model():
    """x (batch, 3) through SequenceEmpty, SequenceInsert (at the end, at a position, a negative one),
    SequenceErase and SequenceMap (a body squaring one element and scaling it by a tensor operand),
    joined by ConcatFromSequence: [x * x, sin(x)^2 * 2] side by side."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["e", "e"], ["sq"]), helper.make_node("Mul", ["sq", "k"], ["out"])], "square",
        [helper.make_tensor_value_info("e", TensorProto.DOUBLE, None),
         helper.make_tensor_value_info("k", TensorProto.DOUBLE, None)],
        [helper.make_tensor_value_info("out", TensorProto.DOUBLE, None)])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.DOUBLE),
             helper.make_node("Sin", ["x"], ["s"]),
             helper.make_node("SequenceInsert", ["empty", "x"], ["one"]),
             helper.make_node("SequenceInsert", ["one", "s", "p0"], ["two"]),              # [s, x]
             helper.make_node("SequenceInsert", ["two", "x", "pm1"], ["three"]),           # [s, x, x]
             helper.make_node("SequenceErase", ["three", "p0"], ["erased"]),              # [x, x]
             helper.make_node("SequenceInsert", ["erased", "s"], ["four"]),                # [x, x, s]
             helper.make_node("SequenceErase", ["four", "p1"], ["kept"]),                  # [x, s]
             helper.make_node("SequenceMap", ["kept", "k"], ["mapped"], body=body),
             helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=1)]
    return model(nodes, [("x", ["batch", 3]), ("k", [])], [("y", ["batch", 6])],
                 [("p0", np.int64(0)), ("pm1", np.int64(-1)), ("p1", np.int64(1))], opset=21, dtype=np.float64)


def test_list_ops_give_onnxruntimes_values_and_differentiate():
    m = _list_ops_model()
    f = gc.load_onnx(m)
    x, k = RNG.standard_normal((2, 3)), np.array(1.5)
    np.testing.assert_allclose(gc.compile(f, x, k, provider="cpu")(x, k), ort_run(m, {"x": x, "k": k})[0], rtol=1e-12)
    w = RNG.standard_normal((2, 6))
    for order in (1, 2):       # at a static and a symbolic batch, on both targets
        check_grad(lambda x, k: F.sum(f(x, k) * w), [x, k], order=order)


def _optional_loop_model(steps: int):
    """An optional tensor carried through a Loop of `steps` steps (each takes the element, updates it
    with tanh(h * w + i) and wraps it again), and a sequence collecting each step's h; after it
    OptionalHasElement, OptionalGetElement, and the sequence's length and sum."""
    body = helper.make_graph(
        [helper.make_node("OptionalGetElement", ["h_opt"], ["h"]),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.DOUBLE),
         helper.make_node("Mul", ["h", "w"], ["hw"]), helper.make_node("Add", ["hw", "fi"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_next"]),
         helper.make_node("Optional", ["h_next"], ["h_opt_next"]),
         helper.make_node("SequenceInsert", ["seen", "h_next"], ["seen_next"]),
         helper.make_node("Identity", ["cond"], ["cond_next"])], "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_value_info("h_opt", helper.make_optional_type_proto(
             helper.make_tensor_type_proto(TensorProto.DOUBLE, None))),
         helper.make_value_info("seen", _seq_type())],
        [helper.make_tensor_value_info("cond_next", TensorProto.BOOL, []),
         helper.make_value_info("h_opt_next", helper.make_optional_type_proto(
             helper.make_tensor_type_proto(TensorProto.DOUBLE, None))),
         helper.make_value_info("seen_next", _seq_type())])
    nodes = [helper.make_node("Optional", ["x"], ["start"]),
             helper.make_node("SequenceEmpty", [], ["none_seen"], dtype=TensorProto.DOUBLE),
             helper.make_node("Loop", ["trips", "", "start", "none_seen"], ["last", "seen"], body=body),
             helper.make_node("OptionalHasElement", ["last"], ["has"]),
             helper.make_node("OptionalGetElement", ["last"], ["h"]),
             helper.make_node("SequenceLength", ["seen"], ["count"]),
             helper.make_node("ConcatFromSequence", ["seen"], ["all"], axis=0, new_axis=1),
             helper.make_node("ReduceSum", ["all", "zero"], ["total"], keepdims=0),
             helper.make_node("Cast", ["count"], ["countf"], to=TensorProto.DOUBLE),
             helper.make_node("Cast", ["has"], ["hasf"], to=TensorProto.DOUBLE),
             helper.make_node("Mul", ["h", "countf"], ["scaled"]),
             helper.make_node("Add", ["scaled", "total"], ["sum"]),
             helper.make_node("Mul", ["sum", "hasf"], ["y"])]
    return model(nodes, [("x", ["batch", 3]), ("w", [3])], [("y", ["batch", 3])],
                 [("trips", np.int64(steps)), ("zero", np.array([0], np.int64))], opset=21, dtype=np.float64)


@pytest.mark.parametrize("steps", [3, 1])
def test_an_optional_and_a_sequence_carried_through_a_loop_differentiate(steps):
    m = _optional_loop_model(steps)
    f = gc.load_onnx(m)
    x, w = RNG.standard_normal((2, 3)), RNG.standard_normal(3)
    np.testing.assert_allclose(gc.compile(f, x, w, provider="cpu")(x, w), ort_run(m, {"x": x, "w": w})[0], rtol=1e-12)
    v = RNG.standard_normal((2, 3))
    for order in (1, 2):
        check_grad(lambda x, w: F.sum(f(x, w) * v), [x, w], order=order)


def test_a_loop_of_no_steps_leaves_an_empty_sequence_that_cannot_be_joined():
    with pytest.raises(gc.UnsupportedError, match=r"ConcatFromSequence.*an empty sequence"):
        f = gc.load_onnx(_optional_loop_model(0))
        gc.compile(f, gc.spec(("batch", 3), "float64"), gc.spec((3,), "float64"), provider="cpu")


@pytest.mark.parametrize("kind, type_proto", [
    ("a sequence", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))),
    ("an optional", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))),
])
def test_a_sequence_or_optional_input_has_no_spec(kind, type_proto):
    """input_specs() says what the input is (it gives tensors' specs); a sequence is called with a list."""
    first = "SequenceAt" if kind == "a sequence" else "OptionalGetElement"
    m = model([helper.make_node(first, ["s", "p0"] if kind == "a sequence" else ["s"], ["y"])], [("s", [2])],
              [("y", [2])], [("p0", np.int64(0))], opset=20)
    m.graph.input[0].type.CopyFrom(type_proto)
    f = gc.load_onnx(m)
    with pytest.raises(gc.UnsupportedError, match=f"input 's' is {kind}, not a tensor: it has no gc.spec"):
        f.input_specs()
    if kind == "a sequence":
        with pytest.raises(gc.InputError, match="input 's' is a sequence of tensors: pass a list of them, got Tensor"):
            gc.compile(lambda x: f(x), gc.spec((2,)), provider="cpu")
    x = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal(gc.compile(lambda x: f([x] if kind == "a sequence" else x), gc.spec((2,)),
                                             provider="cpu")(x), x)


def test_a_map_input_is_refused_by_what_it_is():
    m = model([helper.make_node("Identity", ["s"], ["y"])], [("s", [2])], [("y", [2])], opset=20)
    m.graph.input[0].type.CopyFrom(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    f = gc.load_onnx(m)
    with pytest.raises(gc.UnsupportedError, match="input 's' is a map, not a tensor"):
        gc.compile(lambda x: f(x), gc.spec((2,)), provider="cpu")
