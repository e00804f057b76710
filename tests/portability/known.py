"""Failures that remain, each with its cause: the tests expect exactly these (the failure's message
must contain `match`) and fail when one no longer happens, so this list and docs/targets.md
stay true. Fixing a cause means deleting its entry here and its line in docs/targets.md.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    subject: str          # a runtime (test_portability) or a construct (test_constructs)
    cases: frozenset[str]
    match: str            # in the failure's message
    why: str


RUNTIME_FAILURES: list[Known] = []
CONSTRUCT_FAILURES: list[Known] = []


def expected(table: list[Known], subject: str, case: str) -> Known | None:
    """The entry saying how `case` fails for `subject`, if one does."""
    return next((k for k in table if k.subject == subject and case in k.cases), None)
