"""Export tiny transformers and torchvision-style models with both PyTorch exporters, with PyTorch's own
outputs and gradients, for tests/importer/test_model_fixtures.py.

Run by hand where torch, torchvision, transformers and onnxscript are installed (the tests never
import them; see tools/README or docs/parity.md for the venv):

    .venv-tools/bin/python tools/make_model_fixtures.py [--out tests/data/models] [--only bert,gpt2]

Each architecture is built from a small config with random weights (no download): 1 layer, hidden
16, vocab 50 for the transformers; one or two stages of width 8 to 16 on 16x16 images for Swin (V1 and
V2), ConvNeXt and MobileNetV3, which keep each design's patterns (patch merging's strided slices,
shifted windows, depthwise kernels wider than their input, squeeze-excitation). Each is exported three
times, by the TorchScript exporter (`legacy`), by the dynamo exporter with its optimizer (`dynamo`) and
without it (`dynamo_raw`, optimize=False, as torch.onnx.export(dynamo=True) is often called), with a
dynamic batch axis, and saved as <name>_<exporter>.onnx beside one <name>.npz holding, for the batch
sizes 2 and 3 (suffix _b2, _b3):
  in__<input>       the model's inputs
  y                 the first float output (last_hidden_state, logits)
  w                 fixed random weights of the scalar loss L = sum(y * w)
  grad__<input>     dL/d<input> for float inputs
  grad__<param>     dL/d<param> for a few parameters, or every one for the vision zoo and Llama (named as
                    the ONNX initializer; `params` lists them;
                    the dynamo exporter's optimizer folds some into other constants: params__<exporter>
                    lists those kept unchanged in its file, which the tests use)
and, for the models in HVP, at batch 2, v__<first param> and hvp__<param> = d/dparam <dL/d(first param), v>.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import warnings

import numpy as np
import onnx
import torch
from torchvision_compat import import_torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCHES = (2, 3)
HVP = {"bert"}
EVERY_PARAM = None      # a model's parameter list: the gradient of every parameter is recorded


def _ids(gen, batch, length, vocab=50):
    return torch.randint(1, vocab, (batch, length), generator=gen)


def bert(gen):
    from transformers import BertConfig, BertModel
    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=16, attn_implementation="eager"))

    def inputs(batch):
        mask = torch.ones(batch, 6, dtype=torch.int64)
        mask[0, 4:] = 0
        return {"input_ids": _ids(gen, batch, 6), "attention_mask": mask}
    return model, inputs, ["embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight",
                           "encoder.layer.0.output.LayerNorm.weight"]


def distilbert(gen):
    from transformers import DistilBertConfig, DistilBertModel
    model = DistilBertModel(DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                                             max_position_embeddings=16, attn_implementation="eager"))

    def inputs(batch):
        mask = torch.ones(batch, 5, dtype=torch.int64)
        mask[1, 3:] = 0
        return {"input_ids": _ids(gen, batch, 5), "attention_mask": mask}
    return model, inputs, ["embeddings.word_embeddings.weight", "transformer.layer.0.ffn.lin1.weight",
                           "transformer.layer.0.output_layer_norm.weight"]


def gpt2(gen):
    from transformers import GPT2Config, GPT2Model
    model = GPT2Model(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16, use_cache=False,
                                 attn_implementation="eager"))
    def inputs(batch):      # with a mask: without one transformers looks for packed sequences (aten::diff)
        mask = torch.ones(batch, 5, dtype=torch.int64)
        mask[0, :2] = 0
        return {"input_ids": _ids(gen, batch, 5), "attention_mask": mask}
    return model, inputs, ["wte.weight", "h.0.mlp.c_fc.weight", "h.0.ln_1.weight"]


def t5(gen):
    from transformers import T5Config, T5Model
    model = T5Model(T5Config(vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1,
                             num_heads=2, use_cache=False, attn_implementation="eager"))
    return model, lambda batch: {"input_ids": _ids(gen, batch, 5), "decoder_input_ids": _ids(gen, batch, 4)}, \
        ["shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight", "encoder.final_layer_norm.weight",
         "decoder.block.0.layer.2.DenseReluDense.wo.weight"]


def vit(gen):
    from transformers import ViTConfig, ViTModel
    model = ViTModel(ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32, attn_implementation="eager"),
                     add_pooling_layer=False)
    return model, lambda batch: {"pixel_values": torch.randn(batch, 3, 8, 8, generator=gen)}, \
        ["embeddings.patch_embeddings.projection.weight", "embeddings.cls_token",
         "layers.0.attention.k_proj.weight", "layers.0.layernorm_before.weight"]


def whisper(gen):
    from transformers import WhisperConfig, WhisperModel
    model = WhisperModel(WhisperConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                       decoder_ffn_dim=32, num_mel_bins=8, max_source_positions=8,
                                       max_target_positions=8, use_cache=False, attn_implementation="eager",
                                       pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))
    return model, lambda batch: {"input_features": torch.randn(batch, 8, 16, generator=gen),
                                 "decoder_input_ids": _ids(gen, batch, 3),
                                 "decoder_attention_mask": torch.ones(batch, 3, dtype=torch.int64)}, \
        ["encoder.conv1.weight", "decoder.embed_tokens.weight", "encoder.layer_norm.weight",
         "decoder.layers.0.encoder_attn.v_proj.weight"]


def vision(gen):
    """A small CNN from torchvision's building blocks: stem, MobileNetV2 inverted residual, MobileNetV3's
    squeeze-excitation, pooling and a classifier."""
    from torchvision.models.mobilenetv2 import InvertedResidual
    from torchvision.ops.misc import Conv2dNormActivation, SqueezeExcitation
    model = torch.nn.Sequential(Conv2dNormActivation(3, 8, stride=2), InvertedResidual(8, 8, 1, 2),
                                SqueezeExcitation(8, 4), Conv2dNormActivation(8, 12, kernel_size=1,
                                                                              activation_layer=torch.nn.Hardswish),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(12, 5))
    return model, lambda batch: {"x": torch.randn(batch, 3, 12, 12, generator=gen)}, ["0.0.weight", "7.weight"]


def _image(gen):
    return lambda batch: {"x": torch.randn(batch, 3, 16, 16, generator=gen)}


def swin(gen):
    """torchvision's Swin Transformer, two stages of two blocks (windows shifted in the second of each, with
    their masks and rolls) and the patch merging between them, which slices x[..., a::2, b::2, :]."""
    from torchvision.models.swin_transformer import SwinTransformer
    model = SwinTransformer(patch_size=[2, 2], embed_dim=8, depths=[2, 2], num_heads=[1, 2], window_size=[2, 2],
                            stochastic_depth_prob=0.0, num_classes=5)
    return model, _image(gen), EVERY_PARAM


def swin_v2(gen):
    """Swin V2: scaled cosine attention, the log-spaced relative position MLP and PatchMergingV2."""
    from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformer, SwinTransformerBlockV2
    model = SwinTransformer(patch_size=[2, 2], embed_dim=8, depths=[2, 2], num_heads=[1, 2], window_size=[2, 2],
                            stochastic_depth_prob=0.0, num_classes=5, block=SwinTransformerBlockV2,
                            downsample_layer=PatchMergingV2)
    return model, _image(gen), EVERY_PARAM


def convnext(gen):
    """torchvision's ConvNeXt: a 4x4 stride-4 stem, 7x7 depthwise convolutions (on a 2x2 input in the second
    stage, so most taps lie in the padding), channels-last LayerNorm, layer scale."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    model = ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], stochastic_depth_prob=0.0,
                     num_classes=5)
    return model, _image(gen), EVERY_PARAM


