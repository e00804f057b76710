"""Algebraic simplification: identities that hold for every value, NaN and Inf included.

x+0, x-0, x*1, x/1, -(-x), transpose∘transpose, reshape∘reshape, ops that are no-ops on their
operand's type (Trait.NOOP_IF_SAME_TYPE: reshape, expand, cast, identity, stop_gradient, one-term
add_n), x**1, x**2 as x*x, where with a constant condition, a select of a max-pool gradient by the
pooled input moved before the scatter, a sum of zero-padded pieces that tile an axis (the
gradient of splitting a tensor) as their concat, a sum of every strided phase of an axis spread
over zeros as the phases interleaved, a concat of slices that cut one tensor apart as that
tensor, a concat of equally transposed pieces as the transposed concat, a transpose of a
zero-padded piece as the transposed piece padded, a piece padded along one axis and then
another as one padding, and an expand feeding an op that broadcasts
anyway (Trait.BROADCASTS; a bias gradient's VJP, fed to a sum); an elementwise op of an expand
is computed unexpanded and expanded after (Trait.ELEMENTWISE, not random), and so is a matmul of
an expand that broadcasts no contracted axis; a sum with a scatter into zeros as a term is that
scatter into the sum of the other terms (the one rewrite that changes the order a sum is added
in: _scatter_into_sum). A rewrite only applies
when the surviving value has exactly the node's type (dtype and shape), so broadcasting is never
lost.
(x*0 and x-x are not rewritten: they are not 0 when x is Inf or NaN.) x**1 is what the gradient
of a square leaves (2·x**1); x**2 and x*x round once each, to the same value, and a product is
cheaper than a general power on every runtime we run (docs/strategies.md).
"""
from __future__ import annotations

from ..errors import ShapeError
from ..ir.dtypes import runs_as_is
from ..ir.graph import Graph, Node, ValueRef, tensor_type
from ..ir.registry import Trait, constant_equal_to, get_op, has_trait
from ..ops.shape_rules import broadcast_shapes
from .base import PassResult, only_consumer, replace_outputs, replace_uses


def _same_type(graph: Graph, ref: ValueRef, node: Node) -> bool:
    return graph.type_of(ref) == node.outputs[0]


def _neutral_operand(graph: Graph, node: Node, value: float, positions) -> ValueRef | None:
    """The other operand, when operand at one of `positions` is the constant `value`."""
    for pos in positions:
        other = node.inputs[1 - pos]
        if constant_equal_to(graph, node.inputs[pos], value) and _same_type(graph, other, node):
            return other
    return None


def _passthrough(graph: Graph, node: Node) -> ValueRef | None:
    """The value this node can be replaced by, or None."""
    op = node.op
    if op in ("add",):
        return _neutral_operand(graph, node, 0, (0, 1))
    if op == "sub":
        return _neutral_operand(graph, node, 0, (1,))
    if op == "mul":
        return _neutral_operand(graph, node, 1, (0, 1))
    if op in ("div", "pow"):
        return _neutral_operand(graph, node, 1, (1,))
    if has_trait(op, Trait.NOOP_IF_SAME_TYPE) and len(node.inputs) == 1:
        return node.inputs[0] if _same_type(graph, node.inputs[0], node) else None
    if op == "neg":
        inner = graph.nodes[node.inputs[0].node]
        return inner.inputs[0] if inner.op == "neg" else None
    if op == "concat":
        return _rejoined(graph, node)
    if op == "where":
        for value, branch in ((True, 1), (False, 2)):
            if constant_equal_to(graph, node.inputs[0], value) and _same_type(graph, node.inputs[branch], node):
                return node.inputs[branch]
    return None


def _rejoined(graph: Graph, node: Node) -> ValueRef | None:
    """x, when the concat `node` joins step-1 slices of x along its axis, each starting where the
    last ended, from 0 to the axis's end: the gradient of x[:, :1] and x[:, 1:] placed back
    (ops/view_scatter.py's slice_scatter, as x[:, 1:] += y writes)."""
    axis, source, at = node.attrs["axis"], None, 0
    for ref in node.inputs:
        piece = graph.nodes[ref.node]
        if piece.op != "slice" or piece.attrs["axes"] != (axis,) or piece.attrs["steps"] != (1,) \
                or piece.attrs["starts"] != (at,) or source not in (None, piece.inputs[0]):
            return None
        source, at = piece.inputs[0], piece.attrs["ends"][0]
    if source is None or at != graph.type_of(source).shape[axis] or not _same_type(graph, source, node):
        return None
    return source


