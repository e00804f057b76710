"""Fine-tune the last layers of an existing ONNX classifier with one ONNX training step.

    python examples/finetune_onnx.py [--steps 150] [--out DIR]
    gcompile build examples/finetune_onnx.py -o build --check

examples/data/classifier.onnx is a small PyTorch MLP (8 -> 32 -> 32 -> 4, exported by
tools/make_example_classifier.py). gc.load_onnx inlines its graph into a traced loss with
the weights of its last two layers replaced by traced parameters; the first layer stays
frozen (its weights are constants of the step model). gc.export_train_step turns loss,
gradients and the Adam update into one standard ONNX model, and gc.runtime.Trainer runs it
with the parameters and Adam's state kept on the device. The new task: four classes of
Gaussian blobs the classifier has never seen.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import gcompile as gc
import gcompile.functions as F

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "classifier.onnx")
TRAINABLE = ("fc2.weight", "fc2.bias", "head.weight", "head.bias")
SPECS = {"x": gc.spec(("batch", 8), "float32"), "labels": gc.spec(("batch",), "int64")}

classifier = gc.load_onnx(DATA)
initial = {name: classifier.params[name] for name in TRAINABLE}
optimizer = gc.optim.Adam(lr=1e-2)


@gc.export_train(params=initial, optimizer=optimizer, **SPECS)
def finetune(params, x, labels):
    """Mean cross-entropy of the classifier with `params` in place of its last layers' weights."""
    return F.softmax_cross_entropy(classifier(x, params=params), labels)


def new_task(seed: int = 1, n: int = 256):
    rng = np.random.default_rng(seed)
    centres = 2 * rng.standard_normal((4, 8))
    labels = rng.integers(0, 4, size=n)
    return (centres[labels] + rng.standard_normal((n, 8))).astype(np.float32), labels.astype(np.int64)


def main(steps: int = 150, batch: int = 32, out: str | None = None, provider: str = "auto") -> list[float]:
    """Train and return the loss of every step."""
    x, labels = new_task()
    step = gc.export_train_step(finetune, initial, optimizer, *SPECS.values(), provider=provider)
    trainer = gc.runtime.Trainer(step)
    losses = []
    for i in range(steps):
        rows = slice((i * batch) % len(x), (i * batch) % len(x) + batch)
        losses.append(trainer.step(x[rows], labels[rows]))
        if i % 25 == 0 or i == steps - 1:
            print(f"step {i:4d}  loss {losses[-1]:.4f}")
    predict = gc.compile(lambda x: classifier(x, params=trainer.params), SPECS["x"], provider=provider)
    print(f"accuracy on the new task: {np.mean(predict(x).argmax(1) == labels):.3f} ({trainer.provider})")
    if out:
        step.save(os.path.join(out, "finetune_step.onnx"))
        trainer.save(os.path.join(out, "finetune.npz"))
        print(f"wrote {out}/finetune_step.onnx and {out}/finetune.npz")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--out", help="folder for the step model and a checkpoint")
    args = parser.parse_args()
    main(args.steps, out=args.out)
