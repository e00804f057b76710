"""Write examples/data/classifier.onnx: a small PyTorch MLP classifier (8 -> 32 -> 32 -> 4,
ReLU), trained briefly on Gaussian blobs and exported with PyTorch's ONNX exporter, so
examples/finetune_onnx.py starts from a model made elsewhere, as users' models are.

    python tools/make_example_classifier.py        (needs torch; run by hand, output committed)

Initializers are named after the modules: fc1.*, fc2.*, head.* (weights shaped (out, in),
applied by Gemm with transB=1). The batch dim is symbolic ("batch"). Deterministic.
"""
from __future__ import annotations

import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "data",
                   "classifier.onnx")


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = torch.nn.Linear(8, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def blobs(seed: int, n: int = 512):
    rng = np.random.default_rng(seed)
    centres = 2 * rng.standard_normal((4, 8))
    labels = rng.integers(0, 4, size=n)
    return (centres[labels] + rng.standard_normal((n, 8))).astype(np.float32), labels


def main() -> None:
    torch.manual_seed(0)
    model = Classifier()
    x, labels = map(torch.from_numpy, blobs(seed=0))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(200):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
    accuracy = (model(x).argmax(1) == labels).float().mean().item()
    torch.onnx.export(model, (x[:2],), OUT, dynamo=False, opset_version=18, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes); training loss {loss.item():.4f}, accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