def mobilenet_v3(gen):
    """torchvision's MobileNetV3: inverted residuals with squeeze-excitation (hardsigmoid gates), hardswish,
    depthwise 3x3 and 5x5 with stride 2, BatchNorm."""
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3
    setting = [InvertedResidualConfig(8, 3, 8, 8, True, "RE", 2, 1, 1.0),
               InvertedResidualConfig(8, 5, 16, 12, True, "HS", 2, 1, 1.0),
               InvertedResidualConfig(12, 3, 24, 12, False, "HS", 1, 1, 1.0)]
    return MobileNetV3(setting, last_channel=16, num_classes=5), _image(gen), EVERY_PARAM


def llama(gen):
    """A Llama-style decoder (transformers' LlamaModel): RMSNorm, rotary embeddings, grouped-query attention
    (4 query heads over 2 key/value heads), a gated SiLU MLP, a causal and padding mask."""
    from transformers import LlamaConfig, LlamaModel
    model = LlamaModel(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                                   use_cache=False, attn_implementation="eager"))

    def inputs(batch):
        mask = torch.ones(batch, 6, dtype=torch.int64)
        mask[0, :2] = 0
        return {"input_ids": _ids(gen, batch, 6), "attention_mask": mask}
    return model, inputs, EVERY_PARAM


MODELS = {"bert": bert, "distilbert": distilbert, "gpt2": gpt2, "t5": t5, "vit": vit, "whisper": whisper,
          "vision": vision, "swin": swin, "swin_v2": swin_v2, "convnext": convnext, "mobilenet_v3": mobilenet_v3,
          "llama": llama}


