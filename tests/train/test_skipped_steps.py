"""A skipped step changes nothing, for every optimizer, every form a training step is run in and
every way a step can go non-finite.

The non-finite guard (skip_nonfinite, on by default) must leave parameters, every optimizer state
entry and the step counter bit for bit as they were, whichever optimizer's update it holds back
(each has its own state: momentum, first and second moments, decay), whether the step runs in a
Trainer of the exported step, a Trainer of the saved file or the functional TrainStep call, and
whether the loss itself is NaN or infinite or only a gradient is (a finite loss of sqrt(0) has an
infinite gradient, times 0 a NaN one). After the skip, training goes on as if the batch never came."""
import warnings

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

OPTIMIZERS = {
    "sgd": gc.optim.SGD(0.1),
    "sgd-nesterov": gc.optim.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": gc.optim.Adam(0.01),
    "adamw": gc.optim.AdamW(0.01, weight_decay=0.1),
}
PARAMS = {"w": np.array([1.0, 2.0], np.float32), "b": np.array([0.5, -0.25], np.float32)}
GOOD = (np.array([0.5, 0.25], np.float32), np.array([1.0, 1.0], np.float32))


def loss(p, x, s):
    return F.sum(F.sqrt(p["w"] + x) * s) + F.sum(p["b"] * p["b"] * x)


def _bad(kind: str, w: np.ndarray):
    """A batch that makes the step at parameters `w` non-finite in the way `kind` says."""
    at_zero = np.array([-w[0], 0.25], np.float32)          # w + x is 0 exactly: sqrt's gradient is inf
    return {"nan in the batch": (np.array([np.nan, 0.25], np.float32), GOOD[1]),
            "infinite loss": (np.array([np.inf, 0.25], np.float32), GOOD[1]),
            "infinite gradient of a finite loss": (at_zero, GOOD[1]),
            "nan gradient of a finite loss": (at_zero, np.array([0.0, 1.0], np.float32))}[kind]


KINDS = ["nan in the batch", "infinite loss", "infinite gradient of a finite loss", "nan gradient of a finite loss"]


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    folder = tmp_path_factory.mktemp("steps")
    exported = {}
    for name, optimizer in OPTIMIZERS.items():
        step = gc.export_train_step(loss, PARAMS, optimizer, gc.spec((2,)), gc.spec((2,)), provider="cpu")
        step.save(folder / f"{name}.onnx")
        exported[name] = (step, folder / f"{name}.onnx")
    return exported


class Functional:
    """The functional TrainStep call, holding its carried values as a Trainer does."""

    def __init__(self, step):
        self.step_fn = step
        self.params = dict(step.params)
        self.state, self.count = step.initial_state()
        self.skipped_steps = 0

    def step(self, *batch):
        loss_value, self.params, self.state, count = self.step_fn(self.params, self.state, self.count, *batch)
        self.skipped_steps += int(count == self.count)
        self.count = count
        return loss_value

    def carried(self):
        return {**self.params, **self.state, "step": np.asarray(self.count)}


def _runner(form: str, step, path):
    if form == "functional":
        return Functional(step)
    trainer = gc.runtime.Trainer(step) if form == "trainer" else gc.runtime.Trainer(path, PARAMS)
    trainer.carried = lambda: {**trainer.state_dict(), **trainer.state, "step": np.asarray(trainer.step_count)}
    return trainer


def _bits(values: dict) -> dict:
    return {k: np.asarray(v).tobytes() for k, v in values.items()}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", ["trainer", "trainer-of-the-saved-file", "functional"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_a_skipped_step_leaves_every_carried_value_as_it_was(steps, optimizer, form, kind):
    step, path = steps[optimizer]
    guarded, clean = _runner(form, step, path), _runner(form, step, path)
    for runner in (guarded, clean):
        runner.step(*GOOD)
    before = _bits(guarded.carried())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # the Trainer's warning of the first skip
        guarded.step(*_bad(kind, np.asarray(guarded.carried()["w"])))
    assert _bits(guarded.carried()) == before
    assert guarded.skipped_steps == 1
    for runner in (guarded, clean):
        runner.step(*GOOD)
    assert _bits(guarded.carried()) == _bits(clean.carried())
