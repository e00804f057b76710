"""passes/joins.join_slice_scatters: a sum of slice_scatters covering one axis side by side becomes
one concat of the pieces; values unchanged (NaN and Inf included), idempotent, and left alone
where the pieces overlap, leave a gap, step, or lie along different axes."""
import numpy as np

import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ops.indexing import slice_scatter
from gcompile.passes import eliminate_dead_code, join_slice_scatters

RNG = np.random.default_rng(0)
SHAPE = (2, 5, 3)


def run(fn, arrays):
    graph = trace(fn, arrays).graph
    before = evaluate(graph, arrays)
    changed = join_slice_scatters(graph).changed
    eliminate_dead_code(graph)
    graph.lint()
    after = evaluate(graph, arrays)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    assert not join_slice_scatters(graph).changed, "a second run must find nothing to do"
    return graph, changed


def placed(g, start, end, axis=1, step=1):
    return slice_scatter(g, SHAPE, (axis,), (start,), (end,), (step,))


def test_pieces_side_by_side_become_one_concat_in_axis_order():
    a, b, c = (RNG.standard_normal((2, k, 3)) for k in (2, 1, 2))
    a[0, 0, 0], c[1, 1, 2] = np.nan, -np.inf
    graph, changed = run(lambda a, b, c: F.add_n([placed(c, 3, 5), placed(a, 0, 2), placed(b, 2, 3)]), [a, b, c])
    ops = sorted(n.op for n in graph.nodes.values())
    assert changed and ops == ["concat", "input", "input", "input"]
    graph, changed = run(lambda a, b: placed(b, 2, 5) + placed(a, 0, 2), [a, RNG.standard_normal((2, 3, 3))])
    assert changed and "slice_scatter" not in {n.op for n in graph.nodes.values()}


def test_left_alone_with_a_gap_an_overlap_a_step_or_two_axes():
    a, b = RNG.standard_normal((2, 2, 3)), RNG.standard_normal((2, 3, 3))
    cases = [lambda a, b: F.add_n([placed(a, 0, 2), placed(b, 1, 4)]),                       # an overlap
             lambda a, b: F.add_n([placed(a, 0, 2), placed(b[:, :2], 3, 5)]),                 # a gap
             lambda a, b: F.add_n([placed(a, 0, 3, step=2), placed(b, 2, 5)]),                # a step
             lambda a, b: F.add_n([placed(a, 0, 2), slice_scatter(b[:, :2, :2], SHAPE, (1, 2), (3, 0), (5, 2),
                                                                  (1, 1))])]                  # two axes
    for fn in cases:
        graph, _ = run(fn, [a, b])
        assert "concat" not in {n.op for n in graph.nodes.values()}
