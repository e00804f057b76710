"""A whole training step as one ONNX model: gc.export_train_step (and the tracing behind @gc.export_train).

The step is traced as one function of (params, buffers, optimizer state, step counter,
hyper-parameters, batch): the user's loss, its gradient w.r.t. every parameter (gc.grad),
optionally clipped to a global norm, and the optimizer's update written with gcompile ops,
behind a guard that keeps everything carried unchanged when the loss or a gradient is not
finite (StepOptions.skip_nonfinite).
Lowered, that is a single standard-ONNX model that any onnxruntime (CPU or CUDA) can run,
with no training extension. Names follow gcompile.training.layout.StepLayout, which is also
stored in the model's metadata.

`params` is a pytree: a flat dict as before, a nested dict, a list, or a gc.nn Module. Its
leaves are named by their dotted paths ("fc1.weight"). Leaves a Module declares buffers
(BatchNorm's running statistics) are carried state, not trained: the loss function receives
the pytree rebuilt around the traced values, may replace a buffer (BatchNorm does in training
mode), and the step outputs the value the buffer holds after the call as "<name>.new".
"""
from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import onnx

from .. import functions as F
from ..errors import GcompileError
from ..frontend import pytree
from ..frontend.spec import spec
from ..frontend.tensor import Tensor, recording_order
from ..frontend.trace import Traced, argument_names, trace
from ..gradients.engine import grad
from ..ir.dtypes import is_float
from ..ops.random import random_key
from ..runtime.compiled import CompiledFunction, compile_traced
from .layout import SKIPPED, StepLayout, check_finite
from .optim import Optimizer, clip_by_global_norm, state_name

__all__ = ["StepOptions", "TrainStep", "export_train_step"]


@dataclass(frozen=True)
class StepOptions:
    """The options of a training step, the one set export_train_step and @gc.export_train both take
    as keyword arguments.

    has_aux: the loss function returns (loss, aux), whose aux pytree (metrics) becomes extra
    outputs (Trainer.step then returns (loss, {name: value})).
    hyperparams {name: default}: scalar model inputs fed at each step instead of constants; those
    the optimizer has (gc.optim: "lr", "weight_decay", ...) replace its values, the others are
    passed to the loss function as keyword arguments.
    clip_grad_norm: scale the gradients so that their global L2 norm is at most this
    (torch.nn.utils.clip_grad_norm_).
    skip_nonfinite (default True): a step whose loss or any gradient holds NaN or Inf changes
    nothing (parameters, buffers, optimizer state and step counter come back as they went in) and
    says so in its "skipped" output, as PyTorch's GradScaler and optax's apply_if_finite skip such
    steps. On by default because without it one bad batch makes every parameter NaN for good
    while training goes on, and the test runs inside the same model run; False applies every
    step as computed.
    memory_budget: bytes the values a step computes may take at once, as gc.compile's
    memory_budget (forward values recomputed in the backward until the plan fits).
    """
    has_aux: bool = False
    hyperparams: Mapping[str, float] | None = None
    clip_grad_norm: float | None = None
    skip_nonfinite: bool = True
    memory_budget: int | None = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def take(cls, where: str, options: Mapping[str, Any]) -> StepOptions:
        """The options given as keyword arguments to `where`; an error naming any it does not have."""
        unknown = [k for k in options if k not in cls.names()]
        if unknown:
            raise GcompileError(f"{where}: no option {unknown[0]!r} (the options of a training step: "
                                f"{', '.join(cls.names())})")
        try:
            return cls(**options)
        except GcompileError as err:
            raise GcompileError(f"{where}: {err}") from None

    def __post_init__(self) -> None:
        for flag in ("has_aux", "skip_nonfinite"):
            if not isinstance(getattr(self, flag), bool):
                raise GcompileError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.hyperparams is not None and not isinstance(self.hyperparams, Mapping):
            raise GcompileError(f"hyperparams must be a dict {{name: default value}}, got {self.hyperparams!r}")
        unknown = [h for h in (self.hyperparams or {}) if not isinstance(h, str) or not h.isidentifier()]
        if unknown:
            raise GcompileError(f"hyperparams: names must be identifiers, got {unknown[0]!r}")
        for name, default in (self.hyperparams or {}).items():
            number = isinstance(default, (int, float, np.number)) and not isinstance(default, bool)
            if not number or not np.isfinite(default):
                raise GcompileError(f"hyperparams: the default of {name!r} must be a finite number, got {default!r}")
        clip = self.clip_grad_norm
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0):
            raise GcompileError(f"clip_grad_norm must be a positive number, got {clip!r}")
        budget = self.memory_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0):
            raise GcompileError(f"memory_budget must be a positive number of bytes, got {budget!r}")

    def check(self, loss_fn: Callable, optimizer: Optimizer) -> None:
        """Every hyper-parameter goes to the optimizer or is a keyword argument of loss_fn."""
        try:
            parameters: Mapping[str, inspect.Parameter] = inspect.signature(loss_fn).parameters
        except (TypeError, ValueError):
            parameters = {}
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        for name in self.hyperparams or {}:
            if name in optimizer.hyperparameters:
                if name == "momentum" and not getattr(optimizer, "momentum", 0):
                    raise GcompileError("hyperparams: SGD's momentum decides whether it keeps a momentum buffer; "
                                        "export with a non-zero momentum to feed it as an input")
            elif not takes_any and (name not in parameters
                                    or parameters[name].kind is parameters[name].POSITIONAL_ONLY):
                raise GcompileError(f"hyperparams: {name!r} is neither a hyper-parameter of "
                                    f"{type(optimizer).__name__} ({', '.join(optimizer.hyperparameters)}) nor a "
                                    "keyword argument of the loss function")


