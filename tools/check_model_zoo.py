"""Import every torchvision classification model (random weights, weights=None) from both PyTorch
exporters with a dynamic batch, and compare gcompile's outputs and gradients with PyTorch's.

Not part of the test suite (the models are far too large to keep as fixtures; the tests use the tiny
ones of tools/make_model_fixtures.py). Run where torch and torchvision are installed:

    .venv-tools/bin/python tools/check_model_zoo.py [--models resnet18,vit_b_16] [--size 64] [--seed 0]
        [--exporters legacy,dynamo,dynamo_raw] [--batches 1,2] [--calibrate] [--every-param]
        [--max-params 200e6] [--json out.json]
    .venv-tools/bin/python tools/check_model_zoo.py --bar [--exporters legacy,dynamo,dynamo_raw]

For each model and exporter (`legacy`: TorchScript, opset 17, no constant folding; `dynamo`: its
optimizer on, as by default; `dynamo_raw`: optimize=False, every size computation and BatchNorm left in
the file, so every weight keeps its PyTorch value and gradient), with its 1-D parameters and BatchNorm
statistics perturbed (see _randomise; --calibrate measures the statistics instead): export at
batch 2 with the batch axis dynamic, gc.load_onnx it, compile one function returning the output and the
gradients of L = sum(y * w) w.r.t. the input image and the first and last parameters that are still
initializers with their PyTorch values (--every-param: all of them, each mismatch listed), run it at
batch 1 and 2 (--batches) on ONNX Runtime (float32) and compare
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

--bar runs the release bar: BAR's models at their sizes (the last stages of both reach 1x1 or 2x2
inputs, where a kernel's taps lie in the zero padding), batch 8, calibrated, every parameter.
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

from torchvision_compat import import_torchvision

import gcompile as gc
import gcompile.functions as F

# models that need a given input size (the rest run at --size): a fixed adaptive pooling the TorchScript
# exporter handles only when it divides its input, fixed windows; vision transformers take image_size
SIZES = {"alexnet": 224, "vgg11": 224, "vgg11_bn": 224, "vgg13": 224, "vgg13_bn": 224, "vgg16": 224, "vgg16_bn": 224,
         "vgg19": 224, "vgg19_bn": 224, "inception_v3": 96, "maxvit_t": 224, "swin_t": 64, "swin_s": 64,
         "swin_b": 64, "swin_v2_t": 64, "swin_v2_s": 64, "swin_v2_b": 64}
VIT_SIZE = 32
# the release bar (--bar): EfficientNet-B0 at 64x64 (its 5x5 depthwise layers reach 2x2 and 4x4 inputs) and
# ResNet-18 at 32x32 (its last stage runs on 1x1 inputs, where most 3x3 taps lie in the zero padding)
BAR = {"efficientnet_b0": 64, "resnet18": 32}
BAR_BATCH = 8


def build(name: str, size: int):
    torchvision = import_torchvision()
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


def calibrate(model, size: int, batch: int, steps: int = 4) -> None:
    """BatchNorm statistics measured on random inputs (the average over `steps` training-mode passes of
    `batch` images) instead of random ones: each BatchNorm then normalises its input as in a trained
    network, so deep models keep activations of order 1 and their gradients meaningful."""
    import torch
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    gen = torch.Generator().manual_seed(3)
    for m in norms:
        m.reset_running_stats()
        m.momentum = None                   # a cumulative average over the passes
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn(batch, 3, size, size, generator=gen))
    model.eval()


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
                                 dynamic_shapes=({0: batch},), verbose=False,
                                 optimize=exporter == "dynamo").model_proto


def kept_params(model, proto, every: bool = False):
    """The first and last parameters stored unchanged as initializers (the dynamo exporter's optimizer folds
    some), or all of them (`every`)."""
    from onnx import numpy_helper
    inits = {t.name: t for t in proto.graph.initializer}
    named = [(n, p) for n, p in model.named_parameters() if n in inits]
    kept = [n for n, p in named if np.array_equal(numpy_helper.to_array(inits[n]), p.detach().numpy())]
    return kept if every or len(kept) < 2 else [kept[0], kept[-1]]


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
    import torch

    from gcompile.frontend.trace import trace
    from gcompile.ir.evaluate import evaluate
    from gcompile.testing import float64_model
    f = gc.load_onnx(float64_model(proto))
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


def _kink_inputs(model, x, w, forced=None, params=()):
    """PyTorch's float64 gradients w.r.t. the input and `params`, and (pooling arguments or None, input)
    for every ReLU and 2-D max-pool call in order (modules and functional calls alike: a TorchFunctionMode
    sees both); with `forced` (one array per call), each ReLU's sign and each max-pool's winners are taken
    from those arrays instead of from the float64 values, the gradient still flowing through the float64
    ones."""
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
    named = dict(model.named_parameters())
    xd = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_(True)
    with Decisions():
        y = model(xd)
    gx, *grads = torch.autograd.grad((y * torch.from_numpy(np.asarray(w, np.float64))).sum(),
                                     [xd] + [named[p] for p in params])
    return gx.numpy(), [g.numpy() for g in grads], seen


def _pool_arguments(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if return_indices:
        raise NotImplementedError("a max-pool returning its indices")
    return dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


def _winners(pool: dict, values):
    from torch.nn import functional as tf
    return tf.max_pool2d(values, **pool, return_indices=True)[1]


def kink_diagnosis(model, proto, x, w, params, values, checked_gx, tolerance: float) -> tuple[str, bool, list]:
    """Where float32 rounding moves a gradient whole: a ReLU input within rounding of 0 (its gradient is 1
    on one side, 0 on the other) or two max-pool inputs within rounding of each other. Taps the input of
    every Relu and MaxPool node from gcompile's float32 run (extra graph outputs), counts the decisions
    that differ from PyTorch's float64 ones, and recomputes PyTorch's float64 input gradient with
    gcompile's decisions: if that matches gcompile's (within `tolerance`, check's), the difference is those
    decisions and nothing else, and the second value returned is True. The third is PyTorch's float64
    gradients w.r.t. `params` with gcompile's decisions (empty where the decisions were not compared), which
    check compares the parameters' gradients with after such a kink.
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
    gx64, _, seen = _kink_inputs(model, x, w)
    if len(seen) != len(inner) or any(a.shape != b.shape for (_, a), b in zip(seen, inner)):
        return (f"; decisions not compared ({len(taps)} Relu/MaxPool nodes, {len(seen)} ReLU/max-pool calls)", False,
                [])
    relu = pools = 0
    closest = 0.0
    for node, ours, (pool, theirs) in zip(taps, inner, seen):
        if node.op_type != ("Relu" if pool is None else "MaxPool"):
            return f"; decisions not compared ({node.name!r} is not the call made there)", False, []
        if node.op_type == "Relu":
            flipped = (ours > 0) != (theirs > 0)
            relu += int(flipped.sum())
            if flipped.any():
                closest = max(closest, float(np.abs(theirs[flipped]).max() / np.abs(theirs).max()))
        else:
            pools += int((_winners(pool, torch.from_numpy(ours.astype(np.float64)))
                          != _winners(pool, torch.from_numpy(theirs))).sum())
    forced, forced_params, _ = _kink_inputs(model, x, w, forced=inner, params=params)
    err = np.abs(gx - forced).max()
    rel = err / np.abs(gx64).max()
    where = f" (ReLU inputs within {closest:.1e} of their layer's largest)" if relu else ""
    same = np.array_equal(gx, checked_gx)
    text = (f"; {relu} ReLU sign(s) and {pools} max-pool winner(s) of gcompile's float32 run differ from "
            f"PyTorch's float64 ones{where}; with gcompile's decisions PyTorch's float64 grad x is within "
            f"{rel:.1e} of gcompile's" + ("" if same else " (this run's grad x is not bitwise the checked one)"))
    return text, bool(same and relu + pools > 0 and err <= tolerance), forced_params


def check(name: str, exporter: str, size: int, max_params: float, seed: int = 0, batches=(1, 2),
          calibrated: bool = False, every: bool = False) -> str:
    """One model through one exporter: `batches` to run (the export is at batch 2, the batch dynamic),
    `calibrated` BatchNorm statistics (else random ones), the gradient of `every` parameter kept unchanged
    (else the first and last), their mismatches all listed. A mismatch of y or grad x stops the check,
    except, with `every`, a grad x that only float32 ReLU or max-pool decisions move (a kink): the
    parameters' gradients are then compared with PyTorch's float64 ones under gcompile's decisions (the
    tolerance still from PyTorch's own float32 error without them)."""
    import torch
    torch.manual_seed(seed)        # torchvision's initialisation draws from the global generator
    model, size = build(name, size)
    count = sum(p.numel() for p in model.parameters())
    if count > max_params:
        return f"skipped: {count / 1e6:.0f}M parameters (over --max-params)"
    if calibrated:
        calibrate(model, size, max(batches))
    gen = torch.Generator().manual_seed(0)
    x2 = torch.randn(2, 3, size, size, generator=gen)
    proto = export(model, x2, exporter)
    params = kept_params(model, proto, every)
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
    wrong: list = []
    kinks: list = []
    for batch in batches:
        x = torch.randn(batch, 3, size, size, generator=gen)
        with torch.no_grad():
            y_shape = model(x).shape
        w = torch.randn(y_shape, generator=gen)
        want32 = reference(model, x, params, w)
        want64 = reference(wide, x.double(), params, w.double())
        if compiled is None:
            compiled = gc.compile(step, spec, gc.spec(("batch",) + tuple(y_shape[1:])), *values, provider="cpu")
        got = compiled(x.numpy(), w.numpy(), *values)
        decided: list = []             # PyTorch's float64 parameter gradients with gcompile's kink decisions
        differ: list = []              # (parameter gradient, PyTorch's float32 error) out of tolerance
        gx_tolerance = 0.0
        for i, (what, g, e32, e64) in enumerate(zip(["y", "grad x"] + [f"grad {p}" for p in params], got, want32,
                                                    want64)):
            if g.shape != e64.shape:
                return f"{what} at batch {batch}: shape {g.shape}, PyTorch's {e64.shape}"
            torch_err = np.abs(e32 - e64).max()
            e64 = decided[i - 2] if decided else e64
            err, largest = np.abs(g - e64).max(), np.abs(e64).max()
            tolerance = max(10 * torch_err, 1e-5 * largest)
            gx_tolerance = tolerance if what == "grad x" else gx_tolerance
            if err <= tolerance:
                continue
            if what not in ("y", "grad x"):
                differ.append((i, torch_err))
                continue
            text = (f"{what} at batch {batch} differs: max error {err:.3g} against PyTorch in float64, whose own "
                    f"float32 error is {torch_err:.3g} (max |value| {largest:.3g}); "
                    + float64_diagnosis(model, proto, x))
            kink = False
            if what == "grad x":
                more, kink, decided = kink_diagnosis(model, proto, x.numpy(), w.numpy(), params, values, g, tolerance)
                text += more
            if not (kink and every):
                return ("kink: " if kink else "") + text
            kinks.append(text)
        if differ and not decided:
            # grad x within tolerance, yet parameter gradients out of it: a ReLU or max-pool decision that
            # moves the input gradient less than its tolerance still moves the parameters' upstream of it
            text, kink, decided = kink_diagnosis(model, proto, x.numpy(), w.numpy(), params, values, got[1],
                                                 gx_tolerance)
            if kink:
                kinks.append(f"at batch {batch}, grad x within tolerance{text}")
        for i, torch_err in differ:
            e64 = decided[i - 2] if decided else want64[i]
            err, largest = np.abs(got[i] - e64).max(), np.abs(e64).max()
            if err > max(10 * torch_err, 1e-5 * largest):
                wrong.append(f"grad {params[i - 2]} at batch {batch}: max error {err:.3g} = {err / largest:.2g} of "
                             f"its largest value {largest:.3g} (PyTorch's float32 error {torch_err:.3g})")
    text = "; ".join(kinks + ([f"{len(wrong)} parameter gradient(s) differ: " + "; ".join(wrong)] if wrong else []))
    if kinks and not wrong:
        text += f"; all {len(params)} parameter gradients match PyTorch's float64 ones with gcompile's decisions"
    if kinks or wrong:
        return ("kink: " if not wrong else "") + text
    return f"ok ({len(params)} params checked, batch {', '.join(map(str, batches))})"


def main() -> None:
    torchvision = import_torchvision()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated (default: every classification model)")
    parser.add_argument("--exporters", default="legacy,dynamo")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--max-params", type=float, default=200e6, help="skip larger models (memory and time)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random weights (a run repeats exactly)")
    parser.add_argument("--batches", default="1,2", help="comma-separated batch sizes to run (the export is at 2)")
    parser.add_argument("--calibrate", action="store_true", help="BatchNorm statistics measured on random inputs")
    parser.add_argument("--every-param", action="store_true", help="check the gradient of every kept parameter")
    parser.add_argument("--bar", action="store_true", help="the release bar: " + ", ".join(
        f"{n} at {s}x{s}" for n, s in BAR.items()) + f", batch {BAR_BATCH}, --calibrate --every-param")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.bar:
        sizes, batches, calibrated, every = dict(BAR), (BAR_BATCH,), True, True
    else:
        names = args.models.split(",") if args.models else sorted(torchvision.models.list_models(torchvision.models))
        sizes = dict.fromkeys(names, args.size)
        batches = tuple(int(b) for b in args.batches.split(","))
        calibrated, every = args.calibrate, args.every_param
    results = {}
    for name, size in sizes.items():
        for exporter in args.exporters.split(","):
            start = time.time()
            try:
                outcome = check(name, exporter, size, args.max_params, args.seed, batches, calibrated, every)
            except Exception as err:  # noqa: BLE001 - every failure is reported, the others go on
                outcome = f"error: {type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err) else ''}"
            results[f"{name}/{exporter}"] = outcome
            print(f"{name:24s} {exporter:10s} {time.time() - start:6.1f}s  {outcome}", flush=True)
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
