"""Arithmetic on symbolic sizes, as the dynamo exporter writes it (importer/sizes.py): chains of Shape,
Gather, Squeeze, Unsqueeze, Cast/CastLike, Concat, Add/Sub/Mul/Div/Mod, Min/Max, Neg/Abs, comparisons and
Where on sizes stay symbolic at import, so a Range, Reshape, Expand or ConstantOfShape at their end gets
a symbolic dim again; values that leave the dims' algebra are computed at run time and match ONNX
Runtime; shapes that are no product of dims are refused by name. Also the tensor sequences GPT-2's
export splits its attention projections with."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import gcompile as gc
import gcompile.functions as F
from gcompile.importer import sizes
from gcompile.importer.sizes import NotSymbolic

from .helpers import model, ort_run

RNG = np.random.default_rng(11)
INT = TensorProto.INT64


def _const(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, _elem(dtype), np.shape(value),
                                                                            np.asarray(value, dtype).reshape(-1)))


def _elem(dtype):
    return {np.dtype(np.int64): INT, np.dtype(np.float32): TensorProto.FLOAT}[np.dtype(dtype)]


def _batch():
    """n = x.shape[0] as a scalar, as the dynamo exporter writes it (Shape with end, then Squeeze)."""
    return [helper.make_node("Shape", ["x"], ["s0"], start=0, end=1),
            helper.make_node("Squeeze", ["s0"], ["n"])]


def _check(m, batches=(1, 2, 5), symbolic_output=True):
    """Import `m` (input x of shape (batch, 3)), compile it once with the batch symbolic and compare with
    ONNX Runtime at several batch sizes."""
    f = gc.load_onnx(m)
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    assert cf.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    if symbolic_output:
        assert cf.model.graph.output[0].type.tensor_type.shape.dim[0].dim_param, "the output's size stays symbolic"
    for b in batches:
        x = RNG.standard_normal((b, 3)).astype(np.float32)
        (expected,) = ort_run(m, {"x": x})
        got = cf(x)
        assert got.shape == expected.shape, (b, got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=f"batch {b}")
    return f


def _row_scaled(nodes, length, inits=()):
    """y = x * arange(length)[:, None] for a size `length` that must come back to the batch."""
    tail = [_const("zero", 0.0, np.float32), _const("one", 1.0, np.float32),
            helper.make_node("CastLike", ["zero", length], ["start"]),
            helper.make_node("CastLike", ["one", length], ["step"]),
            helper.make_node("Range", ["start", length, "step"], ["r"]),
            _const("axis1", [1]),
            helper.make_node("Unsqueeze", ["r", "axis1"], ["col"]),
            helper.make_node("Cast", ["col"], ["colf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["x", "colf"], ["y"])]
    return model(_batch() + nodes + tail, [("x", ["batch", 3])], [("y", ["batch", 3])], inits, opset=20)


def test_range_whose_bounds_are_cast_like_the_batch():
    """Range(CastLike(0.0, n), n, CastLike(1.0, n)): the dynamo exporter's arange(x.shape[0]); the CastLike
    of a constant to a size's type was a run-time value, and the Range refused as data-dependent."""
    _check(_row_scaled([], "n"))


@pytest.mark.parametrize("op, other", [("Max", 0), ("Min", 10 ** 9), ("Max", -3)])
def test_range_to_a_max_or_min_that_the_dims_decide(op, other):
    """max(batch, 0) and min(batch, 10^9)... are the batch: every dim is at least 0, and a size is below
    10^9 only when the model says so, so Min keeps min(batch, 10^9) (computed at run time) instead."""
    nodes = [_const("other", other), helper.make_node(op, ["n", "other"], ["m"])]
    if op == "Min":
        with pytest.raises(gc.UnsupportedError, match=r"Range.*but it is min\(1000000000, batch\)"):
            _check(_row_scaled(nodes, "m"))
        return
    _check(_row_scaled(nodes, "m"))


def test_sum_then_difference_comes_back_to_the_batch():
    """(batch + 1) - 1 and (2*batch + 4) / 2 - 2 are the batch again: intermediate sizes that are no
    product of dims stay symbolic instead of becoming run-time values."""
    nodes = [_const("c1", 1), _const("c2", 2), _const("c4", 4),
             helper.make_node("Add", ["n", "c1"], ["n1"]), helper.make_node("Sub", ["n1", "c1"], ["a"]),
             helper.make_node("Mul", ["a", "c2"], ["n2"]), helper.make_node("Add", ["n2", "c4"], ["n3"]),
             helper.make_node("Div", ["n3", "c2"], ["n4"]), helper.make_node("Sub", ["n4", "c2"], ["m"])]
    _check(_row_scaled(nodes, "m"))


