"""map_model: evaluate a saved model (forward, gradient, HVP, ...) over a large dataset with Ray Data.

The dataset is read in blocks by Ray Data (Parquet files, or .npy files per model input), fed
through `map_batches` to a pool of actors that each hold one onnxruntime session of the model,
and written back as shards by Ray Data's write tasks, so no process ever holds the whole
dataset. Reading and writing reserve no CPU (num_cpus=0): with the actors holding every CPU of
the cluster, read and write tasks that each wanted one would never be scheduled (a deadlock).
Rows keep their order (Ray Data's preserve_order): shard files sort by name in row order, and
`read_shards` puts them back together.

A model whose data inputs all share a symbolic leading dim (and whose outputs carry it) is fed
whole batches; any other model is fed one row at a time (each row is one call: a gradient or HVP
model of a per-example function). Inputs that are not dataset columns are `constants`, fed
unchanged to every call (a model's parameters, an HVP's direction).
"""
from __future__ import annotations

import glob
import io
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import GcompileError, InputError
from ..ir.dims import format_shape
from ..runtime import modelfile, npz
from ..runtime.files import write_files
from ..runtime.providers import make_session
from ..runtime.subnormals import flushed
from .cluster import connect

__all__ = ["map_model", "read_shards"]

_PART = re.compile(r"part-\d{6}\.(parquet|npy)")
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _model_bytes(model: Any) -> tuple[bytes, Any]:
    """(serialised model, ModelProto) from a path, a ModelProto or a compiled function."""
    import onnx
    if isinstance(model, (str, os.PathLike)):
        with modelfile.opened(model) as f:
            if f.external:
                raise GcompileError(f"{model} keeps its weights in external data files; map_model sends one "
                                    "model file to every worker: save the model without external data")
            modelfile.check_runnable(f.model, model)
            return f.data, f.model
    proto = getattr(model, "model", model)
    if not isinstance(proto, onnx.ModelProto):
        raise GcompileError(f"map_model takes a model path, an onnx.ModelProto or a compiled function, got "
                            f"{type(model).__name__}")
    return proto.SerializeToString(), proto


class _Plan:
    """Which model inputs come from the data and which are constants, and how calls are made."""

    def __init__(self, model: Any, constants: Mapping[str, Any]) -> None:
        sig = {e["name"]: e for e in modelfile.signature(modelfile.graph_inputs(model))}
        unknown = [n for n in constants if n not in sig]
        if unknown:
            raise InputError(f"constants {', '.join(map(repr, unknown))} are not inputs of the model (it takes "
                             f"{', '.join(sig)})")
        self.constants = {n: np.asarray(v) for n, v in constants.items()}
        self.data = [n for n in sig if n not in constants]
        if not self.data:
            raise InputError("every model input is a constant: nothing to map over the dataset")
        self.outputs = [o.name for o in model.graph.output]
        out_sig = modelfile.signature(model.graph.output)
        leading = {sig[n]["shape"][0] if sig[n]["shape"] else None for n in self.data}
        symbol = leading.pop() if len(leading) == 1 else None
        self.batched = isinstance(symbol, str) and all(
            e["shape"] and e["shape"][0] == symbol for e in out_sig) and not any(
            symbol in e["shape"] for n, e in sig.items() if n in self.constants)
        self.signature = sig

    def columns(self, ds: Any) -> None:
        """Check, from the dataset's schema (no data is read), that it has a column for every data
        input, of the input's dtype and, per row, of its shape (without the batch dim when batched)."""
        schema = ds.schema()
        types = dict(zip(schema.names, schema.types))
        missing = [n for n in self.data if n not in types]
        if missing:
            raise InputError(f"the dataset has no column for model input(s) {', '.join(map(repr, missing))} (its "
                             f"columns: {', '.join(types)}); name the columns after the inputs or pass the input "
                             "as a constant")
        for name in self.data:
            dtype, shape = _row_type(types[name])
            want = self.signature[name]
            want_shape = tuple(want["shape"][1:] if self.batched else want["shape"])
            fits = shape is None or (len(shape) == len(want_shape) and all(
                not isinstance(w, int) or w == d for w, d in zip(want_shape, shape)))
            if (dtype is not None and dtype != np.dtype(want["dtype"])) or not fits:
                got = f"{dtype.name if dtype is not None else '?'}{format_shape(shape) if shape is not None else ''}"
                raise InputError(f"column {name!r} holds rows of {got}, but the model's input {name!r} takes "
                                 f"{want['dtype']}{format_shape(want_shape)} per row"
                                 + (f" (a batch of them: {want['dtype']}{format_shape(tuple(want['shape']))})"
                                    if self.batched else ""))


