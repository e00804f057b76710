"""Import every torchvision classification model (random weights, weights=None) from both PyTorch
exporters with a dynamic batch, and compare gcompile's outputs and gradients with PyTorch's.

Not part of the test suite (the models are far too large to keep as fixtures; the tests use the tiny
ones of tools/make_model_fixtures.py). Run where torch and torchvision are installed:

    .venv-tools/bin/python tools/check_model_zoo.py [--models resnet18,vit_b_16] [--size 64] [--seed 0]
        [--exporters legacy,dynamo] [--max-params 200e6] [--json out.json]

For each model and exporter (`legacy`: TorchScript, opset 17, no constant folding; `dynamo`), with its
1-D parameters and BatchNorm statistics perturbed (see _randomise): export at
batch 2 with the batch axis dynamic, gc.load_onnx it, compile one function returning the output and the
gradients of L = sum(y * w) w.r.t. the input image and the first and last parameters that are still
initializers with their PyTorch values, run it at batch 1 and 2 on ONNX Runtime (float32) and compare
with torch.autograd in float64: gcompile's largest error must stay within 10 times PyTorch's own float32
error (|torch32 - torch64|), or 1e-5 of the largest value (deep networks with random weights and
BatchNorm statistics round visibly in float32, in either implementation). Where that fails, two
diagnoses follow. The float64 model (constants widened) is run on gcompile's reference evaluator against
PyTorch in float64, which tells a translation error from float32 rounding. And kink_diagnosis finds the
rounding that matters: a ReLU input within rounding of 0, or a max-pool window whose two largest inputs
are within rounding of each other, moves a gradient whole; it counts the ReLU signs and max-pool winners
gcompile's float32 run decides otherwise than PyTorch's float64 one and recomputes PyTorch's float64
gradient with gcompile's decisions. --seed seeds the random weights, so a run repeats exactly. Prints one
line per model and exporter (ok, or the first mismatch or error) and a summary. Models over --max-params
(default 200M) are skipped and counted as such: their float32 export, session and gradient graph need
more memory than a 2-core, 24 GB machine shared with other work should give.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
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
    if name.startswith("vit_"):          # a whole number of patches: 32 for /16 and /32, 28 for vit_h_14
        patch = int(name.rsplit("_", 1)[1])
        size = kwargs["image_size"] = VIT_SIZE // patch * patch
    if name in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = torchvision.models.get_model(name, **kwargs).eval()
    _randomise(model)
    return model, SIZES.get(name, size)


def _randomise(model) -> None:
    """Perturb the 1-D parameters and the BatchNorm statistics: torchvision initialises every norm's
    weight and running_var to 1 (biases, running_mean to 0), and the dynamo exporter's optimizer merges
    equal initializers into one, which would make a weight's gradient also count its role as a variance."""
    import torch
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=gen) + 0.5)
            elif name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)


def export(model, x, exporter: str):
    import onnx
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            # over protobuf's 2 GiB the exporter writes only to a file, with the weights beside it
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "model.onnx")
                torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17, do_constant_folding=False,
                                  input_names=["x"], output_names=["y"],
                                  dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
                return onnx.load(path)
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
    return [y.detach().numpy().astype(np.float64)] + [g.numpy().astype(np.float64) for g in grads]


def float64_diagnosis(model, proto, x) -> str:
    """The same model in float64 (its float32 constants widened) on gcompile's reference evaluator against
    PyTorch in float64: tells a translation error from float32 rounding in ONNX Runtime."""
    import onnx
    import torch
    from onnx import TensorProto, numpy_helper

    from gcompile.frontend.trace import trace
    from gcompile.ir.evaluate import evaluate
    wide = onnx.ModelProto()
    wide.CopyFrom(proto)
    graph = wide.graph
    for t in graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in graph.node:
        for a in node.attribute:
            if a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64)))
    f = gc.load_onnx(wide)
    torch64 = copy.deepcopy(model).double()
    xd = x.double().requires_grad_(True)
    y = torch64(xd)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (gx,) = torch.autograd.grad((y * w).sum(), xd)
    xa, wa = xd.detach().numpy(), w.numpy()
    traced = trace(lambda a, b: (f(a), gc.grad(F.sum(f(a) * b), [a])[0]), [xa, wa])
    y_got, gx_got = evaluate(traced.graph, [xa, wa])
    rel = [np.abs(g - e).max() / max(np.abs(e).max(), 1e-30) for g, e in ((y_got, y.detach().numpy()),
                                                                             (gx_got, gx.numpy()))]
    return f"in float64 on the reference evaluator: y and grad x within {max(rel):.1e} of PyTorch's (relative)"


