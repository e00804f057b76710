"""gc.optim update rules against a NumPy re-implementation of torch.optim's documented
algorithms, for 5 steps of a small MLP, through the exported one-model training step."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gcompile as gc
from gcompile.errors import GcompileError

from .mlp import loss_fn, numpy_loss_and_grads, problem


def numpy_sgd(lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
    def update(p, g, s, t):
        g = g + weight_decay * p
        if momentum:
            s["buf"] = g if t == 1 else momentum * s["buf"] + (1 - dampening) * g
            g = g + momentum * s["buf"] if nesterov else s["buf"]
        return p - lr * g
    return update


def numpy_adam(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    b1, b2 = betas

    def update(p, g, s, t):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
        m_hat, v_hat = s["m"] / (1 - b1 ** t), s["v"] / (1 - b2 ** t)
        return p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return update


CASES = {
    "sgd": (gc.optim.SGD(0.1), numpy_sgd(0.1)),
    "sgd-momentum": (gc.optim.SGD(0.05, momentum=0.9), numpy_sgd(0.05, momentum=0.9)),
    "sgd-nesterov-wd": (gc.optim.SGD(0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
                        numpy_sgd(0.05, momentum=0.8, nesterov=True, weight_decay=0.1)),
    "sgd-dampening": (gc.optim.SGD(0.05, momentum=0.9, dampening=0.5, weight_decay=0.01),
                      numpy_sgd(0.05, momentum=0.9, dampening=0.5, weight_decay=0.01)),
    "adam": (gc.optim.Adam(0.01), numpy_adam(0.01)),
    "adam-wd-betas": (gc.optim.Adam(0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
                      numpy_adam(0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    "adamw": (gc.optim.AdamW(0.01, weight_decay=0.1), numpy_adam(0.01, weight_decay=0.1, decoupled=True)),
}


def numpy_run(update, params, x, y, steps=5):
    p = {k: v.astype(np.float64) for k, v in params.items()}
    slots = {k: {} for k in p}
    losses = []
    for t in range(1, steps + 1):
        loss, grads = numpy_loss_and_grads(p, x.astype(np.float64), y.astype(np.float64))
        losses.append(loss)
        p = {k: update(p[k], grads[k], slots[k], t) for k in p}
    return losses, p


def gcompile_run(step, params, x, y, steps=5):
    p, (state, count) = params, step.initial_state()
    losses = []
    for _ in range(steps):
        loss, p, state, count = step(p, state, count, x, y)
        losses.append(float(loss))
    assert int(count) == steps
    return losses, p


@pytest.mark.parametrize("dtype, rtol, atol", [(np.float64, 1e-10, 1e-12), (np.float32, 1e-5, 1e-6)])
@pytest.mark.parametrize("case", list(CASES))
def test_update_matches_numpy(case, dtype, rtol, atol):
    optimizer, update = CASES[case]
    params, x, y = problem(dtype)
    step = gc.export_train_step(loss_fn, params, optimizer, x, y, provider="cpu")
    losses, p = gcompile_run(step, params, x, y)
    expected_losses, expected = numpy_run(update, params, x, y)
    np.testing.assert_allclose(losses, expected_losses, rtol=rtol, atol=atol)
    for name in params:
        assert p[name].dtype == dtype
        np.testing.assert_allclose(p[name], expected[name], rtol=rtol, atol=atol, err_msg=name)
    assert not np.allclose(p["w1"], params["w1"])      # the parameters did move


def test_state_layout_and_names():
    params, x, y = problem()
    step = gc.export_train_step(loss_fn, params, gc.optim.Adam(), x, y, provider="cpu")
    assert [v.name for v in step.model.graph.input] == [
        "w1", "b1", "w2", "b2", "w1.m", "w1.v", "b1.m", "b1.v", "w2.m", "w2.v", "b2.m", "b2.v", "step", "x", "y"]
    assert [v.name for v in step.model.graph.output] == [
        "loss", "skipped", "w1.new", "b1.new", "w2.new", "b2.new", "w1.m.new", "w1.v.new", "b1.m.new", "b1.v.new",
        "w2.m.new", "w2.v.new", "b2.m.new", "b2.v.new", "step.new"]
    state, count = step.initial_state()
    assert count.dtype == np.int64 and count.shape == () and count == 0
    assert all(np.array_equal(state[f"{k}.{s}"], np.zeros_like(v)) for k, v in params.items() for s in "mv")
    assert list(gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), x, y, provider="cpu").initial_state()[0]) == []
    momentum = gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1, momentum=0.9), x, y, provider="cpu")
    assert list(momentum.initial_state()[0]) == ["w1.momentum", "b1.momentum", "w2.momentum", "b2.momentum"]


def test_model_is_plain_onnx(tmp_path):
    """ai.onnx ops only, onnx.checker's full check, and a plain InferenceSession runs the saved file."""
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.AdamW(0.01), gc.spec(("batch", 3)),
                                gc.spec(("batch", 2)), provider="cpu")
    assert {n.domain for n in step.model.graph.node} <= {"", "ai.onnx"}
    assert [(o.domain, o.version) for o in step.model.opset_import] == [("", step.model.opset_import[0].version)]
    onnx.checker.check_model(step.model, full_check=True)
    path = tmp_path / "step.onnx"
    step.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step.onnx"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    state, count = step.initial_state()
    feeds = {**params, **state, "step": count, "x": x, "y": y}
    outs = dict(zip([o.name for o in step.model.graph.output], session.run(None, feeds)))
    loss, new_params, new_state, new_count = step(params, state, count, x, y)
    assert outs["loss"] == loss and outs["step.new"] == new_count == 1
    for name in params:
        np.testing.assert_array_equal(outs[f"{name}.new"], new_params[name])
        np.testing.assert_array_equal(outs[f"{name}.m.new"], new_state[f"{name}.m"])


def test_batch_names_and_symbolic_batch():
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), gc.spec(("n", 3)), gc.spec(("n", 2)),
                                provider="cpu")
    state, count = step.initial_state()
    for n in (4, 9):
        loss, *_ = step(params, state, count, x[:n], y[:n])
        np.testing.assert_allclose(loss, numpy_loss_and_grads(params, x[:n], y[:n])[0], rtol=1e-5)


@pytest.mark.parametrize("make, fragment", [
    (lambda: gc.optim.SGD(-1.0), "must be >= 0"),
    (lambda: gc.optim.SGD(0.1, nesterov=True), "nesterov"),
    (lambda: gc.optim.Adam(betas=(0.9, 1.0)), "betas"),
])
def test_optimizer_arguments_are_checked(make, fragment):
    with pytest.raises(GcompileError, match=fragment):
        make()


def test_export_errors():
    params, x, y = problem()
    with pytest.raises(GcompileError, match="scalar"):
        gc.export_train_step(lambda p, x: x @ p["w1"], params, gc.optim.SGD(0.1), x)
    with pytest.raises(GcompileError, match="'w1' is used twice"):
        gc.export_train_step(lambda p, w1: loss_fn(p, w1, y), params, gc.optim.SGD(0.1), x)
    with pytest.raises(GcompileError, match="floating-point"):
        gc.export_train_step(loss_fn, {"w": np.arange(3)}, gc.optim.SGD(0.1), x, y)
    with pytest.raises(GcompileError, match="gc.optim"):
        gc.export_train_step(loss_fn, params, "adam", x, y)
