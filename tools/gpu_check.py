"""CUDA provider check: run the benchmark workloads (W1–W10 and the loop workloads) on provider
"cuda" and "cpu", check that outputs agree (rtol 1e-4 in float32) and time both (median of --runs after warm-up).

    python tools/gpu_check.py [--runs 20] [--only W1,W4]

Meant for a machine with a GPU (the device tool); where the CUDA provider does not load it says
so and exits 1 instead of reporting CPU numbers as GPU ones.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

import gcompile as gc  # noqa: E402
from gcompile.runtime.providers import cuda_available  # noqa: E402


def _median_ms(fn, inputs, runs: int) -> float:
    for _ in range(3):
        fn(*inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default=",".join(bench.WORKLOADS))
    args = parser.parse_args(argv)
    if not cuda_available():
        print("the CUDA execution provider does not load here (no GPU, or CUDA/cuDNN libraries missing)")
        return 1
    worst = 0.0
    for key in args.only.split(","):
        label, setup = bench.WORKLOADS[key]
        fn, _, inputs = setup()
        compiled = {p: gc.compile(fn, *inputs, provider=p) for p in ("cpu", "cuda")}
        results = {p: cf.run_flat(*inputs) for p, cf in compiled.items()}
        for got, ref in zip(results["cuda"], results["cpu"]):
            scale = float(np.max(np.abs(ref))) or 1.0
            worst = max(worst, float(np.max(np.abs(got - ref))) / scale)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * scale, err_msg=f"{key} cuda vs cpu")
        device_inputs = [compiled["cuda"].to_device(a) for a in inputs]
        ms = {"cpu": _median_ms(compiled["cpu"].run_flat, inputs, args.runs),
              "cuda": _median_ms(compiled["cuda"].run_flat, device_inputs, args.runs)}
        print(f"{key:3s} {label:17s} cpu {ms['cpu']:8.2f} ms  cuda {ms['cuda']:8.2f} ms  "
              f"speed-up {ms['cpu'] / ms['cuda']:6.1f}x  outputs agree", flush=True)
    print(f"largest cuda-vs-cpu difference relative to each output's scale: {worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
