"""`gcompile grad` never replaces or hides a name the model already uses: a generated input or
output (target, v_<name>, loss, grad_<name>, hvp_<name>) whose name is taken, by the model or by
another generated name, is refused with an error naming both."""
import re

import pytest
from onnx import TensorProto, helper

from gcompile import GcompileError
from gcompile.importer.grad import gradient_model

from .helpers import model


def test_a_model_output_named_like_a_gradient_is_refused_naming_both():
    """It used to give the gradient the name grad_x_1, beside the model's own grad_x = -x."""
    m = model([helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Neg", ["x"], ["grad_x"])],
              [("x", [3])], [("y", [3]), ("grad_x", [3])])
    with pytest.raises(GcompileError, match=r"the gradient of 'x' would be named 'grad_x', a name already used for "
                                            r"output 'grad_x'; rename output 'grad_x' in the model"):
        gradient_model(m, "x", of="y")


@pytest.mark.parametrize("taken, role", [
    ("v_x", "the direction input for 'x' (v_<name>)"), ("loss", "the loss output"),
    ("hvp_x", "the Hessian-vector product for 'x' (hvp_<name>)"),
])
def test_second_order_and_loss_names_that_clash_are_refused_naming_the_clash(taken, role):
    """With --order 2 a clash used to be reported as one of --target."""
    m = model([helper.make_node("Mul", ["x", "x"], ["y"]), helper.make_node("Neg", ["x"], [taken])],
              [("x", [3])], [("y", [3]), (taken, [3])])
    with pytest.raises(GcompileError, match=rf"{re.escape(role)} would be named '{taken}', a name already used for "
                                            rf"output '{taken}'; rename output '{taken}'"):
        gradient_model(m, "x", of="y", loss="sum", order=2)


def test_a_target_that_clashes_is_refused_whether_default_or_given():
    m = model([helper.make_node("Add", ["x", "target"], ["y"])], [("x", [2]), ("target", [2])], [("y", [2])])
    for target in (None, "target"):
        with pytest.raises(GcompileError, match=r"the loss target \(--target\) would be named 'target', a name "
                                                r"already used for input 'target'; choose another name with --target"):
            gradient_model(m, "x", loss="mse", target=target)
    with pytest.raises(GcompileError, match=r"the gradient of 'x' would be named 'grad_x', a name already used for "
                                            r"the loss target \(--target\); choose another name with --target"):
        gradient_model(m, "x", loss="mse", target="grad_x")
    proto = gradient_model(m, "x", loss="mse", target="t")
    assert [i.name for i in proto.graph.input] == ["x", "target", "t"]
    labels = model([helper.make_node("Identity", ["x"], ["y"])], [("x", [2, 3])], [("y", [2, 3])])
    proto = gradient_model(labels, "x", loss="cross_entropy", target="labels")
    assert [(i.name, i.type.tensor_type.elem_type) for i in proto.graph.input] == [
        ("x", TensorProto.FLOAT), ("labels", TensorProto.INT64)]
    assert [o.name for o in proto.graph.output] == ["y", "loss", "grad_x"]
