"""`gcompile grad` never overwrites a name the model already uses: a generated input or output
(target, v_<name>, loss, grad_<name>, hvp_<name>) whose name is taken gets the first free suffix."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from gcompile import GcompileError
from gcompile.importer.grad import gradient_model

from .helpers import model


def _run(proto, feeds):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_a_model_output_named_like_a_gradient_keeps_its_value():
    # y = x*x, and the model's own output grad_x = -x: the gradient must not replace it
    m = model([helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Neg", ["x"], ["grad_x"])],
              [("x", [3])], [("y", [3]), ("grad_x", [3])])
    proto = gradient_model(m, "x", of="y")
    assert [o.name for o in proto.graph.output] == ["y", "grad_x", "grad_x_1"]
    x = np.array([1.0, -2.0, 3.0], np.float32)
    got = _run(proto, {"x": x})
    np.testing.assert_allclose(got["grad_x"], -x)
    np.testing.assert_allclose(got["grad_x_1"], 2 * x)


def test_second_order_and_loss_names_are_renamed_not_overwritten():
    # the model already takes v_x and returns loss, hvp_x and grad_x_1 (so the gradient becomes grad_x_2)
    nodes = [helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Sub", ["v_x", "x"], ["hvp_x"]),
             helper.make_node("Relu", ["x"], ["loss"]), helper.make_node("Neg", ["v_x"], ["grad_x_1"]),
             helper.make_node("Neg", ["x"], ["grad_x"])]
    m = model(nodes, [("x", [3]), ("v_x", [3])],
              [("y", [3]), ("hvp_x", [3]), ("loss", [3]), ("grad_x_1", [3]), ("grad_x", [3])])
    proto = gradient_model(m, "x", of="y", loss="sum", order=2)
    assert [i.name for i in proto.graph.input] == ["x", "v_x", "v_x_1"]
    assert [o.name for o in proto.graph.output] == ["y", "hvp_x", "loss", "grad_x_1", "grad_x", "loss_1", "grad_x_2",
                                                    "hvp_x_1"]
    x, v, u = (np.array(a, np.float32) for a in ([1, -2, 3], [0.5, 0.25, 2], [4, 5, 6]))
    got = _run(proto, {"x": x, "v_x": v, "v_x_1": u})
    np.testing.assert_allclose(got["hvp_x"], v - x)
    np.testing.assert_allclose(got["loss"], np.maximum(x, 0))
    np.testing.assert_allclose(got["grad_x_1"], -v)
    np.testing.assert_allclose(got["grad_x"], -x)
    np.testing.assert_allclose(got["loss_1"], np.sum(x * x))
    np.testing.assert_allclose(got["grad_x_2"], 2 * x)
    np.testing.assert_allclose(got["hvp_x_1"], 2 * u)


def test_default_target_is_renamed_but_an_explicit_clash_is_refused():
    m = model([helper.make_node("Add", ["x", "target"], ["y"])], [("x", [2]), ("target", [2])], [("y", [2])])
    proto = gradient_model(m, "x", loss="mse")
    assert [i.name for i in proto.graph.input] == ["x", "target", "target_1"]
    with pytest.raises(GcompileError, match=r"--target 'target' is already used by the model"):
        gradient_model(m, "x", loss="mse", target="target")
    labels = model([helper.make_node("Identity", ["x"], ["y"])], [("x", [2, 3])], [("y", [2, 3])])
    proto = gradient_model(labels, "x", loss="cross_entropy", target="labels")
    assert [(i.name, i.type.tensor_type.elem_type) for i in proto.graph.input] == [
        ("x", TensorProto.FLOAT), ("labels", TensorProto.INT64)]
