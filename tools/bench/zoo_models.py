"""The model zoo's models (tools/bench/zoo.py): real architectures from torchvision and transformers
with random weights (nothing is downloaded), at the sizes of issue 44 and at a small size for a
quick check of the harness.

Each entry builds a PyTorch module that maps its inputs to logits and the inputs themselves; the
loss is always softmax cross-entropy of the logits' last axis against integer labels of the
logits' other axes (classes for the image models, next tokens for the language models). Norms
run in eval mode (batch norm from its running statistics) and dropout is off, so both systems
compute the same function.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ZooModel:
    """A zoo entry: `build(small)` returns (make, {input name: tensor}, number of classes), where
    make() constructs the module (randomly initialised), which called with the inputs as keyword
    arguments returns logits."""
    label: str
    size: str          # the full size, as the tables print it
    build: Callable


def _torchvision():
    """torchvision, through tools/torchvision_compat (its wheel's compiled operators do not load
    beside CPU torch, and its import fails without the tolerance given there)."""
    if __package__:
        from ..torchvision_compat import import_torchvision
    else:            # tools/bench/zoo.py run as a script (a memory process): tools/ is not a package here
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from torchvision_compat import import_torchvision  # type: ignore[no-redef]
    return import_torchvision()


def _transformers():
    _torchvision()       # transformers imports torchvision where it is installed
    import transformers
    return transformers


def logits_of(module, positional: bool = False):
    """`module` as a module called with keyword inputs that returns its logits: a torchvision model
    takes its one input positionally, a transformers model returns an output record."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = module

        def forward(self, **inputs):
            out = self.model(*inputs.values()) if positional else self.model(**inputs)
            return out if isinstance(out, torch.Tensor) else out.logits
    return Logits()


def _generator():
    import torch
    return torch.Generator().manual_seed(0)


def _images(make, batch: int, size: int, classes: int):
    import torch
    return (lambda: logits_of(make(), positional=True),
            {"x": torch.randn(batch, 3, size, size, generator=_generator())}, classes)


def _tokens(batch: int, seq: int, vocab: int, name: str = "input_ids") -> dict:
    import torch
    return {name: torch.randint(0, vocab, (batch, seq), generator=_generator())}


def resnet50(small: bool):
    tv = _torchvision()
    if small:
        from torchvision.models.resnet import Bottleneck, ResNet
        return _images(lambda: ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10, width_per_group=16), 2, 32, 10)
    return _images(lambda: tv.models.resnet50(weights=None), 8, 224, 1000)


def vit_b_16(small: bool):
    tv = _torchvision()
    if small:
        from torchvision.models.vision_transformer import VisionTransformer
        return _images(lambda: VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                                                 hidden_dim=32, mlp_dim=64, num_classes=10), 2, 32, 10)
    return _images(lambda: tv.models.vit_b_16(weights=None), 4, 224, 1000)


def convnext_tiny(small: bool):
    tv = _torchvision()
    if small:
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
        return _images(lambda: ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10),
                       2, 32, 10)
    return _images(lambda: tv.models.convnext_tiny(weights=None), 8, 224, 1000)


def mobilenet_v3_large(small: bool):
    tv = _torchvision()
    if small:
        return _images(lambda: tv.models.mobilenet_v3_small(weights=None, num_classes=10), 2, 32, 10)
    return _images(lambda: tv.models.mobilenet_v3_large(weights=None), 16, 224, 1000)


def efficientnet_b0(small: bool):
    tv = _torchvision()
    if small:
        return _images(lambda: tv.models.efficientnet_b0(weights=None, num_classes=10), 2, 32, 10)
    return _images(lambda: tv.models.efficientnet_b0(weights=None), 16, 224, 1000)


def swin_t(small: bool):
    tv = _torchvision()
    if small:
        from torchvision.models.swin_transformer import SwinTransformer
        return _images(lambda: SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                                               window_size=[4, 4], num_classes=10), 2, 32, 10)
    return _images(lambda: tv.models.swin_t(weights=None), 8, 224, 1000)


