"""gc.from_torch fixtures for tests/importer/test_torch_bridge.py: small PyTorch modules exported through
gc.from_torch (the dynamo exporter) and saved with TorchModule.save_onnx, with PyTorch's own numbers.

Run by hand where torch and onnxscript are installed (the tests never import them):

    .venv/bin/python tools/make_bridge_fixtures.py [--out tests/data] [--only state ...]

For each model of MODELS (a small CNN with BatchNorm, one nn.TransformerEncoderLayer, a layer that
updates buffers of its own in training mode, a layer using each of PyTorch's ways to stop a
gradient), in training mode, it writes bridge_<name>.onnx and bridge_<name>.npz holding:
  x               the input; w the weights of the scalar loss L = sum(y * w)
  y_train, y_eval PyTorch's output in training mode and in eval mode
  grad/<name>     dL/d(parameter) in training mode, by state_dict name, for the parameters that
                  require a gradient; grad/x dL/dx
  new/<name>      the buffers after the training-mode call (running statistics, the others updated)
  sgd/<name>      the state_dict after one torch.optim.SGD(lr=0.1) step on L
The same functions build the models in the test that runs where torch is installed. The CNN's file
is also copied to examples/data/bridge_cnn.onnx, which docs/guide/importing.md loads. bridge_dropout holds a
Linear layer with nn.Dropout (see dropout_fixture).
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import torch

import gcompile as gc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 5)), (4, 2, 6, 6)


def transformer():
    return torch.nn.TransformerEncoderLayer(16, 2, 24, dropout=0.0, batch_first=True), (3, 5, 16)


class RunningMean(torch.nn.Module):
    """A layer that updates state of its own in place: in training mode it keeps an exponential
    moving average of its batch means (`ema`, as EMA teachers and running normalisers do) and
    counts its calls (`calls`); the output subtracts the average, so it reads the updated state,
    made under no_grad, and adds a detached term: neither passes a gradient in PyTorch."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(n, n)
        self.norm = torch.nn.BatchNorm1d(n)
        self.register_buffer("ema", torch.zeros(n))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        h = torch.tanh(self.norm(self.linear(x)))
        if self.training:
            with torch.no_grad():
                self.ema.mul_(0.9).add_(0.1 * h.mean(0))
                self.calls += 1
        return h - self.ema + 0.5 * (h * h).detach()


def state():
    return RunningMean(6), (5, 6)


class GradModes(torch.nn.Module):
    """Every way PyTorch stops a gradient, each on a term of the output: a no_grad block, an
    inference_mode block and a method inference_mode decorates (torch.export drops that mode), a
    set_grad_enabled(False) block, a detach, and a layer whose parameters are frozen with
    requires_grad_(False) (no gradient, and the optimizer leaves them)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(n, n)
        self.outer = torch.nn.Linear(n, n)
        self.frozen = torch.nn.Linear(n, n)
        self.frozen.requires_grad_(False)

    @torch.inference_mode()
    def center(self, h):
        return h.mean(0)

    def forward(self, x):
        h = torch.tanh(self.inner(x))
        with torch.no_grad():
            peak = h.abs().amax(dim=(0, 1))
        with torch.inference_mode():
            spread = h.std()
        with torch.set_grad_enabled(False):
            total = h.sum(0)
        h = (h - self.center(h).clone()) * peak * spread.clone() + 0.1 * total
        return self.outer(h) + self.frozen(x) * h + (h * h).detach()


def grad_modes():
    return GradModes(6), (5, 6)


MODELS = {"cnn": cnn, "transformer": transformer, "state": state, "grad_modes": grad_modes}
DROPOUT = 0.3


def dropout_fixture(out: str) -> None:
    """bridge_dropout.onnx/.npz: a Linear layer then nn.Dropout(DROPOUT), in training mode, with
    x and the eval-mode output y_eval (a training-mode output is random: the test checks its form)."""
    torch.manual_seed(3)
    module = torch.nn.Sequential(torch.nn.Linear(6, 500), torch.nn.Dropout(DROPOUT)).train()
    x = torch.randn(4, 6)
    gc.from_torch(module, x).save_onnx(os.path.join(out, "bridge_dropout.onnx"))
    y_eval = module.eval()(x).detach().numpy()
    np.savez_compressed(os.path.join(out, "bridge_dropout.npz"), x=x.numpy(), y_eval=y_eval,
                        ratio=np.float32(DROPOUT))
    print("bridge_dropout: 3 arrays")


def reference(build, seed: int):
    """(module before any step, x, w, arrays of PyTorch's numbers) for one model."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    module, shape = build()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    module.train()
    x = torch.randn(shape, generator=gen)
    probe = build()[0]
    probe.load_state_dict(module.state_dict())
    with torch.no_grad():
        w = torch.randn(build()[0](x).shape, generator=gen)
    xg = x.clone().requires_grad_(True)
    y = probe(xg)
    trained = [(n, p) for n, p in probe.named_parameters() if p.requires_grad]
    names = [n for n, _ in trained]
    grads = torch.autograd.grad((y * w).sum(), [xg] + [p for _, p in trained])
    arrays = {"x": x, "w": w, "y_train": y.detach(), "grad/x": grads[0]}
    arrays.update({f"grad/{n}": g for n, g in zip(names, grads[1:])})
    arrays.update({f"new/{n}": b.clone() for n, b in probe.named_buffers()})
    stepped = build()[0]
    stepped.load_state_dict(module.state_dict())
    opt = torch.optim.SGD([p for p in stepped.parameters() if p.requires_grad], lr=0.1)
    (stepped(x) * w).sum().backward()
    opt.step()
    arrays.update({f"sgd/{n}": v.clone() for n, v in stepped.state_dict().items()})
    evaluated = build()[0]
    evaluated.load_state_dict(module.state_dict())
    arrays["y_eval"] = evaluated.eval()(x).detach()
    return module, x, {k: v.detach().numpy() for k, v in arrays.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data"))
    parser.add_argument("--only", nargs="*", help="write only these fixtures (names of MODELS, or dropout)")
    args = parser.parse_args()
    for seed, (name, build) in enumerate(MODELS.items()):
        if args.only is not None and name not in args.only:
            continue
        module, x, arrays = reference(build, seed)
        gc.from_torch(module, x).save_onnx(os.path.join(args.out, f"bridge_{name}.onnx"))
        if name == "cnn":
            gc.from_torch(module, x).save_onnx(os.path.join(ROOT, "examples", "data", "bridge_cnn.onnx"))
        np.savez_compressed(os.path.join(args.out, f"bridge_{name}.npz"), **arrays)
        print(f"bridge_{name}: {len(arrays)} arrays")
    if args.only is None or "dropout" in args.only:
        dropout_fixture(args.out)


if __name__ == "__main__":
    main()