def _row_type(arrow_type: Any) -> tuple[np.dtype | None, tuple | None]:
    """(dtype, shape) of one row of a column of this Arrow type (Ray's tensor types, Arrow's
    fixed_shape_tensor, plain scalars); None where it is not known."""
    value_type = getattr(arrow_type, "value_type", None) or getattr(arrow_type, "scalar_type", None)
    shape = getattr(arrow_type, "shape", None)
    try:
        if value_type is not None and shape is not None:
            return np.dtype(value_type.to_pandas_dtype()), tuple(int(d) for d in shape)
        if hasattr(arrow_type, "to_pandas_dtype"):
            return np.dtype(arrow_type.to_pandas_dtype()), ()
    except (NotImplementedError, TypeError, ValueError):
        pass
    return None, None


class _Evaluator:
    """The map_batches callable: one onnxruntime session per actor, made once."""

    def __init__(self, model_ref: Any, provider: str, threads: int, plan: _Plan) -> None:
        import onnx
        import ray
        data = ray.get(model_ref)
        self.model = onnx.load_from_string(data)
        self.session = make_session(data, provider, threads=threads)
        self.plan = plan

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        checked = modelfile.check_feeds(self.model, {**feeds, **self.plan.constants})
        with flushed():
            return self.session.run(self.plan.outputs, checked)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feeds = {n: np.asarray(batch[n]) for n in self.plan.data}   # other columns are left behind
        if self.plan.batched:
            values = self._run(feeds)
        else:
            rows = len(next(iter(feeds.values())))
            per_row = [self._run({n: v[i] for n, v in feeds.items()}) for i in range(rows)]
            values = [np.stack([r[k] for r in per_row]) if per_row else np.empty((0,)) for k in
                      range(len(self.plan.outputs))]
        return dict(zip(self.plan.outputs, values))


def _sink_class():
    """The Datasink writing each write task's rows as one shard (defined on first use: it subclasses
    Ray's Datasink)."""
    from ray.data.block import BlockAccessor
    from ray.data.datasource import Datasink

    class ShardSink(Datasink):
        def __init__(self, folder: str, fmt: str, names: list[str]) -> None:
            self.folder, self.fmt, self.names = folder, fmt, names

        def write(self, blocks, ctx) -> int:
            parts = [BlockAccessor.for_block(b).to_numpy(self.names) for b in blocks]
            parts = [p for p in parts if len(p[self.names[0]])]
            if not parts:
                return 0
            columns = {n: np.concatenate([p[n] for p in parts]) for n in self.names}
            shard = f"part-{ctx.task_idx:06d}"
            if self.fmt == "npy":
                for name, value in columns.items():
                    buffer = io.BytesIO()
                    np.save(buffer, value, allow_pickle=False)
                    write_files(os.path.join(self.folder, name), [(f"{shard}.npy", buffer.getvalue())])
            else:
                write_files(self.folder, [(f"{shard}.parquet", _parquet_bytes(columns))])
            return len(columns[self.names[0]])

        def on_write_complete(self, write_result) -> None:
            self.rows = sum(write_result.write_returns)

    return ShardSink


def _parquet_bytes(columns: dict[str, np.ndarray]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    arrays = {n: pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(v)) if v.ndim > 1 else pa.array(v)
              for n, v in columns.items()}
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(arrays), sink)
    return sink.getvalue().to_pybytes()


def _npy_files(where: Any) -> list[str]:
    """Sorted .npy files of a file, a folder or a glob pattern, as absolute paths (workers run
    in other folders)."""
    where = os.path.abspath(os.fspath(where))
    if os.path.isdir(where):
        files = sorted(glob.glob(os.path.join(where, "*.npy")))
    else:
        files = sorted(glob.glob(where)) if any(c in where for c in "*?[") else [where] if os.path.isfile(where) else []
    if not files:
        raise GcompileError(f"no .npy files at {where!r}")
    return files


