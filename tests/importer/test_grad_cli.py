"""`gcompile grad`: the written model loads in onnxruntime and returns what gc.grad computes directly."""
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import gcompile as gc
import gcompile.functions as F
from gcompile.cli import main

from .helpers import mlp_model

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
RNG = np.random.default_rng(0)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), str(path))
    return path


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_second_order_cross_entropy_gradients_match_gc_grad(model_path, tmp_path):
    out = tmp_path / "grads.onnx"
    result = invoke("grad", model_path, "--wrt", "params,x", "--loss", "cross_entropy", "--order", "2", "-o", out)
    assert result.exit_code == 0, result.output
    names = ["W", "b", "scale", "shift", "W2", "x"]
    session = _session(out)
    assert [i.name for i in onnx.load(str(out)).graph.input] == (["x", "W", "b", "scale", "shift", "W2", "target"]
                                                                 + [f"v_{n}" for n in names])
    assert [i.name for i in session.get_inputs()] == ["x", "target"] + [f"v_{n}" for n in names]   # weights: defaults
    assert [o.name for o in session.get_outputs()] == (["y", "loss"] + [f"grad_{n}" for n in names]
                                                       + [f"hvp_{n}" for n in names])
    f = gc.load_onnx(str(model_path))
    params = [f.params[n] for n in names[:-1]]
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    target = np.array([0, 2, 1], np.int64)
    vs = [RNG.standard_normal(a.shape).astype(np.float32) for a in params + [x]]
    got = session.run(None, {"x": x, **dict(zip(names[:-1], params)), "target": target,
                             **{f"v_{n}": v for n, v in zip(names, vs)}})

    def direct(x, t, *pv):
        ps, v = pv[:5], pv[5:]
        y = f(x, params=dict(zip(names, ps)))
        loss = F.softmax_cross_entropy(y, t)
        grads = gc.grad(loss, [*ps, x])
        hvp = gc.grad(F.add_n([F.sum(g * u) for g, u in zip(grads, v)]), [*ps, x])
        return [y, loss, *grads, *hvp]
    expected = gc.compile(direct, gc.spec(("N", 4)), gc.spec(("N",), "int64"), *params, *vs[:-1], gc.spec(("N", 4)),
                          provider="cpu")
    for g, e in zip(got, expected(x, target, *params, *vs)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_input_saliency_of_a_pytorch_export(tmp_path):
    out = tmp_path / "saliency.onnx"
    result = invoke("grad", os.path.join(DATA, "torch_cnn.onnx"), "--wrt", "x", "-o", out)
    assert result.exit_code == 0, result.output
    data = np.load(os.path.join(DATA, "torch_cnn.npz"))
    session = _session(out)
    assert [i.name for i in session.get_inputs()] == ["x"]       # weights not differentiated stay constants
    y, grad_x = session.run(None, {"x": data["x"]})
    np.testing.assert_allclose(y, data["y"], rtol=1e-4, atol=1e-5)
    f = gc.load_onnx(os.path.join(DATA, "torch_cnn.onnx"))
    direct = gc.compile(lambda x: gc.grad(F.sum(f(x)), [x])[0], data["x"], provider="cpu")
    np.testing.assert_allclose(grad_x, direct(data["x"]), rtol=1e-5, atol=1e-6)


def test_mse_loss_of_a_named_output(model_path, tmp_path):
    out = tmp_path / "mse.onnx"
    result = invoke("grad", model_path, "--wrt", "W2", "--of", "y", "--loss", "mse", "--target", "label", "-o", out)
    assert result.exit_code == 0, result.output
    x, label = RNG.standard_normal((2, 4)).astype(np.float32), RNG.random((2, 3)).astype(np.float32)
    w2 = gc.load_onnx(str(model_path)).params["W2"]
    y, loss, grad = _session(out).run(None, {"x": x, "W2": w2, "label": label})
    np.testing.assert_allclose(loss, np.mean((y - label) ** 2), rtol=1e-5)
    f = gc.load_onnx(str(model_path))
    direct = gc.compile(lambda x, w, t: gc.grad(F.mse(f(x, params={"W2": w}), t), [w])[0], x, w2, label,
                        provider="cpu")
    np.testing.assert_allclose(grad, direct(x, w2, label), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("args, message", [
    (["--wrt", "nope"], "neither 'params' nor a model input"),
    (["--wrt", "W", "--target", "t"], "use it with --loss mse or cross_entropy"),
    (["--wrt", "W", "--of", "z"], "'z' is not an output"),
    (["--wrt", "W", "--loss", "mse", "--target", "x"], "already used for input 'x'"),
])
def test_user_errors_exit_2_with_one_paragraph(model_path, tmp_path, args, message):
    out = tmp_path / "never.onnx"
    result = invoke("grad", model_path, *args, "-o", out)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_missing_model_exits_2(tmp_path):
    result = invoke("grad", tmp_path / "missing.onnx", "--wrt", "params", "-o", tmp_path / "o.onnx")
    assert result.exit_code == 2 and "no such ONNX file" in result.output


def test_differentiated_weights_keep_their_values_as_defaults(model_path, tmp_path):
    """After --wrt params the weights are inputs with the original values as initializers of the
    same name: the model runs on its data inputs alone, and a fed weight overrides the default."""
    out = tmp_path / "grads.onnx"
    result = invoke("grad", model_path, "--wrt", "params", "-o", out)
    assert result.exit_code == 0, result.output
    assert "defaults W, b, scale, shift, W2" in result.output
    proto = onnx.load(str(out))
    f = gc.load_onnx(str(model_path))
    defaults = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer if t.name in f.params}
    assert set(defaults) == {"W", "b", "scale", "shift", "W2"}
    for name, value in defaults.items():
        np.testing.assert_array_equal(value, f.params[name])
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    session = _session(out)
    alone = session.run(None, {"x": x})
    fed = session.run(None, {"x": x, **f.params})
    for a, b in zip(alone, fed):
        np.testing.assert_array_equal(a, b)
    w2 = 2 * f.params["W2"]
    overridden = session.run(None, {"x": x, "W2": w2})
    np.testing.assert_allclose(overridden[0], gc.compile(lambda x: f(x, params={"W2": w2}), x, provider="cpu")(x),
                               rtol=1e-5)

    np.save(tmp_path / "x.npy", x)
    ran = invoke("run", out, "-i", f"x={tmp_path / 'x.npy'}")                    # gcompile run: data inputs only
    assert ran.exit_code == 0, ran.output
    assert "grad_W2: float32(5, 3)" in ran.output
    np.save(tmp_path / "w2.npy", w2)
    assert invoke("run", out, "-i", f"x={tmp_path / 'x.npy'}", "-i", f"W2={tmp_path / 'w2.npy'}").exit_code == 0
    wrong = invoke("run", out, "-i", f"x={tmp_path / 'x.npy'}", "-i", f"W2={tmp_path / 'x.npy'}")
    assert wrong.exit_code == 2 and "input 'W2': expected float32(5, 3), got float32(3, 4)" in wrong.output
    shown = invoke("inspect", out)
    assert "optional inputs (default: the initializer of the same name):\n  W: float32(5, 4)" in shown.output
    assert gc.load_onnx(str(out)).input_names == ["x"]                         # and the importer sees params
