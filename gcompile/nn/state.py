"""State dict files: .npz (numpy) and .safetensors, read and written without extra dependencies.

A safetensors file is an 8-byte little-endian header length, a JSON header mapping each name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows) and an
optional "__metadata__" of strings, then the raw little-endian bytes. `read` treats a file as
untrusted: the header's size is bounded, every entry's offsets must lie inside the file and hold
exactly the bytes its dtype and shape declare, and expected entries must have the expected shape
before anything is read; .npz files are read with pickles refused.
"""
from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import GcompileError, InputError, name_mismatch
from ..ir.dims import format_shape
from ..runtime import npz
from ..runtime.files import atomic_write

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
           "U8": "u1", "BOOL": "?"}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}
_HEADER_LIMIT = 100 * 1024 * 1024


def _suffix(path) -> str:
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in (".npz", ".safetensors"):
        raise GcompileError(f"{os.fspath(path)}: a state dict file is .npz or .safetensors, "
                            f"got {suffix or 'no suffix'!r}")
    return suffix


def write(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` to a .npz or .safetensors file (by `path`'s suffix), atomically."""
    if _suffix(path) == ".npz":
        npz.write(path, dict(arrays))
        return
    header: dict[str, Any] = {}
    blobs, offset = [], 0
    for name, value in arrays.items():
        arr = np.require(np.asarray(value), requirements="C")   # keeps 0-d arrays 0-d
        code = _CODES.get(arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
        if code is None:
            raise GcompileError(f"{os.fspath(path)}: {name!r} has dtype {arr.dtype.name}, which safetensors "
                                "files here do not hold")
        blob = arr.astype(_DTYPES[code], copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    atomic_write(path, struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path: str | os.PathLike, expected: Mapping[str, tuple[np.dtype, tuple]], strict: bool = True
         ) -> dict[str, np.ndarray]:
    """The arrays of a .npz or .safetensors file. Entries named in `expected` must have its shape
    (they are cast to its dtype by the caller); with strict=True the names must match exactly."""
    where = os.fspath(path)
    if not os.path.isfile(where):
        raise GcompileError(f"{where}: no such state dict file")
    arrays = npz.read(where, expected, what="state dict", owner="module", strict=strict, exact_dtype=False) \
        if _suffix(path) == ".npz" else _read_safetensors(where, expected)
    names = list(arrays)
    missing = [n for n in expected if n not in arrays]
    unexpected = [n for n in names if n not in expected]
    if strict and (missing or unexpected):
        raise InputError(f"{where}: the state dict does not match the module: "
                         + "; ".join(name_mismatch(missing, unexpected, shown=10)))
    return arrays


def _read_safetensors(where: str, expected: Mapping[str, tuple[np.dtype, tuple]]) -> dict[str, np.ndarray]:
    size = os.path.getsize(where)
    with open(where, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise GcompileError(f"{where}: not a safetensors file (shorter than its 8-byte header length)")
        (length,) = struct.unpack("<Q", raw)
        if length > min(size - 8, _HEADER_LIMIT):
            raise GcompileError(f"{where}: its header claims {length} bytes, more than the file holds")
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise GcompileError(f"{where}: its safetensors header is not JSON ({err})") from None
        if not isinstance(header, dict):
            raise GcompileError(f"{where}: its safetensors header is not a JSON object")
        header.pop("__metadata__", None)
        entries = {name: _entry(where, name, info, size - 8 - length) for name, info in header.items()}
        for name, (_, shape, _, _) in entries.items():
            if name in expected and tuple(shape) != tuple(expected[name][1]):
                raise InputError(f"{where}: {name!r} has shape {format_shape(tuple(shape))}, the module expects "
                                 f"{format_shape(tuple(expected[name][1]))}")
        arrays = {}
        for name, (dtype, shape, begin, end) in entries.items():
            fh.seek(8 + length + begin)
            data = fh.read(end - begin)
            arrays[name] = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    return arrays


def _entry(where: str, name: str, info: Any, data_size: int) -> tuple[np.dtype, tuple, int, int]:
    what = f"{where}: entry {name!r}"
    if not isinstance(info, dict) or info.get("dtype") not in _DTYPES:
        raise GcompileError(f"{what}: unsupported or missing dtype (supported: {', '.join(_DTYPES)})")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise GcompileError(f"{what}: shape must be a list of non-negative ints, got {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size):
        raise GcompileError(f"{what}: data_offsets {offsets!r} do not lie inside the file's {data_size} data bytes")
    dtype = np.dtype(_DTYPES[info["dtype"]])
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if nbytes != offsets[1] - offsets[0]:
        raise GcompileError(f"{what}: {info['dtype']}{format_shape(tuple(shape))} takes {nbytes} bytes, "
                            f"its data_offsets hold {offsets[1] - offsets[0]}")
    return dtype, tuple(shape), offsets[0], offsets[1]
