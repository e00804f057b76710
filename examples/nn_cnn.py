"""A CNN with BatchNorm written with gc.nn (PyTorch style), exported for inference and as a training step.

    gcompile build examples/nn_cnn.py -o build --check

The training step carries BatchNorm's running statistics (inputs "bn1.running_mean", ..., outputs
"bn1.running_mean.new", ...) beside the parameters and the optimizer state; gc.runtime.Trainer
keeps them on the device, and `model.load_state_dict(trainer.state_dict())` takes them back.
"""
import argparse

import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile import nn

nn.init.seed(0)


class Net(nn.Module):
    def __init__(self):
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(F.flatten(x))


model = Net()
inference = model.replace({}).eval()        # a copy in eval mode: BatchNorm uses the running statistics
IMAGES = gc.spec(("batch", 1, 28, 28), "float32")


@gc.export(x=IMAGES)
def predict(x):
    """Class probabilities; the initializers are named conv1.weight, bn1.running_mean, ..."""
    return F.softmax(inference(x), axis=-1)


@gc.export_train(params=model, optimizer=gc.optim.SGD(0.05, momentum=0.9), x=IMAGES,
                 labels=gc.spec(("batch",), "int64"), name="train_step")
def loss(m, x, labels):
    return F.softmax_cross_entropy(m(x), labels)


def synthetic_digits(n: int = 64, seed: int = 2):
    """Noise images whose label is the quadrant-and-half (of ten regions) holding the brightest pixel."""
    x = np.random.default_rng(seed).standard_normal((n, 1, 28, 28)).astype(np.float32)
    flat = x.reshape(n, -1).argmax(axis=1)
    return x, ((flat // 28) * 10 // 28).astype(np.int64)


def main(steps: int = 10) -> list[float]:
    """Train with the exported step on a device-resident Trainer; returns every step's loss."""
    x, labels = synthetic_digits()
    step = gc.export_train_step(loss, model, gc.optim.SGD(0.01, momentum=0.9), IMAGES, gc.spec(("batch",), "int64"))
    trainer = gc.runtime.Trainer(step)
    losses = []
    for i in range(steps):
        losses.append(float(trainer.step(x, labels)))
        print(f"step {i:2d}  cross-entropy {losses[-1]:.4f}  ({trainer.provider})")
    model.load_state_dict(trainer.state_dict())
    trained = model.replace({}).eval()
    probs = gc.compile(lambda images: F.softmax(trained(images), axis=-1), IMAGES)(x)
    print(f"after training, eval mode (running statistics): accuracy on the training images "
          f"{float(np.mean(probs.argmax(axis=1) == labels)):.2f}")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    main(parser.parse_args().steps)
