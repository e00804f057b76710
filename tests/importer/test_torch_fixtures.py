"""Models exported from PyTorch (tools/make_torch_fixtures.py), imported with gc.load_onnx, compiled
to ONNX and run on onnxruntime in float32: outputs, gradients w.r.t. the input and every parameter
of L = sum(y * w), and a Hessian-vector product w.r.t. the parameters, against PyTorch's.
Torch is not needed here: its results are stored beside each model."""
import os

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


def _fixture(name):
    data = np.load(os.path.join(DATA, f"torch_{name}.npz"))
    params = [k[len("v__"):] for k in data.files if k.startswith("v__")]
    return gc.load_onnx(os.path.join(DATA, f"torch_{name}.onnx")), data, params


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_gradients_match_pytorch(name):
    f, data, names = _fixture(name)
    assert set(names) <= set(f.params)
    (x_spec,) = f.input_specs()
    assert x_spec.shape[0] == "batch"          # the exporter's dynamic axis stays symbolic

    def step(x, w, *pv):
        ps, vs = pv[:len(names)], pv[len(names):]
        y = f(x, params=dict(zip(names, ps)))
        loss = F.sum(y * w)
        grads = gc.grad(loss, [x, *ps])
        hvp = gc.grad(F.add_n([F.sum(g * v) for g, v in zip(grads[1:], vs)]), list(ps))
        return y, grads, hvp

    params = [f.params[n] for n in names]
    vectors = [data[f"v__{n}"] for n in names]
    w_spec = gc.spec(("batch",) + data["w"].shape[1:])
    compiled = gc.compile(step, x_spec, w_spec, *params, *vectors, provider="cpu")
    y, grads, hvp = compiled(data["x"], data["w"], *params, *vectors)

    close(y, data["y"], "y")
    close(grads[0], data["grad__x"], "grad x")
    for n, g, h in zip(names, grads[1:], hvp):
        close(g, data[f"grad__{n}"], f"grad {n}")
        close(h, data[f"hvp__{n}"], f"hvp {n}")


def close(got, expected, what):
    """float32 agreement: rtol 1e-4, atol 2e-5 plus 1e-6 of the array's largest entry (entries that are
    sums of much larger terms of both signs carry that much rounding in either implementation)."""
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-5 + 1e-6 * np.abs(expected).max(), err_msg=what)
