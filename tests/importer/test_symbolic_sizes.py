"""Ops whose output size is a symbolic dim (Range over x.shape[0], Tile/Expand/ConstantOfShape by a
shape, Slice up to a size): imported models keep the batch symbolic, run at several batch sizes on
ONNX Runtime and differentiate; lengths that are not a product of dims are refused by name."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import gcompile as gc
import gcompile.functions as F
from gcompile.testing import check_grad

from .helpers import model, ort_run

RNG = np.random.default_rng(7)


def _arange_model(cast_to=TensorProto.FLOAT, start=0.0, step=1.0, dtype=np.float32):
    """y = x * arange(x.shape[0])[:, None], as both PyTorch exporters write it (six nodes)."""
    cast_to = TensorProto.DOUBLE if dtype == np.float64 and cast_to == TensorProto.FLOAT else cast_to
    float_type = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    value = dtype if cast_to == float_type else np.int64
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=cast_to),
             helper.make_node("Range", ["start", "nf", "step"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "one"], ["col"]),
             helper.make_node("Mul", ["x", "colf"], ["y"]) if cast_to != float_type else
             helper.make_node("Mul", ["x", "col"], ["y"])]
    if cast_to != float_type:
        nodes.insert(-1, helper.make_node("Cast", ["col"], ["colf"], to=float_type))
    inits = [("zero", np.int64(0)), ("one", np.array([1], np.int64)), ("start", np.asarray(start, value)),
             ("step", np.asarray(step, value))]
    return model(nodes, [("x", ["batch", 3])], [("y", ["batch", 3])], inits, opset=17, dtype=dtype)


@pytest.mark.parametrize("cast_to", [TensorProto.FLOAT, TensorProto.INT64], ids=["float", "int64"])
def test_range_over_the_batch_matches_onnxruntime_and_stays_symbolic(cast_to):
    m = _arange_model(cast_to)
    f = gc.load_onnx(m)
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    assert [d.dim_param or d.dim_value for d in cf.model.graph.input[0].type.tensor_type.shape.dim] == ["batch", 3]
    for n in (1, 4, 7):
        x = RNG.standard_normal((n, 3)).astype(np.float32)
        (expected,) = ort_run(m, {"x": x})
        np.testing.assert_array_equal(cf(x), expected)


def test_range_over_the_batch_differentiates():
    f = gc.load_onnx(_arange_model(dtype=np.float64))
    w = RNG.standard_normal((5, 3))

    def loss(x):
        return F.sum(F.sin(f(x)) * w)
    x = RNG.standard_normal((5, 3))
    for order in (1, 2):
        check_grad(loss, [x], order=order)
    f = gc.load_onnx(_arange_model())
    cf = gc.compile(lambda x: gc.grad(F.sum(f(x)), [x])[0], gc.spec(("batch", 3)), provider="cpu")
    np.testing.assert_array_equal(cf(np.ones((4, 3), np.float32)), np.repeat(np.arange(4.0), 3).reshape(4, 3))


def test_range_with_a_step_dividing_its_limit():
    """Range(0, 2*batch, 2): the length is batch again."""
    m = _arange_model(TensorProto.INT64, step=2)
    m.graph.node[2].input[0] = "n2"
    m.graph.node.insert(2, helper.make_node("Mul", ["n", "two"], ["n2"]))
    m.graph.initializer.append(helper.make_tensor("two", TensorProto.INT64, [], [2]))
    f = gc.load_onnx(m)
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    x = RNG.standard_normal((3, 3)).astype(np.float32)
    np.testing.assert_array_equal(cf(x), x * np.arange(0, 6, 2, dtype=np.float32)[:, None])


def test_range_with_a_span_that_is_not_a_product_of_dims_is_refused():
    with pytest.raises(gc.UnsupportedError, match=r"Range from 1.0 to batch.*known at import time as a product of "
                                                  r"the model.s dims.*max\(0, batch - 1\)"):
        f = gc.load_onnx(_arange_model(start=1.0))
        gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")


def test_range_on_data_is_refused_as_data_dependent():
    m = model([helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
               helper.make_node("Range", ["zero", "m", "one"], ["y"])],
              [("x", [3])], [("y", ["k"])], [("zero", np.float32(0)), ("one", np.float32(1))], opset=17)
    f = gc.load_onnx(m)
    with pytest.raises(gc.UnsupportedError, match="Range.*bounds must be known at import time.*its limit is computed "
                                                   "at run time from data"):
        gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")


def test_tile_expand_and_slice_by_symbolic_sizes():
    """Tile by [batch, 1], Expand to [batch, batch] and Slice x[:batch] (the whole axis), all from Shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "i0", "i1"], ["n"]),
             helper.make_node("Concat", ["n", "i1"], ["reps"], axis=0),
             helper.make_node("Tile", ["x", "reps"], ["t"]),                       # (batch*batch, 2)
             helper.make_node("Concat", ["n", "n"], ["nn"], axis=0),
             helper.make_node("ReduceSum", ["x", "i1"], ["col"], keepdims=1),      # (batch, 1)
             helper.make_node("Expand", ["col", "nn"], ["e"]),                      # (batch, batch)
             helper.make_node("Slice", ["e", "i0", "n", "i0"], ["cut"]),           # e[:batch]
             helper.make_node("ReduceSum", ["t"], ["ts"], keepdims=0),
             helper.make_node("ReduceSum", ["cut"], ["cs"], keepdims=0),
             helper.make_node("Add", ["ts", "cs"], ["y"])]
    m = model(nodes, [("x", ["batch", 2])], [("y", [])], [("i0", np.array([0], np.int64)),
                                                         ("i1", np.array([1], np.int64))], opset=17)
    f = gc.load_onnx(m)
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    for n in (1, 3):
        x = RNG.standard_normal((n, 2)).astype(np.float32)
        np.testing.assert_allclose(cf(x), ort_run(m, {"x": x})[0], rtol=1e-5)
    x = RNG.standard_normal((3, 2))
    check_grad(lambda x: F.sum(F.sin(gc.load_onnx(_as_float64(m))(x))), [x], order=1)


def _as_float64(m):
    copy = type(m)()
    copy.CopyFrom(m)
    for value in list(copy.graph.input) + list(copy.graph.output):
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    return copy
