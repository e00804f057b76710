"""Exception types users can catch; every message names the cause and, when known, the user's source line."""
from __future__ import annotations

from collections.abc import Sequence


class GcompileError(Exception):
    """Base class: an error caused by the user's program, spec or inputs (the CLI exits 2 on these)."""


class TraceError(GcompileError):
    """The Python function cannot be traced (data-dependent control flow, unsupported numpy call, ...)."""


class ShapeError(GcompileError):
    """Operand shapes or dtypes do not fit an op."""


class UnsupportedError(GcompileError):
    """An op, dtype or ONNX feature gcompile does not support."""


class InputError(GcompileError):
    """Arguments given to a compiled function do not match its specs."""


class LoweringError(GcompileError):
    """The graph cannot be expressed as ONNX for the chosen opset and runtime."""


def name_mismatch(missing: Sequence[str], unexpected: Sequence[str], shown: int | None = None) -> list[str]:
    """The phrases of a message about names that do not match ("missing 'a', 'b'", "unexpected
    'c'"), empty when both lists are; `shown` lists at most that many unexpected names, then how
    many more (a hostile file may hold thousands)."""
    parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    if unexpected:
        listed = list(unexpected if shown is None else unexpected[:shown])
        more = len(unexpected) - len(listed)
        parts.append(f"unexpected {', '.join(map(repr, listed))}" + (f" and {more} more" if more else ""))
    return parts
