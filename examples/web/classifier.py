"""A small classifier trained in the browser or in Node.js: the model file of examples/web/.

    gcompile build examples/web/classifier.py --target web -o examples/web/build

writes the training step (train_step.onnx), its starting parameters (train_step.init.npz), the
forward model (predict.onnx), manifest.json and the JavaScript module gcompile.mjs (with its types,
gcompile.d.ts) that index.html and train_node.mjs load. `python examples/web/classifier.py` trains
the same step with gc.runtime.Trainer on the same data, for comparison (docs/web.md).

The data are 2-D points in three classes (inside a circle; outside it, by the sign of x·y), made by
a 32-bit linear congruential generator whose coordinates are multiples of 1/512: data.mjs makes
bit-identical arrays in JavaScript, so a browser and Python train on exactly the same batches.
"""
import argparse

import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile import nn

nn.init.seed(0)
POINTS, BATCH = 512, 64


class Classifier(nn.Module):
    def __init__(self):
        self.fc1, self.fc2, self.fc3 = nn.Linear(2, 32), nn.Linear(32, 32), nn.Linear(32, 3)

    def forward(self, x):
        return self.fc3(F.tanh(self.fc2(F.tanh(self.fc1(x)))))


model = Classifier()
X, LABELS = gc.spec(("batch", 2), "float32"), gc.spec(("batch",), "int64")


@gc.export_train(params=model, optimizer=gc.optim.Adam(0.01), x=X, labels=LABELS, name="train_step")
def loss(m, x, labels):
    return F.softmax_cross_entropy(m(x), labels)


@gc.export(m=model, x=X)
def predict(m, x):
    """Class probabilities; the parameters are inputs ("m.fc1.weight", ...), fed from a trainer's state."""
    return F.softmax(m(x), axis=-1)


def dataset(n: int = POINTS, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """`n` points and labels, exactly as data.mjs makes them."""
    state, coords = seed, []
    for _ in range(2 * n):
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        coords.append(((state >> 22) - 512) / 512)
    x = np.array(coords, np.float32).reshape(n, 2)
    inside = (x ** 2).sum(axis=1) < 0.25
    labels = np.where(inside, 0, np.where(x[:, 0] * x[:, 1] > 0, 1, 2)).astype(np.int64)
    return x, labels


def batch(x: np.ndarray, labels: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
    """The batch of step `i`: the data in order, BATCH points at a time, round and round."""
    start = (i * BATCH) % len(x)
    return x[start:start + BATCH], labels[start:start + BATCH]


def main(steps: int) -> None:
    x, labels = dataset()
    step = gc.export_train_step(loss, model, gc.optim.Adam(0.01), X, LABELS)
    trainer = gc.runtime.Trainer(step)
    for i in range(steps):
        value = trainer.step(*batch(x, labels, i))
        if i % 10 == 0 or i == steps - 1:
            print(f"step {i:4d}  loss {value:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    main(parser.parse_args().steps)
