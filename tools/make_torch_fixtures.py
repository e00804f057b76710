"""Export small PyTorch models to ONNX with PyTorch's own gradients, for tests/importer/test_torch_fixtures.py.

Run by hand where torch is installed (the project's tests never import it):

    .venv/bin/python tools/make_torch_fixtures.py [--out tests/data]

For each model (an MLP, a CNN with BatchNorm in eval mode, one nn.TransformerEncoderLayer) it
writes torch_<name>.onnx (TorchScript exporter, opset 17, dynamic batch axis, no constant
folding so initializers keep PyTorch's parameter names) and torch_<name>.npz holding:
  x, y            the input and PyTorch's output
  w               fixed random weights of the scalar loss L = sum(y * w)
  grad__x         dL/dx
  grad__<param>   dL/dparam for every parameter (named as the ONNX initializer)
  v__<param>      a fixed random direction, and
  hvp__<param>    the Hessian-vector product d/dparam <dL/dparams, v>
Parameters and BatchNorm/LayerNorm statistics are randomised before export, so no two
initializers are equal (the exporter would merge equal ones into one).
"""
from __future__ import annotations

import argparse
import io
import math
import os

import numpy as np
import onnx
import torch
import torch.nn.functional as TF
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8), torch.nn.GELU(),
                               torch.nn.Linear(8, 3)), (4, 6)


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 6, 3, stride=2, padding=1), torch.nn.Sigmoid(),
                               torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(6, 5)), (2, 3, 8, 8)


def transformer():
    return torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=24, dropout=0.0, batch_first=True), (2, 5, 16)


def _math_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention written out: the TorchScript exporter of torch 2.13 fails on the
    fused op inside nn.MultiheadAttention (it passes is_causal as a Tensor); same maths."""
    scores = q @ k.transpose(-2, -1) * (scale or 1 / math.sqrt(q.shape[-1]))
    if attn_mask is not None:
        scores = scores + attn_mask
    return torch.softmax(scores, -1) @ v


def _randomise(model: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            gamma = p.ndim == 1 and name.endswith("weight")          # a norm's scale: around 1
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.ndim > 1 else 0.2) + (1.0 if gamma else 0.0))
        for name, b in model.named_buffers():
            if "running_mean" in name:
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)
            elif "running_var" in name:
                b.copy_(torch.rand(b.shape, generator=gen) + 0.5)


def _export(model, x: torch.Tensor) -> onnx.ModelProto:
    buffer = io.BytesIO()
    fused, TF.scaled_dot_product_attention = TF.scaled_dot_product_attention, _math_attention
    try:
        torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=17, do_constant_folding=False,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    finally:
        TF.scaled_dot_product_attention = fused
    return onnx.load_from_string(buffer.getvalue())


def make(name: str, build, out: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    model, in_shape = build()
    model.eval()
    _randomise(model, gen)
    x = torch.randn(in_shape, generator=gen)
    proto = _export(model, x)
    initializers = {t.name for t in proto.graph.initializer}
    params = dict(model.named_parameters())
    missing = sorted(set(params) - initializers)
    if missing:
        raise SystemExit(f"{name}: parameters {missing} are not ONNX initializers; the fixture would be ambiguous")

    x = x.clone().requires_grad_(True)
    with sdpa_kernel(SDPBackend.MATH):      # the fused CPU attention kernel has no double backward
        y = model(x)
    w = torch.randn(y.shape, generator=gen)
    loss = (y * w).sum()
    names = list(params)
    grads = torch.autograd.grad(loss, [x] + [params[n] for n in names], create_graph=True)
    vs = [torch.randn(params[n].shape, generator=gen) for n in names]
    hvps = torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads[1:], vs)), [params[n] for n in names],
                               allow_unused=True)     # None: a parameter the gradient is linear in
    hvps = [torch.zeros_like(params[n]) if h is None else h for n, h in zip(names, hvps)]

    arrays = {"x": x.detach(), "y": y.detach(), "w": w, "grad__x": grads[0].detach()}
    for n, g, v, h in zip(names, grads[1:], vs, hvps):
        arrays.update({f"grad__{n}": g.detach(), f"v__{n}": v, f"hvp__{n}": h.detach()})
    onnx.save(proto, os.path.join(out, f"torch_{name}.onnx"))
    np.savez_compressed(os.path.join(out, f"torch_{name}.npz"),
                        **{k: t.numpy().astype(np.float32) for k, t in arrays.items()})
    print(f"torch_{name}: {len(proto.graph.node)} nodes, {len(names)} params, loss {loss.item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for seed, (name, build) in enumerate((("mlp", mlp), ("cnn", cnn), ("transformer", transformer))):
        make(name, build, args.out, seed)


if __name__ == "__main__":
    main()
