"""A tiny LSTM + CTC model on synthetic sequences, trained with one ONNX training step.

Each input sequence spells a short label string: every label is shown as a noisy one-hot
frame for 1-3 steps, with noise-only frames between; sequences and label strings have
variable lengths (padded). A bidirectional LSTM reads the frames (its `lengths` mask the
padding), a linear layer gives per-frame class scores, and ctc_loss compares their
log-softmax with the label strings, as in speech recognition.

    python examples/ctc_lstm.py [--steps 60]
    gcompile build examples/ctc_lstm.py -o build --check
"""
from __future__ import annotations

import argparse

import numpy as np

import gcompile as gc
import gcompile.functions as F

STEPS, CLASSES, MAX_LABELS, HIDDEN = 16, 5, 4, 8     # class 0 is the CTC blank


def init_params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    params = {}
    for d in ("fwd", "bwd"):
        scale = 1 / np.sqrt(HIDDEN)
        params |= {f"{d}.w_ih": rng.uniform(-scale, scale, (4 * HIDDEN, CLASSES)),
                   f"{d}.w_hh": rng.uniform(-scale, scale, (4 * HIDDEN, HIDDEN)),
                   f"{d}.b_ih": np.zeros(4 * HIDDEN), f"{d}.b_hh": np.zeros(4 * HIDDEN)}
    params |= {"out.w": rng.standard_normal((2 * HIDDEN, CLASSES)) / np.sqrt(2 * HIDDEN), "out.b": np.zeros(CLASSES)}
    return {k: v.astype(np.float32) for k, v in params.items()}


def synthetic_batch(n: int, seed: int = 1):
    """(frames (T, n, CLASSES), labels (n, MAX_LABELS), input_lengths (n,), label_lengths (n,))."""
    rng = np.random.default_rng(seed)
    frames = np.zeros((STEPS, n, CLASSES), np.float32)
    labels = np.zeros((n, MAX_LABELS), np.int64)
    input_lengths, label_lengths = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        k = rng.integers(1, MAX_LABELS + 1)
        labels[i, :k] = rng.integers(1, CLASSES, k)
        t = 0
        for c in labels[i, :k]:
            t += rng.integers(0, 2)                      # a gap frame, or none
            for _ in range(rng.integers(1, 4)):
                frames[t, i, c] = 1.0
                t += 1
        input_lengths[i], label_lengths[i] = t + rng.integers(0, STEPS - t + 1), k
    frames += 0.1 * rng.standard_normal(frames.shape).astype(np.float32)
    frames[np.arange(STEPS)[:, None] >= input_lengths] = 0.0
    return frames, labels, input_lengths, label_lengths


def ctc_model_loss(params, frames, labels, input_lengths, label_lengths):
    """Mean CTC loss (per label) of a bidirectional LSTM with a linear read-out."""
    weights = [tuple(params[f"{d}.{w}"] for w in ("w_ih", "w_hh", "b_ih", "b_hh")) for d in ("fwd", "bwd")]
    h0 = F.full((2, frames.shape[1], HIDDEN), 0.0)          # (directions, batch, hidden) zeros
    ys, _, _ = F.lstm(frames, h0, h0, weights, lengths=input_lengths, bidirectional=True)
    scores = F.linear(ys, params["out.w"], params["out.b"])
    return F.ctc_loss(F.log_softmax(scores), labels, input_lengths, label_lengths)


SPECS = {"frames": gc.spec((STEPS, "batch", CLASSES), "float32"), "labels": gc.spec(("batch", MAX_LABELS), "int64"),
         "input_lengths": gc.spec(("batch",), "int64"), "label_lengths": gc.spec(("batch",), "int64")}


@gc.export_train(params=init_params(), optimizer=gc.optim.SGD(lr=0.5), **SPECS)
def ctc_train_step(params, frames, labels, input_lengths, label_lengths):
    return ctc_model_loss(params, frames, labels, input_lengths, label_lengths)


def compile_loss_and_grads(params: dict):
    """gc.compile'd (params..., batch...) -> (loss, [grad of each param]) for plain gradient descent."""
    names = list(params)

    def loss_and_grads(*args):
        p = dict(zip(names, args[:len(names)]))
        loss = ctc_model_loss(p, *args[len(names):])
        return loss, gc.grad(loss, list(p.values()))
    return gc.compile(loss_and_grads, *params.values(), *SPECS.values())


def main(steps: int = 60, lr: float = 0.5) -> list[float]:
    params = init_params()
    batch = synthetic_batch(32)
    step = compile_loss_and_grads(params)
    losses = []
    for i in range(steps):
        loss, grads = step(*params.values(), *batch)
        params = {k: v - lr * g for (k, v), g in zip(params.items(), grads)}
        losses.append(float(loss))
        if i % 10 == 0 or i == steps - 1:
            print(f"step {i:3d}  ctc loss {loss:.4f}")
    return losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    main(parser.parse_args().steps)