class Wrapped(torch.nn.Module):
    """The model called with keyword inputs, returning its first output as a tensor."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        positional = isinstance(self.model, torch.nn.Sequential)
        out = self.model(*args) if positional else self.model(**dict(zip(self.names, args)))
        if isinstance(out, torch.Tensor):
            return out
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def randomise(model: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if p.ndim > 1 else 0.1
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (1.0 if name.endswith(("LayerNorm.weight",
                                                                                          "layer_norm.weight",
                                                                                          "ln_1.weight", "ln_2.weight",
                                                                                          "ln_f.weight")) else 0.0))
        for name, b in model.named_buffers():
            if "running_var" in name:
                b.copy_(torch.rand(b.shape, generator=gen) + 0.5)
            elif "running_mean" in name:
                b.copy_(torch.randn(b.shape, generator=gen) * 0.1)


def export(wrapped, args, names, exporter: str) -> onnx.ModelProto:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            axes = {n: {0: "batch"} for n in names}
            axes["y"] = {0: "batch"}
            torch.onnx.export(wrapped, args, buffer, dynamo=False, opset_version=17, do_constant_folding=False,
                              input_names=names, output_names=["y"], dynamic_axes=axes)
            return onnx.load_from_string(buffer.getvalue())
        batch = torch.export.Dim("batch", min=1, max=64)
        program = torch.onnx.export(wrapped, args, dynamo=True, input_names=names, output_names=["y"],
                                    dynamic_shapes=(tuple({0: batch} for _ in names),),
                                    optimize=exporter == "dynamo")
        proto = program.model_proto
        for node in proto.graph.node:        # each node's Python stack and module path, most of a raw export's
            del node.metadata_props[:]       # bytes (3.6 of Swin's 3.8 MB); the graph is the same without them
        return proto


def reference(wrapped, model, inputs: dict, params: list, gen, hvp: bool) -> dict:
    """PyTorch's outputs and gradients of L = sum(y * w) for one batch."""
    named = dict(model.named_parameters())
    args = [v.clone().requires_grad_(v.is_floating_point()) for v in inputs.values()]
    y = wrapped(*args)
    w = torch.randn(y.shape, generator=gen)
    loss = (y * w).sum()
    float_args = [a for a in args if a.is_floating_point()]
    grads = torch.autograd.grad(loss, float_args + [named[p] for p in params], create_graph=hvp)
    out = {"y": y.detach(), "w": w}
    out.update({f"in__{k}": v for k, v in inputs.items()})
    float_names = [k for k, v in inputs.items() if v.is_floating_point()]
    out.update({f"grad__{k}": g.detach() for k, g in zip(float_names, grads)})
    param_grads = grads[len(float_args):]
    out.update({f"grad__model.{p}": g.detach() for p, g in zip(params, param_grads)})
    if hvp:
        v = torch.randn(named[params[0]].shape, generator=gen)       # along the first parameter (kept by both)
        hv = torch.autograd.grad((param_grads[0] * v).sum(), [named[p] for p in params])
        out[f"v__model.{params[0]}"] = v
        out.update({f"hvp__model.{p}": h.detach() for p, h in zip(params, hv)})
    return out


def make(name: str, out: str, seed: int, exporters) -> None:
    gen = torch.Generator().manual_seed(seed)
    model, make_inputs, params = MODELS[name](gen)
    model.eval()
    randomise(model, gen)
    if params is EVERY_PARAM:
        params = [p for p, _ in model.named_parameters()]
    batches = {b: make_inputs(b) for b in BATCHES}
    names = list(batches[BATCHES[0]])
    wrapped = Wrapped(model, names).eval()
    arrays = {"params": np.asarray([f"model.{p}" for p in params])}      # as the wrapper names them
    for b, inputs in batches.items():
        ref = reference(wrapped, model, inputs, params, gen, hvp=name in HVP and b == BATCHES[0])
        arrays.update({f"{k}_b{b}": v.numpy() for k, v in ref.items()})
    for exporter in exporters:
        try:
            proto = export(wrapped, tuple(batches[BATCHES[0]].values()), names, exporter)
        except Exception as err:  # noqa: BLE001 - an exporter's failure is reported, the others go on
            print(f"{name}_{exporter}: the exporter failed: {type(err).__name__}: {str(err).splitlines()[0]}",
                  file=sys.stderr)
            continue
        named = dict(wrapped.named_parameters())
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
        kept = [p for p in arrays["params"].tolist()         # the dynamo exporter's optimizer folds some parameters
                if p in inits and np.array_equal(inits[p], named[p].detach().numpy())]  # (a BatchNorm into a Conv)
        if not kept:
            raise SystemExit(f"{name} ({exporter}): none of the parameters {list(arrays['params'])} is an initializer")
        arrays[f"params__{exporter}"] = np.asarray(kept)
        onnx.save(proto, os.path.join(out, f"{name}_{exporter}.onnx"))
        print(f"{name}_{exporter}: {len(proto.graph.node)} nodes, {len(kept)} params kept, "
              f"{os.path.getsize(os.path.join(out, f'{name}_{exporter}.onnx'))} bytes", file=sys.stderr)
    np.savez_compressed(os.path.join(out, f"{name}.npz"), **{k: (v.astype(np.float32) if v.dtype == np.float64
                                                                 else v) for k, v in arrays.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "models"))
    parser.add_argument("--only", default=",".join(MODELS), help="comma-separated model names")
    parser.add_argument("--exporters", default="legacy,dynamo,dynamo_raw")
    args = parser.parse_args()
    import_torchvision()
    os.makedirs(args.out, exist_ok=True)
    for seed, name in enumerate(MODELS):
        if name in args.only.split(","):
            make(name, args.out, seed, args.exporters.split(","))


if __name__ == "__main__":
    main()
