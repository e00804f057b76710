"""`gcompile build`: import a model file, trace and lower every @gc.export function, write
DIR/<name>.onnx (with DIR/<name>.onnx.<hash>.data for a large one) and DIR/manifest.json.

A build changes DIR as one set:
- it holds DIR's lock (runtime.files.folder_lock) from start to end: a second build into DIR
  stops at once with an error naming the holder; a killed build's lock dies with it;
- every function is traced, lowered (and, with check=True, run) before the first byte is
  written; then every file is written in full to a temporary name in DIR (runtime.files.
  write_files): a failure up to here (an error, a full disk, a kill) leaves DIR's files as
  they were, and the next write into DIR removes a killed build's temporary files;
- then the files are renamed into place: the external data files (named by their content,
  so an old .onnx keeps its own data), the .onnx files, manifest.json last; then the files
  of the previous build that the new manifest no longer lists are deleted. Those are listed in
  DIR/.gcompile-removing.json (runtime.modelfile.REMOVING), renamed into place before the
  manifest and deleted after them: a build killed before it removed them leaves the list, the
  next build removes them (where they still hold what was recorded), and loaders refuse them
  meanwhile. Only files the old manifest or such a list names, with the names a build writes
  (NAME.onnx, its data files, the web files), are ever removed; other files in DIR never change.
A reader thus sees at every instant whole files, each .onnx with its own data; only during the
renames (no data is written then) can a new .onnx sit beside the old manifest, and every gcompile
loader refuses such a file (its sha256 is not the manifest's). A build killed exactly there
leaves that state until the next build.

The output depends only on the model file: node names, initializer order and the manifest are
deterministic (no timestamps), so two builds give byte-identical files.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import itertools
import json
import os
import re
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ..errors import GcompileError
from ..frontend import source
from ..ir.dtypes import is_float
from ..logs import logger, phase, progress, timings
from ..lowering import to_onnx
from ..lowering.serialize import EXTERNAL_DATA_THRESHOLD, Serialized, serialize
from ..lowering.targets import DEFAULT_TARGET
from ..passes import optimize as run_passes
from ..runtime import modelfile
from ..runtime.compiled import load_session
from ..runtime.files import folder_lock, write_files
from ..runtime.providers import resolve_provider
from ..version import __version__
from . import web
from .describe import describe
from .marks import Export, export_info, exported_functions

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # gcompile/, not artifacts/
_module_ids = itertools.count()
MANIFEST = "manifest.json"
_OWN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.onnx(\.[0-9a-f]{16}\.data|\.data)?")   # NAME.onnx, its data files


@dataclass
class BuildResult:
    out_dir: str
    manifest: dict
    checks: dict = field(default_factory=dict)   # artifact name -> modelfile.run() result
    timings: dict = field(default_factory=dict)  # artifact name -> logs.Timings (trace, grad, passes, lower, check)


def user_frame(err: BaseException) -> str:
    """'file:line' of the innermost traceback frame of the user's (frontend.source.user_frame), or ''."""
    found = source.user_frame((f.filename, f.lineno or 0) for f in reversed(traceback.extract_tb(err.__traceback__)))
    return f"{display_path(found[0])}:{found[1]}" if found else ""


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
        if user_frame(err):   # raised in a line of the model's (eval, compile), not by compiling its text
            raise _user_error(f"importing {path} failed", err) from None
        raise _syntax_error(path, err) from None
    except (Exception, SystemExit) as err:
        sys.modules.pop(name, None)
        if is_internal(err) and not isinstance(err, GcompileError):
            raise
        raise _user_error(f"importing {path} failed", err) from None
    return module


def _syntax_error(path: str, err: SyntaxError) -> GcompileError:
    """A model file that does not compile, named at its line, with the line where it is printable
    text. Python names no line for a NUL byte: a binary file is named at the line of its first."""
    line, hint = err.lineno, ""
    if line is None:
        with open(path, "rb") as fh:
            data = fh.read()
        nul = data.find(b"\0")
        if nul >= 0:
            line, hint = data.count(b"\n", 0, nul) + 1, " (a binary file, not Python source?)"
    text = (err.text or "").strip()
    shown = f"\n    {text}" if text and text.isprintable() and "\ufffd" not in text else ""   # not undecodable bytes
    where = display_path(path) + (f":{line}" if line else "")
    return GcompileError(f"{where}: syntax error: {err.msg}{hint}{shown}")


def _trace_one(fn: Callable, info: Export, opset: int | None, passes: Callable,
               model_path: str, value_types: bool, target: str) -> tuple[Export, onnx.ModelProto, list[str]]:
    code = getattr(fn, "__code__", None)
    where = f"{model_path}:{code.co_firstlineno}" if code else model_path
    try:
        with phase("trace"):
            traced = info.trace(fn)
        logger.debug("%s: traced %d nodes", info.name, len(traced.graph))
        with phase("passes"):
            passes(traced.graph)
        logger.debug("%s: %d nodes after the graph passes", info.name, len(traced.graph))
        with phase("lower"):
            model, float64_ops = to_onnx(traced.graph, traced.input_names, opset, name=info.name,
                                         value_types=value_types, target=target)
        info.finish(model)
    except GcompileError as err:
        raise GcompileError(f"cannot build {info.name!r} ({where}): {err}") from None
    except (Exception, SystemExit) as err:   # sys.exit() in the user's function is the user's error too
        if is_internal(err):
            raise
        raise _user_error(f"cannot build {info.name!r} ({where})", err) from None
    return info, model, float64_ops