def _merge_scatters(graph: Graph, node: Node) -> bool:
    """slice_scatter(slice_scatter(a)) placing along different axes -> one slice_scatter: the
    gradient of x[:, :, 1:, 1:] pads once, not twice."""
    if node.op != "slice_scatter":
        return False
    inner = graph.nodes[node.inputs[0].node]
    if inner.op != "slice_scatter" or set(inner.attrs["axes"]) & set(node.attrs["axes"]) \
            or not only_consumer(graph, inner, node):
        return False
    bounds = sorted(zip(*(inner.attrs[k] + node.attrs[k] for k in ("axes", "starts", "ends", "steps"))))
    node.attrs = {"shape": node.attrs["shape"], **dict(zip(("axes", "starts", "ends", "steps"), zip(*bounds)))}
    graph.replace_inputs(node, [inner.inputs[0]])
    return True


def _transposes_joined(graph: Graph, node: Node) -> int | None:
    """concat(transpose(a, p), transpose(b, p), ...) -> transpose(concat(a, b, ...), p), each
    transpose read by the concat alone: as many bytes moved, and a concat of the pieces a slice
    cut apart can then be the tensor itself (_rejoined). Returns the new concat's id."""
    if node.op != "concat" or len(node.inputs) < 2:
        return None
    moved = [graph.nodes[ref.node] for ref in node.inputs]
    if any(m.op != "transpose" or m.attrs["perm"] != moved[0].attrs["perm"] for m in moved) \
            or any(not only_consumer(graph, m, node) for m in moved):
        return None
    perm = moved[0].attrs["perm"]
    axis = perm[node.attrs["axis"]]
    shape = list(graph.type_of(moved[0].inputs[0]).shape)
    shape[axis] = node.outputs[0].shape[node.attrs["axis"]]
    joined = graph.add_node("concat", [m.inputs[0] for m in moved], {"axis": axis},
                            [tensor_type(node.outputs[0].dtype, shape)], node.order, node.source)
    graph.replace_inputs(node, [joined.out(0)])
    node.op, node.attrs = "transpose", {"perm": perm}
    return joined.id


def _transposes_before_scatters(graph: Graph) -> bool:
    """transpose(slice_scatter(a)) -> slice_scatter(transpose(a)), the transpose the scatter's only
    reader: it then moves the piece, not the zeros around it, and the scatter can meet the ones it
    is summed with (_tiling_pieces): the gradient of a concat whose pieces took different paths,
    as a vision transformer's class token and its pooled tokens do."""
    placed: dict[int, list[int]] = {}
    for node in graph.topo_order():
        scatter = graph.nodes[node.inputs[0].node] if node.op == "transpose" else None
        if scatter is None or scatter.op != "slice_scatter" or not only_consumer(graph, scatter, node):
            continue
        perm, a = node.attrs["perm"], scatter.attrs
        piece = graph.type_of(scatter.inputs[0])
        moved = graph.add_node("transpose", [scatter.inputs[0]], {"perm": perm},
                               [tensor_type(piece.dtype, tuple(piece.shape[p] for p in perm))], node.order, node.source)
        at = {axis: i for i, axis in enumerate(a["axes"])}
        axes = [j for j, p in enumerate(perm) if p in at]
        node.attrs = {"shape": tuple(node.outputs[0].shape), "axes": tuple(axes),
                      **{k: tuple(a[k][at[perm[j]]] for j in axes) for k in ("starts", "ends", "steps")}}
        node.op = "slice_scatter"
        graph.replace_inputs(node, [moved.out(0)])
        placed[node.id] = [moved.id]
    if placed:
        _renumber_with(graph, before=placed)
    return bool(placed)


def _fuse_with_producer(graph: Graph, node: Node) -> bool:
    """transpose∘transpose -> one transpose; reshape∘reshape -> one reshape."""
    if node.op not in ("transpose", "reshape"):
        return False
    inner = graph.nodes[node.inputs[0].node]
    if inner.op != node.op:
        return False
    if node.op == "transpose":
        node.attrs = {"perm": tuple(inner.attrs["perm"][p] for p in node.attrs["perm"])}
    graph.replace_inputs(node, [inner.inputs[0]])
    return True


