"""gc.from_torch. The fixture tests always run the import path: files exported by gc.from_torch from
PyTorch modules (tools/make_bridge_fixtures.py, torch's dynamo exporter) load without torch, have
exactly the module's state_dict as parameters and buffers, and match PyTorch's outputs (eval and
training mode), gradients, running statistics and an SGD step. Where torch is installed, the
export itself is run and compared with torch directly; without torch (and onnxscript, which its
exporter needs) that test fails when GCOMPILE_REQUIRE_TORCH is set, as in CI's environment that
installs them (.ci/run), and is skipped with the reason otherwise."""
import importlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

DATA = Path(__file__).resolve().parent.parent / "data"
MODELS = ["cnn", "transformer", "state", "grad_modes"]


def _grouped(arrays):
    return lambda prefix: {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


def _fixture(name):
    arrays = dict(np.load(DATA / f"bridge_{name}.npz"))
    return gc.from_torch(DATA / f"bridge_{name}.onnx"), arrays, _grouped(arrays)


def _loss(module, x, w):
    return F.sum(module(x) * w)


@pytest.mark.parametrize("name", MODELS)
def test_imported_parameters_are_the_state_dict(name):
    _check_parameters(*_fixture(name))


def _check_parameters(model, arrays, group):
    assert list(model.params) == [n for n in group("grad/") if n != "x"]          # trainable, torch's order
    assert set(model.state_dict()) == set(group("sgd/"))                          # every state_dict entry
    assert not any(n.startswith("val_") for n in model.state_dict())              # no exporter constants
    assert model.training and model.input_specs()[0].shape[0] == "batch"


@pytest.mark.parametrize("name", MODELS)
def test_values_and_gradients_match_torch(name):
    _check_values_and_gradients(*_fixture(name))


def _check_values_and_gradients(model, arrays, group):
    """Outputs in both modes, input and parameter gradients, and every buffer after one training call."""
    x, w = arrays["x"], arrays["w"]

    def loss(m, x):
        y = m(x)                               # one call: the buffers it updates are those after it
        return F.sum(y * w), (y, dict(m.named_buffers()))

    def run(m, x):
        (_, (y, new_buffers)), (gm, gx) = gc.value_and_grad(loss, argnums=(0, 1), has_aux=True)(m, x)
        return y, gm.params, gx, new_buffers

    y, grads, gx, buffers = gc.jit(run)(model, x)
    np.testing.assert_allclose(y, arrays["y_train"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gx, arrays["grad/x"], rtol=1e-4, atol=1e-5)
    for n, g in group("grad/").items():
        if n != "x":
            np.testing.assert_allclose(grads[n], g, rtol=1e-4, atol=1e-5, err_msg=n)
    for n, b in group("new/").items():
        np.testing.assert_allclose(buffers[n], b, rtol=1e-5, atol=1e-6, err_msg=n)
    y_eval = gc.jit(lambda m, x: m(x))(model.eval(), x)
    model.train()
    np.testing.assert_allclose(y_eval, arrays["y_eval"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_matches_torch_sgd(name):
    _check_sgd_step(*_fixture(name))


def _check_sgd_step(model, arrays, group):
    """The whole state_dict (parameters, frozen ones included, and buffers) after a Trainer's SGD step."""
    x, w = arrays["x"], arrays["w"]
    step = gc.export_train_step(lambda m, x: _loss(m, x, w), model, gc.optim.SGD(0.1), gc.spec(x.shape),
                                provider="cpu")
    trainer = gc.runtime.Trainer(step)
    trainer.step(x)
    after = trainer.state_dict()
    for n, expected in group("sgd/").items():
        np.testing.assert_allclose(after[n], expected, rtol=1e-4, atol=1e-5, err_msg=n)


def test_saved_model_round_trips_and_refuses_other_models(tmp_path):
    model, _, _ = _fixture("cnn")
    model.load_state_dict({k: np.asarray(v) * 0 for k, v in model.state_dict().items()}).eval()
    model.save_onnx(tmp_path / "m.onnx")
    again = gc.from_torch(tmp_path / "m.onnx")
    assert not again.training and all(np.all(v == 0) for v in again.state_dict().values())
    with pytest.raises(gc.GcompileError, match="not exported by gc.from_torch"):
        gc.from_torch(DATA / "torch_mlp.onnx")


def test_a_saved_model_is_sealed_and_a_damaged_copy_refused(tmp_path):
    """save_onnx wrote an unsealed file: a flipped bit in a weight loaded and computed other numbers."""
    from gcompile.lowering import seal
    model, _, _ = _fixture("cnn")
    model.save_onnx(tmp_path / "m.onnx")
    data = (tmp_path / "m.onnx").read_bytes()
    assert seal.read(data) is not None
    weight = np.asarray(model.state_dict()["0.weight"], np.float32).tobytes()
    at = data.index(weight[:16]) + 5
    damaged = bytearray(data)
    damaged[at] ^= 0x10
    (tmp_path / "m.onnx").write_bytes(bytes(damaged))
    with pytest.raises(gc.GcompileError, match=f"{re.escape(str(tmp_path / 'm.onnx'))} is damaged"):
        gc.from_torch(tmp_path / "m.onnx")


@pytest.mark.parametrize("edit, field", [
    (lambda m: "[" + json.dumps(m), None), (lambda m: json.dumps({**m, "state": "conv.weight"}), "state"),
    (lambda m: json.dumps({k: v for k, v in m.items() if k != "training"}), "training"),
    (lambda m: json.dumps({**m, "batchnorm": {"bn": {"momentum": "0.1", "track": True}}}), "batchnorm"),
], ids=["not JSON", "state", "no training", "momentum"])
def test_malformed_torch_metadata_is_refused_naming_the_field(tmp_path, edit, field):
    """It used to raise json's JSONDecodeError, or a KeyError or TypeError from the module's setup."""
    import onnx
    model = onnx.load(DATA / "bridge_cnn.onnx")
    entry = next(p for p in model.metadata_props if p.key == "gcompile.torch")
    entry.value = edit(json.loads(entry.value))
    onnx.save(model, tmp_path / "m.onnx")
    fragment = "not valid JSON" if field is None else f"not what gc.from_torch writes (its {field!r} field)"
    with pytest.raises(gc.GcompileError, match="m.onnx: its 'gcompile.torch' metadata") as err:
        gc.from_torch(tmp_path / "m.onnx")
    assert fragment in str(err.value)


def _require(module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as err:
        reason = f"{module} cannot be imported ({err})"
        if os.environ.get("GCOMPILE_REQUIRE_TORCH"):
            pytest.fail(f"{reason}, and GCOMPILE_REQUIRE_TORCH is set")
        pytest.skip(f"{reason}; set GCOMPILE_REQUIRE_TORCH=1 to make this a failure")


def test_export_from_a_torch_module_matches_torch():
    """Every module of the fixtures, exported here from PyTorch, meets every check its committed
    file meets against PyTorch's numbers computed here: parameters, outputs, gradients, buffers
    after a training call, a Trainer's SGD step."""
    _require("torch")
    _require("onnxscript")                         # torch.onnx's dynamo exporter needs it
    import sys
    sys.path.insert(0, str(DATA.parent.parent / "tools"))
    try:
        from make_bridge_fixtures import MODELS as BUILDERS
        from make_bridge_fixtures import reference
    finally:
        sys.path.pop(0)
    assert sorted(BUILDERS) == sorted(MODELS)
    for seed, build in enumerate(BUILDERS.values()):
        module, x, arrays = reference(build, seed)
        model = gc.from_torch(module, x)
        assert list(model.params) == [n for n, p in module.named_parameters() if p.requires_grad]
        for check in (_check_parameters, _check_values_and_gradients, _check_sgd_step):
            check(model, arrays, _grouped(arrays))


def _torch_modules():
    """Modules whose forward does what the exported ONNX graph alone does not say: state updated in
    place in one mode (a persistent and a non-persistent buffer), a branch on self.training, a
    no_grad block, an inference_mode block and method (which torch.export drops) and a detach."""
    import torch

    class Modal(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.register_buffer("ema", torch.zeros(4))
            self.register_buffer("seen", torch.zeros((), dtype=torch.int64), persistent=False)

        @torch.inference_mode()
        def center(self, h):
            return h.mean(0)

        def forward(self, x):
            h = torch.tanh(self.linear(x))
            self.seen += x.shape[0]                    # in both modes
            with torch.inference_mode():
                spread = h.std()
            h = (h - self.center(h).clone()) * spread.clone()
            if self.training:
                with torch.no_grad():
                    scale = h.abs().amax(dim=(0, 1))
                    self.ema.mul_(0.5).add_(0.5 * h.mean(0))
                h = h / scale * 2
            return h - self.ema + (h * h).detach()

    class UpdatesWeight(torch.nn.Linear):
        def forward(self, x):
            with torch.no_grad():
                self.weight.mul_(0.5)
            return super().forward(x)

    class UpdatesInput(torch.nn.Linear):
        def forward(self, x):
            x.mul_(2)
            return super().forward(x)
    return torch, Modal, UpdatesWeight, UpdatesInput


def test_state_updates_mode_branches_and_stop_gradients_match_torch():
    """Buffers updated in place (in one mode or both, persistent or not) are carried as state, a
    forward that branches on self.training follows train()/eval(), and no_grad and inference_mode
    blocks and detaches pass no gradient: two training calls, then one in eval mode, as in PyTorch; updates of a
    parameter or an input are refused by name."""
    _require("torch")
    _require("onnxscript")
    torch, Modal, UpdatesWeight, UpdatesInput = _torch_modules()
    torch.manual_seed(0)
    module = Modal().train()
    x = torch.randn(3, 4)
    model = gc.from_torch(module, x)
    assert set(model.state_dict()) == {"linear.weight", "linear.bias", "ema", "seen"}

    def run(m, x):
        y, gx = gc.value_and_grad(lambda x: F.sum(m(x) ** 2))(x)
        return y, gx, dict(m.named_buffers())

    for step in range(3):
        if step == 2:
            module.eval()
            model.eval()
        xs = torch.randn(3 + step, 4)
        xt = xs.clone().requires_grad_(True)
        expected = (module(xt) ** 2).sum()
        expected.backward()
        loss, gx, buffers = gc.jit(run)(model, xs.numpy())
        model.load_state_dict(buffers, strict=False)
        np.testing.assert_allclose(loss, expected.item(), rtol=1e-5)
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(buffers["ema"], module.ema.numpy(), rtol=1e-5, atol=1e-7)
        assert buffers["seen"] == module.seen.item()
    for cls, name in ((UpdatesWeight, "parameters ['weight']"), (UpdatesInput, "inputs ['x']")):
        with pytest.raises(gc.GcompileError, match=re.escape(f"updates its {name} in place")):
            gc.from_torch(cls(4, 2), torch.randn(3, 4))


def test_dropout_layers_draw_a_mask_while_training_and_vanish_in_eval():
    """nn.Dropout exports as a Dropout node: in training mode each element is dropped with the
    layer's ratio and the rest scaled by 1/(1 - ratio), a new mask each call, the gradient through
    the same mask; in eval mode the layer is the identity (PyTorch's eval output)."""
    model = gc.from_torch(DATA / "bridge_dropout.onnx")
    arrays = dict(np.load(DATA / "bridge_dropout.npz"))
    x, y_eval, ratio = arrays["x"], arrays["y_eval"], float(arrays["ratio"])
    assert model.training

    def run(m, x):
        def loss(x):
            y = m(x)
            return F.sum(y), y
        (_, y), gx = gc.value_and_grad(loss, argnums=0, has_aux=True)(x)
        return y, gx

    y, gx = gc.jit(run)(model, x)
    kept = y != 0
    np.testing.assert_allclose(y[kept], y_eval[kept] / (1 - ratio), rtol=1e-5, atol=1e-6)
    assert abs((~kept).mean() - ratio) < 0.05                     # 2,000 elements
    weight = np.asarray(model.params["0.weight"])                 # d sum(y) / dx through the same mask
    np.testing.assert_allclose(gx, (kept / (1 - ratio)) @ weight, rtol=1e-4, atol=1e-5)
    again, _ = gc.jit(run)(model, x)
    assert np.any((again != 0) != kept)                           # a new mask each call
    np.testing.assert_allclose(gc.jit(lambda m, x: m(x))(model.eval(), x), y_eval, rtol=1e-5, atol=1e-6)
