"""A broken or doubled onnxruntime install is refused (or warned about) with the pip commands that
repair it, instead of an AttributeError deep inside gc.compile. Simulated in a subprocess: a fake
`onnxruntime` package and fake distribution metadata first on sys.path."""
import os
import subprocess
import sys
import textwrap

import pytest

from gcompile import install_check
from gcompile.errors import GcompileError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPILE = ("import numpy as np, gcompile as gc; "
           "print(gc.compile(lambda x: x * 2, np.ones(3, np.float32))(np.ones(3, np.float32)))")
MODEL = textwrap.dedent("""
    import gcompile as gc
    @gc.export(x=gc.spec((3,)))
    def double(x):
        return x * 2
""")


def _dist(folder, name, version):
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _python(folder, *args, cwd=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), ROOT])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.fixture
def half_uninstalled(tmp_path):
    """What `pip uninstall onnxruntime` leaves beside onnxruntime-gpu: an onnxruntime package whose
    files are gone, and the metadata of the distribution that remains plus the one removed late."""
    fake = tmp_path / "site"
    (fake / "onnxruntime").mkdir(parents=True)
    (fake / "onnxruntime" / "__init__.py").write_text("")
    _dist(fake, "onnxruntime", "1.20.0")
    return fake


def test_a_broken_module_is_refused_with_the_pip_commands(half_uninstalled, tmp_path):
    result = _python(half_uninstalled, "-c", COMPILE)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gcompile.errors.GcompileError: the installed onnxruntime is broken")
    assert "has no InferenceSession, SessionOptions" in last and "onnxruntime 1.20.0" in last
    assert "AttributeError" not in result.stderr
    assert f"-m pip uninstall -y onnxruntime onnxruntime-gpu` then `{sys.executable} -m pip install " \
           f"--force-reinstall {install_check.chosen_distribution()}`" in last

    (tmp_path / "model.py").write_text(MODEL)
    cli = _python(half_uninstalled, "-m", "gcompile.cli", "build", "model.py", "-o", "out", cwd=tmp_path)
    assert cli.returncode == 2, cli.stderr
    assert cli.stderr.startswith("error: cannot build 'double' (model.py:3): the installed onnxruntime is broken")
    assert "pip uninstall -y onnxruntime onnxruntime-gpu" in cli.stderr and "Traceback" not in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1                     # one paragraph


def test_a_doubled_install_that_works_is_warned_about_once(tmp_path):
    fake = tmp_path / "site"
    fake.mkdir()
    _dist(fake, "onnxruntime", "1.20.0")                                  # beside the real onnxruntime-gpu
    result = _python(fake, "-c", COMPILE + "; " + COMPILE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[2. 2. 2.]", "[2. 2. 2.]"]
    assert result.stderr.count("distributions that share that module") == 1
    assert "onnxruntime 1.20.0" in result.stderr and "pip uninstall -y onnxruntime onnxruntime-gpu" in result.stderr


def test_a_missing_module_names_the_repair(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)                 # import onnxruntime -> ImportError
    install_check.onnxruntime.cache_clear()
    try:
        with pytest.raises(GcompileError, match=r"onnxruntime cannot be imported \(ModuleNotFoundError.*pip install"):
            install_check.onnxruntime()
    finally:
        install_check.onnxruntime.cache_clear()


def test_this_environment_is_healthy():
    assert install_check.onnxruntime().InferenceSession
    assert any(d.startswith(install_check.chosen_distribution()) for d in install_check.installed_distributions())
