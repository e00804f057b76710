"""gc.load_onnx: round trips, params replacement with gradients to second order, symbolic dims
through shape subgraphs, If, and the errors (unsupported ops, external data outside the folder)."""
import math
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad

from .helpers import mlp_model, model

RNG = np.random.default_rng(0)


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_mlp_model_matches_numpy_and_keeps_batch_symbolic():
    m = mlp_model()
    f = gc.load_onnx(m)
    assert f.input_names == ["x"] and f.output_names == ["y"] and set(f.params) == {"W", "b", "scale", "shift", "W2"}
    assert f.input_specs() == [gc.spec(("N", 4))]
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    p = f.params
    for n in (2, 5):
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        h = 0.7 * x @ p["W"].T + p["b"]
        hn = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * p["scale"] + p["shift"]
        g = 0.5 * hn * (1 + np.vectorize(math.erf)(hn / np.sqrt(2)))
        np.testing.assert_allclose(cf(x), _softmax(g @ p["W2"]), rtol=1e-5, atol=1e-6)


def test_round_trip_of_a_gcompile_model_with_its_gradients():
    w = RNG.standard_normal((5, 3)).astype(np.float32)

    def fn(x):
        y = F.tanh(F.reshape(x, (-1, 5)) @ w)
        loss = F.mean(F.softmax(y) ** 2)
        g, = gc.grad(loss, [x])
        gg, = gc.grad(F.sum(g * g), [x])
        return y, g, gg

    original = gc.compile(fn, gc.spec(("batch", 10)), provider="cpu")
    f = gc.load_onnx(original.model)
    assert f.input_specs() == [gc.spec(("batch", 10))]
    again = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    x = RNG.standard_normal((3, 10)).astype(np.float32)
    for a, b in zip(original(x), again(x)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


def test_params_replacement_gradients_to_second_order():
    f = gc.load_onnx(mlp_model(np.float64))
    weights = np.random.default_rng(1).standard_normal((3, 3))

    def fn(x, w, scale, w2):
        y = f(x, params={"W": w, "scale": scale, "W2": w2})
        return F.sum(y * weights)
    p = f.params
    x = RNG.standard_normal((3, 4))
    for order in (1, 2):   # (a float64 model with exact gelu: no float64 Erf kernel in ONNX Runtime's CPU provider)
        check_grad(fn, [x, p["W"], p["scale"], p["W2"]], order=order, lowered=False)


def test_params_replacement_changes_the_result_and_is_checked():
    f = gc.load_onnx(mlp_model())
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    w2 = np.zeros((5, 3), np.float32)
    cf = gc.compile(lambda x, w2: f(x, params={"W2": w2}), x, w2, provider="cpu")
    np.testing.assert_allclose(cf(x, w2), np.full((2, 3), 1 / 3), rtol=1e-6)   # zero logits: uniform softmax
    with pytest.raises(gc.InputError, match="not initializers"):
        trace(lambda x: f(x, params={"nope": x}), [x])
    with pytest.raises(gc.InputError, match=r"expected shape \(5, 3\)"):
        trace(lambda x, w: f(x, params={"W2": w}), [x, np.zeros((3, 5), np.float32)])
    with pytest.raises(gc.InputError, match="expected dtype float32"):
        trace(lambda x: f(x), [x.astype(np.float64)])


def _shape_subgraph_model():
    """y = Reshape(x, [Shape(x)[0], -1]) @ W * float(Shape(x)[0]) + ConstantOfShape([Shape(x)[0], 2])."""
    w = RNG.standard_normal((12, 2)).astype(np.float32)

    def i64(name, v):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(v, np.int64)))

    nodes = [i64("zero", 0), i64("axes", [0]), i64("minus1", [-1]), i64("two", [2]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("MatMul", ["flat", "W"], ["m"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),      # a dim as run-time data
             helper.make_node("Mul", ["m", "nf"], ["scaled"]),
             helper.make_node("Concat", ["n1", "two"], ["fill_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["fill_shape"], ["ones"],
                              value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("Add", ["scaled", "ones"], ["y"])]
    return model(nodes, [("x", ["batch", 3, 4])], [("y", ["batch", 2])], [("W", w)]), w


def test_symbolic_batch_through_shape_subgraphs():
    m, w = _shape_subgraph_model()
    f = gc.load_onnx(m)
    traced = trace(lambda x: f(x), f.input_specs())
    reshapes = [n for n in traced.graph.nodes.values() if n.op == "reshape"]
    assert reshapes[0].attrs["shape"] == ("batch", 12)
    assert traced.graph.type_of(traced.graph.outputs[0]).shape == ("batch", 2)
    assert not any(n.op in ("gather", "concat") for n in traced.graph.nodes.values())   # evaluated at import
    cf = gc.compile(lambda x: f(x), *f.input_specs(), provider="cpu")
    for n in (1, 4):
        x = RNG.standard_normal((n, 3, 4)).astype(np.float32)
        np.testing.assert_allclose(cf(x), x.reshape(n, -1) @ w * n + 1, rtol=1e-5, atol=1e-5)


def test_static_shape_subgraphs_fold_to_constants():
    m, w = _shape_subgraph_model()
    f = gc.load_onnx(m)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    traced = trace(lambda x: f(x), [x])
    assert {n.op for n in traced.graph.nodes.values()} <= {"input", "constant", "reshape", "matmul", "mul", "add"}
    np.testing.assert_allclose(evaluate(traced.graph, [x])[0], x.reshape(2, -1) @ w * 2 + 1, rtol=1e-5)


def _if_model(cond_value):
    def branch(op, out):
        return helper.make_graph([helper.make_node(op, ["x"], [out])], op,
                                 [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])])

    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch("Exp", "e"), else_branch=branch("Neg", "n"))]
    inits = [] if cond_value is None else [("c", np.asarray(cond_value))]
    inputs = [("x", [2])] + ([("c", [], TensorProto.BOOL)] if cond_value is None else [])
    return model(nodes, inputs, [("y", [2])], inits)


