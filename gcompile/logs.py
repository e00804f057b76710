"""The gcompile logger, phase timings and the live progress display.

One logger ("gcompile") whose level the CLI's -v/-q set; the same level decides whether
progress draws, and it only ever draws on an interactive terminal (a tty whose TERM is not
dumb), so piped output, CI logs and dumb terminals get no escape codes. Phase timings are
collected through a context variable so deep code (gc.grad inside a trace) can report its time
without being passed a collector; the progress display active in the same context shows each
phase as it starts, so a long build shows where it is at every moment.

The display is rich's live progress (a maintained library: it redraws from its own thread, so
the clock ticks through a phase that takes seconds, fits the line to the terminal's width and
erases itself when done); rich is imported only when something is drawn.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("gcompile")

_LEVELS = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}


class _Stderr(logging.Handler):
    """Writes to whatever sys.stderr is at the time of the record (click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except (OSError, ValueError):   # a closed or broken stream
            self.handleError(record)


def configure(verbosity: int) -> None:
    """-1 (-q): errors only and no progress display; 0: warnings; 1 (-v): phase timings; 2+ (-vv): debug."""
    logger.setLevel(_LEVELS.get(verbosity, logging.DEBUG if verbosity > 1 else logging.ERROR))
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("gcompile: %(message)s"))
        logger.addHandler(handler)


def quiet() -> bool:
    """Whether -q asked for errors only: commands then print nothing on success."""
    return logger.getEffectiveLevel() > logging.WARNING


