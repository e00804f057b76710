"""The emitted node order (lowering/order.py): each node right after its operands, graph outputs
last with the earliest ready at the end, results unchanged; and the session options chosen by
graph size (runtime/providers.py)."""
import numpy as np
from onnx import helper

import gcompile as gc
import gcompile.functions as F
from gcompile.lowering import order
from gcompile.runtime import providers


def names(nodes):
    return [n.name for n in nodes]


def node(op, inputs, output):
    return helper.make_node(op, inputs, [output], name=output)


def test_a_node_that_reads_only_early_values_moves_up_to_them():
    # trace order: the forward chain, then the backward reading a forward value through `side`
    nodes = [node("Tanh", ["x"], "f0"), node("Tanh", ["f0"], "f1"), node("Tanh", ["f1"], "f2"),
             node("Mul", ["f2", "f2"], "b2"), node("Mul", ["f0", "f0"], "side"), node("Mul", ["b2", "side"], "b0")]
    assert names(order.schedule_order(nodes, [])) == ["f0", "f1", "side", "f2", "b2", "b0"]


def test_outputs_go_last_the_earliest_ready_at_the_end():
    nodes = [node("Tanh", ["x"], "g2"), node("Neg", ["g2"], "w2"), node("Tanh", ["g2"], "g1"),
             node("Neg", ["g1"], "w1"), node("Identity", ["w1"], "out_w1"), node("Identity", ["w2"], "out_w2"),
             node("Identity", ["g1"], "out_g1")]
    result = names(order.schedule_order(nodes, ["out_w1", "out_w2", "out_g1"]))
    # w2 is ready first: it and its Identity close the file, so ONNX Runtime's depth-first walk
    # starts with it. g1 feeds w1 too: it stays in place and only its Identity moves.
    assert result == ["g2", "g1", "out_g1", "w1", "out_w1", "w2", "out_w2"]


def test_many_outputs_keep_their_place(monkeypatch):
    monkeypatch.setattr(order, "MAX_LAST_OUTPUTS", 1)
    nodes = [node("Tanh", ["x"], "a"), node("Identity", ["a"], "out_a"), node("Tanh", ["a"], "b"),
             node("Identity", ["b"], "out_b")]
    assert names(order.schedule_order(nodes, ["out_a", "out_b"])) == ["a", "out_a", "b", "out_b"]


def test_the_order_is_deterministic_and_keeps_every_node():
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(5)]

    def step(x, *ws):
        h = x
        for w in ws:
            h = F.tanh(h @ w)
        loss = F.sum(h * h)
        return loss, gc.grad(loss, list(ws))
    x = rng.standard_normal((3, 4)).astype(np.float32)
    a, b = (gc.compile(step, x, *ws, provider="cpu") for _ in range(2))
    assert a.model.SerializeToString() == b.model.SerializeToString()
    produced = {i.name for i in a.model.graph.input} | {t.name for t in a.model.graph.initializer}
    for n in a.model.graph.node:    # a topological order
        assert all(i in produced for i in n.input if i), n.name
        produced.update(n.output)
    loss, grads = a(x, *ws)
    h = x
    for w in ws:
        h = np.tanh(h @ w)
    np.testing.assert_allclose(loss, np.sum(h * h), rtol=1e-5)


def test_large_graphs_plan_memory_without_static_reuse(monkeypatch):
    seen = []
    import onnxruntime as ort
    real = ort.InferenceSession

    def spy(model, options, **kw):
        seen.append(options.enable_mem_reuse)
        return real(model, options, **kw)
    monkeypatch.setattr(ort, "InferenceSession", spy)
    monkeypatch.setattr(providers, "MEMORY_REUSE_MAX_NODES", 3)
    cf = gc.compile(lambda x: F.tanh(F.tanh(x)), np.ones(3, np.float32), provider="cpu")
    np.testing.assert_allclose(cf(np.ones(3, np.float32)), np.tanh(np.tanh(np.ones(3))), rtol=1e-6)
    cf = gc.compile(lambda x: F.tanh(F.tanh(F.tanh(F.tanh(x)))), np.ones(3, np.float32), provider="cpu")
    np.testing.assert_allclose(cf(np.ones(3, np.float32)), np.tanh(np.tanh(np.tanh(np.tanh(np.ones(3))))), rtol=1e-6)
    assert seen == [True, False]
