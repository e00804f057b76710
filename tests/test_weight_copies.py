"""Copies of a model's weights: gc.load_onnx keeps a file's initializers once, as `params` (not
also in the ModelProto it holds), leaves a caller's ModelProto as it was, and a training step that
takes the weights as inputs compiles to a model holding none of them."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import gcompile as gc
import gcompile.functions as F

RNG = np.random.default_rng(0)


def _model() -> onnx.ModelProto:
    w = RNG.standard_normal((64, 32)).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_a_loaded_files_weights_are_kept_once_as_params(tmp_path):
    proto = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    for source in (str(path), proto.SerializeToString()):
        model = gc.load_onnx(source)
        assert len(model.proto.graph.initializer) == 0
        np.testing.assert_array_equal(model.params["w"], numpy_helper.to_array(proto.graph.initializer[0]))
    given = gc.load_onnx(proto)                    # the caller's ModelProto: left as it was
    assert given.proto is proto and len(proto.graph.initializer) == 2
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    for m in (gc.load_onnx(str(path)), given):
        y = gc.compile(lambda x, m=m: m(x), x, provider="cpu")(x)
        np.testing.assert_allclose(y, x @ m.params["w"] + m.params["b"], rtol=1e-5, atol=1e-5)


def test_a_step_taking_the_weights_as_inputs_compiles_without_them(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    model = gc.load_onnx(str(path))
    names = list(model.params)

    def step(x, *ps):
        loss = F.sum(model(x, params=dict(zip(names, ps))) ** 2)
        return loss, gc.grad(loss, list(ps))
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    cf = gc.compile(step, x, *model.params.values(), provider="cpu")
    assert sum(t.ByteSize() for t in cf.model.graph.initializer) < 1024
    loss, grads = cf(x, *model.params.values())
    h = x @ model.params["w"] + model.params["b"]
    np.testing.assert_allclose(grads[0], 2 * x.T @ h, rtol=1e-4)
