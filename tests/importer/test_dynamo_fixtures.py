"""Two-layer BERT, DistilBERT, GPT-2 and T5 encoders exported by PyTorch's dynamo exporter unoptimised
(optimize=False) with a dynamic batch (tools/make_dynamo_fixtures.py): every size computation torch.export
traced is in the file (Shape -> Squeeze -> CastLike -> Range over the batch, mask arithmetic, GPT-2's
SplitToSequence). Imported with gc.load_onnx, compiled once with the batch symbolic and run at batch
sizes 2 and 3 on ONNX Runtime (float32): the output, the gradients of L = sum(y * w) w.r.t. inputs_embeds
and four parameters, and at batch 2 two Hessian-vector products (along inputs_embeds and along the
first parameter), against PyTorch's float64 results. Torch is not needed here."""
import os

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "dynamo")
MODELS = ["bert", "distilbert", "gpt2", "t5"]


def close(got, expected, what):
    """Within 5e-5 of the largest expected value: PyTorch's own float32 results, first and second order, are
    within 6e-6 of its float64 ones for these weights, gcompile's within 1.3e-5 (T5's second order)."""
    np.testing.assert_allclose(got, expected, rtol=0, atol=5e-5 * np.abs(expected).max(), err_msg=what)


@pytest.mark.parametrize("name", MODELS)
def test_unoptimised_dynamo_export_matches_pytorch_to_second_order(name):
    f = gc.load_onnx(os.path.join(DATA, f"{name}.onnx"))
    data = np.load(os.path.join(DATA, f"{name}.npz"))
    specs = f.input_specs()
    assert f.input_names == ["inputs_embeds", "attention_mask"]
    assert all(s.shape[0] == "batch" for s in specs), specs
    params = data["params"].tolist()
    names = ["inputs_embeds"] + params

    def step(x, mask, w, v_x, v_p, *ps):
        y = f(x, mask, params=dict(zip(params, ps)))
        grads = gc.grad(F.sum(y * w), [x, *ps])
        along_x = gc.grad(F.sum(grads[0] * v_x), [x, *ps])
        along_p = gc.grad(F.sum(grads[1] * v_p), [x, *ps])
        return y, grads, along_x, along_p

    values = [f.params[p] for p in params]
    x_spec = specs[0]
    compiled = gc.compile(step, *specs, x_spec, x_spec, values[0], *values, provider="cpu")
    for b in (2, 3):
        x, mask, w = data[f"in__inputs_embeds_b{b}"], data[f"in__attention_mask_b{b}"], data[f"w_b{b}"]
        second = b == 2
        v_x = data["v__inputs_embeds_b2"] if second else np.zeros_like(x)
        v_p = data[f"v__{params[0]}_b2"] if second else np.zeros_like(values[0])
        y, grads, along_x, along_p = compiled(x, mask, w, v_x, v_p, *values)
        close(y, data[f"y_b{b}"], f"y at batch {b}")
        for n, g in zip(names, grads):
            close(g, data[f"grad__{n}_b{b}"], f"grad {n} at batch {b}")
        if second:
            for n, h in zip(names, along_x):
                close(h, data[f"hvp_x__{n}_b2"], f"d/d{n} <grad inputs_embeds, v>")
            for n, h in zip(names, along_p):
                close(h, data[f"hvp_p__{n}_b2"], f"d/d{n} <grad {params[0]}, v>")
