"""A 784-128-10 MLP classifier: `predict` (weights baked in) and `loss_and_grads` (weights as inputs).

    gcompile build examples/mlp.py -o build --check

writes build/predict.onnx, build/loss_and_grads.onnx and build/manifest.json.

    python examples/mlp.py [--steps 40]

compiles both, runs `predict`, then trains the weights with plain gradient descent on a
synthetic task through `loss_and_grads` and prints the loss and accuracy as they improve.
"""
import argparse

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


def synthetic_task(n: int = 512, seed: int = 1):
    """Random 'images' whose label is the brightest of their first ten pixels: learnable, not trivial."""
    x = np.random.default_rng(seed).standard_normal((n, 784)).astype(np.float32)
    return x, x[:, :10].argmax(axis=1).astype(np.int64)


def main(steps: int = 40, lr: float = 0.5) -> list[float]:
    """Compile and run predict, then train through loss_and_grads; returns the loss of every step."""
    x, labels = synthetic_task()
    batch = gc.spec(("batch", 784), "float32")
    probs = np.exp(gc.compile(predict, batch)(x[:4]))
    print(f"predict on 4 images: classes {probs.argmax(axis=1).tolist()}, probabilities sum to "
          f"{np.round(probs.sum(axis=1), 4).tolist()}")
    step = gc.compile(loss_and_grads, batch, gc.spec(("batch",), "int64"), W1, B1, W2, B2)
    forward = gc.compile(mlp, batch, W1, B1, W2, B2)
    params, losses = [W1, B1, W2, B2], []
    for i in range(steps):
        out = step(x, labels, *params)
        params = [p - lr * g for p, g in zip(params, out["grads"])]
        losses.append(float(out["loss"]))
        if i % 10 == 0 or i == steps - 1:
            accuracy = float(np.mean(forward(x, *params).argmax(axis=1) == labels))
            print(f"step {i:3d}  loss {losses[-1]:.4f}  accuracy {accuracy:.2f}  ({step.provider})")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    main(parser.parse_args().steps)