def test_if_with_a_constant_condition_is_inlined_and_one_given_at_run_time_is_an_if():
    x = np.array([0.5, -1.0], np.float32)
    for cond, expected in ((True, np.exp(x)), (False, -x)):
        f = gc.load_onnx(_if_model(cond))
        np.testing.assert_allclose(gc.compile(f, x, provider="cpu")(x), expected, rtol=1e-6)
    f = gc.load_onnx(_if_model(None))   # a condition given at run time: both branches, as an ONNX If
    cf = gc.compile(lambda x, c: f(x, c), x, np.asarray(True), provider="cpu")
    assert "If" in {n.op_type for n in cf.model.graph.node}
    for cond, expected in ((True, np.exp(x)), (False, -x)):
        np.testing.assert_allclose(cf(x, np.asarray(cond)), expected, rtol=1e-6)


def test_unsupported_ops_name_op_domain_and_opset():
    """A refusal names the op, its domain, opset and node, and what to do instead where there is something."""
    x = np.ones((2,), np.float32)
    m = model([helper.make_node("Frobnicate", ["x"], ["y"])], [("x", [2])], [("y", [2])], opset=19)
    with pytest.raises(gc.UnsupportedError, match=r"ai\.onnx::Frobnicate \(opset 19\) in node 'y'"):
        trace(lambda x: gc.load_onnx(m)(x), [x])
    m = model([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")], [("x", [2])], [("y", [2])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(gc.UnsupportedError, match=r"com\.microsoft::Gelu \(opset 1\).*ai\.onnx domain only"):
        trace(lambda x: gc.load_onnx(m)(x), [x])
    m = model([helper.make_node("Multinomial", ["x"], ["y"])], [("x", [1, 2])], [("y", [1, 1])])
    with pytest.raises(gc.UnsupportedError, match=r"ai\.onnx::Multinomial .*feed the samples as an input"):
        trace(lambda x: gc.load_onnx(m)(x), [x.reshape(1, 2)])
    m = model([helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic")],
              [("x", [1, 1, 2, 2, 2]), ("g", [1, 1, 1, 1, 3])], [("y", [1, 1, 1, 1, 1])])
    with pytest.raises(gc.UnsupportedError, match=r"\(GridSample, opset 20\): mode 'cubic' on a rank-5 input"):
        trace(lambda x, g: gc.load_onnx(m)(x, g), [np.ones((1, 1, 2, 2, 2), np.float32),
                                                    np.zeros((1, 1, 1, 1, 3), np.float32)])


def _external_model(folder):
    m = model([helper.make_node("MatMul", ["x", "W"], ["y"])], [("x", [1, 64])], [("y", [1, 64])],
              [("W", np.eye(64, dtype=np.float32) * 2)])
    path = os.path.join(folder, "m.onnx")
    onnx.save_model(m, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    return path


def _set_location(path, location):
    m = onnx.load(path, load_external_data=False)
    for entry in m.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save_model(m, path)


def test_external_data_loads_from_the_model_folder(tmp_path):
    f = gc.load_onnx(_external_model(str(tmp_path)))
    np.testing.assert_array_equal(f.params["W"], np.eye(64, dtype=np.float32) * 2)
    with pytest.raises(gc.GcompileError, match="pass its path"):
        gc.load_onnx(onnx.load(str(tmp_path / "m.onnx"), load_external_data=False))


@pytest.mark.parametrize("escape", ["dotdot", "absolute", "symlink"])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, escape):
    inner = tmp_path / "model"
    inner.mkdir()
    path = _external_model(str(inner))
    outside = tmp_path / "secret.bin"
    os.replace(inner / "w.bin", outside)
    if escape == "dotdot":
        _set_location(path, "../secret.bin")
    elif escape == "absolute":
        _set_location(path, str(outside))
    else:
        os.symlink(outside, inner / "w.bin")
    with pytest.raises(gc.GcompileError, match="inside the model.s folder"):
        gc.load_onnx(path)


def test_outside_a_trace_and_bad_files(tmp_path):
    f = gc.load_onnx(mlp_model())
    with pytest.raises(gc.TraceError, match="inside a function being traced"):
        f(np.ones((1, 4), np.float32))
    with pytest.raises(gc.GcompileError, match="no such ONNX file"):
        gc.load_onnx(str(tmp_path / "missing.onnx"))
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(gc.GcompileError, match="not a valid ONNX model"):
        gc.load_onnx(str(tmp_path / "bad.onnx"))
