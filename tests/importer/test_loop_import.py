"""ONNX Scan and Loop through gc.load_onnx: hand-built models against onnxruntime's kernels (scan axes and
directions, outer-scope reads, the iteration number, the unrolled fallback), loops with a run-time trip
count or a data-dependent stop and If on data (against onnxruntime, gradients against finite differences),
gradients through an imported loop, and the refusals."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gcompile as gc
import gcompile.functions as F
from gcompile.testing import check_grad

from .helpers import model

FLOAT = TensorProto.FLOAT


def _ort(m, feeds):
    m.ir_version = 10   # what the installed onnxruntime reads
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _compiled(m, feeds):
    """The imported model compiled for the portable target, which keeps loops as loops (ONNX
    Runtime's CPU target unrolls short ones)."""
    f = gc.load_onnx(m)
    cf = gc.compile(lambda *xs: f(*xs), *[feeds[n] for n in f.input_names], provider="cpu", target="portable")
    return cf, cf(*[feeds[n] for n in f.input_names])


def _info(name, elem=FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _float(dtype):
    return TensorProto.DOUBLE if dtype == np.float64 else FLOAT


def scan_model(in_axes=(0, 1), in_dirs=(0, 1), out_axes=(0, 1), out_dirs=(1, 0), dtype=np.float32):
    """Scan over a (T, 3) and a (3, T) input with an accumulated state and two scan outputs; the body
    reads W from the outer scope (an initializer) and V (computed outside the loop)."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["s_in", "W"], ["sw"]),
         helper.make_node("Add", ["sw", "a"], ["t"]),
         helper.make_node("Mul", ["b", "V"], ["bv"]),
         helper.make_node("Tanh", ["t"], ["th"]),
         helper.make_node("Add", ["th", "bv"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "a"], ["y1"]),
         helper.make_node("Sub", ["s_out", "b"], ["y2"])], "body",
        [_info(n, _float(dtype)) for n in ("s_in", "a", "b")], [_info(n, _float(dtype)) for n in ("s_out", "y1", "y2")])
    nodes = [helper.make_node("Relu", ["v_in"], ["V"]),
             helper.make_node("Scan", ["s0", "A", "B"], ["s", "Y1", "Y2"], body=body, num_scan_inputs=2,
                              scan_input_axes=list(in_axes), scan_input_directions=list(in_dirs),
                              scan_output_axes=list(out_axes), scan_output_directions=list(out_dirs))]
    rng = np.random.default_rng(0)
    steps = 5
    feeds = {"s0": rng.standard_normal(3).astype(dtype), "v_in": rng.standard_normal(3).astype(dtype),
             "A": rng.standard_normal((steps, 3) if in_axes[0] == 0 else (3, steps)).astype(dtype),
             "B": rng.standard_normal((steps, 3) if in_axes[1] == 0 else (3, steps)).astype(dtype)}
    m = model(nodes, [(k, v.shape) for k, v in feeds.items()], [("s", None), ("Y1", None), ("Y2", None)],
              [("W", (rng.standard_normal((3, 3)) * 0.5).astype(dtype))], opset=21, dtype=dtype)
    return m, feeds


@pytest.mark.parametrize("axes, dirs", [((0, 0, 0, 0), (0, 0, 0, 0)), ((0, 1, 0, 1), (0, 1, 1, 0)),
                                        ((1, 0, 1, 0), (1, 1, 1, 1)), ((0, -1, -1, 0), (1, 0, 0, 1))])
def test_scan_matches_onnxruntime(axes, dirs):
    m, feeds = scan_model(axes[:2], dirs[:2], axes[2:], dirs[2:])
    cf, got = _compiled(m, feeds)
    for g, e in zip(got, _ort(m, feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert "Scan" in {n.op_type for n in cf.model.graph.node}


def test_gradients_through_an_imported_scan():
    m, feeds = scan_model(dtype=np.float64)
    f = gc.load_onnx(m)
    inputs = [feeds[n] for n in f.input_names] + [f.params["W"]]

    def fn(*args):
        return f(*args[:-1], params={"W": args[-1]})
    for order in (1, 2):
        check_grad(fn, inputs, order=order)


def loop_model(trips=4, use_iteration="gather", cond_out="cond_in", dtype=np.float32):
    """Loop over x_i = X[iteration]: s += x_i * s_scale; scan output s. The iteration number feeds a
    Gather (a run-time index is fine) or a Slice (its bounds must be known: the loop is unrolled)."""
    if use_iteration == "gather":
        pick = [helper.make_node("Gather", ["X", "i"], ["x_i"], axis=0)]
    else:
        pick = [helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
                helper.make_node("Add", ["start", "one"], ["end"]),
                helper.make_node("Slice", ["X", "start", "end"], ["x_row"]),
                helper.make_node("Squeeze", ["x_row", "zero"], ["x_i"])]
    cond_nodes = [] if cond_out == "cond_in" else [helper.make_node("ReduceSum", ["s_new"], ["total"], keepdims=0),
                                                   helper.make_node("Less", ["total", "limit"], ["go"])]
    body = helper.make_graph(
        [*pick, helper.make_node("Mul", ["x_i", "scale"], ["xs"]), helper.make_node("Add", ["s", "xs"], ["s_new"]),
         *cond_nodes, helper.make_node("Identity", ["cond_in" if cond_out == "cond_in" else "go"], ["cond"]),
         helper.make_node("Identity", ["s_new"], ["y"])], "body",
        [_info("i", TensorProto.INT64, []), _info("cond_in", TensorProto.BOOL, []), _info("s", _float(dtype))],
        [_info("cond", TensorProto.BOOL, []), _info("s_new", _float(dtype)), _info("y", _float(dtype))])
    rng = np.random.default_rng(1)
    feeds = {"s0": rng.standard_normal(3).astype(dtype), "X": rng.standard_normal((6, 3)).astype(dtype),
             "scale": rng.standard_normal(3).astype(dtype)}
    m = model([helper.make_node("Loop", ["M", "", "s0"], ["s_final", "ys"], body=body)],
              [(k, v.shape) for k, v in feeds.items()], [("s_final", None), ("ys", None)],
              [("M", np.array(trips, np.int64)), ("zero", np.array([0], np.int64)), ("one", np.array([1], np.int64)),
               ("limit", np.array(1e9, dtype))], opset=21, dtype=dtype)
    return m, feeds


@pytest.mark.parametrize("trips", [4, 0])
@pytest.mark.parametrize("use_iteration", ["gather", "slice"])
def test_loop_with_a_static_trip_count_matches_onnxruntime(trips, use_iteration):
    m, feeds = loop_model(trips, use_iteration)
    cf, got = _compiled(m, feeds)
    for g, e in zip(got, _ort(m, feeds)):
        if e.size == 0:   # onnxruntime gives the stacked outputs of zero iterations shape (0,)
            assert g.shape == (0, 3)
            continue
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    loops = {n.op_type for n in cf.model.graph.node} & {"Scan", "Loop"}
    assert bool(loops) == (use_iteration == "gather" and trips > 0)   # a Slice by the iteration: unrolled


def test_loop_gradient():
    m, feeds = loop_model(5, dtype=np.float64)
    f = gc.load_onnx(m)
    check_grad(lambda *xs: f(*xs), [feeds[n] for n in f.input_names], order=2)


def run_time_loop_model(dtype=np.float64, with_count=True, with_condition=True):
    """Loop(M, cond) over s <- tanh(s * w) + s * scale + X[i] while sum(s) < limit, at most M times
    (M a graph input: known only at run time); scan outputs s_new and s * s."""
    cond_nodes = ([helper.make_node("ReduceSum", ["s_new"], ["total"], keepdims=0),
                   helper.make_node("Less", ["total", "limit"], ["go"])] if with_condition
                  else [helper.make_node("Identity", ["cond_in"], ["go"])])
    body = helper.make_graph(
        [helper.make_node("Mul", ["s", "w"], ["sw"]), helper.make_node("Tanh", ["sw"], ["t"]),
         helper.make_node("Mul", ["s", "scale"], ["ss"]), helper.make_node("Add", ["t", "ss"], ["u"]),
         helper.make_node("Gather", ["X", "i"], ["x_i"], axis=0), helper.make_node("Add", ["u", "x_i"], ["s_new"]),
         *cond_nodes, helper.make_node("Identity", ["go"], ["cond"]),
         helper.make_node("Mul", ["s", "s"], ["sq"])], "body",
        [_info("i", TensorProto.INT64, []), _info("cond_in", TensorProto.BOOL, []), _info("s", _float(dtype))],
        [_info("cond", TensorProto.BOOL, []), _info("s_new", _float(dtype)), _info("s_new", _float(dtype)),
         _info("sq", _float(dtype))])
    rng = np.random.default_rng(2)
    feeds = {"s0": (rng.standard_normal(3) * 0.3).astype(dtype), "w": rng.standard_normal(3).astype(dtype),
             "scale": (rng.standard_normal(3) * 0.3 + 0.8).astype(dtype),
             "X": (rng.standard_normal((20, 3)) * 0.3 + 0.4).astype(dtype)}
    if with_count:
        feeds["M"] = np.array(6, np.int64)
    m = model([helper.make_node("Loop", ["M" if with_count else "", "", "s0"], ["s_final", "ys", "sqs"], body=body)],
              [(k, v.shape) for k, v in feeds.items()], [("s_final", None), ("ys", None), ("sqs", None)],
              [("limit", np.array(3.0, dtype))], opset=21, dtype=dtype)
    if with_count:   # an int64 graph input
        next(i for i in m.graph.input if i.name == "M").type.tensor_type.elem_type = TensorProto.INT64
    return m, feeds


@pytest.mark.parametrize("with_count, with_condition", [(True, True), (True, False), (False, True)])
def test_loops_with_a_run_time_trip_count_or_a_data_dependent_stop_match_onnxruntime(with_count, with_condition):
    m, feeds = run_time_loop_model(np.float32, with_count, with_condition)
    f = gc.load_onnx(m)
    specs = [gc.spec(np.shape(feeds[n]), feeds[n].dtype) for n in f.input_names]
    cf = gc.compile(lambda *xs: f(*xs), *specs, provider="cpu")
    assert "Loop" in {n.op_type for n in cf.model.graph.node}
    counts = [0, 1, 2, 6, 20] if with_count else [None]
    lengths = set()
    for count in counts:
        run = {**feeds, **({"M": np.array(count, np.int64)} if with_count else {})}
        got = cf(*[run[n] for n in f.input_names])
        expected = _ort(m, run)
        lengths.add(len(got[1]))
        for g, e in zip(got, expected):
            if e.size == 0:   # onnxruntime gives the stacked outputs of zero iterations shape (0,)
                assert g.shape == (0, 3)
                continue
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert len(lengths) >= min(3, len(counts))   # the stacked outputs' length is the run-time number of steps


@pytest.mark.parametrize("with_count, with_condition", [(True, True), (True, False), (False, True)])
def test_gradients_through_a_run_time_loop_against_finite_differences(with_count, with_condition):
    m, feeds = run_time_loop_model(np.float64, with_count, with_condition)
    f = gc.load_onnx(m)

    def fn(*xs):   # the stacked outputs' length is only known at run time: check_grad weighs their sums
        s, ys, sqs = f(*xs)
        return s, F.sum(ys * F.tanh(ys)), F.sum(sqs)
    for count in ([0, 1, 6] if with_count else [None]):
        run = {**feeds, **({"M": np.array(count, np.int64)} if with_count else {})}
        for order in (1, 2):
            check_grad(fn, [run[n] for n in f.input_names], order=order)


def if_model(dtype=np.float64):
    """If(sum(x) > 0): tanh(x * w) + w, else x * x * w: the condition comes from data."""
    then = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["xw"]), helper.make_node("Tanh", ["xw"], ["t"]),
                              helper.make_node("Add", ["t", "w"], ["a"])], "then", [], [_info("a", _float(dtype))])
    other = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["xx"]),
                               helper.make_node("Mul", ["xx", "w"], ["b"])], "else", [], [_info("b", _float(dtype))])
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    return model(nodes, [("x", (4,)), ("w", (4,))], [("y", None)], [("zero", np.array(0, dtype))], opset=21,
                 dtype=dtype)


def test_an_if_on_data_imports_both_branches_and_differentiates():
    rng = np.random.default_rng(3)
    w = rng.standard_normal(4)
    f32 = if_model(np.float32)
    f = gc.load_onnx(f32)
    cf = gc.compile(lambda x, w: f(x, w), gc.spec((4,)), gc.spec((4,)), provider="cpu")
    assert "If" in {n.op_type for n in cf.model.graph.node}
    g = gc.load_onnx(if_model())
    for x in (np.abs(rng.standard_normal(4)), -np.abs(rng.standard_normal(4))):
        got = cf(x.astype(np.float32), w.astype(np.float32))
        np.testing.assert_allclose(got, _ort(f32, {"x": x.astype(np.float32), "w": w.astype(np.float32)})[0],
                                   rtol=1e-5, atol=1e-6)
        for order in (1, 2):
            check_grad(lambda x, w: g(x, w), [x, w], order=order, symbolic=False)


def test_a_loop_needing_its_run_time_iteration_number_at_import_time_is_refused():
    m, feeds = loop_model(4, use_iteration="slice")
    m.graph.node[0].input[0] = "n"
    m.graph.input.append(_info("n", TensorProto.INT64, []))
    f = gc.load_onnx(m)
    with pytest.raises(gc.UnsupportedError, match="needs its iteration number at import time"):
        gc.compile(lambda *xs: f(*xs), *[gc.spec(np.shape(feeds.get(n, 0)), "int64" if n == "n" else "float32")
                                        for n in f.input_names])


def test_a_loop_whose_carry_changes_shape_is_refused():
    body = helper.make_graph([helper.make_node("Concat", ["s", "s"], ["s2"], axis=0),
                              helper.make_node("Identity", ["c"], ["c2"])], "body",
                             [_info("i", TensorProto.INT64, []), _info("c", TensorProto.BOOL, []), _info("s")],
                             [_info("c2", TensorProto.BOOL, []), _info("s2")])
    m = model([helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body)], [("s0", [2])], [("s", None)],
              [("M", np.array(3, np.int64))], opset=21)
    with pytest.raises(gc.UnsupportedError, match="cannot be one loop step"):
        _compiled(m, {"s0": np.ones(2, np.float32)})
