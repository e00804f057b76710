"""gc.runtime.Trainer: device-resident steps, falling loss, numpy copies on demand, atomic
checkpoints and bit-identical resume, saved step models, and its input errors."""
import json

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.errors import GcompileError, InputError

from .mlp import loss_fn, problem


def classifier():
    """Softmax regression on three well-separated Gaussian blobs."""
    rng = np.random.default_rng(3)
    centres = 3 * rng.standard_normal((3, 4))
    labels = rng.integers(0, 3, size=96)
    x = (centres[labels] + rng.standard_normal((96, 4))).astype(np.float32)
    params = {"w": (0.1 * rng.standard_normal((4, 3))).astype(np.float32), "b": np.zeros(3, np.float32)}

    def ce(p, x, labels):
        return F.softmax_cross_entropy(x @ p["w"] + p["b"], labels)

    step = gc.export_train_step(ce, params, gc.optim.Adam(0.05), gc.spec(("batch", 4)),
                                gc.spec(("batch",), "int64"), provider="cpu")
    return step, x, labels.astype(np.int64)


def test_loss_falls_on_a_classification_problem():
    step, x, labels = classifier()
    trainer = gc.runtime.Trainer(step)
    losses = [trainer.step(x[i:i + 32], labels[i:i + 32]) for _ in range(20) for i in range(0, 96, 32)]
    assert all(isinstance(v, float) for v in losses)
    assert np.mean(losses[-3:]) < 0.3 * np.mean(losses[:3])
    assert trainer.step_count == 60
    logits = x @ trainer.params["w"] + trainer.params["b"]
    assert np.mean(logits.argmax(1) == labels) > 0.9


def test_trainer_matches_the_functional_step():
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1, momentum=0.9), x, y, provider="cpu")
    trainer = gc.runtime.Trainer(step)
    p, (state, count) = params, step.initial_state()
    for _ in range(4):
        loss, p, state, count = step(p, state, count, x, y)
        assert trainer.step(x, y) == float(loss)
    for name in params:
        np.testing.assert_array_equal(trainer.params[name], p[name])
        np.testing.assert_array_equal(trainer.state[f"{name}.momentum"], state[f"{name}.momentum"])


def test_params_are_copies():
    params, x, y = problem(np.float32)
    trainer = gc.runtime.Trainer(gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), x, y, provider="cpu"))
    trainer.step(x, y)
    before = trainer.params
    kept = before["w1"].copy()
    before["w1"][:] = 0
    np.testing.assert_array_equal(trainer.params["w1"], kept)       # writing the copy changes nothing
    trainer.step(x, y)
    trainer.step(x, y)
    assert not np.array_equal(trainer.params["w1"], kept)
    np.testing.assert_array_equal(params["w1"], problem(np.float32)[0]["w1"])   # the initial values untouched


def test_checkpoint_resume_is_bit_identical(tmp_path):
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.AdamW(0.01), x, y, provider="cpu")
    batches = [problem(np.float32, seed=s)[1:] for s in range(6)]
    straight = gc.runtime.Trainer(step)
    for b in batches[:3]:
        straight.step(*b)
    ckpt = tmp_path / "ckpt.npz"
    straight.save(ckpt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.npz"]    # no temp file left behind
    expected = [straight.step(*b) for b in batches[3:]]

    resumed = gc.runtime.Trainer(step)
    resumed.step(*batches[0])                     # state that load must overwrite
    resumed.load(ckpt)
    assert resumed.step_count == 3
    assert [resumed.step(*b) for b in batches[3:]] == expected
    for name in params:
        assert resumed.params[name].tobytes() == straight.params[name].tobytes()
    for name, value in straight.state.items():
        assert resumed.state[name].tobytes() == value.tobytes()
    assert resumed.step_count == straight.step_count == 6


def test_saved_step_model_with_initial_params(tmp_path):
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.Adam(0.01), x, y, provider="cpu")
    step.save(tmp_path / "step.onnx")
    from_file = gc.runtime.Trainer(str(tmp_path / "step.onnx"), params=params, provider="cpu")
    in_memory = gc.runtime.Trainer(step)
    assert from_file.layout == in_memory.layout
    assert [from_file.step(x, y) for _ in range(3)] == [in_memory.step(x, y) for _ in range(3)]
    with pytest.raises(GcompileError, match="give the initial parameters"):
        gc.runtime.Trainer(tmp_path / "step.onnx")


