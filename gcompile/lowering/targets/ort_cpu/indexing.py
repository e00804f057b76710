"""ONNX Runtime CPU strategy for a large float scatter_add: the rows of each index summed first.

The plain form (ops/indexing.py added_in_order) adds every update element in turn through one
ScatterElements, which ONNX Runtime runs on one thread; at the sizes of an embedding's gradient
that dominates a step (docs/strategies.md). Here the update rows are sorted by
index and summed by differences of a float64 running sum, and the sums, one per distinct index,
scattered where no two threads share a row. An infinite or NaN update would spread through the
running sum, so an If falls back to the plain form when any update is not finite.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ....ir import dims
from ....ir.graph import tensor_type
from ....ops.indexing import added_in_order, scatter_add_rows
from ..base import strategy

# Update elements from which a float32 (or float16) scatter_add takes the sorted sums; below,
# the plain form's element-by-element adds are as fast (docs/strategies.md).
SORTED_SUMS_MIN = 1 << 16


def _sorted_sums_guard(ctx, node) -> bool:
    base_t, idx_t = (ctx.graph.type_of(r) for r in node.inputs[:2])
    rows = [d for a, d in enumerate(base_t.shape) if a != node.attrs["axis"]]
    size = dims.product((*idx_t.shape, *rows))
    return np.dtype(base_t.dtype) in (np.float32, np.float16) and not (isinstance(size, int)
                                                                      and size < SORTED_SUMS_MIN)


def _sums_or_in_order(ctx, base: str, idx: str, updates: str, rows, count, size, into_zeros: bool) -> str:
    """The sorted sums where every update is finite, else the plain form; the sums are computed
    before the If that picks, so that scatters by one index tensor (the layers of a graph
    network) share its sort (lowering/dedupe.py merges them; it leaves nodes inside a branch alone).
    Into zeros, the plain form makes its own zeros inside its branch: read from outside, they
    were made on every run, a whole table's size (an embedding's gradient) held beside the result."""
    where, sums, finite = _summed_by_index(ctx, idx, updates, rows, count, zero_row=into_zeros)
    types = [tensor_type(np.float32, ())]
    if into_zeros:
        summed = ctx.branch(lambda c: [_placed_in_zeros(c, where, sums, size)], types)
        in_order = ctx.branch(lambda c: [added_in_order(c, c.fill((size, *rows), 0, np.float32), idx, updates, rows)],
                              types)
    else:
        summed = ctx.branch(lambda c: [c.emit("ScatterND", [base, where, sums], reduction="add")], types)
        in_order = ctx.branch(lambda c: [added_in_order(c, base, idx, updates, rows)], types)
    return ctx.emit("If", [finite], then_branch=summed, else_branch=in_order)


@strategy("ort-cpu", "scatter_add", "sorted_sums", _sorted_sums_guard, thresholds=("SORTED_SUMS_MIN",))
def _scatter_add(ctx, names, node):
    return scatter_add_rows(ctx, names, node, _sums_or_in_order)


def _placed_in_zeros(ctx, where: str, sums: str, size) -> str:
    """Zeros of (size, ...) but for the float32 rows `sums` (U + 1, ...; the last one zeros) at
    the distinct indices `where` (U, 1): each of the `size` rows is gathered from the sums by a
    map from each row to its sum's place (U, the zero row, where it has none). One pass writes
    the result, where a ScatterND into zeros first copied the zeros (a 30,000 x 128 embedding
    table's gradient from 4,096 rows: 0.5 of the time)."""
    places = ctx.emit("Reshape", [where, ctx.int64s([-1])])                            # (U,)
    count = ctx.emit("Shape", [places])
    nowhere = ctx.emit("Expand", [count, ctx.shape_tensor((size,))])                   # (size,): U
    order = ctx.emit("Range", [ctx.dim_scalar(0), ctx.emit("Reshape", [count, ctx.int64s([])]), ctx.dim_scalar(1)])
    slots = ctx.emit("ScatterElements", [nowhere, places, order], axis=0)
    return ctx.emit("Gather", [sums, slots], axis=0)


def _summed_by_index(ctx, idx: str, updates: str, rows: tuple, count, zero_row: bool) -> tuple[str, str, str]:
    """The distinct indices of idx (`count` of them) as ScatterND's (U, 1), the sum of the float32
    update rows (count, *rows) of each (U, *rows; zero_row: and a row of zeros after them), and
    whether those sums hold (a bool: every update is finite, as the running sum's last row then
    is; a float64 sum of float32 values cannot overflow). The sums: the rows sorted by index and
    one more row, their exclusive running sum in float64 (the sum of the rows before each, the
    total last), each index's sum the difference of that sum after its last row and after the
    previous index's last (two gathers of U rows; a pair of equal places gives the zero row). A
    ScatterND(reduction=add) of those sums at distinct indices is one no two threads share.
    The running sum's rounding is float64's (1e-16 of the rows' summed magnitudes, below a
    float32 sum's own); an infinite or NaN row would spread into every later index's
    difference, hence the bool."""
    n = ctx.emit("Shape", [idx])
    ordered, perm = ctx.emit("TopK", [idx, n], n_out=2, axis=0, largest=0, sorted=1)
    if isinstance(count, int) and count > 0:   # the extra row is any update row (the running sum leaves it out)
        sorted_rows = ctx.emit("Gather", [updates, ctx.emit("Concat", [perm, ctx.int64s([0])], axis=0)], axis=0)
    else:                        # there may be none: a row of zeros, at the cost of a copy
        sorted_rows = ctx.pad(ctx.emit("Gather", [updates, perm], axis=0), [0] * (1 + len(rows)), [1] + [0] * len(rows))
    running = ctx.emit("CumSum", [ctx.emit("Cast", [sorted_rows], to=TensorProto.DOUBLE), ctx.dim_scalar(0)],
                       exclusive=1)
    following = ctx.emit("Concat", [ctx.emit("Slice", [ordered, ctx.int64s([1]), ctx.int64s([2 ** 63 - 1])]),
                                    ctx.int64s([-1])], axis=0)            # -1: no index, after the last row
    last = ctx.emit("Reshape", [ctx.emit("NonZero", [ctx.emit("Not", [ctx.emit("Equal", [ordered, following])])]),
                                ctx.int64s([-1])])                         # each index's last row
    ends = ctx.emit("Add", [last, ctx.int64s([1])])                       # its place in the running sum
    starts = ctx.emit("Slice", [ctx.emit("Concat", [ctx.int64s([0]), ends], axis=0),
                                ctx.int64s([0]), ctx.int64s([-1])])        # the previous index's, 0 first
    if zero_row:
        ends, starts = (ctx.emit("Concat", [v, ctx.int64s([0])], axis=0) for v in (ends, starts))
    at_end = ctx.emit("Slice", [running, ctx.int64s([-1]), ctx.int64s([2 ** 63 - 1]), ctx.int64s([0])])
    at_end = ctx.emit("ReduceSum", [ctx.emit("Sub", [at_end, at_end])], keepdims=0)   # NaN where any is not finite
    finite = ctx.emit("Not", [ctx.emit("IsNaN", [at_end])])
    after_last, after_previous = (ctx.emit("Gather", [running, v], axis=0) for v in (ends, starts))
    sums = ctx.emit("Cast", [ctx.emit("Sub", [after_last, after_previous])], to=TensorProto.FLOAT)
    return ctx.emit("Unsqueeze", [ctx.emit("Gather", [ordered, last], axis=0), ctx.int64s([-1])]), sums, finite


