"""Every loader of a saved model (gcompile run, inspect, viz, grad, Trainer(path), gc.load_onnx)
verifies it, and its external data, against the manifest.json beside it; it verifies the bytes it
then uses; and a manifest that is itself malformed or hostile is a clear error, not a traceback."""
import hashlib
import json
import os
import textwrap

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import gcompile as gc
import gcompile.runtime.modelfile as modelfile
from gcompile.cli import main

MODEL = textwrap.dedent("""
    import numpy as np
    import gcompile as gc
    import gcompile.functions as F

    W = np.arange(32 * 16, dtype=np.float32).reshape(32, 16) / 512
    PARAMS = {"w": W}

    @gc.export(x=gc.spec((2, 32)))
    def predict(x):
        return x @ W

    @gc.export_train(params=PARAMS, optimizer=gc.optim.SGD(0.1), x=gc.spec((2, 32)), name="train")
    def loss(p, x):
        return F.sum(x @ p["w"])
""")
W = np.arange(32 * 16, dtype=np.float32).reshape(32, 16) / 512
X = np.ones((2, 32), np.float32)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def built(tmp_path, threshold):
    (tmp_path / "model.py").write_text(MODEL)
    extra = [] if threshold is None else ["--external-data-threshold", threshold]
    result = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out", *extra)
    assert result.exit_code == 0, result.output
    np.save(tmp_path / "x.npy", X)
    return tmp_path / "out"


@pytest.fixture(params=[None, 1024], ids=["one-file", "external-data"])
def out(request, tmp_path):
    return built(tmp_path, request.param)


@pytest.fixture
def out_with_data(tmp_path):
    return built(tmp_path, 1024)


def data_file(out, name):
    entry = next(e for e in json.loads((out / "manifest.json").read_text())["artifacts"] if e["name"] == name)
    return out / entry["external_data"]["file"] if "external_data" in entry else None


def tamper_model(path):
    """Swap the artifact for another model gcompile saved: whole and sealed, so only the manifest tells
    (a damaged file is refused by its own seal first: tests/test_seal.py)."""
    gc.compile(lambda x: x * 2.0, gc.spec((2, 32)), provider="cpu").save(path)


def tamper_data(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def refused(result, *fragments):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "manifest" in result.stderr and "refused" in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


LOADERS = {
    "run": lambda out, path: invoke("run", path, "-i", f"x={out.parent / 'x.npy'}"),
    "inspect": lambda out, path: invoke("inspect", path),
    "viz": lambda out, path: invoke("viz", path, "-o", out.parent / "drawing.svg"),
    "grad": lambda out, path: invoke("grad", path, "--wrt", "x", "-o", out.parent / "grad.onnx"),
}


@pytest.mark.parametrize("command", LOADERS)
def test_every_command_refuses_a_changed_model(out, command):
    assert LOADERS[command](out, out / "predict.onnx").exit_code == 0
    tamper_model(out / "predict.onnx")
    refused(LOADERS[command](out, out / "predict.onnx"), "predict.onnx", "sha256")


@pytest.mark.parametrize("command", LOADERS)
def test_every_command_refuses_changed_external_data(out_with_data, command):
    out = out_with_data
    assert LOADERS[command](out, out / "predict.onnx").exit_code == 0
    target = data_file(out, "predict")
    tamper_data(target)
    refused(LOADERS[command](out, out / "predict.onnx"), target.name, "sha256")


def test_the_trainer_and_load_refuse_a_changed_artifact(out):
    gc.runtime.Trainer(out / "train.onnx", params={"w": W}, provider="cpu")
    tamper_model(out / "train.onnx")
    for load in (lambda p: gc.runtime.Trainer(p, params={"w": W}, provider="cpu"), modelfile.load, gc.load_onnx):
        with pytest.raises(gc.GcompileError, match="train.onnx: its sha256 is .* the manifest refused it"):
            load(str(out / "train.onnx"))


def test_the_verified_bytes_are_the_bytes_that_run(out, monkeypatch):
    """A file replaced on disk right after it was verified is not what runs: the loader runs what
    it hashed (the .onnx read once; its external data mapped once)."""
    other = gc.compile(lambda x: x @ (2 * W), gc.spec((2, 32)), provider="cpu")   # same layout, other weights
    external = data_file(out, "predict")
    other.save(out.parent / "other" / "predict.onnx", external_data_threshold=0 if external else 2 ** 31)
    other_files = {n: out.parent / "other" / n for n in os.listdir(out.parent / "other")}
    real = modelfile.check_manifest

    def verify_then_swap(path, data, external_data=None):
        real(path, data, external_data)
        if external:      # the same .onnx, with other weights in its data file
            os.replace(next(p for n, p in other_files.items() if n.endswith(".data")), external)
        else:
            os.replace(other_files["predict.onnx"], out / "predict.onnx")

    monkeypatch.setattr(modelfile, "check_manifest", verify_then_swap)
    result = invoke("run", out / "predict.onnx", "-i", f"x={out.parent / 'x.npy'}", "--out", out.parent / "res")
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.load(out.parent / "res" / "output.npy"), X @ W, rtol=1e-6)