def _kink_inputs(model, x, w, forced=None):
    """PyTorch's float64 input gradient, and (pooling arguments or None, input) for every ReLU and 2-D
    max-pool call in order (modules and functional calls alike: a TorchFunctionMode sees both); with
    `forced` (one array per call), each ReLU's sign and each max-pool's winners are taken from those
    arrays instead of from the float64 values, the gradient still flowing through the float64 ones."""
    import torch
    from torch.nn import functional as tf
    from torch.overrides import TorchFunctionMode
    seen: list = []

    class Decisions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func not in (tf.relu, torch.relu, torch.relu_, tf.max_pool2d):
                return func(*args, **kwargs)
            pool = _pool_arguments(*args, **kwargs) if func is tf.max_pool2d else None
            seen.append((pool, args[0].detach().numpy().copy()))     # before an in-place ReLU overwrites it
            if forced is None:
                return func(*args, **kwargs)
            decided = torch.from_numpy(np.asarray(forced[len(seen) - 1], np.float64))
            if pool is None:
                return args[0] * (decided > 0).double()
            winners = _winners(pool, decided)
            return args[0].flatten(2).gather(2, winners.flatten(2)).view(winners.shape)
    model = copy.deepcopy(model).double()
    xd = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_(True)
    with Decisions():
        y = model(xd)
    (gx,) = torch.autograd.grad((y * torch.from_numpy(np.asarray(w, np.float64))).sum(), xd)
    return gx.numpy(), seen


def _pool_arguments(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if return_indices:
        raise NotImplementedError("a max-pool returning its indices")
    return dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


def _winners(pool: dict, values):
    from torch.nn import functional as tf
    return tf.max_pool2d(values, **pool, return_indices=True)[1]


def kink_diagnosis(model, proto, x, w, params, values, checked_gx, tolerance: float) -> tuple[str, bool]:
    """Where float32 rounding moves a gradient whole: a ReLU input within rounding of 0 (its gradient is 1
    on one side, 0 on the other) or two max-pool inputs within rounding of each other. Taps the input of
    every Relu and MaxPool node from gcompile's float32 run (extra graph outputs), counts the decisions
    that differ from PyTorch's float64 ones, and recomputes PyTorch's float64 input gradient with
    gcompile's decisions: if that matches gcompile's (within `tolerance`, check's), the difference is those
    decisions and nothing else, and the second value returned is True.
    The compiled function is check's step with the taps added (a step without the parameter gradients
    compiles to other float32 arithmetic, which rounds elsewhere). Needs PyTorch's relu and max_pool2d
    calls to come in the order of the exported nodes (else the decisions are not compared)."""
    import onnx
    import torch
    taps = [n for n in proto.graph.node if n.op_type in ("Relu", "MaxPool")]
    tapped = onnx.ModelProto()
    tapped.CopyFrom(proto)
    tapped.graph.output.extend(onnx.helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None)
                               for n in taps)
    f = gc.load_onnx(tapped)

    def step(x, w, *ps):
        y, *inner = f(x, params=dict(zip(params, ps)))
        return (y, *gc.grad(F.sum(y * w), [x, *ps]), *inner)
    compiled = gc.compile(step, f.input_specs()[0], gc.spec(("batch",) + w.shape[1:]), *values, provider="cpu")
    out = compiled(x, w, *values)
    gx, inner = out[1], out[2 + len(params):]
    gx64, seen = _kink_inputs(model, x, w)
    if len(seen) != len(inner) or any(a.shape != b.shape for (_, a), b in zip(seen, inner)):
        return f"; decisions not compared ({len(taps)} Relu/MaxPool nodes, {len(seen)} ReLU/max-pool calls)", False
    relu = pools = 0
    closest = 0.0
    for node, ours, (pool, theirs) in zip(taps, inner, seen):
        if node.op_type != ("Relu" if pool is None else "MaxPool"):
            return f"; decisions not compared ({node.name!r} is not the call made there)", False
        if node.op_type == "Relu":
            flipped = (ours > 0) != (theirs > 0)
            relu += int(flipped.sum())
            if flipped.any():
                closest = max(closest, float(np.abs(theirs[flipped]).max() / np.abs(theirs).max()))
        else:
            pools += int((_winners(pool, torch.from_numpy(ours.astype(np.float64)))
                          != _winners(pool, torch.from_numpy(theirs))).sum())
    forced, _ = _kink_inputs(model, x, w, forced=inner)
    err = np.abs(gx - forced).max()
    rel = err / np.abs(gx64).max()
    where = f" (ReLU inputs within {closest:.1e} of their layer's largest)" if relu else ""
    same = np.array_equal(gx, checked_gx)
    text = (f"; {relu} ReLU sign(s) and {pools} max-pool winner(s) of gcompile's float32 run differ from "
            f"PyTorch's float64 ones{where}; with gcompile's decisions PyTorch's float64 grad x is within "
            f"{rel:.1e} of gcompile's" + ("" if same else " (this run's grad x is not bitwise the checked one)"))
    return text, bool(same and relu + pools > 0 and err <= tolerance)


