"""@gc.export_train and `gcompile build`: the training step is an artifact like any other,
checked on its initial parameters, and marked as a training step in the manifest."""
import json
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

import gcompile as gc
import gcompile.functions as F
from gcompile.artifacts.marks import export_info
from gcompile.cli import main
from gcompile.errors import GcompileError
from gcompile.training.step import StepOptions

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


OPTIONS_MODEL = textwrap.dedent("""
    import numpy as np
    import gcompile as gc
    import gcompile.functions as F

    rng = np.random.default_rng(0)
    PARAMS = {"w": rng.standard_normal((5, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}
    OPTIONS = dict(hyperparams={"lr": 0.05, "weight": 2.0}, has_aux=True, clip_grad_norm=0.5)

    def loss(p, x, labels, weight=1.0):
        logits = x @ p["w"] + p["b"]
        return weight * F.softmax_cross_entropy(logits, labels), {"accuracy": F.mean(F.cast(
            F.equal(F.argmax(logits, -1), labels), np.float32))}

    train = gc.export_train(params=PARAMS, optimizer=gc.optim.SGD(0.1), x=gc.spec(("batch", 5)),
                            labels=gc.spec(("batch",), "int64"), name="train", **OPTIONS)(loss)
""")


def test_the_decorator_takes_the_options_of_export_train_step(tmp_path):
    """@gc.export_train took no hyperparams, has_aux or clip_grad_norm: a build could not have the
    hyper-parameters or metrics export_train_step has. Both now take one set of options, and the
    built step equals export_train_step's."""
    (tmp_path / "model.py").write_text(OPTIONS_MODEL)
    result = CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(tmp_path / "out"), "--check",
                                       "--provider", "cpu"])
    assert result.exit_code == 0, result.output
    layout = json.loads((tmp_path / "out" / "manifest.json").read_text())["artifacts"][0]["train_step"]
    assert layout["hyperparams"] == [["lr", 0.05, "float32"], ["weight", 2.0, "float32"]]
    assert layout["aux"] == ["accuracy"] and layout["skip_nonfinite"] is True
    assert layout["outputs"][:3] == ["loss", "accuracy", "skipped"]

    namespace: dict = {}
    exec(OPTIONS_MODEL, namespace)
    step = gc.export_train_step(namespace["loss"], namespace["PARAMS"], gc.optim.SGD(0.1), gc.spec(("batch", 5)),
                                gc.spec(("batch",), "int64"), provider="cpu", **namespace["OPTIONS"])
    built = gc.runtime.Trainer(tmp_path / "out" / "train.onnx", params=namespace["PARAMS"], provider="cpu")
    assert built.layout == step.layout
    direct = gc.runtime.Trainer(step)
    rng = np.random.default_rng(1)
    for lr in (0.05, 0.2):
        x = rng.standard_normal((8, 5)).astype(np.float32)
        labels = (x[:, 0] > 0).astype(np.int64)
        (loss, metrics), (expected, expected_metrics) = built.step(x, labels, lr=lr), direct.step(x, labels, lr=lr)
        assert loss == expected and metrics["accuracy"] == expected_metrics["accuracy"]
    for name in ("w", "b"):
        np.testing.assert_array_equal(built.params[name], direct.params[name])


OPTION_VALUES = [("has_aux", True), ("hyperparams", {"lr": 0.1}), ("clip_grad_norm", 1.0), ("skip_nonfinite", False),
                 ("memory_budget", 1 << 30)]


def test_the_option_values_cover_every_option():
    assert [option for option, _ in OPTION_VALUES] == list(StepOptions.names())


@pytest.mark.parametrize("option, value", OPTION_VALUES)
def test_every_option_reaches_both_forms(option, value):
    """One definition of the options (StepOptions): each is taken by export_train_step and the decorator."""
    params = {"w": np.ones((2, 2), np.float32)}

    def loss(p, x):
        value_ = F.sum(x @ p["w"])
        return (value_, {"total": value_}) if option == "has_aux" else value_

    step = gc.export_train_step(loss, params, gc.optim.SGD(0.1), gc.spec((1, 2)), provider="cpu", **{option: value})
    marked = gc.export_train(params=params, optimizer=gc.optim.SGD(0.1), x=gc.spec((1, 2)), **{option: value})(loss)
    info = export_info(marked)
    info.trace(loss)
    assert info.layout == step.layout and getattr(info.options, option) == value


def test_option_errors_name_the_option():
    params = {"w": np.zeros((2, 2), np.float32)}
    adam = gc.optim.Adam()
    with pytest.raises(GcompileError, match=r"export_train_step: no option 'clip' \(the options of a training step: "
                                            r"has_aux, hyperparams, clip_grad_norm, skip_nonfinite, memory_budget\)"):
        gc.export_train_step(lambda p, x: F.sum(x), params, adam, gc.spec((2,)), clip=1.0)
    with pytest.raises(GcompileError, match="@gc.export_train: clip_grad_norm must be a positive number, got -1"):
        gc.export_train(params=params, optimizer=adam, x=gc.spec((2,)), clip_grad_norm=-1)
    with pytest.raises(GcompileError, match="export_train_step: memory_budget must be a positive number of bytes"):
        gc.export_train_step(lambda p, x: F.sum(x), params, adam, gc.spec((2,)), memory_budget=0)
    with pytest.raises(GcompileError, match=r"the default of 'lr' must be a finite number, got nan"):
        gc.export_train_step(lambda p, x: F.sum(x), params, adam, gc.spec((2,)), hyperparams={"lr": float("nan")})
    with pytest.raises(GcompileError, match="'temp' is neither a hyper-parameter of Adam"):
        gc.export_train(params=params, optimizer=adam, x=gc.spec((2,)), hyperparams={"temp": 1.0})(
            lambda p, x: F.sum(x))
    with pytest.raises(GcompileError, match="batch parameter 'has_aux' has the name of an option"):
        gc.export_train(params=params, optimizer=adam, x=gc.spec((2,)))(lambda p, x, has_aux: F.sum(x))
