"""Import models that nobody tuned gcompile for, from PyTorch's default exporter, and compare gcompile's
gradient of every parameter with PyTorch's: transformers' architectures, small, and torchvision's
segmentation and video models (any torchvision model, in fact).

Not part of the test suite (it needs torch, torchvision and transformers; the tests use the tiny
fixtures of tools/make_model_fixtures.py). Run where the `bench` extra is installed:

    PYTHONPATH=. python tools/check_held_out.py [--models causal:llama,image:convnext] [--second-order]
        [--json out.json]
    PYTHONPATH=. python tools/check_held_out.py --models torchvision:r3d_18,torchvision:fcn_resnet50

Each model is a held-out zoo entry at its small size (tools/bench/zoo_models.py): "TASK:TYPE"
(held_out_transformers), transformers' default config for TYPE shrunk to a width of 32 and two layers
(image models keep their widths and take 64x64 images), or "torchvision:NAME" (held_out: segmentation
at 96x96, video at 8 frames of 56x56 or 64x64 where the model takes them), random weights, and the
zoo's training step (tools/bench/zoo.py):
exported with `torch.onnx.export(dynamo=True, optimize=False)`, softmax cross-entropy of the logits,
the gradient w.r.t. every parameter the logits read. Every parameter's gradient from gcompile
(float32, ONNX Runtime) is compared with PyTorch's in float64: it passes within 10 times PyTorch's own
float32 error plus 1e-6 of the whole gradient's norm. With --second-order the step also takes the
Hessian-vector product along a random direction of every parameter, against PyTorch's double
backward (eager attention: PyTorch's fused CPU attention has no second derivative), to the same bar.
A model that fails that gets two diagnoses:
  - float64: the exported model widened to float64 (gcompile.testing.float64_model) through gcompile's
    reference evaluator, against PyTorch in float64. Agreement says the translation is right and
    float32 rounding moved the gradient (a ReLU input within rounding of 0 decided the other way).
  - derivative: a float64 central difference of PyTorch's loss along a random direction of the failing
    parameters, against gcompile's and PyTorch's float64 gradients (and of PyTorch's float64 gradient
    along the product's direction, against both products). A model whose autograd.Function writes its
    own approximate backward (YOSO) fails here on PyTorch's side, not on gcompile's; so does the
    second derivative of PyTorch 2.13's weight norm (wav2vec 2.0's positional convolution), which
    fails PyTorch's own gradgradcheck.
PyTorch 2.13 has no second derivative for hardsigmoid (MobileNetV3's squeeze-excitation): its
references compute it as relu6(x + 3) / 6, the same function. A model PyTorch cannot build or export
is reported as such and is not gcompile's failure. Prints one line per model and a summary; exits 1
if a model failed in gcompile or mismatched without a diagnosis clearing it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.bench import zoo  # noqa: E402
from tools.bench.zoo_models import HELD_OUT, HELD_OUT_TRANSFORMERS  # noqa: E402

# Architectures that transformers 5.x builds and PyTorch 2.13's exporter exports at the small size, by task;
# then torchvision's segmentation and video models (its classifiers: tools/check_model_zoo.py), less the
# ResNet-101 and larger Swin3D variants of those listed
MODELS = {
    "causal": "gpt2,llama,mistral,falcon,gptj,codegen,qwen2,qwen3,phi,phi3,gemma,gemma2,gemma3_text,gpt_neo,"
              "gpt_neox,opt,bloom,mpt,stablelm,olmo,olmo2,granite,cohere,starcoder2,biogpt,gpt_bigcode,persimmon,mamba,falcon_mamba,rwkv,"
              "ctrl,glm,helium,smollm3,exaone4,ernie4_5,arcee,seed_oss,nemotron,bitnet",
    "masked": "bert,roberta,albert,electra,distilbert,deberta,deberta-v2,xlm-roberta,mpnet,funnel,camembert,ernie,"
              "roformer,megatron-bert,convbert,nystromformer,ibert,modernbert,rembert,data2vec-text,flaubert,xlm,"
              "big_bird,layoutlm,esm,fnet",
    "seq2seq": "bart,t5,mbart,pegasus,marian,blenderbot,blenderbot-small,m2m_100,prophetnet,plbart,mt5,umt5,"
               "bigbird_pegasus,pegasus_x,nllb-moe",
    "image": "vit,beit,vit_msn,data2vec-vision,convnext,convnextv2,swinv2,resnet,regnet,mobilevit,mobilevitv2,"
             "poolformer,segformer,efficientnet,pvt,pvt_v2,cvt,focalnet,bit,mobilenet_v1,mobilenet_v2,textnet,"
             "hgnet_v2,dinov2,hiera",
    "ctc": "wav2vec2,hubert,wavlm,data2vec-audio,sew,sew-d,unispeech,unispeech-sat",
    "seqcls": "gpt2,llama,bert,funnel,opt",
    "torchvision": "fcn_resnet50,deeplabv3_resnet50,deeplabv3_mobilenet_v3_large,lraspp_mobilenet_v3_large,r3d_18,"
                   "mc3_18,r2plus1d_18,s3d,swin3d_t,mvit_v1_b,mvit_v2_s",
}
TOLERANCE, FLOOR = 10.0, 1e-6
# gcompile's float64 quantities may differ from PyTorch's by what the file rounds to float32 (ONNX's float
# attributes: an exported hardsigmoid's alpha is float32's 1/6, 2e-7 of LR-ASPP's logits); agreeing 100
# times closer than the float32 run still says the translation holds and float32 moved the result
ROUNDING_MARGIN = 0.01


@contextlib.contextmanager
def _twice_differentiable():
    """PyTorch's hardsigmoid, which has no second derivative in PyTorch 2.13, as relu6(x + 3) / 6, the
    same function, whose derivatives PyTorch has (nn.Hardsigmoid calls it through the module's name)."""
    from torch.nn import functional as tf
    original = tf.hardsigmoid
    tf.hardsigmoid = lambda x, inplace=False: tf.relu6(x + 3) / 6
    try:
        yield
    finally:
        tf.hardsigmoid = original


def torch_quantities(module, inputs: dict, labels, directions: list | None = None) -> dict:
    """PyTorch's gradients of the zoo's loss w.r.t. the trained parameters ("gradient") and, given a
    direction per parameter, the Hessian-vector product along them ("hvp"), as numpy arrays in the
    module's precision."""
    import torch
    params = [p for p in module.parameters() if p.requires_grad]
    with _twice_differentiable():
        loss = zoo.torch_loss(module, inputs, labels)
    grads = torch.autograd.grad(loss, params, create_graph=directions is not None)
    out = {"gradient": [g.detach().numpy() for g in grads]}
    if directions is not None:
        along = sum((g * torch.from_numpy(v).to(g.dtype)).sum() for g, v in zip(grads, directions))
        out["hvp"] = [h.numpy() for h in torch.autograd.grad(along, params)]
    return out


def compare(ours: list, torch32: list, reference: list) -> tuple[list[int], float]:
    """The tensors where gcompile misses the bar, and the worst ratio of its error to the bar's scale."""
    total = np.sqrt(sum(float(np.sum(r ** 2)) for r in reference))
    failing, worst = [], 0.0
    for i, (g, t, r) in enumerate(zip(ours, torch32, reference)):
        ours_err, torch_err = float(np.linalg.norm(g - r)), float(np.linalg.norm(t - r))
        worst = max(worst, ours_err / (torch_err + FLOOR * total))
        if ours_err > TOLERANCE * torch_err + FLOOR * total:
            failing.append(i)
    return failing, worst


def _largest_miss(ours: list, reference: list) -> float:
    """The largest tensor's difference over the norm of the whole quantity."""
    return max(float(np.linalg.norm(np.asarray(g, np.float64) - r)) for g, r in zip(ours, reference)) \
        / np.sqrt(sum(float(np.sum(r ** 2)) for r in reference))


def float64_diagnosis(folder: str, meta: dict, arrays: list, labels, directions, reference: dict) -> dict:
    """gcompile's float64 quantities (the widened model through the zoo's training_step on the
    reference evaluator) against PyTorch's float64 ones: for each, the largest tensor's difference
    over the norm of the whole quantity."""
    import onnx

    import gcompile as gc
    from gcompile.frontend.trace import trace
    from gcompile.ir.evaluate import evaluate
    from gcompile.testing import float64_model
    model = gc.load_onnx(float64_model(onnx.load(os.path.join(folder, "model.onnx"))))
    values = [*(a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays), labels,
              *(model.params[n] for n in meta["params"]),
              *(v.astype(np.float64) for v in directions or ())]
    step = zoo.training_step(model, meta["params"], len(arrays), second_order=directions is not None)
    count = len(meta["params"])
    got = evaluate(trace(step, values).graph, values)[1:]
    found = {"gradient": got[:count], "hvp": got[count:]}
    return {name: _largest_miss(found[name], expected) for name, expected in reference.items()}


def _central(wide, wide_inputs: dict, labels, direction: dict, of_loss: bool) -> np.ndarray:
    """The float64 central difference, along `direction` ({parameter index: array}), of the loss
    (of_loss) or of PyTorch's gradient of it (all parameters' gradients flattened together)."""
    import torch
    params = [p for p in wide.parameters() if p.requires_grad]
    # a step small enough that no ReLU-like kink lies within it: at 1e-7 and 1e-8 of the largest parameter,
    # LR-ASPP's gradient crossed kinks and its difference came out 30-40 times too large; at 1e-9 and
    # 1e-10 the two agreed within 1e-7
    scale = 1e-9 * max(float(params[i].detach().abs().max()) for i in direction) or 1e-9
    values = []
    for sign in (1.0, -1.0):
        with torch.no_grad():
            for i, v in direction.items():
                params[i].add_(torch.from_numpy(sign * scale * v))
        if of_loss:
            with torch.no_grad():
                values.append(np.asarray(float(zoo.torch_loss(wide, wide_inputs, labels))))
        else:
            values.append(np.concatenate([g.ravel() for g in torch_quantities(wide, wide_inputs, labels)["gradient"]]))
        with torch.no_grad():
            for i, v in direction.items():
                params[i].sub_(torch.from_numpy(sign * scale * v))
    return (values[0] - values[1]) / (2 * scale)


def derivative_diagnosis(module, inputs: dict, labels, ours: dict, reference: dict, failing: list[int],
                         directions: list | None) -> dict:
    """Float64 central differences: of PyTorch's loss along a random direction of the gradient's
    failing tensors, against gcompile's and PyTorch's float64 gradients along it ("gradient"); and,
    with `directions`, of PyTorch's float64 gradient along them, against both Hessian-vector products
    ("hvp"). Each as the relative differences {"gcompile": ..., "torch64": ...}."""
    wide, wide_inputs = zoo.widened(module, inputs)
    shapes = [p.shape for p in wide.parameters() if p.requires_grad]
    gen = np.random.default_rng(0)
    found = {}
    if failing:
        direction = {i: gen.standard_normal(shapes[i]) for i in failing}
        central = _central(wide, wide_inputs, labels, direction, of_loss=True)
        along = {name: np.asarray(sum(float(np.sum(np.asarray(g[i], np.float64) * v)) for i, v in direction.items()))
                 for name, g in (("gcompile", ours["gradient"]), ("torch64", reference["gradient"]))}
        found["gradient"] = _relative(along, central)
    if directions is not None:
        direction = {i: v.astype(np.float64) for i, v in enumerate(directions)}
        central = _central(wide, wide_inputs, labels, direction, of_loss=False)
        along = {name: np.concatenate([np.asarray(h, np.float64).ravel() for h in products])
                 for name, products in (("gcompile", ours["hvp"]), ("torch64", reference["hvp"]))}
        found["hvp"] = _relative(along, central)
    return found


def _relative(values: dict, central: np.ndarray) -> dict:
    size = max(float(np.linalg.norm(central)), 1e-30)
    return {name: float(np.linalg.norm(value - central)) / size for name, value in values.items()}


def check(spec: str, second_order: bool = False) -> dict:
    """One model: its row (status, figures, diagnoses). A model that PyTorch does not export with
    transformers' default attention is tried again with its eager attention (plain products and a
    softmax), as "TYPE@eager"; with `second_order` every model takes its eager attention (PyTorch's
    fused attention on the CPU has no second derivative)."""
    import torch
    vision = spec.startswith(HELD_OUT)
    if second_order and "@" not in spec and not vision:
        spec += "@eager"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gcompile-held-out-") as folder:
        try:
            meta = zoo.export(spec if vision else HELD_OUT_TRANSFORMERS + spec, True, folder)
        except (Exception, SystemExit) as e:
            if "@" in spec or vision:
                return {"model": spec, "status": "not exported", "why": f"{type(e).__name__}: {str(e)[:300]}"}
            return check(spec + "@eager", second_order)
        module = zoo.torch_module(folder)
        arrays, labels = zoo.load_inputs(folder)
        inputs = {k: torch.from_numpy(v) for k, v in zip(meta["inputs"], arrays)}
        labels = torch.from_numpy(labels)
        trained = [p for p in module.parameters() if p.requires_grad]
        gen = np.random.default_rng(1)
        directions = [gen.standard_normal(p.shape).astype(np.float32) for p in trained] if second_order else None
        try:
            cf, args = zoo.gcompile_step(folder, directions=directions)
            out = cf(*args)
        except (Exception, SystemExit) as e:
            return {"model": spec, "status": "gcompile failed", "why": f"{type(e).__name__}: {str(e)[:600]}",
                    "traceback": traceback.format_exc()[-2000:]}
        ours = {"gradient": list(out[1]), **({"hvp": list(out[2])} if second_order else {})}
        try:
            torch32 = torch_quantities(module, inputs, labels, directions)
            reference = torch_quantities(*zoo.widened(module, inputs), labels, directions)
        except Exception as e:      # (XGLM's mask fills with float32's minimum, which float64 tensors refuse)
            return {"model": spec, "status": "no PyTorch reference", "why": f"{type(e).__name__}: {str(e)[:300]}"}
        row: dict = {"model": spec, "status": "ok", "params": meta["param_count"], "tensors": len(ours["gradient"])}
        failing = {}
        for name in ours:
            missed, row[f"worst_{name}"] = compare(ours[name], torch32[name], reference[name])
            if missed:
                failing[name] = missed
        if failing:
            row.update(status="mismatch", failing={name: [meta["params"][i] for i in missed[:8]] + [len(missed)]
                                                   for name, missed in failing.items()})
            row["float64"] = float64_diagnosis(folder, meta, arrays, labels.numpy(), directions, reference)
            found = row["derivative"] = derivative_diagnosis(module, inputs, labels, ours, reference,
                                                             failing.get("gradient", []),
                                                             directions if "hvp" in failing else None)
            if all(found[name]["torch64"] > 1e-4 >= found[name]["gcompile"] for name in failing):
                row["status"] = "ok (PyTorch's derivative is not its forward's; gcompile's is)"
            elif all(row["float64"][name] < max(1e-8, ROUNDING_MARGIN * _largest_miss(ours[name], reference[name]))
                     for name in failing):
                row["status"] = "ok (float32 rounding: gcompile in float64 agrees)"
    row["seconds"] = time.perf_counter() - t0
    return row


def line(row: dict) -> str:
    text = f"{row['model']:28s} {row['status']}"
    if "why" in row:
        return text + ": " + row["why"].splitlines()[0][:200]
    worst = ", ".join(f"{name} {row['worst_' + name]:.2f}x" for name in ("gradient", "hvp") if "worst_" + name in row)
    text += f" ({row['params']:,} parameters in {row['tensors']} tensors; worst against PyTorch's float32 error: " \
            + worst
    for name, names in row.get("failing", {}).items():
        text += f"; {name}: {names[-1]} tensors over the bar (e.g. {names[0]}), float64 through gcompile within " \
                f"{row['float64'][name]:.1e}"
        if name in row["derivative"]:
            d = row["derivative"][name]
            text += f", from a central difference gcompile {d['gcompile']:.1e} and PyTorch float64 {d['torch64']:.1e}"
    return text + f"; {row['seconds']:.0f} s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="TASK:TYPE or torchvision:NAME, comma-separated (default: every model of MODELS)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--second-order", action="store_true",
                    help="also the Hessian-vector product along a random direction of every parameter")
    a = ap.parse_args()
    specs = a.models.split(",") if a.models else [f"{task}:{kind}" for task, kinds in MODELS.items()
                                                  for kind in kinds.split(",")]
    warnings.filterwarnings("ignore")
    rows = []
    for spec in specs:
        rows.append(check(spec, a.second_order))
        print(line(rows[-1]), flush=True)
    counts: dict = {}
    for row in rows:
        key = row["status"].split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    print("summary: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    sys.exit(1 if counts.get("gcompile failed") or counts.get("mismatch") else 0)


if __name__ == "__main__":
    main()
