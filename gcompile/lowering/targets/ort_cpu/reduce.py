"""ONNX Runtime CPU strategies for sums and means: over leading axes, a product with a row of ones.

ONNX Runtime reduces few long rows on one core (or slower on two), where its MatMul splits the
same sum among threads (docs/strategies.md)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ....ir.graph import TensorType
from ..base import strategy


def _leading(t: TensorType, axes: Sequence[int]) -> int:
    """The rows of a float sum over leading axes (every reduced axis before every kept one,
    size-1 axes aside), 0 where the reduction is not one or has fewer than two rows."""
    shape = t.shape
    reduced = [a for a in axes if shape[a] != 1]
    kept = [a for a in range(len(shape)) if a not in axes and shape[a] != 1]
    if np.dtype(t.dtype) not in (np.float32, np.float64) or not kept or not reduced or max(reduced) > min(kept) \
            or not all(isinstance(shape[a], int) for a in reduced):
        return 0
    rows = math.prod(shape[a] for a in reduced)
    return rows if rows >= 2 else 0


def sum_or_product(ctx, x: str, t: TensorType, axes: Sequence[int], keepdims: bool, op_type: str = "ReduceSum") -> str:
    """ReduceSum (or ReduceMean) of x (of type t) over `axes`, as a product with a row of ones
    where the axes lead."""
    axes = sorted(axes)
    rows = _leading(t, axes)
    if not rows:
        return ctx.emit(op_type, [x, ctx.int64s(axes)], keepdims=int(keepdims))
    out_shape = [1 if a in axes else d for a, d in enumerate(t.shape) if keepdims or a not in axes]
    flat = ctx.emit("Reshape", [x, ctx.int64s([rows, -1])])
    ones = ctx.fill((1, rows), 1, t.dtype)    # made at load, not stored
    y = ctx.emit("MatMul", [ones, flat])
    if op_type == "ReduceMean":
        y = ctx.emit("Div", [y, ctx.const(np.asarray(rows, t.dtype))])
    return ctx.emit("Reshape", [y, ctx.shape_tensor(out_shape)], allowzero=1)   # a 0 is an empty dim


def _leads(ctx, node) -> bool:
    return bool(_leading(ctx.graph.type_of(node.inputs[0]), node.attrs["axes"]))


@strategy("ort-cpu", "reduce_sum", "leading_product", _leads)
def _sum(ctx, names, node):
    return sum_or_product(ctx, names[0], ctx.graph.type_of(node.inputs[0]), node.attrs["axes"],
                          node.attrs["keepdims"])


@strategy("ort-cpu", "reduce_mean", "leading_product", _leads)
def _mean(ctx, names, node):
    return sum_or_product(ctx, names[0], ctx.graph.type_of(node.inputs[0]), node.attrs["axes"],
                          node.attrs["keepdims"], "ReduceMean")
