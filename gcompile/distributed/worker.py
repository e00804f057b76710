"""One data-parallel worker: a process (a Ray actor) holding onnxruntime sessions of the gradient
and update models and its own copy of everything the step carries (parameters, optimizer state,
step counter) on its device.

A step is three calls, submitted by the driver all at once and chained through object refs, so
the driver never touches gradient data: `gradients` (this worker's shard -> its loss and its
gradient cut into N chunks), `reduce` (chunk j of every worker -> their weighted sum; worker j
reduces chunk j), `apply` (the N reduced chunks -> the averaged gradient -> the update model,
skipped where a loss or that gradient is not finite).
The carried values live in two buffer sets, as in gcompile.training.Trainer: `apply` writes the
spare set and then swaps, so the previous step's values stay until the next `apply`, and
`rollback` can return to them after a step that failed on another worker.

This module is imported on the workers (and by the trainer when it starts them); it does not
import Ray: the trainer wraps `Worker` with ray.remote.
"""
from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import GcompileError
from ..runtime.modelfile import signature
from ..runtime.providers import PROVIDERS, make_session, resolve_provider
from ..runtime.subnormals import flushed
from ..training.split import SplitStep, grad_name
from .reduce import FlatPlan, weighted_sum

PHASES = ("gradients", "reduce", "apply")


def fingerprint(gradient: bytes, update: bytes) -> str:
    """sha256 of the two model files a worker runs."""
    return hashlib.sha256(gradient + b"\0" + update).hexdigest()