@dataclass(frozen=True)
class Params:
    """The parameters a step starts from: every leaf by name (parameters and buffers, in tree order),
    which names are buffers, and the pytree structure to rebuild for the loss function."""
    values: dict[str, np.ndarray]
    buffers: tuple[str, ...]
    tree: pytree.TreeDef

    @property
    def trained(self) -> dict[str, np.ndarray]:
        return {n: v for n, v in self.values.items() if n not in self.buffers}

    @property
    def carried(self) -> dict[str, np.ndarray]:
        return {n: v for n, v in self.values.items() if n in self.buffers}


def check_params(params: Any, optimizer: Any) -> Params:
    """`params` as numpy arrays by name, after checking names, dtypes, values (finite) and the
    optimizer. The caller's arrays themselves, not copies, as PyTorch's optimizers hold the module's
    parameters: a copy here would be a third copy of the weights beside the caller's and a Trainer's
    own (which copies them when it starts); nothing in gcompile writes them."""
    if not isinstance(optimizer, Optimizer):
        raise GcompileError(f"optimizer must be a gc.optim optimizer (SGD, Adam, AdamW), got {optimizer!r}")
    leaves, tree = pytree.flatten(params)
    if tree.is_leaf or not leaves:
        raise GcompileError("params must be a non-empty dict {name: numpy array}, or another pytree of arrays "
                            "(a nested dict, a list, a gc.nn Module)")
    if tree.kind is dict and any(not isinstance(k, str) or not k for k in tree.aux):
        bad = next(k for k in tree.aux if not isinstance(k, str) or not k)
        raise GcompileError(f"params: names must be non-empty strings, got {bad!r}")
    names = pytree.paths(tree)
    values, buffers = {}, []
    for name, leaf, is_buffer in zip(names, leaves, pytree.buffer_mask(tree)):
        arr = np.asarray(leaf)
        if is_buffer:
            buffers.append(name)
        elif not is_float(arr.dtype):
            raise GcompileError(f"params[{name!r}]: a parameter must be a floating-point array, got {arr.dtype.name}")
        check_finite(f"params[{name!r}]", arr, buffer=is_buffer)
        values[name] = arr
    return Params(values, tuple(buffers), tree)


