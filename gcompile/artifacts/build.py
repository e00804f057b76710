"""`gcompile build`: import a model file, trace and lower every @gc.export function, write
DIR/<name>.onnx and DIR/manifest.json.

All-or-nothing: every function is traced, lowered (and, with check=True, run) before the
first byte is written, so a failing build leaves the previous artifacts as they were.
The output depends only on the model file: node names, initializer order and the
manifest are deterministic (no timestamps), so two builds give byte-identical files.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import itertools
import json
import os
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..errors import GcompileError
from ..logs import logger, phase, progress, timings
from ..lowering import to_onnx
from ..lowering.serialize import EXTERNAL_DATA_THRESHOLD, external_data_name, serialize
from ..passes import optimize as run_passes
from ..runtime import modelfile
from ..runtime.compiled import load_session
from ..runtime.files import atomic_write
from ..runtime.providers import resolve_provider
from ..version import __version__
from .describe import describe
from .marks import Export, export_info, exported_functions

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # gcompile/, not artifacts/
_module_ids = itertools.count()


@dataclass
class BuildResult:
    out_dir: str
    manifest: dict
    checks: dict = field(default_factory=dict)   # artifact name -> modelfile.run() result
    timings: dict = field(default_factory=dict)  # artifact name -> logs.Timings (trace, grad, passes, lower, check)


def user_frame(err: BaseException) -> str:
    """'file:line' of the innermost traceback frame outside gcompile and importlib, or ''."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR + os.sep)
              and not f.filename.startswith("<frozen")]
    return f"{display_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def display_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it, else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith(os.pardir) else rel


def is_internal(err: BaseException) -> bool:
    """A non-gcompile exception raised from inside the gcompile package is a gcompile bug."""
    tb = traceback.extract_tb(err.__traceback__)
    return bool(tb) and os.path.abspath(tb[-1].filename).startswith(_PACKAGE_DIR + os.sep)


def _user_error(what: str, err: BaseException) -> GcompileError:
    where = user_frame(err)
    detail = str(err) if isinstance(err, GcompileError) else f"{type(err).__name__}: {err}"
    return GcompileError(f"{what}: {detail}{f' (at {where})' if where else ''}")


