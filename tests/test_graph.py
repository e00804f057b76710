"""Graph's editing operations: marks and the nodes recorded since one, pruning them, renumbering,
and the topology queries, each leaving a graph that lints."""
import numpy as np
import pytest

from gcompile.ir.graph import Graph, ValueRef, tensor_type

T = tensor_type(np.float32, (2,))


def node(graph, op, *operands):
    return graph.add_node(op, [o.out(0) for o in operands], {}, [T])


def test_nodes_since_a_mark_are_the_later_ones_still_present():
    g = Graph()
    x = node(g, "input")
    mark = g.mark()
    a = node(g, "neg", x)
    b = node(g, "exp", a)
    c = node(g, "exp", x)
    g.remove_node(b.id)
    assert g.nodes_since(mark) == [a, c]
    assert g.nodes_since(g.mark()) == []


def test_prune_since_removes_only_new_nodes_the_kept_values_do_not_need():
    g = Graph()
    x = node(g, "input")
    unused_before = node(g, "exp", x)
    mark = g.mark()
    a = node(g, "neg", x)
    b = node(g, "exp", a)
    dead = node(g, "sin", a)
    dead2 = node(g, "cos", dead)
    removed = g.prune_since(mark, [b.out(0)])
    assert removed == [dead2, dead]          # consumers first
    assert set(g.nodes) == {x.id, unused_before.id, a.id, b.id}
    assert g.consumers(a.id) == [b]
    g.lint()
    assert g.prune_since(g.mark(), []) == []


def test_prune_since_with_nothing_kept_removes_everything_new():
    g = Graph()
    x = node(g, "input")
    mark = g.mark()
    node(g, "exp", node(g, "neg", x))
    assert len(g.prune_since(mark, [x.out(0)])) == 2
    assert list(g.nodes) == [x.id]


def test_renumber_restores_id_order_after_adding_a_node_to_run_earlier():
    g = Graph()
    x = node(g, "input")
    g.inputs = [x.out(0)]
    y = node(g, "exp", x)
    z = node(g, "sin", y)
    g.outputs = [z.out(0), y.out(0)]
    early = node(g, "neg", x)                      # meant to run before z, and z to read it
    g.replace_inputs(z, [early.out(0)])
    with pytest.raises(AssertionError, match="not created before"):
        g.lint()
    g.renumber([x.id, y.id, early.id, z.id])
    g.lint()
    assert [n.name for n in g.topo_order()] == ["input_0", "exp_0", "neg_0", "sin_0"]
    assert [n.id for n in g.topo_order()] == [0, 1, 2, 3]
    assert z.inputs == [ValueRef(early.id)] and early.id == 2
    assert g.outputs == [ValueRef(3), ValueRef(1)] and g.inputs == [ValueRef(0)]
    assert g.consumers(x.id) == [y, early] and g.ancestors(z.id) == {0, 2}
    assert node(g, "cos", z).id == 4 and g.mark() == 5


def test_renumber_needs_every_node_once():
    g = Graph()
    x = node(g, "input")
    y = node(g, "exp", x)
    for order in ([x.id], [x.id, x.id], [x.id, y.id, 7]):
        with pytest.raises(ValueError):
            g.renumber(order)


def test_topology_queries_and_lint_follow_replace_inputs():
    g = Graph()
    x, w = node(g, "input"), node(g, "input")
    m = g.add_node("mul", [x.out(0), x.out(0)], {}, [T])     # one edge, two operands
    s = node(g, "add", m, w)
    assert g.consumers(x.id) == [m] and g.ancestors(s.id) == {x.id, w.id, m.id}
    g.replace_inputs(s, [w.out(0), w.out(0)])
    assert g.consumers(m.id) == [] and g.ancestors(s.id) == {w.id}
    g.lint()
    g.outputs = [ValueRef(99)]
    with pytest.raises(AssertionError, match="was removed"):
        g.lint()