def _language_model(classes: tuple[str, str], small: bool, tiny: dict, full: dict, shapes: tuple, inputs=None):
    """A transformers model (config class, model class) built from `tiny` or `full` (the config's
    arguments) without a cache, on (batch, sequence) token ids from shapes[0] (small) or shapes[1],
    or on inputs(config) where given."""
    tf = _transformers()
    config_class, model_class = (getattr(tf, name) for name in classes)
    config = config_class(**(tiny if small else full))
    config.use_cache = False
    batch, seq = shapes[0] if small else shapes[1]
    made = inputs(config) if inputs else _tokens(batch, seq, config.vocab_size)
    return lambda: logits_of(model_class(config)), made, config.vocab_size


def gpt2(small: bool):          # GPT-2 small: 12 layers, width 768, 124M parameters
    return _language_model(("GPT2Config", "GPT2LMHeadModel"), small,
                           dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=32), {},
                           ((2, 16), (2, 128)))


def bert(small: bool):          # BERT-base: 12 layers, width 768
    return _language_model(("BertConfig", "BertForMaskedLM"), small,
                           dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=32), {},
                           ((2, 16), (4, 128)))


def llama(small: bool):         # 8 layers, width 768, grouped-query attention (12 heads sharing 4 key-value heads)
    return _language_model(("LlamaConfig", "LlamaForCausalLM"), small,
                           dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32),
                           dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                                num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=256),
                           ((2, 16), (2, 128)))


def whisper(small: bool):       # Whisper-tiny's widths (4 + 4 layers, width 384), on 10 s of audio
    import torch
    tokens = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)

    def inputs(config):
        frames, count = (32, 8) if small else (1000, 64)
        return {"input_features": torch.randn(2, config.num_mel_bins, frames, generator=_generator()),
                **_tokens(2, count, config.vocab_size, "decoder_input_ids")}
    return _language_model(("WhisperConfig", "WhisperForConditionalGeneration"), small,
                           dict(vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1,
                                encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=16,
                                max_target_positions=16, **tokens),
                           dict(vocab_size=51865, d_model=384, encoder_layers=4, decoder_layers=4,
                                encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
                                decoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=500,
                                max_target_positions=448, **tokens),
                           ((2, 8), (2, 64)), inputs)


MODELS: dict[str, ZooModel] = {
    "resnet50": ZooModel("ResNet-50", "batch 8, 224²", resnet50),
    "vit_b_16": ZooModel("ViT-B/16", "batch 4, 224²", vit_b_16),
    "gpt2": ZooModel("GPT-2 small", "batch 2, sequence 128", gpt2),
    "bert": ZooModel("BERT-base (masked LM)", "batch 4, sequence 128", bert),
    "convnext_tiny": ZooModel("ConvNeXt-T", "batch 8, 224²", convnext_tiny),
    "mobilenet_v3_large": ZooModel("MobileNetV3-Large", "batch 16, 224²", mobilenet_v3_large),
    "efficientnet_b0": ZooModel("EfficientNet-B0", "batch 16, 224²", efficientnet_b0),
    "swin_t": ZooModel("Swin-T", "batch 8, 224²", swin_t),
    "llama": ZooModel("Llama-style decoder (8 layers, GQA)", "batch 2, sequence 128", llama),
    "whisper": ZooModel("Whisper-tiny-like encoder-decoder", "batch 2, 10 s audio, 64 tokens", whisper),
}
# The three models of the bar, first in every run.
BAR = ["resnet50", "vit_b_16", "gpt2"]
HELD_OUT = "torchvision:"


# torchvision's video models by input: (frames, side) of a clip at full size and small (the
# multiscale ViTs' position tables and S3D's last pooling fix theirs)
VIDEO_CLIPS = {"mvit_v1_b": ((16, 224), (16, 224)), "mvit_v2_s": ((16, 224), (16, 224)), "s3d": ((16, 224), (16, 224)),
               "swin3d_t": ((16, 224), (8, 64)), "swin3d_s": ((16, 224), (8, 64)), "swin3d_b": ((16, 224), (8, 64))}
VIDEO_CLIP = ((16, 112), (8, 56))       # the 3-D ResNets (r3d_18, mc3_18, r2plus1d_18)
SEGMENTATION_SIDE = (320, 96)


