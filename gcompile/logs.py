"""The gcompile logger, phase timings and a terminal progress bar.

One logger ("gcompile") whose level the CLI's -v/-q set; the same level decides whether
progress bars draw, and they only ever draw on a terminal, so piped output and CI logs
stay clean. Phase timings are collected through a context variable so deep code (gc.grad
inside a trace) can report its time without being passed a collector.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import time

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
    """-1 (-q): errors only and no progress bars; 0: warnings; 1 (-v): phase timings; 2+: debug."""
    logger.setLevel(_LEVELS.get(verbosity, logging.DEBUG if verbosity > 1 else logging.ERROR))
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("gcompile: %(message)s"))
        logger.addHandler(handler)


class Timings(dict):
    """Phase name -> seconds, in the order phases first started. Phases may nest (grad runs
    inside trace) and are then shown inside their parent; a phase running inside itself
    (gc.hvp calls gc.grad within gc.grad) is counted once."""

    def __init__(self) -> None:
        super().__init__()
        self._open: list[str] = []
        self.parent: dict[str, str] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        if name in self._open:
            yield
            return
        if self._open:
            self.parent.setdefault(name, self._open[-1])
        self.setdefault(name, 0.0)
        self._open.append(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self._open.remove(name)
            self[name] += time.perf_counter() - start

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
def timings():
    """Collect the phase() timings of everything run inside the block."""
    collected = Timings()
    token = _current.set(collected)
    try:
        yield collected
    finally:
        _current.reset(token)


def phase(name: str):
    """Time the block as `name` into the innermost timings() collector; free when there is none."""
    collected = _current.get()
    return collected.phase(name) if collected is not None else contextlib.nullcontext()


class Progress:
    """A one-line progress bar on stderr: `desc [#####     ] 3/6 label 1.2s`.

    Draws only when stderr is a terminal and the logger is not quieted (-q); otherwise
    every method does nothing, so callers need no checks of their own.
    """

    WIDTH = 24

    def __init__(self, total: int, desc: str, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.desc, self.done, self.label = total, desc, 0, ""
        self.start = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) and logger.getEffectiveLevel() <= logging.WARNING

    def _draw(self) -> None:
        filled = self.WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + " " * (self.WIDTH - filled)
        line = f"{self.desc} [{bar}] {self.done}/{self.total} {self.label} {time.perf_counter() - self.start:.1f}s"
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()

    def step(self, label: str = "") -> None:
        """Show that the item `label` is now running (the bar counts the items finished)."""
        if self.enabled:
            self.label = label
            self._draw()

    def advance(self) -> None:
        """Mark the current item finished."""
        self.done += 1
        if self.enabled:
            self._draw()

    def echo(self, text: str) -> None:
        """Print a line to stdout without tearing the bar: clear it, print, redraw."""
        self.clear()
        print(text, flush=True)
        if self.enabled:
            self._draw()

    def clear(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


@contextlib.contextmanager
def progress(total: int, desc: str, stream=None):
    """A Progress bar that is cleared when the block ends, however it ends."""
    bar = Progress(total, desc, stream)
    try:
        yield bar
    finally:
        bar.clear()
