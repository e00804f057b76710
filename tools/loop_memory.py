"""Peak memory and time of reverse mode through a 10,000-step loop, by how much each loop keeps.

Each configuration runs in a process of its own (its peak RSS is its own): gc.while_loop keeping
every carry, or one carry every k steps (checkpoint_every=k), and gc.scan keeping each step's
intermediates (the default) or its carries (checkpoint=True), each also with checkpoint_every=k (one
carry every k steps, a block of k steps recomputed at a time; scan_every_500_25 nests two levels of
blocks). The step is h <- tanh(h @ W) * 0.5 + h * 0.5 on a (16, 256) float32 carry (16 KiB).
The reference is JAX: jax_scan is jax.grad through lax.scan (which keeps what the step's
backward needs), jax_scan_remat the same with the step under jax.checkpoint (keeping carries),
each jit-compiled before it is timed (needs jax; CONFIGS leave them out where it is missing).
Usage: python tools/loop_memory.py [steps [config]] (one config, or all of CONFIGS in turn).
Results are in docs/loops.md.
"""
from __future__ import annotations

import importlib.util
import json
import resource
import subprocess
import sys
import time

CONFIGS = ["while", "while_every_100", "scan", "scan_checkpoint", "scan_every_100", "scan_checkpoint_every_100",
           "scan_every_500_25", "jax_scan", "jax_scan_remat"]


def inputs():
    import numpy as np
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 256)).astype(np.float32), (rng.standard_normal((256, 256)) / 16).astype(np.float32)


def measured(call, build: float, config: str, steps: int) -> dict:
    """The peak RSS and best of 3 times of `call` (after one untimed call) as a result row."""
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    call()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"config": config, "steps": steps, "build_s": round(build, 2), "run_s": round(min(times), 3),
            "peak_rss_mib": round(peak / 1024), "rss_before_run_mib": round(base / 1024)}


def run_jax(config: str, steps: int) -> dict:
    import jax
    import jax.numpy as jnp

    def body(h, w):
        return jnp.tanh(h @ w) * 0.5 + h * 0.5

    step = jax.checkpoint(body) if config.endswith("remat") else body

    def loss(h0, w):
        h, _ = jax.lax.scan(lambda h, _: (step(h, w), None), h0, None, length=steps)
        return jnp.sum(h * h)

    h0, w = (jnp.asarray(a) for a in inputs())
    start = time.perf_counter()
    grad = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(h0, w).compile()
    build = time.perf_counter() - start
    return measured(lambda: jax.block_until_ready(grad(h0, w)), build, config, steps)


def run(config: str, steps: int) -> dict:
    if config.startswith("jax"):
        return run_jax(config, steps)
    import numpy as np

    import gcompile as gc
    import gcompile.functions as F

    parts = config.split("_")   # scan_every_500_25: checkpoint_every=(500, 25)
    levels = tuple(int(k) for k in parts[parts.index("every") + 1:]) if "every" in parts else ()
    every = None if not levels else levels[0] if len(levels) == 1 else levels

    def loss(h0, w):
        def body(h):
            return F.tanh(h @ w) * 0.5 + h * 0.5
        if parts[0] == "while":
            h, _ = gc.while_loop(lambda v: v[1] < steps, lambda v: (body(v[0]), v[1] + 1), (h0, np.int64(0)),
                                 checkpoint_every=every)
        else:
            h, _ = gc.scan(lambda h, _: (body(h), None), h0, length=steps, checkpoint="checkpoint" in parts,
                           checkpoint_every=every)
        return F.sum(h * h)

    h0, w = inputs()
    start = time.perf_counter()
    cf = gc.compile(lambda h0, w: gc.grad(loss(h0, w), [h0, w]), h0, w, provider="cpu")
    return measured(lambda: cf(h0, w), time.perf_counter() - start, config, steps)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    if len(sys.argv) > 2:
        print(json.dumps(run(sys.argv[2], steps)))
        return
    for config in CONFIGS:
        if config.startswith("jax") and importlib.util.find_spec("jax") is None:
            print(f"{config}: skipped, jax is not installed")
            continue
        out = subprocess.run([sys.executable, __file__, str(steps), config], capture_output=True, text=True)
        print(out.stdout.strip() or out.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
