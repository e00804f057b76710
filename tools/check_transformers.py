"""Import transformers' architectures that nobody tuned gcompile for, small, from PyTorch's default exporter,
and compare gcompile's gradient of every parameter with PyTorch's.

Not part of the test suite (it needs torch and transformers; the tests use the tiny fixtures of
tools/make_model_fixtures.py). Run where the `bench` extra is installed:

    PYTHONPATH=. python tools/check_transformers.py [--models causal:llama,image:convnext] [--json out.json]

Each model is a held-out zoo entry, "TASK:TYPE" (tools/bench/zoo_models.py, held_out_transformers):
transformers' default config for TYPE shrunk to a width of 32 and two layers (image models keep their
widths and take 64x64 images), random weights, and the zoo's training step (tools/bench/zoo.py):
exported with `torch.onnx.export(dynamo=True, optimize=False)`, softmax cross-entropy of the logits,
the gradient w.r.t. every parameter the logits read. Every parameter's gradient from gcompile
(float32, ONNX Runtime) is compared with PyTorch's in float64: it passes within 10 times PyTorch's own
float32 error plus 1e-6 of the whole gradient's norm. A model that fails that gets two diagnoses:
  - float64: the exported model widened to float64 (gcompile.testing.float64_model) through gcompile's
    reference evaluator, against PyTorch in float64. Agreement says the translation is right and
    float32 rounding moved the gradient (a ReLU input within rounding of 0 decided the other way).
  - derivative: a float64 central difference of PyTorch's loss along a random direction of the failing
    parameters, against gcompile's and PyTorch's float64 gradients. A model whose autograd.Function
    writes its own approximate backward (YOSO) fails here on PyTorch's side, not on gcompile's.
A model PyTorch cannot build or export is reported as such and is not gcompile's failure. Prints one
line per model and a summary; exits 1 if a model failed in gcompile or mismatched without a diagnosis
clearing it.
"""
from __future__ import annotations

import argparse
import copy
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
from tools.bench.zoo_models import HELD_OUT_TRANSFORMERS  # noqa: E402

# Architectures that transformers 5.x builds and PyTorch 2.13's exporter exports at the small size, by task.
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
}
TOLERANCE, FLOOR = 10.0, 1e-6


def _torch_grads(module, inputs: dict, labels) -> list:
    return [g.numpy() for g in zoo.torch_step(module, inputs, labels)()[1]]


def _wide(module, inputs: dict):
    return copy.deepcopy(module).double(), {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}


def float64_diagnosis(folder: str, meta: dict, arrays: list, labels, reference: list) -> float:
    """gcompile's float64 gradients (widened model, reference evaluator) against PyTorch's float64 ones:
    the largest parameter's difference over the norm of the whole gradient."""
    import onnx

    import gcompile as gc
    import gcompile.functions as F
    from gcompile.frontend.trace import trace
    from gcompile.ir.evaluate import evaluate
    from gcompile.testing import float64_model
    model = gc.load_onnx(float64_model(onnx.load(os.path.join(folder, "model.onnx"))))
    values = [*(a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays), labels,
              *(model.params[n] for n in meta["params"])]
    count = len(arrays)

    def step(*args):
        ps = list(args[count + 1:])
        logits = model(*args[:count], params=dict(zip(meta["params"], ps)))
        return gc.grad(F.softmax_cross_entropy(logits, args[count]), ps)
    got = evaluate(trace(step, values).graph, values)
    total = np.sqrt(sum(float(np.sum(r ** 2)) for r in reference))
    return max(float(np.linalg.norm(g - r)) for g, r in zip(got, reference)) / total


def derivative_diagnosis(module, inputs: dict, labels, failing: list[int], ours: list, reference: list) -> dict:
    """A float64 central difference of PyTorch's loss along a random direction v of the failing
    parameters, against gcompile's and PyTorch's float64 gradients along v (relative differences)."""
    import torch
    wide, wide_inputs = _wide(module, inputs)
    params = [p for p in wide.parameters() if p.requires_grad]
    gen = np.random.default_rng(0)
    direction = {i: gen.standard_normal(params[i].shape) for i in failing}
    scale = 1e-6 * max(float(params[i].detach().abs().max()) for i in failing) or 1e-6

    def loss(sign: float) -> float:
        with torch.no_grad():
            for i, v in direction.items():
                params[i].add_(torch.from_numpy(sign * scale * v))
            value = float(torch.nn.functional.cross_entropy(wide(**wide_inputs).flatten(0, -2), labels.flatten()))
            for i, v in direction.items():
                params[i].sub_(torch.from_numpy(sign * scale * v))
        return value
    central = (loss(1.0) - loss(-1.0)) / (2 * scale)
    along = {name: sum(float(np.sum(np.asarray(g[i], np.float64) * v)) for i, v in direction.items())
             for name, g in (("gcompile", ours), ("torch64", reference))}
    size = max(abs(central), 1e-30)
    return {name: abs(value - central) / size for name, value in along.items()}