def _read_npy(ray: Any, files: list[str], column: str) -> Any:
    """The rows of .npy files, in file order, as the column `column`. (Ray Data's read_numpy takes
    no CPU reservation, so the files are read as bytes and decoded here.)"""
    def decode(batch: dict) -> dict:
        return {column: np.concatenate([npz.load_npy(io.BytesIO(b)) for b in batch["bytes"]])}
    return ray.data.read_binary_files(files, num_cpus=0).map_batches(decode, batch_size=1, batch_format="numpy",
                                                                     num_cpus=0)


def _dataset(ray: Any, data: Any, plan: _Plan) -> Any:
    """A Ray Dataset from a Parquet path, {input: .npy path(s)}, or a Dataset as it is."""
    if isinstance(data, ray.data.Dataset):
        return data
    if isinstance(data, Mapping):
        unknown = [n for n in data if n not in plan.data]
        if unknown:
            raise InputError(f"data for {', '.join(map(repr, unknown))}, which the model does not take from the "
                             f"dataset (its data inputs: {', '.join(plan.data)})")
        parts = [_read_npy(ray, _npy_files(data[n]), n) for n in plan.data if n in data]
        return parts[0].zip(*parts[1:]) if len(parts) > 1 else parts[0]
    if isinstance(data, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(data))
        try:
            plan.columns(ray.data.read_parquet(path, num_cpus=0))   # the schema only: no data is read
            return ray.data.read_parquet(path, columns=plan.data, num_cpus=0)
        except (ValueError, OSError) as err:   # pyarrow's ArrowInvalid is a ValueError
            raise GcompileError(f"cannot read {os.fspath(data)!r} as Parquet: {str(err).strip()[:500]}") from None
    raise GcompileError(f"data must be a Parquet file or folder, a dict {{input: .npy file/folder/glob}} or a Ray "
                        f"Dataset, got {type(data).__name__}")


def _check_local_data(data: Any, plan: _Plan) -> None:
    """Refuse data paths that hold nothing to read before starting Ray (which takes seconds): a
    path given as Parquet that is no Parquet file or folder (a .npy file, the usual slip), an
    input without .npy files."""
    if isinstance(data, Mapping):
        for name, where in data.items():
            if name in plan.data:
                _npy_files(where)
    elif isinstance(data, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(data))
        if not os.path.exists(path):
            raise GcompileError(f"no dataset at {os.fspath(data)!r}")
        if not (path.endswith(".parquet") if os.path.isfile(path) else
                any(f.endswith(".parquet") for _, _, files in os.walk(path) for f in files)):
            name = plan.data[0]
            raise GcompileError(f"no Parquet file at {os.fspath(data)!r}: data given as one path is a Parquet file or "
                                "a folder of them; give .npy files one per model input, as a dict {input: path} "
                                f"({{{name!r}: {os.fspath(data)!r}}}; on the command line NAME=PATH: "
                                f"{name}={os.fspath(data)})")


def map_model(model: Any, data: Any, out: str | os.PathLike, *, constants: Mapping[str, Any] | None = None,
              format: str = "parquet", batch_size: int = 1024, workers: int = 2, cpus_per_worker: float = 1.0,
              provider: str = "cpu", address: str | None = None, progress: bool = True) -> dict:
    """Evaluate `model` over every row of `data` on `workers` Ray actors, one session each, and
    write the outputs to the folder `out` as shards (see the module docstring).

    data: a Parquet file or folder whose columns are named after the model's inputs, a dict
    {input name: .npy file, folder or glob} (rows along each file's first axis), or a
    ray.data.Dataset. format: 'parquet' (OUT/part-NNNNNN.parquet, one column per output) or
    'npy' (OUT/<output>/part-NNNNNN.npy). Returns {"rows", "seconds", "batched", "out"}.
    """
    if format not in ("parquet", "npy"):
        raise GcompileError(f"format must be 'parquet' or 'npy', got {format!r}")
    if not isinstance(workers, int) or workers < 1 or batch_size < 1:
        raise GcompileError("workers and batch_size must be positive integers")
    serialised, proto = _model_bytes(model)
    plan = _Plan(proto, constants or {})
    out = os.path.abspath(os.fspath(out))
    _check_out(out, plan.outputs, format)
    _check_local_data(data, plan)
    ray = connect(address)
    context = ray.data.DataContext.get_current()
    before = context.execution_options.preserve_order, context.enable_progress_bars
    context.execution_options.preserve_order, context.enable_progress_bars = True, progress
    try:
        return _run(ray, serialised, plan, data, out, format, batch_size, workers, cpus_per_worker, provider)
    finally:
        context.execution_options.preserve_order, context.enable_progress_bars = before


