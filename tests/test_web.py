"""`gcompile build --target web` and examples/web: the page trains in headless Chromium
(onnxruntime-web, WebAssembly) and the Node.js script in onnxruntime-node; both give the losses
Python's Trainer gives on the same data and start, and the state they export loads in Python
(Trainer.load, a gc.nn module's load_state_dict) and matches; a checkpoint Python wrote continues in
Node.js as it would have in Python.

The runtimes are those of tests/portability (its runtimes.py finds them, and runs the page): without
Node.js, Chromium or the npm packages these tests skip, or fail where GCOMPILE_REQUIRE_PORTABILITY
is set (.ci/run sets it).
"""
import base64
import importlib.util
import json
import os
import subprocess

import numpy as np
import onnxruntime
import pytest
from click.testing import CliRunner

import gcompile as gc
from gcompile.cli import main
from tests.portability.runtimes import Node, Web, node_modules, run_page

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEB = os.path.join(ROOT, "examples", "web")
STEPS = 20
RTOL = 1e-5   # float32 rounding of other builds of ONNX Runtime (WebAssembly SIMD, summation order)


def _need(runtime):
    reason = runtime.missing()
    if reason is not None:
        if os.environ.get("GCOMPILE_REQUIRE_PORTABILITY"):
            pytest.fail(f"{runtime.name} is required (GCOMPILE_REQUIRE_PORTABILITY is set) but {reason}")
        pytest.skip(f"{runtime.name}: {reason}; set GCOMPILE_REQUIRE_PORTABILITY=1 to make this a failure")


