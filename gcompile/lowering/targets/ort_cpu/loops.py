"""ONNX Runtime CPU strategies for scans: short static loops unrolled, the others reading outer values.

ONNX Runtime runs a Scan's body as a subgraph per step, with a fixed cost per step and per body
node, and plans no memory across steps; a short loop of small steps (an LSTM over a sentence)
spends most of its time there. Unrolled, the steps are one graph that its optimiser and memory
planner see whole. Longer loops stay loops (the model's size and build time grow with the trip
count otherwise), as a Scan whose body reads loop-invariant values from the enclosing graph and
runs backwards where the scan does: ONNX Runtime takes both, and they save the state variables
and the Slices of the plain form. docs/strategies.md has the measurements.
"""
from __future__ import annotations

from ....ir.graph import Graph
from ....ops.control import scan_lower, scan_operands
from ..base import strategy

# The most steps, and the most body nodes over all steps, of a scan that is unrolled.
UNROLL_MAX_STEPS = 32
UNROLL_MAX_NODES = 4096


def _unroll_guard(ctx, node) -> bool:
    length, body = node.attrs["length"], node.attrs["body"]
    return isinstance(length, int) and 0 < length <= UNROLL_MAX_STEPS and length * len(body) <= UNROLL_MAX_NODES


@strategy("ort-cpu", "scan", "unrolled", _unroll_guard, thresholds=("UNROLL_MAX_STEPS", "UNROLL_MAX_NODES"))
def _unrolled(ctx, names, node) -> list[str]:
    """The body lowered once per step into the enclosing graph: step t reads the consts, the
    carries step t - 1 gave, and row t of each xs (a Gather); the ys are each step's slices
    stacked (Unsqueeze and Concat), in step order also when the scan runs backwards."""
    a = node.attrs
    nc, nk = a["n_consts"], a["n_carry"]
    body: Graph = a["body"]
    consts, carries, xs = names[:nc], names[nc:nc + nk], names[nc + nk:]
    steps = a["length"]
    ys: list[list[str]] = [[] for _ in range(steps)]
    for t in (reversed(range(steps)) if a["reverse"] else range(steps)):
        index = ctx.const(t, "int64")
        rows = [ctx.emit("Gather", [x, index], axis=0) for x in xs]
        bound = dict(zip(body.inputs, [*consts, *carries, *rows]))
        step = type(ctx)(body, ctx.opset, [bound[r] for r in body.inputs], parent=ctx)
        step.lower_nodes(bound)
        ctx.nodes.extend(step.nodes)
        ctx.begin(node)
        outs = [bound[r] for r in body.outputs]
        carries, ys[t] = outs[:nk], outs[nk:]
    axis0 = ctx.int64s([0])
    stacked = [ctx.emit("Concat", [ctx.emit("Unsqueeze", [y[j], axis0]) for y in ys], axis=0)
               for j in range(len(body.outputs) - nk)]
    return [name if name not in names else ctx.emit("Identity", [name]) for name in carries] + stacked


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
