"""How the benchmark times: every system of a workload in one process, alternating in blocks, quiet
and beside a busy neighbour process; gcompile's default session (ort-cpu target, the thread count it
picks by timing itself) beside pinned threads (GCOMPILE_THREADS) and other targets. Nothing here
knows a workload: they come from .workloads."""
from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
import sys
import time

import numpy as np

from .workloads import REGISTRY, other_shape

# Alternating systems in one process is only fair if none of them keeps its worker threads
# spinning into the next one's runs. onnxruntime's (and JAX's) spin only briefly after a run, and
# alternate() pauses before each block; PyTorch's OpenMP threads are told not to spin at all.
# (Set before torch is imported.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# --cpu-time: every system on one thread, timed by the process's CPU time (set by use_cpu_time()
# before torch or JAX is imported).
CPU_TIME = False


def use_cpu_time() -> None:
    global CPU_TIME
    CPU_TIME = True
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


# -- the clock ------------------------------------------------------------------------------------------------
def alternate(fns: dict, runs: int, block: int = 5) -> dict:
    """Seconds per call of each system, `runs` timed calls each after warm-up. Systems alternate
    in blocks of `block` calls, each block after a pause and one untimed call: drift hits every
    column alike, and no system is timed while another one's thread pool still spins. With
    --cpu-time the clock is the process's CPU time."""
    clock = time.process_time if CPU_TIME else time.perf_counter
    times: dict = {k: [] for k in fns}
    for f in fns.values():
        for _ in range(3):
            f()
    while any(len(t) < runs for t in times.values()):
        for k, f in fns.items():
            time.sleep(0.05)   # lets the previous system's worker threads stop spinning and park
            f()
            for _ in range(min(block, runs - len(times[k]))):
                t0 = clock()
                f()
                times[k].append(clock() - t0)
    return times


def median_ms(fns: dict, runs: int, block: int = 5) -> dict:
    """Median milliseconds per call of each system, timed by alternate()."""
    return {k: 1e3 * float(np.median(v)) for k, v in alternate(fns, runs, block).items()}


class BusyNeighbour:
    """`count` processes that each keep one core busy (a Python loop), as another user's job
    would: started on entry, ended on exit (only the processes started here)."""

    def __init__(self, count: int):
        self.count, self.procs = count, []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        if self.procs:
            time.sleep(1.0)   # let them reach the scheduler's steady state
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def pinned_threads(threads: int | None):
    """GCOMPILE_THREADS set to `threads` while the block runs (sessions made in it use that many)."""
    saved = os.environ.get("GCOMPILE_THREADS")
    if threads:
        os.environ["GCOMPILE_THREADS"] = str(threads)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("GCOMPILE_THREADS", None)
        else:
            os.environ["GCOMPILE_THREADS"] = saved


# -- the systems ---------------------------------------------------------------------------------------------
def torch_workloads() -> dict:
    """{key: args -> call} of the workloads with a PyTorch twin, when PyTorch is installed."""
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(1 if CPU_TIME else os.cpu_count() or 1)
    return {k: w.torch for k, w in REGISTRY.items() if w.torch is not None}


def jax_workloads() -> dict:
    """{key: args -> call} of the workloads with a JAX twin, when JAX is installed."""
    try:
        import jax  # noqa: F401
    except ImportError:
        return {}
    return {k: w.jax for k, w in REGISTRY.items() if w.jax is not None}


def single_thread(cf):
    """A call of cf's model on a one-thread session with gcompile's options (for --cpu-time)."""
    import onnxruntime as ort

    from gcompile.runtime.providers import DISABLED_OPTIMIZERS, session_options
    session = ort.InferenceSession(cf.model.SerializeToString(), session_options(len(cf.model.graph.node), 1),
                                   providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS)
    names = [o.name for o in cf.model.graph.output]
    return lambda *args: session.run(names, dict(zip(cf.input_names, args)))


