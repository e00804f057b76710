"""The spatial, pooling, scatter, loss, normalisation, attention and solver ops against PyTorch's
own values and gradients, stored in tests/data/torch_ops.npz by tools/make_torch_op_fixtures.py
(PyTorch is not needed here).

Per case: onnxruntime's float32 forward against PyTorch's float64 output; the float64 reference
evaluator's output and gradient of sum(out * w) against PyTorch's to 1e-10; and onnxruntime's
float32 gradient graph against PyTorch's gradients."""
import json
from pathlib import Path

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

from ..opcheck import GRAD_CHECKED_OPS, check_forward

DATA = np.load(Path(__file__).resolve().parents[1] / "data" / "torch_ops.npz")
CASES = sorted({k.split("/")[0] for k in DATA.files})
_LISTS_AS_ARRAYS = {"index", "indices"}


def load(name):
    call = json.loads(str(DATA[f"{name}/call"]))
    inputs = [DATA[f"{name}/in{k}"] for k in range(len(call["names"]))]
    outs = [DATA[f"{name}/out{k}"] for k in range(2) if f"{name}/out{k}" in DATA.files]
    kwargs = {}
    for key, value in call["kwargs"].items():
        if key in _LISTS_AS_ARRAYS:
            value = tuple(np.asarray(v) for v in value) if key == "indices" else np.asarray(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    op = getattr(F, call["op"])

    def fn(*xs):
        return op(**dict(zip(call["names"], xs)), **kwargs)
    return fn, inputs, outs, call["float"], DATA[f"{name}/w"], call["pick"]


@pytest.mark.parametrize("name", CASES)
def test_matches_pytorch(name):
    fn, inputs, outs, wrt, w, pick = load(name)
    f32 = [a.astype(np.float32) if a.dtype == np.float64 else a for a in inputs]
    expected = [o.astype(np.float32) if o.dtype.kind == "f" else o for o in outs]
    check_forward(fn, f32, expected, rtol=1e-4, atol=1e-5)

    def loss_and_grads(*xs):
        y = fn(*xs)
        y = y[pick] if isinstance(y, tuple) else y
        return [y] + gc.grad(F.sum(y * w), [xs[k] for k in wrt])
    traced = trace(loss_and_grads, inputs)
    GRAD_CHECKED_OPS.update(n.op for n in traced.graph.nodes.values())     # torch's gradients check them too
    got = evaluate(traced.graph, inputs)
    np.testing.assert_allclose(got[0], outs[pick], rtol=1e-10, atol=1e-12)
    for g, k in zip(got[1:], wrt):
        np.testing.assert_allclose(g, DATA[f"{name}/grad{k}"], rtol=1e-9, atol=1e-11, err_msg=f"gradient {k}")
    check_forward(loss_and_grads, f32, [expected[pick]] + [DATA[f"{name}/grad{k}"].astype(np.float32) for k in wrt],
                  rtol=1e-4, atol=1e-4)
