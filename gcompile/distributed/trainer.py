"""DistributedTrainer: data-parallel training of a split training step on Ray workers.

The API is gcompile.training.Trainer's (step(*batch) -> loss, .params, .state, .step_count,
save/load with the same .npz checkpoints), plus the number of workers and the cluster address.
Each step the batch is cut into one contiguous shard per worker along its leading axis; every
worker computes its shard's gradient with the gradient model; the gradients are averaged,
weighted by shard size, with a reduce-scatter and an allgather through Ray's object store
(distributed/reduce.py says why not Ray's collective library and what it costs); and every
worker applies the update model to the same averaged gradient, so parameters stay
bit-identical on all workers (`verify` checks it, `save` calls `verify`).

Faults: a step either completes on every worker or leaves every worker where it was. When a
worker dies or hangs (falls far behind the others: found within seconds, distributed/stall.py),
the survivors are rolled back to the state before the step (worker.rollback), the dead worker
is replaced by a fresh one that copies a survivor's state, and the step is run again,
bit-identically to a run without the fault; at most `restarts` times over the trainer's life,
after which the error is raised (WorkerError) and the trainer is closed: resume from a
checkpoint, on any number of workers.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from numpy.typing import ArrayLike

from ..errors import GcompileError, InputError
from ..ir.dims import astype_hint, format_shape, format_type
from ..lowering.serialize import EXTERNAL_DATA_THRESHOLD
from ..runtime import npz
from ..runtime.modelfile import check_value, signature
from ..training.split import SplitStep
from ..training.trainer import check_names, warn_skipped
from .cluster import WorkerError, connect
from .stall import durations, stalled
from .worker import PHASES, Worker, fingerprint

__all__ = ["DistributedTrainer"]

_PROBE_SECONDS = 10.0   # for a failed step's tasks to settle, and for each worker to answer `rollback`
_POLL_SECONDS = 0.25    # how often a step's progress is checked while none of its tasks finishes
_START_SECONDS = 120.0  # for new workers to start: a Ray worker process and two onnxruntime sessions


def as_split_step(step: Any) -> SplitStep:
    """A SplitStep from a SplitStep, the folder it was saved in, or a (gradient, update) pair of
    ModelProtos or paths; a clear error for a fused training step or anything else."""
    if isinstance(step, SplitStep):
        return step
    if isinstance(step, (str, os.PathLike)) and os.path.isdir(step):
        return SplitStep.load(step)
    if isinstance(step, tuple) and len(step) == 2:
        from ..runtime import modelfile
        models = [modelfile.load(m) if isinstance(m, (str, os.PathLike)) else m for m in step]
        return SplitStep(models[0], models[1], source="(gradient, update) pair")
    if hasattr(step, "layout") and hasattr(step, "model") or isinstance(step, (onnx.ModelProto, str, os.PathLike)):
        raise GcompileError("DistributedTrainer needs a split training step (a gradient model and an update model), "
                            f"got {type(step).__name__} {str(step)[:80]!r}: export one with "
                            "gcompile.distributed.export_split_step (the arguments of gc.export_train_step), or pass "
                            "the folder SplitStep.save wrote")
    raise GcompileError(f"DistributedTrainer takes a split training step (export_split_step), the folder it was saved "
                        f"in or a (gradient, update) pair, got {type(step).__name__}")


class DistributedTrainer:
    """Runs a split training step on `workers` Ray workers; see the module docstring.

    step: a SplitStep (gcompile.distributed.export_split_step), the folder SplitStep.save wrote,
    or a (gradient, update) pair of models or paths. params: the initial parameters (default:
    the exported ones). provider: 'cpu', 'cuda' or 'auto' (CUDA where the cluster has a GPU per
    worker). address: the cluster's ('host:6379', 'ray://host:10001', 'auto'); None joins the
    Ray this process uses or starts a local one. cpus_per_worker: CPUs Ray reserves for each
    worker, also its onnxruntime threads. restarts: how many failed steps may be recovered by
    replacing workers. stall: a worker still in a phase of the step ten times as long as the
    others took (or as the phase took in the last step), and at least `stall` seconds, counts as
    hung and is replaced (distributed/stall.py); timeout: seconds any step may take at most.
    reduction: 'mean' when the loss is a mean over the batch (shards weighted by their size),
    'sum' when it is a sum. skip_nonfinite (default True): a step whose loss (on any shard) or
    averaged gradient holds NaN or Inf changes nothing and is counted in `skipped_steps`, as
    Trainer's guard does. A trainer may be shared by threads: its calls run one at a time.
    """

    def __init__(self, step: Any, params: Mapping[str, ArrayLike] | None = None, provider: str | None = None, *,
                 workers: int = 2, address: str | None = None, cpus_per_worker: float = 1.0, restarts: int = 1,
                 timeout: float = 300.0, stall: float = 10.0, reduction: str = "mean",
                 connect_timeout: float = 5.0, skip_nonfinite: bool = True) -> None:
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise GcompileError(f"workers must be a positive integer, got {workers!r}")
        if reduction not in ("mean", "sum"):
            raise GcompileError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        if cpus_per_worker <= 0 or restarts < 0 or timeout <= 0 or stall <= 0:
            raise GcompileError("cpus_per_worker, timeout and stall must be > 0 and restarts >= 0")
        split = as_split_step(step)
        self.layout = split.layout
        self._types = {e["name"]: (np.dtype(e["dtype"]), tuple(e["shape"]))
                       for e in signature(list(split.update.graph.input) + list(split.gradient.graph.input))}
        params = split.params if params is None else params
        if params is None:
            raise GcompileError("DistributedTrainer(folder): give the initial parameters, params={name: array} with "
                                f"names {', '.join(self.layout.params)}")
        given = {k: np.asarray(v) for k, v in params.items()}
        check_names("parameters", given, self.layout.params)
        state, count = self.layout.initial_state(given)
        initial = self._checked({**given, **state, "step": count})
        self._check_batch_dims(workers)
        models = tuple(_serialised(m, role) for m, role in ((split.gradient, "gradient"), (split.update, "update")))
        self._fingerprint = fingerprint(*models)

        self._ray = connect(address, connect_timeout)
        self.address = self._ray.get_runtime_context().gcs_address
        self.provider = self._choose_provider(provider or split.provider or "auto", workers, cpus_per_worker)
        self.num_workers, self.reduction, self.timeout, self.stall = workers, reduction, float(timeout), float(stall)
        self._took: dict[str, float] = {}   # seconds each phase of the last step took (distributed/stall.py)
        self.restarts_left = restarts
        self._cpus, self._models = cpus_per_worker, self._ray.put(models)
        self._workers: list[Any] = []
        self._software: dict | None = None   # what the first workers reported (handshake)
        self._closed, self._count = False, 0
        self._wall = 0.0
        self.skip_nonfinite, self._skipped = bool(skip_nonfinite), 0
        self._lock = threading.RLock()   # steps, reads and checkpoints of one trainer run one at a time
        try:
            self._workers = self._start(workers)
            self._set_all(initial)
        except BaseException:
            self.close()
            raise

    # -- set-up --------------------------------------------------------------------------------------
    def _checked(self, values: dict) -> dict[str, np.ndarray]:
        out = {}
        for name in self.layout.carried:
            arr = np.asarray(values[name])
            dtype, shape = self._types[name]
            if arr.dtype != dtype or arr.shape != shape:
                raise InputError(f"{name!r}: the training step expects {format_type(dtype, shape)}, "
                                 f"got {format_type(arr.dtype, arr.shape)}{astype_hint(dtype, arr.dtype)}")
            out[name] = arr
        return out

    def _check_batch_dims(self, workers: int) -> None:
        fixed = [n for n in self.layout.batch if self._types[n][1] and isinstance(self._types[n][1][0], int)]
        if workers > 1 and fixed:
            shape = self._types[fixed[0]][1]
            raise GcompileError(f"batch input {fixed[0]!r} has a fixed leading size {format_shape(shape)}, so it "
                                f"cannot be cut into {workers} shards: export the step with a symbolic batch dim, "
                                f"gc.spec(('batch', ...))")

    def _choose_provider(self, provider: str, workers: int, cpus: float) -> str:
        resources = self._ray.cluster_resources()
        if resources.get("CPU", 0) < workers * cpus:
            raise GcompileError(f"{workers} workers of {cpus:g} CPU(s) each need {workers * cpus:g} CPUs, but the Ray "
                                f"cluster at {self.address} has {resources.get('CPU', 0):g}: use fewer workers, a "
                                "smaller cpus_per_worker, or a larger cluster")
        gpus = resources.get("GPU", 0)
        if provider == "auto":
            return "cuda" if gpus >= workers else "cpu"
        if provider == "cuda" and gpus < workers:
            raise GcompileError(f"provider 'cuda' needs a GPU per worker ({workers}); the cluster has {gpus:g}")
        if provider not in ("cpu", "cuda"):
            raise GcompileError(f"unknown provider {provider!r}: use 'auto', 'cpu' or 'cuda'")
        return provider

    def _start(self, n: int) -> list[Any]:
        """`n` new workers, checked to run the same models and runtime (handshake)."""
        actor = self._ray.remote(Worker).options(
            num_cpus=self._cpus, num_gpus=1 if self.provider == "cuda" else 0, max_restarts=0,
            scheduling_strategy="SPREAD")
        started = [actor.remote(self._models, self.provider, max(1, int(self._cpus)), self.skip_nonfinite)
                   for _ in range(n)]
        try:
            self.handshake(started)
        except BaseException:
            for w in started:
                self._ray.kill(w)
            raise
        return started

    def handshake(self, workers: list[Any]) -> list[dict]:
        """Every worker's description (worker.describe), after checking that all run this
        trainer's models on the same onnxruntime, numpy and provider as the first workers did
        (what keeps their parameters bit-identical); a WorkerError naming the workers that differ."""
        try:
            reports = self._ray.get([w.describe.remote() for w in workers], timeout=_START_SECONDS)
        except self._ray.exceptions.GetTimeoutError:
            raise WorkerError(f"the workers did not start within {_START_SECONDS:g} s") from None
        except self._ray.exceptions.RayError as err:
            raise WorkerError(f"a worker failed to start: {_first_line(err)}") from None
        expected = self._software or {"fingerprint": self._fingerprint, "onnxruntime": reports[0]["onnxruntime"],
                                      "numpy": reports[0]["numpy"], "provider": reports[0]["provider"]}
        for key, what in (("fingerprint", "models"), ("onnxruntime", "onnxruntime versions"),
                          ("numpy", "numpy versions"), ("provider", "execution providers")):
            odd = [f"worker {i} on {r['host']} (pid {r['pid']}): {r[key][:16]}" for i, r in enumerate(reports)
                   if r[key] != expected[key]]
            if odd:
                raise WorkerError(f"workers run different {what}: expected {expected[key][:16]}, got " + "; ".join(odd)
                                  + ". Every worker must run the same models on the same software, or their "
                                    "parameters would drift apart")
        self._software = expected
        return reports

    def _set_all(self, values: dict[str, np.ndarray]) -> None:
        ref = self._ray.put(values)   # one copy in the object store, read by every worker
        self._get([w.set_state.remote(ref) for w in self._workers])
        self._count = int(values["step"])

    def _get(self, refs: list) -> list:
        """ray.get, bounded by `timeout`; a dead or hung worker becomes a WorkerError."""
        ray = self._ray
        try:
            return ray.get(refs, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError:
            raise WorkerError(f"a worker did not answer within {self.timeout:g} s") from None
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as err:
            raise WorkerError(f"a worker died: {_first_line(err)}") from None

    # -- carried values ------------------------------------------------------------------------------
    def _open(self) -> None:
        if self._closed:
            raise GcompileError("this DistributedTrainer is closed (after close(), or after a worker failure it "
                                "could not recover from): start a new one and load a checkpoint")

    def _carried(self) -> dict[str, np.ndarray]:
        with self._lock:
            self._open()
            return {k: np.array(v) for k, v in self._get([self._workers[0].carried.remote()])[0].items()}

    @property
    def params(self) -> dict[str, np.ndarray]:
        """The current parameters (worker 0's, which every worker shares), copied to numpy."""
        values = self._carried()
        return {n: values[n] for n in self.layout.params}

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The current optimizer state, copied to numpy."""
        values = self._carried()
        return {n: values[n] for n in self.layout.state_names}

    @property
    def step_count(self) -> int:
        """Steps applied so far (a step the guard skipped does not count: see skipped_steps)."""
        with self._lock:
            return self._count

    @property
    def skipped_steps(self) -> int:
        """Steps this trainer skipped because a loss or the averaged gradient was not finite."""
        with self._lock:
            return self._skipped

    def verify(self) -> str:
        """Check that every worker holds bit-identical parameters, optimizer state and step counter;
        returns their digest. A GcompileError naming the workers that differ."""
        with self._lock:
            self._open()
            digests = self._get([w.digest.remote() for w in self._workers])
        if len(set(digests)) != 1:
            raise WorkerError("the workers' parameters differ (digests " + ", ".join(
                f"worker {i}: {d}" for i, d in enumerate(digests)) + "); this is a gcompile bug or workers with "
                "different hardware computing different bits: load a checkpoint to resynchronise them")
        return digests[0]

    # -- stepping ------------------------------------------------------------------------------------
    def _shards(self, batch: tuple) -> tuple[list[tuple], list[float]]:
        names = self.layout.batch
        if len(batch) != len(names):
            raise InputError(f"DistributedTrainer.step takes {len(names)} batch input(s) "
                             f"({', '.join(names) or 'none'}), got {len(batch)}")
        bound: dict[str, tuple[int, str]] = {}   # one size per symbolic dim across the batch
        feeds = [check_value(f"batch input {name!r}", value, *self._types[name], bound)
                 for name, value in zip(names, batch)]
        lengths = {name: arr.shape[0] for name, arr in zip(names, feeds) if arr.ndim}
        if len(set(lengths.values())) > 1:
            raise InputError("the batch inputs are cut into shards along their first axis, which must have one "
                             "length: " + ", ".join(f"{n} has {k}" for n, k in lengths.items()))
        total = next(iter(lengths.values()), 0)
        n = len(self._workers)
        if lengths and total < n:
            raise InputError(f"a batch of {total} row(s) cannot be cut into {n} shards, one per worker")
        bounds = np.linspace(0, total, n + 1).round().astype(int) if lengths else np.zeros(n + 1, int)
        shards = [tuple(a[lo:hi] if a.ndim else a for a in feeds) for lo, hi in zip(bounds[:-1], bounds[1:])]
        if self.reduction == "sum" or not lengths:
            weights = [1.0] * n if self.reduction == "sum" else [1.0 / n] * n
        else:
            weights = [(hi - lo) / total for lo, hi in zip(bounds[:-1], bounds[1:])]
        return shards, weights

    def step(self, *batch: ArrayLike) -> float:
        """Run one data-parallel step on `batch` (cut into shards); returns the loss over the whole
        batch (the shards' losses combined as their gradients are), computed before the update."""
        shards, weights = self._shards(batch)
        with self._lock:
            self._open()
            while True:
                try:
                    loss, skipped = self._run(self._count, shards, weights)
                except _StepFailed as failure:
                    self._recover(self._count, failure)
                    continue
                if skipped:
                    self._skip()
                else:
                    self._count += 1
                return loss

    def _skip(self) -> None:
        self._skipped += 1
        if self._skipped == 1:
            warn_skipped("DistributedTrainer", self._count, "a loss or the averaged gradient",
                         "parameters and optimizer state")

    def _run(self, count: int, shards: list[tuple], weights: list[float]) -> tuple[float, bool]:
        """(the batch's loss, whether the guard skipped the step)."""
        ray, workers, n = self._ray, self._workers, len(self._workers)
        start = time.perf_counter()
        outs = [w.gradients.options(num_returns=n + 1).remote(count, n, *shard) for w, shard in zip(workers, shards)]
        reduced = [w.reduce.remote(count, weights, *[outs[i][1 + j] for i in range(n)]) for j, w in enumerate(workers)]
        applied = [w.apply.remote(count, *[o[0] for o in outs], *reduced) for w in workers]
        phases = {"gradients": [o[0] for o in outs], "reduce": reduced, "apply": applied}
        self._watch(phases, start)
        try:
            metas, _, counts = (ray.get(phases[p]) for p in PHASES)
            metas, counts = list(metas), list(counts)
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as err:
            raise _StepFailed(_first_line(err), phases) from None
        except ray.exceptions.RayTaskError as err:   # the worker's own exception, in `cause`
            inner = getattr(err, "cause", None) or err
            raise _StepFailed(f"{type(inner).__name__}: {_first_line(inner)}", phases, cause=inner) from None
        skipped = counts[0][1]
        if counts != [(count + (not skipped), skipped)] * n:
            raise _StepFailed(f"the workers' step counters and skips are {counts} after step {count + 1}", phases)
        self._wall = time.perf_counter() - start
        return float(sum(w * m[0] for w, m in zip(weights, metas))), skipped

    def _watch(self, phases: dict[str, list], start: float) -> None:
        """Wait for every task of the step submitted at `start`, noting when each finishes; a
        _StepFailed naming the workers stuck in it as soon as distributed/stall.py finds some."""
        n = len(self._workers)
        where = {ref.hex(): (phase, i) for phase in PHASES for i, ref in enumerate(phases[phase])}
        pending, done = [r for p in PHASES for r in phases[p]], {}
        while pending:
            ready, pending = self._ray.wait(pending, num_returns=1, timeout=_POLL_SECONDS, fetch_local=False)
            now = time.perf_counter()
            done.update({where[r.hex()]: now for r in ready})
            found = stalled(PHASES, n, start, done, now, self.stall, self.timeout, self._took) if pending else None
            if found is not None:
                phase, hung, ran, limit = found
                raise _StepFailed(f"no progress: worker(s) {', '.join(map(str, sorted(hung)))} still in {phase} after "
                                  f"{ran:.1f} s, against a limit of {limit:.1f} s", phases, hung=hung)
        self._took = durations(PHASES, n, start, done)

    def timings(self) -> dict[str, float]:
        """Seconds of the last step: wall (as the driver saw it) and, per phase, the slowest worker's
        compute; what remains of the wall time is communication and scheduling."""
        with self._lock:
            per_worker = self._get([w.timings.remote() for w in self._workers])
        out = {"wall": self._wall}
        for phase in PHASES:
            out[phase] = max(t.get(phase, 0.0) for t in per_worker)
        out["communication"] = max(0.0, out.get("wall", 0.0) - sum(out[p] for p in PHASES))
        return out

    # -- faults --------------------------------------------------------------------------------------
    def _recover(self, count: int, failure: _StepFailed) -> None:
        """After a failed step: kill hung workers, roll survivors back to `count` steps, then either
        replace the dead and return (the caller runs the step again) or close and raise."""
        ray = self._ray
        hung = failure.hung
        for i in hung:
            ray.kill(self._workers[i], no_restart=True)
        ray.wait(failure.refs(), num_returns=len(failure.refs()), timeout=_PROBE_SECONDS)   # let the rest settle
        alive: dict[int, int] = {}
        for i, w in enumerate(self._workers):
            if i in hung:
                continue
            try:
                alive[i] = ray.get(w.rollback.remote(count), timeout=_PROBE_SECONDS)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                ray.kill(w, no_restart=True)
        dead = [i for i in range(len(self._workers)) if i not in alive]
        what = f"step {count + 1} failed on {len(dead)} of {len(self._workers)} worker(s) ({failure.message})"
        if any(c != count for c in alive.values()):
            self.close()
            raise WorkerError(f"{what}; the surviving workers hold different steps {sorted(alive.values())} and "
                              "cannot be rolled back: load a checkpoint into a new trainer")
        if failure.cause is not None and not dead:   # an exception, not a death: every worker is back at `count`
            raise failure.cause if isinstance(failure.cause, GcompileError) else WorkerError(what)
        if not alive or self.restarts_left <= 0:
            self.close()
            reason = "no worker survived" if not alive else "no restarts left"
            raise WorkerError(f"{what}; {reason}. The trainer is closed; its last consistent state was after "
                              f"{count} steps: resume from your last checkpoint (DistributedTrainer.load), on any "
                              "number of workers")
        self.restarts_left -= 1
        fresh = self._start(len(dead))
        source = self._workers[next(iter(alive))].carried.remote()
        self._get([w.set_state.remote(source) for w in fresh])
        for i, w in zip(dead, fresh):
            self._workers[i] = w
        self.verify()

    # -- checkpoints ---------------------------------------------------------------------------------
    def _entries(self) -> dict[str, str]:
        """Checkpoint entry -> carried value, as gcompile.training.Trainer writes them."""
        return {**{f"params/{n}": n for n in self.layout.params}, **{f"state/{n}": n for n in self.layout.state_names},
                "step": "step"}

    def save(self, path: str | os.PathLike) -> None:
        """Write parameters, optimizer state and step counter to an .npz file, atomically, after
        checking that every worker holds the same (verify). Trainer.load reads it too."""
        with self._lock:
            self.verify()
            values = self._carried()
        npz.write(path, {entry: values[name] for entry, name in self._entries().items()})

    def load(self, path: str | os.PathLike) -> None:
        """Resume every worker from a checkpoint (written by this class or by Trainer.save, with any
        number of workers); checked against the layout before any array is read."""
        entries = self._entries()
        arrays = npz.read(path, {entry: self._types[name] for entry, name in entries.items()})
        with self._lock:
            self._open()
            self._set_all({name: arrays[entry] for entry, name in entries.items()})

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the workers (the Ray cluster keeps running)."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        if self._ray.is_initialized():
            for w in workers:
                self._ray.kill(w, no_restart=True)

    def __enter__(self) -> DistributedTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _StepFailed(Exception):
    """A step that did not complete on every worker; `phases` holds its object refs by phase,
    `hung` the workers found stuck in it (distributed/stall.py)."""

    def __init__(self, message: str, phases: dict[str, list], cause: Exception | None = None,
                 hung: set[int] | None = None) -> None:
        super().__init__(message)
        self.message, self.phases, self.cause, self.hung = message, phases, cause, hung or set()

    def refs(self) -> list:
        return [r for p in PHASES for r in self.phases[p]]


def _serialised(model: onnx.ModelProto, role: str) -> bytes:
    data = model.SerializeToString()
    if len(data) >= EXTERNAL_DATA_THRESHOLD:
        raise GcompileError(f"the {role} model is {len(data)} bytes, too large to send to workers in one piece "
                            "(parameters are inputs of a split step, so this is a model with huge constants)")
    return data


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
