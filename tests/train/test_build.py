"""@gc.export_train and `gcompile build`: the training step is an artifact like any other,
checked on its initial parameters, and marked as a training step in the manifest."""
import json
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

import gcompile as gc
from gcompile.cli import main
from gcompile.errors import GcompileError

MODEL = textwrap.dedent("""
    import numpy as np
    import gcompile as gc
    import gcompile.functions as F

    rng = np.random.default_rng(0)
    PARAMS = {"w": rng.standard_normal((5, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}

    @gc.export(x=gc.spec(("batch", 5)))
    def predict(x):
        return x @ PARAMS["w"] + PARAMS["b"]

    @gc.export_train(params=PARAMS, optimizer=gc.optim.Adam(0.01), x=gc.spec(("batch", 5)),
                     labels=gc.spec(("batch",), "int64"), name="train")
    def loss(p, x, labels):
        return F.softmax_cross_entropy(x @ p["w"] + p["b"], labels)
""")


def test_build_check_writes_a_training_step(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", str(model), "-o", str(out), "--check", "--provider", "cpu"])
    assert result.exit_code == 0, result.output
    assert result.output.count("check    ok on cpu") == 2
    entries = {e["name"]: e for e in json.loads((out / "manifest.json").read_text())["artifacts"]}
    assert "train_step" not in entries["predict"]
    layout = entries["train"]["train_step"]
    assert layout["params"] == ["w", "b"] and layout["batch"] == ["x", "labels"]
    assert layout["state"] == [["w.m", "w", 0.0], ["w.v", "w", 0.0], ["b.m", "b", 0.0], ["b.v", "b", 0.0]]
    assert [o["name"] for o in entries["train"]["outputs"]] == layout["outputs"]
    assert [i["name"] for i in entries["train"]["inputs"]] == ["w", "b", "w.m", "w.v", "b.m", "b.v", "step",
                                                                "x", "labels"]

    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((5, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}
    trainer = gc.runtime.Trainer(out / "train.onnx", params=params, provider="cpu")
    x = rng.standard_normal((8, 5)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int64)
    losses = [trainer.step(x, labels) for _ in range(30)]
    assert losses[-1] < losses[0]


def test_the_summary_counts_the_update_with_the_gradients_and_names_the_constants(tmp_path):
    """The optimizer's update, computed from the gradients, was counted as forward ('fwd'), and the
    row 'params' counted the values of every initializer, the parameters themselves being inputs."""
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    result = CliRunner().invoke(main, ["build", str(model), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    entries = {e["name"]: e for e in json.loads((tmp_path / "out" / "manifest.json").read_text())["artifacts"]}
    train = entries["train"]["nodes_by_order"]
    assert train["0"] < train["1"]          # Adam's update outweighs the softmax cross-entropy (it was 48 fwd, 13 bwd)
    step = gc.export_train_step(lambda p, x: gc.functions.sum(x @ p["w"]), {"w": np.ones((2, 2), np.float32)},
                                gc.optim.SGD(0.1), gc.spec((1, 2)), provider="cpu")
    producers = {out: node for node in step.model.graph.node for out in node.output}
    assert producers["w.new"].op_type == "Identity"                      # the output's glue, reading w - lr * g:
    assert "order=1" in producers[producers["w.new"].input[0]].doc_string
    assert "  params" not in result.output
    predict = entries["predict"]                                          # W, which predict closes over
    assert f"  consts   {predict['parameters']} values in {predict['initializers']} initializer(s)" in result.output


def test_decorator_errors_name_the_problem():
    params = {"w": np.zeros((2, 2), np.float32)}
    adam = gc.optim.Adam()
    with pytest.raises(GcompileError, match="missing spec for 'y'"):
        gc.export_train(params=params, optimizer=adam, x=gc.spec((2,)))(lambda p, x, y: x)
    with pytest.raises(GcompileError, match="no batch parameter named 'z'"):
        gc.export_train(params=params, optimizer=adam, x=gc.spec((2,)), z=gc.spec((2,)))(lambda p, x: x)
    with pytest.raises(GcompileError, match="'w' is used twice"):
        gc.export_train(params=params, optimizer=adam, w=gc.spec((2,)), name="step")(lambda p, w: w)
    with pytest.raises(GcompileError, match="first parameter receives the params dict"):
        gc.export_train(params=params, optimizer=adam)(lambda: 0)
