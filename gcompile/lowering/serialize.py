"""ONNX model bytes, with the weights of a model too large for one protobuf in an external data file;
sealed (seal.py) for a file.

Deterministic: equal models give equal bytes (the build's byte-identical rebuilds rely on it).
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import NamedTuple

import onnx
from onnx import TensorProto
from onnx.external_data_helper import set_external_data

from ..errors import GcompileError
from .seal import sealed

EXTERNAL_DATA_THRESHOLD = 2 * 1024 ** 3   # protobuf cannot serialise a message of 2 GiB
_MIN_EXTERNAL_TENSOR = 1024               # smaller initializers (axes, scalars) stay inline
_ALIGN = 64
class Serialized(NamedTuple):
    data: bytes                # the .onnx file
    weights: bytes | None      # its external data file, or None for a model kept in one file
    location: str | None       # the external data file's name, as the .onnx refers to it


def external_data_name(model_file, weights: bytes) -> str:
    """The external data file beside a model, named by its content: predict.onnx ->
    predict.onnx.<first 16 hex digits of the data's sha256>.data. A new version of the weights
    never replaces the file an older .onnx refers to, so writers can commit the .onnx last."""
    return f"{os.path.basename(os.fspath(model_file))}.{hashlib.sha256(weights).hexdigest()[:16]}.data"


def external_data_versions(model_file, names) -> list[str]:
    """The names among `names` of external data files of `model_file`, whatever their version."""
    pattern = re.compile(re.escape(os.path.basename(os.fspath(model_file))) + r"\.[0-9a-f]{16}\.data")
    return [n for n in names if pattern.fullmatch(n)]


def serialize(model: onnx.ModelProto, file_name: str, threshold: int = EXTERNAL_DATA_THRESHOLD,
              seal: bool = True) -> Serialized:
    """The bytes of `model` saved as `file_name`, sealed (seal.py) unless `seal`
    is False (a model handed to a session in memory), and, when it keeps its weights in an
    external data file beside it, that file's bytes and name (see external_data_name).

    A model whose size reaches `threshold` bytes keeps every initializer of 1 KiB or more
    in the data file instead, in graph order, 64-byte aligned, so equal models give equal
    files. `model` is left as it was.
    """
    def written(weights: bytes | None = None, location: str | None = None) -> Serialized:
        return Serialized(sealed(model, weights, location) if seal else model.SerializeToString(), weights, location)

    if threshold < 0:
        raise GcompileError(f"external_data_threshold must be >= 0 bytes, got {threshold}")
    if model.ByteSize() < threshold:
        return written()
    placed, chunks, offset = [], [], 0
    for tensor in model.graph.initializer:
        if not tensor.HasField("raw_data") or len(tensor.raw_data) < _MIN_EXTERNAL_TENSOR:
            continue
        chunks.append(b"\0" * (-offset % _ALIGN))
        offset += len(chunks[-1])
        placed.append((tensor, offset))
        chunks.append(tensor.raw_data)
        offset += len(tensor.raw_data)
    if not placed:
        return written()
    weights = b"".join(chunks)
    location = external_data_name(file_name, weights)
    moved = []
    try:
        for tensor, start in placed:
            raw = tensor.raw_data
            set_external_data(tensor, location, start, len(raw))
            tensor.ClearField("raw_data")
            moved.append((tensor, raw))
        return written(weights, location)
    finally:
        for tensor, raw in moved:
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT
            tensor.raw_data = raw
