"""ONNX translators for tensor sequences (SplitToSequence, SequenceAt, SequenceConstruct, SequenceLength,
ConcatFromSequence, SequenceInsert, SequenceErase, SequenceEmpty, SequenceMap) and optionals (Optional,
OptionalHasElement, OptionalGetElement).

The dynamo exporter writes torch.split and torch.chunk as SplitToSequence followed by one SequenceAt
per piece (GPT-2's query/key/value split). A sequence whose length is known at import time is held
as a TensorSequence, a Python list of its tensors, and each op picks from or joins that list, so a
sequence costs the traced model nothing and every piece differentiates through the ops that made it.
Sequences whose length depends on run-time data are not supported: a Loop that carries a sequence or
an optional is unrolled at import (translators/control.py), which needs its trip count known there,
and an If whose condition is computed at run time cannot give one.

An optional (OptionalValue) is likewise known at import to hold its element or not: exporters write
them around loops for a list that may be None (torch.jit's Optional[List[Tensor]]), and a graph input
of optional type is None or a value when the model is called.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ops.shape_rules import normalize_axis
from ..table import OptionalValue, TensorSequence, onnx_op
from .shape import _static


def _sequence(n, value) -> list:
    if not isinstance(value, TensorSequence):
        raise n.unsupported(f"its input sequence is a {type(value).__name__}, not a sequence")
    return value.items


def _position(n, seq: list, position, end: int = 0) -> int:
    """A position in `seq` (negative from its end); `end` = 1 also allows len(seq), as SequenceInsert."""
    index = int(n.known(position, "position").reshape(-1)[0])
    if not -len(seq) <= index < len(seq) + end:
        raise n.unsupported(f"position {index} is out of range for a sequence of {len(seq)} tensors")
    return index + len(seq) if index < 0 else index


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


@onnx_op("SequenceInsert")
def _sequence_insert(n, seq, x, position=None):
    items = list(_sequence(n, seq))
    items.insert(len(items) if position is None else _position(n, items, position, end=1), x)
    return TensorSequence(items)


@onnx_op("SequenceErase")
def _sequence_erase(n, seq, position=None):
    items = list(_sequence(n, seq))
    if not items:
        raise n.unsupported("erasing from an empty sequence")
    del items[len(items) - 1 if position is None else _position(n, items, position)]
    return TensorSequence(items)


@onnx_op("SequenceEmpty")
def _sequence_empty(n):
    return TensorSequence([])


@onnx_op("Optional")
def _optional(n, x=None):
    if x is not None:
        return OptionalValue(x, "sequence" if isinstance(x, TensorSequence) else "tensor")
    declared = n.attr("type")
    held = declared.optional_type.elem_type if declared is not None and declared.HasField("optional_type") \
        else declared
    kind = "sequence" if held is not None and held.HasField("sequence_type") else "tensor"
    return OptionalValue(None, kind)


@onnx_op("OptionalHasElement")
def _optional_has_element(n, x=None):
    """False for an empty optional or an absent input, true for any other value (opset 18 takes
    tensors and sequences too)."""
    present = x is not None and (not isinstance(x, OptionalValue) or x.element is not None)
    return np.asarray(present)


@onnx_op("OptionalGetElement")
def _optional_get_element(n, x):
    if not isinstance(x, OptionalValue):
        return x                                     # opset 18: a tensor or sequence is its own element
    if x.element is None:
        raise n.unsupported("its optional input is empty (ONNX makes that an error)")
    return x.element


@onnx_op("SequenceMap")
def _sequence_map(n, seq, *others):
    """The body run on each element (and the same element of each other sequence operand; a tensor
    operand is given whole each time), its outputs collected into sequences."""
    items = _sequence(n, seq)
    for other in others:
        if isinstance(other, TensorSequence) and len(other.items) != len(items):
            raise n.unsupported(f"sequences of {len(items)} and {len(other.items)} tensors")
    with n.repeated(max(len(items), 1), f"it maps its body over {len(items)} tensors"):
        results = [n.run_graph("body", [x, *(o.items[i] if isinstance(o, TensorSequence) else o for o in others)])
                   for i, x in enumerate(items)]
    return [TensorSequence(r[j] for r in results) for j in range(len(n.attr("body").output))]
