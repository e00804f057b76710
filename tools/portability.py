"""Print the portability matrix: every artifact of tests/portability/corpus.py and examples/ (built
for the portable target, as `gcompile build` builds it) on every runtime tests/portability runs,
as a Markdown table, then each failure's message.

    python tools/portability.py [--runtime NAME ...] [--case NAME ...]

A runtime that is not installed is listed with what is missing. The same comparison as
tests/portability/test_portability.py; docs/targets.md shows this table with each failure's cause.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.portability.harness import build_cases, problems
from tests.portability.runtimes import RUNTIMES


def main(runtimes: list[str] | None = None, only: list[str] | None = None) -> int:
    cases = [c for c in build_cases() if not only or c.name in only]
    chosen = [r for r in RUNTIMES if not runtimes or r.name in runtimes]
    cells: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    for runtime in chosen:
        if (reason := runtime.missing()) is not None:
            notes.append(f"{runtime.name}: not run: {reason}")
            continue
        with tempfile.TemporaryDirectory() as folder:
            try:
                outcomes = runtime.run_all(cases, folder)
            except Exception as err:   # the runner itself failed: every case of this runtime fails with it
                outcomes = {case.name: f"{type(err).__name__}: {err}" for case in cases}
        for case in cases:
            outcome = outcomes.get(case.name, "no result")
            found = [outcome] if isinstance(outcome, str) else problems(case, outcome)
            cells[case.name, runtime.name] = "FAIL" if found else "pass"
            notes += [f"{case.name} on {runtime.name}: {line}" for line in found]
    print("| model | " + " | ".join(r.name for r in chosen) + " |")
    print("|---" * (len(chosen) + 1) + "|")
    for case in cases:
        print(f"| {case.name} | " + " | ".join(cells.get((case.name, r.name), "-") for r in chosen) + " |")
    print()
    for note in notes:
        print(note)
    return 1 if any(cell == "FAIL" for cell in cells.values()) else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", action="append", help="run only this runtime (repeatable)")
    parser.add_argument("--case", action="append", help="run only this artifact (repeatable)")
    args = parser.parse_args()
    sys.exit(main(args.runtime, args.case))
