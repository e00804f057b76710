"""examples/finetune_onnx.py: fine-tuning the last layers of the bundled PyTorch-exported
classifier through gc.load_onnx, one ONNX training step and the Trainer."""
import importlib.util
import json
import os

from click.testing import CliRunner

from gcompile.cli import main as cli

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "examples", "finetune_onnx.py")


def load_example():
    spec = importlib.util.spec_from_file_location("finetune_onnx_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_loss_falls(tmp_path, capsys):
    example = load_example()
    losses = example.main(steps=64, out=str(tmp_path), provider="cpu")
    assert sum(losses[-8:]) < 0.3 * sum(losses[:8])
    assert "accuracy on the new task" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["finetune.npz", "finetune_step.onnx"]


def test_example_builds_with_check(tmp_path):
    result = CliRunner().invoke(cli, ["build", EXAMPLE, "-o", str(tmp_path), "--check", "--provider", "cpu"])
    assert result.exit_code == 0, result.output
    assert "check    ok on cpu" in result.output
    entry, = json.loads((tmp_path / "manifest.json").read_text())["artifacts"]
    assert entry["train_step"]["params"] == ["fc2.weight", "fc2.bias", "head.weight", "head.bias"]
