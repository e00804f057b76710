"""Hessian-vector product of an MLP's loss w.r.t. its parameters, by differentiating twice.

H v = d/dθ <dL/dθ, v>: the gradient of the gradient's inner product with v. It costs
about two backward passes and never forms the Hessian.

    gcompile build examples/hvp.py -o build --check
"""
import numpy as np

import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(0)
W1 = (rng.standard_normal((784, 64)) / np.sqrt(784)).astype(np.float32)
B1 = np.zeros(64, np.float32)
W2 = (rng.standard_normal((64, 10)) / np.sqrt(64)).astype(np.float32)
B2 = np.zeros(10, np.float32)


def loss_fn(x, labels, w1, b1, w2, b2):
    logits = F.linear(F.tanh(F.linear(x, w1, b1)), w2, b2)
    return F.softmax_cross_entropy(logits, labels)


@gc.export(x=gc.spec(("batch", 784), "float32"), labels=gc.spec(("batch",), "int64"),
           w1=W1, b1=B1, w2=W2, b2=B2, v_w1=W1, v_b1=B1, v_w2=W2, v_b2=B2)
def hvp(x, labels, w1, b1, w2, b2, v_w1, v_b1, v_w2, v_b2):
    params, vectors = [w1, b1, w2, b2], [v_w1, v_b1, v_w2, v_b2]
    grads = gc.grad(loss_fn(x, labels, *params), params)
    dot = sum(F.sum(g * v) for g, v in zip(grads, vectors))
    return {"hvp": gc.grad(dot, params)}