def check(spec: str) -> dict:
    """One model: its row (status, figures, diagnoses). A model that PyTorch does not export with
    transformers' default attention is tried again with its eager attention (plain products and a
    softmax), as "TYPE@eager"."""
    import torch
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gcompile-transformers-") as folder:
        try:
            meta = zoo.export(HELD_OUT_TRANSFORMERS + spec, True, folder)
        except (Exception, SystemExit) as e:
            if "@" in spec:
                return {"model": spec, "status": "not exported", "why": f"{type(e).__name__}: {str(e)[:300]}"}
            return check(spec + "@eager")
        module = zoo.torch_module(folder)
        arrays, labels = zoo.load_inputs(folder)
        inputs = {k: torch.from_numpy(v) for k, v in zip(meta["inputs"], arrays)}
        labels = torch.from_numpy(labels)
        try:
            cf, args = zoo.gcompile_step(folder)
            ours = list(cf(*args)[1])
        except (Exception, SystemExit) as e:
            return {"model": spec, "status": "gcompile failed", "why": f"{type(e).__name__}: {str(e)[:600]}",
                    "traceback": traceback.format_exc()[-2000:]}
        torch32 = _torch_grads(module, inputs, labels)
        try:
            reference = _torch_grads(*_wide(module, inputs), labels)
        except Exception as e:      # (XGLM's mask fills with float32's minimum, which float64 tensors refuse)
            return {"model": spec, "status": "no float64 reference", "why": f"{type(e).__name__}: {str(e)[:300]}"}
        total = np.sqrt(sum(float(np.sum(r ** 2)) for r in reference))
        failing, worst = [], 0.0
        for i, (g, t, r) in enumerate(zip(ours, torch32, reference)):
            ours_err, torch_err = float(np.linalg.norm(g - r)), float(np.linalg.norm(t - r))
            worst = max(worst, ours_err / (torch_err + FLOOR * total))
            if ours_err > TOLERANCE * torch_err + FLOOR * total:
                failing.append(i)
        row = {"model": spec, "status": "ok", "params": meta["param_count"], "tensors": len(ours),
               "worst_over_torch32": worst, "seconds": 0.0}
        if failing:
            row.update(status="mismatch", failing=[meta["params"][i] for i in failing[:8]],
                       failing_count=len(failing))
            row["float64"] = float64_diagnosis(folder, meta, arrays, labels.numpy(), reference)
            row["derivative"] = derivative_diagnosis(module, inputs, labels, failing, ours, reference)
            if row["derivative"]["torch64"] > 1e-4 >= row["derivative"]["gcompile"]:
                row["status"] = "ok (PyTorch's backward is not its forward's derivative)"
            elif row["float64"] < 1e-8:
                row["status"] = "ok (float32 rounding: gcompile in float64 agrees)"
    row["seconds"] = time.perf_counter() - t0
    return row


def line(row: dict) -> str:
    text = f"{row['model']:28s} {row['status']}"
    if "why" in row:
        return text + ": " + row["why"].splitlines()[0][:200]
    text += f" ({row['params']:,} parameters in {row['tensors']} tensors, worst {row['worst_over_torch32']:.2f}x " \
            "PyTorch's float32 error"
    if "float64" in row:
        d = row["derivative"]
        text += f"; {row['failing_count']} over the bar, e.g. {row['failing'][0]}; float64 through gcompile within " \
                f"{row['float64']:.1e}; along a direction: gcompile {d['gcompile']:.1e}, PyTorch float64 " \
                f"{d['torch64']:.1e} from the central difference"
    return text + f"; {row['seconds']:.0f} s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="TASK:TYPE,... (default: every model of MODELS)")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    specs = a.models.split(",") if a.models else [f"{task}:{kind}" for task, kinds in MODELS.items()
                                                  for kind in kinds.split(",")]
    warnings.filterwarnings("ignore")
    rows = []
    for spec in specs:
        rows.append(check(spec))
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