def _tiling_pieces(graph: Graph, node: Node) -> tuple[int, list[ValueRef]] | None:
    """(axis, pieces in axis order) when `node` sums slice_scatters that each place a piece along one
    shared axis with step 1 and that together cover the axis exactly once; else None."""
    if node.op != "add_n" or len(node.inputs) < 2:
        return None
    spans = []
    for ref in node.inputs:
        scatter = graph.nodes[ref.node]
        a = scatter.attrs
        if (scatter.op != "slice_scatter" or len(a["axes"]) != 1 or a["steps"] != (1,)
                or not _same_type(graph, ref, node)):
            return None
        spans.append((a["starts"][0], a["ends"][0], a["axes"][0], scatter.inputs[0]))
    spans.sort(key=lambda span: span[0])
    axis = spans[0][2]
    edges = [0] + [end for _, end, _, _ in spans]
    if any(span[2] != axis for span in spans) or [start for start, _, _, _ in spans] != edges[:-1] \
            or edges[-1] != node.outputs[0].shape[axis]:
        return None
    return axis, [piece for _, _, _, piece in spans]


def _phase_pieces(graph: Graph, node: Node) -> tuple[int, list[list[ValueRef]]] | None:
    """(axis, the pieces of each phase by start) when `node` sums, for some step s > 1,
    slice_scatters that place whole phases start, start + s, ... (start = 0 .. s-1) of one axis,
    every phase at least once: the gradient of x[..., 0::2] and x[..., 1::2], as rotary
    embeddings take them, or of x[:, 0::2, 0::2], x[:, 0::2, 1::2], ... as Swin's patch merging
    does, where two pieces place the same phase and both count; else None."""
    if node.op != "add_n" or len(node.inputs) < 2:
        return None
    phases: dict[int, list[ValueRef]] = {}
    layout = set()
    for ref in node.inputs:
        scatter = graph.nodes[ref.node]
        a = scatter.attrs
        if scatter.op != "slice_scatter" or len(a["axes"]) != 1 or not _same_type(graph, ref, node):
            return None
        layout.add((a["axes"][0], a["steps"][0], graph.type_of(scatter.inputs[0]).shape[a["axes"][0]]))
        phases.setdefault(a["starts"][0], []).append(scatter.inputs[0])
    if len(layout) != 1:
        return None
    axis, step, length = layout.pop()
    if step < 2 or sorted(phases) != list(range(step)) or not isinstance(length, int) \
            or length * step != node.outputs[0].shape[axis]:
        return None
    return axis, [phases[start] for start in range(step)]


def _renumber_with(graph: Graph, before: dict[int, list[int]] | None = None,
                   after: dict[int, list[int]] | None = None) -> None:
    """Renumber `graph` so that the nodes a rewrite added run next to the node they serve:
    before[n] (their ids, in order) just before node n, after[n] just after it."""
    before, after = before or {}, after or {}
    added = {i for ids in (*before.values(), *after.values()) for i in ids}
    graph.renumber([i for node in graph.topo_order() if node.id not in added
                    for i in (*before.get(node.id, ()), node.id, *after.get(node.id, ()))])


def _interleave_phases(graph: Graph) -> bool:
    """A sum of slice_scatters that place every phase of an axis (_phase_pieces) -> the pieces
    interleaved (_interleave). Two spreading Pads and a sum (1.25 ms each at 4 x 4 x 256 x 64,
    ONNX Runtime's Pad of a unit axis moving one element at a time) become one Concat."""
    placed: dict[int, list[int]] = {}
    for node in graph.topo_order():
        inserted = _interleave(graph, node)
        if inserted is not None:
            placed[node.id] = inserted
    if placed:
        _renumber_with(graph, before=placed)
    return bool(placed)


