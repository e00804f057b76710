"""export_train_step and Trainer beyond a flat dict: nested parameter pytrees, buffers carried and
updated by the step, auxiliary outputs (has_aux), hyper-parameters as inputs with schedules, and
gradient clipping, each checked against a NumPy computation of the same step."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile import nn
from gcompile.errors import GcompileError, InputError

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 3)).astype(np.float32)
Y = RNG.standard_normal((8, 2)).astype(np.float32)
PARAMS = {"layer": {"w": RNG.standard_normal((3, 2)).astype(np.float32), "b": np.zeros(2, np.float32)}}


def mse_loss(p, x, y):
    return F.mean((x @ p["layer"]["w"] + p["layer"]["b"] - y) ** 2)


def _grads(w, b):
    r = X @ w + b - Y
    return 2 * X.T @ r / r.size, 2 * r.sum(0) / r.size


def test_nested_params_are_named_by_path_and_rebuilt():
    step = gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(0.1), X, Y, provider="cpu")
    assert step.layout.params == ("layer.w", "layer.b")
    assert [i.name for i in step.model.graph.input][:2] == ["layer.w", "layer.b"]
    trainer = gc.runtime.Trainer(step)
    trainer.step(X, Y)
    gw, gb = _grads(PARAMS["layer"]["w"], PARAMS["layer"]["b"])
    tree = trainer.params                                          # in the structure exported with
    np.testing.assert_allclose(tree["layer"]["w"], PARAMS["layer"]["w"] - 0.1 * gw, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tree["layer"]["b"], -0.1 * gb, rtol=1e-5, atol=1e-7)


def test_a_saved_step_takes_params_in_any_structure_and_gives_them_back_in_it(tmp_path):
    """Trainer(path, params=nested) used to refuse the nested dict export_train_step took and want
    dotted names, and .params came back flat. The flat dotted form still works, and comes back flat."""
    step = gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(0.1), X, Y, provider="cpu")
    step.save(tmp_path / "step.onnx")
    nested = gc.runtime.Trainer(tmp_path / "step.onnx", params=PARAMS, provider="cpu")
    flat = gc.runtime.Trainer(tmp_path / "step.onnx", provider="cpu",
                              params={"layer.w": PARAMS["layer"]["w"], "layer.b": PARAMS["layer"]["b"]})
    assert nested.step(X, Y) == flat.step(X, Y)
    assert list(nested.params) == ["layer"] and list(nested.params["layer"]) == ["w", "b"]
    assert list(flat.params) == ["layer.w", "layer.b"]
    np.testing.assert_array_equal(nested.params["layer"]["w"], flat.params["layer.w"])
    with pytest.raises(InputError, match="missing 'layer.b'; unexpected 'layer.bias'"):
        gc.runtime.Trainer(tmp_path / "step.onnx", params={"layer": {"w": PARAMS["layer"]["w"], "bias": 0}})
    with pytest.raises(GcompileError, match="params must be a pytree of arrays"):
        gc.runtime.Trainer(tmp_path / "step.onnx", params=PARAMS["layer"]["w"])


def test_hyperparameters_are_inputs_fed_each_step_with_schedules():
    step = gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(0.1), X, Y, hyperparams={"lr": 0.1}, provider="cpu")
    assert "lr" in [i.name for i in step.model.graph.input] and step.layout.hyper == (("lr", 0.1, "float32"),)
    lrs = [0.5, 0.0, 0.25]
    trainer = gc.runtime.Trainer(step, hyperparams={"lr": lambda t: lrs[t]})
    w, b = PARAMS["layer"]["w"].copy(), PARAMS["layer"]["b"].copy()
    for t in range(3):
        trainer.step(X, Y)
        gw, gb = _grads(w, b)
        w, b = w - lrs[t] * gw, b - lrs[t] * gb
    np.testing.assert_allclose(trainer.params["layer"]["w"], w, rtol=1e-5, atol=1e-6)
    before = trainer.params["layer"]["w"]
    trainer.step(X, Y, lr=0.0)                                   # a per-call value wins
    np.testing.assert_array_equal(trainer.params["layer"]["w"], before)
    with pytest.raises(InputError, match="no hyper-parameter 'momentum'"):
        trainer.step(X, Y, momentum=0.5)
    loss, new, _, _ = step(step.params, {}, 0, X, Y, lr=0.0)     # the functional call takes them as keywords
    np.testing.assert_array_equal(new["layer.w"], PARAMS["layer"]["w"])


def test_other_hyperparameters_reach_the_loss_function():
    def loss(p, x, y, weight):
        return weight * mse_loss(p, x, y)

    step = gc.export_train_step(loss, PARAMS, gc.optim.SGD(0.1), X, Y, hyperparams={"weight": 1.0}, provider="cpu")
    trainer = gc.runtime.Trainer(step)
    assert trainer.step(X, Y, weight=0.0) == 0.0
    with pytest.raises(GcompileError, match="'temp' is neither a hyper-parameter of SGD .* nor a keyword"):
        gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(0.1), X, Y, hyperparams={"temp": 1.0})
    with pytest.raises(GcompileError, match="momentum decides whether it keeps a momentum buffer"):
        gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(0.1), X, Y, hyperparams={"momentum": 0.9})


def test_has_aux_metrics_are_outputs_returned_by_each_step():
    def loss(p, x, y):
        pred = x @ p["layer"]["w"] + p["layer"]["b"]
        return F.mean((pred - y) ** 2), {"mae": F.mean(F.abs(pred - y)), "pred": pred}

    step = gc.export_train_step(loss, PARAMS, gc.optim.Adam(1e-2), X, Y, has_aux=True, provider="cpu")
    assert step.layout.aux == ("mae", "pred") and step.layout.outputs[:3] == ("loss", "mae", "pred")
    value, metrics = gc.runtime.Trainer(step).step(X, Y)
    pred = X @ PARAMS["layer"]["w"]
    np.testing.assert_allclose(value, ((pred - Y) ** 2).mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["mae"], np.abs(pred - Y).mean(), rtol=1e-5)
    assert metrics["pred"].shape == (8, 2)
    with pytest.raises(GcompileError, match=r"has_aux=True: the loss function must return a pair"):
        gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(0.1), X, Y, has_aux=True)
    with pytest.raises(GcompileError, match="or pass has_aux=True if it returns"):
        gc.export_train_step(loss, PARAMS, gc.optim.SGD(0.1), X, Y)


def test_clip_grad_norm_scales_gradients_to_the_global_norm():
    step = gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(1.0), X, Y, clip_grad_norm=0.1, provider="cpu")
    trainer = gc.runtime.Trainer(step)
    trainer.step(X, Y)
    gw, gb = _grads(PARAMS["layer"]["w"], PARAMS["layer"]["b"])
    norm = np.sqrt((gw ** 2).sum() + (gb ** 2).sum())
    assert norm > 0.1
    scale = 0.1 / (norm + 1e-6)
    np.testing.assert_allclose(trainer.params["layer"]["w"], PARAMS["layer"]["w"] - scale * gw, rtol=1e-5, atol=1e-6)
    with pytest.raises(GcompileError, match="clip_grad_norm must be a positive number"):
        gc.export_train_step(mse_loss, PARAMS, gc.optim.SGD(1.0), X, Y, clip_grad_norm=0)


class Net(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(3, 4, rng=1)
        self.bn = nn.BatchNorm1d(4, momentum=0.2)
        self.out = nn.Linear(4, 2, rng=2)

    def forward(self, x):
        return self.out(F.relu(self.bn(self.fc(x))))


def test_module_buffers_are_carried_updated_and_checkpointed(tmp_path):
    model = Net()
    step = gc.export_train_step(lambda m, x, y: F.mean((m(x) - y) ** 2), model, gc.optim.SGD(0.0), X, Y,
                                provider="cpu")
    assert step.layout.buffers == ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked")
    assert "bn.running_mean.new" in step.layout.outputs and "bn.running_mean" not in step.layout.params
    trainer = gc.runtime.Trainer(step)
    mean, var = np.zeros(4), np.ones(4)
    h = X @ model.fc.weight.T + model.fc.bias                      # lr 0: the same batch statistics each step
    for _ in range(2):
        trainer.step(X, Y)
        mean, var = 0.8 * mean + 0.2 * h.mean(0), 0.8 * var + 0.2 * h.var(0, ddof=1)
    np.testing.assert_allclose(trainer.buffers["bn.running_mean"], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trainer.buffers["bn.running_var"], var, rtol=1e-5, atol=1e-6)
    assert trainer.buffers["bn.num_batches_tracked"] == 2
    trainer.save(tmp_path / "ckpt.npz")
    other = gc.runtime.Trainer(step)
    other.load(tmp_path / "ckpt.npz")
    np.testing.assert_array_equal(other.buffers["bn.running_var"], trainer.buffers["bn.running_var"])
    trained = Net().load_state_dict(trainer.state_dict())
    np.testing.assert_allclose(trained.bn.running_mean, mean, rtol=1e-5, atol=1e-6)
    path = tmp_path / "step.onnx"
    step.save(path)
    from_file = gc.runtime.Trainer(path, params=model.state_dict())         # a saved step takes a state_dict
    assert from_file.step(X, Y) == pytest.approx(gc.runtime.Trainer(step).step(X, Y), rel=1e-6)
    assert set(from_file.params) == set(model.state_dict())                 # and gives one back
    as_module = gc.runtime.Trainer(path, params=Net(), provider="cpu")      # or a Module, given back as one
    as_module.step(X, Y)
    assert isinstance(as_module.params, Net) and isinstance(trainer.params, Net)
    np.testing.assert_array_equal(as_module.params.bn.running_mean, as_module.buffers["bn.running_mean"])