BAD_MANIFESTS = {
    "not-json": b"{not json",
    "not-utf8": b"\xff\xfe{}",
    "a-list": b"[]",
    "artifacts-not-a-list": b'{"artifacts": 5}',
    "entry-not-an-object": b'{"artifacts": [5]}',
    "sha256-not-a-string": b'{"artifacts": [{"file": "predict.onnx", "sha256": 5}]}',
    "sha256-missing": b'{"artifacts": [{"file": "predict.onnx"}]}',
    "listed-twice": b'{"artifacts": [{"file": "predict.onnx"}, {"file": "predict.onnx"}]}',
    "external-data-not-an-object": b'{"artifacts": [{"file": "predict.onnx", "sha256": "SHA", "external_data": "x"}]}',
    "external-data-outside": (b'{"artifacts": [{"file": "predict.onnx", "sha256": "SHA", '
                              b'"external_data": {"file": "../model.py", "sha256": "SHA"}}]}'),
    "nested-too-deeply": b"[" * 100_000,
    "too-large": b'{"artifacts": [], "padding": "' + b"x" * 2000 + b'"}',
}


@pytest.mark.parametrize("name", BAD_MANIFESTS)
def test_a_malformed_manifest_is_a_clear_error(out, name, monkeypatch):
    monkeypatch.setattr(modelfile, "MANIFEST_LIMIT", 1000)
    digest = hashlib.sha256((out / "predict.onnx").read_bytes()).hexdigest().encode()
    (out / "manifest.json").write_bytes(BAD_MANIFESTS[name].replace(b"SHA", digest))
    refused(invoke("inspect", out / "predict.onnx"), "manifest.json")
    with pytest.raises(gc.GcompileError, match="manifest"):
        gc.load_onnx(str(out / "predict.onnx"))


def test_a_manifest_that_does_not_list_the_file_does_not_check_it(out):
    tamper_model(out / "predict.onnx")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["artifacts"] = [e for e in manifest["artifacts"] if e["name"] != "predict"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert invoke("inspect", out / "predict.onnx").exit_code == 0


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    cf = gc.compile(lambda x: x @ W, gc.spec((2, 32)), provider="cpu")
    cf.save(tmp_path / "a" / "m.onnx", external_data_threshold=0)
    model = onnx.load(tmp_path / "a" / "m.onnx", load_external_data=False)
    location, = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    os.rename(tmp_path / "a" / location, tmp_path / "outside.data")
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../outside.data"
    (tmp_path / "a" / "m.onnx").write_bytes(model.SerializeToString())
    result = invoke("inspect", tmp_path / "a" / "m.onnx")
    assert result.exit_code == 2 and "inside the model's folder" in result.stderr, result.output
