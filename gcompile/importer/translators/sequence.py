"""ONNX translators for tensor sequences (SplitToSequence, SequenceAt, SequenceConstruct, SequenceLength,
ConcatFromSequence).

The dynamo exporter writes torch.split and torch.chunk as SplitToSequence followed by one SequenceAt
per piece (GPT-2's query/key/value split). A sequence whose length is known at import time is held
as a TensorSequence, a Python list of its tensors, and each op picks from or joins that list, so a
sequence costs the traced model nothing and every piece differentiates through the ops that made it.
Sequences whose length depends on run-time data (built in a Loop) are not supported.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ops.shape_rules import normalize_axis
from ..table import TensorSequence, onnx_op
from .shape import _static


def _sequence(n, value) -> list:
    if not isinstance(value, TensorSequence):
        raise n.unsupported(f"its input sequence is a {type(value).__name__}, not a sequence")
    return value.items


def _position(n, seq: list, position) -> int:
    index = int(n.known(position, "position").reshape(-1)[0])
    if not -len(seq) <= index < len(seq):
        raise n.unsupported(f"position {index} is out of range for a sequence of {len(seq)} tensors")
    return index % len(seq)


@onnx_op("SplitToSequence")
def _split_to_sequence(n, x, split=None):
    """Pieces of `split` elements each (a scalar: the last piece takes the rest), of the given sizes (a
    1-D split), or of one element with the axis dropped unless keepdims (no split)."""
    axis = normalize_axis(n.attr("axis", 0), x.ndim)
    size = _static(n, x.shape[axis], "splitting")
    if split is None:
        sizes, squeeze = [1] * size, not n.attr("keepdims", 1)
    else:
        given = n.known(split, "split")
        if given.ndim == 0:
            step = int(given)
            if step <= 0:
                raise n.unsupported(f"a split of {step} elements")
            sizes = [min(step, size - start) for start in range(0, size, step)]
        else:
            sizes = [int(s) for s in given]
        squeeze = False
    if sum(sizes) != size or any(s < 0 for s in sizes):
        raise n.unsupported(f"split sizes {sizes} do not add up to the axis size {size}")
    cuts = list(np.cumsum(sizes)[:-1])
    if isinstance(x, np.ndarray):
        pieces = np.split(x, cuts, axis)
        return TensorSequence(np.squeeze(p, axis) if squeeze else p for p in pieces)
    pieces = F.split(x, cuts, axis) if len(sizes) > 1 else [F.identity(x)]
    return TensorSequence(F.squeeze(p, (axis,)) if squeeze else p for p in pieces)


@onnx_op("SequenceAt")
def _sequence_at(n, seq, position):
    items = _sequence(n, seq)
    return items[_position(n, items, position)]


@onnx_op("SequenceConstruct")
def _sequence_construct(n, *xs):
    return TensorSequence(xs)


@onnx_op("SequenceLength")
def _sequence_length(n, seq):
    return np.asarray(len(_sequence(n, seq)), np.int64)


@onnx_op("ConcatFromSequence")
def _concat_from_sequence(n, seq):
    items = _sequence(n, seq)
    if not items:
        raise n.unsupported("an empty sequence")
    if n.attr("new_axis", 0):
        axis = normalize_axis(n.attr("axis"), items[0].ndim + 1)
        items = [F.expand_dims(x, axis) for x in items]
    return F.concat(list(items), normalize_axis(n.attr("axis"), items[0].ndim))