class Worker:
    """See the module docstring. Constructed by Ray with the models' bytes (one object ref that
    every worker reads), the execution provider and its share of threads."""

    def __init__(self, models: tuple[bytes, bytes], provider: str, threads: int, skip_nonfinite: bool = True) -> None:
        import onnxruntime as ort
        self.skip_nonfinite = skip_nonfinite
        gradient_bytes, update_bytes = models
        self._fingerprint = fingerprint(gradient_bytes, update_bytes)
        update = onnx.load_from_string(update_bytes)
        split = SplitStep(onnx.load_from_string(gradient_bytes), update, source="worker models")
        self.layout = split.layout
        self.provider = resolve_provider(provider)
        self._gradient = make_session(gradient_bytes, self.provider, threads=threads)
        self._update = make_session(update_bytes, self.provider, threads=threads)
        self._device = "cuda" if self._update.get_providers()[0] == PROVIDERS["cuda"] else "cpu"
        self._types = {e["name"]: (np.dtype(e["dtype"]), tuple(e["shape"])) for e in signature(update.graph.input)}
        self._plan = FlatPlan([(grad_name(p), *self._types[grad_name(p)]) for p in self.layout.params])
        self._ort = ort
        self._live: dict[str, Any] = {}
        self._spare: dict[str, Any] = {}
        self._count = -1          # steps taken; -1 until set_state
        self._fault: tuple[int, str, str] | None = None
        self._seconds: dict[str, float] = {}

    # -- identity and state -------------------------------------------------------------------------
    def describe(self) -> dict:
        """What the driver compares across workers before the first step."""
        import onnxruntime as ort
        return {"fingerprint": self._fingerprint, "onnxruntime": ort.__version__, "numpy": np.__version__,
                "provider": self.provider, "host": socket.gethostname(), "pid": os.getpid()}

    def set_state(self, values: dict[str, np.ndarray]) -> int:
        """Place copies of the carried values on the device, beside a spare set; returns the step count."""
        live, spare = {}, {}
        for name in self.layout.carried:
            arr = np.array(values[name], order="C")   # a copy: object-store arrays are read-only views
            dtype, shape = self._types[name]
            live[name] = self._ort.OrtValue.ortvalue_from_numpy(arr, self._device, 0)
            spare[name] = self._ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, self._device, 0)
        self._live, self._spare = live, spare
        self._count = int(values["step"])
        return self._count

    def carried(self) -> dict[str, np.ndarray]:
        """Parameters, optimizer state and step counter, copied to numpy."""
        return {n: np.array(self._live[n].numpy()) for n in self.layout.carried}

    def digest(self) -> str:
        """A hash of every carried value's bytes: equal on two workers iff their states are bit-identical."""
        h = hashlib.blake2b(digest_size=16)
        for name in self.layout.carried:
            h.update(np.ascontiguousarray(self._live[name].numpy()).tobytes())
        return h.hexdigest()

    def rollback(self, count: int) -> int:
        """Return to the state after `count` steps if the last `apply` took this worker one past it."""
        if self._count == count + 1:
            self._live, self._spare = self._spare, self._live
            self._count = count
        return self._count

    def timings(self) -> dict[str, float]:
        """Seconds this worker spent computing in each phase of its last step."""
        return dict(self._seconds)

    def fail_at(self, count: int, phase: str, action: str = "exit") -> None:
        """Fault injection for tests: at step `count` (steps taken before it), in `phase`, exit the
        process ('exit'), hang ('hang') or raise ('raise')."""
        if phase not in PHASES or action not in ("exit", "hang", "raise"):
            raise GcompileError(f"fail_at: phase must be one of {PHASES}, action exit, hang or raise")
        self._fault = (count, phase, action)

    def _maybe_fail(self, count: int, phase: str) -> None:
        if self._fault is None or self._fault[:2] != (count, phase):
            return
        action = self._fault[2]
        self._fault = None
        if action == "exit":
            os._exit(1)
        if action == "hang":
            time.sleep(3600)
        raise RuntimeError(f"fault injected in {phase} at step {count + 1}")

    def _expect(self, count: int, phase: str) -> None:
        if self._count != count:
            raise GcompileError(f"worker asked for {phase} of step {count + 1} holds the state after {self._count} "
                                "steps: the workers are out of step")

    # -- one step -----------------------------------------------------------------------------------
    def gradients(self, count: int, n: int, *shard: np.ndarray) -> tuple:
        """(loss,), then this worker's gradient cut into `n` chunks."""
        self._expect(count, "gradients")
        self._maybe_fail(count, "gradients")
        start = time.perf_counter()
        binding = self._gradient.io_binding()
        for name in self.layout.params:
            binding.bind_ortvalue_input(name, self._live[name])
        for name, arr in zip(self.layout.batch, shard):
            binding.bind_cpu_input(name, np.require(arr, requirements="C"))
        outputs = ["loss"] + [grad_name(p) for p in self.layout.params]
        for name in outputs:
            binding.bind_output(name, "cpu")
        with flushed():
            self._gradient.run_with_iobinding(binding)
        values = dict(zip(outputs, binding.copy_outputs_to_cpu()))
        chunks = self._plan.split(self._plan.flatten(values), n)
        self._seconds = {"gradients": time.perf_counter() - start}
        return ((float(values["loss"]),), *chunks)

    def reduce(self, count: int, weights: Sequence[float], *chunks: tuple) -> tuple:
        """The weighted sum of one chunk over all workers, in worker order."""
        self._maybe_fail(count, "reduce")
        start = time.perf_counter()
        out = weighted_sum(chunks, weights)
        self._seconds["reduce"] = time.perf_counter() - start
        return out

    def apply(self, count: int, *parts: tuple) -> tuple[int, bool]:
        """Run the update model on the gathered average gradient; `parts` are every worker's
        (loss,) and then the N reduced chunks. Returns (the new step count, whether the step was
        skipped): with skip_nonfinite, a step where a shard's loss or the averaged gradient holds
        NaN or Inf changes nothing (every worker sees the same values, so all skip it together)."""
        self._expect(count, "apply")
        self._maybe_fail(count, "apply")
        start = time.perf_counter()
        n = len(parts) // 2
        losses, reduced = [p[0] for p in parts[:n]], parts[n:]
        flat = self._plan.join(reduced)
        if self.skip_nonfinite and not (np.isfinite(losses).all() and all(np.isfinite(b).all() for b in flat)):
            self._seconds["apply"] = time.perf_counter() - start
            return self._count, True
        grads = self._plan.unflatten(flat)
        binding = self._update.io_binding()
        for name in self.layout.carried:
            binding.bind_ortvalue_input(name, self._live[name])
            binding.bind_ortvalue_output(self.layout.new(name), self._spare[name])
        for name, arr in grads.items():
            binding.bind_cpu_input(name, np.require(arr, requirements="C"))   # 0-d stays 0-d (not ascontiguousarray)
        with flushed():
            self._update.run_with_iobinding(binding)
        self._live, self._spare = self._spare, self._live
        self._count = count + 1
        self._seconds["apply"] = time.perf_counter() - start
        return self._count, False
