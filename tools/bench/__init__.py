"""Benchmark: gcompile's step times on ONNX Runtime's CPU provider beside PyTorch (eager) and JAX
(jit) on the same workloads, timed in one process, the systems alternating in blocks, quiet and
beside a busy neighbour process; gcompile's default session beside pinned threads and other
targets. Also node counts, build latency, compile-time scaling, peak memory, loops, Ray.

    python -m tools.bench --quick --only W1,W7                 # check the harness (figures not worth quoting)
    python -m tools.bench --json bench.json                     # every workload, 3 passes, quiet and busy
    python -m tools.bench --other-shapes --json shapes.json     # each kind at a second, untuned shape
    python -m tools.bench.report bench.json shapes.json --write docs/performance.md
    python -m tools.bench --contended 0 --threads 0 --target ort-cpu   # gcompile's default only, quiet only
    python -m tools.bench --cpu-time                            # single-threaded work, CPU time
    python -m tools.bench --only "" --scaling 1000,10000,100000 --build-scaling 1000,10000,100000
    python -m tools.bench --memory | --loops | --distributed
    python -m tools.bench --zoo --memory-only --models vit_b_16 # a real model's peak memory, nothing timed

Layout: workloads/<family>.py define each workload once (shapes, the gcompile step, its PyTorch
and JAX twins); harness.py times; report.py turns the JSON into docs/performance.md's tables;
scaling.py, memory.py, loops.py and distributed.py are the other measurements.

Workloads W1-W6 (and W1f) are the six the project tuned; W7-W20 are further kinds (a residual
CNN with batch norm, an LSTM, force matching, long attention, segmentation, a causal LM, a pair
potential, MobileNet, a graph network, a LLaMA block, a group-norm U-Net, a downsampling block, an
embedding table, a late ResNet stage); R1, R2, R2u, P1, P1h are loops.
"""
from __future__ import annotations

# What tools/kernel_profile.py, session_ab.py and gpu_check.py use (`import bench` with tools/ on
# the path): WORKLOADS maps a key to (label, setup), setup() to (fn, loss or None, args).
from .harness import BusyNeighbour, jax_workloads, median_ms, torch_workloads
from .workloads import OTHER_SHAPES, REGISTRY

WORKLOADS = {k: (w.label, w.setup) for k, w in REGISTRY.items()}
_median_ms = median_ms

__all__ = ["BusyNeighbour", "OTHER_SHAPES", "REGISTRY", "WORKLOADS", "jax_workloads", "median_ms",
           "torch_workloads"]
