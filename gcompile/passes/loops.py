"""Loop pruning: a scan node computes only what is read.

Reverse mode makes scans that compute more than a given graph needs: a backward loop computes
the cotangent of every float operand and accumulates a gradient for every float const, and the
forward loop saves every value any backward read (gradients/loops.py). Pruning is what keeps
"the gradient of one input adds no work for the others" true through loops. For each scan:
  - a y output nobody reads is dropped from the body;
  - a carry the body passes on unchanged becomes a loop-invariant operand (a const), and readers
    of its final value read its initial one;
  - a carry whose final value nobody reads and that no kept output depends on is dropped;
  - consts and xs the kept outputs do not depend on are dropped;
then dead-code elimination inside the body (run_to_fixed_point runs every pass in bodies too)
removes what only the dropped outputs needed.
"""
from __future__ import annotations

from ..ir.graph import Graph, Node, ValueRef
from ..ops.control import narrow_scan, scan_uses
from .base import PassResult, replace_uses


def prune_loops(graph: Graph) -> PassResult:
    changed = False
    for node in graph.topo_order():
        if node.op == "scan" and node.id in graph.nodes:
            changed |= _prune(graph, node)
    return PassResult(graph, changed)


def _prune(graph: Graph, node: Node) -> bool:
    a, body = node.attrs, node.attrs["body"]
    nc, nk = a["n_consts"], a["n_carry"]
    nx, ny = len(node.inputs) - nc - nk, len(node.outputs) - nk
    ins, outs = body.inputs, body.outputs
    frozen = [i for i in range(nk) if outs[i] == ins[nc + i]]
    rewired = False
    for i in frozen:
        if i in scan_uses(graph, node):
            replace_uses(graph, node.out(i), node.inputs[nc + i])
            rewired = True
    used = scan_uses(graph, node)
    if not used:
        return rewired   # nothing read: dead-code elimination removes the node
    position = {r.node: k for k, r in enumerate(ins)}
    carries = {i for i in range(nk) if i in used and i not in frozen}
    ys = [j for j in range(ny) if nk + j in used]
    needed: set[int] = set()
    frontier: list[ValueRef] = [outs[i] for i in carries] + [outs[nk + j] for j in ys]
    while frontier:
        ref = frontier.pop()
        for k in (position[n] for n in body.ancestors(ref.node) | {ref.node} if n in position):
            if k in needed:
                continue
            needed.add(k)
            i = k - nc
            if 0 <= i < nk and i not in frozen and i not in carries:
                carries.add(i)
                frontier.append(outs[i])
    keep_consts = [i for i in range(nc) if i in needed]
    keep_frozen = [i for i in frozen if nc + i in needed]
    keep_xs = [j for j in range(nx) if nc + nk + j in needed]
    keep_carries = sorted(carries)
    if (len(keep_consts), len(keep_carries), len(keep_xs), len(ys)) == (nc, nk, nx, ny):
        return rewired
    narrow_scan(graph, node, keep_consts, keep_frozen, keep_carries, keep_xs, ys)
    return True
