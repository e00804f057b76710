"""Translators of indexing (GatherND, ScatterND, ScatterElements, TopK), Resize, Attention,
GroupNormalization, RMSNormalization, ArgMax/ArgMin, Mod and Einsum diagonals: each one-node model's
values against ONNX Runtime's (float32), and its first- and second-order gradients (float64,
numeric, on the reference evaluator) where it is differentiable. Refusals of data-dependent ops."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gcompile as gc
from gcompile.testing import check_grad

from .helpers import assert_outputs_match, ort_run, sine_loss

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
        np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


def r(*shape, seed=0):
    return np.random.default_rng(seed + 7 * len(shape) + sum(shape)).standard_normal(shape)


def i64(*v):
    return np.asarray(v, np.int64)


def f32(*v):
    return np.asarray(v, np.float32)


def ties(*shape):
    """Small integers as floats: many equal values (ties for TopK and ArgMax)."""
    return np.random.default_rng(1).integers(0, 3, shape).astype(np.float64)


# name: (op, [(input name, array, "in" for a graph input or "const" for an initializer)], outputs, attrs, opset)
CASES = {
    "resize_linear_up": ("Resize", [("x", r(1, 2, 3, 4), "in"), ("roi", None, ""),
                                    ("s", f32(1, 1, 2, 1.5), "const")], 1, {"mode": "linear"}, 19),
    "resize_cubic_sizes_align": ("Resize", [("x", r(1, 1, 4, 5), "in"), ("roi", None, ""), ("sc", None, ""),
                                            ("sz", i64(1, 1, 7, 3), "const")], 1,
                                 {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, 19),
    "resize_nearest_floor": ("Resize", [("x", r(2, 1, 3, 3), "in"), ("roi", None, ""),
                                        ("s", f32(1, 1, 2, 1.7), "const")], 1,
                             {"mode": "nearest", "nearest_mode": "floor",
                              "coordinate_transformation_mode": "asymmetric"}, 19),
    "resize_linear_antialias": ("Resize", [("x", r(1, 1, 8, 9), "in"), ("roi", None, ""),
                                           ("s", f32(1, 1, 0.5, 0.4), "const")], 1,
                                {"mode": "linear", "antialias": 1}, 19),
    "resize_cubic_pytorch": ("Resize", [("x", r(1, 2, 5, 3), "in"), ("roi", None, ""),
                                        ("s", f32(1, 1, 0.6, 2.0), "const")], 1,
                             {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel",
                              "cubic_coeff_a": -0.5, "exclude_outside": 1}, 19),
    "topk_largest": ("TopK", [("x", r(3, 6), "in"), ("k", i64(4), "const")], 2, {"axis": 1}, 21),
    "topk_smallest_axis0": ("TopK", [("x", r(5, 2, 3), "in"), ("k", i64(2), "const")], 2,
                            {"axis": 0, "largest": 0}, 21),
    "gather_nd_batch": ("GatherND", [("x", r(2, 3, 4, 2), "in"), ("i", i64([[1, -1], [0, 2]], [[2, 0], [1, 1]]),
                                                                   "const")], 1, {"batch_dims": 1}, 21),
    "gather_nd": ("GatherND", [("x", r(3, 4), "in"), ("i", i64([2], [0], [-1]), "const")], 1, {}, 21),
    "scatter_nd": ("ScatterND", [("x", r(4, 3), "in"), ("i", i64([1], [3]), "const"), ("u", r(2, 3), "in")], 1,
                   {}, 21),
    # one slice of axis 0 replaced (PyTorch's slice assignment): a run, negative indices, one index; and
    # indices out of order, which stay a scatter
    "scatter_nd_run": ("ScatterND", [("x", r(4, 3), "in"), ("i", i64([1], [2]), "const"), ("u", r(2, 3), "in")], 1,
                       {}, 21),
    "scatter_nd_run_negative": ("ScatterND", [("x", r(5, 2, 3), "in"), ("i", i64([-3], [-2], [-1]), "const"),
                                              ("u", r(3, 2, 3), "in")], 1, {}, 21),
    "scatter_nd_one": ("ScatterND", [("x", r(3, 2), "in"), ("i", i64([0]), "const"), ("u", r(1, 2), "in")], 1, {}, 21),
    "scatter_nd_unordered": ("ScatterND", [("x", r(4, 3), "in"), ("i", i64([3], [0]), "const"), ("u", r(2, 3), "in")],
                             1, {}, 21),
    "scatter_nd_add": ("ScatterND", [("x", r(2, 3, 2), "in"), ("i", i64([0, 1], [1, 2], [0, 1]), "const"),
                                     ("u", r(3, 2), "in")], 1, {"reduction": "add"}, 21),
    "scatter_elements": ("ScatterElements", [("x", r(3, 4), "in"), ("i", i64([2, 0], [1, 3]), "const"),
                                             ("u", r(2, 2), "in")], 1, {"axis": 1}, 21),
    "scatter_elements_add": ("ScatterElements", [("x", r(3, 2), "in"), ("i", i64([2, 0], [2, -3]), "const"),
                                                 ("u", r(2, 2), "in")], 1, {"axis": 0, "reduction": "add"}, 21),
    "group_norm_21": ("GroupNormalization", [("x", r(2, 4, 3), "in"), ("s", r(4), "in"), ("b", r(4), "in")], 1,
                      {"num_groups": 2}, 21),
    "group_norm_4d": ("GroupNormalization", [("x", r(2, 6, 2, 2), "in"), ("s", r(6), "in"), ("b", r(6), "in")], 1,
                      {"num_groups": 3, "epsilon": 1e-3}, 21),
    "rms_norm_23": ("RMSNormalization", [("x", r(2, 3, 4), "in"), ("s", r(3, 4), "in")], 1, {"axis": 1}, 23),
    "attention_4d_causal_mask": ("Attention", [("q", r(2, 2, 3, 4), "in"), ("k", r(2, 2, 5, 4), "in"),
                                               ("v", r(2, 2, 5, 3), "in"), ("m", r(3, 5), "in")], 1,
                                 {"is_causal": 1}, 23),
    "attention_3d_gqa_past": ("Attention", [("q", r(2, 3, 8), "in"), ("k", r(2, 3, 4), "in"), ("v", r(2, 3, 6), "in"),
                                            ("m", None, ""), ("pk", r(2, 1, 2, 4), "in"), ("pv", r(2, 1, 2, 6), "in")],
                              3, {"q_num_heads": 2, "kv_num_heads": 1, "scale": 0.3, "softcap": 2.0}, 23),
    "attention_bool_mask": ("Attention", [("q", r(1, 2, 2, 4), "in"), ("k", r(1, 2, 3, 4), "in"),
                                          ("v", r(1, 2, 3, 4), "in"),
                                          ("m", np.array([[True, False, True], [False, False, False]]), "const")],
                            1, {}, 23),
    "argmax_last_ties": ("ArgMax", [("x", ties(3, 5), "in")], 1, {"axis": 1, "select_last_index": 1}, 21),
    "argmin_first_ties": ("ArgMin", [("x", ties(4, 3), "in")], 1, {"axis": 0, "keepdims": 0}, 21),
    "mod_fmod": ("Mod", [("a", r(3, 4) * 5, "in"), ("b", np.abs(r(4)) + 0.5, "in")], 1, {"fmod": 1}, 21),
    "mod_python_int": ("Mod", [("a", i64(-7, -3, 0, 3, 7, 9), "in"), ("b", i64(3, -2, 5, -4, 2, 9), "in")], 1, {}, 21),
    "einsum_diagonal": ("Einsum", [("x", r(3, 3), "in")], 1, {"equation": "ii->i"}, 21),
    "einsum_trace_batch": ("Einsum", [("x", r(2, 3, 3), "in"), ("y", r(2, 4), "in")], 1,
                           {"equation": "bii,bj->bj"}, 21),
    "einsum_ellipsis_implicit": ("Einsum", [("x", r(2, 3, 4), "in"), ("y", r(4, 5), "in")], 1,
                                 {"equation": "...ij,jk"}, 21),
}
NOT_DIFFERENTIABLE = {"argmax_last_ties", "argmin_first_ties", "mod_python_int"}


def build(case, dtype):
    """The case's one-node model with float arrays in `dtype`, and its graph-input arrays."""
    op, inputs, n_out, attrs, opset = CASES[case]

    def cast(v):
        return v.astype(dtype) if v.dtype.kind == "f" else v
    graph_in = [(name, cast(v)) for name, v, role in inputs if role == "in"]
    consts = [numpy_helper.from_array(cast(v) if v.dtype != np.float32 else v, name)
              for name, v, role in inputs if role == "const"]
    outs = [f"out{i}" for i in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, [name if v is not None else "" for name, v, _ in inputs], outs, **attrs)], case,
        [helper.make_tensor_value_info(name, ELEM[v.dtype], v.shape) for name, v in graph_in],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.output}
    for out in model.graph.output:         # the output types ONNX Runtime wants declared
        out.type.CopyFrom(inferred[out.name].type)
        if not out.type.tensor_type.elem_type:    # not inferred through a function op: the input's type
            out.type.tensor_type.elem_type = ELEM[graph_in[0][1].dtype]
    return model, graph_in


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_match_onnxruntime(case):
    model, graph_in = build(case, np.float32)
    expected = ort_run(model, dict(graph_in))
    f = gc.load_onnx(model)
    arrays = [v for _, v in graph_in]
    assert_outputs_match(gc.compile(lambda *xs: f(*xs), *arrays, provider="cpu")(*arrays), expected, 2e-5)


