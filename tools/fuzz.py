"""Fuzz the compiler: random programs (tests/fuzz/programs.py) through every check of
tests/fuzz/checks.py (forward on onnxruntime against NumPy, outputs + gradient + double
gradient on onnxruntime against the float64 reference evaluator, numeric gradient checks), with
Graph.lint() after every graph pass (tests/fuzz/checks.py switches passes.base.LINT on).

    python tools/fuzz.py --n 5000 [--seed S] [--out DIR] [--jobs J] [--min-ops 5] [--max-ops 40]

Program i is generated from seed S + i, so a failure is reproduced by its seed alone. Each
failure is shrunk (outputs dropped, steps bypassed, the program cut at an earlier value, as long
as the same check still fails) and written to DIR as a standalone reproducer .py file that
raises the failure while the bug is there. Prints programs run, failures, skipped checks, the
gcompile ops exercised, and how many programs reached each strategy of the targets (lowering/
targets) and each graph-pass rewrite (tests/fuzz/coverage.py), naming those no program reached;
exits 1 when anything failed.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gcompile.ir.registry import REGISTRY
from tests.fuzz.checks import CHECKS, run_program
from tests.fuzz.coverage import all_rewrites, all_strategies
from tests.fuzz.programs import Program, RandomDraw, generate


# -- shrinking ------------------------------------------------------------------------------------------
def _smaller(p: Program):
    """Candidate programs, each a little simpler than p."""
    if len(p.outputs) > 1:
        for o in p.outputs:
            yield Program(p.inputs, p.steps, [o]).pruned()
    for s in p.steps:
        if s.name not in p.outputs:
            yield Program(p.inputs, p.steps, [s.name]).pruned()
    labels = {i.name for i in p.inputs if i.kind == "labels"}
    for s in p.steps:
        for arg in dict.fromkeys(s.args):
            if p.shape_of(arg) == s.shape and arg not in labels:
                yield p.bypassed(s.name, arg)


def _kind(failure) -> str:
    return failure.message.split(":", 1)[0]      # the exception's type


def _fails_alike(p: Program, failure, seed: int):
    """p's failure of the same check with the same exception type, or None."""
    try:
        result = run_program(p, seed, checks=(failure.check,))
    except Exception:  # noqa: BLE001 - a candidate the generator's numpy side rejects is just not smaller
        return None
    same = [f for f in result.failures if _kind(f) == _kind(failure)]
    return same[0] if same else None


def shrink(p: Program, failure, seed: int, budget: int = 300):
    """The smallest variant of p found (within `budget` runs) on which the same check fails
    with the same exception type."""
    runs, improved = 0, True
    while improved and runs < budget:
        improved = False
        for candidate in _smaller(p):
            if runs >= budget:
                break
            if len(candidate.steps) >= len(p.steps) and len(candidate.outputs) >= len(p.outputs):
                continue
            runs += 1
            found = _fails_alike(candidate, failure, seed)
            if found is not None:
                p, failure, improved = candidate, found, True
                break
    return p, failure


# -- reproducer files ----------------------------------------------------------------------------------------
def _array_source(a) -> str:
    dtype = "np.float32" if a.dtype.kind == "f" else "np.int64"
    return f"np.array({a.ravel().tolist()!r}, dtype={dtype}).reshape({a.shape})"


def reproducer(p: Program, failure, seed: int, out_dir: str) -> str:
    rel = os.path.relpath(ROOT, os.path.abspath(out_dir))
    message = "\n".join("    " + line for line in failure.message.strip().splitlines()[:12])
    specs = ", ".join(f"gc.spec({i.spec_shape()!r}, {'np.int64' if i.kind == 'labels' else 'np.float32'})"
                      for i in p.inputs)
    inputs = ",\n    ".join(_array_source(a) for a in failure.arrays)
    return f'''"""Fuzz reproducer: check {failure.check!r} fails (tools/fuzz.py, program seed {seed}).

{message}

Raises that failure while the bug is there: python {{this file}}
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), {rel!r}))

import numpy as np  # noqa: E402

import gcompile as gc  # noqa: E402,F401
import gcompile.functions as F  # noqa: E402,F401
from tests.fuzz import npsem as N  # noqa: E402,F401
from tests.fuzz.checks import run_check  # noqa: E402


{p.source("gc")}

{p.source("np")}

SPECS = [{specs}]
INPUTS = [
    {inputs},
]

if __name__ == "__main__":
    run_check({failure.check!r}, program, reference, SPECS, INPUTS)
    print("passed: the bug is fixed")
'''


