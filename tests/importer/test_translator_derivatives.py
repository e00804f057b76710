"""Every elementwise translator's derivative at edge points, measured on the imported function itself.

An op composed on import from pieces with kinks of their own (relu plus a part written on
min(x, 0), clip's inclusive bounds) can be right in value everywhere and wrong in derivative at
the points where its pieces meet, though the op itself is smooth there. So each elementwise
translator of a float first operand (its default attributes, the other operands fixed) is
evaluated in float64 at points where such pieces usually meet (0, ±0.5, ±1, ±2.5, ±3, ±6) and a
step either side: wherever the two one-sided difference quotients agree, and agree with those of a
step ten times as long (the function is differentiable there, not a jump that both sides see
alike), and the values are finite, the gradient gcompile traces through the import must be the
central difference. Points where the sides disagree are kinks, whose
convention test_activation_kinks.py states row by row."""
import numpy as np
import onnx
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.importer.table import TRANSLATORS
from gcompile.ir.evaluate import evaluate

from .helpers import single_node

POINTS = np.array([-6, -3, -2.5, -1, -0.5, 0, 0.5, 1, 2.5, 3, 6], np.float64)
STEP = 1e-6
# the operands after the first: fixed values (ONNX gives them no default)
OTHERS = {"PRelu": [np.float64(0.25)], "Clip": [np.float64(-1.0), np.float64(1.0)], "Pow": [np.float64(3.0)]}
# ops whose other operands are tensors of the first one's kind: a second operand of 1.5 (Sum, Mean,
# Max and Min take any count; Max/Min at 1.5 tie at no point above)
BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Mod"}


def _float_elementwise() -> list[str]:
    ops = []
    for op, t in sorted(TRANSLATORS.items()):
        if not t.fn.__module__.endswith("translators.elementwise") or op == "Where":
            continue
        schema = onnx.defs.get_schema(op)
        first = schema.inputs[0].type_str
        kinds = next(c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == first) \
            if not first.startswith("tensor(") else [first]
        if "tensor(double)" in kinds and "tensor(double)" in _output_kinds(schema):
            ops.append(op)
    return ops


def _output_kinds(schema) -> list[str]:
    out = schema.outputs[0].type_str
    return next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == out), [out])


OPS = _float_elementwise()


def test_the_category_holds_the_activations_and_arithmetic():
    assert {"Celu", "Elu", "Selu", "HardSwish", "HardSigmoid", "PRelu", "Softsign", "Add", "Pow", "Clip"} <= set(OPS)


@pytest.mark.parametrize("op", OPS)
def test_the_derivative_at_edge_points_is_the_central_difference_where_the_sides_agree(op):
    others = OTHERS.get(op) or ([np.float64(1.5)] if op in BINARY else [])
    attrs = {"fmod": 1} if op == "Mod" else {}
    model, _ = single_node(op, [("x", POINTS), *((f"c{i}", v, "const") for i, v in enumerate(others))],
                           opset=max(22, onnx.defs.get_schema(op).since_version), **attrs)
    f = gc.load_onnx(model)

    def probe(x):
        return [*(f(x + k * STEP) for k in (-10, -1, 0, 1, 10)), gc.grad(F.sum(f(x)), [x])[0]]
    *values, slope = evaluate(trace(probe, [POINTS]).graph, [POINTS])
    far_below, below, at, above, far_above = values
    with np.errstate(invalid="ignore"):      # inf - inf where a point is a pole: not finite, left out below
        left, right, wide = (at - below) / STEP, (above - at) / STEP, (far_above - far_below) / (20 * STEP)

    def close(a, b):
        return np.abs(a - b) <= 1e-4 * (1 + np.abs(a))
    finite = np.all(np.isfinite(values), axis=0)
    smooth = finite & close(left, right) & close((left + right) / 2, wide)
    assert smooth.any(), f"{op}: no edge point where it is differentiable"
    np.testing.assert_allclose(slope[smooth], ((left + right) / 2)[smooth], rtol=1e-4, atol=1e-4,
                               err_msg=f"{op} at {POINTS[smooth]}")
