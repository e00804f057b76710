"""@gc.export and @gc.export_train: marking functions for `gcompile build`.

A decorator only records what to build on the function (and checks it against the
function's signature right away, so a typo fails at import with the decorator's line);
`gcompile build` later finds the marked functions of a model file and builds each one.
The record's kind says how: an Export traces the function itself, a TrainExport the
training step around a loss function. Build asks the record and never its type.
"""
from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import numpy as np
import onnx

from ..errors import GcompileError
from ..frontend import pytree
from ..frontend.spec import as_spec
from ..frontend.trace import Traced, trace
from ..runtime.modelfile import random_feeds
from ..training.layout import StepLayout
from ..training.optim import Optimizer
from ..training.step import Params, StepOptions, check_params, step_layout, trace_step

__all__ = ["export", "export_train"]

_MARK = "__gcompile_export__"
_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_F = TypeVar("_F", bound=Callable)


@dataclass(frozen=True)
class Export:
    """What `gcompile build` needs to trace one function: artifact name, input names and specs
    (one per parameter: a Spec or, for @gc.export, a pytree of them, as gc.compile takes)."""
    name: str
    input_names: tuple[str, ...]
    specs: tuple[Any, ...]

    def trace(self, fn: Callable) -> Traced:
        """The graph `gcompile build` optimises, lowers and writes: `fn` on the specs."""
        return trace(fn, list(self.specs), name=self.name, input_names=list(self.input_names))

    def finish(self, model: onnx.ModelProto) -> None:
        """Add to the lowered model what reading it back needs; a plain function needs nothing."""

    def check_feeds(self, model: onnx.ModelProto) -> dict[str, np.ndarray]:
        """Inputs for `gcompile build --check`: random values fitting the model's inputs."""
        return random_feeds(model)

    def manifest_extra(self) -> dict:
        """Entries this kind of artifact adds to its manifest record; none for a plain function."""
        return {}

    def initial_values(self) -> dict[str, np.ndarray] | None:
        """The values a build for the web ships as the artifact's start (artifacts/web.py); none here."""
        return None


@overload
def export(fn: _F, /, *, name: Any = None, **specs: Any) -> _F: ...


@overload
def export(fn: None = None, /, *, name: Any = None, **specs: Any) -> Callable[[_F], _F]: ...


def export(fn: _F | None = None, /, *, name: Any = None, **specs: Any) -> _F | Callable[[_F], _F]:
    """Mark `fn` for `gcompile build`, one spec per positional parameter:

        @gc.export(x=gc.spec(("batch", 784), "float32"))
        def predict(x): ...

    Each value is a gc.spec or an example array, or a pytree of them (a dict, list or tuple; one
    graph input per leaf, named by its path, "params.fc1.weight"), as gc.compile takes them.
    Parameters that have a default may be left
    out (they keep it) as long as every parameter before them has a spec. A string `name`
    renames the artifact (default: the function's name); any other value under `name` is
    the spec of a parameter called `name`. The function is returned unchanged.
    """
    if name is not None and not isinstance(name, str):
        specs["name"], name = name, None

    def mark(f: _F) -> _F:
        setattr(f, _MARK, _make_export(f, name, specs))
        return f

    return mark if fn is None else mark(fn)


