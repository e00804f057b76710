"""ONNX model bytes, with the weights of a model too large for one protobuf in an external data file.

Deterministic: equal models give equal bytes (the build's byte-identical rebuilds rely on it).
"""
from __future__ import annotations

import os

import onnx
from onnx import TensorProto
from onnx.external_data_helper import set_external_data

from ..errors import GcompileError

EXTERNAL_DATA_THRESHOLD = 2 * 1024 ** 3   # protobuf cannot serialise a message of 2 GiB
_MIN_EXTERNAL_TENSOR = 1024               # smaller initializers (axes, scalars) stay inline
_ALIGN = 64


def external_data_name(model_path) -> str:
    """The external data file beside a model: predict.onnx -> predict.onnx.data."""
    return os.path.basename(os.fspath(model_path)) + ".data"


def serialize(model: onnx.ModelProto, location: str,
              threshold: int = EXTERNAL_DATA_THRESHOLD) -> tuple[bytes, bytes | None]:
    """The model's bytes, and the bytes of its external data file `location` (a name
    relative to the model's folder), or None when the model stays one file.

    A model whose size reaches `threshold` bytes keeps every initializer of 1 KiB or more
    in the data file instead, in graph order, 64-byte aligned, so equal models give equal
    files. `model` is left as it was.
    """
    if threshold < 0:
        raise GcompileError(f"external_data_threshold must be >= 0 bytes, got {threshold}")
    if model.ByteSize() < threshold:
        return model.SerializeToString(), None
    moved, chunks, offset = [], [], 0
    try:
        for tensor in model.graph.initializer:
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < _MIN_EXTERNAL_TENSOR:
                continue
            raw = tensor.raw_data
            chunks.append(b"\0" * (-offset % _ALIGN))
            offset += len(chunks[-1])
            set_external_data(tensor, location, offset, len(raw))
            tensor.ClearField("raw_data")
            moved.append((tensor, raw))
            chunks.append(raw)
            offset += len(raw)
        return model.SerializeToString(), (b"".join(chunks) if moved else None)
    finally:
        for tensor, raw in moved:
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT
            tensor.raw_data = raw
