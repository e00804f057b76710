"""Peak memory of a long LSTM step with and without recompute (--memory)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from .harness import ROOT
from .workloads.common import param


def lstm_memory_run(mode: str, steps: int = 100, batch: int = 512, hidden: int = 64, features: int = 16) -> dict:
    """One variant of recompute_memory, in its own process: build the long-sequence LSTM step,
    reset the peak RSS (Linux: /proc/self/clear_refs), run it once, report the growth."""
    import gcompile as gc
    import gcompile.functions as F

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))
    rng = np.random.default_rng(0)
    xs = (rng.standard_normal((steps, batch, features)) * 0.5).astype(np.float32)
    ws = [param(4 * hidden, features, scale=0.1), param(4 * hidden, hidden, scale=0.1),
          np.zeros(4 * hidden, np.float32)]
    h0 = np.zeros((batch, hidden), np.float32)

    def step(xs, h0, w_ih, w_hh, b):
        h, c = h0, h0
        if mode in ("scan", "scan-checkpoint"):   # one loop; its backward saves each step's values, or the carries
            (h, c), _ = gc.scan(lambda hc, x: (F.lstm_cell(x, *hc, w_ih, w_hh, b), None), (h, c), xs,
                                checkpoint=mode == "scan-checkpoint")
        for t in range(0 if mode.startswith("scan") else steps):
            if mode == "checkpoint":
                h, c = gc.checkpoint(F.lstm_cell, xs[t], h, c, w_ih, w_hh, b)
            else:
                h, c = F.lstm_cell(xs[t], h, c, w_ih, w_hh, b)
        loss = F.sum(h * h)
        return loss, gc.grad(loss, [w_ih, w_hh, b])
    cf = gc.compile(step, xs, h0, *ws, provider="cpu", recompute=mode == "cheap")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    t0 = time.perf_counter()
    loss = float(cf(xs, h0, *ws)[0])
    return {"mode": mode, "peak_mb": status("VmHWM") - before, "first_run_ms": 1e3 * (time.perf_counter() - t0),
            "onnx_nodes": len(cf.model.graph.node), "loss": loss}


def recompute_memory() -> list[dict]:
    """Peak RSS growth of one ORT run of a 100-step LSTM (batch 512, hidden 64) forward +
    weight gradients: no recompute, recompute=True (cheap nodes), gc.checkpoint per step
    (ARCHITECTURE.md §9.4), and as one gc.scan saving each step's values or (checkpoint=True) the
    carries only. Each variant runs in a fresh process so that arenas do not mix."""
    rows = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    for mode in ("none", "cheap", "checkpoint", "scan", "scan-checkpoint"):
        out = subprocess.run([sys.executable, "-m", "tools.bench", "--memory-variant", mode], cwd=ROOT, env=env,
                             check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"LSTM T=100 step, {r['mode']:15s} peak +{r['peak_mb']:6.1f} MB  first run "
              f"{r['first_run_ms']:7.1f} ms  {r['onnx_nodes']} ONNX nodes  loss {r['loss']:.4f}")
    return rows
