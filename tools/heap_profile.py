"""Where a model's memory goes in ONNX Runtime: the blocks its run holds at its peak, by the node
that allocated them, for a benchmark workload (by name, as tools/bench builds it) or any .onnx
file. Linux with glibc and a C compiler (`cc`) only.

    python tools/heap_profile.py W7
    python tools/heap_profile.py step.onnx --feeds inputs.npz
    python tools/heap_profile.py step.onnx --feeds inputs.npz --reuse    # with ONNX Runtime's static reuse

The model runs as gcompile runs a graph of large planned peak (runtime/providers.py): ONNX
Runtime's own optimized graph, in the file's order, without a memory pattern or static buffer
reuse (`--reuse` turns the reuse on, to see what it holds), but with its arena off, so that each
value is a block of its own from the C library. A child process runs it with a malloc wrapper
preloaded (tools/heap_counter.c, compiled into a scratch folder), which counts the live bytes and
logs every block of 64 KiB or more with its time; ONNX Runtime's node profile of the same run
gives each node's time span, so each block is charged to the node running when it was allocated.

The report: the peak of live bytes over one run (above what was live before it), the node
running at that peak, and the blocks live there, largest first, each with the node that
allocated it and where, in the file's order, that node's outputs are last read. A block whose
node's outputs were all read before the peak holds a later value: an op that wrote over its
input's buffer (in place), or, with `--reuse`, a value given that buffer by ONNX Runtime's
static reuse, which keeps it from the earlier value's last reader until then. Their total is
printed apart ("past their last reader").
"""
from __future__ import annotations

