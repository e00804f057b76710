"""Generate the PyTorch reference fixtures for tests/sequence (needs torch; the tests do not).

    .venv/bin/python tools/make_sequence_fixtures.py

Writes tests/data/sequence/{lstm,gru,ctc}.npz, all float64:
  lstm/gru: a 2-layer bidirectional nn.LSTM / nn.GRU run on a padded batch through
    pack_padded_sequence (variable lengths); outputs (padded with zeros), final states and
    the gradients of loss = Σ ys·wy + Σ h_n·wh (+ Σ c_n·wc) w.r.t. inputs, states and weights.
  ctc: nn.functional.ctc_loss of log_softmax(logits) for every reduction with and without
    zero_infinity (one impossible alignment in the batch), and the gradients w.r.t. the logits
    (PyTorch's gradient w.r.t. log-probs assumes they come from a log-softmax, so the logits
    gradient is the quantity both systems agree on).
"""
from __future__ import annotations

import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "sequence")
T, N, IN, H, LAYERS = 5, 3, 3, 4, 2


def _rnn_fixture(kind: str, rng) -> dict:
    torch.manual_seed(0)
    module = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(IN, H, num_layers=LAYERS, bidirectional=True).double()
    xs = torch.tensor(rng.standard_normal((T, N, IN)), requires_grad=True)
    lengths = np.array([5, 2, 4], np.int64)
    states = [torch.tensor(rng.standard_normal((2 * LAYERS, N, H)), requires_grad=True)
              for _ in range(2 if kind == "lstm" else 1)]
    packed = torch.nn.utils.rnn.pack_padded_sequence(xs, torch.tensor(lengths), enforce_sorted=False)
    out, final = module(packed, tuple(states) if kind == "lstm" else states[0])
    ys, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=T)
    finals = list(final) if kind == "lstm" else [final]
    weights = {f"w{k}": torch.tensor(rng.standard_normal(t.shape)) for k, t in enumerate([ys] + finals)}
    loss = sum((t * w).sum() for t, w in zip([ys] + finals, weights.values()))
    names = [f"{p}_l{layer}{sfx}" for layer in range(LAYERS) for sfx in ("", "_reverse")
             for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    params = [getattr(module, n) for n in names]
    grads = torch.autograd.grad(loss, [xs, *states, *params])
    data = {"xs": xs, "lengths": lengths, "ys": ys, **{f"final{k}": f for k, f in enumerate(finals)},
            **{f"state{k}": s for k, s in enumerate(states)}, **weights,
            **{f"param{k}": p for k, p in enumerate(params)},
            "grad_xs": grads[0], **{f"grad_state{k}": g for k, g in enumerate(grads[1:1 + len(states)])},
            **{f"grad_param{k}": g for k, g in enumerate(grads[1 + len(states):])}}
    return {k: v.detach().numpy() if torch.is_tensor(v) else v for k, v in data.items()}


def _ctc_fixture(rng) -> dict:
    steps, batch, classes = 8, 4, 5
    logits = torch.tensor(rng.standard_normal((steps, batch, classes)), requires_grad=True)
    labels = torch.tensor([[1, 2, 2, 3], [4, 1, 0, 0], [2, 2, 2, 2], [3, 0, 0, 0]])
    input_lengths = torch.tensor([8, 6, 5, 3])    # sequence 2 needs 7 frames: impossible
    label_lengths = torch.tensor([4, 2, 4, 1])
    data = {"logits": logits.detach().numpy(), "labels": labels.numpy(), "input_lengths": input_lengths.numpy(),
            "label_lengths": label_lengths.numpy()}
    for reduce in ("none", "sum", "mean"):
        for zero_infinity in (False, True):
            log_probs = torch.log_softmax(logits, dim=-1)
            loss = torch.nn.functional.ctc_loss(log_probs, labels, input_lengths, label_lengths, blank=0,
                                                reduction=reduce, zero_infinity=zero_infinity)
            (grad,) = torch.autograd.grad(loss.sum(), [logits])
            key = f"{reduce}_{int(zero_infinity)}"
            data[f"loss_{key}"], data[f"grad_{key}"] = loss.detach().numpy(), grad.numpy()
    return data


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(7)
    for name, data in (("lstm", _rnn_fixture("lstm", rng)), ("gru", _rnn_fixture("gru", rng)),
                       ("ctc", _ctc_fixture(rng))):
        path = os.path.join(OUT, f"{name}.npz")
        np.savez_compressed(path, **data)
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