def _make_export(fn: Any, name: str | None, specs: dict[str, Any]) -> Export:
    if not callable(fn):
        raise GcompileError(f"@gc.export(...) decorates a function, got {type(fn).__name__}")
    label = getattr(fn, "__qualname__", repr(fn))
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise GcompileError(f"@gc.export: cannot read the signature of {label}") from None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            raise GcompileError(f"@gc.export on {label}: *{p.name} is not supported; "
                                "give every input its own parameter")
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            raise GcompileError(f"@gc.export on {label}: keyword-only parameter {p.name!r} needs a default "
                                "(only positional parameters become graph inputs)")
    known = {p.name for p in positional}
    unknown = [k for k in specs if k not in known]
    if unknown:
        raise GcompileError(f"@gc.export on {label}: no positional parameter named {', '.join(map(repr, unknown))} "
                            f"(parameters: {', '.join(p.name for p in positional) or 'none'})")
    input_names, resolved = [], []
    for p in positional:
        if p.name not in specs:
            continue
        skipped = [q.name for q in positional[:positional.index(p)] if q.name not in specs]
        if skipped:
            raise GcompileError(f"@gc.export on {label}: parameter {p.name!r} has a spec but the earlier "
                                f"parameter {skipped[0]!r} has none; give it one too")
        try:
            resolved.append(_spec_tree(specs[p.name]))
        except GcompileError as err:
            raise GcompileError(f"@gc.export on {label}, parameter {p.name!r}: {err}") from None
        input_names.append(p.name)
    missing = [p.name for p in positional if p.name not in specs and p.default is p.empty]
    if missing:
        raise GcompileError(f"@gc.export on {label}: missing spec for parameter {', '.join(map(repr, missing))}; "
                            f"write e.g. @gc.export({missing[0]}=gc.spec((\"batch\", 16), \"float32\"))")
    return Export(_artifact_name("@gc.export", label, fn, name), tuple(input_names), tuple(resolved))


def _spec_tree(value: Any) -> Any:
    """A parameter's spec, or pytree of specs, with every leaf a checked Spec."""
    leaves, tree = pytree.flatten(value)
    return pytree.unflatten(tree, [as_spec(leaf) for leaf in leaves])


def _artifact_name(decorator: str, label: str, fn: Any, name: str | None) -> str:
    """`name`, else the function's name, checked: it becomes the file name NAME.onnx."""
    artifact = name if name is not None else getattr(fn, "__name__", "")
    if not _ARTIFACT_NAME.fullmatch(artifact or ""):
        raise GcompileError(f"{decorator} on {label}: artifact name {artifact!r} must be letters, digits, "
                            "'_', '.' or '-' (it becomes the file name NAME.onnx)")
    return artifact


@dataclass(frozen=True)
class TrainExport(Export):
    """@gc.export_train's record: `input_names`/`specs` describe the batch; the marked function is the
    loss, and what `gcompile build` traces, writes and checks is the whole training step around it."""
    params: Params = field(kw_only=True, compare=False, hash=False)
    optimizer: Optimizer = field(kw_only=True, compare=False, hash=False)
    options: StepOptions = field(kw_only=True, compare=False, hash=False)
    traced_layout: list[StepLayout] = field(default_factory=list, kw_only=True, compare=False, hash=False)

    @property
    def layout(self) -> StepLayout:
        """The layout of the last trace (the names of a has_aux loss's metrics are only known
        once it ran), else the one the decorator's arguments give."""
        if self.traced_layout:
            return self.traced_layout[-1]
        return step_layout(self.params, self.optimizer, self.input_names, self.options)

    def trace(self, fn: Callable) -> Traced:
        """The training step of loss function `fn`: loss, gradients and the optimizer's update."""
        traced, layout = trace_step(fn, self.params, self.optimizer, self.specs, self.input_names, self.name,
                                    self.options)
        self.traced_layout[:] = [layout]
        return traced

    def finish(self, model: onnx.ModelProto) -> None:
        """Store the step's layout in its metadata, so gc.runtime.Trainer can run the saved file."""
        self.layout.attach(model)

    def check_feeds(self, model: onnx.ModelProto) -> dict[str, np.ndarray]:
        """A random batch, the initial parameters, optimizer state and hyper-parameters."""
        state, count = self.layout.initial_state(self.params.values)
        hyper = {name: np.asarray(default, dtype) for name, default, dtype in self.layout.hyper}
        return {**random_feeds(model), **self.params.values, **state, "step": count, **hyper}

    def manifest_extra(self) -> dict:
        """A "train_step" entry holding the layout, so a reader of the manifest knows how to feed the step."""
        return {"train_step": self.layout.to_dict()}

    def initial_values(self) -> dict[str, np.ndarray]:
        """The parameters and buffers the step starts from, by state-dict name."""
        return dict(self.params.values)


