"""Time gcompile's CPU sessions as they are against those of another commit's
gcompile/runtime/adaptive.py, in one process, in tools/bench's block scheme beside PyTorch and
JAX: how a change to the session strategy (thread counts, spinning, when to compare) is judged.
A bench run before and one after differ by more than such changes between minutes; alternating in
one process, both variants meet the same drift and the same neighbours' threads.

    python tools/session_ab.py W4 W8 --against HEAD~1
    python tools/session_ab.py W1 W7 --against HEAD~1 --contended 1 --runs 40
    python tools/session_ab.py W4 W5 --against HEAD~1 --contended 1 --passes 6   # a neighbour that comes and goes

With --passes N and --contended, the passes alternate quiet and busy, and every session lives
through all of them, as in the benchmark: what a session chose under one load meets the other.
The model is the same for both; only the session class differs.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench  # noqa: E402

import gcompile as gc  # noqa: E402
from gcompile.runtime import providers  # noqa: E402


def adaptive_at(commit: str):
    """The module gcompile/runtime/adaptive.py as it was at `commit`."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = subprocess.run(["git", "show", f"{commit}:gcompile/runtime/adaptive.py"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("adaptive_at_" + commit.replace("~", "_"), f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return module


def compile_with(module, fn, args):
    """gc.compile(fn) whose CPU session is `module`'s AdaptiveSession."""
    session_class = providers.AdaptiveSession
    providers.AdaptiveSession = module.AdaptiveSession
    try:
        return gc.compile(fn, *args, provider="cpu")
    finally:
        providers.AdaptiveSession = session_class


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="+", help="tools/bench workload names")
    parser.add_argument("--against", required=True, help="the commit whose sessions to time against")
    parser.add_argument("--runs", type=int, default=60, help="timed calls of each system per pass")
    parser.add_argument("--contended", type=int, default=0, metavar="N", help="busy neighbour processes")
    parser.add_argument("--passes", type=int, default=1,
                        help="passes over each workload; with --contended and more than one, quiet and busy in turn")
    parser.add_argument("--reference-path", metavar="DIR", help="a site-packages folder holding torch and jax")
    args = parser.parse_args(argv)
    if args.reference_path:
        sys.path.append(args.reference_path)
    other = adaptive_at(args.against)
    torch_w, jax_w = bench.torch_workloads(), bench.jax_workloads()
    for name in args.workloads:
        fn, _, fargs = bench.WORKLOADS[name][1]()
        now, then = gc.compile(fn, *fargs, provider="cpu"), compile_with(other, fn, fargs)
        fns = {"now": lambda f=now, a=fargs: f(*a), args.against: lambda f=then, a=fargs: f(*a)}
        for system, workloads in (("torch", torch_w), ("jax", jax_w)):
            if name in workloads:
                fns[system] = workloads[name](fargs)
        for p in range(args.passes):
            busy = args.contended if args.passes == 1 or p % 2 else 0
            with bench.BusyNeighbour(busy):
                ms = bench.median_ms(fns, args.runs, 5)
            print(f"{name} {'busy ' if busy else 'quiet'}: now {ms['now']:.2f} ms, {args.against} "
                  f"{ms[args.against]:.2f} ms, now / {args.against} {ms['now'] / ms[args.against]:.3f}  |  "
                  + "  ".join(f"{k} {ms[k]:.2f} ms" for k in ("torch", "jax") if k in ms), flush=True)


if __name__ == "__main__":
    main()
