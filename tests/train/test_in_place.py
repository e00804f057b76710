"""In-place updates: which new values a step may write over the values they replace
(runtime/inplace.py), and a Trainer that does so stepping exactly as the functional step and as a
Trainer that swaps buffers, through skipped steps, buffers and checkpoints."""
import numpy as np
import pytest
from onnx import helper

import gcompile as gc
import gcompile.functions as F
from gcompile.runtime import inplace
from gcompile.runtime.inplace import in_place_outputs
from gcompile.runtime.providers import run_order

from .mlp import loss_fn, problem
from .test_step_features import Net


def node(op, inputs, output):
    return helper.make_node(op, inputs, [output])


@pytest.mark.parametrize("nodes, expected", [
    # read first, then written elementwise over itself: in place
    ([node("Mul", ["w", "two"], "y"), node("Sub", ["w", "one"], "w.new")], {"w"}),
    # a reader after the writer would see the new value
    ([node("Sub", ["w", "one"], "w.new"), node("Add", ["w", "zero"], "z")], set()),
    # ... also through a view of w, which shares its buffer
    ([node("Reshape", ["w", "shape"], "r"), node("Sub", ["w", "one"], "w.new"), node("Add", ["r", "zero"], "z")],
     set()),
    # a writer that is not elementwise reads elements it has already written
    ([node("MatMul", ["w", "x"], "w.new")], set()),
    # ... and one that reads w through a view
    ([node("Reshape", ["w", "shape"], "r"), node("Add", ["r", "one"], "w.new")], set()),
    # a writer that does not read w at all
    ([node("MatMul", ["w", "x"], "u"), node("Neg", ["u"], "w.new")], {"w"}),
    # written before a node that can fail (an index out of range): a failed step would have changed w
    ([node("Sub", ["w", "one"], "w.new"), node("Gather", ["e", "i"], "z")], set()),
    ([node("Gather", ["e", "i"], "z"), node("Sub", ["w", "z"], "w.new")], {"w"}),
    # a new value the graph does not compute (an input passed through), or copies
    ([node("Mul", ["w", "two"], "y")], set()),
    ([node("Identity", ["w"], "w.new")], set()),
])
def test_which_outputs_may_overwrite_their_inputs(nodes, expected):
    assert in_place_outputs(nodes, {"w": "w.new"}) == expected


def test_each_value_is_judged_alone():
    nodes = [node("Sub", ["a", "one"], "a.new"), node("Sub", ["b", "one"], "b.new"), node("Add", ["b", "a.new"], "z")]
    assert in_place_outputs(nodes, {"a": "a.new", "b": "b.new"}) == {"a"}


def adam_step(**options):
    params, x, y = problem(np.float32)
    batch = (gc.spec(("batch", 3)), gc.spec(("batch", 2)))      # symbolic sizes: run in trace order
    return gc.export_train_step(loss_fn, params, gc.optim.Adam(0.01), *batch, provider="cpu", **options), x, y


def test_a_step_in_trace_order_updates_everything_in_place():
    step, x, y = adam_step()
    trainer = gc.runtime.Trainer(step)
    assert run_order(trainer._session) is not None
    assert trainer.in_place == set(step.layout.carried)


def batches():
    out = [problem(np.float32, seed=s)[1:] for s in range(5)]
    out.insert(2, (np.full_like(out[0][0], np.nan), out[0][1]))    # a skipped step: everything passes through
    return out


@pytest.mark.parametrize("only", [None, "params"])
def test_in_place_steps_are_the_functional_steps(monkeypatch, only):
    """Bit for bit, every step, with every value in place or (only="params") the state swapping
    buffers beside parameters written in place."""
    if only:
        found = inplace.in_place_outputs
        monkeypatch.setattr("gcompile.training.trainer.in_place_outputs",
                            lambda nodes, replaces: found(nodes, replaces) & set(step.layout.params))
    step, _, _ = adam_step()
    trainer = gc.runtime.Trainer(step)
    assert trainer.in_place == (set(step.layout.params) if only else set(step.layout.carried))
    p, (state, count) = step.params, step.initial_state()
    with pytest.warns(RuntimeWarning, match="not finite"):
        for x, y in batches():
            loss, p, state, count = step(p, state, count, x, y)
            np.testing.assert_array_equal(trainer.step(x, y), loss)
    assert trainer.skipped_steps == 1 and trainer.step_count == int(count) == 5
    for name in p:
        np.testing.assert_array_equal(trainer.params[name], p[name])
    for name in state:
        np.testing.assert_array_equal(trainer.state[name], state[name])


def test_in_place_checkpoints_and_buffers(tmp_path):
    step = gc.export_train_step(lambda m, x, y: F.mean((m(x) - y) ** 2), Net(), gc.optim.AdamW(0.01),
                                gc.spec(("batch", 3)), gc.spec(("batch", 2)), provider="cpu")
    data = [problem(np.float32, seed=s)[1:] for s in range(4)]
    trainer = gc.runtime.Trainer(step)
    assert {"bn.running_mean", "bn.running_var", "fc.weight.m"} <= trainer.in_place
    for x, y in data[:2]:
        trainer.step(x, y)
    trainer.save(tmp_path / "ckpt.npz")
    expected = [trainer.step(x, y) for x, y in data[2:]]
    resumed = gc.runtime.Trainer(step)
    resumed.load(tmp_path / "ckpt.npz")
    assert [resumed.step(x, y) for x, y in data[2:]] == expected
    for name, value in trainer.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[name], value)
    path = tmp_path / "step.onnx"
    step.save(path)
    from_file = gc.runtime.Trainer(path, params=Net().state_dict())       # a saved step runs in place too
    assert from_file.in_place == set(step.layout.carried)


def test_a_failing_step_changes_nothing():
    """The step's gather fails on an index out of range after its forward has read the table: the
    new values are written only after every node that can fail, so the trainer keeps its values."""
    table = {"e": np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)}
    step = gc.export_train_step(lambda p, i: F.sum(F.take(p["e"], i, axis=0) ** 2), table, gc.optim.Adam(0.1),
                                gc.spec(("n",), "int64"), provider="cpu")
    trainer = gc.runtime.Trainer(step)
    assert trainer.in_place == set(step.layout.carried)
    trainer.step(np.array([0, 1]))
    params, state = trainer.params, trainer.state
    with pytest.raises(Exception, match="out of"):
        trainer.step(np.array([0, 7]))
    np.testing.assert_array_equal(trainer.params["e"], params["e"])
    for name, value in state.items():
        np.testing.assert_array_equal(trainer.state[name], value)
    assert trainer.step_count == 1
    trainer.step(np.array([2, 3]))
    assert trainer.step_count == 2
