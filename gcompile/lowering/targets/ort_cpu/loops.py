"""ONNX Runtime CPU strategy for scans: a Scan whose body reads loop-invariant values from the
enclosing graph and runs backwards where the scan does. ONNX Runtime takes both, and they save
the plain form's state variables and Slices. (Unrolling short scans at lowering was measured and
lost to this form on an LSTM's gradient at 4 to 32 steps: docs/strategies.md.)
"""
from __future__ import annotations

from ....ops.control import scan_lower, scan_operands
from ..base import strategy


def _outer_reads(ctx, names, node) -> list[str]:
    """A Scan whose body reads the loop-invariant operands from the enclosing graph, with
    scan_input_directions and scan_output_directions for a reverse scan."""
    a = node.attrs
    consts, carries, xs, tail = scan_operands(ctx, names, node)
    graph = ctx.subgraph(a["body"], consts + [None] * (len(names) - a["n_consts"]), tail=tail)
    n_ys = len(node.outputs) - a["n_carry"]
    directions = [int(a["reverse"])]
    return ctx.emit("Scan", carries + xs, n_out=len(node.outputs), body=graph, num_scan_inputs=len(xs),
                    scan_input_directions=directions * len(xs),
                    scan_output_directions=directions * n_ys if n_ys else None)


@strategy("ort-cpu", "scan", "outer_reads", lambda ctx, node: True)
def _scan(ctx, names, node) -> list[str]:
    return scan_lower(ctx, names, node, _outer_reads)
