"""Time gcompile's CPU sessions as they are against those of another commit's
gcompile/runtime/adaptive.py, in one process, in tools/bench's block scheme beside PyTorch and
JAX: how a change to the session strategy (thread counts, spinning, when to compare) is judged.
A bench run before and one after differ by more than such changes between minutes; alternating in
one process, both variants meet the same drift and the same neighbours' threads.

    python tools/session_ab.py W4 W8 --against HEAD~1
    python tools/session_ab.py W1 W7 --against HEAD~1 --contended 1 --runs 40

The other commit's sessions are made with its AdaptiveSession and workers that never spin (what
every commit before the spinning variant did); the model is the same.
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
    """gc.compile(fn) whose CPU session is `module`'s AdaptiveSession, every worker sleeping."""
    options, session_class = providers.session_options, providers.AdaptiveSession
    providers.session_options = lambda nodes=None, threads=None, spin=False: options(nodes, threads)
    providers.AdaptiveSession = module.AdaptiveSession
    try:
        return gc.compile(fn, *args, provider="cpu")
    finally:
        providers.session_options, providers.AdaptiveSession = options, session_class


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="+", help="tools/bench workload names")
    parser.add_argument("--against", required=True, help="the commit whose sessions to time against")
    parser.add_argument("--runs", type=int, default=60, help="timed calls of each system")
    parser.add_argument("--contended", type=int, default=0, metavar="N", help="busy neighbour processes")
    args = parser.parse_args(argv)
    other = adaptive_at(args.against)
    with bench.BusyNeighbour(args.contended):
        torch_w, jax_w = bench.torch_workloads(), bench.jax_workloads()
        for name in args.workloads:
            fn, _, fargs = bench.WORKLOADS[name][1]()
            now, then = gc.compile(fn, *fargs, provider="cpu"), compile_with(other, fn, fargs)
            fns = {"now": lambda f=now, a=fargs: f(*a), args.against: lambda f=then, a=fargs: f(*a)}
            for system, workloads in (("torch", torch_w), ("jax", jax_w)):
                if name in workloads:
                    fns[system] = workloads[name](fargs)
            ms = bench._median_ms(fns, args.runs, 5)
            print(f"{name}: now {ms['now']:.2f} ms, {args.against} {ms[args.against]:.2f} ms, "
                  f"now / {args.against} {ms['now'] / ms[args.against]:.3f}  |  "
                  + "  ".join(f"{k} {ms[k]:.2f} ms" for k in ("torch", "jax") if k in ms), flush=True)


if __name__ == "__main__":
    main()
