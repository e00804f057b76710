"""Shape dimensions: an int, or a symbol name such as "batch".

Products of dims (flatten, reshape with -1) are kept exact as monomials written
"784*batch", so a reshape of a symbolic batch stays symbolic and can be undone.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TypeAlias

Dim: TypeAlias = "int | str"
Shape = tuple  # tuple[Dim, ...]


def _parse(dim: Dim) -> tuple[int, Counter]:
    if isinstance(dim, int):
        return dim, Counter()
    coef, syms = 1, Counter[str]()
    for part in dim.split("*"):
        if part.isdigit():
            coef *= int(part)
        else:
            syms[part] += 1
    return coef, syms


def _format(coef: int, syms: Counter) -> Dim:
    if not syms or coef == 0:
        return coef
    names = sorted(syms.elements())
    if coef == 1 and len(names) == 1:
        return names[0]
    return "*".join(([str(coef)] if coef != 1 else []) + names)


def product(dims: Iterable[Dim]) -> Dim:
    """Exact product of dims; symbolic factors stay symbolic."""
    coef, syms = 1, Counter[str]()
    for d in dims:
        c, s = _parse(d)
        coef *= c
        syms += s
    return _format(coef, syms)


def divide(num: Dim, den: Dim) -> Dim | None:
    """num / den when it is exact (as a monomial), else None."""
    cn, sn = _parse(num)
    cd, sd = _parse(den)
    if cd == 0 or cn % cd or any(sn[k] < v for k, v in sd.items()):
        return None
    return _format(cn // cd, sn - sd)


def symbols(dim: Dim) -> list[str]:
    """The plain symbol names a dim is built from ("784*batch" -> ["batch"])."""
    return sorted(_parse(dim)[1].elements())


def shape_symbols(shapes) -> set[str]:
    """Every symbol in the dims of the given shapes: those that bind a loop body's sizes, or that a
    value's size depends on."""
    return {s for shape in shapes for d in shape if isinstance(d, str) for s in symbols(d)}


def solve(dim: Dim, size: int) -> tuple[str, int] | None:
    """(symbol, value) where `dim` is k·symbol (one symbol, to the first power) and k divides `size`:
    a value of that dim binds the symbol too ("3*batch" of size 6 gives batch = 2). None otherwise."""
    coef, syms = _parse(dim)
    if len(syms) != 1 or coef == 0 or size % coef:
        return None
    ((name, power),) = syms.items()
    return (name, size // coef) if power == 1 else None


def resolve(dim: Dim, bindings: dict) -> int:
    """The int value of a dim given values for its symbols."""
    coef, syms = _parse(dim)
    for name, power in syms.items():
        coef *= bindings[name] ** power
    return coef


def resolve_shape(shape: Shape, bindings: dict) -> tuple[int, ...]:
    return tuple(resolve(d, bindings) for d in shape)


def is_static(shape: Shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def format_shape(shape: Shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def dtype_name(dtype) -> str:
    """A numpy dtype as messages name it: its name, except text, which numpy names by width
    ('str32', 'bytes16'): "string" (what an ONNX string tensor holds) and "bytes"."""
    return {"U": "string", "S": "bytes"}.get(dtype.kind, dtype.name)


def format_type(dtype, shape: Shape) -> str:
    """'float32(2, 3)', 'string(2,)'."""
    return dtype_name(dtype) + format_shape(shape)


def astype_hint(expected, got) -> str:
    """For an array of dtype `got` given where `expected` is wanted: how to convert it, when
    numpy can (between numbers and booleans), else '' (also when the dtypes already agree: a
    caller reporting a wrong shape must not suggest a conversion)."""
    if expected != got and expected.kind in "biuf" and got.kind in "biuf":
        return f" (convert it with .astype(np.{expected.name}))"
    return ""


def bind(bindings: dict, declared: Shape, actual, source: str) -> tuple | None:
    """Record the size each plain symbol of `declared` takes in `actual` (as (size, source) in
    `bindings`); return (symbol, size, first size, first source) for the first symbol already
    bound to another size, else None. Callers phrase the error for their context."""
    for d, n in zip(declared, actual):
        if isinstance(d, str) and d != "?" and "*" not in d:
            first_n, first_source = bindings.setdefault(d, (n, source))
            if first_n != n:
                return d, n, first_n, first_source
    return None
