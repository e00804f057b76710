""".npz files of named arrays (Trainer checkpoints, gc.nn state dicts), written atomically and read
defensively.

An .npz is a zip of .npy entries, and a crafted one (a header declaring a huge array, a deflate
bomb, thousands of entries) would make numpy allocate before anything is checked. So `read`
checks everything it can against the expected layout before reading any data: the file's size,
the entry names, each entry's .npy header (dtype, shape; no Python objects) and its declared
size; only then does it read exactly the bytes each array needs.
"""
from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.lib import format as npy

from ..errors import GcompileError, InputError, name_mismatch
from ..ir.dims import format_shape
from .files import atomic_write

_HEADER_LIMIT = 10_000                # bytes of a .npy header (numpy's own default limit)
_ENTRY_OVERHEAD = 4096                # zip headers, directory entry and .npy header of one entry, at most
_ARCHIVE_OVERHEAD = 64 * 1024 + 1024  # end records and the longest zip comment
_WIDEST = 16                          # bytes per element of the widest numeric dtype (complex128)


def load_npy(source) -> np.ndarray:
    """The array of a .npy file (a path or a binary file object), read only after its header is
    checked against the bytes that follow it: numpy's own loader allocates the array a header
    declares before finding out the file is shorter. ValueError for a header that does not fit."""
    if isinstance(source, (str, os.PathLike)):
        with open(os.fspath(source), "rb") as fh:
            return _read_npy(fh)
    return _read_npy(source)


