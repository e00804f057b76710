"""The contract of a training-step model: the names of its inputs and outputs, and where the
model records them.

A training-step model (gc.export_train_step, @gc.export_train) maps (params, buffers,
optimizer state, step counter, hyper-parameters, batch) to (loss, metrics, whether the step was
skipped as not finite, new params, new buffers, new state, new step counter). Its
StepLayout travels as JSON in the model's metadata, so gc.runtime.Trainer can run a saved
file without the Python code that exported it.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from numpy.typing import ArrayLike

from ..errors import GcompileError, InputError
from ..runtime.compiled import non_finite
from ..runtime.modelfile import metadata_json

__all__ = ["METADATA_KEY", "SKIPPED", "StepLayout", "check_finite"]

METADATA_KEY = "gcompile.train_step"
SKIPPED = "skipped"


@dataclass(frozen=True)
class StepLayout:
    """Input and output names of a training-step model (stored as JSON in its metadata_props).

    Inputs: the parameters, the buffers (state the loss function updates, such as BatchNorm's
    running statistics), the optimizer state, "step" (int64 scalar: steps taken so far), the
    hyper-parameters (scalars fed at each step), then the batch. Outputs: "loss", the auxiliary
    outputs (metrics of a has_aux loss), "skipped" where the step guards against non-finite
    values (skip_nonfinite: a bool scalar, true when the loss or a gradient was NaN or Inf and
    everything carried came back unchanged), "<name>.new" for every parameter, buffer and state
    entry, and "step.new" (= step + 1, or step for a skipped step).
    """
    params: tuple           # parameter names
    state: tuple            # (state name, its parameter, initial value)
    batch: tuple            # batch input names
    buffers: tuple = ()     # buffer names
    hyper: tuple = ()       # (name, default value, dtype name)
    aux: tuple = ()         # auxiliary output names
    skip_nonfinite: bool = False   # the "skipped" output and its guard (files older than the guard have neither)

    def __post_init__(self):
        names = list(self.inputs) + list(self.outputs)
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:
            raise GcompileError(f"training step: the name {clashes[0]!r} is used twice (parameters, buffers, "
                                "optimizer state '<param>.<slot>', 'step', hyper-parameters, batch inputs, "
                                "auxiliary outputs, 'skipped' and '<name>.new' outputs must all differ); rename it")

    @staticmethod
    def new(name: str) -> str:
        return f"{name}.new"

    @property
    def state_names(self) -> tuple:
        return tuple(s[0] for s in self.state)

    @property
    def hyper_names(self) -> tuple:
        return tuple(h[0] for h in self.hyper)

    def label(self, name: str) -> str:
        """A carried name as errors say it: "parameter 'w'", "optimizer state 'w.m'", ..."""
        kind = ("parameter" if name in self.params else "buffer" if name in self.buffers
                else "optimizer state" if name in self.state_names else "step counter")
        return f"{kind} {name!r}"

    @property
    def carried(self) -> tuple:
        """What one step hands to the next: parameters, buffers, state and the step counter."""
        return self.params + self.buffers + self.state_names + ("step",)

    @property
    def inputs(self) -> tuple:
        return self.carried + self.hyper_names + self.batch

    @property
    def outputs(self) -> tuple:
        return ("loss",) + self.aux + (SKIPPED,) * self.skip_nonfinite + tuple(self.new(n) for n in self.carried)

    def initial_state(self, params: Mapping[str, ArrayLike]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(optimizer state, step counter) before the first step, for these parameter values."""
        state = {name: np.full_like(np.asarray(params[param]), fill) for name, param, fill in self.state}
        return state, np.array(0, np.int64)

    def attach(self, model: onnx.ModelProto) -> None:
        """Record the layout in the model's metadata (Trainer reads it back from a saved file)."""
        entry = model.metadata_props.add()
        entry.key = METADATA_KEY
        entry.value = json.dumps(self.to_dict())

    def to_dict(self) -> dict:
        return {"params": list(self.params), "state": [list(s) for s in self.state], "batch": list(self.batch),
                "buffers": list(self.buffers), "hyperparams": [list(h) for h in self.hyper], "aux": list(self.aux),
                "skip_nonfinite": self.skip_nonfinite, "step": "step", "loss": "loss", "outputs": list(self.outputs)}

    @classmethod
    def from_dict(cls, d: Any) -> StepLayout:
        """A layout from its to_dict() form read back from a file, which may be hand-edited or
        hostile: a ValueError naming the first field that is not as to_dict writes it."""
        if not isinstance(d, dict):
            raise ValueError(f"a JSON {type(d).__name__}, not an object")
        state = _rows(d, "state", (str, str, _NUMBER), "[slot name, parameter, initial value] rows")
        hyper = _rows(d, "hyperparams", (str, _NUMBER, str), "[name, default, dtype] rows", required=False)
        params = _rows(d, "params", None, "names")
        unknown = [param for _, param, _ in state if param not in params]
        if unknown:
            raise ValueError(f'"state" names {unknown[0]!r}, which is not a parameter')
        for name, _, dtype in hyper:
            try:
                np.dtype(dtype)
            except TypeError:
                raise ValueError(f'"hyperparams" gives {name!r} the dtype {dtype!r}, which numpy does not know') \
                    from None
        guard = d.get("skip_nonfinite", False)
        if not isinstance(guard, bool):
            raise ValueError(f'"skip_nonfinite" is {guard!r}, not true or false')
        return cls(params, state, _rows(d, "batch", None, "names"), _rows(d, "buffers", None, "names", required=False),
                   hyper, _rows(d, "aux", None, "names", required=False), guard)

    @classmethod
    def from_model(cls, model: onnx.ModelProto, source: str | None = None) -> StepLayout:
        """The layout a training-step model records; `source` (its path) names it in errors."""
        where = f"training-step model {source or repr(model.graph.name)}"
        d = metadata_json(model, METADATA_KEY, where)
        if d is None:
            raise GcompileError(f"model {model.graph.name!r} is not a training step (no {METADATA_KEY!r} metadata); "
                                "export one with gc.export_train_step or @gc.export_train")
        try:
            layout = cls.from_dict(d)
        except ValueError as err:
            raise GcompileError(f"{where}: its {METADATA_KEY!r} metadata is not a training-step layout ({err}); was "
                                "the file edited?") from None
        graph_inputs = tuple(v.name for v in model.graph.input)
        graph_outputs = tuple(v.name for v in model.graph.output)
        if graph_inputs != layout.inputs or graph_outputs != layout.outputs:
            raise GcompileError(f"{where}: its inputs/outputs do not match its {METADATA_KEY!r} metadata (was the "
                                "file edited?)")
        return layout


