"""The non-finite guard of a training step (skip_nonfinite, on by default): a step whose loss or a
gradient holds NaN or Inf leaves parameters, buffers, optimizer state and step counter as they
were, says so in its "skipped" output (in the saved file too, run by a plain InferenceSession) and
is counted by the Trainer; and NaN or Inf is refused where training starts (parameters, buffers,
checkpoints, hyper-parameters), naming the value.

Before the guard one NaN in a batch made every parameter NaN for good while the step counter
went on, and NaN parameters and checkpoints were taken without a word."""
import warnings

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile import nn
from gcompile.errors import GcompileError, InputError

from .mlp import loss_fn, problem


def _poisoned(x):
    bad = x.copy()
    bad[3, 1] = np.nan
    return bad


def _carried(trainer):
    return {**trainer.state_dict(), **trainer.state, "step": np.array(trainer.step_count)}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)


@pytest.mark.parametrize("optimizer", [gc.optim.Adam(0.01), gc.optim.SGD(0.1, momentum=0.9, dampening=0.1)])
def test_a_nan_batch_is_skipped_and_training_goes_on_as_if_it_never_came(optimizer):
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, optimizer, x, y, provider="cpu")
    assert step.layout.skip_nonfinite and "skipped" in step.layout.outputs
    guarded, clean = gc.runtime.Trainer(step), gc.runtime.Trainer(step)
    guarded.step(x, y)
    clean.step(x, y)
    before = _carried(guarded)
    with pytest.warns(RuntimeWarning, match=r"a step was skipped \(after 1 applied\).*skipped_steps"):
        loss = guarded.step(_poisoned(x), y)
    assert np.isnan(loss)                                   # the loss is reported as computed
    assert _same(_carried(guarded), before)                 # the step changed nothing, counter included
    assert guarded.skipped_steps == 1 and guarded.step_count == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # warned once per Trainer
        guarded.step(_poisoned(x), y)
    assert guarded.skipped_steps == 2
    for _ in range(3):
        assert guarded.step(x, y) == clean.step(x, y)
    assert _same(_carried(guarded), _carried(clean))        # bit for bit the run that never saw the bad batch
    assert clean.skipped_steps == 0


def test_an_infinite_gradient_of_a_finite_loss_is_skipped_before_clipping():
    """sqrt at 0: a finite loss whose gradient is +inf. Clipping would turn inf into NaN (inf·0), so
    the guard reads the gradients as computed."""
    w = {"w": np.array([1.0, 2.0], np.float32)}

    def loss(p, x):
        return F.sum(F.sqrt(p["w"] + x))

    step = gc.export_train_step(loss, w, gc.optim.SGD(0.1), gc.spec((2,)), clip_grad_norm=1.0, provider="cpu")
    trainer = gc.runtime.Trainer(step)
    with pytest.warns(RuntimeWarning):
        assert trainer.step(np.array([-1.0, 0.0], np.float32)) == pytest.approx(np.sqrt(2))
    np.testing.assert_array_equal(trainer.params["w"], w["w"])
    assert trainer.skipped_steps == 1
    trainer.step(np.array([0.0, 0.0], np.float32))
    assert trainer.step_count == 1 and not np.array_equal(trainer.params["w"], w["w"])


def test_buffers_are_kept_too():
    """BatchNorm's running statistics, which the forward pass replaces, come back unchanged."""
    class Net(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(3, 4, rng=1)
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x):
            return F.sum(self.bn(self.fc(x)) ** 2)

    params, x, _ = problem(np.float32)
    step = gc.export_train_step(lambda m, x: m(x) / x.shape[0], Net(), gc.optim.Adam(0.01), x, provider="cpu")
    trainer = gc.runtime.Trainer(step)
    trainer.step(x)
    buffers = trainer.buffers
    with pytest.warns(RuntimeWarning):
        trainer.step(_poisoned(x))
    assert _same(trainer.buffers, buffers)
    assert trainer.buffers["bn.num_batches_tracked"] == 1


def test_the_saved_file_guards_itself_on_a_plain_runtime(tmp_path):
    import onnxruntime as ort
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.Adam(0.01), x, y, provider="cpu")
    step.save(tmp_path / "step.onnx")
    session = ort.InferenceSession(str(tmp_path / "step.onnx"), providers=["CPUExecutionProvider"])
    state, count = step.initial_state()
    feeds = {**params, **state, "step": count, "x": _poisoned(x), "y": y}
    out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert out["skipped"].dtype == np.bool_ and out["skipped"].shape == () and out["skipped"]
    for name in step.layout.carried:
        assert out[f"{name}.new"].tobytes() == np.asarray(feeds[name]).tobytes(), name
    out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {**feeds, "x": x})))
    assert not out["skipped"] and out["step.new"] == 1
    _, _, _, functional_count = step(params, state, count, _poisoned(x), y)
    assert functional_count == 0                            # the functional call gives its inputs back too