def _read_npy(fh) -> np.ndarray:
    version = npy.read_magic(fh)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f".npy format version {version} is not supported (1.0 and 2.0 are)")
    read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, fortran, dtype = read_header(fh, max_header_size=_HEADER_LIMIT)
    if dtype.hasobject:
        raise ValueError("it holds Python objects; only numeric arrays are read")
    size = int(np.prod(shape, dtype=object)) * dtype.itemsize
    start = fh.tell()
    remaining = fh.seek(0, os.SEEK_END) - start
    if remaining != size:
        raise ValueError(f"its header declares {dtype.name}{format_shape(tuple(shape))} ({size} bytes) but "
                         f"{'more' if remaining > size else remaining} bytes follow it")
    fh.seek(start)
    return np.frombuffer(fh.read(size), dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()


def to_bytes(arrays: Mapping[str, Any]) -> bytes:
    """The .npz file of `arrays`, as np.savez writes it (a zip of uncompressed NAME.npy entries, in
    order) but with fixed entry dates, so the same arrays always give the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, value in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with archive.open(info, "w", force_zip64=True) as fh:   # as np.savez: any size
                npy.write_array(fh, np.asanyarray(value), allow_pickle=False)
    return buffer.getvalue()


def write(path, arrays: Mapping[str, Any]) -> None:
    """Write `arrays` to the .npz file `path` (to_bytes), atomically."""
    atomic_write(path, to_bytes(arrays))


def read(path, expected: Mapping[str, tuple[np.dtype, tuple[int, ...]]], *, what: str = "checkpoint",
         owner: str = "training step", strict: bool = True, exact_dtype: bool = True) -> dict[str, np.ndarray]:
    """The arrays of the .npz file `path` named in `expected`, each with its (dtype, shape).

    strict: the file holds exactly those names (else entries of other names are skipped unread and
    missing ones are left to the caller). exact_dtype: each entry has exactly its dtype (else any
    numeric dtype, which the caller casts). InputError for a file that does not fit, GcompileError
    for one that cannot be read; either before any array data is read. `what` names the file's
    role in messages ("checkpoint", "state dict"), `owner` what sets the layout ("training step",
    "module")."""
    path = os.fspath(path)
    item = {name: np.dtype(dtype).itemsize if exact_dtype else _WIDEST for name, (dtype, _) in expected.items()}
    sizes = {name: int(np.prod(shape, dtype=np.int64)) * item[name] for name, (_, shape) in expected.items()}
    limit = _ARCHIVE_OVERHEAD + sum(size + _ENTRY_OVERHEAD + 3 * len(name) for name, size in sizes.items())
    try:
        if strict and os.path.getsize(path) > limit:
            raise InputError(f"{what} {path!r} is {os.path.getsize(path)} bytes, more than a {what} of this "
                             f"{owner} can be ({limit} bytes at most)")
        with zipfile.ZipFile(path) as archive:
            entries = _entries(path, archive, expected, what, owner, strict)
            headers = {name: _header(path, archive, info, name, *expected[name], sizes[name], what, owner, exact_dtype)
                       for name, info in entries.items()}
            return {name: _data(path, archive, entries[name], name, *headers[name], expected[name][1], what)
                    for name in entries}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as err:
        raise GcompileError(f"cannot read {what} {path!r}: {err}") from None


def _entries(path: str, archive: zipfile.ZipFile, expected: Mapping, what: str, owner: str,
             strict: bool) -> dict[str, zipfile.ZipInfo]:
    """Entry name (without .npy) -> its zip entry, for the expected names present, each once; with
    `strict`, exactly the expected names."""
    infos = archive.infolist()
    names = [info.filename[:-4] if info.filename.endswith(".npy") else info.filename for info in infos]
    twice = sorted({n for n in names if n in expected and names.count(n) > 1})
    missing = [n for n in expected if n not in names] if strict else []
    extra = [n for n in names if n not in expected] if strict else []
    parts = name_mismatch(missing, extra, shown=10) + ([f"{', '.join(map(repr, twice))} twice"] if twice else [])
    if parts:
        raise InputError(f"{what} {path!r} entries do not match the {owner}: {'; '.join(parts)}")
    return {name: info for name, info in zip(names, infos) if name in expected}


def _header(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, dtype, shape,
            size: int, what: str, owner: str, exact_dtype: bool) -> tuple[int, bool, np.dtype]:
    """(data offset, Fortran order, dtype) of an entry whose .npy header declares `shape` and
    `dtype` (any numeric dtype unless `exact_dtype`)."""
    where = f"{what} {path!r} entry {name!r}"
    if info.file_size > size + _HEADER_LIMIT + 16:
        raise InputError(f"{where} is {info.file_size} bytes, more than its array takes ({size} bytes)")
    with archive.open(info) as fh:
        version = npy.read_magic(fh)
        if version == (1, 0):
            got_shape, fortran, got_dtype = npy.read_array_header_1_0(fh, max_header_size=_HEADER_LIMIT)
        elif version == (2, 0):
            got_shape, fortran, got_dtype = npy.read_array_header_2_0(fh, max_header_size=_HEADER_LIMIT)
        else:
            raise InputError(f"{where}: .npy format version {version} is not supported (1.0 and 2.0 are)")
        offset = fh.tell()
    if got_dtype.hasobject or got_dtype.kind not in "biufc":
        held = "Python objects" if got_dtype.hasobject else f"{got_dtype} values"
        raise InputError(f"{where} holds {held}; a {what} holds numeric arrays only")
    if (exact_dtype and got_dtype != dtype) or tuple(got_shape) != tuple(shape):
        expected = f"{np.dtype(dtype).name}{format_shape(tuple(shape))}" if exact_dtype else \
            f"shape {format_shape(tuple(shape))}"
        got = f"{got_dtype.name}{format_shape(tuple(got_shape))}"
        raise InputError(f"{where}: the {owner} expects {expected}, got {got}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * got_dtype.itemsize
    if info.file_size != offset + nbytes:
        raise InputError(f"{where} is {info.file_size} bytes, but its header and array take {offset + nbytes}")
    return offset, fortran, got_dtype


def _data(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, offset: int, fortran: bool,
          dtype: np.dtype, shape, what: str) -> np.ndarray:
    """The array of an entry whose header `_header` checked: exactly its bytes after the header."""
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    with archive.open(info) as fh:
        fh.read(offset)
        raw = fh.read(size)
    if len(raw) != size:
        raise GcompileError(f"cannot read {what} {path!r}: entry {name!r} ends after {len(raw)} of {size} bytes")
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")
