"""Finding the user's source line that created a node (for error messages and ONNX doc_strings)."""
from __future__ import annotations

import functools
import os
import sys
from types import FrameType

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def _is_internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def user_location() -> str:
    """'file.py:LINE' of the innermost stack frame outside the gcompile package."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