def test_without_the_guard_one_nan_batch_ruins_every_parameter():
    """skip_nonfinite=False: what the training guide says happens without the guard."""
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.Adam(0.01), x, y, skip_nonfinite=False, provider="cpu")
    assert not step.layout.skip_nonfinite and "skipped" not in step.layout.outputs
    trainer = gc.runtime.Trainer(step)
    trainer.step(_poisoned(x), y)
    for _ in range(2):
        assert np.isnan(trainer.step(x, y))
    assert all(np.isnan(v).all() for v in trainer.state_dict().values())
    assert trainer.step_count == 3 and trainer.skipped_steps == 0


def test_nan_or_inf_where_training_starts_is_refused_naming_the_value(tmp_path):
    params, x, y = problem(np.float32)
    bad = {**params, "b1": params["b1"].copy()}
    bad["b1"][2] = np.inf
    with pytest.raises(InputError, match=r"params\['b1'\] holds 1 Inf value\(s\), the first at index \(2,\)"):
        gc.export_train_step(loss_fn, bad, gc.optim.SGD(0.1), x, y)
    step = gc.export_train_step(loss_fn, params, gc.optim.Adam(0.01), x, y, provider="cpu")
    step.save(tmp_path / "step.onnx")
    with pytest.raises(InputError, match=r"^parameter 'b1' holds 1 Inf value"):
        gc.runtime.Trainer(tmp_path / "step.onnx", params=bad, provider="cpu")
    trainer = gc.runtime.Trainer(step)
    trainer.step(x, y)
    trainer.save(tmp_path / "ckpt.npz")
    arrays = dict(np.load(tmp_path / "ckpt.npz"))
    arrays["state/w2.v"][0, 1] = np.nan
    np.savez(tmp_path / "nan.npz", **arrays)
    with pytest.raises(InputError, match=r"checkpoint '.*nan\.npz': optimizer state 'w2\.v' holds 1 NaN value\(s\), "
                                         r"the first at index \(0, 1\)"):
        trainer.load(tmp_path / "nan.npz")
    assert trainer.step_count == 1                          # the refused load changed nothing
    with pytest.raises(InputError, match=r"hyper-parameter 'lr' is nan"):
        gc.runtime.Trainer(gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), x, y, hyperparams={"lr": 0.1},
                                                provider="cpu"), hyperparams={"lr": float("nan")})


def test_a_buffer_may_hold_infinities_but_not_nan():
    """A -inf attention mask is often a buffer; a NaN running statistic is a broken checkpoint."""
    class Masked(nn.Module):
        def __init__(self, fill):
            self.w = np.ones(3, np.float32)
            self.register_buffer("mask", np.array([0.0, fill, 0.0], np.float32))

    def loss(m, x):
        return F.sum(F.exp(m.w * x + m.mask))

    masked = Masked(-np.inf)
    step = gc.export_train_step(loss, masked, gc.optim.SGD(0.1), gc.spec((3,)), provider="cpu")
    trainer = gc.runtime.Trainer(step)
    trainer.step(np.ones(3, np.float32))
    assert trainer.skipped_steps == 0 and trainer.buffers["mask"][1] == -np.inf
    with pytest.raises(InputError, match=r"params\['mask'\] holds 1 NaN value"):
        gc.export_train_step(loss, Masked(np.nan), gc.optim.SGD(0.1), gc.spec((3,)))


def test_layouts_without_the_guard_read_as_unguarded():
    """Files written before the guard have no "skip_nonfinite" in their layout and no "skipped" output."""
    params, x, y = problem(np.float32)
    layout = gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), x, y, provider="cpu").layout
    old = layout.to_dict()
    del old["skip_nonfinite"]
    read = gc.runtime.StepLayout.from_dict(old)
    assert not read.skip_nonfinite and "skipped" not in read.outputs
    with pytest.raises(ValueError, match='"skip_nonfinite" is \'yes\', not true or false'):
        gc.runtime.StepLayout.from_dict({**old, "skip_nonfinite": "yes"})
    with pytest.raises(GcompileError, match="skip_nonfinite must be True or False"):
        gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), x, y, skip_nonfinite=1)
