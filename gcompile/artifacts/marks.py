"""@gc.export: marking functions for `gcompile build`.

The decorator only records the input specs on the function (and checks them against its
signature right away, so a typo fails at import with the decorator's line); `gcompile
build` later finds the marked functions of a model file and traces each one.
"""
from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from ..errors import GcompileError
from ..frontend.spec import Spec, as_spec

__all__ = ["export"]

_MARK = "__gcompile_export__"
_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_F = TypeVar("_F", bound=Callable)


@dataclass(frozen=True)
class Export:
    """What `gcompile build` needs to trace one function: artifact name, input names and specs."""
    name: str
    input_names: tuple[str, ...]
    specs: tuple[Spec, ...]


@overload
def export(fn: _F, /, *, name: Any = None, **specs: Any) -> _F: ...


@overload
def export(fn: None = None, /, *, name: Any = None, **specs: Any) -> Callable[[_F], _F]: ...


def export(fn: _F | None = None, /, *, name: Any = None, **specs: Any) -> _F | Callable[[_F], _F]:
    """Mark `fn` for `gcompile build`, one spec per positional parameter:

        @gc.export(x=gc.spec(("batch", 784), "float32"))
        def predict(x): ...

    Each value is a gc.spec or an example array. Parameters that have a default may be left
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
            resolved.append(as_spec(specs[p.name]))
        except GcompileError as err:
            raise GcompileError(f"@gc.export on {label}, parameter {p.name!r}: {err}") from None
        input_names.append(p.name)
    missing = [p.name for p in positional if p.name not in specs and p.default is p.empty]
    if missing:
        raise GcompileError(f"@gc.export on {label}: missing spec for parameter {', '.join(map(repr, missing))}; "
                            f"write e.g. @gc.export({missing[0]}=gc.spec((\"batch\", 16), \"float32\"))")
    artifact = name if name is not None else getattr(fn, "__name__", "")
    if not _ARTIFACT_NAME.fullmatch(artifact or ""):
        raise GcompileError(f"@gc.export on {label}: artifact name {artifact!r} must be letters, digits, "
                            "'_', '.' or '-' (it becomes the file name NAME.onnx)")
    return Export(artifact, tuple(input_names), tuple(resolved))


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

