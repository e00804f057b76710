"""export_split_step and the allreduce arithmetic, without Ray: the gradient model gives the loss
and the hand-written gradient of tests/train/mlp.py, gradient then update equals the fused step,
saved pairs load back, and pairs that do not belong together are refused."""
import json

import numpy as np
import pytest

import gcompile as gc
from gcompile.distributed import SplitStep, export_split_step
from gcompile.distributed.reduce import FlatPlan, weighted_sum
from gcompile.errors import GcompileError
from gcompile.runtime.providers import make_session

from ..train.mlp import numpy_loss_and_grads, problem
from .conftest import mlp_split


def run_split(split, params, state, count, *batch):
    """One step of a split step in this process: (loss, grads, new carried values)."""
    layout = split.layout
    grad = make_session(split.gradient.SerializeToString(), "cpu", threads=1)
    update = make_session(split.update.SerializeToString(), "cpu", threads=1)
    loss, *grads = grad.run(None, {**params, **dict(zip(layout.batch, batch))})
    grads = {f"{p}.grad": g for p, g in zip(layout.params, grads)}
    new = update.run(None, {**params, **state, "step": np.asarray(count, np.int64), **grads})
    return loss, grads, dict(zip(layout.carried, new))


def test_gradient_model_gives_the_loss_and_its_gradient():
    split, _, params, x, y = mlp_split(gc.optim.SGD(0.1))
    loss, grads, _ = run_split(split, params, *split.initial_state(), x, y)
    want_loss, want = numpy_loss_and_grads(params, x, y)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12)
    for name in params:
        np.testing.assert_allclose(grads[f"{name}.grad"], want[name], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("optimizer", [gc.optim.SGD(0.1, momentum=0.9), gc.optim.Adam(0.01)])
def test_gradient_then_update_is_the_fused_step(optimizer):
    split, fused, params, x, y = mlp_split(optimizer)
    p, (state, count) = params, fused.initial_state()
    carried = {**params, **state, "step": count}
    for _ in range(3):
        loss, p, state, count = fused(p, state, count, x, y)
        split_loss, _, carried = run_split(split, {n: carried[n] for n in params},
                                           {n: carried[n] for n in split.layout.state_names}, carried["step"], x, y)
        assert split_loss == pytest.approx(float(loss), rel=1e-14)
    for name in params:
        np.testing.assert_allclose(carried[name], p[name], rtol=1e-13, atol=1e-15)
    assert int(carried["step"]) == int(count) == 3


def test_save_and_load(tmp_path):
    split, *_ = mlp_split(gc.optim.Adam(0.01))
    split.save(tmp_path / "step")
    loaded = SplitStep.load(tmp_path / "step")
    assert loaded.layout == split.layout and loaded.pair == split.pair and loaded.params is None
    assert sorted(p.name for p in (tmp_path / "step").iterdir() if not p.name.startswith(".")) == \
        ["gradient.onnx", "update.onnx"]
    with pytest.raises(GcompileError, match="give the parameters"):
        loaded.initial_state()
    with pytest.raises(GcompileError, match="update.onnx is missing"):
        (tmp_path / "step" / "update.onnx").unlink()
        SplitStep.load(tmp_path / "step")


def test_models_of_two_exports_are_refused():
    a, *_ = mlp_split(gc.optim.SGD(0.1))
    b, *_ = mlp_split(gc.optim.SGD(0.2))
    with pytest.raises(GcompileError, match="come from different exports"):
        SplitStep(a.gradient, b.update)
    with pytest.raises(GcompileError, match="given as the gradient model is the update model"):
        SplitStep(a.update, a.gradient)
    _, fused, *_ = mlp_split(gc.optim.SGD(0.1))
    with pytest.raises(GcompileError, match="fused training step; export the split form"):
        SplitStep(fused.model, a.update)


@pytest.mark.parametrize("edit, fragment", [
    (lambda e: "{" + e, "not valid JSON"), (lambda e: json.dumps({**json.loads(e), "role": 3}), '"role" is not'),
    (lambda e: json.dumps({**json.loads(e), "state": 3}), '"state" is not a list'),
    (lambda e: json.dumps(json.loads(e)["params"]), "a JSON list, not an object"),
], ids=["not JSON", "role", "state", "a list"])
def test_malformed_split_metadata_is_refused_naming_the_field(edit, fragment):
    split, *_ = mlp_split(gc.optim.SGD(0.1))
    entry = next(p for p in split.gradient.metadata_props if p.key == "gcompile.split_step")
    entry.value = edit(entry.value)
    with pytest.raises(GcompileError, match="the gradient model.*'gcompile.split_step' metadata") as err:
        SplitStep(split.gradient, split.update)
    assert fragment in str(err.value)


def test_a_gradient_name_that_clashes_is_refused():
    params, x, y = problem()
    with pytest.raises(GcompileError, match="'w1.grad' names both a gradient"):
        export_split_step(lambda p, x, **_: gc.functions.mean(x), {"w1": params["w1"], "w1.grad": params["w2"]},
                          gc.optim.SGD(0.1), x)


def test_pytree_params_are_named_by_their_paths():
    """Nested dicts and gc.nn Modules: loss_fn gets the tree back, the models name each leaf by its
    dotted path, and the gradients equal the flat dict's (the hand-written ones)."""
    flat, x, y = problem()
    nested = {"layer1": {"w": flat["w1"], "b": flat["b1"]}, "layer2": {"w": flat["w2"], "b": flat["b2"]}}

    def nested_loss(p, x, y):
        h = gc.functions.tanh(x @ p["layer1"]["w"] + p["layer1"]["b"])
        return gc.functions.mean((h @ p["layer2"]["w"] + p["layer2"]["b"] - y) ** 2)
    specs = gc.spec(("batch", 3), np.float64), gc.spec(("batch", 2), np.float64)
    split = export_split_step(nested_loss, nested, gc.optim.SGD(0.1), *specs, provider="cpu")
    assert split.layout.params == ("layer1.w", "layer1.b", "layer2.w", "layer2.b")
    by_path = {"layer1.w": flat["w1"], "layer1.b": flat["b1"], "layer2.w": flat["w2"], "layer2.b": flat["b2"]}
    loss, grads, new = run_split(split, by_path, *split.initial_state(), x, y)
    want_loss, want = numpy_loss_and_grads(flat, x, y)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12)
    for path, name in zip(split.layout.params, ("w1", "b1", "w2", "b2")):
        np.testing.assert_allclose(grads[f"{path}.grad"], want[name], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(new[path], flat[name] - 0.1 * want[name], rtol=1e-10, atol=1e-14)

    model = gc.nn.Linear(3, 2, rng=0)                    # a Module: its leaves by attribute path
    module_split = export_split_step(lambda m, x, y: gc.functions.mean((m(x) - y) ** 2), model, gc.optim.SGD(0.1),
                                     *specs, provider="cpu")
    assert module_split.layout.params == ("weight", "bias")


def test_buffers_are_refused_with_a_pointer_to_the_fused_step():
    _, x, y = problem()
    model = gc.nn.Sequential(gc.nn.Linear(3, 4, rng=0), gc.nn.BatchNorm1d(4))
    with pytest.raises(GcompileError, match=r"trainable parameters only; buffers \(1\.running_mean.*"
                                            r"need export_train_step"):
        export_split_step(lambda m, x, y: gc.functions.mean((m(x) - y[:, :1]) ** 2), model, gc.optim.SGD(0.1),
                          x, y, provider="cpu")


def test_flat_plan_round_trip_and_chunks():
    rng = np.random.default_rng(0)
    arrays = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(5).astype(np.float32),
              "c": rng.standard_normal(()), "d": np.zeros((0, 2))}
    plan = FlatPlan([(n, v.dtype, v.shape) for n, v in arrays.items()])
    assert plan.nbytes == sum(v.nbytes for v in arrays.values())
    flat = plan.flatten(arrays)
    assert [f.dtype for f in flat] == [np.float64, np.float32] and [f.size for f in flat] == [13, 5]
    for n in (1, 2, 3, 7, 20):   # more chunks than values: some chunks are empty
        chunks = plan.split(flat, n)
        assert len(chunks) == n
        back = plan.unflatten(plan.join(chunks))
        for name, value in arrays.items():
            np.testing.assert_array_equal(back[name], value)
            assert back[name].shape == value.shape and back[name].dtype == value.dtype
    with pytest.raises(GcompileError, match="different models"):
        plan.join(plan.split(flat, 2)[:1])


def test_weighted_sum_is_the_weighted_mean_in_worker_order():
    rng = np.random.default_rng(1)
    chunks = [(rng.standard_normal(6), rng.standard_normal(2).astype(np.float32)) for _ in range(3)]
    weights = [5 / 16, 6 / 16, 5 / 16]
    got = weighted_sum(chunks, weights)
    for g in range(2):
        dtype = chunks[0][g].dtype
        want = chunks[0][g] * dtype.type(weights[0]) + chunks[1][g] * dtype.type(weights[1])
        want = want + chunks[2][g] * dtype.type(weights[2])
        np.testing.assert_array_equal(got[g], want)   # the same operations in the same order: the same bits
        assert got[g].dtype == dtype
    np.testing.assert_array_equal(weighted_sum(chunks[:1], [1.0])[0], chunks[0][0])   # one worker: exact
    with pytest.raises(GcompileError, match="worker 0 and worker 1 differ"):
        weighted_sum([chunks[0], (chunks[1][0][:3], chunks[1][1])], [0.5, 0.5])
