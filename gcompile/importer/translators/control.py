"""ONNX Scan and Loop nodes as gc.scan: the body is translated once into a loop body, so an imported
loop stays a loop (and differentiates like one).

Scan (opset 9 on): each scan input is moved to axis 0 and reversed where its direction says so,
the body runs as the scan's step, and each scan output is reversed and moved to its axis after.
Loop: only with a trip count known at import time (a constant, an initializer, a shape
computation) and a condition that stays true: the body's condition output must be known at
import time to be true (passing on its condition input, as exporters write a for loop, is). The
iteration number is the scan's x, an int64 Tensor. A body that needs it at import time (to slice
with it, say) is unrolled instead, up to UNROLL_LIMIT iterations. A Loop whose trip count is only
known at run time, or that stops on a condition computed from data, is refused (gc.while_loop
expresses the latter, but its stacked outputs would have a run-time length).
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...errors import TraceError, UnsupportedError
from ...frontend.tensor import Tensor, as_tensor
from ...ops.control import scan
from ..table import onnx_op

UNROLL_LIMIT = 256


def _axis(n, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise n.unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def _flip(x: Tensor) -> Tensor:
    return x[::-1]


def _scan_input(n, x, axis: int, backwards: int) -> Tensor:
    x = as_tensor(x)
    axis = _axis(n, axis, x.ndim, "scan_input_axes entry")
    if axis:
        x = F.transpose(x, (axis, *[a for a in range(x.ndim) if a != axis]))
    return _flip(x) if backwards else x


def _scan_output(n, y: Tensor, axis: int, backwards: int) -> Tensor:
    y = _flip(y) if backwards else y
    axis = _axis(n, axis, y.ndim, "scan_output_axes entry")
    if axis:
        y = F.transpose(y, (*range(1, axis + 1), 0, *range(axis + 1, y.ndim)))
    return y


def _looped(n, step, init: list, xs, length=None):
    """gc.scan(step, init, xs), with the changes of shape or dtype ONNX allows but a scan does not refused."""
    try:
        return scan(step, list(init), xs, length=length)
    except TraceError as err:
        raise n.unsupported(f"its body cannot be one loop step: {err}") from None


@onnx_op("Scan")
def _scan(n, *operands):
    if n.opset < 9:
        raise n.unsupported("Scan before opset 9 (with a batch axis and sequence_lens) is not supported")
    body = n.attr("body")
    m = n.attr("num_scan_inputs", 0)
    if not 0 < m <= len(operands):
        raise n.unsupported(f"num_scan_inputs={m} with {len(operands)} inputs")
    n_state = len(operands) - m
    n_out = len(body.output) - n_state
    in_axes, in_dirs = n.attr("scan_input_axes") or [0] * m, n.attr("scan_input_directions") or [0] * m
    out_axes, out_dirs = n.attr("scan_output_axes") or [0] * n_out, n.attr("scan_output_directions") or [0] * n_out
    if (len(in_axes), len(in_dirs), len(out_axes), len(out_dirs)) != (m, m, n_out, n_out):
        raise n.unsupported("its scan_input/output axes and directions do not match its inputs and outputs")
    xs = [_scan_input(n, x, a, d) for x, a, d in zip(operands[n_state:], in_axes, in_dirs)]

    def step(carry, x):
        outs = n.run_graph(body, [*carry, *x])
        return outs[:n_state], outs[n_state:]
    final, ys = _looped(n, step, operands[:n_state], xs)
    return [*final, *(_scan_output(n, y, a, d) for y, a, d in zip(ys, out_axes, out_dirs))]


@onnx_op("Loop")
def _loop(n, trips=None, cond=None, *initial):
    body = n.attr("body")
    if trips is None:
        raise n.unsupported("a Loop without a trip count (it stops on a condition computed at run time) is not "
                            "supported: its stacked outputs would have a run-time length")
    count = n.ints(trips, "trip count")[0]
    if cond is not None and not bool(n.known(cond, "condition").reshape(-1)[0]):
        count = 0

    def step(carry, i):
        outs = n.run_graph(body, [i, np.array(True), *carry])
        go = outs[0]
        if not isinstance(go, np.ndarray) or not bool(go.reshape(-1)[0]):
            raise n.unsupported("its body's condition output is computed at run time (a loop that stops on "
                                "data), not known at import time to stay true")
        return outs[1:1 + len(initial)], outs[1 + len(initial):]
    try:
        final, ys = _looped(n, step, initial, np.arange(max(count, 0), dtype=np.int64))
    except UnsupportedError as err:   # the body needs its iteration number at import time
        if count > UNROLL_LIMIT or "must be known at import time" not in str(err):
            raise
        return _unrolled(step, initial, count)
    return [*final, *ys]


def _unrolled(step, carry, count: int):
    """The loop unrolled at import time, its iteration number known at each step (zero steps: one
    step is translated, unused, for the types of the stacked outputs)."""
    ys: list = []
    for i in range(max(count, 1)):
        new, y = step(carry, np.asarray(i, np.int64))
        ys.append([as_tensor(v) for v in y])
        carry = new if count else carry
    if not count:
        return [*carry, *(F.full((0, *v.shape), 0, v.dtype) for v in ys[0])]
    return [*carry, *(F.stack([y[j] for y in ys]) for j in range(len(ys[0])))]
