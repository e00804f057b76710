"""Logging (-v/-q), phase timings and the progress bar: drawn on a terminal, silent when piped."""
import io
import re
import time

import numpy as np
import pytest
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


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _frames(drawn: str) -> list[str]:
    """The lines a terminal showed, escape codes removed."""
    return [f for f in (ANSI.sub("", part) for part in re.split(r"[\r\n]", drawn)) if f.strip()]


def test_progress_draws_on_a_terminal_only(monkeypatch):
    logs.configure(0)
    monkeypatch.setenv("TERM", "xterm")
    tty = Terminal()
    with logs.progress(2, "work", stream=tty) as bar:
        bar.step("a")
        bar.advance()
        bar.step("b")
    frames = _frames(tty.getvalue())
    assert frames[0].startswith("work ") and "0/2" in frames[0] and frames[0].split()[-2:][0] == "a"
    assert "1/2" in frames[-1] and " b " in frames[-1]
    assert tty.getvalue().endswith("\x1b[2K")                          # erased when done
    piped = io.StringIO()
    with logs.progress(2, "work", stream=piped) as bar:
        bar.step("a")
        bar.advance()
    assert piped.getvalue() == ""
    monkeypatch.setenv("TERM", "dumb")                                   # a terminal that takes no escape codes
    dumb = Terminal()
    with logs.progress(2, "work", stream=dumb) as bar:
        bar.step("a")
    assert dumb.getvalue() == ""
    monkeypatch.setenv("TERM", "xterm")
    logs.configure(-1)                                                 # -q: no bar even on a terminal
    quiet = Terminal()
    with logs.progress(1, "work", stream=quiet) as bar:
        bar.step("a")
    assert quiet.getvalue() == ""
    logs.configure(0)


class Clock:
    """A clock the test sets: nothing depends on how fast the machine runs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_clock_ticks_within_a_phase_and_lines_fit_the_terminal(monkeypatch):
    """Redrawn from its own thread: a phase that runs for a while without calling back still shows
    its time passing; a long name is cut with an ellipsis to the terminal's width, never wrapped.
    The clock is the test's, and the display's own thread draws the time it sets (waited for,
    with a deadline far beyond its 4 redraws a second)."""
    logs.configure(0)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "50")
    tty, clock = Terminal(), Clock()

    def shown(seconds):
        """Wait until the display's thread has drawn phase lower at `seconds` (no draw of ours follows)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any("lower" in f and f.endswith(f" {seconds}") for f in _frames(tty.getvalue())):
                return True
            time.sleep(0.01)
        return False
    with logs.progress(2, "build", stream=tty, count_phases=True, clock=clock) as bar:
        bar.step("a_function_name_far_too_long_for_a_terminal_of_fifty_columns")
        with logs.phase("lower"):
            assert shown("0.0s"), _frames(tty.getvalue())
            clock.now = 7.0
            assert shown("7.0s"), _frames(tty.getvalue())
    frames = _frames(tty.getvalue())
    assert all(len(f) <= 50 for f in frames) and any("…" in f for f in frames), frames
    assert "1/2" in frames[-1]                                          # the phase that ended counted one unit


def test_echo_keeps_results_off_the_bar(capsys, monkeypatch):
    logs.configure(0)
    monkeypatch.setenv("TERM", "xterm")
    tty = Terminal()
    bar = logs.Progress(1, "bench", stream=tty)
    bar.step("W1")
    bar.echo("W1 result line")
    bar.clear()
    assert capsys.readouterr().out == "W1 result line\n"               # stdout stays stdout where it is piped
    assert "W1" in _frames(tty.getvalue())[0] and "W1 result line" not in tty.getvalue()


def test_build_shows_every_phase_of_every_function(tmp_path, monkeypatch):
    """The display follows the build through import, each function's trace (and grad inside it),
    passes, lower, serialize and check, then the write; its count ends at its total."""
    logs.configure(0)
    (tmp_path / "model.py").write_text(MODEL)
    shown = []
    draw = logs.Progress._draw

    def record(self):
        if self.enabled:
            shown.append((self.done, self.total, " › ".join(self._phases), self.label))
        draw(self)
    monkeypatch.setattr(logs.Progress, "_draw", record)
    monkeypatch.setenv("TERM", "xterm")
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    gcompile.artifacts.build.build(tmp_path / "model.py", tmp_path / "out", check=True, provider="cpu")
    seen = [(phase, label) for _, _, phase, label in shown if phase]
    assert seen[0] == ("import", "")
    for name, phases in (("first", ["trace", "passes", "lower", "serialize", "check"]),
                         ("second", ["trace", "trace › grad", "passes", "lower", "serialize", "check"])):
        ran = [p for p, label in seen if label == name]
        assert [p for p in dict.fromkeys(ran)] == phases, ran
    assert seen[-1] == ("write", "")
    assert shown[-1][0] == shown[-1][1] == 1 + 2 * 5 + 1                # import, 5 phases per function, write
    assert "build" in _frames(tty.getvalue())[0]


def test_nested_phases_are_shown_inside_their_parent():
    clock = Clock()
    with logs.timings(clock) as times:
        with logs.phase("trace"):
            clock.now += 0.001
            with logs.phase("grad"), logs.phase("grad"):                 # grad inside grad counts once
                clock.now += 0.002
        with logs.phase("lower"):
            clock.now += 0.0005
    assert list(times) == ["trace", "grad", "lower"] and times.parent == {"grad": "trace"}
    assert times == pytest.approx({"trace": 0.003, "grad": 0.002, "lower": 0.0005})
    assert times.format() == "trace 3.0 ms (grad 2.0 ms), lower 0.5 ms"
    assert times.total() == pytest.approx(0.0035)
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
    assert re.search(r"  consts   [\d,]+ values in \d+ initializer\(s\)", plain.stdout)
    assert re.search(r"  time     [\d.]+ ms: trace [\d.]+ ms \(grad [\d.]+ ms\), passes [\d.]+ ms, lower", plain.stdout)
    verbose = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out", "-v", "--check", "--provider", "cpu")
    assert verbose.exit_code == 0, verbose.output
    assert re.search(r"gcompile: first: trace [\d.]+ ms, passes [\d.]+ ms, lower [\d.]+ ms", verbose.stderr)
    assert re.search(r"gcompile: second: trace [\d.]+ ms \(grad [\d.]+ ms\)", verbose.stderr)
    assert "gcompile: second: check on cpu" in verbose.stderr
    assert re.search(r"check [\d.]+ ms", verbose.stdout) and "ok on cpu" in verbose.stdout
    quiet = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out", "-q", "-v")
    assert quiet.exit_code == 0 and quiet.stderr == ""
