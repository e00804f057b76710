"""gc.nn's layers against PyTorch's (fixtures from tools/make_nn_fixtures.py; torch is not needed):
the same constructor arguments, torch's state_dict loaded as is, the same outputs, parameter and
input gradients, and BatchNorm's running statistics after a training-mode call."""
import json
from pathlib import Path

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = np.load(DATA / "torch_nn.npz")
CASES = sorted({k.split("/")[0] for k in FIXTURES.files})


def _case(case):
    entries = {k[len(case) + 1:]: FIXTURES[k] for k in FIXTURES.files if k.startswith(case + "/")}
    config = json.loads(str(entries.pop("config")))
    groups: dict = {}
    for key, value in entries.items():
        group, name = key.split("/", 1)
        groups.setdefault(group, {})[name] = value
    return config, groups


@pytest.mark.parametrize("case", CASES)
def test_layer_matches_torch(case):
    config, d = _case(case)
    module = getattr(gc.nn, config["layer"])(**config["kwargs"])
    assert list(module.state_dict()) == list(d["state"])            # torch's names, in torch's order
    module.load_state_dict(d["state"]).train(config["mode"] == "train")
    inputs = d["in"]
    floats = {n: v for n, v in inputs.items() if v.dtype == np.float32}
    others = {n: v for n, v in inputs.items() if n not in floats}
    ws = [d["w"][str(i)] for i in range(len(d["w"]))]

    def forward(m, xs):
        values = {**xs, **others}
        if config["call"]:
            return m(**{k: values[v] if isinstance(v, str) else v for k, v in config["call"].items()})
        return m(*[values[name] for name, _, _ in config["inputs"]])

    def loss(m, xs):
        outs = gc.tree_util.leaves(forward(m, xs))
        total = F.add_n([F.sum(o * w) for o, w in zip(outs, ws)])
        return total, (outs, dict(m.named_buffers()))

    def run(m, xs):
        (_, aux), grads = gc.value_and_grad(loss, argnums=(0, 1), has_aux=True)(m, xs)
        return aux, grads

    (outs, buffers), (g_module, g_inputs) = gc.jit(run)(module, floats)
    assert len(outs) == len(d["out"])
    for i, out in enumerate(outs):
        np.testing.assert_allclose(out, d["out"][str(i)], rtol=1e-4, atol=1e-5, err_msg=f"output {i}")
    g_params = dict(g_module.named_parameters())
    for name, expected in d["grad"].items():
        got = g_inputs[name[3:]] if name.startswith("in.") else g_params[name]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=name)
    for name, expected in d.get("new", {}).items():
        np.testing.assert_allclose(buffers[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def test_safetensors_written_by_the_safetensors_package_load():
    _, d = _case("conv2d")
    conv = gc.nn.Conv2d(3, 4, 3, stride=2, padding=1).load_state_dict(DATA / "torch_nn.safetensors")
    for name, value in conv.state_dict().items():
        np.testing.assert_array_equal(value, d["state"][name])
