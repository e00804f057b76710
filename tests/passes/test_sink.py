"""passes/sink.py: a node read by one later node moves to just before it where that frees more than
it keeps, and the planned peak never rises."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile import passes
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ir.memory import planned_peak
from gcompile.passes import optimize
from gcompile.passes.sink import SINK_MIN_BYTES, sink_to_readers

ROWS = SINK_MIN_BYTES // (4 * 256)          # a (ROWS, 256) float32 value is SINK_MIN_BYTES
RNG = np.random.default_rng(0)
X = RNG.standard_normal((ROWS, 256)).astype(np.float32)


def _sunk(graph, arrays):
    """The pass on `graph`, checked to leave a valid graph of the same values on `arrays`:
    (whether it moved a node, the planned peak before, after)."""
    before, values = planned_peak(graph), evaluate(graph, arrays)
    changed = sink_to_readers(graph).changed
    graph.lint()
    for a, b in zip(values, evaluate(graph, arrays)):
        np.testing.assert_array_equal(a, b)
    return changed, before, planned_peak(graph)


def _late_exp(x):
    early = F.exp(x)                          # read only by the last product
    a = F.tanh(x)
    chain = F.sin(a) * F.cos(a)               # a, its sine and its cosine alive at once
    return F.sum(early * chain)


def test_a_value_read_once_much_later_is_made_just_before_its_reader():
    graph = trace(_late_exp, [X]).graph
    _, before, after = _sunk(graph, [X])
    assert [n.op for n in graph.topo_order()][-4:] == ["mul", "exp", "mul", "reduce_sum"]
    assert (before, after) == (4 * SINK_MIN_BYTES, 3 * SINK_MIN_BYTES)


def test_optimize_sinks_only_in_graphs_that_run_in_trace_order(monkeypatch):
    graph = trace(_late_exp, [X]).graph
    optimize(graph, 2)
    assert not graph.run_in_order and [n.op for n in graph.topo_order()][-4:] != ["mul", "exp", "mul", "reduce_sum"]
    monkeypatch.setattr(passes, "FILE_ORDER_MIN_BYTES", SINK_MIN_BYTES)
    graph = trace(_late_exp, [X]).graph
    optimize(graph, 2)
    assert graph.run_in_order and [n.op for n in graph.topo_order()][-4:] == ["mul", "exp", "mul", "reduce_sum"]


def test_a_value_that_would_keep_a_larger_operand_alive_stays():
    """y = x2[::2] is half its operand, which nothing else reads: made late, it would hold x2 instead."""
    def fn(x):
        x2 = F.concat([x, x], axis=0) * 3.0
        half = x2[::2]
        chain = F.sin(F.cos(F.tanh(x) * 2.0) + 1.0)
        return F.sum(half * chain)

    graph = trace(fn, [X]).graph
    _, before, after = _sunk(graph, [X])
    order = [n.op for n in graph.topo_order()]
    assert order.index("slice") < order.index("tanh") and after == before


def test_small_values_and_graph_outputs_stay_where_they_are():
    def fn(x):
        small, out = F.exp(x[:4]), F.exp(x) * 2.0
        chain = F.sin(F.cos(F.tanh(x) * 2.0) + 1.0)
        return F.sum(small) + F.sum(chain), out

    graph = trace(fn, [X]).graph
    order = [n.id for n in graph.topo_order()]
    assert not sink_to_readers(graph).changed and [n.id for n in graph.topo_order()] == order


def _tied_step(rng):
    """A tied embedding's step: its product term, made early, moves to the sum at the end."""
    ids = rng.integers(0, 1024, 64)

    def step(w, m):
        h = F.tanh(F.matmul(F.take(w, ids, axis=0), m))
        logits = F.matmul(h, F.transpose(w))
        return gc.grad(F.sum(logits * logits), [w, m])
    return step, [rng.standard_normal((1024, 256)).astype(np.float32) * 0.1,
                  rng.standard_normal((256, 256)).astype(np.float32) * 0.1]


def _residual_step(rng):
    """A residual block with a strided shortcut: the shortcut's input gradient moves to the sum
    with the main branch's."""
    def step(x, w0, w1, w2, wd):
        h = F.relu(F.conv(x, w0, pad=1))
        main = F.conv(F.relu(F.conv(h, w1, stride=2, pad=1)), w2, pad=1)
        out = F.relu(main + F.conv(h, wd, stride=2))
        return gc.grad(F.sum(out * out), [w0, w1, w2, wd])
    ws = [rng.standard_normal(s).astype(np.float32) * 0.2
          for s in ((16, 16, 3, 3), (32, 16, 3, 3), (32, 32, 3, 3), (32, 16, 1, 1))]
    return step, [rng.standard_normal((8, 16, 64, 64)).astype(np.float32), *ws]


@pytest.mark.parametrize("make", [_tied_step, _residual_step])
def test_gradient_steps_never_plan_more_after_sinking(make):
    """Training steps' graphs, optimized as compiles optimize them: nodes move, the plan does not
    rise, every value is unchanged (their compiles run the pass where their planned peak makes
    them run in trace order)."""
    step, args = make(np.random.default_rng(1))
    graph = trace(step, args).graph
    optimize(graph, 2)
    changed, before, after = _sunk(graph, args)
    assert changed and after <= before
