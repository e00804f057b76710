"""Third-order numeric gradient checks (float64, reference evaluator): the gradient of the
double-backward graph, for the ops whose rules are most used under nested differentiation."""
import numpy as np
import pytest

from gcompile import functions as F
from gcompile.testing import check_grad

RNG = np.random.default_rng(11)


def _a(*shape):
    return RNG.standard_normal(shape)


CASES = {
    "exp": (lambda x: F.exp(x), [_a(2, 3)]),
    "tanh": (lambda x: F.tanh(x), [_a(2, 3)]),
    "sigmoid": (lambda x: F.sigmoid(x), [_a(2, 3)]),
    "mul": (lambda a, b: a * b * a, [_a(2, 3), _a(3)]),
    "div": (lambda a, b: a / b, [_a(2, 3), 1.5 + RNG.random((2, 1))]),
    "matmul": (lambda a, b: F.tanh(a @ b) * (a @ b), [_a(2, 3), _a(3, 2)]),
    "softmax": (lambda x: F.softmax(x, axis=0), [_a(3, 2)]),
    "log_softmax": (lambda x: F.log_softmax(x), [_a(2, 3)]),
    "layer_norm": (lambda x, gamma, beta: F.layer_norm(x, gamma, beta), [_a(2, 4), _a(4), _a(4)]),
    "conv": (lambda x, w, b: F.tanh(F.conv(x, w, b, stride=2, pad=1)), [_a(1, 2, 4, 4), _a(2, 2, 3, 3), _a(2)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_third_order(name):
    fn, inputs = CASES[name]
    check_grad(fn, inputs, order=3, rtol=1e-5, atol=1e-7)