def gcompile_systems(fn, args, targets=("ort-cpu",), threads: int | None = None) -> tuple[dict, dict]:
    """({system: call}, {system: build ms}) of gcompile's versions of fn: "gcompile" is gc.compile's
    default on the CPU (target ort-cpu, the session's adaptive thread count); "gcompile:<target>"
    each other target; "gcompile:threads=<n>" the default target on n pinned threads."""
    import gcompile as gc
    variants = [("gcompile", None, None)]
    variants += [(f"gcompile:{t}", t, None) for t in targets if t != "ort-cpu"]
    if threads and not CPU_TIME:
        variants.append((f"gcompile:threads={threads}", None, threads))
    calls, build = {}, {}
    for name, target, pinned in variants:
        with pinned_threads(pinned):
            t0 = time.perf_counter()
            cf = gc.compile(fn, *args, provider="cpu", target=target)
            cf(*args)
            build[name] = 1e3 * (time.perf_counter() - t0)
        call = single_thread(cf) if CPU_TIME else cf
        calls[name] = lambda call=call, args=args: call(*args)
    return calls, build


def node_counts(fn, args):
    from gcompile.frontend.trace import trace
    from gcompile.passes import optimize
    graph = trace(fn, args).graph
    before = graph.count_by_order()
    optimize(graph, 2)
    return before, graph.count_by_order()


# -- a workload's row ------------------------------------------------------------------------------------------
def time_workload(key: str, runs: int, repeat: int, busy: int, targets=("ort-cpu",), threads: int | None = None,
                  references: tuple[dict, dict] = ({}, {}), other: bool = False, log=print) -> dict:
    """One workload through every system: built once, then `repeat` passes, each timed quiet and,
    with busy > 0, again beside `busy` neighbour processes. The row holds each pass's medians by
    condition, the build times and node counts."""
    w = REGISTRY[key]
    with other_shape(key) if other else contextlib.nullcontext():
        fn, _, args = w.setup()
        fns, build = gcompile_systems(fn, args, targets, threads)
        torch_w, jax_w = references
        if key in torch_w:
            fns["torch"] = torch_w[key](args)
        if key in jax_w:
            t0 = time.perf_counter()
            fns["jax"] = jax_w[key](args)
            fns["jax"]()
            build["jax"] = 1e3 * (time.perf_counter() - t0)
        conditions = ["quiet"] + (["busy"] if busy else [])
        passes: dict = {c: [] for c in conditions}
        for _ in range(repeat):
            for condition in conditions:
                with BusyNeighbour(busy if condition == "busy" else 0):
                    passes[condition].append(median_ms(fns, runs))
        before, after = node_counts(fn, args)
    row = {"label": w.label, "passes": passes, "build_ms": build, "nodes_before": before, "nodes_after": after}
    name = f"{key}'" if other else key
    for condition, ms in passes.items():
        last = ms[-1]
        line = f"{name:5s}{w.label:23s}{condition:6s}" + "  ".join(f"{k} {v:.1f}" for k, v in last.items()) + " ms"
        for ref in ("torch", "jax"):
            if ref in last:
                line += f"  x{ref} {last['gcompile'] / last[ref]:.2f}"
        log(line)
    return row


def bwd_fwd_ratio(runs: int) -> dict:
    """W1's step over its forward (target <= 2.3), the two timed alternating: rows minutes apart
    drift more than the ratio's margin."""
    import gcompile as gc
    calls = {}
    for name, key in (("step", "W1"), ("forward", "W1f")):
        fn, _, args = REGISTRY[key].setup()
        cf = gc.compile(fn, *args, provider="cpu")
        calls[name] = lambda cf=cf, args=args: cf(*args)
    ms = median_ms(calls, runs)
    return {"ms": ms, "ratio": ms["step"] / ms["forward"]}


# -- where and when -------------------------------------------------------------------------------------------
def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def machine() -> dict:
    """The machine, the software and the moment a run records beside its figures."""
    cpu = platform.processor()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "commit": commit,
            "versions": {m: _version(m) for m in ("gcompile", "numpy", "onnxruntime", "torch", "jax")},
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "cpu_time": CPU_TIME}