def step_layout(params: Params, optimizer: Optimizer, batch_names: Sequence[str], options: StepOptions,
                aux: Sequence[str] = ()) -> StepLayout:
    """The names of the step model: the optimizer declares a state slot per parameter."""
    trained = params.trained
    state = tuple((state_name(p, slot), p, fill) for p in trained for slot, fill in optimizer.slots)
    dtype = np.result_type(*trained.values()).name
    hyper = tuple((name, float(value), dtype) for name, value in (options.hyperparams or {}).items())
    return StepLayout(tuple(trained), state, tuple(batch_names), params.buffers, hyper, tuple(aux),
                      options.skip_nonfinite)


def _aux_names(tree: pytree.TreeDef) -> list[str]:
    """Names of the auxiliary outputs: a dict's keys (paths below), else "aux", "aux.0", ..."""
    return pytree.paths(tree) if tree.kind is dict else pytree.paths(tree, "aux")


def _optimizer_with(optimizer: Optimizer, values: dict[str, Any]) -> Optimizer:
    """A copy of the optimizer whose hyper-parameters in `values` are traced scalars."""
    if not values:
        return optimizer
    replaced = copy.copy(optimizer)
    for name, value in values.items():
        setattr(replaced, name, value)
    return replaced


def nonfinite(loss: Tensor, grads: Sequence[Tensor]) -> Tensor:
    """A bool scalar: whether the loss or any gradient holds NaN or Inf. x·0 is ±0 for every finite
    x and NaN for ±Inf and NaN, so one product and one sum per gradient find any (a sum of the
    gradients themselves could overflow on finite values), and the scalars meet in one test."""
    probes = [F.cast(F.sum(v * 0), np.float32) for v in (loss, *grads)]
    return F.logical_not(F.isfinite(F.add_n(probes) if len(probes) > 1 else probes[0]))


