"""ONNX Runtime CPU strategies for softmax and log-softmax: its own kernels along the last axis,
the written-out formula along another (ONNX Runtime moves such an axis last and back around its
kernel, on one core: docs/strategies.md)."""
from __future__ import annotations

import math

from ....ir import dims
from ....ops.nn import lower_cross_entropy, softmax_formula
from ..base import strategy


def _along_last(ctx, node) -> bool:
    """Whether the softmax axis is the last one, size-1 axes after it aside (or its size is not
    static or is 0: then the kernel as well)."""
    t = ctx.graph.type_of(node.inputs[0])
    axis = node.attrs["axis"]
    size, inner = t.shape[axis], t.shape[axis + 1:]
    return not inner or dims.is_static(inner) and math.prod(inner) == 1 or not isinstance(size, int) or size == 0


@strategy("ort-cpu", "softmax", "inner_axis_formula", lambda ctx, node: not _along_last(ctx, node))
def _softmax(ctx, names, node):
    return softmax_formula(ctx, "Softmax", names[0], node.attrs["axis"])


@strategy("ort-cpu", "log_softmax", "last_axis_kernel", _along_last)
def _log_softmax(ctx, names, node):
    return ctx.emit("LogSoftmax", names, axis=node.attrs["axis"])


@strategy("ort-cpu", "softmax_cross_entropy", "last_axis_kernel", _along_last)
def _cross_entropy(ctx, names, node):
    return lower_cross_entropy(ctx, names, node, log_softmax="op")
