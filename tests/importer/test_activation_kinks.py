"""Imported activations at their kinks: the value and the derivative each imported op gives where its
derivative is not defined, on the float64 reference evaluator and on ONNX Runtime.

The expected derivative is PyTorch's (2.13) for the function the ONNX op comes from, the convention
docs/guide/gradients.md's table states for gcompile's own functions: at a kink PyTorch's backward
picks one side, the one its formula's condition selects (`x > 0 ? grad : grad * slope` for
leaky_relu, `x <= 0 ? alpha * exp(x) : 1` for elu, `-3 < x < 3` for hardsigmoid's slope), and never
an average of both sides. An ONNX op PyTorch has no function for (ThresholdedRelu, HardSigmoid with
other alpha and beta) follows the same rule as its PyTorch counterpart (threshold, hardsigmoid). A
translator that composes an op from pieces with kinks of their own (relu plus a part written on
min(x, 0)) adds the pieces' one-sided or tie-split derivatives, which is how Celu came to give 0.5
at 0 instead of 1: hence one row per kink of every imported activation, and a check that every
elementwise translator is listed here or among the smooth ones."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.importer.table import TRANSLATORS

from ..opcheck import check_values
from .helpers import single_node

SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def a(*values):
    return np.array(values, np.float64)


# case: (ONNX op, attributes, inputs (the first is x; the others are inputs of the node too), the
# expected output, then the expected derivative w.r.t. x at each point, PyTorch's function in the comment)
KINKS = {
    "relu at 0": ("Relu", {}, [a(0.0, -1, 1)], a(0, 0, 1), a(0, 0, 1)),                    # F.relu
    "leaky_relu at 0": ("LeakyRelu", {"alpha": 0.1}, [a(0.0)], a(0), a(0.1)),              # F.leaky_relu: the slope
    "prelu at 0": ("PRelu", {}, [a(0.0, -2), a(0.25)], a(0, -0.5), a(0.25, 0.25)),        # F.prelu: the weight
    "elu at 0": ("Elu", {"alpha": 0.7}, [a(0.0)], a(0), a(0.7)),                           # F.elu: alpha
    "selu at 0": ("Selu", {}, [a(0.0)], a(0), a(SELU_ALPHA * SELU_GAMMA)),                 # F.selu: scale * alpha
    "selu with alpha and gamma at 0": ("Selu", {"alpha": 2.0, "gamma": 1.5}, [a(0.0)], a(0), a(3.0)),
    "celu at 0": ("Celu", {}, [a(0.0)], a(0), a(1.0)),                                     # F.celu: 1
    "celu with alpha at 0": ("Celu", {"alpha": 2.0}, [a(0.0)], a(0), a(1.0)),
    "thresholded_relu at alpha": ("ThresholdedRelu", {"alpha": 1.0}, [a(1.0, 0)], a(0, 0), a(0, 0)),  # F.threshold
    # F.hardsigmoid: none at the bounds (alpha and beta are float32 attributes: these hit the bounds exactly)
    "hardsigmoid at its bounds": ("HardSigmoid", {"alpha": 0.25, "beta": 0.5}, [a(-2.0, 2, 0)],
                                  a(0, 1, 0.5), a(0, 0, 0.25)),
    "hardswish at ±3": ("HardSwish", {}, [a(-3.0, 3)], a(-0.0, 3), a(0, 1)),               # F.hardswish: -3·0, 3; 0, 1
    "hardshrink at ±lambda": ("Shrink", {"lambd": 0.5}, [a(-0.5, 0.5)], a(0, 0), a(0, 0)),  # F.hardshrink
    "softshrink at ±lambda": ("Shrink", {"lambd": 0.5, "bias": 0.5}, [a(-0.5, 0.5)], a(0, 0), a(0, 0)),  # F.softshrink
    "abs at 0": ("Abs", {}, [a(0.0)], a(0), a(0)),                                         # torch.abs: sign(0)
    "sign at 0": ("Sign", {}, [a(0.0)], a(0), a(0)),
    "softsign at 0": ("Softsign", {}, [a(0.0)], a(0), a(1)),                               # F.softsign: 1
    "clip at its bounds": ("Clip", {}, [a(-1.0, 1), a(-1.0), a(1.0)], a(-1, 1), a(1, 1)),  # torch.clamp: bounds in
    "max tie": ("Max", {}, [a(1.0), a(1.0)], a(1), a(0.5)),                                # torch.maximum: halves
    "min tie": ("Min", {}, [a(1.0), a(1.0)], a(1), a(0.5)),                                # torch.minimum: halves
    "round, floor and ceil": ("Round", {}, [a(0.5, 1.5, 2.0)], a(0, 2, 2), a(0, 0, 0)),
    "floor at an integer": ("Floor", {}, [a(1.0)], a(1), a(0)),
    "ceil at an integer": ("Ceil", {}, [a(1.0)], a(1), a(0)),
}

# Elementwise translators of ops without a kink where they are finite (their gradient is checked by
# tests/importer/test_translators.py), and those that are not activations of one float operand.
SMOOTH = {"Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Sin", "Cos", "Tan", "Softplus", "Gelu", "Mish", "Swish",
          "Reciprocal", "Neg", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Acos", "Asin", "Atan"}
NOT_ACTIVATIONS = {"IsNaN", "IsInf", "Not", "Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Less",
                   "LessOrEqual", "Greater", "GreaterOrEqual", "Sum", "Mean", "Where", "Mod", "BitShift",
                   "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"}


@pytest.mark.parametrize("case", sorted(KINKS))
def test_imported_activation_at_its_kinks(case):
    op, attrs, inputs, value, slope = KINKS[case]
    model, arrays = single_node(op, [(f"in{i}", x) for i, x in enumerate(inputs)], opset=22, **attrs)
    f = gc.load_onnx(model)

    def value_and_slope(x, *others):
        y = f(x, *others)
        return [y, gc.grad(F.sum(y), [x])[0]]
    check_values(value_and_slope, arrays, [value, slope], rtol=1e-7, atol=1e-7)


def test_every_elementwise_translator_is_checked_at_its_kinks_or_smooth():
    """A new activation translator must say where its kinks are (a KINKS row) or that it has none."""
    elementwise = {op for op, t in TRANSLATORS.items() if t.fn.__module__.endswith("translators.elementwise")}
    covered = {row[0] for row in KINKS.values()} | SMOOTH | NOT_ACTIVATIONS
    assert sorted(elementwise - covered) == []
