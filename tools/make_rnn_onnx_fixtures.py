"""Export small PyTorch recurrent models to ONNX with PyTorch's results, for tests/importer/test_rnn_import.py.

Run by hand where torch is installed (the project's tests never import it):

    .venv/bin/python tools/make_rnn_onnx_fixtures.py [--out tests/data/rnn]

Models (seq-first, batch_first=False, fixed seeds): a 2-layer bidirectional nn.LSTM and nn.GRU
with the initial states as inputs, a 1-layer bidirectional tanh nn.RNN without them, and the
2-layer bidirectional LSTM and GRU on packed sequences (variable lengths, sorted longest first
so the exporter emits them as the nodes' sequence_lens input). Each model gets <name>.onnx
(TorchScript exporter, opset 17, dynamic batch axis, no constant folding so the initializers
keep PyTorch's parameter names) and <name>.npz holding:
  in__<input>     the inputs, as fed to the ONNX model
  out__<k>        PyTorch's outputs (float64 computation on the same float32 values)
  w__<k>          fixed random weights of the loss L = sum_k sum(out_k * w_k)
  grad__<name>    dL/d<name> for every float input and every parameter (named as its initializer)
"""
from __future__ import annotations

import argparse
import io
import os

import numpy as np
import onnx
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T, N, IN, H = 5, 3, 3, 4
LENGTHS = [5, 4, 2]           # longest first: enforce_sorted=True exports without a sorting gather


class Stateful(torch.nn.Module):
    """An nn.LSTM/GRU/RNN called with its initial states as model inputs."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *states):
        y, final = self.rnn(x, (states if len(states) > 1 else states[0]) if states else None)
        return (y, *final) if isinstance(final, tuple) else (y, final)


class Packed(Stateful):
    """The same on a padded batch through pack_padded_sequence / pad_packed_sequence."""

    def forward(self, x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=True)
        out, final = self.rnn(packed)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
        return (y, *final) if isinstance(final, tuple) else (y, final)


def models():
    """name -> (module, input names, number of initial states fed as inputs, packed?)."""
    def lstm():
        return torch.nn.LSTM(IN, H, num_layers=2, bidirectional=True)

    def gru():
        return torch.nn.GRU(IN, H, num_layers=2, bidirectional=True)

    return {"lstm": (Stateful(lstm()), ["x", "h0", "c0"]),
            "gru": (Stateful(gru()), ["x", "h0"]),
            "rnn": (Stateful(torch.nn.RNN(IN, H, nonlinearity="tanh", bidirectional=True)), ["x"]),
            "lstm_packed": (Packed(lstm()), ["x", "lengths"]),
            "gru_packed": (Packed(gru()), ["x", "lengths"])}


def _inputs(names, rnn, gen):
    directions = 2 if rnn.bidirectional else 1
    shapes = {"x": (T, N, IN), "h0": (rnn.num_layers * directions, N, H), "c0": (rnn.num_layers * directions, N, H)}
    return [torch.tensor(LENGTHS) if n == "lengths" else torch.randn(shapes[n], generator=gen) * 0.8 for n in names]


def _export(module, inputs, names) -> onnx.ModelProto:
    buffer = io.BytesIO()
    n_out = 3 if isinstance(module.rnn, torch.nn.LSTM) else 2
    outputs = [f"out{k}" for k in range(n_out)]
    batch_axis = {"x": 1, "h0": 1, "c0": 1, "lengths": 0, "out0": 1, "out1": 1, "out2": 1}
    torch.onnx.export(module, tuple(inputs), buffer, dynamo=False, opset_version=17, do_constant_folding=False,
                      input_names=names, output_names=outputs,
                      dynamic_axes={n: {batch_axis[n]: "batch"} for n in names + outputs})
    return onnx.load_from_string(buffer.getvalue())


def make(name: str, module, names, out: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    module.eval()
    inputs = _inputs(names, module.rnn, gen)
    proto = _export(module, inputs, names)
    params = dict(module.named_parameters())
    missing = sorted(set(params) - {t.name for t in proto.graph.initializer})
    if missing:
        raise SystemExit(f"{name}: parameters {missing} are not ONNX initializers; the fixture would be ambiguous")
    if name.endswith("_packed") and not any(n.op_type in ("LSTM", "GRU") and len(n.input) > 4 and n.input[4]
                                            for n in proto.graph.node):
        raise SystemExit(f"{name}: the exporter emitted no sequence_lens")

    module.double()                          # the reference: float64 on the same float32 values
    inputs64 = [t.double().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
    outs = module(*inputs64)
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outs]
    loss = sum((o * w).sum() for o, w in zip(outs, weights))
    float_inputs = [(n, t) for n, t in zip(names, inputs64) if t.is_floating_point()]
    grads = torch.autograd.grad(loss, [t for _, t in float_inputs] + list(params.values()))

    arrays = {f"in__{n}": t.detach().numpy().astype(np.float32) if t.is_floating_point() else t.numpy()
              for n, t in zip(names, inputs64)}
    arrays.update({f"out__{k}": o.detach().numpy() for k, o in enumerate(outs)})
    arrays.update({f"w__{k}": w.numpy() for k, w in enumerate(weights)})
    grad_names = [n for n, _ in float_inputs] + list(params)
    arrays.update({f"grad__{n}": g.numpy() for n, g in zip(grad_names, grads)})
    onnx.save(proto, os.path.join(out, f"{name}.onnx"))
    np.savez_compressed(os.path.join(out, f"{name}.npz"), **arrays)
    print(f"{name}: {len(proto.graph.node)} nodes, {len(params)} params, loss {loss.item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "rnn"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for seed, (name, (module, names)) in enumerate(models().items()):
        make(name, module, names, args.out, seed)


if __name__ == "__main__":
    main()
