"""gc.runtime.Trainer: runs exported training steps with parameters kept on the device.

A training-step model (gc.export_train_step, @gc.export_train; its names are a StepLayout)
maps (params, optimizer state, step counter, batch) to (loss, new params, new state, new
step counter). The Trainer keeps everything the step carries over in onnxruntime OrtValues
on the session's device, bound through IO binding. Where the session runs the step's nodes in
a known order, each new value is written into the buffer of the value it replaces wherever
runtime/inplace.py finds that safe (on a step in trace order: all of them), as PyTorch's
optimizers update in place; the rest have a spare buffer: each step reads the live one and
writes the spare, then they swap. Only the batch goes in and the loss comes out;
parameters are copied to numpy only when `.params` is read. A step, and every read of the
live values, happens under one lock: a Trainer may be shared by threads, whose steps then run
one at a time (in some serial order), and a save or a read never sees half a step.

Parameters go in and come back in one structure: whatever pytree export_train_step was given
(a flat or nested dict, a gc.nn Module) or Trainer(path, params=...) is given, whose leaves are
matched to the step's inputs by dotted path ("layer1.w": a flat dict of such names is the same
parameters as the nested dict), and `.params` is that structure with the current values.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from numpy.typing import ArrayLike

from ..errors import GcompileError, InputError, name_mismatch
from ..frontend import pytree
from ..lowering.lower import file_order
from ..runtime import modelfile, npz
from ..runtime.inplace import in_place_outputs
from ..runtime.modelfile import check_value, signature
from ..runtime.providers import PROVIDERS, make_session, resolve_provider, run_order
from ..runtime.subnormals import flushed
from .layout import SKIPPED, StepLayout, check_finite

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
            yield f.model, None, None, functools.partial(modelfile.session, f, fixed_threads=True)
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
    yield model, params, provider, functools.partial(make_session, model.SerializeToString(), nodes=nodes,
                                                     fixed_threads=True, order=file_order(model))


class Trainer:
    """Runs a training-step model step after step; parameters and state stay on the device.

    Trainer(step) with a compiled step starts from its parameters and buffers; Trainer(path_or_model,
    params=...) starts a saved step model from `params`: parameters and buffers in the structure the
    step was exported with (a nested dict, a gc.nn Module) or flat by dotted name (a module's
    state_dict() fits). `.params` gives them back in the structure they came in. The optimizer state
    and step counter start from the layout's initial values. provider: 'auto', 'cpu' or 'cuda'
    (default: the compiled step's provider, else 'auto'). hyperparams: {name: value or schedule}
    for the step's hyper-parameter inputs, a schedule being called with the number of steps taken
    (default: the values exported); `.hyperparams` holds them and may be changed between steps.

    Parameters and optimizer state must be finite (NaN or Inf is refused, naming the value; a buffer
    may hold infinities, not NaN). A step exported with skip_nonfinite (the default) leaves
    everything unchanged when its loss or a gradient is not finite: `.skipped_steps` counts those
    (and the first one warns), `.step_count` the steps applied. Every method may be called from
    several threads: steps run one at a time.
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
        order = run_order(self._session) if self._device == "cpu" else None
        # the carried values whose new value the step writes over them (the others swap buffers)
        self._in_place = frozenset(in_place_outputs(order, {n: self.layout.new(n) for n in self.layout.carried})
                                   if order else ())
        self._types = {e["name"]: (np.dtype(e["dtype"]), tuple(e["shape"]))
                       for e in signature(list(model.graph.input) + list(model.graph.output))}
        self._loss = ort.OrtValue.ortvalue_from_shape_and_type([], self._types["loss"][0], "cpu", 0)
        self._skipped_now = ort.OrtValue.ortvalue_from_shape_and_type([], np.bool_, "cpu", 0)
        self._skipped = 0
        self._lock = threading.RLock()   # re-entrant: a schedule called inside step may read the trainer
        self.hyperparams = HyperParams(self.layout, self._types)
        self.hyperparams.update(hyperparams or {})
        given = {name: np.asarray(leaf) for name, leaf in zip(self._tree_names, leaves)}
        if self._tree.is_leaf or len(given) != len(leaves):
            raise GcompileError(f"Trainer: params must be a pytree of arrays (a dict by dotted name, a nested dict, "
                                f"a gc.nn Module), got {type(params).__name__}"
                                + ("" if self._tree.is_leaf else " whose paths name a leaf twice"))
        check_names("parameters", given, self.layout.params + self.layout.buffers)
        state, step_count = self.layout.initial_state(given)
        self._set({**given, **state, "step": step_count}, owned=frozenset(state) | {"step"})

    # -- carried values ------------------------------------------------------------------------------
    def _set(self, values: dict, source: str = "", owned: frozenset = frozenset()) -> None:
        """Place copies of the carried values on the device (checked against the model, and finite),
        with a spare buffer for each value not updated in place. On CPU an OrtValue shares its numpy
        array's memory, hence the copies here and in `_numpy`: the caller's arrays never become
        buffers the steps overwrite; the arrays of `owned` names are this Trainer's own (the initial
        optimizer state) and are not copied again. `source` prefixes errors (the checkpoint read)."""
        import onnxruntime as ort
        live, spare = {}, {}
        for name in self.layout.carried:
            dtype, shape = self._types[name]
            label = source + self.layout.label(name)
            arr = check_value(label, values[name], dtype, shape, {})
            if name not in owned or arr is not values[name]:
                arr = np.array(arr)
            check_finite(label, arr, buffer=name in self.layout.buffers)
            live[name] = ort.OrtValue.ortvalue_from_numpy(arr, self._device, 0)
            if name not in self._in_place:
                spare[name] = ort.OrtValue.ortvalue_from_shape_and_type(list(shape), dtype, self._device, 0)
        with self._lock:
            self._live, self._spare = live, spare

    def _numpy(self, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        with self._lock:
            return {n: np.array(self._live[n].numpy()) for n in names}

    @property
    def params(self) -> Any:
        """The current parameters, copied to numpy, in the structure they were given in (a dict by
        name, a nested dict, a gc.nn Module, which holds its current buffers too)."""
        return pytree.unflatten(self._tree, self._numpy(tuple(self._tree_names)).values())

    @property
    def in_place(self) -> frozenset[str]:
        """The carried values (parameters, buffers, optimizer state, "step") each step overwrites in
        their own buffer; the others have a spare one (module docstring)."""
        return self._in_place

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
        """Steps applied so far (a step the guard skipped does not count: see skipped_steps)."""
        return int(self._numpy(("step",))["step"])

    @property
    def skipped_steps(self) -> int:
        """Steps this Trainer skipped because their loss or a gradient was not finite (NaN or Inf),
        leaving everything unchanged; always 0 for a step exported with skip_nonfinite=False. Counted
        by this Trainer since it was made, not stored in checkpoints."""
        with self._lock:
            return self._skipped

    # -- stepping ------------------------------------------------------------------------------------
    def _batch(self, batch: tuple) -> dict[str, np.ndarray]:
        names = self.layout.batch
        if len(batch) != len(names):
            raise InputError(f"Trainer.step takes {len(names)} batch input(s) ({', '.join(names) or 'none'}), "
                             f"got {len(batch)}")
        bound: dict[str, tuple[int, str]] = {}   # one size per symbolic dim across the batch
        return {name: check_value(f"batch input {name!r}", value, *self._types[name], bound)
                for name, value in zip(names, batch)}

    def step(self, *batch: ArrayLike, **hyperparams: float) -> Any:
        """Run one training step on `batch`; returns the loss (computed before the update), or for a step
        with auxiliary outputs (has_aux) the pair (loss, {name: value}). Keyword arguments set
        hyper-parameters for this step only."""
        feeds = self._batch(batch)
        with self._lock:
            feeds.update(self.hyperparams.feeds(lambda: self.step_count, hyperparams))
            binding = self._session.io_binding()
            for name in self.layout.carried:
                binding.bind_ortvalue_input(name, self._live[name])
                binding.bind_ortvalue_output(self.layout.new(name), self._spare.get(name, self._live[name]))
            for name, arr in feeds.items():
                binding.bind_cpu_input(name, arr)
            binding.bind_ortvalue_output("loss", self._loss)
            if self.layout.skip_nonfinite:
                binding.bind_ortvalue_output(SKIPPED, self._skipped_now)
            for name in self.layout.aux:
                binding.bind_output(name, "cpu")
            with flushed():
                self._session.run_with_iobinding(binding)
            for name, written in self._spare.items():
                self._spare[name], self._live[name] = self._live[name], written
            loss = float(self._loss.numpy())
            if self.layout.skip_nonfinite and bool(self._skipped_now.numpy()):
                self._skip()
            if not self.layout.aux:
                return loss
            values = binding.get_outputs()[-len(self.layout.aux):]   # in the order bound: the aux outputs last
            return loss, {name: np.array(v.numpy()) for name, v in zip(self.layout.aux, values)}

    def _skip(self) -> None:
        self._skipped += 1
        if self._skipped == 1:
            warn_skipped("Trainer", self.step_count, "its loss or a gradient",
                         "parameters, buffers and optimizer state")

    # -- checkpoints ---------------------------------------------------------------------------------
    def _entries(self) -> dict[str, str]:
        """Checkpoint entry name -> carried value: params/<name>, buffers/<name>, state/<name> and step."""
        return {**{f"params/{n}": n for n in self.layout.params}, **{f"buffers/{n}": n for n in self.layout.buffers},
                **{f"state/{n}": n for n in self.layout.state_names}, "step": "step"}

    def save(self, path: str | os.PathLike) -> None:
        """Write parameters, buffers, optimizer state and step counter to an .npz file, atomically
        (the values of one moment: a step running in another thread is wholly in or wholly out)."""
        values = self._numpy(self.layout.carried)
        npz.write(path, {entry: values[name] for entry, name in self._entries().items()})

    def load(self, path: str | os.PathLike) -> None:
        """Resume from a checkpoint written by `save`: the next step is the one that would have followed.
        The file is checked against this step's layout before any array is read (runtime/npz.py), and
        its parameters and optimizer state must be finite."""
        entries = self._entries()
        arrays = npz.read(path, {entry: self._types[name] for entry, name in entries.items()})
        self._set({name: arrays[entry] for entry, name in entries.items()}, f"checkpoint {os.fspath(path)!r}: ")


class HyperParams(MutableMapping):
    """A Trainer's hyper-parameter values by name (`trainer.hyperparams`): a number, or a schedule
    called with the number of steps applied. Only the step's own hyper-parameters may be set, and a
    number is checked when set (a finite scalar), a schedule's value at each step."""

    def __init__(self, layout: StepLayout, types: Mapping[str, tuple[np.dtype, tuple]]) -> None:
        self._values: dict[str, Any] = {name: default for name, default, _ in layout.hyper}
        self._types = {name: types[name][0] for name in self._values}

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self._known(name)
        if not callable(value):
            self._value(name, value)
        self._values[name] = value

    def __delitem__(self, name: str) -> None:
        self._known(name)
        raise InputError(f"hyper-parameter {name!r} is an input of the training step: set it to a value, it cannot "
                         "be removed")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return repr(self._values)

    def _known(self, name: Any) -> None:
        if name not in self._values:
            raise InputError(f"the training step has no hyper-parameter {name!r} (it has: "
                             f"{', '.join(self._values) or 'none'}); to feed one at each step, export the step with "
                             f"hyperparams={{{name!r}: default}} (export_train_step or @gc.export_train)")

    def _value(self, name: str, value: Any) -> np.ndarray:
        """A hyper-parameter's feed: a finite scalar of its dtype."""
        dtype = self._types[name]
        try:
            arr = np.asarray(value, dtype)
        except (TypeError, ValueError):
            raise InputError(f"hyper-parameter {name!r}: expected a number, got {value!r}") from None
        arr = check_value(f"hyper-parameter {name!r}", arr, dtype, (), {})
        if not np.isfinite(arr):
            raise InputError(f"hyper-parameter {name!r} is {value!r}: a training step takes finite "
                             "hyper-parameters (the update would be NaN)")
        return arr

    def feeds(self, steps: Callable[[], int], overrides: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The hyper-parameter inputs of the next step: the values set, or `overrides` for this step
        only, schedules called with the number of steps applied (asked of `steps` only for a
        schedule: on a GPU reading the counter is a copy to the host)."""
        for name in overrides:
            self._known(name)
        values = {**self._values, **overrides}
        return {name: self._value(name, value(steps()) if callable(value) else value)
                for name, value in values.items()}


def check_names(what: str, given: Mapping[str, Any], expected: Sequence[str]) -> None:
    """`given` (values by name) holds exactly the `expected` names of a training step's `what`."""
    parts = name_mismatch([n for n in expected if n not in given], [n for n in given if n not in expected])
    if parts:
        raise InputError(f"{what} do not match the training step: {'; '.join(parts)}")


def warn_skipped(trainer: str, applied: int, cause: str, kept: str) -> None:
    """The warning a trainer gives at the first step its non-finite guard skipped (called from its
    step's _skip: the warning points at the user's call of step)."""
    warnings.warn(f"{trainer}.step: a step was skipped (after {applied} applied) because {cause} is not finite (NaN "
                  f"or Inf); {kept} are unchanged. trainer.skipped_steps counts such steps; this warning is given "
                  f"once per {trainer}", RuntimeWarning, stacklevel=4)