def _interleave(graph: Graph, node: Node) -> list[int] | None:
    """Rewrite `node` when it sums every phase of an axis: the pieces of one phase are summed (and
    that sum, itself a sum of phases of another axis in a two-axis patch merging, interleaved in
    turn), each phase gets a unit axis after that one, they are joined along it, and the result
    takes the output's shape. Returns the ids of the nodes it added, in the order they run, or
    None where `node` is no such sum."""
    found = _phase_pieces(graph, node)
    if found is None:
        return None
    axis, phases = found
    out, inserted, unit = node.outputs[0], [], []
    for terms in phases:
        t = graph.type_of(terms[0])
        piece = terms[0]
        if len(terms) > 1:
            total = graph.add_node("add_n", terms, {}, [t], node.order, node.source)
            inserted += [*(_interleave(graph, total) or ()), total.id]
            piece = total.out(0)
        shape = t.shape[:axis + 1] + (1,) + t.shape[axis + 1:]
        unit.append(graph.add_node("reshape", [piece], {"shape": shape}, [tensor_type(t.dtype, shape)],
                                   node.order, node.source))
        inserted.append(unit[-1].id)
    joined = t.shape[:axis + 1] + (len(phases),) + t.shape[axis + 1:]
    concat = graph.add_node("concat", [n.out(0) for n in unit], {"axis": axis + 1},
                            [tensor_type(out.dtype, joined)], node.order, node.source)
    graph.replace_inputs(node, [concat.out(0)])
    node.op, node.attrs = "reshape", {"shape": out.shape}
    return [*inserted, concat.id]


def _broadcast_unexpanded(graph: Graph, inputs: list[ValueRef], pos: int) -> tuple | None:
    """The broadcast shape of `inputs` with the expand at `pos` read unexpanded; None where
    symbolic dims leave it undecided."""
    source = graph.nodes[inputs[pos].node].inputs[0]
    try:
        return broadcast_shapes(*(graph.type_of(source if i == pos else r).shape for i, r in enumerate(inputs)))
    except ShapeError:
        return None


def _drop_broadcast_expands(graph: Graph, node: Node) -> bool:
    """op(..., expand(v), ...) -> op(..., v, ...) when broadcasting v with the other operands
    still gives the output's shape: the op broadcasts by itself (Trait.BROADCASTS), without the
    materialised copy."""
    if not has_trait(node.op, Trait.BROADCASTS):
        return False
    inputs = list(node.inputs)
    for pos, ref in enumerate(inputs):
        producer = graph.nodes[ref.node]
        if producer.op == "expand" and _broadcast_unexpanded(graph, inputs, pos) == node.outputs[0].shape:
            inputs[pos] = producer.inputs[0]
    if inputs == node.inputs:
        return False
    graph.replace_inputs(node, inputs)
    return True


def _product_unexpanded(graph: Graph, node: Node, pos: int) -> tuple | None:
    """A matmul's output shape with the expand at `pos` read unexpanded, where it broadcasts no
    contracted axis: each row of a product depends on its own row of the left operand only, each
    column on its own column of the right one, so the product of the unexpanded operand,
    expanded, is the same (a matrix library may round a one-column product differently from a
    wider one: numpy's did in the last bit). None where it does not apply or symbolic dims leave
    it undecided."""
    operands = [graph.type_of(r) for r in node.inputs]
    source = graph.type_of(graph.nodes[node.inputs[pos].node].inputs[0])
    contracted = -1 if pos == 0 else -2
    if source.ndim < 2 or source.shape[contracted] != operands[pos].shape[contracted]:
        return None
    operands[pos] = source
    try:
        return get_op("matmul").infer(operands)[0].shape
    except ShapeError:
        return None


def _expand_to_sink(graph: Graph, node: Node) -> tuple[int, tuple] | None:
    """(operand position, the smaller output shape) when op(..., expand(v), ...) can be computed on
    v unexpanded and expanded after: the op is elementwise and not random, or a matmul whose
    expand broadcasts no contracted axis (_product_unexpanded); the other operands do not already
    broadcast v to the output's shape (then the expand is simply dropped, _drop_broadcast_expands);
    and the expand feeds only the op, unless the op is a matmul. An expand that other ops read
    stays for them, so sunk below an elementwise op it would be one expand more; below a matmul
    it still replaces a product over the expanded rows. A sum's gradient seeds such a product:
    the forces of an energy summed over pairs started from a matmul of ones over every pair."""
    product = node.op == "matmul"
    if not (product or has_trait(node.op, Trait.ELEMENTWISE)) or has_trait(node.op, Trait.RANDOM) \
            or len(node.outputs) != 1:
        return None
    for pos, ref in enumerate(node.inputs):
        producer = graph.nodes[ref.node]
        if producer.op != "expand" or ref in graph.outputs or node.inputs.count(ref) != 1 \
                or not product and len(graph.consumers(producer.id)) != 1 \
                or not runs_as_is("expand", [node.outputs[0].dtype]):     # an expand routed through a cast
            continue
        smaller = _product_unexpanded(graph, node, pos) if product else _broadcast_unexpanded(graph, node.inputs, pos)
        if smaller is not None and smaller != node.outputs[0].shape:
            return pos, smaller
    return None