@contextlib.contextmanager
def _on_path(folder: str):
    """The model's folder on sys.path, so it can import its neighbours while imported and traced."""
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def load_module(path) -> types.ModuleType:
    """Import a model file under a fresh module name; user errors become a GcompileError
    that names the file and line."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise GcompileError(f"model file {path!r} not found")
    stem = "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    name = f"gcompile_model_{stem}_{next(_module_ids)}"
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    if spec is None or spec.loader is None:   # a suffix no importer handles, e.g. model.txt
        raise GcompileError(f"model file {path!r} cannot be imported as Python: give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        sys.modules.pop(name, None)
        line = f"\n    {err.text.strip()}" if err.text and err.text.strip() else ""
        where = f"{display_path(err.filename or path)}:{err.lineno}"
        raise GcompileError(f"{where}: syntax error: {err.msg}{line}") from None
    except (Exception, SystemExit) as err:
        sys.modules.pop(name, None)
        if is_internal(err) and not isinstance(err, GcompileError):
            raise
        raise _user_error(f"importing {path} failed", err) from None
    return module


def _trace_one(fn: Callable, info: Export, opset: int | None, passes: Callable,
               model_path: str) -> tuple[Export, onnx.ModelProto, list[str]]:
    code = getattr(fn, "__code__", None)
    where = f"{model_path}:{code.co_firstlineno}" if code else model_path
    try:
        with phase("trace"):
            traced = info.trace(fn)
        with phase("passes"):
            passes(traced.graph)
        with phase("lower"):
            model, float64_ops = to_onnx(traced.graph, traced.input_names, opset, name=info.name)
        info.finish(model)
    except GcompileError as err:
        raise GcompileError(f"cannot build {info.name!r} ({where}): {err}") from None
    except Exception as err:
        if is_internal(err):
            raise
        raise _user_error(f"cannot build {info.name!r} ({where})", err) from None
    return info, model, float64_ops


def _trace_all(module, model_path: str, opset, passes: Callable) -> list:
    functions = [(fn, info) for fn in exported_functions(module) if (info := export_info(fn)) is not None]
    if not functions:
        raise GcompileError(f"{model_path} has no exported function: mark the functions to build with "
                            "@gc.export(x=gc.spec(shape, dtype), ...)")
    names = [info.name for _, info in functions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise GcompileError(f"{model_path}: two exported functions are named {duplicates[0]!r}; "
                            "rename one with @gc.export(name=..., ...)")
    built = []
    with progress(len(functions), "build") as bar:
        for fn, info in functions:
            bar.step(info.name)
            with timings() as times:
                built.append((*_trace_one(fn, info, opset, passes, model_path), times))
            logger.info("%s: %s", info.name, times.format())
            bar.advance()
    return built


def lower_all(model, opset: int | None = None, optimize: int = 2, recompute: bool = False) -> tuple[str, list]:
    """(model path, [(export info, ONNX model, float64-only ops, timings)]) for every @gc.export
    function of `model` (a path or an imported module), in source order."""
    passes = functools.partial(run_passes, level=optimize, recompute=recompute)
    if isinstance(model, types.ModuleType):
        model_path = getattr(model, "__file__", None) or model.__name__
        return model_path, _trace_all(model, model_path, opset, passes)
    model_path = os.fspath(model)
    with _on_path(os.path.dirname(os.path.abspath(model_path))):
        return model_path, _trace_all(load_module(model_path), model_path, opset, passes)


def _check(name: str, data: bytes, weights: bytes | None, location: str, model, float64_ops,
           provider: str, feeds: dict) -> dict:
    if provider == "cpu" and float64_ops:
        raise GcompileError(f"--check of {name!r}: onnxruntime's CPU provider has no float64 kernel for "
                            + "; ".join(float64_ops) + ". Export this function in float32 to run it on CPU")
    start = time.perf_counter()
    session = load_session(data, weights, provider, location)   # the very bytes about to be written
    load_ms = 1e3 * (time.perf_counter() - start)
    result = {**modelfile.run(session, model, feeds), "load_ms": load_ms}
    for out, value in result["outputs"].items():
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise GcompileError(f"--check of {name!r}: output {out!r} has non-finite values on random inputs")
    return result


def build(model, out_dir, opset: int | None = None, check: bool = False, provider: str = "auto",
          optimize: int = 2, external_data_threshold: int = EXTERNAL_DATA_THRESHOLD,
          recompute: bool = False) -> BuildResult:
    """Build every @gc.export function of `model` (a path or an imported module) into `out_dir`.

    opset, optimize and recompute mean what they mean for gc.compile; check runs every artifact on
    random inputs of its specs (on `provider`) before anything is written. An artifact of
    `external_data_threshold` bytes or more keeps its weights in <name>.onnx.data beside it.
    """
    model_path, built = lower_all(model, opset, optimize, recompute)
    entries, blobs, checks, times = [], [], {}, {}
    resolved = resolve_provider(provider) if check else None
    for info, onnx_model, float64_ops, timed in built:
        file_name = f"{info.name}.onnx"
        location = external_data_name(file_name)
        data, weights = serialize(onnx_model, location, external_data_threshold)
        if resolved is not None:   # --check
            with timed.phase("check"):
                checks[info.name] = _check(info.name, data, weights, location, onnx_model, float64_ops, resolved,
                                           info.check_feeds(onnx_model))
            logger.info("%s: check on %s %.1f ms", info.name, resolved, 1e3 * timed["check"])
        times[info.name] = timed
        entry = {"name": info.name, "file": file_name, **describe(onnx_model),
                 "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), **info.manifest_extra()}
        if weights is not None:
            entry["external_data"] = {"file": location, "bytes": len(weights),
                                      "sha256": hashlib.sha256(weights).hexdigest()}
            blobs.append((location, weights))   # before the .onnx that refers to it
        entries.append(entry)
        blobs.append((entry["file"], data))
    manifest = {"gcompile_version": __version__, "source": os.path.basename(model_path), "artifacts": entries}
    out_dir = os.fspath(out_dir)
    blobs.append(("manifest.json", (json.dumps(manifest, indent=2) + "\n").encode()))
    try:
        for file_name, data in blobs:
            atomic_write(os.path.join(out_dir, file_name), data)
    except OSError as err:
        raise GcompileError(f"cannot write the build to {out_dir!r}: {err.strerror or err}") from None
    return BuildResult(out_dir, manifest, checks, times)
