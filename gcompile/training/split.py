"""A training step split in two ONNX models, for data-parallel training (gcompile.distributed).

The fused step of gc.export_train_step computes the gradient and applies the optimizer in one
model, so nothing can come between them. Data parallelism needs exactly that gap: every worker
computes the gradient of its shard, the gradients are averaged across workers, and only then is
the update applied. So the same step is exported as

- the **gradient model**: (params, batch) -> ("loss", "<param>.grad" for every parameter), and
- the **update model**: (params, optimizer state, "step", "<param>.grad" ...) -> ("<name>.new"
  for every parameter and state entry, "step.new"),

traced from the same loss function and optimizer as the fused step, so the optimizer stays in
ONNX. Names follow the fused step's StepLayout, hence checkpoints (Trainer.save's .npz) move
between a Trainer of the fused step and a distributed trainer of the split one. Both models
record the layout and a pair id (a hash of the two models as exported) in their metadata, so a
gradient model is never run beside the update model of another export.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import GcompileError
from ..frontend import pytree
from ..frontend.spec import spec
from ..frontend.tensor import recording_order
from ..frontend.trace import argument_names, trace
from ..gradients.transforms import value_and_grad
from ..runtime import modelfile
from ..runtime.compiled import compile_traced
from .layout import METADATA_KEY, StepLayout
from .optim import Optimizer
from .step import StepOptions, check_params, step_layout

__all__ = ["SPLIT_KEY", "SplitStep", "export_split_step", "grad_name"]

SPLIT_KEY = "gcompile.split_step"
FILES = {"gradient": "gradient.onnx", "update": "update.onnx"}


def grad_name(param: str) -> str:
    """The gradient model's output (and the update model's input) for a parameter's gradient."""
    return f"{param}.grad"


def gradient_io(layout: StepLayout) -> tuple[tuple, tuple]:
    """(inputs, outputs) of the gradient model."""
    return layout.params + layout.batch, ("loss",) + tuple(grad_name(p) for p in layout.params)


def update_io(layout: StepLayout) -> tuple[tuple, tuple]:
    """(inputs, outputs) of the update model."""
    return layout.carried + tuple(grad_name(p) for p in layout.params), tuple(layout.new(n) for n in layout.carried)


def _check_names(layout: StepLayout) -> None:
    grads = {grad_name(p) for p in layout.params}
    clash = sorted(grads & (set(layout.inputs) | set(layout.outputs)))
    if clash:
        raise GcompileError(f"split training step: {clash[0]!r} names both a gradient '<param>.grad' and a parameter, "
                            "state entry or batch input; rename the parameter or batch argument")


class SplitStep:
    """A training step as a gradient model and an update model (ModelProtos `.gradient` and
    `.update`), with the StepLayout both follow and, when exported here, the initial `.params`.

    gcompile.distributed.DistributedTrainer runs it on several workers; `save(folder)` writes
    FOLDER/gradient.onnx and FOLDER/update.onnx, `SplitStep.load(folder)` reads them back.
    """

    def __init__(self, gradient: onnx.ModelProto, update: onnx.ModelProto,
                 params: dict[str, np.ndarray] | None = None, provider: str | None = None,
                 source: str = "split step") -> None:
        self.gradient, self.update, self.params, self.provider = gradient, update, params, provider
        self.layout, self.pair = _read_metadata(gradient, update, source)

    def initial_state(self, params: dict | None = None) -> tuple[dict, np.ndarray]:
        """(optimizer state, step counter) before the first step."""
        chosen = self.params if params is None else params
        if chosen is None:
            raise GcompileError("this split step was loaded from files: give the parameters")
        return self.layout.initial_state(chosen)

    def save(self, folder: str | os.PathLike) -> None:
        """Write FOLDER/gradient.onnx and FOLDER/update.onnx, as one set, each sealed with its sha256
        (runtime.modelfile.save_set), which SplitStep.load verifies."""
        modelfile.save_set(folder, {FILES[role]: model for role, model in
                                    (("gradient", self.gradient), ("update", self.update))})

    @classmethod
    def load(cls, folder: str | os.PathLike) -> SplitStep:
        """The split step saved in `folder` (gradient.onnx and update.onnx, each verified against a
        manifest.json beside them, if there is one)."""
        folder = os.fspath(folder)
        models = {}
        for role, name in FILES.items():
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                raise GcompileError(f"{folder} is not a saved split training step: {name} is missing (save one "
                                    "with SplitStep.save, from gcompile.distributed.export_split_step)")
            models[role] = modelfile.load(path)
        return cls(models["gradient"], models["update"], source=folder)


