"""Saved ONNX model files: loading and validating them, their input/output signatures, and
running them once on checked feeds (what Trainer, `gcompile run` and `build --check` share).

Everything here works from the ONNX file alone, so it handles any model, not only gcompile's.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ..errors import GcompileError, InputError
from ..ir.dims import bind, format_shape
from .providers import PROVIDERS


def load(path):
    """An onnx.ModelProto from `path`; a GcompileError for a missing, unreadable or corrupt file
    or a missing external data file.

    Weights kept in external data files are not read (describing and feeding a model needs
    only their shapes); onnxruntime reads them itself when given the model's path.
    """
    import onnx
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise GcompileError(f"{path}: no such file")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as err:
        raise GcompileError(f"{path} is not a valid ONNX model ({first_line(err)})") from None
    folder = os.path.dirname(os.path.abspath(path))
    missing = sorted({loc for loc in external_files(model) if not os.path.isfile(os.path.join(folder, loc))})
    if missing:
        raise GcompileError(f"{path} keeps its weights in {', '.join(missing)}, which is not beside it in "
                            f"{folder}: copy the data file(s) along with the .onnx")
    try:
        onnx.checker.check_model(path)   # from the path: the checker follows external data itself
    except Exception as err:
        raise GcompileError(f"{path} is not a valid ONNX model ({first_line(err)})") from None
    return model


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (onnx and onnxruntime errors run on for pages)."""
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def external_files(model) -> list[str]:
    """The external data locations the model's initializers name (relative to its folder)."""
    from onnx import TensorProto
    return [entry.value for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL
            for entry in t.external_data if entry.key == "location"]


def opset_of(model) -> int | None:
    """The model's default-domain (ai.onnx) opset."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None)


def check_runnable(model, path) -> None:
    """A clear error for a model newer than the installed onnxruntime (opset or IR version),
    instead of onnxruntime's own message at session creation."""
    from ..lowering.versions import runtime_limits
    max_ir, max_opset = runtime_limits()
    opset = opset_of(model)
    if opset is not None and opset > max_opset:
        raise GcompileError(f"{path} uses ONNX opset {opset}, newer than the installed onnxruntime supports "
                            f"(opset {max_opset} at most): re-export it with opset <= {max_opset} "
                            "or upgrade onnxruntime")
    if model.ir_version > max_ir:
        raise GcompileError(f"{path} has ONNX IR version {model.ir_version}, newer than the installed "
                            f"onnxruntime reads ({max_ir} at most): re-export it or upgrade onnxruntime")


def _dims(value_info) -> tuple:
    dims = value_info.type.tensor_type.shape.dim
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def _dtype(value_info) -> np.dtype:
    from onnx import helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type))


def signature(values) -> list[dict]:
    """[{name, shape, dtype}] for ONNX graph inputs or outputs (symbolic dims as strings)."""
    return [{"name": v.name, "shape": list(_dims(v)), "dtype": _dtype(v).name} for v in values]


def format_sig(entry: dict) -> str:
    """'name: dtype[shape]' for one signature() entry."""
    return f"{entry['name']}: {entry['dtype']}{format_shape(tuple(entry['shape']))}"


def graph_inputs(model) -> list:
    """Inputs a caller must feed (initializers listed as inputs by old exporters are optional)."""
    init = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in init]


def random_feeds(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs fitting the model's declared inputs; symbols are bound to 2, 3, 4, ...
    in order of first appearance; integers are 0 or 1 (valid labels and indices), bools random."""
    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    feeds = {}
    for v in graph_inputs(model):
        shape = tuple(d if isinstance(d, int) else sizes.setdefault(d, 2 + len(sizes)) for d in _dims(v))
        dtype = _dtype(v)
        if dtype.kind == "f":
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[v.name] = rng.random(shape) < 0.5
        else:
            feeds[v.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feeds


def check_feeds(model, feeds: dict) -> dict[str, np.ndarray]:
    """Feeds checked against the model's inputs: names, dtypes, ranks, fixed dims, and one
    size per symbol across all inputs. Errors name the input and both shapes."""
    inputs = graph_inputs(model)
    names = [v.name for v in inputs]
    missing = [n for n in names if n not in feeds]
    extra = [n for n in feeds if n not in names]
    if missing or extra:
        parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + \
                ([f"unexpected {', '.join(map(repr, extra))}"] if extra else [])
        raise InputError(f"inputs do not match the model: {'; '.join(parts)} (the model takes "
                         + ", ".join(format_sig(e) for e in signature(inputs)) + ")")
    bound: dict[str, tuple[int, str]] = {}
    checked = {}
    for v in inputs:
        arr, want, dtype = np.asarray(feeds[v.name]), _dims(v), _dtype(v)
        expected = f"{dtype.name}{format_shape(want)}"
        got = f"{arr.dtype.name}{format_shape(arr.shape)}"
        if arr.dtype != dtype or arr.ndim != len(want) or any(
                isinstance(d, int) and d != n for d, n in zip(want, arr.shape)):
            raise InputError(f"input {v.name!r}: expected {expected}, got {got}")
        conflict = bind(bound, want, arr.shape, v.name)
        if conflict:
            symbol, n, first_n, first_name = conflict
            raise InputError(f"symbolic dim {symbol!r} is {first_n} in input {first_name!r} but {n} in "
                             f"input {v.name!r} (expected {expected}, got {got})")
        checked[v.name] = np.ascontiguousarray(arr)
    return checked


def run(session, model, feeds: dict) -> dict:
    """Run a model's onnxruntime session once; returns outputs (name -> array), the provider
    that ran and the run time in ms."""
    names = [o.name for o in model.graph.output]
    checked = check_feeds(model, feeds)
    start = time.perf_counter()
    values = session.run(names, checked)
    elapsed = time.perf_counter() - start
    used = {v: k for k, v in PROVIDERS.items()}.get(session.get_providers()[0], session.get_providers()[0])
    return {"outputs": dict(zip(names, values)), "provider": used, "run_ms": 1e3 * elapsed}