def test_where_and_comparisons_on_sizes():
    """Where(batch < 0, 0, batch), Where(batch >= 0, ...), Where(Equal(batch, -1), 1, batch) (the
    exporters' broadcasting guard), Neg(Neg(batch)) and Abs(batch): all the batch."""
    nodes = [_const("c0", 0), _const("cm1", -1), _const("c1", 1),
             helper.make_node("Less", ["n", "c0"], ["lt"]),
             helper.make_node("Where", ["lt", "c0", "n"], ["w1"]),
             helper.make_node("GreaterOrEqual", ["w1", "c0"], ["ge"]),
             helper.make_node("Neg", ["w1"], ["neg"]),
             helper.make_node("Neg", ["neg"], ["pos"]),
             helper.make_node("Where", ["ge", "pos", "c1"], ["w2"]),
             helper.make_node("Equal", ["w2", "cm1"], ["eq"]),
             helper.make_node("Where", ["eq", "c1", "w2"], ["w3"]),
             helper.make_node("Abs", ["w3"], ["m"])]
    _check(_row_scaled(nodes, "m"))


def test_div_and_mod_of_sizes():
    """(4*batch) % 2 is 0, (6*batch) / 3 is 2*batch, batch % (batch + 1) is batch: Range(0, 2*batch, 2)
    plus those remainders has the batch as its length."""
    nodes = [_const("c2", 2), _const("c3", 3), _const("c4", 4), _const("c6", 6), _const("c1", 1),
             helper.make_node("Mul", ["n", "c4"], ["n4"]), helper.make_node("Mod", ["n4", "c2"], ["zero_mod"]),
             helper.make_node("Mul", ["n", "c6"], ["n6"]), helper.make_node("Div", ["n6", "c3"], ["two_n"]),
             helper.make_node("Add", ["n", "c1"], ["n_plus"]), helper.make_node("Mod", ["n", "n_plus"], ["same"]),
             helper.make_node("Sub", ["same", "n"], ["zero_diff"]),
             helper.make_node("Add", ["two_n", "zero_mod"], ["t"]),
             helper.make_node("Add", ["t", "zero_diff"], ["lim"]),
             helper.make_node("Range", ["zero_i", "lim", "c2"], ["r"]),
             helper.make_node("Div", ["r", "c2"], ["m_index"]),
             helper.make_node("Unsqueeze", ["m_index", "axis1"], ["col"]),
             helper.make_node("Cast", ["col"], ["colf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "colf"], ["y"])]
    m = model(_batch() + nodes, [("x", ["batch", 3])], [("y", ["batch", 3])],
              [("zero_i", np.int64(0)), ("axis1", np.array([1], np.int64))], opset=20)
    _check(m)


def test_cast_of_sizes_to_float_bool_and_back():
    """Cast(batch, float) * 3.0 / 3.0, cast back to int64, chosen by Where(Cast(batch + 1, bool)) and
    concatenated into a Reshape target."""
    nodes = [_const("c1", 1), _const("c0", 0), helper.make_node("Add", ["n", "c1"], ["n1"]),
             helper.make_node("Cast", ["n1"], ["nonzero"], to=TensorProto.BOOL),
             helper.make_node("Where", ["nonzero", "n", "c0"], ["chosen"]),
             helper.make_node("Cast", ["chosen"], ["nf"], to=TensorProto.FLOAT),
             _const("three", 3.0, np.float32),
             helper.make_node("Mul", ["nf", "three"], ["n3"]), helper.make_node("Div", ["n3", "three"], ["back"]),
             helper.make_node("Cast", ["back"], ["ni"], to=INT),
             _const("axis0", [0]),
             helper.make_node("Unsqueeze", ["ni", "axis0"], ["rows"]),
             _const("cols", [3]),
             helper.make_node("Concat", ["rows", "cols"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["xr"]),
             _const("seven", 7.0, np.float32),
             helper.make_node("Mul", ["xr", "seven"], ["y"])]
    _check(model(_batch() + nodes, [("x", ["batch", 3])], [("y", ["batch", 3])], opset=20))


def test_sizes_outside_the_dims_algebra_are_computed_at_run_time():
    """Values of sizes used as data: (batch + 3) // 2, (batch - 5) % 3 (Python's sign), fmod of the same,
    max(batch, 2), min(batch, 2), abs(batch - 3), and a float size times 0.5 (once truncated to 0 at
    import), as data added to x; each matches ONNX Runtime at every batch."""
    nodes = [_const("c2", 2), _const("c3", 3), _const("c5", 5),
             helper.make_node("Add", ["n", "c3"], ["a"]), helper.make_node("Div", ["a", "c2"], ["q"]),
             helper.make_node("Sub", ["n", "c5"], ["d"]),
             helper.make_node("Mod", ["d", "c3"], ["r"]), helper.make_node("Mod", ["d", "c3"], ["rf"], fmod=1),
             helper.make_node("Max", ["n", "c2"], ["mx"]), helper.make_node("Min", ["n", "c2"], ["mn"]),
             helper.make_node("Sub", ["n", "c3"], ["e"]), helper.make_node("Abs", ["e"], ["ab"]),
             helper.make_node("Add", ["q", "r"], ["t1"]), helper.make_node("Add", ["t1", "rf"], ["t2"]),
             helper.make_node("Add", ["t2", "mx"], ["t3"]), helper.make_node("Add", ["t3", "mn"], ["t4"]),
             helper.make_node("Add", ["t4", "ab"], ["total"]),
             helper.make_node("Cast", ["total"], ["totalf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             _const("half", 0.5, np.float32), helper.make_node("Mul", ["nf", "half"], ["h"]),
             helper.make_node("Mul", ["totalf", "h"], ["scale"]),
             helper.make_node("Mul", ["x", "scale"], ["y"])]
    _check(model(_batch() + nodes, [("x", ["batch", 3])], [("y", ["batch", 3])], opset=20), batches=(1, 2, 4, 5, 9))


def test_tile_of_a_shape_and_expand_to_it():
    """Tile(Shape(x)[0:1], 2) is [batch, batch]: Expand a column to it."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             _const("reps", [2]), helper.make_node("Tile", ["s", "reps"], ["nn"]),
             _const("axes", [1]), helper.make_node("ReduceSum", ["x", "axes"], ["col"], keepdims=1),
             helper.make_node("Expand", ["col", "nn"], ["y"])]
    f = _check(model(nodes, [("x", ["batch", 3])], [("y", ["batch", "batch"])], opset=20))
    grad = gc.compile(lambda x: gc.grad(F.sum(f(x)), [x])[0], gc.spec(("batch", 3)), provider="cpu")
    np.testing.assert_array_equal(grad(np.ones((4, 3), np.float32)), np.full((4, 3), 4.0, np.float32))


def test_shapes_that_are_no_product_of_dims_are_refused_by_name():
    nodes = [_const("c1", 1), helper.make_node("Add", ["n", "c1"], ["n1"]),
             _const("axis0", [0]), helper.make_node("Unsqueeze", ["n1", "axis0"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["y"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))]
    f = gc.load_onnx(model(_batch() + nodes, [("x", ["batch", 3])], [("y", ["k"])], opset=20))
    with pytest.raises(gc.UnsupportedError, match=r"ConstantOfShape.*\[batch \+ 1\].*not products of the model's dims"):
        gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")


def test_range_over_data_is_still_refused():
    """A bound computed from the input's values (ReduceMax of x, cast) keeps the data-dependent refusal."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
             helper.make_node("Cast", ["mx"], ["m"], to=INT)]
    f = gc.load_onnx(_row_scaled(nodes, "m"))
    with pytest.raises(gc.UnsupportedError, match="Range.*bounds must be known at import time.*its limit is computed "
                                                   "at run time from data"):
        gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")


# -- the algebra itself ----------------------------------------------------------------------------------------
def test_size_algebra():
    assert sizes.sub(sizes.add("batch", 1), 1) == "batch"
    assert sizes.mul("batch", "seq") == "batch*seq"
    assert str(sizes.add("batch", 1)) == "batch + 1"
    assert str(sizes.sub(3, "batch")) == "-batch + 3"
    assert sizes.div("6*batch", 3) == "2*batch"
    assert sizes.div(-7, 2) == -3                                   # ONNX truncates toward zero
    assert str(sizes.div("batch", 2)) == "(batch // 2)"
    assert sizes.mod("4*batch", 2) == 0 and sizes.mod(-7, 3) == 2 and sizes.mod(-7, 3, fmod=True) == -1
    assert sizes.mod(sizes.mod("batch", 3), 3) == sizes.mod("batch", 3)   # 0 <= batch % 3 < 3
    assert sizes.maximum("batch", 0) == "batch" and sizes.minimum("batch", "2*batch") == "batch"
    assert sizes.maximum("batch", 1) == sizes.maximum(1, "batch")         # one canonical form
    assert sizes.minimum(sizes.minimum("batch", 5), 7) == sizes.minimum("batch", 5)
    assert sizes.absolute(sizes.sub(-1, "batch")) == sizes.add("batch", 1)
    assert sizes.compare("Less", sizes.minimum("batch", 5), 6) is True
    assert sizes.compare("Equal", "batch", -1) is False and sizes.compare("GreaterOrEqual", "batch", 0) is True
    with pytest.raises(NotSymbolic):
        sizes.compare("Equal", "batch", 1)                           # the batch decides it
    with pytest.raises(NotSymbolic):
        sizes.exact_div("batch", 2)                                   # batch / 2.0 need not be whole
    with pytest.raises(NotSymbolic):
        sizes.div("batch", 0)
