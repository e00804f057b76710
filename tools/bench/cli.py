"""The command line: `python -m tools.bench [options]` (see the package's docstring)."""
from __future__ import annotations

import argparse
import json
import os
import sys


def _parser() -> argparse.ArgumentParser:
    from . import __doc__ as doc
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=doc.split("\n\n", 1)[1])
    parser.add_argument("--runs", type=int, default=20, help="timed calls of each system per pass (default 20)")
    parser.add_argument("--repeat", type=int, default=3, help="passes per workload; the tables give their range")
    parser.add_argument("--quick", action="store_true",
                        help="check the harness: 3 runs, 1 pass, no scaling (figures not worth quoting)")
    parser.add_argument("--only", default="", help="comma-separated workload keys (default: all)")
    parser.add_argument("--other-shapes", action="store_true",
                        help="the workloads that have one (of --only) at their second, untuned shape")
    parser.add_argument("--contended", type=int, default=1, metavar="N",
                        help="each pass again beside N busy neighbour processes (default 1; 0: quiet only)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="also time gcompile on N pinned threads (GCOMPILE_THREADS; default: the core count; "
                             "0: not)")
    parser.add_argument("--target", default="ort-cpu,portable",
                        help="gcompile's targets to time on ONNX Runtime's CPU provider (default ort-cpu,portable; "
                             "ort-cpu is the default session's)")
    parser.add_argument("--json", help="write the figures to this file (python -m tools.bench.report reads it)")
    parser.add_argument("--note", default="", help="a line the tables print beside the machine (e.g. its load)")
    parser.add_argument("--scaling", default="", help="node counts for compile-time scaling, e.g. 1000,10000,100000")
    parser.add_argument("--build-scaling", default="", help="ONNX node counts for build-to-first-result timing, "
                        "e.g. 1000,10000,100000")
    parser.add_argument("--cpu-time", action="store_true", help="every system on one thread, timed by CPU time")
    parser.add_argument("--reference-path", metavar="DIR",
                        help="a site-packages folder holding torch and jax, searched after this environment's")
    parser.add_argument("--memory", action="store_true", help="only the recompute peak-memory comparison")
    parser.add_argument("--memory-variant", help=argparse.SUPPRESS)
    parser.add_argument("--distributed", action="store_true",
                        help="only data-parallel training on Ray: 1 vs 2 workers, allreduce cost by model size")
    parser.add_argument("--loops", action="store_true", help="only the loop figures (tools/bench/loops.py)")
    parser.add_argument("--zoo", action="store_true",
                        help="only the model zoo: real models' training steps against PyTorch, time and peak memory "
                             "(tools/bench/zoo.py; needs torch, torchvision and transformers)")
    parser.add_argument("--models", default="",
                        help="with --zoo: comma-separated model keys (default: all), torchvision:NAME[@BATCH] "
                             "for a torchvision model the zoo does not list, or transformers:TASK:TYPE[@ATTENTION] "
                             "for a transformers architecture at its default config")
    parser.add_argument("--small", action="store_true",
                        help="with --zoo: each model at a tiny size (checks the harness; figures not worth quoting)")
    parser.add_argument("--no-check", action="store_true", help="with --zoo: skip the float64 gradient check")
    parser.add_argument("--memory-only", action="store_true",
                        help="with --zoo: only the peak-memory processes (no timing passes, no gradient check)")
    parser.add_argument("--budget", type=float, metavar="FRACTION",
                        help="with --zoo: also gcompile with a memory budget aimed at FRACTION of PyTorch's peak "
                             "(e.g. 0.5), its memory and time")
    return parser


def _write(path, results) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1, default=str)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.reference_path:
        sys.path.append(args.reference_path)
    from . import harness
    if args.cpu_time:
        harness.use_cpu_time()
    if args.memory_variant:
        from .memory import lstm_memory_run
        print(json.dumps(lstm_memory_run(args.memory_variant)))
        return 0
    if args.quick:
        args.runs, args.repeat = 3, 1
    if args.distributed:
        from .distributed import distributed_bench
        _write(args.json, {"meta": harness.machine(), "distributed": distributed_bench(args.runs)})
        return 0
    if args.loops:
        from .loops import loop_report
        _write(args.json, {"meta": harness.machine(), "loops": loop_report(harness.median_ms, args.runs)})
        return 0
    if args.zoo:
        from .zoo import zoo_bench
        from .zoo_models import MODELS
        names = [k for k in args.models.split(",") if k] or list(MODELS)
        runs, repeat = (args.runs, args.repeat) if args.runs != 20 or args.quick else (5, 2)
        meta = harness.machine()
        meta["note"] = args.note
        results = {"meta": meta, "settings": {"runs": runs, "repeat": repeat, "contended": args.contended,
                                              "small": args.small, "budget": args.budget,
                                              "memory_only": args.memory_only},
                   "zoo": zoo_bench(names, args.small, runs, repeat, args.contended, not args.no_check,
                                    log=lambda line: print(line, flush=True), budget=args.budget,
                                    timed=not args.memory_only)}
        results["load_average_after"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        _write(args.json, results)
        return 0
    if args.memory:
        from .memory import recompute_memory
        _write(args.json, {"meta": harness.machine(), "recompute_memory": recompute_memory()})
        return 0
    from .workloads import DEFAULT, OTHER_SHAPES, REGISTRY
    names = [k for k in args.only.split(",") if k] or list(DEFAULT)
    unknown = [k for k in names if k not in REGISTRY]
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}: one of {', '.join(REGISTRY)}")
    if args.other_shapes:
        names = [k for k in names if k in OTHER_SHAPES]
    targets = [t for t in args.target.split(",") if t]
    meta = harness.machine()
    meta["note"] = args.note
    settings = {"runs": args.runs, "repeat": args.repeat, "contended": args.contended, "threads": args.threads,
                "targets": targets, "other_shapes": args.other_shapes}
    print(f"{meta['date']}  {meta['cpu']}, {meta['cores']} cores, load average {meta['load_average']}; "
          + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v), flush=True)
    references = harness.torch_workloads(), harness.jax_workloads()
    results: dict = {"meta": meta, "settings": settings, "workloads": {}}
    for key in names:
        name = f"{key}'" if args.other_shapes else key
        results["workloads"][name] = harness.time_workload(
            key, args.runs, args.repeat, args.contended, targets, args.threads, references, args.other_shapes,
            log=lambda line: print(line, flush=True))
        _write(args.json, results)   # a run cut short keeps what it measured
    if "W1" in names and "W1f" in names and not args.other_shapes:
        results["bwd_fwd"] = harness.bwd_fwd_ratio(args.runs)
        print(f"W1 step / forward {results['bwd_fwd']['ratio']:.2f} (target <= 2.3)")
    if args.scaling and not args.quick:
        from .scaling import compile_scaling
        results["scaling"] = compile_scaling([int(s) for s in args.scaling.split(",")])
    if args.build_scaling and not args.quick:
        from .scaling import build_scaling
        results["build_scaling"] = build_scaling([int(s) for s in args.build_scaling.split(",")])
    results["load_average_after"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    _write(args.json, results)
    return 0