def check(name: str, exporter: str, size: int, max_params: float, seed: int = 0) -> str:
    import torch
    torch.manual_seed(seed)        # torchvision's initialisation draws from the global generator
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
    wide = copy.deepcopy(model).double()
    compiled = None
    for batch in (1, 2):
        x = torch.randn(batch, 3, size, size, generator=gen)
        with torch.no_grad():
            y_shape = model(x).shape
        w = torch.randn(y_shape, generator=gen)
        want32 = reference(model, x, params, w)
        want64 = reference(wide, x.double(), params, w.double())
        if compiled is None:
            compiled = gc.compile(step, spec, gc.spec(("batch",) + tuple(y_shape[1:])), *values, provider="cpu")
        got = compiled(x.numpy(), w.numpy(), *values)
        for what, g, e32, e64 in zip(["y", "grad x"] + [f"grad {p}" for p in params], got, want32, want64):
            if g.shape != e64.shape:
                return f"{what} at batch {batch}: shape {g.shape}, PyTorch's {e64.shape}"
            err, torch_err = np.abs(g - e64).max(), np.abs(e32 - e64).max()
            tolerance = max(10 * torch_err, 1e-5 * np.abs(e64).max())
            if err > tolerance:
                text = (f"{what} at batch {batch} differs: max error {err:.3g} against PyTorch in float64, whose own "
                        f"float32 error is {torch_err:.3g} (max |value| {np.abs(e64).max():.3g}); "
                        + float64_diagnosis(model, proto, x))
                kink = False
                if what == "grad x":
                    more, kink = kink_diagnosis(model, proto, x.numpy(), w.numpy(), params, values, g, tolerance)
                    text += more
                return ("kink: " if kink else "") + text
    return f"ok ({len(params)} params checked)"


def main() -> None:
    import torchvision
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated (default: every classification model)")
    parser.add_argument("--exporters", default="legacy,dynamo")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--max-params", type=float, default=200e6, help="skip larger models (memory and time)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random weights (a run repeats exactly)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else sorted(torchvision.models.list_models(torchvision.models))
    results = {}
    for name in names:
        for exporter in args.exporters.split(","):
            start = time.time()
            try:
                outcome = check(name, exporter, args.size, args.max_params, args.seed)
            except Exception as err:  # noqa: BLE001 - every failure is reported, the others go on
                outcome = f"error: {type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err) else ''}"
            results[f"{name}/{exporter}"] = outcome
            print(f"{name:24s} {exporter:7s} {time.time() - start:6.1f}s  {outcome}", flush=True)
    ok = sum(v.startswith("ok") for v in results.values())
    kinks = sum(v.startswith("kink") for v in results.values())
    skipped = sum(v.startswith("skipped") for v in results.values())
    print(f"\n{ok} of {len(results) - skipped} model/exporter pairs match PyTorch; {kinks} more differ only by "
          f"float32 ReLU or max-pool decisions ({skipped} skipped by size)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
