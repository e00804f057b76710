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


class CompiledFunction:
    """A traced function lowered to ONNX. Call it with numpy arrays; `.model` is the ModelProto."""

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
        specs, names = self.traced.specs, self.traced.input_names
        if len(args) != len(specs):
            raise InputError(f"{self.traced.name} takes {len(specs)} inputs ({', '.join(names)}), got {len(args)}")
        feeds, bindings = {}, {}
        for name, s, value in zip(names, specs, args):
            arr = np.asarray(value)
            if arr.dtype != s.dtype:
                raise InputError(f"input {name!r}: expected dtype {s.dtype.name}, got {arr.dtype.name}")
            if arr.ndim != len(s.shape):
                raise InputError(f"input {name!r}: expected shape {format_shape(s.shape)}, got {format_shape(arr.shape)}")
            for d, n in zip(s.shape, arr.shape):
                if isinstance(d, int):
                    if d != n:
                        raise InputError(f"input {name!r}: expected shape {format_shape(s.shape)}, "
                                         f"got {format_shape(arr.shape)}")
                elif bindings.setdefault(d, (n, name))[0] != n:
                    other_n, other = bindings[d]
                    raise InputError(f"symbolic dim {d!r} is {other_n} in input {other!r} but {n} in input {name!r} "
                                     f"(shape {format_shape(arr.shape)})")
            feeds[name] = np.require(arr, requirements="C")  # keeps 0-d inputs 0-d
        return feeds

    def run_flat(self, *args) -> list[np.ndarray]:
        return self._session.run(self._output_names, self.check_inputs(args))

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