def _sink_expands(graph: Graph) -> bool:
    """op(expand(v), w) -> expand(op(v, w)) for an elementwise op (_expand_to_sink), repeated while
    an expand moves, and each moved expand dropped where its new reader broadcasts anyway
    (_drop_broadcast_expands): the ops run on the unexpanded size. A sum's gradient is such an
    expand: in a pair potential, the gradient of sum((r_i - r_j)**2, -1) expanded g over the
    three coordinates before doubling it, and an Expand along a last axis is slow on ONNX Runtime
    (it moves one element at a time)."""
    changed = False
    while True:
        placed: dict[int, list[int]] = {}
        moved_outputs: dict[ValueRef, ValueRef] = {}
        for node in graph.topo_order():
            found = _expand_to_sink(graph, node)
            if found is None:
                continue
            pos, smaller = found
            full, readers = node.outputs[0], graph.consumers(node.id)
            expand = graph.nodes[node.inputs[pos].node]
            graph.replace_inputs(node, [expand.inputs[0] if i == pos else r for i, r in enumerate(node.inputs)])
            node.outputs[0] = tensor_type(full.dtype, smaller)
            after = graph.add_node("expand", [node.out(0)], {"shape": full.shape}, [full], node.order, node.source)
            for reader in readers:
                graph.replace_inputs(reader, [after.out(0) if r == node.out(0) else r for r in reader.inputs])
            moved_outputs[node.out(0)] = after.out(0)
            placed[node.id] = [after.id]
        if not placed:
            return changed
        replace_outputs(graph, moved_outputs)
        changed = True
        _renumber_with(graph, after=placed)
        for node in graph.topo_order():
            _drop_broadcast_expands(graph, node)


def _square_as_product(graph: Graph, node: Node) -> bool:
    """pow(x, 2) -> mul(x, x) where the exponent is the constant 2 and x has the output's type."""
    if node.op != "pow" or not constant_equal_to(graph, node.inputs[1], 2) \
            or not _same_type(graph, node.inputs[0], node):
        return False
    graph.replace_inputs(node, [node.inputs[0], node.inputs[0]])
    node.op, node.attrs = "mul", {}
    return True


def _masked_pool_gradient(graph: Graph, node: Node) -> tuple[Node, Node, ValueRef] | None:
    """(the greater, the pool_scatter, the zero) of `node` = where(greater(y, k), pool_scatter(gp,
    idx), 0) when idx are the indices of a max_pool of y itself and k a constant scalar."""
    if node.op != "where":
        return None
    test, scatter = (graph.nodes[r.node] for r in node.inputs[:2])
    if test.op != "greater" or scatter.op != "pool_scatter" or node.inputs[1] != scatter.out(0) \
            or graph.type_of(test.inputs[1]).shape != () or graph.nodes[test.inputs[1].node].op != "constant" \
            or graph.type_of(node.inputs[2]).shape != () or not constant_equal_to(graph, node.inputs[2], 0) \
            or not _same_type(graph, scatter.out(0), node):
        return None
    pool = graph.nodes[scatter.inputs[1].node]
    if pool.op != "max_pool" or scatter.inputs[1] != pool.out(1) or pool.inputs[0] != test.inputs[0]:
        return None
    return test, scatter, node.inputs[2]


def _mask_before_pool_scatter(graph: Graph) -> bool:
    """where(y > k, pool_scatter(gp, idx), 0) -> pool_scatter(where(pooled > k, gp, 0), idx) where
    idx and pooled are a max_pool of y: the scatter writes only at each window's maximum, where y
    is the pooled value, so the select can run on the pooled gradient, a tensor the pool's size.
    That is relu's gradient under a max_pool (relu then pool, as in most CNNs); relu's VJP rule
    stays the plain select."""
    placed: dict[int, list[int]] = {}
    for node in graph.topo_order():
        found = _masked_pool_gradient(graph, node)
        if found is None:
            continue
        test, scatter, zero = found
        pool = graph.nodes[scatter.inputs[1].node]
        gp = scatter.inputs[0]
        pooled_test = graph.add_node("greater", [pool.out(0), test.inputs[1]], {},
                                     [tensor_type(test.outputs[0].dtype, pool.outputs[0].shape)],
                                     node.order, node.source)
        masked = graph.add_node("where", [pooled_test.out(0), gp, zero], {}, [graph.type_of(gp)],
                                node.order, node.source)
        graph.replace_inputs(node, [masked.out(0), scatter.inputs[1]])
        node.op, node.attrs = "pool_scatter", dict(scatter.attrs)
        placed[node.id] = [pooled_test.id, masked.id]
    if not placed:
        return False
    _renumber_with(graph, before=placed)
    return True