import argparse
import bisect
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def build_counter(folder: str) -> str:
    """tools/heap_counter.c compiled into `folder`; the path of the shared library."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("heap_profile needs a C compiler (cc or gcc) to build its malloc wrapper")
    library = os.path.join(folder, "heap_counter.so")
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", library, os.path.join(HERE, "heap_counter.c"), "-ldl"],
                   check=True)
    return library


def child(folder: str, reuse: bool) -> None:
    """In the process with the wrapper preloaded: two runs of folder/model.onnx on folder/feeds.npz,
    the second recorded; its events, ONNX Runtime's profile and the figures written to `folder`."""
    import onnxruntime as ort

    from gcompile.runtime.providers import quiet_onnxruntime, session_options
    counter = ctypes.CDLL(None)
    for name in ("heap_counter_live", "heap_counter_peak"):
        getattr(counter, name).restype = ctypes.c_longlong
    with np.load(os.path.join(folder, "feeds.npz"), allow_pickle=False) as saved:
        feeds = {k: saved[k] for k in saved.files}
    options = session_options(in_order=True)     # gcompile's in-order session, with no arena at all
    options.enable_mem_reuse = reuse
    options.enable_cpu_mem_arena = False
    with quiet_onnxruntime():                    # (ONNX Runtime warns that the entry is overwritten)
        options.add_session_config_entry("session.use_env_allocators", "0")
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(folder, "profile")
    session = ort.InferenceSession(os.path.join(folder, "model.onnx"), options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    del outputs
    before = counter.heap_counter_live()
    counter.heap_counter_record(1)
    outputs = session.run(None, feeds)
    counter.heap_counter_record(0)
    figures = {"before": before, "peak": counter.heap_counter_peak(), "outputs": sum(o.nbytes for o in outputs),
               "start_ns": session.get_profiling_start_time_ns()}
    counter.heap_counter_dump(os.path.join(folder, "events.txt").encode())
    figures["profile"] = session.end_profiling()
    with open(os.path.join(folder, "figures.json"), "w") as f:
        json.dump(figures, f)


def analyse(folder: str, top: int) -> None:
    """The report of the module's docstring, from what `child` wrote to `folder`."""
    import onnx
    with open(os.path.join(folder, "figures.json")) as f:
        figures = json.load(f)
    with open(figures["profile"]) as f:
        events = json.load(f)
    last_run = max(e["ts"] for e in events if e.get("name") == "model_run")
    spans = sorted((e["ts"], e["name"][:-len("_kernel_time")]) for e in events
                   if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= last_run)
    starts = [t for t, _ in spans]
    graph = onnx.load(os.path.join(folder, "model.onnx")).graph
    place = {n.name: i for i, n in enumerate(graph.node)}
    last_read: dict[str, int] = {}
    for i, n in enumerate(graph.node):
        for name in n.input:
            last_read[name] = i
    outputs = {o.name for o in graph.output}

    def node_at(ns: int) -> str:
        k = bisect.bisect_right(starts, (ns - figures["start_ns"]) / 1000) - 1
        return spans[k][1] if k >= 0 else "(before the first node)"
    live: dict[str, tuple[int, str]] = {}
    total, best, at_peak, peak_node = 0, 0, {}, ""
    with open(os.path.join(folder, "events.txt")) as f:
        for line in f:
            ns, size, block = line.split()
            if int(size) > 0:
                live[block] = (int(size), node_at(int(ns)))
                total += int(size)
            elif block in live:
                total -= live.pop(block)[0]
            if total > best:
                best, at_peak, peak_node = total, dict(live), node_at(int(ns))
    peak_place = place.get(peak_node, len(graph.node))
    rows = []
    for size, node in at_peak.values():
        i = place.get(node)
        read = None if i is None else max((len(graph.node) if o in outputs else last_read.get(o, i)
                                           for o in graph.node[i].output), default=i)
        rows.append((size, node, i, graph.node[i].op_type if i is not None else "", read))
    rows.sort(key=lambda r: -r[0])
    held = sum(r[0] for r in rows if r[4] is not None and r[4] < peak_place)
    print(f"peak of live bytes over one run: {(figures['peak'] - figures['before']) / MIB:.1f} MiB above the "
          f"{figures['before'] / MIB:.1f} MiB live before it (outputs {figures['outputs'] / MIB:.1f} MiB)")
    print(f"blocks of 64 KiB or more live at the peak: {best / MIB:.1f} MiB, while node #{peak_place} "
          f"{peak_node} ran; {held / MIB:.1f} MiB of them allocated by nodes whose outputs were past their "
          "last reader")
    print(f"{'MiB':>9}  {'node':>6}  {'op':18s} {'last read at':>12}  allocated by")
    for size, node, i, op, read in rows[:top]:
        past = "  past its last reader" if read is not None and read < peak_place else ""
        print(f"{size / MIB:9.2f}  {'#' + str(i) if i is not None else '':>6}  {op:18s} "
              f"{'#' + str(read) if read is not None else '':>12}  {node[:60]}{past}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a tools/bench workload name (W1 ... W20, R1 ...) or an .onnx file")
    parser.add_argument("--feeds", help="an .npz of the .onnx file's inputs by name (default: random ones)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                        help="a symbolic dim's size for random inputs (default 1)")
    parser.add_argument("--reuse", action="store_true", help="plan ONNX Runtime's static buffer reuse")
    parser.add_argument("--top", type=int, default=25, help="how many of the largest live blocks to list")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.reuse)
        return
    import onnx
    from kernel_profile import random_feeds, saved_feeds, workload_model

    from gcompile.runtime.providers import ordered_model
    if args.target.endswith(".onnx"):
        model = onnx.load(args.target)
        dims = {name: int(size) for name, size in (d.split("=", 1) for d in args.dim)}
        feeds = saved_feeds(model, args.feeds) if args.feeds else random_feeds(model, dims)
    else:
        model, feeds = workload_model(args.target)
    ordered = ordered_model(model.SerializeToString(), list(model.graph.node), len(model.graph.node))
    if ordered is None:
        raise SystemExit(f"{args.target}: ONNX Runtime cannot write this model's optimized graph back")
    with tempfile.TemporaryDirectory(prefix="gcompile-heap-") as folder:
        with open(os.path.join(folder, "model.onnx"), "wb") as f:
            f.write(ordered.SerializeToString())
        np.savez(os.path.join(folder, "feeds.npz"), **feeds)
        env = dict(os.environ, LD_PRELOAD=build_counter(folder))
        subprocess.run([sys.executable, os.path.abspath(__file__), args.target, "--child", folder,
                        *(["--reuse"] if args.reuse else [])], env=env, check=True)
        analyse(folder, args.top)


if __name__ == "__main__":
    main()
