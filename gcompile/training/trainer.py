"""gc.runtime.Trainer: runs exported training steps with parameters kept on the device.

A training-step model (gc.export_train_step, @gc.export_train; its names are a StepLayout)
maps (params, optimizer state, step counter, batch) to (loss, new params, new state, new
step counter). The Trainer keeps everything the step carries over in onnxruntime OrtValues
on the session's device, in two buffer sets bound through IO binding: each step reads one
set and writes the other, then they swap. Only the batch goes in and the loss comes out;
parameters are copied to numpy only when `.params` is read.

Parameters go in and come back in one structure: whatever pytree export_train_step was given
(a flat or nested dict, a gc.nn Module) or Trainer(path, params=...) is given, whose leaves are
matched to the step's inputs by dotted path ("layer1.w": a flat dict of such names is the same
parameters as the nested dict), and `.params` is that structure with the current values.
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from numpy.typing import ArrayLike

from ..errors import GcompileError, InputError, name_mismatch
from ..frontend import pytree
from ..ir.dims import astype_hint, format_type
from ..runtime import modelfile, npz
from ..runtime.modelfile import signature
from ..runtime.providers import PROVIDERS, make_session, resolve_provider
from .layout import StepLayout

if TYPE_CHECKING:
    from .step import TrainStep  # for the annotation only: running a saved step needs no tracing machinery

__all__ = ["Trainer"]


@contextlib.contextmanager
def _opened(step: Any) -> Iterator[tuple[onnx.ModelProto, Any, str | None, Callable[[str], Any]]]:
    """(ModelProto, default params (a pytree, as the step was exported with), default provider,
    session maker) from a compiled step, a ModelProto or a path; a path is read once and verified
    (modelfile.opened), and the session is made from those bytes."""
    if isinstance(step, (str, os.PathLike)):
        with modelfile.opened(step) as f:
            yield f.model, None, None, functools.partial(modelfile.session, f)
        return
    if isinstance(step, onnx.ModelProto):
        model, params, provider = step, None, None
    elif hasattr(step, "model") and hasattr(step, "params"):
        model, provider = step.model, getattr(step, "provider", None)
        params = step.tree({**step.params, **getattr(step, "buffers", {})})
    else:
        raise GcompileError(f"Trainer takes a compiled training step (gc.export_train_step), an onnx.ModelProto "
                            f"or the path of a saved training-step model, got {type(step).__name__}")
    nodes = len(model.graph.node)
    yield model, params, provider, functools.partial(make_session, model.SerializeToString(), nodes=nodes)


class Trainer:
    """Runs a training-step model step after step; parameters and state stay on the device.

    Trainer(step) with a compiled step starts from its parameters and buffers; Trainer(path_or_model,
    params=...) starts a saved step model from `params`: parameters and buffers in the structure the
    step was exported with (a nested dict, a gc.nn Module) or flat by dotted name (a module's
    state_dict() fits). `.params` gives them back in the structure they came in. The optimizer state
    and step counter start from the layout's initial values. provider: 'auto', 'cpu' or 'cuda'
    (default: the compiled step's provider, else 'auto'). hyperparams: {name: value or schedule}
    for the step's hyper-parameter inputs, a schedule being called with the number of steps taken
    (default: the values exported).
    """

    def __init__(self, step: TrainStep | onnx.ModelProto | str | os.PathLike, params: Any = None,
                 provider: str | None = None,
                 hyperparams: Mapping[str, float | Callable[[int], float]] | None = None) -> None:
        import onnxruntime as ort

        with _opened(step) as (model, default_params, default_provider, make):
            path = os.fspath(step) if isinstance(step, (str, os.PathLike)) else None
            self.layout = StepLayout.from_model(model, path)
            params = default_params if params is None else params
            if params is None:
                raise GcompileError("Trainer(path): give the initial parameters, Trainer(path, params={name: "
                                    f"array}}) with names {', '.join(self.layout.params + self.layout.buffers)}, "
                                    "or the nested dict or gc.nn Module the step was exported with")
            self.provider = resolve_provider(provider or default_provider or "auto")
            self._session = make(self.provider)
        leaves, self._tree = pytree.flatten(params)
        self._tree_names = pytree.paths(self._tree)
        self._device = "cuda" if self._session.get_providers()[0] == PROVIDERS["cuda"] else "cpu"
        self._types = {e["name"]: (np.dtype(e["dtype"]), tuple(e["shape"]))
                       for e in signature(list(model.graph.input) + list(model.graph.output))}
        self._loss = ort.OrtValue.ortvalue_from_shape_and_type([], self._types["loss"][0], "cpu", 0)
        self.hyperparams: dict[str, Any] = {name: default for name, default, _ in self.layout.hyper}
        unknown = sorted(set(hyperparams or {}) - set(self.hyperparams))
        if unknown:
            raise InputError(f"the training step has no hyper-parameter {unknown[0]!r} (it has: "
                             f"{', '.join(self.hyperparams) or 'none'})")
        self.hyperparams.update(hyperparams or {})
        given = {name: np.asarray(leaf) for name, leaf in zip(self._tree_names, leaves)}
        if self._tree.is_leaf or len(given) != len(leaves):
            raise GcompileError(f"Trainer: params must be a pytree of arrays (a dict by dotted name, a nested dict, "
                                f"a gc.nn Module), got {type(params).__name__}"
                                + ("" if self._tree.is_leaf else " whose paths name a leaf twice"))
        check_names("parameters", given, self.layout.params + self.layout.buffers)
        state, step_count = self.layout.initial_state(given)
        self._set({**given, **state, "step": step_count})

    # -- carried values ------------------------------------------------------------------------------
    def _set(self, values: dict) -> None:
        """Place copies of the carried values on the device (checked against the model) beside a
        spare set. On CPU an OrtValue shares its numpy array's memory, hence the copies here
        and in `_numpy`: the caller's arrays never become buffers the steps overwrite."""
        import onnxruntime as ort
        live, spare = {}, {}
        for name in self.layout.carried:
            arr = np.array(values[name], order="C")
            dtype, shape = self._types[name]
            if arr.dtype != dtype or arr.shape != shape:
                raise InputError(f"{name!r}: the training step expects {format_type(dtype, shape)}, "
                                 f"got {format_type(arr.dtype, arr.shape)}{astype_hint(dtype, arr.dtype)}")
            live[name] = ort.OrtValue.ortvalue_from_numpy(arr, self._device, 0)
            spare[name] = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, self._device, 0)
        self._live, self._spare = live, spare

    def _numpy(self, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        return {n: np.array(self._live[n].numpy()) for n in names}

    @property
    def params(self) -> Any:
        """The current parameters, copied to numpy, in the structure they were given in (a dict by
        name, a nested dict, a gc.nn Module, which holds its current buffers too)."""
        return pytree.unflatten(self._tree, self._numpy(tuple(self._tree_names)).values())

    @property
    def buffers(self) -> dict[str, np.ndarray]:
        """The current buffers (BatchNorm's running statistics, ...), copied to numpy."""
        return self._numpy(self.layout.buffers)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameters and buffers by name, as a module's state_dict (model.load_state_dict takes it)."""
        return self._numpy(self.layout.params + self.layout.buffers)

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The current optimizer state, copied to numpy."""
        return self._numpy(self.layout.state_names)

    @property
    def step_count(self) -> int:
        """Steps taken so far."""
        return int(self._live["step"].numpy())   # int() copies

    # -- stepping ------------------------------------------------------------------------------------
    def _batch(self, batch: tuple) -> dict[str, np.ndarray]:
        names = self.layout.batch
        if len(batch) != len(names):
            raise InputError(f"Trainer.step takes {len(names)} batch input(s) ({', '.join(names) or 'none'}), "
                             f"got {len(batch)}")
        feeds = {}
        for name, value in zip(names, batch):
            arr = np.require(value, requirements="C")
            dtype, shape = self._types[name]
            if arr.dtype != dtype or arr.ndim != len(shape) or any(
                    isinstance(d, int) and d != n for d, n in zip(shape, arr.shape)):
                raise InputError(f"batch input {name!r}: expected {format_type(dtype, shape)}, "
                                 f"got {format_type(arr.dtype, arr.shape)}{astype_hint(dtype, arr.dtype)}")
            feeds[name] = arr
        return feeds

    def _hyper(self, overrides: dict) -> dict[str, np.ndarray]:
        unknown = sorted(set(overrides) - set(self.hyperparams))
        if unknown:
            raise InputError(f"Trainer.step: the training step has no hyper-parameter {unknown[0]!r} (it has: "
                             f"{', '.join(self.hyperparams) or 'none'})")
        feeds = {}
        for name, _, dtype in self.layout.hyper:
            value = overrides.get(name, self.hyperparams[name])
            feeds[name] = np.asarray(value(self.step_count) if callable(value) else value, dtype)
        return feeds

    def step(self, *batch: ArrayLike, **hyperparams: float) -> Any:
        """Run one training step on `batch`; returns the loss (computed before the update), or for a step
        with auxiliary outputs (has_aux) the pair (loss, {name: value}). Keyword arguments set
        hyper-parameters for this step only."""
        feeds = self._batch(batch)
        feeds.update(self._hyper(hyperparams))
        binding = self._session.io_binding()
        for name in self.layout.carried:
            binding.bind_ortvalue_input(name, self._live[name])
            binding.bind_ortvalue_output(self.layout.new(name), self._spare[name])
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        binding.bind_ortvalue_output("loss", self._loss)
        for name in self.layout.aux:
            binding.bind_output(name, "cpu")
        self._session.run_with_iobinding(binding)
        self._live, self._spare = self._spare, self._live
        loss = float(self._loss.numpy())
        if not self.layout.aux:
            return loss
        values = binding.get_outputs()[-len(self.layout.aux):]   # in the order bound: the aux outputs last
        return loss, {name: np.array(v.numpy()) for name, v in zip(self.layout.aux, values)}

    # -- checkpoints ---------------------------------------------------------------------------------
    def _entries(self) -> dict[str, str]:
        """Checkpoint entry name -> carried value: params/<name>, buffers/<name>, state/<name> and step."""
        return {**{f"params/{n}": n for n in self.layout.params}, **{f"buffers/{n}": n for n in self.layout.buffers},
                **{f"state/{n}": n for n in self.layout.state_names}, "step": "step"}

    def save(self, path: str | os.PathLike) -> None:
        """Write parameters, buffers, optimizer state and step counter to an .npz file, atomically."""
        values = {**self.state_dict(), **self.state, "step": self._live["step"].numpy()}
        npz.write(path, {entry: values[name] for entry, name in self._entries().items()})

    def load(self, path: str | os.PathLike) -> None:
        """Resume from a checkpoint written by `save`: the next step is the one that would have followed.
        The file is checked against this step's layout before any array is read (runtime/npz.py)."""
        entries = self._entries()
        arrays = npz.read(path, {entry: self._types[name] for entry, name in entries.items()})
        self._set({name: arrays[entry] for entry, name in entries.items()})


def check_names(what: str, given: Mapping[str, Any], expected: Sequence[str]) -> None:
    """`given` (values by name) holds exactly the `expected` names of a training step's `what`."""
    parts = name_mismatch([n for n in expected if n not in given], [n for n in given if n not in expected])
    if parts:
        raise InputError(f"{what} do not match the training step: {'; '.join(parts)}")
