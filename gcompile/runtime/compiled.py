"""gc.compile: trace -> ONNX -> an onnxruntime session, wrapped as a numpy-in, numpy-out callable."""
from __future__ import annotations

import numpy as np

from ..errors import GcompileError, InputError
from ..frontend import pytree
from ..frontend.trace import Traced, trace
from ..ir.dims import format_shape
from ..lowering import to_onnx
from .files import atomic_write
from .providers import make_session, resolve_provider


_ORT_TYPES = {f"tensor({name})": np.dtype(dt) for name, dt in [
    ("float", "float32"), ("double", "float64"), ("float16", "float16"), ("int64", "int64"), ("int32", "int32"),
    ("int16", "int16"), ("int8", "int8"), ("uint8", "uint8"), ("bool", "bool")]}


def _ort_value_type():
    import onnxruntime as ort
    return ort.OrtValue


class CompiledFunction:
    """A traced function lowered to ONNX. Call it with numpy arrays (or OrtValues from `to_device`);
    `.model` is the ModelProto, `.provider` the execution provider that runs it."""

    def __init__(self, traced: Traced, model, provider: str, float64_ops: list[str]):
        self.traced = traced
        self.model = model
        self.provider = provider
        if provider == "cpu" and float64_ops:
            raise GcompileError("onnxruntime's CPU provider has no float64 kernel for: " + "; ".join(float64_ops)
                                + ". Compile this function in float32, or run the saved model on a runtime "
                                  "that has these kernels")
        self._session = make_session(model.SerializeToString(), provider)
        self._output_names = list(traced.graph.output_names)

    @property
    def graph(self):
        return self.traced.graph

    @property
    def input_names(self) -> list[str]:
        return list(self.traced.input_names)

    def save(self, path) -> None:
        """Write the ONNX model to `path` atomically."""
        atomic_write(path, self.model.SerializeToString())

    def check_inputs(self, args) -> dict:
        """Feeds for onnxruntime, after checking count, dtype and shape (symbols bound consistently)."""
        specs, names = self.traced.specs, self.traced.input_names
        if len(args) != len(specs):
            raise InputError(f"{self.traced.name} takes {len(specs)} inputs ({', '.join(names)}), got {len(args)}")
        feeds, bindings = {}, {}
        for name, s, value in zip(names, specs, args):
            if isinstance(value, _ort_value_type()):
                shape, dtype = tuple(value.shape()), _ORT_TYPES.get(value.data_type())
            else:
                value = np.require(np.asarray(value), requirements="C")  # keeps 0-d inputs 0-d
                shape, dtype = value.shape, value.dtype
            if dtype != s.dtype:
                raise InputError(f"input {name!r}: expected dtype {s.dtype.name}, got {np.dtype(dtype).name}")
            if len(shape) != len(s.shape) or any(isinstance(d, int) and d != n for d, n in zip(s.shape, shape)):
                raise InputError(f"input {name!r}: expected shape {format_shape(s.shape)}, got {format_shape(shape)}")
            for d, n in zip(s.shape, shape):
                if isinstance(d, str) and bindings.setdefault(d, (n, name))[0] != n:
                    other_n, other = bindings[d]
                    raise InputError(f"symbolic dim {d!r} is {other_n} in input {other!r} but {n} in input {name!r} "
                                     f"(shape {format_shape(shape)})")
            feeds[name] = value
        return feeds

    def to_device(self, array):
        """`array` as an onnxruntime OrtValue on this function's device. Passing OrtValues instead of
        numpy arrays on repeated calls (parameters in a loop) skips the host-to-device copy."""
        import onnxruntime as ort
        device = "cuda" if self.provider == "cuda" else "cpu"
        return ort.OrtValue.ortvalue_from_numpy(np.require(np.asarray(array), requirements="C"), device, 0)

    def run_flat(self, *args) -> list[np.ndarray]:
        feeds = self.check_inputs(args)
        if not any(isinstance(v, _ort_value_type()) for v in feeds.values()):
            return self._session.run(self._output_names, feeds)
        binding = self._session.io_binding()
        for name, value in feeds.items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for name in self._output_names:
            binding.bind_output(name, "cpu")
        self._session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

    def __call__(self, *args):
        return pytree.unflatten(self.traced.out_tree, self.run_flat(*args))


def compile(fn, *args, provider: str = "auto", opset: int | None = None, optimize: int = 2,
            name: str | None = None) -> CompiledFunction:
    """Trace `fn` with one graph input per argument (gc.spec or example array) and compile it.

    optimize: 0 runs no graph pass, 1 dead code and common subexpressions, 2 (default) also
    constant folding and algebraic simplification.
    """
    traced = trace(fn, args, name=name)
    return compile_traced(traced, provider=provider, opset=opset, optimize=optimize)


def compile_traced(traced: Traced, provider: str = "auto", opset: int | None = None,
                   optimize: int = 2) -> CompiledFunction:
    from ..passes import optimize as run_passes
    resolved = resolve_provider(provider)
    run_passes(traced.graph, optimize)
    model, float64_ops = to_onnx(traced.graph, traced.input_names, opset, name=traced.name)
    return CompiledFunction(traced, model, resolved, float64_ops)