def check_finite(label: str, value: np.ndarray, buffer: bool = False) -> None:
    """Refuse a parameter or optimizer state holding NaN or Inf, which a step would spread to every
    later update without a word (the guard skips such steps, but the starting point is the user's).
    A buffer may hold infinities (a -inf attention mask is often one) but not NaN."""
    problem = non_finite(np.where(np.isinf(value), 0, value) if buffer else value)
    if problem is not None:
        raise InputError(f"{label} holds {problem}: a training step starts from finite parameters and optimizer "
                         "state" + (" and buffers without NaN" if buffer else "")
                         + "; every update from there on would be NaN")


_NUMBER = (int, float)


def _rows(d: dict, key: str, columns: tuple | None, form: str, required: bool = True) -> tuple:
    """Field `key` of a layout's dict form: a list of strings (`columns` None) or of rows whose
    entries have the types in `columns` (_NUMBER for a number: JSON's true is no number); () for
    an absent field that is not `required`. A ValueError naming the field otherwise."""
    if key not in d:
        if required:
            raise ValueError(f'no "{key}" field')
        return ()

    def fits(item: Any) -> bool:
        if columns is None:
            return isinstance(item, str)
        return isinstance(item, list) and len(item) == len(columns) and all(
            isinstance(v, t) and not isinstance(v, bool) for v, t in zip(item, columns))
    value = d[key]
    if not isinstance(value, list) or not all(map(fits, value)):
        raise ValueError(f'"{key}" is not a list of {form}')
    return tuple(value) if columns is None else tuple(map(tuple, value))
