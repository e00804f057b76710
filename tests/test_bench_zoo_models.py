"""The zoo's model names (tools/bench/zoo_models.py): its own keys, torchvision:NAME[@BATCH] for a
held-out torchvision model and transformers:TASK:TYPE[@ATTENTION] for a held-out transformers one,
read without importing torch (nothing here builds or times a model), and the small size's shrinking."""
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def zoo_models():
    spec = importlib.util.spec_from_file_location("zoo_models", os.path.join(ROOT, "tools", "bench", "zoo_models.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["zoo_models"] = module          # (its dataclass looks its module up)
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["zoo_models"]
    return module


def test_listed_models_are_found_by_their_keys(zoo_models):
    assert zoo_models.zoo_entry("resnet50") is zoo_models.MODELS["resnet50"]


@pytest.mark.parametrize("spec, label, size", [
    ("torchvision:regnet_y_1_6gf", "regnet_y_1_6gf (held out)", "batch 8, 224²"),
    ("torchvision:densenet121@4", "densenet121 (held out)", "batch 4, 224²"),
    ("torchvision:inception_v3@2", "inception_v3 (held out)", "batch 2, 299²"),
    ("torchvision:lraspp_mobilenet_v3_large", "lraspp_mobilenet_v3_large (held out)", "batch 2, 320²"),
    ("torchvision:fcn_resnet50@4", "fcn_resnet50 (held out)", "batch 4, 320²"),
    ("torchvision:r3d_18", "r3d_18 (held out)", "batch 2, 16 frames of 112²"),
    ("torchvision:mvit_v2_s@1", "mvit_v2_s (held out)", "batch 1, 16 frames of 224²"),
])
def test_held_out_torchvision_models_are_named_by_model_and_batch(zoo_models, spec, label, size):
    entry = zoo_models.zoo_entry(spec)
    assert (entry.label, entry.size) == (label, size)


@pytest.mark.parametrize("spec", ["torchvision:", "torchvision:resnet50@", "torchvision:resnet50@two",
                                  "torchvision:../x", "torchvision:resnet50@8@8",
                                  "torchvision:resnet50@0"])
def test_malformed_held_out_names_stop_with_the_expected_form(zoo_models, spec):
    with pytest.raises(SystemExit, match="torchvision:NAME@BATCH"):
        zoo_models.zoo_entry(spec)


def test_an_unknown_key_stops_naming_the_keys_and_the_held_out_form(zoo_models):
    with pytest.raises(SystemExit, match="resnet50.*torchvision:NAME"):
        zoo_models.zoo_entry("resnet5O")


@pytest.mark.parametrize("spec, label", [("transformers:causal:llama", "llama causal (held out)"),
                                         ("transformers:image:convnext@eager", "convnext image (held out)")])
def test_held_out_transformers_models_are_named_by_task_and_type(zoo_models, spec, label):
    assert zoo_models.zoo_entry(spec).label == label


@pytest.mark.parametrize("spec", ["transformers:", "transformers:causal", "transformers:causal:",
                                  "transformers:speech:llama", "transformers:causal:@eager"])
def test_malformed_held_out_transformers_names_stop_with_the_expected_form(zoo_models, spec):
    with pytest.raises(SystemExit, match=r"TASK:TYPE\[@ATTENTION\], TASK one of causal"):
        zoo_models.zoo_entry(spec)


def test_a_small_config_is_shrunk_where_it_has_the_field(zoo_models):
    class Config:
        hidden_size, num_hidden_layers, num_key_value_heads, head_dim = 768, 12, None, None   # head_dim: derived

        @property
        def num_attention_heads(self):          # a derived property without a setter (Falcon's head_dim)
            return 12

        @property
        def num_decoder_layers(self):
            return 6

        @num_decoder_layers.setter
        def num_decoder_layers(self, value):    # a field the architecture replaces (Funnel's block sizes)
            raise NotImplementedError("set block_sizes")
    config = Config()
    zoo_models._shrunk(config)
    assert (config.hidden_size, config.num_hidden_layers, config.num_key_value_heads, config.head_dim,
            config.num_attention_heads, config.num_decoder_layers) == (32, 2, 2, None, 12, 6)
    assert not hasattr(config, "d_model")          # a field the architecture lacks is not added