def _run(ray: Any, serialised: bytes, plan: _Plan, data: Any, out: str, fmt: str, batch_size: int, workers: int,
         cpus_per_worker: float, provider: str) -> dict:
    cpus = ray.cluster_resources().get("CPU", 0)
    if workers * cpus_per_worker > cpus:
        raise GcompileError(f"{workers} workers of {cpus_per_worker:g} CPU(s) each need {workers * cpus_per_worker:g} "
                            f"CPUs, but the Ray cluster has {cpus:g}: use fewer workers")
    ds = _dataset(ray, data, plan)
    plan.columns(ds)
    start = time.perf_counter()
    mapped = ds.map_batches(
        _Evaluator, fn_constructor_args=(ray.put(serialised), provider, max(1, int(cpus_per_worker)), plan),
        batch_size=batch_size, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=cpus_per_worker)
    sink = _sink_class()(out, fmt, plan.outputs)
    try:
        mapped.write_datasink(sink, ray_remote_args={"num_cpus": 0})
    except Exception as err:
        raise _user_error(err) from None
    return {"rows": int(sink.rows), "seconds": time.perf_counter() - start, "batched": plan.batched, "out": out}


def _check_out(out: str, outputs: list[str], fmt: str) -> None:
    if fmt == "npy":
        odd = [n for n in outputs if not _SAFE.fullmatch(n)]
        if odd:
            raise GcompileError(f"output {odd[0]!r} is not a safe folder name for format='npy'; use format='parquet'")
    if os.path.isdir(out) and any(_PART.fullmatch(f) for _, _, files in os.walk(out) for f in files):
        raise GcompileError(f"{out} already holds shards (part-*.parquet/.npy) of an earlier run: remove them or "
                            "write to another folder")


def _user_error(err: BaseException) -> BaseException:
    """A GcompileError for a failed Ray Data run (Ray Data keeps only its own summary of a worker's
    exception; the worker's traceback is in the Ray Data log it names)."""
    ray_error = type(err).__module__.startswith("ray")
    return GcompileError(f"map_model failed on a worker: {str(err).strip()[:2000]}") if ray_error else err


def read_shards(out: str | os.PathLike) -> dict[str, np.ndarray]:
    """The outputs map_model wrote to `out`, concatenated in row order (for results that fit in memory)."""
    out = os.fspath(out)
    parquet = sorted(f for f in os.listdir(out) if f.endswith(".parquet") and _PART.fullmatch(f))
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq
        tables = [pq.read_table(os.path.join(out, f)) for f in parquet]
        columns: dict[str, list[np.ndarray]] = {}
        for table in tables:
            for name in table.column_names:
                column = table.column(name).combine_chunks()
                value = column.to_numpy_ndarray() if isinstance(column.type, pa.FixedShapeTensorType) \
                    else column.to_numpy(zero_copy_only=False)
                columns.setdefault(name, []).append(value)
        return {n: np.concatenate(v) for n, v in columns.items()}
    found = {}
    for name in sorted(os.listdir(out)):
        folder = os.path.join(out, name)
        files = sorted(f for f in os.listdir(folder) if _PART.fullmatch(f)) if os.path.isdir(folder) else []
        if files:
            found[name] = np.concatenate([npz.load_npy(os.path.join(folder, f)) for f in files])
    if not found:
        raise GcompileError(f"{out} holds no shards written by map_model")
    return found
