"""Tiny transformers (BERT, DistilBERT, GPT-2, T5, ViT, Whisper, a Llama-style decoder), a torchvision-block
CNN and a small vision zoo (Swin V1 and V2, ConvNeXt, MobileNetV3), exported by PyTorch's TorchScript
exporter and by its dynamo exporter with and without its optimizer, with a dynamic batch
(tools/make_model_fixtures.py): imported with gc.load_onnx, compiled once with the batch symbolic and
run at batch sizes 2 and 3 on ONNX Runtime (float32): outputs, gradients of L = sum(y * w) w.r.t. float
inputs and parameters (every one for the zoo and Llama), and for BERT a Hessian-vector product, against
PyTorch's stored results. Torch is not needed here."""
import os

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "models")
MODELS = ["bert", "distilbert", "gpt2", "t5", "vit", "whisper", "vision", "swin", "swin_v2", "convnext",
          "mobilenet_v3", "llama"]
EXPORTERS = ["legacy", "dynamo", "dynamo_raw"]


def close(got, expected, what):
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=3e-5 + 2e-6 * np.abs(expected).max(), err_msg=what)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", MODELS)
def test_model_matches_pytorch_at_two_batch_sizes(name, exporter):
    path = os.path.join(DATA, f"{name}_{exporter}.onnx")
    data = np.load(os.path.join(DATA, f"{name}.npz"))
    f = gc.load_onnx(path)
    specs = f.input_specs()
    assert all(s.shape[0] == "batch" for s in specs), specs       # the exporter's dynamic axis stays symbolic
    batch = "batch"
    params = data[f"params__{exporter}"].tolist()
    assert params, "the exporter kept none of the fixture's parameters"
    floats = [i for i, s in enumerate(specs) if np.dtype(s.dtype).kind == "f"]
    hvp = f"v__{params[0]}_b2" in data.files

    def step(*args):
        xs, rest = args[:len(specs)], args[len(specs):]
        w, ps, vs = rest[0], rest[1:1 + len(params)], rest[1 + len(params):]
        y = f(*xs, params=dict(zip(params, ps)))
        grads = gc.grad(F.sum(y * w), [xs[i] for i in floats] + list(ps))
        if not vs:
            return y, grads
        return y, grads, gc.grad(F.sum(grads[len(floats)] * vs[0]), list(ps))    # along the first parameter

    values = [f.params[p] for p in params]
    w_spec = gc.spec((batch,) + data["w_b2"].shape[1:])
    extra = values[:1] if hvp else []
    compiled = gc.compile(step, *specs, w_spec, *values, *extra, provider="cpu")
    for b in (2, 3):
        inputs = [data[f"in__{n}_b{b}"] for n in f.input_names]
        vectors = [data[f"v__{params[0]}_b2"]] if hvp else []
        out = compiled(*inputs, data[f"w_b{b}"], *values, *vectors)
        close(out[0], data[f"y_b{b}"], f"y at batch {b}")
        names = [f.input_names[i] for i in floats] + params
        for n, g in zip(names, out[1]):
            close(g, data[f"grad__{n}_b{b}"], f"grad {n} at batch {b}")
        if hvp and b == 2:
            for p, h in zip(params, out[2]):
                close(h, data[f"hvp__{p}_b2"], f"hvp {p}")
