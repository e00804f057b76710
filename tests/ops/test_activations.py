"""PyTorch's activation functions: forward on ONNX Runtime against numpy formulas (float32 and
float64, with infinities and NaN), float64 gradient checks away from kinks (the kinks themselves
are rows of test_conventions.py), and shape errors."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads

inf, nan = np.inf, np.nan


def softplus(x):
    return np.logaddexp(0, x)


def sigmoid(x):
    return 0.5 * (1 + np.tanh(0.5 * x))


ACTIVATIONS = {  # name: (function, numpy formula)
    "celu": (lambda x: F.celu(x, 2.0), lambda x: np.maximum(x, 0) + np.minimum(0, 2 * np.expm1(np.minimum(x, 0) / 2))),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "hardtanh": (F.hardtanh, lambda x: np.clip(x, -1, 1)),
    "hardtanh_2_3": (lambda x: F.hardtanh(x, -2.0, 3.0), lambda x: np.clip(x, -2, 3)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "softshrink": (F.softshrink, lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0 * x))),
    "hardshrink": (lambda x: F.hardshrink(x, 1.0), lambda x: np.where(np.abs(x) > 1, x, 0 * x)),
    "tanhshrink": (F.tanhshrink, lambda x: x - np.tanh(x)),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "logsigmoid": (F.logsigmoid, lambda x: -softplus(-x)),
    "mish": (F.mish, lambda x: x * np.tanh(softplus(x))),
    "threshold": (lambda x: F.threshold(x, 0.5, -2.0), lambda x: np.where(x > 0.5, x, -2.0)),
    "softmin": (F.softmin, lambda x: np.exp(-x - np.max(-x, -1, keepdims=True))
                / np.sum(np.exp(-x - np.max(-x, -1, keepdims=True)), -1, keepdims=True)),
}
KINKS = {"celu": [], "hardsigmoid": [-3, 3], "hardswish": [-3, 3], "hardtanh": [-1, 1], "hardtanh_2_3": [-2, 3],
         "relu6": [0, 6], "softshrink": [-0.5, 0.5], "hardshrink": [-1, 1], "threshold": [0.5]}
EDGES = np.array([-inf, inf, nan, -1e30, 1e30, 0.0])


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_forward(name, dtype):
    fn, ref = ACTIVATIONS[name]
    x = np.random.default_rng(len(name)).uniform(-8, 8, (3, 8)).astype(dtype)
    if name != "softmin":
        x = np.concatenate([x.ravel(), EDGES.astype(dtype)])
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64)).astype(dtype)
    check_forward(fn, [x], expected, rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-7)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_gradients(name):
    fn, _ = ACTIVATIONS[name]
    x = np.random.default_rng(len(name) + 1).uniform(-7, 7, (3, 5))
    for kink in KINKS.get(name, []):      # keep the central differences off the kinks
        x = np.where(np.abs(x - kink) < 0.1, x + 0.3, x)
    check_grads(fn, [x])


def test_activations_of_integers_compute_in_float32():
    i = np.array([-4, 0, 2, 7])
    out = check_forward(lambda i: (F.relu6(i), F.hardswish(i), F.softsign(i)), [i],
                        [np.clip(i, 0, 6).astype(np.float32), i * np.clip(i / 6 + 0.5, 0, 1), i / (1 + np.abs(i))])
    assert all(o.dtype == np.float32 for o in out)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_glu_splits_in_halves(axis):
    x = np.random.default_rng(3).standard_normal((4, 6, 2))
    a, b = np.split(x, 2, axis)
    check_forward(lambda x: F.glu(x, axis), [x], a * sigmoid(b), rtol=1e-12)
    check_grads(lambda x: F.glu(x, axis), [x])


def test_glu_needs_an_even_axis():
    with pytest.raises(gc.ShapeError, match=r"glu: axis 1 of x \(2, 3\) must have an even static size"):
        gc.compile(lambda x: F.glu(x, 1), np.ones((2, 3), np.float32))


@pytest.mark.parametrize("shape, w_shape", [((2, 3, 4, 5), (3,)), ((2, 3), (3,)), ((2, 3, 4), (1,)), ((5,), (1,)),
                                            ((2, 3), ()), ((), (1,)), ((), ())])
def test_prelu_per_channel_weights(shape, w_shape):
    """One weight per channel (axis 1), or a single one (shape (1,) or ()) for every entry, which
    keeps x's shape: a 0-d x gives a 0-d result, as torch's."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(shape), rng.uniform(0.1, 0.5, w_shape)
    wb = w.reshape(w.shape + (1,) * (len(shape) - 2)) if w.size > 1 else w.reshape(())
    check_forward(F.prelu, [x, w], np.where(x > 0, x, wb * x), rtol=1e-12)
    check_grads(F.prelu, [x, w])


def test_prelu_weight_shape_errors():
    with pytest.raises(gc.ShapeError, match=r"prelu: weight of shape \(4,\) must have 1 or 3 entries"):
        gc.compile(F.prelu, np.ones((2, 3, 5), np.float32), np.ones(4, np.float32))
