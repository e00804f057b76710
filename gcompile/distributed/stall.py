"""Telling a stuck worker from a slow one within seconds, from the progress of a step's tasks.

A step is phases that run one after another on every worker (worker.PHASES); each phase of a
worker can start once the phase before it has finished on every worker. The driver notes when
each task finishes. A worker counts as stuck in the first phase that has not finished everywhere
when that phase has been running longer than STALL_FACTOR times the time it took the workers
that did finish it (the shards are equal, so peers take about as long), or, where none has yet,
the longest it took in the last step; and never before `stall` seconds, which absorbs a busy
machine's scheduling. Where neither reference exists (the first step on a single worker, or
every worker stuck in the first step), only the step's `timeout` bounds it. A dead worker needs
none of this: its tasks fail at once.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

STALL_FACTOR = 10.0


def stalled(phases: Sequence[str], workers: int, start: float, done: Mapping[tuple[str, int], float], now: float,
            stall: float, timeout: float, previous: Mapping[str, float]) -> tuple[str, set[int], float, float] | None:
    """(phase, stuck workers, seconds it has run, the limit it passed) for a step submitted at
    `start` whose task (phase, worker) finished at done[phase, worker], seen at `now`; None while
    every worker is within its limit. `previous`: the seconds each phase took in the last step."""
    begun = start
    for phase in phases:
        finished = [done[phase, i] for i in range(workers) if (phase, i) in done]
        if len(finished) == workers:
            begun = max(finished)
            continue
        took = [t - begun for t in finished]
        reference = max(took) if took else previous.get(phase)
        limit = min(timeout - (begun - start), max(stall, STALL_FACTOR * reference)) if reference is not None \
            else timeout - (begun - start)
        if now - begun <= limit:
            return None
        return phase, {i for i in range(workers) if (phase, i) not in done}, now - begun, limit
    return None


def durations(phases: Sequence[str], workers: int, start: float, done: Mapping[tuple[str, int], float]
              ) -> dict[str, float]:
    """The seconds each phase of a finished step took (its slowest worker, from when it could start)."""
    out, begun = {}, start
    for phase in phases:
        end = max(done[phase, i] for i in range(workers))
        out[phase], begun = max(done[phase, i] - begun for i in range(workers)), end
    return out
