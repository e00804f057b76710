"""gc.compile: trace -> ONNX -> an onnxruntime session, wrapped as a numpy-in, numpy-out callable."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from numpy.typing import ArrayLike

from ..errors import GcompileError, InputError
from ..frontend import pytree
from ..frontend.trace import Traced
from ..ir import dtypes
from ..ir.dims import astype_hint, bind, dtype_name, format_shape
from ..ir.graph import Graph
from ..lowering import to_onnx
from ..lowering.lower import ORDER_KEY, TARGET_KEY, file_order
from ..lowering.serialize import EXTERNAL_DATA_THRESHOLD, Serialized, serialize
from ..lowering.targets import DEFAULT_TARGET, target_for_provider
from . import modelfile
from .host_types import from_host, needs_host_types, to_host, with_host_types
from .providers import external_data_from_memory, make_session, resolve_provider
from .subnormals import flushed

_ORT_TYPES = {f"tensor({name})": np.dtype(dt) for name, dt in [
    ("float", "float32"), ("double", "float64"), ("float16", "float16"), ("int64", "int64"), ("int32", "int32"),
    ("int16", "int16"), ("int8", "int8"), ("uint8", "uint8"), ("uint16", "uint16"), ("uint32", "uint32"),
    ("uint64", "uint64"), ("bool", "bool"), ("string", "str")]}


def _ort_value_type():
    import onnxruntime as ort
    return ort.OrtValue


def load_session(serialized: Serialized, provider: str, nodes: int | None = None, order=None):
    """An onnxruntime session for a serialised model (of `nodes` nodes, when known) and, for a
    model too large for one protobuf, its external data: handed over in memory, or, where the
    installed onnxruntime reads it only from beside a model path, written to a scratch folder
    with the model first. `order`: the model's nodes, when they are to run in the order written
    (providers.make_session)."""
    data, weights, location = serialized
    if weights is None or location is None:
        return make_session(data, provider, nodes=nodes, order=order)
    if external_data_from_memory():
        return make_session(data, provider, {location: weights}, nodes=nodes)
    try:
        with tempfile.TemporaryDirectory(prefix="gcompile-") as folder:
            for file_name, blob in ((location, weights), ("model.onnx", data)):
                with open(os.path.join(folder, file_name), "wb") as f:
                    f.write(blob)
            return make_session(os.path.join(folder, "model.onnx"), provider, nodes=nodes)
    except OSError as err:
        raise GcompileError(f"cannot write the model to a scratch folder, where this onnxruntime reads its "
                            f"external data from ({err.strerror or err}): free space in {tempfile.gettempdir()} or "
                            "set TMPDIR") from None


def non_finite(value: np.ndarray) -> str | None:
    """'2 NaN and 1 Inf value(s), the first at index (0, 1)' for a float array with any, else None."""
    if not (dtypes.is_float(value.dtype) or value.dtype in dtypes.NARROW_FLOATS or value.dtype.kind == "c"):
        return None               # (ml_dtypes' floats are kind 'V' or 'f')
    bad = ~np.isfinite(value)
    if not bad.any():
        return None
    nans = int(np.isnan(value).sum())
    counts = " and ".join(f"{n} {kind}" for n, kind in ((nans, "NaN"), (int(bad.sum()) - nans, "Inf")) if n)
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{counts} value(s), the first at index {first}"


class CompiledFunction:
    """A traced function lowered to ONNX. Call it with numpy arrays (or OrtValues from `to_device`);
    `.model` is the ModelProto, `.provider` the execution provider that runs it.

    check_numerics=True checks every call's float inputs (numpy arrays and OrtValues, copied from
    the device to be read) and its outputs for NaN and Inf and names the first offender, at the
    cost of a pass over the data.
    """

    def __init__(self, traced: Traced, model: onnx.ModelProto, provider: str, float64_ops: list[str],
                 check_numerics: bool = False) -> None:
        self.traced = traced
        self.model = model
        self.provider = provider
        self.check_numerics = check_numerics
        if provider == "cpu" and float64_ops:
            raise GcompileError("onnxruntime's CPU provider has no float64 kernel for: " + "; ".join(float64_ops)
                                + ". Compile this function in float32, or run the saved model on a runtime "
                                  "that has these kernels")
        if provider != "cuda" and any(t.dtype == dtypes.FLOAT4 for node in traced.graph.topo_order()
                                      for t in node.outputs):
            raise GcompileError("onnxruntime 1.31 has no kernel for float4_e2m1fn (not even Cast): this function "
                                "traces and exports (gc.export), but cannot run here; cast to float32 before it")
        self._host_types = needs_host_types(model)
        runnable = with_host_types(model) if self._host_types else model
        self._session = load_session(serialize(runnable, "model.onnx", EXTERNAL_DATA_THRESHOLD, seal=False), provider,
                                     nodes=len(runnable.graph.node), order=file_order(runnable))
        self._output_names = list(traced.graph.output_names)

    @property
    def graph(self) -> Graph:
        return self.traced.graph

    @property
    def input_names(self) -> list[str]:
        return list(self.traced.input_names)

    @property
    def target(self) -> str:
        """The runtime `.model` was lowered for (lowering/targets): the provider's own."""
        return {p.key: p.value for p in self.model.metadata_props}[TARGET_KEY]

    def model_for(self, target: str) -> onnx.ModelProto:
        """The model lowered for `target`: `.model` where it already is, else the same optimised
        graph lowered again, with `.model`'s metadata (a training step's layout) kept."""
        if target == self.target:
            return self.model
        opset = next(o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx"))
        model, _ = to_onnx(self.traced.graph, self.traced.input_names, opset, name=self.traced.name, target=target)
        for p in self.model.metadata_props:
            if p.key not in (TARGET_KEY, ORDER_KEY):
                model.metadata_props.add(key=p.key, value=p.value)
        return model

    def save(self, path: str | os.PathLike, external_data_threshold: int = EXTERNAL_DATA_THRESHOLD,
             target: str = DEFAULT_TARGET) -> None:
        """Write the ONNX model, lowered for `target` (default: portable, for any ONNX runtime;
        docs/targets.md), to `path`, sealed with its sha256 and atomically (runtime.modelfile.save:
        a model of `external_data_threshold` bytes or more, default 2 GiB, the protobuf limit,
        keeps its weights beside it in PATH.<hash>.data). Loading it verifies the seal."""
        modelfile.save(self.model_for(target), path, external_data_threshold)

    def check_inputs(self, args: Sequence) -> dict[str, Any]:
        """Feeds for onnxruntime, after checking count, dtype and shape (symbols bound consistently)."""
        specs, names = self.traced.specs, self.traced.input_names
        if len(args) != len(specs):
            raise InputError(f"{self.traced.name} takes {len(specs)} inputs ({', '.join(names)}), got {len(args)}")
        feeds: dict = {}
        bindings: dict[str, tuple[int, str]] = {}   # symbol -> (size, first input bound)
        for name, s, value in zip(names, specs, args):
            if isinstance(value, _ort_value_type()):
                shape, dtype = tuple(value.shape()), _ORT_TYPES.get(value.data_type())
            else:
                value = np.require(np.asarray(value), requirements="C")  # keeps 0-d inputs 0-d
                shape, dtype = value.shape, value.dtype
            if dtype != s.dtype:
                got = "an unknown dtype" if dtype is None else dtype_name(dtype)
                raise InputError(f"input {name!r}: expected dtype {s.dtype.name}, got {got}"
                                 f"{astype_hint(s.dtype, dtype) if dtype is not None else ''}")
            if len(shape) != len(s.shape) or any(isinstance(d, int) and d != n for d, n in zip(s.shape, shape)):
                raise InputError(f"input {name!r}: expected shape {format_shape(s.shape)}, got {format_shape(shape)}")
            conflict = bind(bindings, s.shape, shape, name)
            if conflict:
                symbol, n, other_n, other = conflict
                raise InputError(f"symbolic dim {symbol!r} is {other_n} in input {other!r} but {n} in input {name!r} "
                                 f"(shape {format_shape(shape)})")
            feeds[name] = value
        return feeds

    def to_device(self, array: ArrayLike) -> Any:
        """`array` as an onnxruntime OrtValue on this function's device. Passing OrtValues instead of
        numpy arrays on repeated calls (parameters in a loop) skips the host-to-device copy."""
        import onnxruntime as ort
        device = "cuda" if self.provider == "cuda" else "cpu"
        return ort.OrtValue.ortvalue_from_numpy(np.require(np.asarray(array), requirements="C"), device, 0)

    def run_flat(self, *args: Any) -> list[np.ndarray]:
        feeds = self.check_inputs(args)
        if not self.check_numerics:
            return self._run(feeds)
        for name, value in feeds.items():   # OrtValues too: the outputs' message says so
            host = value if isinstance(value, np.ndarray) else value.numpy()
            if (problem := non_finite(host)) is not None:
                raise InputError(f"input {name!r} of {self.traced.name} has {problem} (check_numerics=True)")
        outputs = self._run(feeds)
        for name, value in zip(self._output_names, outputs):
            if (problem := non_finite(value)) is not None:
                raise GcompileError(f"output {name!r} of {self.traced.name} has {problem} although every "
                                    "input is finite (check_numerics=True)")
        return outputs

    def _run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        if self._host_types:
            feeds = {name: to_host(v) if isinstance(v, np.ndarray) else v for name, v in feeds.items()}
            outputs = self._run_session(feeds)
            types = [self.graph.type_of(ref) for ref in self.graph.outputs]
            return [from_host(v, t.dtype) for v, t in zip(outputs, types)]
        return self._run_session(feeds)

    def _run_session(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        if not any(isinstance(v, _ort_value_type()) for v in feeds.values()):
            with flushed():
                return self._session.run(self._output_names, feeds)
        binding = self._session.io_binding()
        for name, value in feeds.items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for name in self._output_names:
            binding.bind_output(name, "cpu")
        with flushed():
            self._session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

    def flatten_args(self, args: Sequence) -> list:
        """The leaves of pytree arguments, each checked against the structure traced."""
        trees = self.traced.in_trees
        if all(t.is_leaf for t in trees):
            return list(args)
        if len(args) != len(trees):
            raise InputError(f"{self.traced.name} takes {len(trees)} arguments "
                             f"({', '.join(self.traced.arg_names)}), got {len(args)}")
        try:
            return [leaf for tree, name, value in zip(trees, self.traced.arg_names, args)
                    for leaf in pytree.flatten_like(tree, value, name)]
        except GcompileError as err:
            raise InputError(f"{self.traced.name}: argument {err}") from None

    def __call__(self, *args: Any) -> Any:
        """Run on numpy arrays (or pytrees of them, shaped as traced); returns the traced function's
        output structure with numpy arrays as leaves."""
        return pytree.unflatten(self.traced.out_tree, self.run_flat(*self.flatten_args(args)))


def compile_traced(traced: Traced, provider: str = "auto", opset: int | None = None,
                   optimize: int = 2, check_numerics: bool = False, recompute: bool = False,
                   target: str | None = None, memory_budget: int | None = None) -> CompiledFunction:
    """Optimise, lower for `target` (by default the provider's: lowering/targets) and load."""
    from ..passes import optimize as run_passes
    resolved = resolve_provider(provider)
    run_passes(traced.graph, optimize, recompute=recompute, memory_budget=memory_budget)
    model, float64_ops = to_onnx(traced.graph, traced.input_names, opset, name=traced.name,
                                 target=target or target_for_provider(resolved))
    return CompiledFunction(traced, model, resolved, float64_ops, check_numerics)
