"""The command line's global options (-v, -q, --debug before or after the command), -q printing
nothing on success, -vv adding debug messages, and --help answering without importing the library."""
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from gcompile.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = """
import gcompile as gc
import gcompile.functions as F

@gc.export(x=gc.spec(("batch", 3)))
def first(x):
    return F.tanh(x)

@gc.export(x=gc.spec((3,)))
def second(x):
    return gc.grad(F.sum(F.exp(x)), [x])[0]
"""


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return path


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_prints_nothing_on_success(model, tmp_path, where):
    def quiet(command, *args):
        return invoke("-q", command, *args) if where == "before" else invoke(command, *args, "-q")
    out = tmp_path / "out"
    results = [quiet("build", model, "-o", out, "--check", "--provider", "cpu")]
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    results += [quiet("run", out / "first.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "outputs"),
                quiet("inspect", out / "first.onnx"),
                quiet("viz", model, "-o", tmp_path / "graph.svg")]
    for result in results:
        assert result.exit_code == 0, result.output
        assert result.stdout == "" and result.stderr == ""
    assert (out / "manifest.json").exists() and (tmp_path / "outputs" / "output.npy").exists()
    assert (tmp_path / "graph.svg").exists()
    failed = quiet("run", out / "first.onnx")                              # errors still print
    assert failed.exit_code == 2 and failed.stderr.startswith("error: inputs do not match the model")


def test_verbose_before_the_command_and_vv_adds_debug_messages(model, tmp_path):
    plain = invoke("build", model, "-o", tmp_path / "a")
    verbose = invoke("-v", "build", model, "-o", tmp_path / "b")
    debug = invoke("-v", "build", model, "-o", tmp_path / "c", "-v")        # counts add up: -vv
    for result in (plain, verbose, debug):
        assert result.exit_code == 0, result.output
    assert "gcompile:" not in plain.stderr
    assert "gcompile: first: trace" in verbose.stderr and "traced" not in verbose.stderr
    assert "gcompile: first: trace" in debug.stderr
    for message in ("model.py: exported first, second", "first: traced 2 nodes", "second: traced 7 nodes",
                    "second: 2 nodes after the graph passes", "second: 2 ONNX nodes, 0 initializers",
                    "writing first.onnx, second.onnx, manifest.json to"):
        assert message in debug.stderr, debug.stderr


def test_debug_before_the_command_shows_the_traceback(model, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr("gcompile.artifacts.build.build", broken)
    result = invoke("--debug", "build", model, "-o", tmp_path / "out")
    assert result.exit_code == 1 and "Traceback" in result.stderr and "RuntimeError: boom" in result.stderr


@pytest.mark.parametrize("args", [["--help"], ["build", "--help"], ["grad", "--help"], ["--version"]])
def test_help_imports_none_of_the_library(args):
    """`gcompile --help` answers without numpy, onnx, onnxruntime or rich (the package loads lazily)."""
    code = ("import sys\nfrom gcompile.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('numpy', 'onnx', 'onnxruntime', 'networkx', 'rich', 'gcompile.functions')"
            " if m in sys.modules)\nprint('imported:', heavy, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().endswith("imported: []"), result.stderr
    assert "Usage: " in result.stdout or "version" in result.stdout


def test_the_lazy_package_still_offers_every_public_name():
    code = ("import gcompile as gc, sys\nassert 'numpy' not in sys.modules\n"
            "names = gc.__all__\nfrom gcompile import *\n"
            "missing = [n for n in names if not hasattr(gc, n)]\nassert not missing, missing\n"
            "assert 'numpy' in sys.modules and callable(gc.compile) and gc.functions.tanh\nprint(len(names))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 20