def _trace_all(module, model_path: str, opset, passes: Callable, later: int, value_types: bool,
               target: str) -> list:
    functions = [(fn, info) for fn in exported_functions(module) if (info := export_info(fn)) is not None]
    if not functions:
        raise GcompileError(f"{model_path} has no exported function: mark the functions to build with "
                            "@gc.export(x=gc.spec(shape, dtype), ...)")
    names = [info.name for _, info in functions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise GcompileError(f"{model_path}: two exported functions are named {duplicates[0]!r}; "
                            "rename one with @gc.export(name=..., ...)")
    logger.debug("%s: exported %s", model_path, ", ".join(names))
    built = []
    with progress(None, "build", count_phases=True) as bar:
        bar.add_total(len(functions) * (len(TRACE_PHASES) + later))
        for fn, info in functions:
            bar.step(info.name)
            with timings() as times:
                built.append((*_trace_one(fn, info, opset, passes, model_path, value_types, target), times))
            logger.info("%s: %s", info.name, times.format())
    return built


TRACE_PHASES = ("trace", "passes", "lower")   # per function, in lower_all (grad runs inside trace)


def lower_all(model, opset: int | None = None, optimize: int = 2, recompute: bool = False,
              later: int = 0, value_types: bool = False, target: str = DEFAULT_TARGET) -> tuple[str, list]:
    """(model path, [(export info, ONNX model, float64-only ops, timings)]) for every @gc.export
    function of `model` (a path or an imported module), in source order. Each phase shows on the
    active progress display; `later` is how many phases per function the caller runs afterwards
    (so the display's total is right from the start). `value_types` records every value's type in
    the models (to_onnx), for drawing them; `target` is the runtime they are lowered for
    (lowering/targets)."""
    passes = functools.partial(run_passes, level=optimize, recompute=recompute)
    if isinstance(model, types.ModuleType):
        model_path = getattr(model, "__file__", None) or model.__name__
        return model_path, _trace_all(model, model_path, opset, passes, later, value_types, target)
    model_path = os.fspath(model)
    with _on_path(os.path.dirname(os.path.abspath(model_path))), progress(1, "build", count_phases=True):
        with phase("import"):
            module = load_module(model_path)
        return model_path, _trace_all(module, model_path, opset, passes, later, value_types, target)


def _check(name: str, serialized: Serialized, model, float64_ops, provider: str, feeds: dict) -> dict:
    if provider == "cpu" and float64_ops:
        raise GcompileError(f"--check of {name!r}: onnxruntime's CPU provider has no float64 kernel for "
                            + "; ".join(float64_ops) + ". Export this function in float32 to run it on CPU")
    start = time.perf_counter()
    session = load_session(serialized, provider, nodes=len(model.graph.node))   # the very bytes about to be written
    load_ms = 1e3 * (time.perf_counter() - start)
    result = {**modelfile.run(session, model, feeds), "load_ms": load_ms}
    for out, value in result["outputs"].items():
        if is_float(value.dtype) and not np.all(np.isfinite(value)):
            raise GcompileError(f"--check of {name!r}: output {out!r} has non-finite values on random inputs")
    return result


def build(model, out_dir, opset: int | None = None, check: bool = False, provider: str = "auto",
          optimize: int = 2, external_data_threshold: int = EXTERNAL_DATA_THRESHOLD,
          recompute: bool = False, target: str = DEFAULT_TARGET) -> BuildResult:
    """Build every @gc.export function of `model` (a path or an imported module) into `out_dir`.

    opset, optimize and recompute mean what they mean for gc.compile; `target` is the runtime the
    artifacts are lowered for (default: portable, any ONNX runtime; docs/targets.md), recorded in
    each model's metadata and the manifest; target "web" builds the portable models and adds the
    JavaScript module and each training step's starting values (artifacts/web.py); check runs every artifact on
    random inputs of its specs (on `provider`) before anything is written. An artifact of
    `external_data_threshold` bytes or more keeps its weights in <name>.onnx.<hash>.data beside it.
    The folder is locked for the whole build and changes as one set (see the module docstring).
    """
    out_dir = os.fspath(out_dir)
    for_web = target == "web"
    lowered_for = web.LOWERED_FOR if for_web else target
    with _output_folder(out_dir), progress(1, "build", count_phases=True) as bar:   # 1: the write
        model_path, built = lower_all(model, opset, optimize, recompute, later=2 if check else 1, target=lowered_for)
        entries, weights_files, model_files, web_files, checks, times = [], [], [], [], {}, {}
        resolved = resolve_provider(provider) if check else None
        for info, onnx_model, float64_ops, timed in built:
            bar.step(info.name)
            file_name = f"{info.name}.onnx"
            with phase("serialize", into=timed):
                serialized = serialize(onnx_model, file_name, external_data_threshold)
            logger.debug("%s: %d ONNX nodes, %d initializers, %d bytes%s", info.name, len(onnx_model.graph.node),
                         len(onnx_model.graph.initializer), len(serialized[0]),
                         f" + {len(serialized[1])} bytes in {serialized[2]}" if serialized[1] is not None else "")
            if resolved is not None:   # --check
                try:
                    feeds = info.check_feeds(onnx_model)
                except GcompileError as err:
                    raise GcompileError(f"--check of {info.name!r}: {err}") from None
                logger.debug("%s: check feeds %s", info.name,
                             ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in feeds.items()))
                with phase("check", into=timed):
                    checks[info.name] = _check(info.name, serialized, onnx_model, float64_ops, resolved, feeds)
                logger.info("%s: check on %s %.1f ms", info.name, resolved, 1e3 * timed["check"])
            times[info.name] = timed
            data, weights, location = serialized
            entry = {"name": info.name, "file": file_name, **describe(onnx_model),
                     "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), **info.manifest_extra()}
            initial = info.initial_values() if for_web else None
            if initial is not None:
                entry["init"] = web.init_file(info.name)
                web_files.append((entry["init"], web.init_bytes(initial)))
            if weights is not None and location is not None:
                entry["external_data"] = {"file": location, "bytes": len(weights),
                                          "sha256": hashlib.sha256(weights).hexdigest()}
                weights_files.append((location, weights))
            entries.append(entry)
            model_files.append((file_name, data))
        manifest: dict[str, Any] = {"gcompile_version": __version__, "source": os.path.basename(model_path),
                                    "artifacts": entries}
        if for_web:
            web_files += web.assets()
            manifest["web"] = {"module": web.MODULE, "types": web.TYPES}
        files = weights_files + model_files + web_files + [(MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())]
        stale = {n: h for n, h in _previous_files(out_dir).items() if n not in {name for name, _ in files}}
        if stale:   # renamed into place first: see modelfile.REMOVING
            files.insert(0, (modelfile.REMOVING, (json.dumps(stale, indent=1, sort_keys=True) + "\n").encode()))
        logger.debug("writing %s to %s%s", ", ".join(name for name, _ in files), out_dir,
                     f"; removing {', '.join(sorted(stale))}" if stale else "")
        bar.step("")
        try:
            with phase("write"):
                write_files(out_dir, files, remove=sorted(stale))
        except OSError as err:
            raise GcompileError(f"cannot write the build to {out_dir!r}: {err.strerror or err}") from None
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(out_dir, modelfile.REMOVING))
    return BuildResult(out_dir, manifest, checks, times)


