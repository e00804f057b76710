"""Where a model's time goes in ONNX Runtime: kernel time by op type and by node, from ONNX
Runtime's own per-node profile, for a benchmark workload (by name, built as tools/bench
builds it) or any .onnx file (fed random inputs).

    python tools/kernel_profile.py W7                      # a tools/bench workload
    python tools/kernel_profile.py model.onnx --dim batch=32
    python tools/kernel_profile.py model.onnx --feeds inputs.npz   # the model's real inputs, by name
    python tools/kernel_profile.py W3 --runs 20 --top 15 --threads 1
    python tools/kernel_profile.py W7 --save w7.onnx       # keep the model (e.g. before a change) ...
    python tools/kernel_profile.py --compare w7.onnx W7    # ... and time it against today's, alternating
    python tools/kernel_profile.py W12 --scaling           # ops whose time a second core does not cut

Sessions use gcompile's own options (gcompile.runtime.providers.session_options) plus profiling.
The report gives, per run: wall time, the sum of kernel times, and the rest (scheduling, memory,
the Python call): on a graph of many small nodes the rest can dominate. Kernel times are medians
over the timed runs; a loaded machine inflates them all, so compare shares, not milliseconds.
Random inputs are standard normal, weights included: a deep model then saturates, and softmax
probabilities underflow to subnormal floats, which slow every product they reach (a transformer
step's weight gradients ran 6x slower than on its real inputs), so give real ones (--feeds)
where they matter.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def workload_model(name: str):
    """(ModelProto, feeds) of a tools/bench workload, as gc.compile builds it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    import gcompile as gc
    if name not in bench.WORKLOADS:
        raise SystemExit(f"unknown workload {name!r}: one of {', '.join(bench.WORKLOADS)}, or a path to an .onnx file")
    fn, _, args = bench.WORKLOADS[name][1]()
    cf = gc.compile(fn, *args, provider="cpu")
    return cf.model, dict(zip(cf.input_names, args))


def saved_feeds(model, path: str) -> dict:
    """The model's inputs from an .npz file holding one array per graph input name; an input
    missing from it, or a name the model does not have, is an error that names it."""
    with np.load(path, allow_pickle=False) as saved:
        feeds = {k: saved[k] for k in saved.files}
    initializers = {t.name for t in model.graph.initializer}
    names = {v.name for v in model.graph.input} - initializers
    if set(feeds) != names:
        raise SystemExit(f"{path}: needs arrays named {sorted(names)}; missing {sorted(names - set(feeds))}, "
                         f"unknown {sorted(set(feeds) - names)}")
    return feeds


def random_feeds(model, dims: dict[str, int], seed: int = 0) -> dict:
    """Random inputs for a model's graph inputs: standard normal floats, small non-negative ints
    (valid as class labels and indices), random bools; symbolic dims from `dims` (default 1)."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        t = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1) for d in t.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            feeds[value.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def profile(model, feeds: dict, runs: int, threads: int | None) -> dict:
    """Run `model` `runs` times after warm-up with ONNX Runtime's profiler on; the per-node
    kernel times (median over runs, µs) and the wall times (ms)."""
    import onnxruntime as ort

    from gcompile.runtime.providers import DISABLED_OPTIMIZERS, session_options
    options = session_options(len(model.graph.node))
    if threads:
        options.intra_op_num_threads = threads
    options.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="gcompile-profile-") as folder:
        options.profile_file_prefix = os.path.join(folder, "ort")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"],
                                       disabled_optimizers=DISABLED_OPTIMIZERS)
        for _ in range(3):
            session.run(None, feeds)
        walls = []
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, feeds)
            walls.append(1e3 * (time.perf_counter() - start))
        with open(session.end_profiling()) as f:
            events = json.load(f)
    per_node: dict[str, list] = defaultdict(list)
    op_of: dict[str, str] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            per_node[name].append(e["dur"])
            op_of[name] = e.get("args", {}).get("op_name", "?")
    # the last `runs` executions of each node are the timed ones
    times = {name: float(np.median(d[-runs:])) for name, d in per_node.items()}
    return {"wall_ms": walls, "node_us": times, "op_of": op_of}


def compare(targets: list[str], runs: int, dims: dict[str, int], threads: int = 1) -> None:
    """Time models against each other in one process, alternating call by call, each on
    `threads` threads (one unless --threads says) with gcompile's options: median wall ms and
    median CPU ms (the work, which a busy machine stretches far less), and each as a ratio to
    the first. Models of a workload saved before a change are fed the workload's inputs; other
    .onnx files random ones."""
    import onnxruntime as ort

    from gcompile.runtime.providers import DISABLED_OPTIMIZERS, session_options
    workload_feeds = None
    entries = []
    for target in targets:
        if target.endswith(".onnx"):
            import onnx
            model = onnx.load(target)
            feeds = random_feeds(model, dims)
        else:
            model, feeds = workload_model(target)
            workload_feeds = feeds
        entries.append([target, model, feeds])
    for entry in entries:   # a saved workload model takes the workload's inputs where the names match
        if workload_feeds and set(entry[2]) == set(workload_feeds):
            entry[2] = workload_feeds
    calls = []
    for target, model, feeds in entries:
        session = ort.InferenceSession(model.SerializeToString(), session_options(len(model.graph.node), threads),
                                       providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS)
        session.run(None, feeds)
        calls.append((target, session, feeds))
    wall: dict[str, list] = defaultdict(list)
    cpu: dict[str, list] = defaultdict(list)
    for _ in range(runs):
        for target, session, feeds in calls:
            t0, c0 = time.perf_counter(), time.process_time()
            session.run(None, feeds)
            wall[target].append(1e3 * (time.perf_counter() - t0))
            cpu[target].append(1e3 * (time.process_time() - c0))
    first = targets[0]
    for target in targets:
        w, c = float(np.median(wall[target])), float(np.median(cpu[target]))
        print(f"{target:40s} wall {w:8.2f} ms ({w / np.median(wall[first]):.2f})   "
              f"CPU {c:8.2f} ms ({c / np.median(cpu[first]):.2f})")


def scaling(model, feeds: dict, runs: int, top: int) -> None:
    """Kernel time by op type, and the slowest nodes, with one thread and with every core: a
    kernel whose time barely drops runs on one core (or worse on several), which is where the
    ops of docs/performance.md's "kernels to route around" were found."""
    cores = os.cpu_count() or 1
    single, spread = (profile(model, feeds, runs, threads) for threads in (1, cores))
    one, many, op_of = single["node_us"], spread["node_us"], {**spread["op_of"], **single["op_of"]}
    by_op: dict[str, list] = defaultdict(lambda: [0.0, 0.0, 0])
    for name, us in one.items():
        by_op[op_of[name]][0] += us
        by_op[op_of[name]][1] += many.get(name, 0.0)
        by_op[op_of[name]][2] += 1

    def flag(a: float, b: float) -> str:
        return "  <- not faster on more cores" if b > 0.8 * a else ""
    print(f"{'op':24s} {'nodes':>6s} {'ms, 1':>8s} {f'ms, {cores}':>8s}")
    for op, (a, b, n) in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        print(f"{op:24s} {n:6d} {a / 1e3:8.3f} {b / 1e3:8.3f}{flag(a, b)}")
    print(f"\nthe {top} slowest nodes on {cores} threads\n{'node':48s} {'op':20s} {'ms, 1':>8s} {f'ms, {cores}':>8s}")
    for name, us in sorted(many.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name[:48]:48s} {op_of.get(name, '?')[:20]:20s} {one.get(name, 0.0) / 1e3:8.3f} {us / 1e3:8.3f}"
              f"{flag(one.get(name, 0.0), us)}")


