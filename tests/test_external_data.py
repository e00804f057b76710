"""Weights in an external data file beside the .onnx once a model reaches a size threshold
(by default 2 GiB, the protobuf limit; here a low threshold keeps the test fast): written
deterministically and atomically, loadable from any working directory."""
import hashlib
import json
import os
import re
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import gcompile as gc
import gcompile.functions as F
from gcompile.cli import main
from gcompile.lowering.serialize import EXTERNAL_DATA_THRESHOLD, serialize

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((32, 16)).astype(np.float32)      # 2 KiB: goes external
W2 = RNG.standard_normal((16, 4)).astype(np.float32)       # 256 B: small weights stay inline
X = RNG.standard_normal((3, 32)).astype(np.float32)

MODEL = """
import numpy as np
import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(0)
W1 = rng.standard_normal((32, 16)).astype(np.float32)
W2 = rng.standard_normal((16, 4)).astype(np.float32)

@gc.export(x=gc.spec(("batch", 32)))
def predict(x):
    return F.tanh(x @ W1) @ W2

@gc.export(x=gc.spec(("batch", 32)))
def grad_norm(x):
    return gc.grad(F.sum(F.tanh(x @ W1) @ W2), [x])[0]
"""


def predict(x):
    return F.tanh(x @ W1) @ W2


def data_name(model_file, blob):
    """The external data file of `model_file` holding `blob`: named by the sha256 of its content."""
    return f"{model_file}.{hashlib.sha256(blob).hexdigest()[:16]}.data"


def expected(x):
    return np.tanh(x @ W1) @ W2


@pytest.fixture(scope="module")
def compiled():
    return gc.compile(predict, gc.spec(("batch", 32)))


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_below_the_threshold_the_model_is_one_file(compiled, tmp_path):
    compiled.save(tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == ["m.onnx"]
    assert EXTERNAL_DATA_THRESHOLD == 2 * 1024 ** 3
    size = compiled.model.ByteSize()
    assert serialize(compiled.model, "m.onnx", size + 1).weights is None       # just below: inline
    assert serialize(compiled.model, "m.onnx", size).weights is not None       # reaching it: external


def test_save_with_a_low_threshold_writes_the_weights_beside_the_model(compiled, tmp_path):
    before = compiled.model.SerializeToString()
    compiled.save(tmp_path / "m.onnx", external_data_threshold=1024)
    assert compiled.model.SerializeToString() == before                          # the model is left as it was
    data_file = data_name("m.onnx", W1.tobytes())                               # named by its content
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", data_file]                 # no temporary files
    header = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    external = {t.name: {e.key: e.value for e in t.external_data}
                for t in header.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert len(external) == 1 and [e["location"] for e in external.values()] == [data_file]
    assert os.path.getsize(tmp_path / data_file) == W1.nbytes
    assert os.path.getsize(tmp_path / "m.onnx") < W1.nbytes                      # W1 is not inline
    full = onnx.load(tmp_path / "m.onnx")
    onnx.checker.check_model(full, full_check=True)
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(full.graph.initializer[0]), W1)


def test_serialize_is_deterministic(compiled):
    first = serialize(compiled.model, "m.onnx", 0)
    assert first == serialize(compiled.model, "m.onnx", 0) and first.weights is not None
    assert first.location == data_name("m.onnx", first.weights)


def test_loads_from_any_working_directory(compiled, tmp_path, monkeypatch):
    compiled.save(tmp_path / "models" / "m.onnx", external_data_threshold=0)
    moved = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "models", moved)                                  # the pair travels together
    monkeypatch.chdir(tmp_path)
    session = ort.InferenceSession(str(moved / "m.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": X})[0], expected(X), rtol=1e-5, atol=1e-6)
    np.save(tmp_path / "x.npy", X)
    os.makedirs(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    result = invoke("run", moved / "m.onnx", "--input", f"x={tmp_path / 'x.npy'}", "--out", tmp_path / "res")
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.load(tmp_path / "res" / "output.npy"), expected(X), rtol=1e-5, atol=1e-6)
    info = invoke("inspect", moved / "m.onnx")
    assert info.exit_code == 0 and f"external data in {data_name('m.onnx', W1.tobytes())}" in info.output


def test_build_with_a_threshold(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    result = invoke("build", "model.py", "-o", "out", "--external-data-threshold", "1024", "--check",
                    "--provider", "cpu")
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    data_files = {e["name"]: e["external_data"]["file"] for e in manifest["artifacts"]}
    assert f"KiB in {data_files['predict']}" in result.output and result.output.count("check    ok on cpu") == 2
    assert sorted(os.listdir("out")) == sorted(["grad_norm.onnx", data_files["grad_norm"], "manifest.json",
                                                "predict.onnx", data_files["predict"]])
    for entry in manifest["artifacts"]:
        data = entry["external_data"]
        blob = (tmp_path / "out" / data["file"]).read_bytes()
        assert data["file"] == data_name(entry["file"], blob) and data["bytes"] == len(blob)
        assert data["sha256"] == hashlib.sha256(blob).hexdigest()
        header = onnx.load(tmp_path / "out" / entry["file"], load_external_data=False)
        assert entry["parameters"] == sum(int(np.prod(t.dims)) for t in header.graph.initializer) >= W1.size
    again = invoke("build", "model.py", "-o", "again", "--external-data-threshold", "1024")
    assert again.exit_code == 0, again.output
    for name in os.listdir("out"):                                               # deterministic, data included
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    plain = invoke("build", "model.py", "-o", "plain")                          # default: far below 2 GiB
    assert plain.exit_code == 0 and not any(n.endswith(".data") for n in os.listdir("plain"))


def test_negative_threshold_is_refused(compiled, tmp_path):
    with pytest.raises(gc.GcompileError, match="external_data_threshold must be >= 0"):
        compiled.save(tmp_path / "m.onnx", external_data_threshold=-1)
    assert not os.listdir(tmp_path)


def test_compiling_a_model_past_the_threshold_runs_from_external_data(monkeypatch):
    import gcompile.runtime.compiled
    monkeypatch.setattr(gcompile.runtime.compiled, "EXTERNAL_DATA_THRESHOLD", 0)   # as if it were 2 GiB
    loaded = []
    make_session = gcompile.runtime.compiled.make_session
    monkeypatch.setattr(gcompile.runtime.compiled, "make_session",
                        lambda m, p, *args, **kw: loaded.append((m, args)) or make_session(m, p, *args, **kw))
    cf = gc.compile(predict, gc.spec(("batch", 32)))
    assert len(loaded) == 1
    if gcompile.runtime.compiled.external_data_from_memory():                         # the data handed over in memory
        model, (external,) = loaded[0]
        location, = external
        assert isinstance(model, bytes) and re.fullmatch(r"model\.onnx\.[0-9a-f]{16}\.data", location)
    else:                                                                             # else from a path
        assert loaded[0][0].endswith("model.onnx")
    np.testing.assert_allclose(cf(X), expected(X), rtol=1e-5, atol=1e-6)
