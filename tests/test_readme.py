"""The README's Python examples run as written (in order, sharing one namespace, as a reader
pasting them into one session would), in a scratch folder that sees the bundled examples."""
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _python_blocks():
    text = (ROOT / "README.md").read_text()
    return [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "@gc.export" not in b]


def test_readme_python_examples_run(tmp_path, monkeypatch):
    blocks = _python_blocks()
    assert len(blocks) >= 4
    os.symlink(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)   # noqa: S102 - our own documentation
    assert (tmp_path / "predict.onnx").exists() and (tmp_path / "train_step.onnx").exists()