def test_errors(tmp_path):
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.Adam(0.01), x, y, provider="cpu")
    trainer = gc.runtime.Trainer(step)
    with pytest.raises(InputError, match="2 batch input"):
        trainer.step(x)
    with pytest.raises(InputError, match=r"batch input 'x': expected float32\(16, 3\), got float64"):
        trainer.step(x.astype(np.float64), y)
    with pytest.raises(InputError, match="missing 'b2'"):
        gc.runtime.Trainer(step, params={k: v for k, v in params.items() if k != "b2"})
    with pytest.raises(InputError, match=r"^parameter 'w1': expected float32\(3, 6\), got float32\(6, 3\)$"):
        gc.runtime.Trainer(step, params={**params, "w1": np.zeros((6, 3), np.float32)})
    np.savez(tmp_path / "partial.npz", step=np.array(1, np.int64))
    with pytest.raises(InputError, match="missing 'params/w1'"):
        trainer.load(tmp_path / "partial.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(GcompileError, match="cannot read checkpoint"):
        trainer.load(tmp_path / "junk.npz")
    plain = gc.compile(lambda x: x * 2, x)
    with pytest.raises(GcompileError, match="not a training step"):
        gc.runtime.Trainer(plain.model, params=params)
    assert trainer.step_count == 0                 # failed calls changed nothing


def _edit_layout(layout: dict, edit: str):
    """The layout JSON with one field broken as a hand edit or a hostile file might."""
    broken = dict(layout)
    if edit == "not an object":
        return json.dumps([layout])
    if edit == "missing params":
        del broken["params"]
    elif edit == "params not names":
        broken["params"] = "w1"
    elif edit == "state rows":
        broken["state"] = [row[:2] for row in layout["state"]]
    elif edit == "state of no parameter":
        broken["state"] = [["w9.m", "w9", 0.0], *layout["state"]]
    elif edit == "a true fill":
        broken["state"] = [[name, param, True] for name, param, _ in layout["state"]]
    elif edit == "unknown dtype":
        broken["hyperparams"] = [["lr", 0.1, "float99"]]
    elif edit == "guard not a flag":
        broken["skip_nonfinite"] = "yes"
    return json.dumps(broken)


@pytest.mark.parametrize("edit, fragment", [
    ("not JSON", "not valid JSON"), ("deep", "nested too deeply"), ("not an object", "a JSON list, not an object"),
    ("missing params", 'no "params" field'), ("params not names", '"params" is not a list of names'),
    ("state rows", '"state" is not a list of [slot name, parameter, initial value] rows'),
    ("state of no parameter", "'w9', which is not a parameter"), ("a true fill", '"state" is not a list'),
    ("unknown dtype", "'float99', which numpy does not know"),
    ("guard not a flag", '"skip_nonfinite" is \'yes\', not true or false'),
])
def test_a_saved_step_with_malformed_metadata_is_refused_naming_the_field(tmp_path, edit, fragment):
    """Trainer(path) used to raise json's JSONDecodeError or a KeyError from the layout's JSON."""
    import onnx
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.Adam(0.01), x, y, provider="cpu")
    model = onnx.ModelProto()
    model.CopyFrom(step.model)
    entry = next(p for p in model.metadata_props if p.key == "gcompile.train_step")
    entry.value = {"not JSON": entry.value[:-1], "deep": "[" * 100_000 + "]" * 100_000}.get(edit) or \
        _edit_layout(json.loads(entry.value), edit)
    onnx.save(model, tmp_path / "step.onnx")
    with pytest.raises(GcompileError, match=r"training-step model .*step\.onnx: its 'gcompile.train_step' metadata") \
            as err:
        gc.runtime.Trainer(tmp_path / "step.onnx", params=params, provider="cpu")
    assert fragment in str(err.value), str(err.value)


def test_batch_inputs_that_disagree_on_a_symbolic_dim_are_refused_by_name():
    """It raised ONNX Runtime's raw broadcasting error from inside the step."""
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), gc.spec(("batch", 3)), gc.spec(("batch", 2)),
                                provider="cpu")
    trainer = gc.runtime.Trainer(step)
    with pytest.raises(InputError, match=r"^symbolic dim 'batch' is 16 in batch input 'x' but 5 in batch input 'y' "
                                         r"\(expected float32\(batch, 2\), got float32\(5, 2\)\)$"):
        trainer.step(x, y[:5])
    with pytest.raises(InputError, match=r"^batch input 'x': expected float32\(batch, 3\), got float32\(16, 2\)$"):
        trainer.step(x[:, :2], y)                    # the dtype fits: no '.astype' hint
    assert trainer.step_count == 0


def test_values_of_the_wrong_rank_are_refused_naming_them(tmp_path):
    """A parameter of the wrong rank was refused with a conversion hint for a dtype that already
    fitted; a hyper-parameter of the wrong rank was broadcast by ONNX Runtime without a word when
    set on the Trainer, and failed inside ONNX Runtime when given to step."""
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), x, y, hyperparams={"lr": 0.1}, provider="cpu")
    step.save(tmp_path / "step.onnx")
    with pytest.raises(InputError, match=r"^parameter 'b1': expected float32\(6,\), got float32\(1, 6\)$"):
        gc.runtime.Trainer(tmp_path / "step.onnx", params={**params, "b1": params["b1"][None]}, provider="cpu")
    with pytest.raises(InputError, match=r"^hyper-parameter 'lr': expected float32\(\), got float32\(1,\)$"):
        gc.runtime.Trainer(step, hyperparams={"lr": np.array([0.1])})
    trainer = gc.runtime.Trainer(step)
    with pytest.raises(InputError, match=r"^hyper-parameter 'lr': expected float32\(\), got float32\(2,\)$"):
        trainer.step(x, y, lr=[0.1, 0.2])
    with pytest.raises(InputError, match=r"^hyper-parameter 'lr': expected a number, got 'fast'$"):
        trainer.step(x, y, lr="fast")
    trainer.hyperparams["lr"] = lambda t: np.ones(2)
    with pytest.raises(InputError, match=r"hyper-parameter 'lr': expected float32\(\), got float32\(2,\)"):
        trainer.step(x, y)                           # a schedule's value is checked when it is used
    assert trainer.step_count == 0


def test_an_unknown_hyperparameter_says_how_to_export_one():
    params, x, y = problem(np.float32)
    step = gc.export_train_step(loss_fn, params, gc.optim.SGD(0.1), x, y, provider="cpu")
    how = r"export the step with hyperparams=\{'lr': default\} \(export_train_step or @gc.export_train\)"
    with pytest.raises(InputError, match=r"no hyper-parameter 'lr' \(it has: none\); to feed one at each step, " + how):
        gc.runtime.Trainer(step, hyperparams={"lr": 0.1})
    trainer = gc.runtime.Trainer(step)
    for attempt in (lambda: trainer.step(x, y, lr=0.1), lambda: trainer.hyperparams.__setitem__("lr", 0.1)):
        with pytest.raises(InputError, match=how):   # setting it on .hyperparams used to be ignored silently
            attempt()
    assert dict(trainer.hyperparams) == {}
