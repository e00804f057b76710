"""Writing files so that a failure changes nothing: temporary files in the target folder, then renames.

- `write_files` writes a set of files into one folder: every file is written in full and
  flushed to disk under a temporary name first, and only then renamed into place, in the given
  order. A failure (a full disk, an error, a kill) before the renames leaves the folder as it
  was, apart from temporary files; the renames themselves write no data. `atomic_write` is
  the one-file case: readers see the old file or the new one, never a partial one.
- Temporary files are named `.NAME.gcompile-tmp-PID-RANDOM`: hidden, and no `*.onnx`, `*.npz`,
  `*.json` or `*.data` glob matches them. A writer killed mid-way leaves its temporaries
  behind; every later write into that folder removes those whose process is gone.
- `folder_lock` serialises writers of one folder (`gcompile build`, `cf.save`) with an flock
  on DIR/.gcompile-lock, which the kernel releases when its process dies, so a killed writer
  never blocks the next one.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Sequence

from ..errors import GcompileError

try:
    import fcntl
except ImportError:      # Windows: no flock; folders are not locked there
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".gcompile-lock"
_TEMP = re.compile(r"\..*\.gcompile-tmp-(\d+)-[0-9a-f]{8}")
_held: set[str] = set()   # folders this process has locked (a second lock would wait on itself)


def atomic_write(path, data: bytes) -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a partial one; a
    GcompileError naming the file where it cannot be written (a full disk, no permission)."""
    path = os.fspath(path)
    try:
        write_files(os.path.dirname(os.path.abspath(path)), [(os.path.basename(path), data)])
    except OSError as err:
        raise GcompileError(f"cannot write {path}: {err.strerror or err}; the file there, if any, is unchanged") \
            from None


def write_files(folder, files: Sequence[tuple[str, bytes]], remove: Iterable[str] = ()) -> None:
    """Write each (file name, bytes) into `folder` as described in the module docstring: all of
    them to temporary files first, then renamed into place in the order given; then delete the
    files named in `remove` (those of an older version the new set no longer has). Files are
    created with the permissions the umask gives. Stale temporary files in the folder go first."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    remove_stale_temporaries(folder)
    temporaries: list[tuple[str, str]] = []
    try:
        for name, data in files:
            fd, temporary = _create(folder, name)
            temporaries.append((temporary, name))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for temporary, name in temporaries:
            os.replace(temporary, os.path.join(folder, name))
    except BaseException:
        for temporary, _ in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        raise
    _sync_folder(folder)
    for name in remove:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))


def temporary_name(name: str) -> str:
    """A fresh temporary name for `name` (kept short enough for any file system)."""
    return f".{name[:120]}.gcompile-tmp-{os.getpid()}-{secrets.token_hex(4)}"


def _create(folder: str, name: str) -> tuple[int, str]:
    """(open descriptor, path) of a new temporary file for `name` in `folder`, created exclusively."""
    while True:
        path = os.path.join(folder, temporary_name(name))
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), path
        except FileExistsError:
            continue


def remove_stale_temporaries(folder: str) -> None:
    """Remove the temporary files in `folder` that a writer no longer running left behind."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        match = _TEMP.fullmatch(name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def _alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (where that cannot be told: assume it does)."""
    if os.name != "posix":   # os.kill(pid, 0) would terminate the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _sync_folder(folder: str) -> None:
    """Flush the folder's entries (the renames) to disk, where the system allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder, wait: bool = False) -> Iterator[None]:
    """Hold `folder`'s writer lock (creating the folder). Without `wait`, a folder another process
    holds is a GcompileError naming it and the holder's process id; with it, wait for the holder.
    The lock file is removed on release."""
    folder = os.fspath(folder)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise GcompileError(f"cannot create {folder} to write into it: {err.strerror or err}") from None
    key = os.path.realpath(folder)
    if key in _held:
        raise GcompileError(f"{folder} is already being written by this process (a nested build or save "
                            "into the same folder)")
    if fcntl is None:
        yield
        return
    path = os.path.join(folder, LOCK_NAME)
    fd = _acquire(path, folder, wait)
    _held.add(key)
    try:
        yield
    finally:
        _held.discard(key)
        with contextlib.suppress(OSError):
            os.unlink(path)    # while still holding it: a waiter that opened this file retries (see _acquire)
        os.close(fd)


def _acquire(path: str, folder: str, wait: bool) -> int:
    """An open descriptor of the lock file at `path`, flocked; nothing stays open when this fails."""
    assert fcntl is not None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:
            raise GcompileError(f"cannot lock {folder} for writing: {path}: {err.strerror or err}") from None
        try:
            if _lock(fd, path, folder, wait):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _lock(fd: int, path: str, folder: str, wait: bool) -> bool:
    """Flock `fd`, the lock file at `path`: True once locked, False where the holder we waited for
    removed that file (lock the current one instead). Records this process's id in it, which a
    full disk may prevent: the id only names the holder in another writer's error."""
    assert fcntl is not None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        who = f"process {holder}" if holder.isdigit() else "another process"
        raise GcompileError(f"{folder} is being written by another gcompile build or save ({who}); wait for "
                            "it to finish or write elsewhere") from None
    try:
        same = os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False
    if same:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
    return same
