"""Data-parallel training on Ray (--distributed; needs the distributed extra): 1 vs 2 workers, and
the allreduce's cost as the model grows."""
from __future__ import annotations

import os
import time

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .workloads.common import RNG, mlp, param


def _dp_step(features: int, hidden: int, classes: int, batch: int, depth: int = 2):
    """(split step, fused step, x, labels) of a float32 ReLU MLP classifier trained with SGD."""
    from gcompile.distributed import export_split_step
    sizes = [features] + [hidden] * depth + [classes]
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"w{i}"], params[f"b{i}"] = param(a, b), np.zeros(b, np.float32)

    def loss(p, x, t):
        return F.softmax_cross_entropy(mlp(x, [p[k] for k in params], F.relu), t)

    specs = gc.spec(("batch", features), "float32"), gc.spec(("batch",), "int64")
    split = export_split_step(loss, params, gc.optim.SGD(0.01), *specs, provider="cpu")
    fused = gc.export_train_step(loss, params, gc.optim.SGD(0.01), *specs, provider="cpu")
    x = RNG.standard_normal((batch, features)).astype(np.float32)
    return split, fused, x, RNG.integers(0, classes, batch).astype(np.int64)


def _timed_steps(trainer, batch, steps: int, warmup: int = 3) -> tuple[float, list[dict]]:
    """(median seconds per step, per-step timings where the trainer reports them)."""
    for _ in range(warmup):
        trainer.step(*batch)
    seconds, timings = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step(*batch)
        seconds.append(time.perf_counter() - t0)
        if hasattr(trainer, "timings"):
            timings.append(trainer.timings())
    return float(np.median(seconds)), timings


def distributed_bench(steps: int = 30, sizes=(10_000, 100_000, 1_000_000, 4_000_000)) -> dict:
    """Steps and samples per second of one training step on 1 vs 2 Ray workers (and the one-process
    Trainer), and the cost per step of the gradient allreduce as the model grows."""
    import ray

    from gcompile.distributed import DistributedTrainer
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             object_store_memory=512 * 1024 ** 2)
    throughput = []
    split, fused, x, t = _dp_step(features=256, hidden=512, classes=10, batch=1024)
    n_params = sum(int(np.prod(v.shape)) for v in split.params.values())
    per_step, _ = _timed_steps(gc.runtime.Trainer(fused), (x, t), steps)
    throughput.append({"system": "Trainer (1 process, all cores)", "workers": 1, "s_per_step": per_step})
    for workers in (1, 2):
        with DistributedTrainer(split, workers=workers) as trainer:
            per_step, timings = _timed_steps(trainer, (x, t), steps)
        throughput.append({"system": f"DistributedTrainer, {workers} worker(s) x 1 CPU", "workers": workers,
                           "s_per_step": per_step,
                           "communication_s": float(np.median([m["communication"] for m in timings]))})
    for row in throughput:
        row.update(steps_per_s=1 / row["s_per_step"], samples_per_s=len(x) / row["s_per_step"])
        print(f"MLP 256-512-512-10 ({n_params} params), batch {len(x)}: {row['system']:40s} "
              f"{row['steps_per_s']:7.1f} steps/s {row['samples_per_s']:9.0f} samples/s")
    communication = []
    for size in sizes:   # a linear model on a tiny batch: the step is nearly all gradient traffic
        features = size // 10
        split, _, x, t = _dp_step(features=features, hidden=0, classes=10, batch=8, depth=0)
        for workers in (1, 2):
            with DistributedTrainer(split, workers=workers) as trainer:
                per_step, timings = _timed_steps(trainer, (x, t), max(5, steps // 3))
            med = {k: float(np.median([m[k] for m in timings])) for k in timings[0]}
            communication.append({"params": size + 10, "megabytes": 4 * (size + 10) / 1e6, "workers": workers,
                                  "s_per_step": per_step, **med})
            r = communication[-1]
            print(f"linear model {r['params']:9d} params ({r['megabytes']:6.2f} MB), {workers} worker(s): step "
                  f"{1e3 * r['s_per_step']:7.2f} ms = gradients {1e3 * r['gradients']:6.2f} + reduce "
                  f"{1e3 * r['reduce']:6.2f} + apply {1e3 * r['apply']:6.2f} + communication/scheduling "
                  f"{1e3 * r['communication']:6.2f} ms")
    ray.shutdown()
    return {"throughput": throughput, "communication": communication}


