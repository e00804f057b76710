"""The `gcompile` command: build (manifest, --check, determinism, all-or-nothing), run, inspect,
and the exit codes and one-paragraph messages of user errors."""
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import types

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import gcompile.artifacts.build
import gcompile.lowering.lower
from gcompile.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = textwrap.dedent("""
    import numpy as np
    import gcompile as gc
    import gcompile.functions as F

    W = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)

    @gc.export(x=gc.spec(("batch", 5), "float32"))
    def predict(x):
        return F.tanh(x @ W)

    @gc.export(x=gc.spec(("batch", 5)), w=gc.spec((5, 3)), name="curvature")
    def loss_grads(x, w):
        loss = F.mean(F.tanh(x @ w) ** 2)
        g, = gc.grad(loss, [w])
        gg, = gc.grad(F.sum(g * g), [w])
        return {"loss": loss, "grad": g, "grad_of_grad_norm": gg}
""")


def W():
    return np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)


pytestmark = pytest.mark.usefixtures("own_folder")   # (conftest.py: builds without -o write ./build)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return path


@pytest.fixture
def built(model, tmp_path):
    out = tmp_path / "out"
    result = invoke("build", model, "-o", out)
    assert result.exit_code == 0, result.output
    return out


def user_error(result, *fragments):
    """Exit 2, one message on stderr naming every fragment, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def test_build_writes_artifacts_and_manifest(built):
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["source"] == "model.py"
    entries = {e["name"]: e for e in manifest["artifacts"]}
    assert list(entries) == ["predict", "curvature"]          # source order, renamed artifact
    for entry in entries.values():
        data = (built / entry["file"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
        model = onnx.load_from_string(data)
        onnx.checker.check_model(model, full_check=True)
        assert entry["nodes"] == len(model.graph.node) and entry["ir_version"] == model.ir_version
        assert entry["opset"] == model.opset_import[0].version
        tagged = sum(entry["nodes_by_order"].values())
        assert tagged + entry["untagged_nodes"] == entry["nodes"]
    predict, curvature = entries["predict"], entries["curvature"]
    assert predict["inputs"] == [{"name": "x", "shape": ["batch", 5], "dtype": "float32"}]
    assert predict["outputs"] == [{"name": "output", "shape": ["batch", 3], "dtype": "float32"}]
    assert list(predict["nodes_by_order"]) == ["0"]
    assert [o["name"] for o in curvature["outputs"]] == ["loss", "grad", "grad_of_grad_norm"]
    assert curvature["outputs"][0]["shape"] == [] and curvature["outputs"][2]["shape"] == [5, 3]
    assert list(curvature["nodes_by_order"]) == ["0", "1", "2"]


def test_build_table_and_check(model, tmp_path):
    result = invoke("build", model, "-o", tmp_path / "out", "--check", "--provider", "cpu")
    assert result.exit_code == 0, result.output
    assert "x: float32(batch, 5)" in result.output and "loss: float32()" in result.output
    assert "fwd" in result.output and "bwd" in result.output and "2nd" in result.output
    assert result.output.count("check    ok on cpu") == 2


def test_check_rejects_non_finite_outputs(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("import gcompile as gc\nimport gcompile.functions as F\n"
                    "@gc.export(x=gc.spec((4,)))\ndef f(x):\n    return F.log(x * 0.0)\n")
    result = invoke("build", path, "-o", tmp_path / "out", "--check")
    user_error(result, "'f'", "non-finite")
    assert not (tmp_path / "out").exists()


def test_builds_are_byte_identical_across_processes(model, built, tmp_path):
    again = tmp_path / "again"
    proc = subprocess.run([sys.executable, "-m", "gcompile.cli", "build", str(model), "-o", str(again)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    files = sorted(os.listdir(built))
    assert files == sorted(os.listdir(again)) == ["curvature.onnx", "manifest.json", "predict.onnx"]
    for name in files:
        assert (built / name).read_bytes() == (again / name).read_bytes(), name


def test_run_with_npy_inputs(built, tmp_path):
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = invoke("run", built / "predict.onnx", "--input", f"x={tmp_path / 'x.npy'}", "--out", tmp_path / "res")
    assert result.exit_code == 0, result.output
    assert "output: float32(4, 3)" in result.output
    np.testing.assert_allclose(np.load(tmp_path / "res" / "output.npy"), np.tanh(x @ W()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("feeds, fragments", [
    ({}, ["missing 'x'", "x: float32(batch, 5)"]),
    ({"x": np.zeros((2, 5), np.float32), "y": np.zeros(1)}, ["unexpected 'y'"]),
    ({"x": np.zeros((2, 4), np.float32)}, ["input 'x'", "expected float32(batch, 5)", "got float32(2, 4)"]),
    ({"x": np.zeros((2, 5), np.float64)}, ["input 'x'", "got float64(2, 5)"]),
])
def test_run_input_errors(built, tmp_path, feeds, fragments):
    args = []
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / name}.npy"]
    user_error(invoke("run", built / "predict.onnx", *args), *fragments)


def test_run_symbol_bound_twice(built, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 5), np.float32))
    np.save(tmp_path / "w.npy", np.zeros((5, 3), np.float32))
    result = invoke("run", built / "curvature.onnx", "--input", f"x={tmp_path / 'x.npy'}",
                    "--input", f"w={tmp_path / 'w.npy'}")
    assert result.exit_code == 0, result.output
    assert "grad_of_grad_norm: float32(5, 3)" in result.output
    user_error(invoke("run", built / "curvature.onnx", "--input", f"x={tmp_path / 'nope.npy'}"), "nope.npy")
    user_error(invoke("run", built / "curvature.onnx", "--input", "x"), "NAME=path.npy")


def test_inspect(built):
    result = invoke("inspect", built / "curvature.onnx")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "op histogram:" in out and "Gemm" in out and "Tanh" in out
    assert "x: float32(batch, 5)" in out and "grad: float32(5, 3)" in out
    manifest = {e["name"]: e for e in json.loads((built / "manifest.json").read_text())["artifacts"]}
    counts = manifest["curvature"]["nodes_by_order"]
    assert f"fwd {counts['0']}, bwd {counts['1']}, 2nd {counts['2']}" in out   # same numbers as the build


def test_inspect_counts_the_nodes_inside_loop_bodies(tmp_path):
    """`nodes` counts the top-level graph; the nodes of Scan bodies are reported beside it, in
    the manifest as in `inspect`, and only for models that have loops."""
    import onnx

    from gcompile.artifacts.describe import body_nodes
    path = write(tmp_path, """
        import numpy as np
        import gcompile as gc
        import gcompile.functions as F

        @gc.export(xs=gc.spec((20, 4, 3)), w=gc.spec((3, 3)))
        def rnn(xs, w):
            h, _ = gc.scan(lambda h, x: (F.tanh(h @ w + x), None), np.zeros((4, 3), np.float32), xs)
            loss = F.sum(h * h)
            return loss, gc.grad(loss, [w])
    """)
    result = invoke("build", path, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    inside = body_nodes(onnx.load(tmp_path / "out" / "rnn.onnx").graph)
    assert inside > 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())["artifacts"][0]
    assert manifest["loop_body_nodes"] == inside
    assert f"and {inside} in loop bodies" in invoke("inspect", tmp_path / "out" / "rnn.onnx").output


def test_loop_free_models_report_no_loop_body_nodes(built):
    manifest = json.loads((built / "manifest.json").read_text())["artifacts"]
    assert all("loop_body_nodes" not in entry for entry in manifest)
    assert "loop bodies" not in invoke("inspect", built / "curvature.onnx").output


def write(tmp_path, text, name="model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_missing_model_file(tmp_path):
    user_error(invoke("build", tmp_path / "absent.py"), "absent.py", "not found")


def test_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n\ndef f(x:\n    pass\n")
    user_error(invoke("build", path), "model.py:3", "syntax error")


def test_model_raising_names_file_and_line(tmp_path):
    path = write(tmp_path, "import gcompile as gc\nx = 1\nraise ValueError('boom')\n")
    user_error(invoke("build", path), "model.py:3", "ValueError: boom")


def test_no_exported_function(tmp_path):
    path = write(tmp_path, "import gcompile as gc\ndef f(x):\n    return x\n")
    user_error(invoke("build", path), "no exported function", "@gc.export")


def test_bad_spec(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n@gc.export(x=gc.spec((3,), 'complex64'))\ndef f(x):\n    return x\n")
    user_error(invoke("build", path), "model.py:2", "bad spec", "complex64")


def test_trace_errors_name_the_function_and_line(tmp_path):
    path = write(tmp_path, """\
        import gcompile as gc
        @gc.export(x=gc.spec((3,)))
        def f(x):
            return x.no_such_method()
    """)
    user_error(invoke("build", path), "cannot build 'f'", "AttributeError", "model.py:4")


def test_duplicate_artifact_names(tmp_path):
    path = write(tmp_path, """\
        import gcompile as gc
        @gc.export(x=gc.spec((3,)), name="same")
        def f(x):
            return x * 2
        @gc.export(x=gc.spec((3,)), name="same")
        def g(x):
            return x * 3
    """)
    user_error(invoke("build", path), "'same'")


def test_bad_opset(model, tmp_path):
    user_error(invoke("build", model, "--opset", "5"), "opset 5")


@pytest.mark.parametrize("content", [b"not an onnx model", None])
@pytest.mark.parametrize("command", ["run", "inspect"])
def test_corrupt_or_missing_onnx(built, tmp_path, command, content):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    user_error(invoke(command, path), "bad.onnx")


def test_truncated_onnx(built, tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes((built / "curvature.onnx").read_bytes()[:150])
    user_error(invoke("inspect", path), "cut.onnx", "is damaged", "truncated")


def test_failed_build_keeps_previous_artifacts(model, built):
    before = {name: (built / name).read_bytes() for name in os.listdir(built)}
    model.write_text(MODEL + textwrap.dedent("""
        @gc.export(x=gc.spec((3,)), y=gc.spec((4,)))
        def broken(x, y):
            return x + y
    """))
    user_error(invoke("build", model, "-o", built), "cannot build 'broken'", "(3,)", "(4,)")
    assert {name: (built / name).read_bytes() for name in os.listdir(built)} == before   # no temp files either


def test_internal_error_exits_1_and_debug_shows_traceback(model, tmp_path, monkeypatch):
    # an op without a lowering rule: the failure is raised inside gcompile, so it is a bug, not a user error
    monkeypatch.setattr(gcompile.lowering.context, "get_op", lambda name: types.SimpleNamespace(lower=None))
    result = invoke("build", model, "-o", tmp_path / "out")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "internal error: TypeError" in result.stderr and "gcompile bug" in result.stderr
    result = invoke("build", model, "-o", tmp_path / "out", "--debug")
    assert result.exit_code == 1 and "Traceback" in result.stderr


def test_module_entry_point_user_error_has_no_traceback(tmp_path):
    path = write(tmp_path, "def f(:\n")
    proc = subprocess.run([sys.executable, "-m", "gcompile.cli", "build", str(path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: model.py:1: syntax error") and proc.stdout == ""


@pytest.mark.parametrize("example", ["mlp", "cnn", "wgan_gp", "pinn", "hvp", "nn_cnn", "neural_ode"])
def test_examples_build_and_check(example, tmp_path):
    result = invoke("build", os.path.join(ROOT, "examples", f"{example}.py"), "-o", tmp_path, "--check",
                    "--provider", "cpu")
    assert result.exit_code == 0, result.output
    assert "check    ok on cpu" in result.output


def test_output_folder_below_a_file(model, tmp_path):
    (tmp_path / "taken").write_text("")
    user_error(invoke("build", model, "-o", tmp_path / "taken" / "sub"), "cannot write the build", "taken")


def test_optimize_levels(model, tmp_path):
    counts = {}
    for level in ("0", "2"):
        result = invoke("build", model, "-o", tmp_path / level, "-O", level)
        assert result.exit_code == 0, result.output
        counts[level] = json.loads((tmp_path / level / "manifest.json").read_text())["artifacts"][1]["nodes"]
    assert counts["2"] < counts["0"]


def test_recompute_flag_copies_forward_nodes_into_the_backward(model, tmp_path):
    result = invoke("build", model, "-o", tmp_path / "re", "--recompute", "--check")
    assert result.exit_code == 0, result.output
    names = [n.name for n in onnx.load(str(tmp_path / "re" / "curvature.onnx")).graph.node]
    assert any(re.match(r"re\d+_", name) for name in names), "recomputed copies are named re<order>_..."


def test_check_refuses_float64_kernels_missing_on_cpu(tmp_path):
    path = write(tmp_path, """\
        import numpy as np
        import gcompile as gc
        import gcompile.functions as F
        K = np.ones((2, 1, 3, 3))
        @gc.export(x=gc.spec(("n", 1, 5, 5), "float64"))
        def f(x):
            return F.conv(x, K)
    """)
    user_error(invoke("build", path, "-o", tmp_path / "out", "--check", "--provider", "cpu"), "float64", "Conv")
    assert not (tmp_path / "out").exists()
    assert invoke("build", path, "-o", tmp_path / "out").exit_code == 0      # building alone is fine


def test_build_from_an_imported_module(tmp_path):
    module = types.ModuleType("in_memory_model")
    exec(compile(MODEL, "in_memory_model.py", "exec"), module.__dict__)
    result = gcompile.artifacts.build.build(module, tmp_path / "out")
    assert [e["name"] for e in result.manifest["artifacts"]] == ["predict", "curvature"]
    assert sorted(os.listdir(tmp_path / "out")) == ["curvature.onnx", "manifest.json", "predict.onnx"]


def test_the_guide_feeds_a_modules_weights_to_run(tmp_path):
    """docs/guide/cli.md's classify.py, its saved weights and its two commands, as the page writes
    them: `-i m=weights.npz` feeds every input m.<name> of @gc.export(m=model) from Module.save's file."""
    import shlex

    import gcompile as gc
    with open(os.path.join(ROOT, "docs", "guide", "cli.md")) as fh:
        text = fh.read()
    blocks = [body for _, body in re.findall(r"^```(\w+)\n(.*?)^```$", text, re.S | re.M)]
    first = next(i for i, body in enumerate(blocks) if body.startswith("# classify.py"))
    model_py, save, shell = blocks[first:first + 3]
    (tmp_path / "classify.py").write_text(model_py)
    namespace: dict = {}
    exec(model_py + save, namespace)   # noqa: S102 - the guide's own code
    commands = [shlex.split(line.split("#")[0]) for line in shell.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["gcompile", "build"], ["gcompile", "run"]]
    for command in commands:
        result = invoke(*command[1:])
        assert result.exit_code == 0, result.output
    assert invoke(*commands[1][1:], "-o", "res").exit_code == 0
    x = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(np.load("res/output.npy"), gc.compile(namespace["model"], x)(x), rtol=1e-6)
    wrong = invoke("run", "build/classify.onnx", "-i", "m=x.npy", "-i", "x=x.npy")
    assert wrong.exit_code == 2 and "-i m=weights.npz" in wrong.stderr, wrong.output
    np.savez("odd.npz", **{"0.weight": np.zeros((8, 4), np.float32)})
    short = invoke("run", "build/classify.onnx", "-i", "m=odd.npz", "-i", "x=x.npy")
    assert short.exit_code == 2 and "missing '0.bias'" in short.stderr, short.output
