"""ONNX Runtime CPU strategies for matrix products: a transposed left operand made explicit.

A weight gradient is a product aᵀ·g of two tall matrices (positions × channels), summed over their
rows: Gemm with transA. MLAS packs Gemm's right operand once, but reads its left one in place, so
a transposed left operand is transposed again in small blocks for every panel of the right one;
in a training step that operand is an activation written long before, read from memory with
strides, and such products ran well below the rate of the same product with its left operand laid
out row by row. Transposing an operand once (or the other operand and the product, which is small
when the contraction is long) costs less (docs/strategies.md). The session must not fold the
Transpose back into the Gemm (runtime/providers.py disables ONNX Runtime's fusion of the two).
"""
from __future__ import annotations

import numpy as np

from ....ir import dims
from ..base import strategy

# The multiply-adds (M x N x K) from which a float32 Gemm with transA takes _explicit_transpose:
# below it the products are short and a Transpose's pass costs what it saves (docs/strategies.md).
EXPLICIT_TRANSPOSE_MIN_WORK = 1 << 25


def _sizes(ctx, node) -> tuple:
    """(K, M, N) of the product aᵀ·b, or aᵀ·bᵀ, of a (K, M)."""
    (k, m), b = ctx.graph.type_of(node.inputs[0]).shape, ctx.graph.type_of(node.inputs[1]).shape
    return k, m, b[0] if node.attrs["trans_b"] else b[1]


def _explicit_guard(ctx, node) -> bool:
    if not node.attrs["trans_a"]:
        return False
    a, b = (ctx.graph.type_of(r) for r in node.inputs[:2])
    if np.dtype(a.dtype) != np.float32 or not (dims.is_static(a.shape) and dims.is_static(b.shape)):
        return False
    k, m, n = _sizes(ctx, node)
    return m * n * k >= EXPLICIT_TRANSPOSE_MIN_WORK


@strategy("ort-cpu", "gemm", "explicit_transpose", _explicit_guard, thresholds=("EXPLICIT_TRANSPOSE_MIN_WORK",))
def _explicit_transpose(ctx, names, node):
    """aᵀ·b (+ c) with a (K, M) and b (K, N): as Transpose(a)·b, or as (Transpose(b)·a)ᵀ, whose
    product (N, M) is transposed back, whichever moves fewer elements (K·M, or K·N + M·N); with
    bᵀ given, as (b·a)ᵀ, no operand moved."""
    a, b, *c = names
    k, m, n = _sizes(ctx, node)
    if node.attrs["trans_b"]:
        product = ctx.emit("Transpose", [ctx.emit("Gemm", [b, a])], perm=[1, 0])
    elif k * m <= (k + m) * n:
        return ctx.emit("Gemm", [ctx.emit("Transpose", [a], perm=[1, 0]), b, *c])
    else:
        product = ctx.emit("Transpose", [ctx.emit("Gemm", [ctx.emit("Transpose", [b], perm=[1, 0]), a])],
                           perm=[1, 0])
    return ctx.emit("Add", [product, *c]) if c else product