def held_out(spec: str) -> ZooModel:
    """A torchvision model the zoo does not list, for a check on a model nobody tuned for:
    "torchvision:NAME", or "torchvision:NAME@BATCH", random weights. A classification model takes
    8 images at its default size (299² for Inception-v3, 224² otherwise); a segmentation model 2
    images of 320² (its logits per pixel, classes last); a video model 2 clips of 16 frames at its
    crop size (112² for the 3-D ResNets, 224² otherwise). Small: one image or clip, segmentation two
    images of 96², video 8 frames of 56² or 64² where the model takes another size (vision
    transformers take no other)."""
    name, at, batch = spec[len(HELD_OUT):].partition("@")
    if not name.isidentifier() or (at and not (batch.isdigit() and int(batch) > 0)):
        raise SystemExit(f"{spec!r}: expected {HELD_OUT}NAME or {HELD_OUT}NAME@BATCH")
    extra = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
    size = 299 if name == "inception_v3" else 224
    kind = "classification"
    if name.startswith(("fcn_", "deeplabv3_", "lraspp_")):
        kind, size = "segmentation", SEGMENTATION_SIDE[0]
    elif name in VIDEO_CLIPS or name in ("r3d_18", "mc3_18", "r2plus1d_18"):
        kind = "video"
    full_batch = int(batch) if batch else 8 if kind == "classification" else 2

    def build(small: bool):
        import torch
        tv = _torchvision()
        module = {"classification": tv.models, "segmentation": tv.models.segmentation, "video": tv.models.video}[kind]
        if name not in tv.models.list_models(module=module):
            raise SystemExit(f"torchvision has no {kind} model {name!r}")
        # (a segmentation model's pooled branch normalises a batch of 1x1 maps while prepare calibrates)
        count = (2 if kind == "segmentation" else 1) if small else full_batch
        if kind == "classification":
            return _images(lambda: getattr(tv.models, name)(weights=None, **extra), count, size, 1000)
        if kind == "segmentation":
            side = SEGMENTATION_SIDE[small]
            make = lambda: _per_pixel(getattr(module, name)(weights=None, weights_backbone=None))   # noqa: E731
            return make, {"x": torch.randn(count, 3, side, side, generator=_generator())}, 21
        frames, side = VIDEO_CLIPS.get(name, VIDEO_CLIP)[small]
        return (lambda: logits_of(_biased(getattr(module, name)(weights=None)), positional=True),
                {"x": torch.randn(count, 3, frames, side, side, generator=_generator())}, 400)
    shown = {"classification": f"batch {full_batch}, {size}²", "segmentation": f"batch {full_batch}, {size}²",
             "video": "batch {}, {} frames of {}²".format(full_batch, *VIDEO_CLIPS.get(name, VIDEO_CLIP)[0])}[kind]
    return ZooModel(f"{name} (held out)", shown, build)


def _biased(model):
    """`model` with a frozen bias (zeros; prepare perturbs it as any 1-D parameter) on each 3-D
    convolution that has none: PyTorch's exporter (onnxscript 0.7.2's conv3d) writes a missing bias
    as zeros of shape (channels, 2), which ONNX Runtime refuses as well. The parameters trained are
    the model's own."""
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.Conv3d) and m.bias is None:
            m.bias = torch.nn.Parameter(torch.zeros(m.out_channels), requires_grad=False)
    return model


def _per_pixel(model):
    """A torchvision segmentation model as a module of keyword input x that returns its logits per
    pixel with the classes last (the zoo's loss takes the last axis)."""
    import torch

    class PerPixel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"].permute(0, 2, 3, 1)
    return PerPixel()


# transformers' model classes by the task a "transformers:TASK:TYPE" name gives, and what each is fed:
# token ids, token ids and decoder token ids, images or raw audio
TRANSFORMERS_TASKS = {"causal": ("AutoModelForCausalLM", "tokens"), "masked": ("AutoModelForMaskedLM", "tokens"),
                      "seqcls": ("AutoModelForSequenceClassification", "tokens"),
                      "tokcls": ("AutoModelForTokenClassification", "tokens"),
                      "seq2seq": ("AutoModelForSeq2SeqLM", "seq2seq"),
                      "image": ("AutoModelForImageClassification", "images"), "ctc": ("AutoModelForCTC", "audio")}
HELD_OUT_TRANSFORMERS = "transformers:"
# A held-out transformers model's small size: these config fields wherever the architecture has them
# (through the config's own aliases: n_embd, d_model, ...). Image models keep their widths (their
# stages' widths are lists that must agree with one another) and take 64x64 images.
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
            vocab_size=128, max_position_embeddings=64, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, d_ff=64,
            d_kv=8, num_layers=2, num_encoder_layers=2, num_decoder_layers=2, num_heads=4, head_dim=8, rotary_dim=8,
            block_sizes=[1, 1], pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=0)