def trace_step(loss_fn: Callable, params: Params, optimizer: Optimizer, batch_specs: Sequence,
               batch_names: Sequence[str], name: str, options: StepOptions) -> tuple[Traced, StepLayout]:
    """(Traced step, its StepLayout)."""
    hyperparams = dict(options.hyperparams or {})
    for_optimizer = [h for h in hyperparams if h in optimizer.hyperparameters]
    layout = step_layout(params, optimizer, batch_names, options)
    aux_names: list[str] = []
    counts = [len(layout.params) + len(layout.buffers), len(layout.state), 1, len(layout.hyper)]

    def step_fn(*flat):
        bounds = np.cumsum([0, *counts])
        leaves_by_name = dict(zip(layout.params + layout.buffers, flat[:bounds[1]]))
        state = dict(zip(layout.state_names, flat[bounds[1]:bounds[2]]))
        count = flat[bounds[2]]
        hyper = dict(zip((h[0] for h in layout.hyper), flat[bounds[3]:bounds[4]]))
        batch = flat[bounds[4]:]
        names = list(params.values)
        tree = pytree.unflatten(params.tree, [leaves_by_name[n] for n in names])
        with random_key(count):   # dropout masks: a pure function of the step counter (ops/random.py)
            result = loss_fn(tree, *batch, **{h: v for h, v in hyper.items() if h not in for_optimizer})
        loss, aux = _split(result, options.has_aux)
        trained = [leaves_by_name[n] for n in layout.params]
        grads = grad(loss, trained)
        unclipped = grads
        if options.clip_grad_norm is not None:
            grads, _ = clip_by_global_norm(grads, options.clip_grad_norm)
        after = dict(zip(names, pytree.flatten_like(params.tree, tree, "params")))
        t = count + 1
        opt = _optimizer_with(optimizer, {h: hyper[h] for h in for_optimizer})
        # The update is computed from the gradients: tagged with their order, it is not counted as forward.
        with recording_order(max(g.graph.nodes[g.ref.node].order for g in grads)):
            # the step's own inputs pass through where it is skipped
            skipped = nonfinite(loss, unclipped) if options.skip_nonfinite else None
            guard = {} if skipped is None else {SKIPPED: skipped}
            old = {**leaves_by_name, **state, "step": count}

            def kept(name: str, value: Tensor) -> Tensor:
                return value if skipped is None else F.where(skipped, old[name], value)
            # One parameter after another, each new value finished (and in a step run in trace order,
            # written over the old one: runtime/inplace.py) before the next parameter's update starts,
            # so that a single parameter's intermediate values are alive at a time, not every one's.
            scalars = opt.scalars(t)
            new = {}
            for name, p, g in zip(layout.params, trained, grads):
                new_p, new_slots = opt.update_one(name, p, g, state, t, scalars)
                new.update({n: kept(n, v) for n, v in {name: new_p, **new_slots}.items()})
            new.update({n: kept(n, F.cast(after[n], params.values[n].dtype)) for n in layout.buffers})
            new["step"] = kept("step", t)
        aux_leaves, aux_tree = pytree.flatten(aux)
        aux_names.extend(_aux_names(aux_tree) if options.has_aux else [])
        return {"loss": loss, **dict(zip(aux_names, aux_leaves)), **guard,
                **{layout.new(n): new[n] for n in layout.carried}}

    specs = [*(params.values[n] for n in layout.params + layout.buffers),
             *(spec(params.values[p].shape, params.values[p].dtype) for _, p, _ in layout.state),
             spec((), "int64"), *(spec((), dtype) for _, _, dtype in layout.hyper), *batch_specs]
    traced = trace(step_fn, specs, name=name, input_names=list(layout.inputs))
    if aux_names:
        layout = step_layout(params, optimizer, batch_names, options, aux_names)
    return traced, layout


def _split(result: Any, has_aux: bool) -> tuple[Any, Any]:
    if has_aux:
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise GcompileError(f"has_aux=True: the loss function must return a pair (loss, aux), "
                                f"got {type(result).__name__}")
        loss, aux = result
    else:
        loss, aux = result, None
    if not hasattr(loss, "shape") or loss.shape != () or not is_float(loss.dtype):
        described = getattr(loss, "type", type(loss).__name__)
        raise GcompileError(f"the loss function must return a floating-point scalar Tensor (shape ()), got "
                            f"{described}; reduce it first (e.g. F.mean)"
                            + ("" if has_aux else ", or pass has_aux=True if it returns (loss, aux)"))
    return loss, aux


