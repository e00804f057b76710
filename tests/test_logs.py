"""Logging (-v/-q), phase timings and the progress bar: drawn on a terminal, silent when piped."""
import io
import re
import time

import numpy as np
from click.testing import CliRunner

import gcompile as gc
import gcompile.artifacts.build
import gcompile.functions as F
from gcompile import logs
from gcompile.cli import main

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


class Terminal(io.StringIO):
    def isatty(self):
        return True


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_progress_draws_on_a_terminal_only():
    logs.configure(0)
    tty = Terminal()
    with logs.progress(2, "work", stream=tty) as bar:
        bar.step("a")
        bar.advance()
        bar.step("b")
    frames = tty.getvalue().split("\r")
    assert "work [" in frames[1] and "0/2 a" in frames[1] and "1/2 b" in frames[-2]
    assert frames[-1] == "\x1b[K"                                      # cleared when done
    piped = io.StringIO()
    with logs.progress(2, "work", stream=piped) as bar:
        bar.step("a")
        bar.advance()
    assert piped.getvalue() == ""
    logs.configure(-1)                                                 # -q: no bar even on a terminal
    quiet = Terminal()
    with logs.progress(1, "work", stream=quiet) as bar:
        bar.step("a")
    assert quiet.getvalue() == ""
    logs.configure(0)


def test_echo_keeps_results_off_the_bar(capsys):
    logs.configure(0)
    tty = Terminal()
    bar = logs.Progress(1, "bench", stream=tty)
    bar.step("W1")
    bar.echo("W1 result line")
    assert capsys.readouterr().out == "W1 result line\n"
    assert tty.getvalue().count("\x1b[K") == 3                         # draw, clear, redraw


def test_build_shows_progress_over_its_functions(tmp_path, monkeypatch):
    logs.configure(0)
    (tmp_path / "model.py").write_text(MODEL)
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    gcompile.artifacts.build.build(tmp_path / "model.py", tmp_path / "out")
    drawn = tty.getvalue()
    assert "build [" in drawn and "0/2 first" in drawn and "1/2 second" in drawn and "2/2" in drawn


def test_nested_phases_are_shown_inside_their_parent():
    with logs.timings() as times:
        with logs.phase("trace"), logs.phase("grad"), logs.phase("grad"):   # grad inside grad counts once
            time.sleep(0.002)
        with logs.phase("lower"):
            pass
    assert list(times) == ["trace", "grad", "lower"] and times.parent == {"grad": "trace"}
    assert times["trace"] >= times["grad"] >= 0.002
    assert re.fullmatch(r"trace [\d.]+ ms \(grad [\d.]+ ms\), lower [\d.]+ ms", times.format())
    assert times.total() == times["trace"] + times["lower"]
    with logs.phase("outside"):                                        # no collector: nothing recorded
        pass


def test_grad_time_is_recorded_while_tracing():
    with logs.timings() as times:
        gc.compile(lambda x: gc.grad(F.sum(x * x), [x])[0], np.ones(3, np.float32))
    assert "grad" in times


def test_verbose_logs_phase_timings_and_the_table_has_params_and_time(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    plain = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out")
    assert plain.exit_code == 0 and "gcompile:" not in plain.stderr
    assert re.search(r"  params   \d+", plain.stdout)
    assert re.search(r"  time     [\d.]+ ms: trace [\d.]+ ms \(grad [\d.]+ ms\), passes [\d.]+ ms, lower", plain.stdout)
    verbose = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out", "-v", "--check", "--provider", "cpu")
    assert verbose.exit_code == 0, verbose.output
    assert re.search(r"gcompile: first: trace [\d.]+ ms, passes [\d.]+ ms, lower [\d.]+ ms", verbose.stderr)
    assert re.search(r"gcompile: second: trace [\d.]+ ms \(grad [\d.]+ ms\)", verbose.stderr)
    assert "gcompile: second: check on cpu" in verbose.stderr
    assert re.search(r"check [\d.]+ ms", verbose.stdout) and "ok on cpu" in verbose.stdout
    quiet = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out", "-q", "-v")
    assert quiet.exit_code == 0 and quiet.stderr == ""
