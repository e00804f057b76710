"""ONNX Scan and Loop nodes as gc.scan: the body is translated once into a loop body, so an imported
loop stays a loop (and differentiates like one).

Scan (opset 9 on): each scan input is moved to axis 0 and reversed where its direction says so,
the body runs as the scan's step, and each scan output is reversed and moved to its axis after.
Before opset 9, every operand has a batch axis and each example runs a loop of its own: one scan
per example of a static batch.
Loop: with a trip count known at import time (a constant, an initializer, a shape computation)
and a condition that stays true (the body's condition output known at import time to be true:
passing on its condition input, as exporters write a for loop, is), a scan whose x is the
iteration number, an int64 Tensor. A body that needs it at import time (to slice with it, say) is
unrolled instead, up to UNROLL_LIMIT iterations. A Loop whose trip count is only known at run time,
or that stops on a condition computed from data, is a `while` node (ops/control.while_node): the
iteration number is an int64 carry, the condition is the body's and `iteration + 1 < trip count`,
and the scan outputs are its stacked ys, of run-time length. It differentiates like gc.while_loop.

If (translated in importer/inline.py): a condition known at import time imports the branch it
selects; one computed at run time imports both branches as a `cond` node (here, `if_node`), whose
backward is an If too.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ... import functions as F
from ...errors import TraceError, UnsupportedError
from ...frontend.source import user_location
from ...frontend.tensor import Tensor, as_tensor
from ...frontend.trace import trace_body
from ...ops import random
from ...ops.control import cond_node, scan, while_node
from ..table import OptionalValue, TensorSequence, onnx_op
from .shape import iota

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
    body = n.attr("body")
    if n.opset < 9:
        return _batched_scan(n, body, *operands)
    m = n.attr("num_scan_inputs", 0)
    if not 0 < m <= len(operands):
        raise n.unsupported(f"num_scan_inputs={m} with {len(operands)} inputs")
    n_state = len(operands) - m
    n_out = len(body.output) - n_state
    in_axes, in_dirs = n.attr("scan_input_axes") or [0] * m, n.attr("scan_input_directions") or [0] * m
    out_axes, out_dirs = n.attr("scan_output_axes") or [0] * n_out, n.attr("scan_output_directions") or [0] * n_out
    if (len(in_axes), len(in_dirs), len(out_axes), len(out_dirs)) != (m, m, n_out, n_out):
        raise n.unsupported("its scan_input/output axes and directions do not match its inputs and outputs")
    return _scanned(n, operands[:n_state], operands[n_state:], in_axes, in_dirs, out_axes, out_dirs)


def _scanned(n, states, scanned, in_axes, in_dirs, out_axes, out_dirs) -> list:
    """The loop of a Scan node without a batch axis: final states, then the scan outputs."""
    xs = [_scan_input(n, x, a, d) for x, a, d in zip(scanned, in_axes, in_dirs)]

    def step(carry, x):
        outs = n.run_graph("body", [*carry, *x])
        return outs[:len(states)], outs[len(states):]
    final, ys = _looped(n, step, states, xs)
    return [*final, *(_scan_output(n, y, a, d) for y, a, d in zip(ys, out_axes, out_dirs))]


def _batched_scan(n, body, lengths, *operands) -> list:
    """Scan before opset 9: every operand has a batch axis first (the scan inputs their sequence axis
    second) and each example runs the loop of its own: one loop per example of a static batch, the
    results stacked. sequence_lens must be absent or the full length."""
    m = n.attr("num_scan_inputs", 0)
    if not 0 < m <= len(operands):
        raise n.unsupported(f"num_scan_inputs={m} with {len(operands)} inputs")
    n_state, n_out = len(operands) - m, len(body.output) - (len(operands) - m)
    batch = operands[0].shape[0]
    steps = operands[n_state].shape[1]
    if not isinstance(batch, int):
        raise n.unsupported(f"Scan before opset 9 over a symbolic batch {batch!r} (one loop per example)")
    if lengths is not None and any(v != steps for v in n.ints(lengths, "sequence_lens")):
        raise n.unsupported(f"Scan before opset 9 with sequence_lens {n.ints(lengths, 'sequence_lens')} shorter "
                            f"than the {steps!r} steps of its inputs")
    dirs = n.attr("directions") or [0] * m
    with n.repeated(batch, f"it scans each of its {batch} examples with a loop of its own"):
        results = [_scanned(n, [x[b] for x in operands[:n_state]], [x[b] for x in operands[n_state:]], [0] * m,
                            dirs, [0] * n_out, [0] * n_out) for b in range(batch)]
    return [F.stack(list(outs), 0) for outs in zip(*results)]


class _RunTimeCondition(Exception):
    """The body's condition output is computed at run time: the Loop becomes a while node."""


