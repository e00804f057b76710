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

Memory. The depth-first walk decides every value's lifetime by itself, and on large training
graphs it keeps values alive far longer than needed: a weight gradient's operands wait until
the walk reaches its output, and a branch's gradient is finished long before the other branch
reads it (a ResNet-50 step held twice the values PyTorch's backward holds). PyTorch frees each
saved tensor as soon as its backward has run, and the trace order is that order: the forward
as the user wrote it, then each VJP's nodes when the gradient reaches them, a weight's gradient
beside the gradient it needs. So a graph whose values need much memory (ir/memory.py; the graph's
run_in_order, which passes.optimize sets) keeps its trace order, and its session runs the file as written
(runtime/providers.py: ONNX Runtime's priority order, which takes the ready node first in the
file; follow_order keeps that order through ONNX Runtime's own rewrites). Its nodes ready long
before their place are few (a gradient's pieces that read only forward values), which keeps
the loader's lists short at such sizes.
"""
from __future__ import annotations

import heapq
from collections import deque

from .reads import node_reads

MAX_LAST_OUTPUTS = 32


def schedule_order(nodes: list, output_names: list[str]) -> list:
    """`nodes` (onnx NodeProtos in a topological order) reordered as the module docstring says.
    Deterministic: the result depends only on the input order."""
    producer, readers, waiting = _dependencies(nodes)
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


def follow_order(nodes: list, reference: list, sizes: dict[str, int] | None = None) -> list:
    """`nodes`, a graph ONNX Runtime made from the graph of `reference` (fused, folded, with nodes
    of its own), in `reference`'s order. ONNX Runtime numbers the nodes it makes after all others
    and its priority order takes the ready node numbered first, so a fused weight-gradient
    product would wait for the end of the step, holding its operands. Each node takes the place
    of the reference node that made its last output (a fusion keeps its pattern's output names),
    else of the reference node its name derives from ("name/FusionName/"), else the place of its
    first reader (it is made just before it is needed); then the nodes are sorted topologically,
    the ready node with the earliest place first (ties: as given). A graph output's Identity copy,
    which ONNX Runtime drops, gives its output the place of the node it copies where that node
    frees operands at least as large as the output (`sizes`: bytes by the reference's value names,
    where known; without them, always) and is not a reshape or transpose (which frees no more
    than it makes). Deterministic."""
    position: dict = {}
    producer = {out: i for i, node in enumerate(reference) for out in node.output if out}
    last_read = {name: i for i, node in enumerate(reference) for name in node.input if name}
    for i, node in enumerate(reference):
        position[node.name] = i
        for out in node.output:
            if out:
                position["value:" + out] = i
        source = producer.get(node.input[0]) if node.op_type == "Identity" else None
        if source is not None and reference[source].op_type not in _LAYOUT and (
                sizes is None or sizes.get(node.output[0], 0) <= _freed(reference, source, producer, last_read, sizes)):
            # a copy into a graph output, which ONNX Runtime drops, its producer then writing the
            # output itself: that producer keeps its own place, where it frees operands at least as
            # large as its output (`sizes`, bytes by value name, where known); otherwise it waits
            # for the copy's place at the end, its output not held through the rest of the step
            position["value:" + node.output[0]] = source
    _, readers, waiting = _dependencies(nodes)
    unplaced = float("inf")
    places: list[float] = []
    for node in nodes:
        made = [position["value:" + out] for out in node.output if out and "value:" + out in position]
        place = max(made) if made else position.get(node.name, position.get(node.name.split("/")[0]))
        places.append(unplaced if place is None else place)
    for i in reversed(_topological(readers, list(waiting))):   # the rest: their first reader's place
        if places[i] == unplaced:
            known = [places[r] for r in readers[i] if places[r] != unplaced]
            places[i] = min(known) - 0.5 if known else float(len(reference))
    ready = [(places[i], i) for i in range(len(nodes)) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, (places[r], r))
    assert len(order) == len(nodes), "follow_order needs an acyclic node list"
    return [nodes[i] for i in order]


_VIEWS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")
_LAYOUT = (*_VIEWS, "Transpose")


def _freed(reference: list, at: int, producer: dict[str, int], last_read: dict[str, int], sizes: dict) -> int:
    """Bytes of the operands whose last reader is reference[at] (through views of a value read by
    nothing else, which ONNX Runtime runs in place): what running it frees."""
    node = reference[at]
    if node.op_type in _VIEWS and node.input[0] in producer and last_read.get(node.input[0]) == at:
        return _freed(reference, producer[node.input[0]], producer, last_read, sizes)
    return sum(sizes.get(v, 0) for v in set(node.input) if v and last_read.get(v) == at)


def _dependencies(nodes: list) -> tuple[dict[str, int], list[list[int]], list[int]]:
    """(the index of the node making each value, the indices of each node's readers in order, how
    many nodes each node reads from) of `nodes`, loop bodies' outer reads included."""
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    readers: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for i, node in enumerate(nodes):
        for p in sorted({producer[name] for name in node_reads(node) if name in producer}):
            readers[p].append(i)
            waiting[i] += 1
    return producer, readers, waiting


def _topological(readers: list[list[int]], waiting: list[int]) -> list[int]:
    """Node indices in a topological order (Kahn's, first index first); `waiting` is consumed."""
    queue = deque(i for i in range(len(readers)) if waiting[i] == 0)
    order = []
    while queue:
        i = queue.popleft()
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                queue.append(r)
    return order
