"""Import every torchvision classification model (random weights, weights=None) from both PyTorch
exporters with a dynamic batch, and compare gcompile's outputs and gradients with PyTorch's.

Not part of the test suite (the models are far too large to keep as fixtures; the tests use the tiny
ones of tools/make_model_fixtures.py). Run where torch and torchvision are installed:

    .venv-tools/bin/python tools/check_model_zoo.py [--models resnet18,vit_b_16] [--size 64] [--json out.json]

For each model and exporter (`legacy`: TorchScript, opset 17, no constant folding; `dynamo`): export at
batch 2 with the batch axis dynamic, gc.load_onnx it, compile one function returning the output and the
gradients of L = sum(y * w) w.r.t. the input image and the first and last parameters that are still
initializers with their PyTorch values, run it at batch 1 and 2 on ONNX Runtime (float32) and compare
with torch.autograd: |got - want| <= 1e-3 * |want| + 1e-4 * max|want|. Prints one line per model and
exporter (ok, or the first mismatch or error) and a summary. Models over --max-params (default 200M) are
skipped and counted as such: their float32 export, session and gradient graph need more memory than a
2-core, 24 GB machine shared with other work should give.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gcompile as gc
import gcompile.functions as F

# models that need a given input size (the rest run at --size): a fixed adaptive pooling the TorchScript
# exporter handles only when it divides its input, fixed windows; vision transformers take image_size
SIZES = {"alexnet": 224, "vgg11": 224, "vgg11_bn": 224, "vgg13": 224, "vgg13_bn": 224, "vgg16": 224, "vgg16_bn": 224,
         "vgg19": 224, "vgg19_bn": 224, "inception_v3": 96, "maxvit_t": 224, "swin_t": 64, "swin_s": 64,
         "swin_b": 64, "swin_v2_t": 64, "swin_v2_s": 64, "swin_v2_b": 64}
VIT_SIZE = 32


def build(name: str, size: int):
    import torchvision
    kwargs = {"weights": None}
    if name.startswith("vit_"):
        kwargs["image_size"] = VIT_SIZE
        size = VIT_SIZE
    if name in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = torchvision.models.get_model(name, **kwargs).eval()
    return model, SIZES.get(name, size)


def export(model, x, exporter: str):
    import onnx
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            buffer = io.BytesIO()
            torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=17, do_constant_folding=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
            return onnx.load_from_string(buffer.getvalue())
        batch = torch.export.Dim("batch", min=1, max=64)
        return torch.onnx.export(model, (x,), dynamo=True, input_names=["x"], output_names=["y"],
                                 dynamic_shapes=({0: batch},), verbose=False).model_proto


def kept_params(model, proto):
    """The first and last parameters stored unchanged as initializers (the dynamo exporter folds some)."""
    from onnx import numpy_helper
    inits = {t.name: t for t in proto.graph.initializer}
    named = [(n, p) for n, p in model.named_parameters() if n in inits]
    kept = [n for n, p in named if np.array_equal(numpy_helper.to_array(inits[n]), p.detach().numpy())]
    return [kept[0], kept[-1]] if len(kept) > 1 else kept


def reference(model, x, params, w):
    import torch
    named = dict(model.named_parameters())
    x = x.clone().requires_grad_(True)
    y = model(x)
    grads = torch.autograd.grad((y * w).sum(), [x] + [named[p] for p in params])
    return y.detach().numpy(), [g.numpy() for g in grads]


def check(name: str, exporter: str, size: int, max_params: float) -> str:
    import torch
    model, size = build(name, size)
    count = sum(p.numel() for p in model.parameters())
    if count > max_params:
        return f"skipped: {count / 1e6:.0f}M parameters (over --max-params)"
    gen = torch.Generator().manual_seed(0)
    x2 = torch.randn(2, 3, size, size, generator=gen)
    proto = export(model, x2, exporter)
    params = kept_params(model, proto)
    f = gc.load_onnx(proto)
    (spec,) = f.input_specs()
    if spec.shape[0] != "batch":
        return f"the batch axis is not symbolic: {spec.shape}"

    def step(x, w, *ps):
        y = f(x, params=dict(zip(params, ps)))
        return (y,) + tuple(gc.grad(F.sum(y * w), [x, *ps]))
    values = [f.params[p] for p in params]
    compiled = None
    for batch in (1, 2):
        x = torch.randn(batch, 3, size, size, generator=gen)
        with torch.no_grad():
            y_shape = model(x).shape
        w = torch.randn(y_shape, generator=gen)
        want_y, want_grads = reference(model, x, params, w)
        if compiled is None:
            compiled = gc.compile(step, spec, gc.spec(("batch",) + tuple(y_shape[1:])), *values, provider="cpu")
        got = compiled(x.numpy(), w.numpy(), *values)
        for what, g, e in zip(["y", "grad x"] + [f"grad {p}" for p in params], got, [want_y] + want_grads):
            tol = 1e-3 * np.abs(e) + 1e-4 * np.abs(e).max()
            if g.shape != e.shape or not np.all(np.abs(g - e) <= tol):
                err = np.abs(g - e).max() if g.shape == e.shape else f"shape {g.shape} vs {e.shape}"
                return f"{what} at batch {batch} differs (max abs error {err}, max |want| {np.abs(e).max():.3g})"
    return f"ok ({len(params)} params checked)"


def main() -> None:
    import torchvision
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated (default: every classification model)")
    parser.add_argument("--exporters", default="legacy,dynamo")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--max-params", type=float, default=200e6, help="skip larger models (memory and time)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else sorted(torchvision.models.list_models(torchvision.models))
    results = {}
    for name in names:
        for exporter in args.exporters.split(","):
            start = time.time()
            try:
                outcome = check(name, exporter, args.size, args.max_params)
            except Exception as err:  # noqa: BLE001 - every failure is reported, the others go on
                outcome = f"error: {type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err) else ''}"
            results[f"{name}/{exporter}"] = outcome
            print(f"{name:24s} {exporter:7s} {time.time() - start:6.1f}s  {outcome}", flush=True)
    ok = sum(v.startswith("ok") for v in results.values())
    skipped = sum(v.startswith("skipped") for v in results.values())
    print(f"\n{ok} of {len(results) - skipped} model/exporter pairs match PyTorch ({skipped} skipped by size)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
