"""A 784-128-10 MLP classifier: `predict` (weights baked in) and `loss_and_grads` (weights as inputs).

    gcompile build examples/mlp.py -o build --check

writes build/predict.onnx, build/loss_and_grads.onnx and build/manifest.json.
"""
import numpy as np

import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(0)
W1 = (rng.standard_normal((784, 128)) / np.sqrt(784)).astype(np.float32)
B1 = np.zeros(128, np.float32)
W2 = (rng.standard_normal((128, 10)) / np.sqrt(128)).astype(np.float32)
B2 = np.zeros(10, np.float32)


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


@gc.export(x=gc.spec(("batch", 784), "float32"))
def predict(x):
    """Class log-probabilities; the closed-over numpy weights become ONNX initializers."""
    return F.log_softmax(mlp(x, W1, B1, W2, B2), axis=-1)


@gc.export(x=gc.spec(("batch", 784), "float32"), labels=gc.spec(("batch",), "int64"),
           w1=W1, b1=B1, w2=W2, b2=B2)
def loss_and_grads(x, labels, w1, b1, w2, b2):
    """Mean cross-entropy and its gradient w.r.t. every weight (one training step's backward)."""
    loss = F.softmax_cross_entropy(mlp(x, w1, b1, w2, b2), labels)
    return {"loss": loss, "grads": gc.grad(loss, [w1, b1, w2, b2])}
