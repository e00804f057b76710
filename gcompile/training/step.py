"""A whole training step as one ONNX model: gc.export_train_step (and the tracing behind @gc.export_train).

The step is traced as one function of (params, optimizer state, step counter, batch): the
user's loss, its gradient w.r.t. every parameter (gc.grad), and the optimizer's update
written with gcompile ops. Lowered, that is a single standard-ONNX model that any
onnxruntime (CPU or CUDA) can run, with no training extension. Names follow
gcompile.training.layout.StepLayout, which is also stored in the model's metadata.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import GcompileError
from ..frontend.spec import spec
from ..frontend.trace import Traced, argument_names, trace
from ..gradients.transforms import value_and_grad
from ..runtime.compiled import CompiledFunction, compile_traced
from .layout import StepLayout
from .optim import Optimizer, state_name

__all__ = ["TrainStep", "export_train_step"]


def check_params(params: Any, optimizer: Any) -> dict[str, np.ndarray]:
    """`params` as fresh numpy arrays, after checking names, dtypes and the optimizer."""
    if not isinstance(optimizer, Optimizer):
        raise GcompileError(f"optimizer must be a gc.optim optimizer (SGD, Adam, AdamW), got {optimizer!r}")
    if not isinstance(params, dict) or not params:
        raise GcompileError("params must be a non-empty dict {name: numpy array}")
    checked: dict[str, np.ndarray] = {}
    for name, value in params.items():
        arr = np.array(value)   # a copy: the initial values stay as exported
        if not isinstance(name, str) or not name:
            raise GcompileError(f"params: names must be non-empty strings, got {name!r}")
        if arr.dtype.kind != "f":
            raise GcompileError(f"params[{name!r}]: a parameter must be a floating-point array, got {arr.dtype.name}")
        checked[name] = arr
    return checked


def step_layout(params: dict, optimizer: Optimizer, batch_names) -> StepLayout:
    """The names of the step model: the optimizer declares a state slot per parameter."""
    state = tuple((state_name(p, slot), p, fill) for p in params for slot, fill in optimizer.slots)
    return StepLayout(tuple(params), state, tuple(batch_names))


def trace_step(loss_fn: Callable, params: dict[str, np.ndarray], optimizer: Optimizer, batch_specs: Sequence,
                batch_names: Sequence[str], name: str) -> tuple[Traced, StepLayout]:
    """(Traced step, its StepLayout)."""
    layout = step_layout(params, optimizer, batch_names)
    n_params, n_state = len(layout.params), len(layout.state)

    def step_fn(*flat):
        ps = flat[:n_params]
        state = dict(zip(layout.state_names, flat[n_params:n_params + n_state]))
        count, batch = flat[n_params + n_state], flat[n_params + n_state + 1:]
        loss, grads = value_and_grad(lambda *p: loss_fn(dict(zip(layout.params, p)), *batch),
                                     argnums=tuple(range(n_params)))(*ps)
        t = count + 1
        new_params, new_state = optimizer.update(dict(zip(layout.params, ps)), dict(zip(layout.params, grads)),
                                                 state, t)
        return {"loss": loss, **{layout.new(n): new_params[n] for n in layout.params},
                **{layout.new(n): new_state[n] for n in layout.state_names}, layout.new("step"): t}

    specs = [*params.values(), *(spec(params[p].shape, params[p].dtype) for _, p, _ in layout.state),
             spec((), "int64"), *batch_specs]
    return trace(step_fn, specs, name=name, input_names=list(layout.inputs)), layout


class TrainStep:
    """A compiled training step: one ONNX model (`.model`) and a session that runs it.

    Call it functionally with numpy arrays, step(params, state, count, *batch) ->
    (loss, new params, new state, new count), or hand it to gc.runtime.Trainer, which keeps
    everything on the device. `.params` holds the initial parameters it was exported with.
    """

    def __init__(self, compiled: CompiledFunction, layout: StepLayout, params: dict[str, np.ndarray]) -> None:
        self.compiled, self.layout, self.params = compiled, layout, params

    @property
    def model(self) -> onnx.ModelProto:
        return self.compiled.model

    @property
    def provider(self) -> str:
        return self.compiled.provider

    def save(self, path: str | os.PathLike, **options: Any) -> None:
        """Write the ONNX model to `path` atomically, as CompiledFunction.save (the layout
        travels in the model's metadata)."""
        self.compiled.save(path, **options)

    def initial_state(self) -> tuple[dict, np.ndarray]:
        """(optimizer state, step counter) before the first step."""
        return self.layout.initial_state(self.params)

    def __call__(self, params: dict[str, np.ndarray], state: dict[str, np.ndarray], count: int | np.ndarray,
                 *batch: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
        flat = [params[n] for n in self.layout.params] + [state[n] for n in self.layout.state_names]
        outs = self.compiled.run_flat(*flat, np.asarray(count, np.int64), *batch)
        n_params, n_state = len(self.layout.params), len(self.layout.state)
        return (outs[0], dict(zip(self.layout.params, outs[1:1 + n_params])),
                dict(zip(self.layout.state_names, outs[1 + n_params:1 + n_params + n_state])), outs[-1])


def export_train_step(loss_fn: Callable, params: dict[str, np.ndarray], optimizer: Optimizer, *batch_specs: Any,
                      provider: str = "auto", opset: int | None = None, optimize: int = 2,
                      name: str = "train_step") -> TrainStep:
    """Compile one training step of `loss_fn` into a single ONNX model.

    loss_fn(params, *batch) receives a dict {name: Tensor} and the batch Tensors and returns
    a floating-point scalar loss. `params` maps names to their initial numpy values; each
    `batch_specs` entry is a gc.spec or an example array, named after loss_fn's parameters.
    Model inputs: the parameters (their dict keys), the optimizer state ("<param>.<slot>"),
    "step" (int64, steps taken) and the batch; outputs: "loss", "<name>.new" for every
    parameter and state entry, and "step.new".
    """
    params = check_params(params, optimizer)
    batch_names = argument_names(loss_fn, 1 + len(batch_specs))[1:]
    traced, layout = trace_step(loss_fn, params, optimizer, batch_specs, batch_names, name)
    compiled = compile_traced(traced, provider=provider, opset=opset, optimize=optimize)
    layout.attach(compiled.model)
    return TrainStep(compiled, layout, params)