def _build(out: str, target: str = "web") -> None:
    result = CliRunner().invoke(main, ["build", os.path.join(WEB, "classifier.py"), "-o", out, "--target", target])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def classifier():
    spec = importlib.util.spec_from_file_location("web_classifier", os.path.join(WEB, "classifier.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("web") / "build")
    _build(out)
    return out


def _bytes(path):
    with open(path, "rb") as fh:
        return fh.read()


def _python_trainer(build, state=None):
    init = dict(np.load(os.path.join(build, "train_step.init.npz")))
    trainer = gc.runtime.Trainer(os.path.join(build, "train_step.onnx"), params=init, provider="cpu")
    if state is not None:
        trainer.load(state)
    return trainer


def _python_run(build, classifier, steps, state=None):
    """(losses, trainer) of Python's Trainer on the example's batches, from the build's start or `state`."""
    trainer = _python_trainer(build, state)
    x, labels = classifier.dataset()
    first = trainer.step_count
    return [trainer.step(*classifier.batch(x, labels, i)) for i in range(first, first + steps)], trainer


def _same_state(build, path, reference):
    """The checkpoint at `path` loads in Python's Trainer and holds `reference`'s state."""
    loaded = _python_trainer(build, path)
    assert loaded.step_count == reference.step_count
    for group in ("state_dict", "state"):
        got = getattr(loaded, group)() if group == "state_dict" else loaded.state
        want = getattr(reference, group)() if group == "state_dict" else reference.state
        assert sorted(got) == sorted(want)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)


def _node(build, tmp_path, *args):
    _need(Node())
    out = tmp_path / "node.json"
    done = subprocess.run(["node", os.path.join(WEB, "train_node.mjs"), build, "--json", str(out), *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NODE_PATH": node_modules()})
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def test_web_build_files_and_determinism(tmp_path, build):
    manifest = json.loads(_bytes(os.path.join(build, "manifest.json")))
    assert manifest["web"] == {"module": "gcompile.mjs", "types": "gcompile.d.ts"}
    entries = {e["name"]: e for e in manifest["artifacts"]}
    assert entries["train_step"]["init"] == "train_step.init.npz" and "init" not in entries["predict"]
    assert {e["target"] for e in entries.values()} == {"portable"}
    again = str(tmp_path / "again")
    _build(again)
    assert sorted(os.listdir(again)) == sorted(os.listdir(build))
    for name in os.listdir(build):
        assert _bytes(os.path.join(again, name)) == _bytes(os.path.join(build, name)), name
    _build(again, target="portable")   # the web files go with the manifest that listed them
    assert sorted(os.listdir(again)) == ["manifest.json", "predict.onnx", "train_step.onnx"]


def test_init_file_is_the_module_state_dict(build, classifier):
    init = np.load(os.path.join(build, "train_step.init.npz"))
    state = classifier.model.state_dict()
    assert list(init) == list(state)
    for name, value in state.items():
        np.testing.assert_array_equal(init[name], value)


def test_node_script_matches_python_and_exports_state(build, classifier, tmp_path):
    checkpoint, state_dict = tmp_path / "ckpt.npz", tmp_path / "state.npz"
    got = _node(build, tmp_path, "--steps", str(STEPS), "--save", str(checkpoint), "--state-dict", str(state_dict))
    losses, trainer = _python_run(build, classifier, STEPS)
    np.testing.assert_allclose(got["losses"], losses, rtol=RTOL)
    _same_state(build, checkpoint, trainer)
    module = classifier.Classifier()
    module.load_state_dict(str(state_dict))
    for name, value in trainer.state_dict().items():
        np.testing.assert_allclose(module.state_dict()[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    x, labels = classifier.dataset()
    session = onnxruntime.InferenceSession(os.path.join(build, "predict.onnx"), providers=["CPUExecutionProvider"])
    probabilities, = session.run(None, {**{f"m.{k}": v for k, v in trainer.state_dict().items()}, "x": x})
    assert abs(got["accuracy"] - float((np.argmax(probabilities, axis=1) == labels).mean())) <= 1 / len(x)


@pytest.mark.parametrize("compressed", [False, True], ids=["Trainer.save", "np.savez_compressed"])
def test_node_script_continues_a_python_checkpoint(build, classifier, tmp_path, compressed):
    half = STEPS // 2
    _, first = _python_run(build, classifier, half)
    path = tmp_path / "python.npz"
    first.save(path)
    if compressed:   # deflated entries, as numpy's other writer makes them
        np.savez_compressed(path, **dict(np.load(path)))
    losses, _ = _python_run(build, classifier, STEPS - half, state=path)
    got = _node(build, tmp_path, "--steps", str(STEPS - half), "--resume", str(path))
    np.testing.assert_allclose(got["losses"], losses, rtol=RTOL)


_SKIP_IN_NODE = """
import {createRequire} from 'node:module';
import {pathToFileURL} from 'node:url';
const [folder] = process.argv.slice(2);
const ort = createRequire(import.meta.url)('onnxruntime-node');
const {openBuild} = await import(pathToFileURL(`${folder}/gcompile.mjs`).href);
const trainer = await (await openBuild(ort, folder)).trainer('train_step');
const batch = nan => ({x: {data: [0.5, nan ? NaN : 1, -1, 2], dims: [2, 2]}, labels: {data: [0, 1], dims: [2]}});
const before = (await trainer.values(['step']))['step'].data[0];
const losses = [await trainer.step(batch(true)), await trainer.step(batch(false))];
const step = (await trainer.values(['step']))['step'].data[0];
console.log(JSON.stringify({losses, stepCount: trainer.stepCount, skippedSteps: trainer.skippedSteps,
                            before: Number(before), step: Number(step)}));
"""


def test_the_web_trainer_counts_skipped_steps(build, tmp_path):
    """A batch with a NaN is skipped by the step itself; the web Trainer counted every step as taken."""
    _need(Node())
    script = tmp_path / "skip.mjs"
    script.write_text(_SKIP_IN_NODE)
    done = subprocess.run(["node", str(script), build], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NODE_PATH": node_modules()})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["losses"][0] is None or np.isnan(got["losses"][0])      # JSON writes NaN as null
    assert np.isfinite(got["losses"][1])
    assert (got["before"], got["step"], got["stepCount"], got["skippedSteps"]) == (0, 1, 1, 1)


def test_page_trains_in_chromium_like_python(build, classifier, tmp_path):
    _need(Web())
    roots = {"/build/": build, "/node_modules/": node_modules(), "/": WEB}
    server = run_page(roots, f"index.html?steps={STEPS}&report=/done", str(tmp_path / "chromium.log"))
    got = server.finish
    losses, trainer = _python_run(build, classifier, STEPS)
    np.testing.assert_allclose(got["losses"], losses, rtol=RTOL)
    (tmp_path / "browser.npz").write_bytes(base64.b64decode(got["checkpoint"]))
    _same_state(build, tmp_path / "browser.npz", trainer)