def report(result: dict, top: int) -> None:
    node_us, op_of = result["node_us"], result["op_of"]
    wall = float(np.median(result["wall_ms"]))
    kernels = sum(node_us.values()) / 1e3
    print(f"per run: wall {wall:.2f} ms (median), kernels {kernels:.2f} ms, other {wall - kernels:.2f} ms "
          f"({len(node_us)} nodes run)")
    by_op: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for name, us in node_us.items():
        by_op[op_of[name]][0] += us
        by_op[op_of[name]][1] += 1
    print(f"\n{'op':24s} {'nodes':>6s} {'ms':>8s} {'share':>6s}")
    for op, (us, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        print(f"{op:24s} {n:6d} {us / 1e3:8.3f} {100 * us / 1e3 / max(kernels, 1e-9):5.1f}%")
    print(f"\ntop {top} nodes\n{'node':48s} {'op':20s} {'ms':>8s} {'share':>6s}")
    for name, us in sorted(node_us.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name[:48]:48s} {op_of[name][:20]:20s} {us / 1e3:8.3f} {100 * us / 1e3 / max(kernels, 1e-9):5.1f}%")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", help="a tools/bench workload name (W1 ... W20, R1 ...) or an .onnx file")
    parser.add_argument("--save", help="write the target's ONNX model to this path")
    parser.add_argument("--compare", nargs="+", metavar="TARGET",
                        help="time these workloads or .onnx files against each other instead of profiling")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=20, help="how many of the slowest nodes to list")
    parser.add_argument("--threads", type=int,
                        help="intra-op threads (default: gcompile's choice; with --compare, one)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                        help="size of a symbolic input dim of an .onnx file (default 1)")
    parser.add_argument("--feeds", help="an .npz of the .onnx file's inputs by name (default: random ones)")
    parser.add_argument("--json", help="also write the per-node times to this file")
    parser.add_argument("--scaling", action="store_true",
                        help="profile on one thread and on every core; flag kernels more cores do not speed up")
    args = parser.parse_args(argv)
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
    if args.compare:
        compare(args.compare, args.runs, dims, args.threads or 1)
        return
    if not args.target:
        parser.error("give a target, or --compare TARGET ...")
    if args.target.endswith(".onnx"):
        import onnx
        model = onnx.load(args.target)
        feeds = saved_feeds(model, args.feeds) if args.feeds else random_feeds(model, dims)
    else:
        model, feeds = workload_model(args.target)
    if args.save:
        with open(args.save, "wb") as f:
            f.write(model.SerializeToString())
    if args.scaling:
        scaling(model, feeds, args.runs, args.top)
        return
    result = profile(model, feeds, args.runs, args.threads)
    report(result, args.top)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