TINY_IMAGE = 64


def _shrunk(config) -> None:
    """`config` at TINY's sizes, in place."""
    for key, value in TINY.items():
        if hasattr(config, key) and (key != "head_dim" or config.head_dim is not None):   # None: from the width
            # a derived property (Falcon's head_dim), a field the architecture replaces (Funnel's layers)
            with contextlib.suppress(AttributeError, NotImplementedError):
                setattr(config, key, value)


def held_out_transformers(spec: str) -> ZooModel:
    """A transformers architecture "transformers:TASK:TYPE[@ATTENTION]" (TYPE as transformers' AutoConfig
    names it, TASK one of TRANSFORMERS_TASKS, ATTENTION an attn_implementation such as eager, else
    transformers' default) with its default config (random weights), or shrunk to TINY (small). Fed
    2 sequences of 128 tokens (16 small; a sequence-to-sequence model's decoder 64, 8 small), 8
    images at the config's size (2 at 64x64 small) or 2 clips of 16,000 samples (4,000 small)."""
    task, _, kind = spec[len(HELD_OUT_TRANSFORMERS):].partition(":")
    kind, _, attention = kind.partition("@")
    if task not in TRANSFORMERS_TASKS or not kind:
        raise SystemExit(f"{spec!r}: expected {HELD_OUT_TRANSFORMERS}TASK:TYPE[@ATTENTION], TASK one of "
                         + ", ".join(TRANSFORMERS_TASKS))
    auto, fed = TRANSFORMERS_TASKS[task]
    fed_as = {"tokens": "batch 2, sequence 128", "seq2seq": "batch 2, 128 + 64 tokens",
              "images": "batch 8 at its image size", "audio": "2 clips of 16,000 samples"}[fed]

    def build(small: bool):
        import torch
        tf = _transformers()
        if kind not in tf.CONFIG_MAPPING:
            raise SystemExit(f"transformers has no model type {kind!r}")
        config = tf.AutoConfig.for_model(kind)
        if small and fed != "images":
            _shrunk(config)
        if hasattr(config, "use_cache"):
            config.use_cache = False
        if task == "seqcls" and getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = 0           # a decoder's classifier reads each sequence's last token before padding
        labels = config.vocab_size if fed in ("seq2seq", "audio") or task in ("causal", "masked") else config.num_labels
        if fed == "images":
            given = getattr(config, "image_size", 224)
            size = TINY_IMAGE if small else given[0] if isinstance(given, (list, tuple)) else given
            if small and hasattr(config, "image_size"):
                config.image_size = [size] * len(given) if isinstance(given, (list, tuple)) else size
            inputs = {"pixel_values": torch.randn(2 if small else 8, getattr(config, "num_channels", 3), size, size,
                                                  generator=_generator())}
        elif fed == "audio":
            inputs = {"input_values": torch.randn(2, 4000 if small else 16000, generator=_generator())}
        else:
            inputs = _tokens(2, 16 if small else 128, config.vocab_size)
            if fed == "seq2seq":
                inputs.update(_tokens(2, 8 if small else 64, config.vocab_size, "decoder_input_ids"))
        model_class = getattr(tf, auto)
        chosen = {"attn_implementation": attention} if attention else {}
        return lambda: logits_of(model_class.from_config(config, **chosen)), inputs, labels
    return ZooModel(f"{kind} {task} (held out)", f"default config, {fed_as}", build)


def zoo_entry(name: str) -> ZooModel:
    """MODELS[name], or the held-out torchvision or transformers model `name` names (held_out,
    held_out_transformers)."""
    if name.startswith(HELD_OUT):
        return held_out(name)
    if name.startswith(HELD_OUT_TRANSFORMERS):
        return held_out_transformers(name)
    if name not in MODELS:
        raise SystemExit(f"unknown model {name}: one of {', '.join(MODELS)}, {HELD_OUT}NAME[@BATCH] for any "
                         f"torchvision classification, segmentation or video model, or "
                         f"{HELD_OUT_TRANSFORMERS}TASK:TYPE[@ATTENTION]")
    return MODELS[name]