class Timings(dict):
    """Phase name -> seconds, in the order phases first started. Phases may nest (grad runs
    inside trace) and are then shown inside their parent; a phase running inside itself
    (gc.hvp calls gc.grad within gc.grad) is counted once. `clock` gives seconds (a test's fake
    clock makes the timings exact)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self._open: list[str] = []
        self.parent: dict[str, str] = {}
        self._clock = clock

    @contextlib.contextmanager
    def phase(self, name: str):
        if name in self._open:
            yield
            return
        if self._open:
            self.parent.setdefault(name, self._open[-1])
        self.setdefault(name, 0.0)
        self._open.append(name)
        start = self._clock()
        try:
            yield
        finally:
            self._open.remove(name)
            self[name] += self._clock() - start

    def total(self) -> float:
        """Seconds in the outermost phases."""
        return sum(seconds for name, seconds in self.items() if name not in self.parent)

    def format(self) -> str:
        """'trace 5.1 ms (grad 2.0 ms), passes 0.4 ms, lower 1.2 ms'."""
        def one(name: str) -> str:
            inner = [one(child) for child in self if self.parent.get(child) == name]
            return f"{name} {1e3 * self[name]:.1f} ms" + (f" ({', '.join(inner)})" if inner else "")
        return ", ".join(one(name) for name in self if name not in self.parent)


_current: contextvars.ContextVar[Timings | None] = contextvars.ContextVar("gcompile_timings", default=None)


@contextlib.contextmanager
def timings(clock: Callable[[], float] = time.perf_counter):
    """Collect the phase() timings of everything run inside the block (see Timings)."""
    collected = Timings(clock)
    token = _current.set(collected)
    try:
        yield collected
    finally:
        _current.reset(token)


@contextlib.contextmanager
def phase(name: str, into: Timings | None = None):
    """Time the block as `name` into `into`, else the innermost timings() collector, and show it on
    the active progress display; free when there is neither."""
    collected, bar = into if into is not None else _current.get(), _active.get()
    with collected.phase(name) if collected is not None else contextlib.nullcontext(), \
            bar.phase(name) if bar is not None else contextlib.nullcontext():
        yield


def _interactive(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "").lower() not in ("dumb", "unknown")


class Progress:
    """A one-line live progress display on stderr: `build ━━━━━━╸━━━━ 3/12 trace › grad input_grad 5.2s`.

    The bar counts units of work (`total`, which may grow with add_total and starts unknown when
    None); `step(label)` names the item now running, and the phases run inside it (logs.phase)
    follow its label; with `count_phases`, each outermost phase that ends is one unit done. Draws
    only on an interactive terminal when the logger is not quieted (-q); otherwise every method
    does nothing, so callers need no checks of their own. The elapsed seconds shown come from
    `clock` (a test's fake clock shows what it sets).
    """

    def __init__(self, total: int | None, desc: str, stream=None, count_phases: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.desc, self.done, self.label = total, desc, 0, ""
        self.count_phases = count_phases
        self.clock = clock
        self._phases: list[str] = []
        self._rich: Any = None
        self._task: Any = None
        self.enabled = _interactive(self.stream) and logger.getEffectiveLevel() <= logging.WARNING

    def _fields(self) -> dict:
        return {"total": self.total, "completed": self.done, "phase": " › ".join(self._phases), "label": self.label}

    def _draw(self) -> None:
        if not self.enabled:
            return
        if self._rich is None:
            self._rich, self._task = _live_display(self.stream, self.desc, self.total, self.clock)
            self._rich.update(self._task, **self._fields())
            self._rich.start()   # draws now, then redraws 4 times a second from its own thread
        else:
            self._rich.update(self._task, **self._fields())

    def add_total(self, units: int) -> None:
        """More units of work to do (the total starts unknown when given as None)."""
        self.total = (self.total or 0) + units
        self._draw()

    def step(self, label: str = "") -> None:
        """Show that the item `label` is now running (the bar counts the units finished)."""
        self.label = label
        self._draw()

    def advance(self, units: int = 1) -> None:
        """Mark units of work finished."""
        self.done += units
        self._draw()

    @contextlib.contextmanager
    def phase(self, name: str):
        """Show phase `name` of the current item while the block runs (a phase inside itself shows once)."""
        if name in self._phases:
            yield
            return
        self._phases.append(name)
        self._draw()
        try:
            yield
        finally:
            self._phases.remove(name)
            if self.count_phases and not self._phases:
                self.done += 1
            self._draw()

    def echo(self, text: str) -> None:
        """Print a line to stdout without tearing the display (on a terminal it appears above it)."""
        print(text, flush=True)

    def clear(self) -> None:
        """Erase the display (it draws again on the next step)."""
        if self._rich is not None:
            self._rich.stop()
            self._rich = None


def _live_display(stream, desc: str, total: int | None, clock: Callable[[], float]):
    """A rich progress display on `stream`: description, bar, done/total, phase, item, elapsed seconds.
    The bar and the item's name share the width that is left; a name that does not fit ends in an
    ellipsis, and the line never wraps.
    Writes to stderr (the logger's lines) appear above it, and so do writes to stdout where stdout
    is a terminal too (elsewhere stdout stays untouched: it may be a file being written)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, TextColumn
    from rich.progress import Progress as RichProgress
    from rich.table import Column
    from rich.text import Text

    class Seconds(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.elapsed or 0.0:.1f}s", style="progress.elapsed")

    stdout_isatty = getattr(sys.stdout, "isatty", None)
    display = RichProgress(
        TextColumn("[bold]{task.description}"), BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=8)),
        MofNCompleteColumn(), TextColumn("{task.fields[phase]}", table_column=Column(no_wrap=True)),
        TextColumn("{task.fields[label]}", table_column=Column(ratio=2, no_wrap=True, overflow="ellipsis")),
        Seconds(), console=Console(file=stream, highlight=False), transient=True, expand=True,
        refresh_per_second=4, redirect_stdout=bool(stdout_isatty and stdout_isatty()), redirect_stderr=True,
        get_time=clock)
    return display, display.add_task(desc, total=total, phase="", label="")


_active: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("gcompile_progress", default=None)


@contextlib.contextmanager
def progress(total: int | None, desc: str, stream=None, count_phases: bool = False,
             clock: Callable[[], float] = time.monotonic):
    """A Progress display that logs.phase() reports to, erased when the block ends, however it ends.
    Inside a block that already shows one, the inner call joins it (one display per command)."""
    outer = _active.get()
    if outer is not None:
        if total:
            outer.add_total(total)
        yield outer
        return
    bar = Progress(total, desc, stream, count_phases, clock)
    token = _active.set(bar)
    try:
        yield bar
    finally:
        _active.reset(token)
        bar.clear()