# -- the run -------------------------------------------------------------------------------------------------
def _one(job):
    seed, min_ops, max_ops = job
    p = None
    try:
        p = generate(RandomDraw(seed), min_ops, max_ops)
        result = run_program(p, seed)
    except Exception as err:  # noqa: BLE001 - a crash of the fuzzer itself is reported, not fatal
        return seed, p, None, f"{type(err).__name__}: {err}"
    return seed, p, result, None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="programs to run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first program")
    parser.add_argument("--out", default="fuzz-failures", help="folder for reproducer files")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--min-ops", type=int, default=5)
    parser.add_argument("--max-ops", type=int, default=40)
    args = parser.parse_args(argv)

    start = time.time()
    jobs = [(args.seed + i, args.min_ops, args.max_ops) for i in range(args.n)]
    failures, crashes, skipped = [], [], collections.Counter()
    ops_seen, checks_run, labels = set(), collections.Counter(), collections.Counter()
    strategies, rewrites = collections.Counter(), collections.Counter()      # programs reaching each
    with multiprocessing.Pool(args.jobs) as pool:
        for done, (seed, p, result, crash) in enumerate(pool.imap_unordered(_one, jobs, chunksize=4), 1):
            if crash:
                crashes.append((seed, crash))
                continue
            ops_seen |= result.ops
            strategies.update(key for key in result.lowerings if key[1] != "plain")
            rewrites.update(result.rewrites.keys())
            labels.update(p.ops())
            skipped.update(result.skipped)
            checks_run.update(c for c in CHECKS if c not in result.skipped)
            if result.failures:      # one reproducer per program: its first failing check
                failures.append((seed, p, result.failures[0], [f.check for f in result.failures[1:]]))
            if done % 100 == 0:
                print(f"  {done}/{args.n} programs, {len(failures)} failures, {time.time() - start:.0f} s", flush=True)

    signatures = collections.Counter()
    if failures:
        os.makedirs(args.out, exist_ok=True)
    for seed, p, failure, also in sorted(failures, key=lambda f: f[0]):
        small, small_failure = shrink(p, failure, seed)
        path = os.path.join(args.out, f"fuzz_{seed}_{failure.check}.py")
        with open(path, "w") as f:
            f.write(reproducer(small, small_failure, seed, args.out))
        signature = f"{failure.check}: {' '.join(sorted(small.ops()))}"
        signatures[signature] += 1
        print(f"FAIL seed {seed} {failure.check} ({len(p.steps)} -> {len(small.steps)} steps; also failing: "
              f"{', '.join(also) or '-'}): {path}\n"
              f"    {small_failure.message.splitlines()[0][:300]}")

    differentiable = {n for n, op in REGISTRY.items() if op.differentiable}
    print(f"\n{args.n} programs in {time.time() - start:.0f} s; checks run: {dict(checks_run)}; "
          f"skipped (no point away from kinks/jumps, or no float64 kernel): {dict(skipped)}")
    print(f"failures: {len(failures)}" + "".join(f"\n  {n} x {s}" for s, n in signatures.most_common()))
    for seed, crash in crashes:
        print(f"fuzzer crash on seed {seed}: {crash}")
    print(f"generated functions (programs using each): "
          f"{', '.join(f'{name} {n}' for name, n in sorted(labels.items()))}")
    print(f"gcompile ops exercised ({len(ops_seen)}): {', '.join(sorted(ops_seen))}")
    missing = sorted(differentiable - ops_seen - {"input"})
    print(f"differentiable ops never exercised ({len(missing)}): {', '.join(missing) or '-'}")
    print(coverage_report(strategies, rewrites))
    return 1 if failures or crashes else 0


def coverage_report(strategies: collections.Counter, rewrites: collections.Counter) -> str:
    """How many programs reached each strategy and each rewrite, and which none reached."""
    unreached = [f"{op} ({name})" for op, name in all_strategies() if (op, name) not in strategies]
    lines = [f"strategies reached (programs): "
             f"{', '.join(f'{op} ({name}) {n}' for (op, name), n in sorted(strategies.items())) or '-'}",
             f"strategies never reached ({len(unreached)}): {', '.join(unreached) or '-'}",
             f"graph-pass rewrites reached (programs): "
             f"{', '.join(f'{name} {n}' for name, n in sorted(rewrites.items())) or '-'}"]
    unreached = [name for name in all_rewrites() if name not in rewrites]
    lines.append(f"graph-pass rewrites never reached ({len(unreached)}): {', '.join(unreached) or '-'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