@contextlib.contextmanager
def _output_folder(out_dir: str):
    """Create `out_dir` if needed and hold its lock; a build that fails removes the folders it created."""
    created = []
    folder = os.path.abspath(out_dir)
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        created.append(folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(out_dir, exist_ok=True)
        lock = folder_lock(out_dir)
    except OSError as err:
        raise GcompileError(f"cannot write the build to {out_dir!r}: {err.strerror or err}") from None
    try:
        with lock:
            yield
    except BaseException:
        for folder in created:   # innermost first; one that is not empty stays
            try:
                os.rmdir(folder)
            except OSError:
                break
        raise


def _previous_files(out_dir: str) -> dict[str, str]:
    """{name: sha256} of the files earlier builds wrote into `out_dir` that are still there: those
    its manifest lists, and those a build stopped before removing them left in modelfile.REMOVING
    that still hold what it recorded (a file of that name put there since is not the build's).
    Only names a build writes count (NAME.onnx and its data files; for the web, artifacts/web.py's),
    so a hand-edited list never reaches other files. A manifest that cannot be read lists none."""
    found: dict[str, str] = {}
    for name, digest in modelfile.read_removing(out_dir).items():
        if _buildable(name) and _sha256(os.path.join(out_dir, name)) == digest:
            found[name] = digest
    try:
        manifest = modelfile.read_manifest(out_dir) or {}
    except GcompileError:
        manifest = {}
    listed = []
    for entry in manifest.get("artifacts", []):
        external = entry.get("external_data")
        listed += [(entry.get("file"), entry.get("sha256")),
                   (external.get("file"), external.get("sha256")) if isinstance(external, dict) else (None, None)]
    listed += [(name, None) for name in web.own_files(manifest)]
    for name, digest in listed:
        if isinstance(name, str) and _buildable(name) and os.path.isfile(os.path.join(out_dir, name)):
            recorded = digest if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) else None
            if (recorded := recorded or _sha256(os.path.join(out_dir, name))) is not None:
                found[name] = recorded
    return found


def _buildable(name: str) -> bool:
    """Whether `name` is a file name a build writes (other than manifest.json)."""
    return bool(_OWN.fullmatch(name)) or web.is_own_file(name)


def _sha256(path: str) -> str | None:
    """The sha256 of the file at `path`, None where it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()
