"""A layered (Sugiyama-style) drawing of a directed acyclic graph: boxes in rows, edges routed
between them, for `gcompile viz`. Pure geometry: it knows box sizes and edges, nothing of ONNX.

The steps, each the textbook one:
1. Layers: every box one row below its deepest producer (longest path); a box nothing feeds
   (a graph input) moves down to just above its first reader, so it is drawn where it is used.
2. Long edges: an edge crossing several rows gets a thin placeholder ("dummy") in every row it
   crosses, so it is routed around the boxes of those rows instead of through them. A budget caps
   the placeholders (a 3,000-node gradient graph would need hundreds of thousands); the longest
   edges past it are drawn as plain curves.
3. Crossings: rows are reordered by the mean position of each box's neighbours (barycentre),
   sweeping down and up; the ordering with the fewest crossings (counted exactly, by inversions)
   is kept.
4. Positions: in each row, boxes keep their order and a minimum gap and move as close as they can
   to the mean position of their neighbours in the row above (then, sweeping up, below): an
   isotonic regression (pool adjacent violators) per row. A placeholder follows its edge's previous
   link, so a long edge runs straight down until something is in its way.
5. Routes: an edge leaves its producer's bottom edge and enters its reader's top edge at ports
   spread along the box in the order of the other ends, and passes each row it crosses vertically
   at its placeholder, so between two rows an edge lies in the gap where no box is.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

MAX_DUMMIES = 20_000
SWEEPS = 24
PLACE_ROUNDS = 4


@dataclass
class Placed:
    """A box (or an edge's placeholder) of the layout: centre x, top y, size, row."""
    key: Hashable
    width: float
    height: float
    layer: int = 0
    x: float = 0.0
    y: float = 0.0
    dummy: bool = False
    index: int = 0                              # position in its row
    up: list = field(default_factory=list)      # neighbours in the row above
    down: list = field(default_factory=list)    # neighbours in the row below


@dataclass
class Layout:
    boxes: dict                      # key -> Placed (real boxes only)
    routes: list                     # per edge, its points [(x, y), ...] from producer to reader
    width: float
    height: float
    layers: int
    dummies: int
    crossings: int
    unrouted: int                    # long edges past the placeholder budget, drawn as plain curves


def layered_layout(sizes: dict, edges: Sequence[tuple], gap_x: float = 24.0, gap_y: float = 40.0,
                   max_dummies: int = MAX_DUMMIES) -> Layout:
    """Lay out boxes `sizes` (key -> (width, height), in topological order) joined by `edges`
    ((producer key, reader key) pairs, producer first in that order)."""
    nodes = {key: Placed(key, float(w), float(h)) for key, (w, h) in sizes.items()}
    preds: dict = {key: [] for key in nodes}
    succs: dict = {key: [] for key in nodes}
    for src, dst in edges:
        preds[dst].append(src)
        succs[src].append(dst)
    for key in nodes:   # sizes come in topological order
        nodes[key].layer = 1 + max((nodes[p].layer for p in preds[key]), default=-1)
    for key in reversed(list(nodes)):
        if not preds[key] and succs[key]:
            nodes[key].layer = min(nodes[s].layer for s in succs[key]) - 1
    chains, unrouted = _add_dummies(nodes, edges, max_dummies)
    layers = _order(nodes)
    crossings = _crossings(layers)
    heights = [max(n.height for n in row) if row else 0.0 for row in layers]
    tops, y = [], 0.0
    for h in heights:
        tops.append(y)
        y += h + gap_y
    for row, top, h in zip(layers, tops, heights):
        for n in row:
            n.y = top + (h - n.height) / 2 if not n.dummy else top
            if n.dummy:
                n.height = h
    _place(layers, gap_x)
    left = min((n.x - n.width / 2 for row in layers for n in row), default=0.0)
    for row in layers:
        for n in row:
            n.x -= left
    width = max((n.x + n.width / 2 for row in layers for n in row), default=0.0)
    routes = _routes(nodes, edges, chains)
    boxes = {k: n for k, n in nodes.items() if not n.dummy}
    return Layout(boxes, routes, width, max(y - gap_y, 0.0), len(layers),
                  sum(len(c) for c in chains), crossings, unrouted)


def _add_dummies(nodes: dict, edges, budget: int) -> tuple[list, int]:
    """Placeholders for each edge crossing rows, shortest edges first while the budget lasts;
    links every pair of neighbouring rows (up/down lists). Returns each edge's chain and how many
    long edges went without."""
    spans = [nodes[d].layer - nodes[s].layer for s, d in edges]
    chains: list = [[] for _ in edges]
    unrouted = 0
    for i in sorted(range(len(edges)), key=lambda i: spans[i]):
        if spans[i] <= 1:
            continue
        if spans[i] - 1 > budget:
            unrouted += 1
            continue
        budget -= spans[i] - 1
        src = nodes[edges[i][0]]
        for layer in range(src.layer + 1, nodes[edges[i][1]].layer):
            dummy = Placed(("dummy", i, layer), 4.0, 0.0, layer, dummy=True)
            nodes[dummy.key] = dummy
            chains[i].append(dummy)
    for i, (s, d) in enumerate(edges):
        if spans[i] > 1 and not chains[i]:
            continue   # unrouted: no row neighbours
        path = [nodes[s], *chains[i], nodes[d]]
        for a, b in zip(path, path[1:]):
            a.down.append(b)
            b.up.append(a)
    return chains, unrouted


def _order(nodes: dict) -> list[list[Placed]]:
    """Rows ordered to cut crossings: barycentre sweeps down and up, keeping the best ordering."""
    layers: list[list[Placed]] = [[] for _ in range(1 + max((n.layer for n in nodes.values()), default=-1))]
    for n in nodes.values():   # real boxes in topological order, placeholders after: a stable start
        layers[n.layer].append(n)
    best, fewest = [list(row) for row in layers], _crossings(layers)
    stale = 0
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        for row in (layers[1:] if down else layers[-2::-1]):
            keys = []
            for n in row:
                neighbours = n.up if down else n.down
                keys.append(sum(m.index for m in neighbours) / len(neighbours) if neighbours else n.index)
            row[:] = [n for _, n in sorted(zip(keys, row), key=lambda kn: kn[0])]
            _renumber(row)
        count = _crossings(layers)
        if count < fewest:
            best, fewest, stale = [list(row) for row in layers], count, 0
        else:
            stale += 1
            if stale >= 4:
                break
    for row in best:
        _renumber(row)
    return best


def _renumber(row: list[Placed]) -> None:
    for i, n in enumerate(row):
        n.index = i


def _crossings(layers: list[list[Placed]]) -> int:
    """Edge crossings between neighbouring rows: inversions of the lower ends, sorted by upper end."""
    total = 0
    for row in layers:
        _renumber(row)
    for row in layers[:-1]:
        lower = [m.index for n in row for m in sorted(n.down, key=lambda m: m.index)]
        total += _inversions(lower)
    return total


def _inversions(values: list[int]) -> int:
    """Pairs i < j with values[i] > values[j], with a Fenwick tree: O(n log n)."""
    size = max(values, default=0) + 2
    tree = [0] * size
    count = 0
    for seen, v in enumerate(values):
        i, smaller_or_equal = v + 1, 0
        while i > 0:
            smaller_or_equal += tree[i]
            i -= i & -i
        count += seen - smaller_or_equal
        i = v + 1
        while i < size:
            tree[i] += 1
            i += i & -i
    return count


def _place(layers: list[list[Placed]], gap_x: float) -> None:
    """Centres: packed left to right, then pulled towards the neighbours' mean, row by row."""
    for row in layers:
        x = 0.0
        for n in row:
            n.x = x + n.width / 2
            x += n.width + _gap(n, n, gap_x)
    for down in [True, False] * PLACE_ROUNDS:   # following the row above, then the row below, ...
        for row in (layers[1:] if down else layers[-2::-1]):
            wanted = []
            for n in row:
                neighbours = n.up if down else n.down
                wanted.append(sum(m.x for m in neighbours) / len(neighbours) if neighbours else n.x)
            _closest(row, wanted, gap_x)


def _gap(a: Placed, b: Placed, gap_x: float) -> float:
    """Space between neighbours in a row: full between boxes, less beside an edge's placeholder."""
    return gap_x if not (a.dummy or b.dummy) else gap_x / 2 if not (a.dummy and b.dummy) else 6.0


def _closest(row: list[Placed], wanted: list[float], gap_x: float) -> None:
    """Move the row's centres as close as possible (least squares) to `wanted`, keeping the order
    and the gaps: with offsets o_i (the packed positions), y_i = x_i - o_i must not decrease, an
    isotonic regression solved by pooling adjacent violators."""
    offsets, o = [], 0.0
    for i, n in enumerate(row):
        if i:
            o += row[i - 1].width / 2 + _gap(row[i - 1], n, gap_x) + n.width / 2
        offsets.append(o)
    blocks: list[tuple[float, int]] = []   # (mean, how many boxes) of runs that move together
    for w, o in zip(wanted, offsets):
        blocks.append((w - o, 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean2, count2 = blocks.pop()
            mean1, count1 = blocks[-1]
            blocks[-1] = ((mean1 * count1 + mean2 * count2) / (count1 + count2), count1 + count2)
    i = 0
    for mean, count in blocks:
        for _ in range(count):
            row[i].x = mean + offsets[i]
            i += 1


def _routes(nodes: dict, edges, chains: list) -> list[list[tuple[float, float]]]:
    """Points of each edge: the producer's bottom port, down through its placeholders (vertically
    through each row it crosses), into the reader's top port."""
    first_hop = [chain[0] if chain else nodes[d] for chain, (_, d) in zip(chains, edges)]
    last_hop = [chain[-1] if chain else nodes[s] for chain, (s, _) in zip(chains, edges)]
    out_port = _ports(nodes, edges, 0, first_hop)
    in_port = _ports(nodes, edges, 1, last_hop)
    routes = []
    for i, (s, d) in enumerate(edges):
        src, dst = nodes[s], nodes[d]
        points = [(out_port[i], src.y + src.height)]
        for dummy in chains[i]:
            points += [(dummy.x, dummy.y), (dummy.x, dummy.y + dummy.height)]
        points.append((in_port[i], dst.y))
        routes.append(points)
    return routes


def _ports(nodes: dict, edges, end: int, other: list[Placed]) -> list[float]:
    """x of each edge's port on its producer (end 0) or reader (end 1): spread along the box's
    middle two thirds in the order of the edges' other ends, so edges leave and arrive uncrossed."""
    by_box: dict = {}
    for i, edge in enumerate(edges):
        by_box.setdefault(edge[end], []).append(i)
    ports = [0.0] * len(edges)
    for key, indices in by_box.items():
        box = nodes[key]
        indices.sort(key=lambda i: other[i].x)
        span = box.width * 2 / 3
        for rank, i in enumerate(indices):
            ports[i] = box.x - span / 2 + span * (rank + 1) / (len(indices) + 1)
    return ports