def _read_metadata(gradient: onnx.ModelProto, update: onnx.ModelProto, source: str) -> tuple[StepLayout, str]:
    """(layout, pair id) of a gradient/update pair, after checking each model's role, names and pair."""
    found = {}
    for role, model in (("gradient", gradient), ("update", update)):
        if not isinstance(model, onnx.ModelProto):
            raise GcompileError(f"{source}: the {role} model must be an onnx.ModelProto, got {type(model).__name__}")
        entry = modelfile.metadata_json(model, SPLIT_KEY, f"{source}: the {role} model")
        if entry is None:
            fused = " (it is a fused training step; export the split form with export_split_step)" \
                if any(p.key == METADATA_KEY for p in model.metadata_props) else ""
            raise GcompileError(f"{source}: the {role} model {model.graph.name!r} is not part of a split training "
                                f"step (no {SPLIT_KEY!r} metadata){fused}")
        try:
            layout = StepLayout.from_dict(entry)
            if entry.get("role") not in FILES or not isinstance(entry.get("pair"), str):
                raise ValueError('"role" is not "gradient" or "update", or "pair" is not a string')
        except ValueError as err:
            raise GcompileError(f"{source}: the {role} model's {SPLIT_KEY!r} metadata cannot be read ({err})") from None
        found[role] = (entry["role"], layout, entry["pair"])
        if entry["role"] != role:
            raise GcompileError(f"{source}: the model given as the {role} model is the {entry['role']} model")
        inputs, outputs = gradient_io(layout) if role == "gradient" else update_io(layout)
        if tuple(v.name for v in model.graph.input) != inputs or tuple(v.name for v in model.graph.output) != outputs:
            raise GcompileError(f"{source}: the {role} model's inputs/outputs do not match its {SPLIT_KEY!r} "
                                "metadata (was the file edited?)")
    (_, layout, pair), (_, other_layout, other_pair) = found["gradient"], found["update"]
    if pair != other_pair or layout != other_layout:
        raise GcompileError(f"{source}: the gradient model (export {pair}) and the update model (export {other_pair}) "
                            "come from different exports; use the two files one export_split_step wrote")
    return layout, pair


def export_split_step(loss_fn: Callable, params: Any, optimizer: Optimizer, *batch_specs: Any,
                      provider: str = "auto", opset: int | None = None, optimize: int = 2,
                      name: str = "train_step") -> SplitStep:
    """The training step of gc.export_train_step (same arguments, same loss and optimizer) as a
    gradient model and an update model; see the module docstring.

    params is a pytree of trainable parameters as for export_train_step (a flat or nested dict, a
    list, a gc.nn Module); loss_fn receives it rebuilt, and the models and the distributed trainer
    name each leaf by its dotted path ("layer1.w"). Buffers (BatchNorm's running statistics), which
    a step replaces rather than descends, need export_train_step.

    For data-parallel training the loss must be a mean over the batch's leading axis (the
    distributed trainer averages the shards' gradients weighted by shard size), and the batch
    inputs must have a symbolic leading dim (gc.spec(("batch", ...))) so that shards fit.
    """
    checked = check_params(params, optimizer)
    if checked.buffers:
        raise GcompileError(f"export_split_step takes trainable parameters only; buffers "
                            f"({', '.join(checked.buffers)}: statistics a step replaces, such as BatchNorm's) "
                            "need export_train_step for now")
    params = checked.values
    batch_names = argument_names(loss_fn, 1 + len(batch_specs))[1:]
    layout = step_layout(checked, optimizer, batch_names, StepOptions(skip_nonfinite=False))   # no guard here yet
    _check_names(layout)
    n_params, n_state = len(layout.params), len(layout.state)
    param_specs = [spec(v.shape, v.dtype) for v in params.values()]

    def gradient_fn(*flat):
        ps, batch = flat[:n_params], flat[n_params:]
        loss, grads = value_and_grad(lambda *p: loss_fn(pytree.unflatten(checked.tree, list(p)), *batch),
                                     argnums=tuple(range(n_params)))(*ps)
        return {"loss": loss, **{grad_name(p): g for p, g in zip(layout.params, grads)}}

    def update_fn(*flat):
        ps, grads = dict(zip(layout.params, flat[:n_params])), dict(zip(layout.params, flat[-n_params:]))
        state = dict(zip(layout.state_names, flat[n_params:n_params + n_state]))
        t = flat[n_params + n_state] + 1
        with recording_order(1):   # computed from first derivatives, as in the fused step: not forward
            new_params, new_state = optimizer.update(ps, grads, state, t)
        return {**{layout.new(n): new_params[n] for n in layout.params},
                **{layout.new(n): new_state[n] for n in layout.state_names}, layout.new("step"): t}

    state_specs = [spec(params[p].shape, params[p].dtype) for _, p, _ in layout.state]
    traced = {
        "gradient": trace(gradient_fn, [*param_specs, *batch_specs], name=f"{name}_gradient",
                          input_names=list(gradient_io(layout)[0])),
        "update": trace(update_fn, [*param_specs, *state_specs, spec((), "int64"), *param_specs],
                        name=f"{name}_update", input_names=list(update_io(layout)[0])),
    }
    compiled = {role: compile_traced(t, provider=provider, opset=opset, optimize=optimize)
                for role, t in traced.items()}
    pair = _pair_id([c.model for c in compiled.values()])
    for role, c in compiled.items():
        entry = c.model.metadata_props.add()
        entry.key = SPLIT_KEY
        entry.value = json.dumps({"role": role, "pair": pair, "params": list(layout.params),
                                  "state": [list(s) for s in layout.state], "batch": list(layout.batch)})
    return SplitStep(compiled["gradient"].model, compiled["update"].model, params,
                     compiled["gradient"].provider)


def _pair_id(models: Sequence[onnx.ModelProto]) -> str:
    """A short hash of the two models as exported (before their metadata names it)."""
    digest = hashlib.sha256()
    for model in models:
        digest.update(model.SerializeToString())
    return digest.hexdigest()[:16]