@pytest.mark.parametrize("case", sorted(set(CASES) - NOT_DIFFERENTIABLE))
def test_gradients_to_second_order(case):
    model, graph_in = build(case, np.float64)
    f = gc.load_onnx(model)
    arrays = [v for _, v in graph_in]
    for order in (1, 2):
        check_grad(sine_loss(f), arrays, order=order)


@pytest.mark.parametrize("op, inputs", [("NonZero", ["x"]), ("Unique", ["x"]),
                                        ("NonMaxSuppression", ["x", "s"]), ("Compress", ["x", "c"])])
def test_data_dependent_shapes_are_refused_by_name(op, inputs):
    types = {"x": TensorProto.FLOAT, "s": TensorProto.FLOAT, "c": TensorProto.BOOL}
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"])], op,
                              [helper.make_tensor_value_info(i, types[i], [4]) for i in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    f = gc.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    with pytest.raises(gc.UnsupportedError, match=f"{op} has an output whose shape depends on the values"):
        gc.compile(lambda *xs: f(*xs), *f.input_specs(), provider="cpu")


def test_non_zero_and_compress_on_constants_run_at_import():
    nodes = [helper.make_node("NonZero", ["c"], ["nz"]),
             helper.make_node("Compress", ["x", "keep"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("nz", TensorProto.INT64, None),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([[0, 2], [1, 0]], np.float32), "c"),
                               numpy_helper.from_array(np.array([True, False, True]), "keep")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    f = gc.load_onnx(model)
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    x = r(4, 3).astype(np.float32)
    nz, y = cf(x)
    np.testing.assert_array_equal(nz, [[0, 1], [1, 0]])
    np.testing.assert_array_equal(y, x[:, [0, 2]])


@pytest.mark.parametrize("case, scatters", [("scatter_nd_run", False), ("scatter_nd_run_negative", False),
                                            ("scatter_nd", False), ("scatter_nd_unordered", True)])
def test_a_scatter_of_one_slice_imports_as_a_slice_assignment(case, scatters):
    # PyTorch's exporter writes x[:, 1:] = y as a ScatterND into the axis moved first: two scatters
    # and a select over the whole tensor (a video transformer's attention: 1.4 s of a 12 s step)
    # where the slice's placement and a select along one axis do
    from gcompile.frontend.trace import trace
    model, graph_in = build(case, np.float32)
    f = gc.load_onnx(model)
    ops = {node.op for node in trace(lambda *xs: f(*xs), [v for _, v in graph_in]).graph.nodes.values()}
    assert ("scatter_add" in ops) == scatters, ops


def test_a_slice_assignment_whose_indices_exceed_the_fold_bound_still_imports_as_one():
    # the exporter computes the indices from the shape (a Range, sliced): past the import-time fold
    # bound they are left to run time, and the translator computes them itself
    from gcompile.frontend.trace import trace
    from gcompile.passes.fold import MAX_FOLD_ELEMENTS
    rows = MAX_FOLD_ELEMENTS + 100
    nodes = [helper.make_node("Range", ["zero", "rows", "one"], ["all"]),
             helper.make_node("Slice", ["all", "one_1d", "rows_1d"], ["tail"]),
             helper.make_node("Unsqueeze", ["tail", "last"], ["idx"]),
             helper.make_node("ScatterND", ["x", "idx", "u"], ["out0"])]
    consts = [numpy_helper.from_array(np.asarray(v, np.int64), name) for name, v in
              [("zero", 0), ("rows", rows), ("one", 1), ("one_1d", [1]), ("rows_1d", [rows]), ("last", [1])]]
    x, u = r(rows, 2), r(rows - 1, 2)
    model = helper.make_model(helper.make_graph(
        nodes, "assign", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, x.shape),
                          helper.make_tensor_value_info("u", TensorProto.DOUBLE, u.shape)],
        [helper.make_tensor_value_info("out0", TensorProto.DOUBLE, x.shape)], consts),
        opset_imports=[helper.make_opsetid("", 21)])
    f = gc.load_onnx(model)
    assert "scatter_add" not in {node.op for node in trace(lambda a, b: f(a, b), [x, u]).graph.nodes.values()}
    expected = ort_run(model, {"x": x, "u": u})
    assert_outputs_match(gc.compile(lambda a, b: f(a, b), x, u, provider="cpu")(x, u), expected, 1e-12)
    for order in (1, 2):
        check_grad(sine_loss(f), [x, u], order=order)
