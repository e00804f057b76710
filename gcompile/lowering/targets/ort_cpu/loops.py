"""ONNX Runtime CPU strategy for scans: a Scan whose body reads loop-invariant values from the
enclosing graph and runs backwards where the scan does, and which counts the steps of a loop with
nothing to scan over with a placeholder input. ONNX Runtime takes all three, and they save the plain
form's state variables and Slices, and its Loop (ONNX Runtime runs a Scan's steps faster).
(Unrolling short scans at lowering was measured and lost to this form on an LSTM's gradient at 4 to
32 steps: docs/strategies.md.)
"""
from __future__ import annotations

import numpy as np

from ....ir.graph import TensorType, tensor_type
from ....ops.control import scan_lower, scan_parts
from ..base import strategy


def _operands(ctx, names, node) -> tuple[list[str], list[str], list[str], list[tuple[str, TensorType]]]:
    """(consts, carries, xs, tail) of the Scan: a scan without xs scans a placeholder of one byte per
    step, which its body takes as the unread `tail` input."""
    a = node.attrs
    consts, carries, xs = scan_parts(names, a["n_consts"], a["n_carry"])
    if xs:
        return consts, carries, xs, []
    length = a["length"]
    xs = [ctx.const(np.zeros(length, np.bool_)) if isinstance(length, int) else ctx.fill((length,), False, np.bool_)]
    return consts, carries, xs, [("step", tensor_type(np.bool_, ()))]


def _outer_reads(ctx, names, node) -> list[str]:
    """A Scan whose body reads the loop-invariant operands from the enclosing graph, with
    scan_input_directions and scan_output_directions for a reverse scan."""
    a = node.attrs
    consts, carries, xs, tail = _operands(ctx, names, node)
    graph = ctx.subgraph(a["body"], consts + [None] * (len(names) - a["n_consts"]), tail=tail)
    n_ys = len(node.outputs) - a["n_carry"]
    directions = [int(a["reverse"])]
    return ctx.emit("Scan", carries + xs, n_out=len(node.outputs), body=graph, num_scan_inputs=len(xs),
                    scan_input_directions=directions * len(xs),
                    scan_output_directions=directions * n_ys if n_ys else None)


@strategy("ort-cpu", "scan", "outer_reads", lambda ctx, node: True)
def _scan(ctx, names, node) -> list[str]:
    return scan_lower(ctx, names, node, _outer_reads)
