"""Export two-layer BERT, DistilBERT, GPT-2 and T5 encoders with the dynamo exporter, unoptimised, with
PyTorch's outputs, gradients and second derivatives, for tests/importer/test_dynamo_fixtures.py.

Run by hand where torch, transformers and onnxscript are installed (the tests never import them):

    .venv-tools/bin/python tools/make_dynamo_fixtures.py [--out tests/data/dynamo] [--only bert,gpt2]

`torch.onnx.export(..., dynamo=True, optimize=False)` with a symbolic batch keeps every size
computation torch.export traced: the batch flows through Shape, Squeeze, CastLike, Range, Concat,
Reshape, Expand and the mask arithmetic (importer/sizes.py follows it). The sibling
make_model_fixtures.py exports with the optimizer on, which folds most of that away.

Each model (eager attention, 2 layers, hidden 64, 2 heads, vocabulary 64) takes `inputs_embeds`
(float, so the input has a gradient) and an `attention_mask` with padding, batch axis dynamic, random
weights (every parameter differs, so no two initializers are equal and the exporter aliases none).
The references are computed in float64 by PyTorch (the model widened), saved as float32 in
<name>.npz beside <name>.onnx, for the batch sizes 2 and 3 (suffix _b2, _b3; v and hvp at batch 2 only):
  in__<input>        the model's inputs
  y                  last_hidden_state
  w                  fixed random weights of the scalar loss L = sum(y * w)
  grad__<name>       dL/dinputs_embeds and dL/d<param> for the parameters in `params` (initializer names)
  v__<name>          a random direction for inputs_embeds and for the first parameter
  hvp_x__<name>      d/d<name> <dL/dinputs_embeds, v__inputs_embeds>  (second order through the input)
  hvp_p__<name>      d/d<name> <dL/d(first param), v__(first param)>   (second order through the weights)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import warnings

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import Wrapped  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCHES = (2, 3)
LENGTH, WIDTH, VOCAB = 6, 64, 64


def bert():
    from transformers import BertConfig, BertModel
    return BertModel(BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=2 * WIDTH, max_position_embeddings=16,
                                attn_implementation="eager"), add_pooling_layer=False), \
        ["encoder.layer.0.attention.self.query.weight", "embeddings.position_embeddings.weight",
         "encoder.layer.1.intermediate.dense.weight", "encoder.layer.1.output.LayerNorm.weight"]


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    return DistilBertModel(DistilBertConfig(vocab_size=VOCAB, dim=WIDTH, n_layers=2, n_heads=2, hidden_dim=2 * WIDTH,
                                            max_position_embeddings=16, attn_implementation="eager")), \
        ["transformer.layer.0.attention.q_lin.weight", "embeddings.position_embeddings.weight",
         "transformer.layer.1.ffn.lin1.weight", "transformer.layer.1.output_layer_norm.weight"]


def gpt2():
    from transformers import GPT2Config, GPT2Model
    return GPT2Model(GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=2, n_positions=16, use_cache=False,
                                attn_implementation="eager")), \
        ["h.0.attn.c_attn.weight", "wpe.weight", "h.1.mlp.c_fc.weight", "ln_f.weight"]


def t5():
    from transformers import T5Config, T5EncoderModel
    return T5EncoderModel(T5Config(vocab_size=VOCAB, d_model=WIDTH, d_kv=WIDTH // 2, d_ff=2 * WIDTH, num_layers=2,
                                   num_heads=2, use_cache=False, attn_implementation="eager")), \
        ["encoder.block.0.layer.0.SelfAttention.q.weight",
         "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
         "encoder.block.1.layer.1.DenseReluDense.wi.weight", "encoder.final_layer_norm.weight"]


MODELS = {"bert": bert, "distilbert": distilbert, "gpt2": gpt2, "t5": t5}
NAMES = ["inputs_embeds", "attention_mask"]


def inputs(gen, batch: int) -> dict:
    mask = torch.ones(batch, LENGTH, dtype=torch.int64)
    mask[0, 4:] = 0                    # padding at the end of the first sequence, the start of the second
    mask[1, :1] = 0
    return {"inputs_embeds": torch.randn(batch, LENGTH, WIDTH, generator=gen), "attention_mask": mask}


def randomise(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Random weights at the scale of a trained model's (matrices N(0, 1/fan_in), norms' weights 1 + N(0, 0.1^2),
    other vectors N(0, 0.1^2)): every value differs, so the exporter aliases no two initializers, and the
    activations stay of order 1, so that float32 rounding in the second derivatives stays small (larger
    weights saturate T5's unscaled attention softmax, where PyTorch's own float32 Hessian-vector products
    are off by 2e-4 of their largest value)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim > 1:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
            else:
                norm = "norm" in name.lower() or name.split(".")[-2].startswith("ln_")
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1 + (1.0 if norm and name.endswith("weight") else 0.0))
        if any(b.is_floating_point() for b in model.buffers()):
            raise SystemExit("a float buffer would need randomising too (the exporter aliases equal initializers)")


def export(wrapped, args) -> onnx.ModelProto:
    """The unoptimised dynamo export, without the per-node metadata (source lines, module paths, FX node
    text: over half the file) that no importer reads."""
    batch = torch.export.Dim("batch", min=1, max=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()):          # the exporter's progress lines
            program = torch.onnx.export(wrapped, args, dynamo=True, optimize=False, input_names=NAMES,
                                        output_names=["y"], dynamic_shapes=(tuple({0: batch} for _ in NAMES),))
    proto = program.model_proto
    for node in proto.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    return proto


def reference(wrapped, params: list, data: dict, gen, second_order: bool) -> dict:
    """PyTorch's output and gradients of L = sum(y * w) in float64, with two Hessian-vector products
    where `second_order`."""
    named = dict(wrapped.named_parameters())
    x = data["inputs_embeds"].double().requires_grad_(True)
    y = wrapped(x, data["attention_mask"])
    w = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    weights = [named[p] for p in params]
    grads = torch.autograd.grad((y * w).sum(), [x] + weights, create_graph=second_order)
    names = ["inputs_embeds"] + params
    out = {"y": y, "w": w}
    out.update({f"in__{k}": v for k, v in data.items()})
    out.update({f"grad__{n}": g for n, g in zip(names, grads)})
    if not second_order:
        return {k: v.detach().numpy() for k, v in out.items()}
    v_x = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    v_p = torch.randn(weights[0].shape, generator=gen, dtype=torch.float64)
    hvp_x = torch.autograd.grad((grads[0] * v_x).sum(), [x] + weights, retain_graph=True)
    hvp_p = torch.autograd.grad((grads[1] * v_p).sum(), [x] + weights)
    out.update({"v__inputs_embeds": v_x, f"v__{params[0]}": v_p})
    out.update({f"hvp_x__{n}": h for n, h in zip(names, hvp_x)})
    out.update({f"hvp_p__{n}": h for n, h in zip(names, hvp_p)})
    return {k: v.detach().numpy() for k, v in out.items()}


def make(name: str, out: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    model, params = MODELS[name]()
    model.eval()
    randomise(model, gen)
    wrapped = Wrapped(model, NAMES).eval()
    params = [f"model.{p}" for p in params]                   # as the wrapper names them
    batches = {b: inputs(gen, b) for b in BATCHES}
    proto = export(wrapped, tuple(batches[BATCHES[0]].values()))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    named = dict(wrapped.named_parameters())
    missing = [p for p in params if p not in inits or not np.array_equal(inits[p], named[p].detach().numpy())]
    if missing:
        raise SystemExit(f"{name}: parameters {missing} are not initializers holding their values")
    wide = Wrapped(model, NAMES).double().eval()
    arrays: dict = {"params": np.asarray(params)}
    for b, data in batches.items():
        arrays.update({f"{k}_b{b}": v for k, v in reference(wide, params, data, gen, b == BATCHES[0]).items()})
    path = os.path.join(out, f"{name}.onnx")
    onnx.save(proto, path)
    np.savez_compressed(os.path.join(out, f"{name}.npz"), **{k: (v.astype(np.float32) if v.dtype == np.float64
                                                                 else v) for k, v in arrays.items()})
    print(f"{name}: {len(proto.graph.node)} nodes, {os.path.getsize(path)} bytes", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "dynamo"))
    parser.add_argument("--only", default=",".join(MODELS), help="comma-separated model names")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for seed, name in enumerate(MODELS):
        if name in args.only.split(","):
            make(name, args.out, seed)


if __name__ == "__main__":
    main()
