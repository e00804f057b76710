"""The seal that lets a saved model file protect itself where no build manifest stands beside it.

A sealed file's first field is a metadata_props entry KEY whose value is the sha256 (hex) of every
other byte of the .onnx file. Those bytes include, for a model with external data, the entry
EXTERNAL_KEY: the sha256 of each external data file, by location, so the seal covers the weights
too. The entry comes first (a protobuf parser takes fields in any order, and a repeated field's
entries in the order read) as a fixed header and the 64 digits, so a reader checks it before
parsing anything (runtime/modelfile.py) and a truncated file never loses it. A tool that parses
and saves the model again moves the entry among the other metadata, where it no longer counts as a
seal: such a file is treated as one without a seal, as is any other tool's file.

Sealing is deterministic: equal models give equal sealed bytes.
"""
from __future__ import annotations

import hashlib
import json

import onnx

KEY = "gcompile.sha256"
EXTERNAL_KEY = "gcompile.external_sha256"   # {external data location: sha256 of the file}, inside the sealed bytes
# metadata_props (field 14, length-delimited) holding {key (1): KEY, value (2): 64 hex digits}
_ENTRY = b"\x0a" + bytes([len(KEY)]) + KEY.encode() + b"\x12\x40"
HEAD = b"\x72" + bytes([len(_ENTRY) + 64]) + _ENTRY
SIZE = len(HEAD) + 64


def read(data) -> str | None:
    """The digest a file's bytes are sealed with, None for a file without a seal; a ValueError for
    a seal that is damaged: a header a few bits away from HEAD (a flipped bit there must not
    pass the file off as an unsealed one), a file that ends inside it, digits that are not hex."""
    head = bytes(data[:len(HEAD)])
    if head != HEAD:
        if len(head) == len(HEAD) and sum(bin(a ^ b).count("1") for a, b in zip(head, HEAD)) <= 8:
            raise ValueError("its header is damaged")
        if head and HEAD.startswith(head):
            raise ValueError("the file ends inside it")
        return None
    digits = bytes(data[len(HEAD):SIZE])
    if len(digits) < 64:
        raise ValueError("the file ends inside it")
    if not all(c in b"0123456789abcdef" for c in digits):
        raise ValueError("its digest is not 64 hex digits")
    return digits.decode()


def sealed(model: onnx.ModelProto, weights: bytes | None, location: str | None) -> bytes:
    """`model`'s bytes, sealed: the sha256 of its external data file `location` (holding `weights`)
    recorded, then the seal in front; the entries of an earlier seal it was read with are dropped
    first. `model` is left as it was."""
    entries = [(e.key, e.value) for e in model.metadata_props]
    kept = [(k, v) for k, v in entries if k not in (KEY, EXTERNAL_KEY)]
    if weights is not None:
        kept.append((EXTERNAL_KEY, json.dumps({location: hashlib.sha256(weights).hexdigest()})))
    try:
        _set_metadata(model, kept)
        body = model.SerializeToString()
    finally:
        _set_metadata(model, entries)
    return HEAD + hashlib.sha256(body).hexdigest().encode() + body


def _set_metadata(model: onnx.ModelProto, entries: list[tuple[str, str]]) -> None:
    del model.metadata_props[:]
    for key, value in entries:
        model.metadata_props.add(key=key, value=value)
