"""The order of the emitted ONNX nodes, chosen for how ONNX Runtime loads and schedules a file.

Loading. Each time ONNX Runtime builds a view of the graph (several times per session), it
runs a topological sort that keeps the ready nodes in a list sorted by file position and
inserts by walking that list (1.31). A node ready long before its file position keeps the
list long. Gradient graphs are full of such nodes: the backward reads forward values through
nodes that need nothing else (`1 - tanh(x)**2`, a mask, a weight's transpose), and in trace
order they come after the whole forward, so the list grew with the depth of the network and
loading took time quadratic in the node count: 26 s instead of 3.7 s for a 16,000-node MLP
gradient (docs/notes/performance-history.md). Here each node comes right after the nodes it reads, first
ready first, so that list stays a few nodes long.

Scheduling. ONNX Runtime does not run a file in its order: it runs a depth-first post-order
from the graph's leaves, visiting the leaf last in the file first and, below each node, the
operand produced last in the file first (ARCHITECTURE.md §10). In the order made here, an
operand that was ready early (a forward value's `1 - y**2`) is therefore computed last, just
before the node that reads it, and not kept alive across the rest of the backward. The graph
outputs and the nodes that only feed them (a weight's gradient) go last, the earliest ready
of them at the very end, so the depth-first walk starts with them: each gradient is finished
as soon as its operands exist and they can be freed, as PyTorch's backward does. Those wait in
the loader's list, so this is done for at most MAX_LAST_OUTPUTS outputs (a cost of that many
times the node count); with more, they keep their place among the others.
"""
from __future__ import annotations

from collections import deque

from .reads import node_reads

MAX_LAST_OUTPUTS = 32


def schedule_order(nodes: list, output_names: list[str]) -> list:
    """`nodes` (onnx NodeProtos in a topological order) reordered as the module docstring says.
    Deterministic: the result depends only on the input order."""
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer[out] = i
    readers: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for i, node in enumerate(nodes):
        for p in sorted({producer[name] for name in node_reads(node) if name in producer}):
            readers[p].append(i)
            waiting[i] += 1
    last = _output_groups(nodes, readers, producer, set(output_names))
    if len(set(last.values())) > MAX_LAST_OUTPUTS:
        last = {}
    queue = deque(i for i in range(len(nodes)) if waiting[i] == 0)
    order: list[int] = []
    ready_last: list[int] = []
    while queue:
        i = queue.popleft()
        (ready_last if i in last else order).append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                queue.append(r)
    assert len(order) + len(ready_last) == len(nodes), "schedule_order needs an acyclic node list"
    groups: dict[int, list[int]] = {}    # by leader, in the order the leaders became ready
    for i in ready_last:
        groups.setdefault(last[i], []).append(i)
    for group in reversed(groups.values()):   # the earliest ready at the end
        order += group
    return [nodes[i] for i in order]


def _output_groups(nodes: list, readers: list[list[int]], producer: dict[str, int], outputs: set[str]) -> dict:
    """The nodes placed last: each graph output's Identity, with the node it copies when that node
    feeds nothing else (ONNX Runtime drops such an Identity, and the node becomes the leaf). Maps
    each to its group's leader (the copied node, or the Identity on its own)."""
    def copies_output(i: int) -> bool:
        node = nodes[i]
        return node.op_type == "Identity" and node.output[0] in outputs and not readers[i]
    leader: dict[int, int] = {}
    for i in range(len(nodes)):
        if copies_output(i):
            p = producer.get(nodes[i].input[0])
            if p is not None and all(copies_output(r) for r in readers[p]):
                leader[i] = leader[p] = p
            else:
                leader[i] = i
    return leader


def loader_waits(nodes) -> int:
    """The work of one of ONNX Runtime's topological sorts over `nodes` in this order: summed
    over the file, the nodes ready (every operand's producer earlier) but not yet reached, the
    length of the list each insertion walks. Linear in the node count for the orders made here,
    except where one node has many readers that need nothing else (they all wait at once: F²/2
    for F of them, docs/notes/performance-history.md); python -m tools.bench --build-scaling prints it per node."""
    position = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    return sum(i - 1 - max((position[name] for name in node_reads(node) if name in position), default=-1)
               for i, node in enumerate(nodes))