@overload
def export_train(fn: _F, /, *, params: Any, optimizer: Optimizer, name: str | None = None,
                 **batch_specs_and_options: Any) -> _F: ...


@overload
def export_train(fn: None = None, /, *, params: Any, optimizer: Optimizer, name: str | None = None,
                 **batch_specs_and_options: Any) -> Callable[[_F], _F]: ...


def export_train(fn: _F | None = None, /, *, params: Any, optimizer: Optimizer, name: str | None = None,
                 **batch_specs_and_options: Any) -> _F | Callable[[_F], _F]:
    """Mark a loss function for `gcompile build`, which writes its training step as NAME.onnx:

        @gc.export_train(params=weights, optimizer=gc.optim.Adam(1e-3), x=gc.spec(("batch", 8)),
                         hyperparams={"lr": 1e-3})
        def train_step(p, x): ...

    The function's first parameter receives the params (any pytree, as export_train_step takes);
    every other positional parameter needs a spec. The keyword options of export_train_step
    (StepOptions: has_aux, hyperparams, clip_grad_norm, skip_nonfinite) are taken by name beside
    the specs, so no batch parameter may be called like one. The manifest marks the artifact as a
    training step ("train_step": its input/output layout). The function is returned unchanged.
    """
    checked = check_params(params, optimizer)
    batch_specs = {k: v for k, v in batch_specs_and_options.items() if k not in StepOptions.names()}
    options = StepOptions.take("@gc.export_train", {k: v for k, v in batch_specs_and_options.items()
                                                   if k in StepOptions.names()})

    def mark(f: _F) -> _F:
        label = getattr(f, "__qualname__", repr(f))
        positional = [p for p in inspect.signature(f).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if not positional:
            raise GcompileError(f"@gc.export_train on {label}: the loss function's first parameter receives "
                                "the params dict; it has no positional parameter")
        batch = [p for p in positional[1:] if p.name not in (options.hyperparams or {})]   # those go by keyword
        reserved = [p.name for p in batch if p.name in StepOptions.names()]
        if reserved:
            raise GcompileError(f"@gc.export_train on {label}: batch parameter {reserved[0]!r} has the name of an "
                                "option of the training step; rename it")
        unknown = [k for k in batch_specs if k not in {p.name for p in batch}]
        missing = [p.name for p in batch if p.name not in batch_specs]
        if unknown or missing:
            raise GcompileError(f"@gc.export_train on {label}: "
                                + (f"no batch parameter named {', '.join(map(repr, unknown))}; " if unknown else "")
                                + (f"missing spec for {', '.join(map(repr, missing))}; " if missing else "")
                                + f"batch parameters: {', '.join(p.name for p in batch) or 'none'}")
        try:
            specs = tuple(as_spec(batch_specs[p.name]) for p in batch)
            options.check(f, optimizer)
        except GcompileError as err:
            raise GcompileError(f"@gc.export_train on {label}: {err}") from None
        artifact = _artifact_name("@gc.export_train", label, f, name)
        step_layout(checked, optimizer, [p.name for p in batch], options)   # name clashes fail here, at the decorator
        record = TrainExport(artifact, tuple(p.name for p in batch), specs, params=checked, optimizer=optimizer,
                             options=options)
        setattr(f, _MARK, record)
        return f

    return mark if fn is None else mark(fn)


def export_info(fn: Any) -> Export | None:
    """The Export record of a marked function, else None."""
    info = getattr(fn, _MARK, None)
    return info if isinstance(info, Export) else None


def exported_functions(module: types.ModuleType) -> list[Callable]:
    """Functions defined in `module` and marked with @gc.export, in source order."""
    found = [f for f in vars(module).values()
             if callable(f) and export_info(f) is not None and getattr(f, "__module__", None) == module.__name__]
    unique = list({id(f): f for f in found}.values())
    return sorted(unique, key=lambda f: getattr(getattr(f, "__code__", None), "co_firstlineno", 0))

