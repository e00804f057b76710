"""A small LeNet-style CNN on 1x28x28 images: two conv 3x3 + relu + 2x2 max-pool blocks, then a linear layer.

    gcompile build examples/cnn.py -o build --check
"""
import numpy as np

import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(0)


def _init(*shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


PARAMS = {
    "k1": _init(8, 1, 3, 3, fan_in=9), "c1": np.zeros(8, np.float32),
    "k2": _init(16, 8, 3, 3, fan_in=72), "c2": np.zeros(16, np.float32),
    "w": _init(16 * 7 * 7, 10, fan_in=784), "b": np.zeros(10, np.float32),
}


def cnn(x, k1, c1, k2, c2, w, b):
    h = F.max_pool(F.relu(F.conv(x, k1, c1, pad=1)), 2)       # (N, 8, 14, 14)
    h = F.max_pool(F.relu(F.conv(h, k2, c2, pad=1)), 2)       # (N, 16, 7, 7)
    return F.linear(F.flatten(h), w, b)                       # (N, 10)


IMAGES = gc.spec(("batch", 1, 28, 28), "float32")


@gc.export(x=IMAGES)
def predict(x):
    """Class probabilities, weights baked in as initializers."""
    return F.softmax(cnn(x, **PARAMS), axis=-1)


@gc.export(x=IMAGES, labels=gc.spec(("batch",), "int64"), **PARAMS)
def loss_and_grads(x, labels, k1, c1, k2, c2, w, b):
    """Mean softmax cross-entropy and its gradient w.r.t. every parameter."""
    params = [k1, c1, k2, c2, w, b]
    loss = F.softmax_cross_entropy(cnn(x, *params), labels)
    return {"loss": loss, "grads": gc.grad(loss, params)}
