"""Every example runs as a script (`python examples/NAME.py`) and prints what it computed: the
losses it prints go down, the Hessian-vector product matches a finite difference."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
# example -> (arguments keeping it short, the pattern of the number it prints per step)
RUNS = {
    "mlp": (["--steps", "12"], r"loss ([\d.]+)"),
    "cnn": (["--steps", "6"], r"cross-entropy ([\d.]+)"),
    "pinn": (["--steps", "11"], r"= ([\d.]+)"),
    "wgan_gp": (["--steps", "6"], r"penalty ([\d.]+)"),
    "ctc_lstm": (["--steps", "11"], r"ctc loss ([\d.]+)"),
    "finetune_onnx": (["--steps", "20"], r"loss ([\d.]+)"),
    "nn_cnn": (["--steps", "8"], r"cross-entropy ([\d.]+)"),
    "neural_ode": (["--steps", "8"], r"loss ([\d.]+)"),
    "hvp": (["--batch", "8"], None),
}


def _run(name, args):
    env = {**os.environ, "PYTHONPATH": ROOT}
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, f"{name}.py"), *args], capture_output=True,
                            text=True, cwd=ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_example_is_run_here():
    assert sorted(RUNS) == sorted(f[:-3] for f in os.listdir(EXAMPLES) if f.endswith(".py"))


@pytest.mark.parametrize("name", [n for n in RUNS if RUNS[n][1]])
def test_example_script_prints_a_falling_loss(name):
    args, pattern = RUNS[name]
    out = _run(name, args)
    values = [float(v) for v in re.findall(pattern, out)]
    assert len(values) >= 2, out
    assert values[-1] < values[0], out


def test_hvp_example_matches_a_finite_difference():
    out = _run("hvp", RUNS["hvp"][0])
    assert re.search(r"hvp_w1: shape \(784, 64\), norm [\d.]+", out), out
    error = float(re.search(r"\|Hv - finite difference\| / \|Hv\| = ([\d.e+-]+)", out).group(1))
    assert error < 1e-3, out
