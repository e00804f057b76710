"""PyTorch's values and gradients for the layers gc.nn mirrors, for tests/test_nn_torch.py.

Run by hand where torch (and, for the .safetensors file, safetensors) is installed; the tests never
import either:

    .venv/bin/python tools/make_nn_fixtures.py [--out tests/data]

Each case of CASES builds one torch.nn layer with the keyword arguments that gc.nn's layer of the
same name takes, randomises its parameters and buffers, and runs it (in training or eval mode) on
random inputs. tests/data/torch_nn.npz holds, per case, under "<case>/...":
  config          the case as JSON: layer, its arguments, inputs, call arguments and mode
  state/<name>    the state_dict before the call
  in/<name>       the inputs (floats, ids, masks)
  out/<i>         every output tensor, in the order torch returns them (None skipped)
  w/<i>           fixed random weights of the scalar loss L = sum_i sum(out_i * w_i)
  grad/<name>     dL/d(parameter), and dL/d(input) for float inputs as grad/in.<name>
  new/<name>      buffers after the call (BatchNorm's running statistics in training mode)
tests/data/torch_nn.safetensors is the first case's state_dict written by the safetensors package.

tests/data/torch_train.npz holds whole training runs for tests/train/test_torch_training.py, under
"<run>/...": a small CNN with BatchNorm trained with SGD (momentum, weight decay) and a transformer
encoder block with a classifier head trained with AdamW, a learning rate changed every step and
gradients clipped to a global norm: state/<name> before, batch/<step>/x and .../y, lr/<step>,
loss/<step>, and final/<name> after the last step (parameters and buffers).
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# case: (layer, constructor kwargs, inputs [(name, shape, kind)], call kwargs naming inputs, mode)
CASES = {
    "linear": ("Linear", {"in_features": 5, "out_features": 3}, [("x", [4, 5], "float")], {}, "train"),
    "conv2d": ("Conv2d", {"in_channels": 3, "out_channels": 4, "kernel_size": 3, "stride": 2, "padding": 1},
               [("x", [2, 3, 7, 7], "float")], {}, "train"),
    "conv2d_groups": ("Conv2d", {"in_channels": 4, "out_channels": 6, "kernel_size": [3, 2], "padding": [1, 0],
                                 "dilation": [1, 2], "groups": 2}, [("x", [2, 4, 6, 7], "float")], {}, "train"),
    "conv1d": ("Conv1d", {"in_channels": 2, "out_channels": 3, "kernel_size": 3, "padding": 1},
               [("x", [2, 2, 6], "float")], {}, "train"),
    "batchnorm2d_train": ("BatchNorm2d", {"num_features": 3}, [("x", [4, 3, 5, 5], "float")], {}, "train"),
    "batchnorm2d_eval": ("BatchNorm2d", {"num_features": 3}, [("x", [4, 3, 5, 5], "float")], {}, "eval"),
    "batchnorm1d_train": ("BatchNorm1d", {"num_features": 4, "momentum": 0.3}, [("x", [6, 4], "float")], {},
                          "train"),
    "layernorm": ("LayerNorm", {"normalized_shape": [4, 6]}, [("x", [2, 3, 4, 6], "float")], {}, "train"),
    "embedding": ("Embedding", {"num_embeddings": 10, "embedding_dim": 4, "padding_idx": 0},
                  [("ids", [3, 5], "ids10")], {}, "train"),
    "mha_self": ("MultiheadAttention", {"embed_dim": 8, "num_heads": 2, "batch_first": True},
                 [("x", [2, 5, 8], "float"), ("pad", [2, 5], "padmask")],
                 {"query": "x", "key": "x", "value": "x", "key_padding_mask": "pad"}, "eval"),
    "mha_cross": ("MultiheadAttention", {"embed_dim": 8, "num_heads": 4},
                  [("q", [3, 2, 8], "float"), ("kv", [4, 2, 8], "float"), ("mask", [3, 4], "float")],
                  {"query": "q", "key": "kv", "value": "kv", "attn_mask": "mask", "average_attn_weights": False},
                  "eval"),
    "transformer": ("TransformerEncoderLayer", {"d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.0,
                                                "batch_first": True}, [("x", [2, 5, 8], "float")], {}, "train"),
    "transformer_prenorm_gelu": ("TransformerEncoderLayer", {"d_model": 8, "nhead": 2, "dim_feedforward": 12,
                                                             "dropout": 0.0, "norm_first": True, "activation": "gelu"},
                                 [("x", [5, 2, 8], "float")], {}, "train"),
    "lstm": ("LSTM", {"input_size": 3, "hidden_size": 4, "num_layers": 2, "bidirectional": True,
                      "batch_first": True}, [("x", [2, 5, 3], "float")], {}, "train"),
    "gru": ("GRU", {"input_size": 3, "hidden_size": 4}, [("x", [5, 2, 3], "float")], {}, "train"),
}


def _input(shape, kind, gen):
    if kind == "float":
        return torch.randn(shape, generator=gen)
    if kind == "ids10":
        ids = torch.randint(0, 10, shape, generator=gen)
        ids[0, :2] = 0                                  # the padding row is used
        return ids
    mask = torch.zeros(shape, dtype=torch.bool)         # "padmask": the last key of the second sequence
    mask[1, -2:] = True
    return mask


def _randomise(module: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.2)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=gen) + 0.5)
            elif name.endswith("num_batches_tracked"):
                b.fill_(3)


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _leaves(o)]
    return [] if out is None else [out]


def make(case: str, seed: int) -> dict[str, np.ndarray]:
    layer, kwargs, inputs, call, mode = CASES[case]
    gen = torch.Generator().manual_seed(seed)
    module = getattr(torch.nn, layer)(**kwargs)
    _randomise(module, gen)
    module.train(mode == "train")
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    values = {name: _input(shape, kind, gen) for name, shape, kind in inputs}
    floats = {n: v.requires_grad_(True) for n, v in values.items() if v.dtype == torch.float32}
    if call:
        out = module(**{k: values[v] if isinstance(v, str) else v for k, v in call.items()})
    else:
        out = module(*values.values())
    outs = _leaves(out)
    ws = [torch.randn(o.shape, generator=gen) for o in outs]
    loss = sum((o * w).sum() for o, w in zip(outs, ws))
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()) + list(floats.values()))
    arrays = {"config": np.array(json.dumps({"layer": layer, "kwargs": kwargs, "inputs": inputs, "call": call,
                                              "mode": mode}))}
    arrays.update({f"state/{k}": v.numpy() for k, v in state.items()})
    arrays.update({f"in/{k}": v.detach().numpy() for k, v in values.items()})
    arrays.update({f"out/{i}": o.detach().numpy() for i, o in enumerate(outs)})
    arrays.update({f"w/{i}": w.numpy() for i, w in enumerate(ws)})
    names = list(params) + [f"in.{n}" for n in floats]
    arrays.update({f"grad/{n}": g.numpy() for n, g in zip(names, grads)})
    arrays.update({f"new/{k}": v.detach().numpy() for k, v in module.named_buffers()})
    return {f"{case}/{k}": v for k, v in arrays.items()}


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(torch.flatten(torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2), 1))


class _Transformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 8)
        self.block = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, ids):
        return self.head(self.block(self.embed(ids)).mean(1))


TRAINING = {
    # run: (model, optimizer, its kwargs, input shape and kind, steps, learning rates, clip norm)
    "cnn_sgd": (_CNN, "SGD", {"momentum": 0.9, "weight_decay": 1e-3}, ([6, 1, 8, 8], "float"), 4,
                [0.1, 0.1, 0.05, 0.05], None),
    "transformer_adamw": (_Transformer, "AdamW", {"weight_decay": 0.01}, ([4, 5], "ids11"), 4,
                          [1e-2, 2e-2, 1.5e-2, 5e-3], 0.5),
}


def train(run: str, seed: int) -> dict[str, np.ndarray]:
    build, optimizer, kwargs, (shape, kind), steps, lrs, clip = TRAINING[run]
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = build()
    _randomise(model, gen)
    model.train()
    arrays = {f"state/{k}": v.detach().clone().numpy() for k, v in model.state_dict().items()}
    opt = getattr(torch.optim, optimizer)(model.parameters(), lr=lrs[0], **kwargs)
    for step in range(steps):
        x = torch.randn(shape, generator=gen) if kind == "float" else torch.randint(0, 11, shape, generator=gen)
        y = torch.randint(0, 3, (shape[0],), generator=gen)
        for group in opt.param_groups:
            group["lr"] = lrs[step]
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        arrays.update({f"batch/{step}/x": x.numpy(), f"batch/{step}/y": y.numpy(),
                       f"loss/{step}": loss.detach().numpy(), f"lr/{step}": np.array(lrs[step])})
    arrays.update({f"final/{k}": v.detach().numpy() for k, v in model.state_dict().items()})
    return {f"{run}/{k}": v for k, v in arrays.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data"))
    args = parser.parse_args()
    arrays: dict[str, np.ndarray] = {}
    for seed, case in enumerate(CASES):
        arrays.update(make(case, seed))
    np.savez_compressed(os.path.join(args.out, "torch_nn.npz"), **arrays)
    from safetensors.numpy import save_file
    first = {k.split("/", 2)[2]: v for k, v in arrays.items() if k.startswith("conv2d/state/")}
    save_file(first, os.path.join(args.out, "torch_nn.safetensors"))
    print(f"torch_nn.npz: {len(CASES)} cases, {len(arrays)} arrays")
    runs: dict[str, np.ndarray] = {}
    for seed, run in enumerate(TRAINING):
        runs.update(train(run, seed))
    np.savez_compressed(os.path.join(args.out, "torch_train.npz"), **runs)
    print(f"torch_train.npz: {len(TRAINING)} runs")


if __name__ == "__main__":
    main()