@onnx_op("Loop")
def _loop(n, trips=None, cond=None, *initial):
    structured = any(isinstance(v, (TensorSequence, OptionalValue)) for v in initial)
    if n.form == "while" or trips is None or not isinstance(trips, np.ndarray) or \
            cond is not None and not isinstance(cond, np.ndarray):
        if structured:
            raise n.unsupported("it carries a sequence or an optional, so it is unrolled at import: its trip count and "
                                "condition must be known at import time, but are computed at run time")
        return _while(n, trips, cond, initial)
    count = n.ints(trips, "trip count")[0]
    if cond is not None and not bool(n.known(cond, "condition").reshape(-1)[0]):
        count = 0
    if structured and count > UNROLL_LIMIT:     # a sequence's length changes from step to step: unrolled
        raise n.unsupported(f"it carries a sequence or an optional through {count} steps, more than the "
                                f"{UNROLL_LIMIT} unrolled at import")

    def step(carry, i):
        outs = n.run_graph("body", [i, np.array(True), *carry])
        if not outs:
            raise n.unsupported("its body gives no outputs (it must give its condition first)")
        go = outs[0]
        if not isinstance(go, np.ndarray) or not bool(go.reshape(-1)[0]):
            raise _RunTimeCondition
        return outs[1:1 + len(initial)], outs[1 + len(initial):]
    try:
        if structured:
            with n.repeated(max(count, 1), f"it is unrolled into {count} steps"):
                return _unrolled(step, initial, count)
        final, ys = _looped(n, step, initial, iota(max(count, 0)))   # a huge count is no huge constant
    except _RunTimeCondition:
        return _retried(n, trips, cond, initial)
    except UnsupportedError as err:   # the body needs its iteration number at import time
        if count > UNROLL_LIMIT or "must be known at import time" not in str(err):
            raise
        try:
            with n.repeated(max(count, 1), f"it is unrolled into {count} steps"):
                return _unrolled(step, initial, count)
        except _RunTimeCondition:
            return _retried(n, trips, cond, initial)
    return [*final, *ys]


def _retried(n, trips, cond, initial):
    """The Loop as a while node, once translating its body as a scan found its condition computed
    at run time: the body is translated a second time, and only as a while loop when this node is
    translated again (inside an outer loop's body translated again: else each level of nesting
    would double the work)."""
    n.form = "while"
    with n.repeated(2, "its condition is computed at run time"):
        return _while(n, trips, cond, initial)


def _scalar_of(x, dtype) -> Tensor:
    x = as_tensor(x)
    return F.cast(F.reshape(x, ()), dtype)


def _while(n, trips, cond, initial):
    """A Loop that stops on data or at a run-time trip count: one while node carrying the iteration
    number before the Loop's carries."""
    where = f"{n.describe()}, imported at {user_location()}"
    limit = None if trips is None else _scalar_of(trips, np.int64)
    go = as_tensor(np.array(True)) if cond is None else _scalar_of(cond, np.bool_)
    if limit is not None:
        go = F.logical_and(go, limit > 0)
    n_state = len(initial)
    loop = random.new_loop()

    def step(values):
        i, carry = values[0], values[1:]
        with random.iteration(loop, i):   # the iteration number: one more word of the key of its draws
            outs = n.run_graph("body", [i, np.array(True), *carry])
        if len(outs) < 1 + n_state:
            raise n.unsupported(f"its body gives {len(outs)} outputs for {n_state} carries and a condition")
        more = _scalar_of(outs[0], np.bool_)
        if limit is not None:
            more = F.logical_and(more, i + 1 < limit)
        return more, [i + 1, *(as_tensor(v) for v in outs[1:1 + n_state])], [as_tensor(v) for v in outs[1 + n_state:]]
    try:
        finals, ys = while_node(step, go, [as_tensor(np.int64(0)), *(as_tensor(v) for v in initial)], where)
    except TraceError as err:
        raise n.unsupported(f"its body cannot be one loop step: {err}") from None
    except UnsupportedError as err:
        if "must be known at import time" in str(err):
            raise n.unsupported(f"its trip count or condition is only known at run time, so it stays a loop, but "
                                f"its body needs its iteration number at import time: {err}") from None
        raise
    return [*finals[1:], *ys]


def if_node(n, cond, run_branch) -> list:
    """An If whose condition is computed at run time: both branches, as one `cond` node.
    run_branch(name) translates a branch (then_branch or else_branch) in the current trace."""
    where = f"{n.describe()}, imported at {user_location()}"
    def branch(name: str) -> Callable[[list[Tensor]], list[Tensor]]:
        if n.attr(name) is None:
            raise n.unsupported(f"it lacks its {name}")
        return lambda _: [as_tensor(_tensor_output(n, v)) for v in run_branch(name)]
    try:
        traced = [trace_body(branch(name), []) for name in ("then_branch", "else_branch")]
        (then_body, then_captured), (else_body, else_captured) = traced
        return cond_node(_scalar_of(cond, np.bool_), [], then_body, then_captured, else_body, else_captured, where)
    except TraceError as err:   # a branch giving a sequence, or outputs of other types than the other's
        raise n.unsupported(f"its condition is computed at run time, so both branches are imported, but {err}") \
            from None


def _tensor_output(n, value):
    """A branch output of an If decided at run time: a tensor (a sequence's or optional's structure is
    fixed at import, so it cannot depend on a run-time condition)."""
    if isinstance(value, (TensorSequence, OptionalValue)):
        raise n.unsupported("a branch gives a sequence or an optional, so its condition must be known at import "
                            "time (it is computed at run time)")
    return value


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