# Scatters that add their updates into their first operand, their output of its type.
_ADDING_SCATTERS = ("scatter_add", "scatter_add_elements")


def _scatter_term(graph: Graph, node: Node) -> int | None:
    """The position of a term of the sum `node` (add or add_n, every term of the sum's type) that
    is a scatter adding into zeros and read by nothing else; None where there is none."""
    if node.op not in ("add", "add_n") or len(node.inputs) < 2 \
            or not all(_same_type(graph, ref, node) for ref in node.inputs):
        return None
    for pos, ref in enumerate(node.inputs):
        scatter = graph.nodes[ref.node]
        if scatter.op in _ADDING_SCATTERS and constant_equal_to(graph, scatter.inputs[0], 0) \
                and node.inputs.count(ref) == 1 and only_consumer(graph, scatter, node):
            return pos
    return None


def _scatter_into_sum(graph: Graph) -> bool:
    """add_n(..., scatter_add(0, idx, u), ...) -> scatter_add(add_n(...), idx, u): the updates
    added into the sum of the other terms instead of into zeros. A tied embedding's gradient is
    such a sum (the output projection's product plus the lookup's scatter): the table-sized zeros,
    and the scatter into them held until the product is ready, are gone. The updates are then
    added after the other terms rather than before them: the same sum in another order, as
    batched products (passes/gemm.py) reorder theirs."""
    placed: dict[int, list[int]] = {}
    rewritten = False
    for node in graph.topo_order():
        pos = _scatter_term(graph, node)
        if pos is None:
            continue
        rewritten = True
        scatter = graph.nodes[node.inputs[pos].node]
        others = node.inputs[:pos] + node.inputs[pos + 1:]
        if len(others) > 1:
            total = graph.add_node("add_n", others, {}, [node.outputs[0]], node.order, node.source)
            placed[node.id] = [total.id]
            others = [total.out(0)]
        graph.replace_inputs(node, [others[0], *scatter.inputs[1:]])
        node.op, node.attrs = scatter.op, dict(scatter.attrs)
    if placed:
        _renumber_with(graph, before=placed)
    return rewritten


def simplify(graph: Graph) -> PassResult:
    changed = _interleave_phases(graph)       # first: the rewrites below see the nodes it adds
    changed |= _transposes_before_scatters(graph)
    changed |= _mask_before_pool_scatter(graph)
    changed |= _scatter_into_sum(graph)
    joins: dict[int, list[int]] = {}
    for node in graph.topo_order():
        if node.op in ("input", "constant"):
            continue
        tiling = _tiling_pieces(graph, node)
        if tiling is not None:    # rewritten in place, so node ids stay a topological order
            graph.replace_inputs(node, tiling[1])
            node.op, node.attrs = "concat", {"axis": tiling[0]}
            changed = True
        changed |= _fuse_with_producer(graph, node) | _drop_broadcast_expands(graph, node) \
            | _square_as_product(graph, node) | _merge_scatters(graph, node)
        joined = _transposes_joined(graph, node)
        if joined is not None:
            joins[node.id] = [joined]
        replacement: ValueRef | None
        if node.op == "transpose" and node.attrs["perm"] == tuple(range(len(node.attrs["perm"]))):
            replacement = node.inputs[0]
        else:
            replacement = _passthrough(graph, node)
        # (a node nobody reads any more is left to dead-code elimination: rewiring its nonexistent
        # readers again would report a change on every run)
        if replacement is not None and (graph.consumers(node.id) or node.out(0) in graph.outputs):
            replace_uses(graph, node.out(0), replacement)
            changed = True
    if joins:
        _renumber_with(graph, before=joins)
    changed |= _sink_expands(graph) | bool(joins)
    return PassResult(graph, changed)
