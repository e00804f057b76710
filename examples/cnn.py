"""A small LeNet-style CNN on 1x28x28 images: two conv 3x3 + relu + 2x2 max-pool blocks, then a linear layer.

    gcompile build examples/cnn.py -o build --check
    python examples/cnn.py [--steps 15]   # compile, predict, and train on synthetic images
"""
import argparse

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


def synthetic_images(n: int = 64, seed: int = 1):
    """Noise with one bright 7x7 patch; the label is the patch's position on a 3x3 grid (9 classes)."""
    rng = np.random.default_rng(seed)
    x = 0.3 * rng.standard_normal((n, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 9, n)
    for image, label in zip(x, labels):
        row, col = 2 + 9 * (label // 3), 2 + 9 * (label % 3)
        image[0, row:row + 7, col:col + 7] += 2.0
    return x, labels.astype(np.int64)


def main(steps: int = 15, lr: float = 0.1) -> list[float]:
    """Compile and run predict, then train through loss_and_grads; returns the loss of every step."""
    x, labels = synthetic_images()
    probs = gc.compile(predict, IMAGES)(x[:4])
    print(f"predict on 4 images: shape {probs.shape}, rows sum to {np.round(probs.sum(axis=1), 4).tolist()}")
    step = gc.compile(loss_and_grads, IMAGES, gc.spec(("batch",), "int64"), *PARAMS.values())
    params, losses = list(PARAMS.values()), []
    for i in range(steps):
        out = step(x, labels, *params)
        params = [p - lr * g for p, g in zip(params, out["grads"])]
        losses.append(float(out["loss"]))
        if i % 5 == 0 or i == steps - 1:
            print(f"step {i:3d}  cross-entropy {losses[-1]:.4f}  ({step.provider})")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    main(parser.parse_args().steps)
