"""Trainer checkpoints: .npz files of named arrays, written atomically and read defensively.

A checkpoint is a zip of .npy entries, and a crafted one (a header declaring a huge array, a
deflate bomb, thousands of entries) would make numpy allocate before anything is checked. So
`read` checks everything it can against the expected layout before reading any data: the file's
size, the entry names, each entry's .npy header (dtype, shape; no Python objects) and its
declared size; only then does it read exactly the bytes each array needs.
"""
from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib import format as npy

from ..errors import GcompileError, InputError
from ..ir.dims import format_shape
from ..runtime.files import atomic_write

_HEADER_LIMIT = 10_000                # bytes of a .npy header (numpy's own default limit)
_ENTRY_OVERHEAD = 4096                # zip headers, directory entry and .npy header of one entry, at most
_ARCHIVE_OVERHEAD = 64 * 1024 + 1024  # end records and the longest zip comment


def write(path, arrays: dict[str, Any]) -> None:
    """Write `arrays` to the .npz file `path`, atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write(path, buffer.getvalue())


def read(path, expected: Mapping[str, tuple[np.dtype, tuple[int, ...]]]) -> dict[str, np.ndarray]:
    """The arrays of checkpoint `path`, which must hold exactly the names of `expected`, each with
    its (dtype, shape). InputError for a checkpoint that does not fit, GcompileError for one that
    cannot be read; either before any array data is read."""
    path = os.fspath(path)
    sizes = {name: int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
             for name, (dtype, shape) in expected.items()}
    limit = _ARCHIVE_OVERHEAD + sum(size + _ENTRY_OVERHEAD + 3 * len(name) for name, size in sizes.items())
    try:
        if os.path.getsize(path) > limit:
            raise InputError(f"checkpoint {path!r} is {os.path.getsize(path)} bytes, more than a checkpoint of this "
                             f"training step can be ({limit} bytes at most)")
        with zipfile.ZipFile(path) as archive:
            entries = _entries(path, archive, expected)
            headers = {name: _header(path, archive, info, name, *expected[name], sizes[name])
                       for name, info in entries.items()}
            return {name: _data(path, archive, entries[name], name, *headers[name], *expected[name], sizes[name])
                    for name in expected}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as err:
        raise GcompileError(f"cannot read checkpoint {path!r}: {err}") from None


def _entries(path: str, archive: zipfile.ZipFile, expected: Mapping) -> dict[str, zipfile.ZipInfo]:
    """Entry name (without .npy) -> its zip entry; exactly the expected names, each once."""
    infos = archive.infolist()
    names = [info.filename[:-4] if info.filename.endswith(".npy") else info.filename for info in infos]
    twice = sorted({n for n in names if names.count(n) > 1})
    missing = [n for n in expected if n not in names]
    extra = [n for n in names if n not in expected]
    if twice or missing or extra:
        parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + \
                ([f"unexpected {', '.join(map(repr, extra[:10]))}" + (f" and {len(extra) - 10} more" if len(extra) > 10
                                                                      else "")] if extra else []) + \
                ([f"{', '.join(map(repr, twice))} twice"] if twice else [])
        raise InputError(f"checkpoint {path!r} entries do not match the training step: {'; '.join(parts)}")
    return dict(zip(names, infos))


def _header(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, dtype, shape,
            size: int) -> tuple[int, bool]:
    """(data offset, Fortran order) of an entry whose .npy header declares `dtype` and `shape`."""
    what = f"checkpoint {path!r} entry {name!r}"
    if info.file_size > size + _HEADER_LIMIT + 16:
        raise InputError(f"{what} is {info.file_size} bytes, more than its array takes ({size} bytes)")
    with archive.open(info) as fh:
        version = npy.read_magic(fh)
        if version == (1, 0):
            got_shape, fortran, got_dtype = npy.read_array_header_1_0(fh, max_header_size=_HEADER_LIMIT)
        elif version == (2, 0):
            got_shape, fortran, got_dtype = npy.read_array_header_2_0(fh, max_header_size=_HEADER_LIMIT)
        else:
            raise InputError(f"{what}: .npy format version {version} is not supported (1.0 and 2.0 are)")
        offset = fh.tell()
    if got_dtype.hasobject:
        raise InputError(f"{what} holds Python objects ({got_dtype}); a checkpoint holds numeric arrays only")
    if got_dtype != dtype or tuple(got_shape) != tuple(shape):
        raise InputError(f"{what}: the training step expects {np.dtype(dtype).name}{format_shape(tuple(shape))}, "
                         f"got {got_dtype.name}{format_shape(tuple(got_shape))}")
    if info.file_size != offset + size:
        raise InputError(f"{what} is {info.file_size} bytes, but its header and array take {offset + size}")
    return offset, fortran


def _data(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, offset: int, fortran: bool,
          dtype, shape, size: int) -> np.ndarray:
    """The array of an entry whose header `_header` checked: exactly `size` bytes after the header."""
    with archive.open(info) as fh:
        fh.read(offset)
        raw = fh.read(size)
    if len(raw) != size:
        raise GcompileError(f"cannot read checkpoint {path!r}: entry {name!r} ends after {len(raw)} of {size} bytes")
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")
