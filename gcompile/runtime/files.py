"""Atomic artifact writes: a temporary file in the target folder, then a rename."""
from __future__ import annotations

import os
import tempfile


def atomic_write(path, data: bytes) -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a partial one."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=folder)
    try:
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp's 0600 would make artifacts private
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