class TrainStep:
    """A compiled training step: one ONNX model (`.model`) and a session that runs it.

    Call it functionally with numpy arrays, step(params, state, count, *batch, **hyperparams) ->
    (loss, new params, new state, new count), `params` holding the buffers too where the step has
    any (and `loss` being (loss, aux) for a step exported with has_aux), or hand it to
    gc.runtime.Trainer, which keeps everything on the device. `.params` holds the initial
    parameters it was exported with, `.buffers` the initial buffers, `.tree(values)` rebuilds the
    structure `params` was given in (a Module, a nested dict) from values by name. A step the
    guard skipped (skip_nonfinite) gives its inputs back: the new count equals the count.
    """

    def __init__(self, compiled: CompiledFunction, layout: StepLayout, params: dict[str, np.ndarray],
                 buffers: dict[str, np.ndarray] | None = None, tree: pytree.TreeDef | None = None) -> None:
        self.compiled, self.layout, self.params = compiled, layout, params
        self.buffers = dict(buffers or {})
        self._tree = tree

    @property
    def model(self) -> onnx.ModelProto:
        return self.compiled.model

    @property
    def provider(self) -> str:
        return self.compiled.provider

    def save(self, path: str | os.PathLike, target: str | None = None, **options: Any) -> None:
        """Write the ONNX model to `path` atomically, as CompiledFunction.save (the layout travels in
        the model's metadata), lowered for `target`: by default the model this step runs, so that a
        Trainer of the file resumes a Trainer of this step bit for bit (docs/guide/training.md);
        target="portable" for a file other runtimes run (docs/targets.md), whose plain forms round
        differently from the ort-cpu target's."""
        self.compiled.save(path, target=target or self.compiled.target, **options)

    def initial_state(self) -> tuple[dict, np.ndarray]:
        """(optimizer state, step counter) before the first step."""
        return self.layout.initial_state(self.params)

    def tree(self, values: Mapping[str, Any]) -> Any:
        """Parameters and buffers by name (Trainer.state_dict()) in the structure given to export_train_step."""
        if self._tree is None:
            raise GcompileError("this training step does not know the structure of its parameters")
        return pytree.unflatten(self._tree, [values[n] for n in pytree.paths(self._tree)])

    def __call__(self, params: dict[str, np.ndarray], state: dict[str, np.ndarray], count: int | np.ndarray,
                 *batch: np.ndarray, **hyperparams: float) -> tuple[Any, dict[str, np.ndarray],
                                                                    dict[str, np.ndarray], np.ndarray]:
        layout = self.layout
        hyper = [np.asarray(hyperparams.get(n, default), dtype) for n, default, dtype in layout.hyper]
        flat = ([params[n] for n in layout.params + layout.buffers] + [state[n] for n in layout.state_names]
                + [np.asarray(count, np.int64)] + hyper)
        outs = dict(zip(layout.outputs, self.compiled.run_flat(*flat, *batch)))
        loss = (outs["loss"], {n: outs[n] for n in layout.aux}) if layout.aux else outs["loss"]
        return (loss, {n: outs[layout.new(n)] for n in layout.params + layout.buffers},
                {n: outs[layout.new(n)] for n in layout.state_names}, outs[layout.new("step")])


def export_train_step(loss_fn: Callable, params: Any, optimizer: Optimizer, *batch_specs: Any,
                      provider: str = "auto", opset: int | None = None, optimize: int = 2, name: str = "train_step",
                      **options: Any) -> TrainStep:
    """Compile one training step of `loss_fn` into a single ONNX model.

    loss_fn(params, *batch) receives `params` rebuilt around Tensors (a dict {name: Tensor} for a
    dict, a Module for a Module) and the batch Tensors, and returns a floating-point scalar loss.
    `params` holds the initial numpy values (finite: NaN or Inf is refused); each `batch_specs`
    entry is a gc.spec or an example array, named after loss_fn's parameters.

    Keyword options, the same as @gc.export_train takes (StepOptions): has_aux=False,
    hyperparams=None, clip_grad_norm=None, skip_nonfinite=True, memory_budget=None.

    Model inputs: the parameters (dotted paths: "w", "fc1.weight"), the buffers, the optimizer
    state ("<param>.<slot>"), "step" (int64, steps taken), the hyper-parameters and the batch;
    outputs: "loss", the aux outputs, "skipped" (with skip_nonfinite), "<name>.new" for every
    parameter, buffer and state entry, and "step.new".
    """
    checked = check_params(params, optimizer)
    chosen = StepOptions.take("export_train_step", options)
    chosen.check(loss_fn, optimizer)
    batch_names = argument_names(loss_fn, 1 + len(batch_specs))[1:]
    traced, layout = trace_step(loss_fn, checked, optimizer, batch_specs, batch_names, name, chosen)
    compiled = compile_traced(traced, provider=provider, opset=opset, optimize=optimize,
                              memory_budget=chosen.memory_budget)
    layout.attach(compiled.model)
    return TrainStep(compiled, layout, checked.trained, checked.carried, checked.tree)
