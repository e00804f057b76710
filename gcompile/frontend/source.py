"""Finding the user's source line that created a node (for error messages and ONNX doc_strings)."""
from __future__ import annotations

import functools
import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from types import FrameType

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The Python installation's libraries (standard library, site-packages): no line there is the user's.
_LIBRARIES = tuple(sorted({os.path.join(os.path.abspath(sysconfig.get_paths()[key]), "")
                           for key in ("stdlib", "platstdlib", "purelib", "platlib")}))


@functools.cache
def _is_internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


@functools.cache
def _is_library(filename: str) -> bool:
    return filename.startswith("<") or os.path.abspath(filename).startswith(_LIBRARIES)


def user_frame(frames: Iterable[tuple[str, int]]) -> tuple[str, int] | None:
    """The user's (filename, line) among stack frames given innermost first: the first outside the
    gcompile package that runs a source file of the user's. Code generated at run time ('<string>':
    a dataclass's __init__, a namedtuple's __new__) and the standard library and site-packages
    (numpy, collections) hold no line the user wrote: one of those is the answer only where no
    other frame is outside the package (code typed at a REPL, '<stdin>'). Frames of the import
    machinery ('<frozen importlib._bootstrap>') never are."""
    fallback = None
    for filename, line in frames:
        if _is_internal(filename) or filename.startswith("<frozen"):
            continue
        if not _is_library(filename):
            return filename, line
        fallback = fallback or (filename, line)
    return fallback


def user_location() -> str:
    """'file.py:LINE' of the innermost stack frame of the user's (user_frame)."""
    frame: FrameType | None = sys._getframe(1)

    def frames() -> Iterator[tuple[str, int]]:
        walked = frame
        while walked is not None:
            yield walked.f_code.co_filename, walked.f_lineno
            walked = walked.f_back
    found = user_frame(frames())
    return f"{os.path.basename(found[0])}:{found[1]}" if found else ""
