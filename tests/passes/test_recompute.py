"""The recompute pass and gc.checkpoint: values unchanged (reference evaluator and onnxruntime),
graph still valid, the expected nodes copied into the backward, idempotent."""
import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.passes import optimize, recompute_pass

from ..test_node_order import tanh_step

RNG = np.random.default_rng(0)
X, W = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 4)) * 0.5


def mlp_step(x, w):
    h = F.tanh(x * w[0])           # cheap ops on inputs: copied into the backward
    loss = F.sum(F.sigmoid(h @ w) * h)   # sigmoid reads a matmul output: copying it would keep that instead
    return loss, gc.grad(loss, [w])[0]


def copies(graph):
    return [n for n in graph.nodes.values() if n.name.startswith(f"re{n.order}_")]


def forward_reads_by_backward(graph):
    return {r.node for n in graph.nodes.values() for r in n.inputs
            if graph.nodes[r.node].order < n.order and graph.nodes[r.node].op not in ("input", "constant")}


def test_cheap_recompute_preserves_values_and_is_idempotent():
    graph = trace(mlp_step, [X, W]).graph
    optimize(graph, 2)
    before = evaluate(graph, [X, W])
    kept_before = forward_reads_by_backward(graph)
    assert recompute_pass(graph, cheap=True).changed
    graph.lint()
    for got, want in zip(evaluate(graph, [X, W]), before):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    made = copies(graph)
    assert made and all(n.order == 1 for n in made)
    assert len({n.name for n in made}) == len(made)
    assert {"tanh", "mul"} <= {n.op for n in made} and "sigmoid" not in {n.op for n in made}
    # the backward no longer reads any copied forward node
    originals = {n.name[len("re1_"):] for n in made}
    assert originals <= {n.name for n in graph.nodes.values()}
    assert not {graph.nodes[i].name for i in forward_reads_by_backward(graph)} & originals
    assert len(forward_reads_by_backward(graph)) < len(kept_before)
    n_nodes = len(graph)
    assert not recompute_pass(graph, cheap=True).changed
    assert len(graph) == n_nodes


def test_nothing_to_do_without_marks_or_cheap():
    graph = trace(mlp_step, [X, W]).graph
    optimize(graph, 2)
    n_nodes = len(graph)
    assert not recompute_pass(graph, cheap=False).changed
    assert len(graph) == n_nodes


def test_matmul_is_never_copied_by_the_cheap_rule():
    graph = trace(mlp_step, [X, W]).graph
    optimize(graph, 2, recompute=True)
    assert "matmul" not in {n.op for n in copies(graph)}


def lstm_loop(xs, h0, w_ih, w_hh, b, use_checkpoint):
    h, c = h0, h0
    for t in range(xs.shape[0]):
        cell = (lambda *a: gc.checkpoint(F.lstm_cell, *a)) if use_checkpoint else F.lstm_cell
        h, c = cell(xs[t], h, c, w_ih, w_hh, b)
    loss = F.sum(h * h)
    return loss, gc.grad(loss, [w_ih, w_hh, b])


def lstm_inputs(steps=3, n=2, i=3, hidden=2):
    r = np.random.default_rng(1)
    return [r.standard_normal((steps, n, i)), r.standard_normal((n, hidden)),
            r.standard_normal((4 * hidden, i)) * 0.5, r.standard_normal((4 * hidden, hidden)) * 0.5,
            r.standard_normal(4 * hidden) * 0.1]


def test_checkpoint_marks_the_region_but_not_its_outputs():
    args = lstm_inputs()
    graph = trace(lambda *a: lstm_loop(*a, True), args).graph
    marked = [n for n in graph.nodes.values() if n.recompute]
    assert marked and all(n.order == 0 for n in marked)
    assert {"sigmoid", "tanh", "matmul"} <= {n.op for n in marked}
    outputs_of_cells = {n.id for n in graph.nodes.values() if n.op == "mul" and not n.recompute and n.order == 0}
    assert outputs_of_cells   # h' = o * tanh(c') of every step stays kept
    plain = trace(lambda *a: lstm_loop(*a, False), args).graph
    assert len(plain) == len(graph)   # tracing is unchanged


def test_checkpoint_region_recomputed_values_and_onnxruntime():
    args = lstm_inputs()
    expected = evaluate(trace(lambda *a: lstm_loop(*a, False), args).graph, args)
    graph = trace(lambda *a: lstm_loop(*a, True), args).graph
    optimize(graph, 2)
    graph.lint()
    made = copies(graph)
    assert {"matmul", "gemm"} & {n.op for n in made}   # a checkpoint copies everything in it, not only cheap ops
    marked = {n.name for n in graph.nodes.values() if n.recompute}
    read = {graph.nodes[i].name for i in forward_reads_by_backward(graph)}
    assert not read & marked                  # the backward reads no marked forward value any more
    after = [n for n in graph.nodes.values() if n.op == "after"]
    assert after and all(n.order == 1 for n in after)
    for got, want in zip(evaluate(graph, args), expected):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    f32 = [a.astype(np.float32) for a in args]
    cf = gc.compile(lambda *a: lstm_loop(*a, True), *f32)
    for got, want in zip(cf.run_flat(*f32), expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    n_nodes = len(graph)
    assert not recompute_pass(graph, cheap=False).changed and len(graph) == n_nodes


def test_second_order_graph_copies_per_order():
    def fn(x, w):
        _, g = mlp_step(x, w)
        return gc.grad(F.sum(g * g), [w])[0]
    graph = trace(fn, [X, W]).graph
    optimize(graph, 2)
    expected = evaluate(graph, [X, W])
    assert recompute_pass(graph, cheap=True).changed
    graph.lint()
    made = copies(graph)
    assert 2 in {n.order for n in made}
    assert all(c.order == n.order for n in made for c in graph.consumers(n.id))
    np.testing.assert_allclose(evaluate(graph, [X, W])[0], expected[0], rtol=1e-12)
    cf = gc.compile(fn, X.astype(np.float32), W.astype(np.float32), recompute=True)
    np.testing.assert_allclose(cf(X.astype(np.float32), W.astype(np.float32)), expected[0], rtol=1e-4, atol=1e-5)


# -- a memory budget ------------------------------------------------------------------------------------------
DEEP = [RNG.standard_normal((32, 32)) * 0.3 for _ in range(6)]
deep_step = tanh_step


def _planned(budget=None):
    from gcompile.ir.memory import planned_peak
    graph = trace(deep_step, [X[:, :1] @ np.ones((1, 32)), *DEEP]).graph
    optimize(graph, 2, memory_budget=budget)
    return graph, planned_peak(graph)


def test_a_memory_budget_recomputes_until_the_plan_fits():
    from gcompile.passes.recompute import within_budget
    x = np.repeat(X[:, :1] @ np.ones((1, 32)), 100, axis=0)        # 300 rows: values far larger than the weights
    graph = trace(deep_step, [x, *DEEP]).graph
    optimize(graph, 2)
    graph.run_in_order = False
    before = evaluate(graph, [x, *DEEP])
    traced = trace(deep_step, [x, *DEEP]).graph
    optimize(traced, 2)
    first, _ = within_budget(traced, 10**12)                       # (a budget already met changes nothing)
    assert not any(n.recompute for n in traced.nodes.values())
    budget = int(first * 0.7)
    planned, final = within_budget(graph, budget)
    assert planned == first and final <= budget < planned
    assert any(n.recompute for n in graph.nodes.values())
    assert recompute_pass(graph, cheap=False, sequenced=False).changed
    graph.lint()
    assert all(n.op != "after" for n in graph.nodes.values()) and copies(graph)
    for got, want in zip(evaluate(graph, [x, *DEEP]), before):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # compiled: the copies survive lowering (never merged back with their originals), values unchanged
    cf = gc.compile(deep_step, x.astype(np.float32), *(w.astype(np.float32) for w in DEEP), provider="cpu",
                    memory_budget=budget // 2)                       # (float32: every value half the size)
    plain = gc.compile(deep_step, x.astype(np.float32), *(w.astype(np.float32) for w in DEEP), provider="cpu")
    assert len(cf.model.graph.node) > len(plain.model.graph.node)
    args = [x.astype(np.float32), *(w.astype(np.float32) for w in DEEP)]
    for got, want in zip(cf(*args)[1], plain(*args)[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_budget_out_of_reach_warns_with_the_figures_and_bad_budgets_are_refused():
    import pytest

    from gcompile.errors import GcompileError
    with pytest.warns(UserWarning, match=r"memory_budget of 0 MiB not reached: .* plans \d+ MiB \(without: \d+ MiB\)"):
        _planned(budget=1)
    # outputs larger than the budget (a gradient of 2 MiB against 1 MiB): the warning says no recomputing can help
    w = RNG.standard_normal((512, 512)).astype(np.float32)
    with pytest.warns(UserWarning, match=r"not reached: .*; the step's outputs alone take 2 MiB, which no recomputing"):
        gc.compile(lambda x: gc.grad(F.sum(F.tanh(x @ w)), [x]),
                   np.ones((1024, 512), np.float32), provider="cpu", memory_budget=1 << 20)
    for bad in (0, -5, "1GB", True):
        with pytest.raises(GcompileError, match="memory_budget must be a positive number of bytes"):
            _planned(budget=bad)
    with pytest.raises(GcompileError, match="memory_budget needs static sizes.*give static specs"):
        gc.compile(deep_step, gc.spec(("n", 32)), *DEEP, provider="cpu", memory_budget=1 << 20)


def gelu_loss(x, *ws):
    for w in ws[:-1]:
        x = F.gelu(x @ w)
    return F.sum(F.tanh(x @ ws[-1]))


def gelu_step(x, *ws):
    """Gelu layers: reverse mode saves each gelu's input (its derivative reads it) and output (the
    next product's weight gradient reads it)."""
    loss = gelu_loss(x, *ws)
    return loss, gc.grad(loss, list(ws))


GELU_ARGS = [RNG.standard_normal((256, 16)), *(RNG.standard_normal((16, 16)) * 0.4 for _ in range(4))]


def test_saved_elementwise_values_of_saved_operands_are_recomputed_where_the_plan_goes_down():
    from gcompile.passes.recompute import recompute_elementwise
    graph = trace(gelu_step, GELU_ARGS).graph
    optimize(graph, 2)
    before = evaluate(graph, GELU_ARGS)
    planned, after = recompute_elementwise(graph)
    marked = [n for n in graph.nodes.values() if n.recompute]
    assert after < planned and [n.op for n in marked] == ["gelu"] * 3
    # only values whose operands the backward keeps anyway: not tanh (its input, a product, is not kept)
    assert recompute_pass(graph, cheap=False, sequenced=False).changed
    graph.lint()
    assert [n.op for n in copies(graph)] == ["gelu"] * 3
    assert not {r.node for n in graph.nodes.values() if n.order == 1 for r in n.inputs} & {n.id for n in marked}
    for got, want in zip(evaluate(graph, GELU_ARGS), before):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert recompute_elementwise(trace(gelu_step, [gc.spec(("n", 16)), *GELU_ARGS[1:]]).graph) is None


def test_a_large_step_recomputes_its_saved_elementwise_values_and_keeps_its_gradients(monkeypatch):
    import gcompile.passes
    from gcompile.ir.memory import planned_peak
    args = [a.astype(np.float32) for a in GELU_ARGS]
    plain = gc.compile(gelu_step, *args, provider="cpu")
    monkeypatch.setattr(gcompile.passes, "FILE_ORDER_MIN_BYTES", 1)        # (a step this small plans far less)
    large = gc.compile(gelu_step, *args, provider="cpu")
    assert large.graph.run_in_order and [n.op for n in copies(large.graph)] == ["gelu"] * 3
    assert planned_peak(large.graph) < planned_peak(plain.graph)
    for got, want in zip(large(*args)[1], plain(*args)[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    # the derivative of the model that runs (recomputed gelus, trace order) against float64 differences
    from gcompile.testing import check_grad
    check_grad(lambda x, *ws: gc.grad(gelu_loss(x, *ws), [ws[0]])[0][0, 0], [GELU_ARGS[0][:8], *GELU_ARGS[1:]])


def norm_loss(x, *params):
    """Products, each followed by an inference-mode batch norm written out (normalise with fixed
    statistics, scale by gamma, shift by beta; the two reshaped to broadcast) and a hardswish.
    `params`: the gammas, the betas, the weights."""
    k = len(params) // 3
    for gamma, beta, w in zip(params[:k], params[k:2 * k], params[2 * k:]):
        normed = (x @ w - 0.1) * 1.5
        x = F.hardswish(normed * F.reshape(gamma, (1, -1)) + F.reshape(beta, (1, -1)))
    return F.sum(F.tanh(x))


def norm_step(x, *params):
    loss = norm_loss(x, *params)
    return loss, gc.grad(loss, list(params))


NORM_ARGS = [RNG.standard_normal((64, 64)), *(RNG.standard_normal(64) for _ in range(6)),
             *(RNG.standard_normal((64, 64)) * 0.2 for _ in range(3))]


def test_chains_of_cheap_nodes_from_a_saved_value_are_recomputed_with_it():
    """The normalised product is saved (gamma's gradient reads it); the scaled and shifted value
    and hardswish's inner affine, which the backward reads too, are a chain of cheap nodes from it
    (the reshapes of gamma and beta among them): they are recomputed, and the copies read only
    values the backward kept before."""
    from gcompile.passes.recompute import recompute_elementwise
    graph = trace(norm_step, NORM_ARGS).graph
    optimize(graph, 2)
    before = evaluate(graph, NORM_ARGS)
    def kept():     # by name: the pass renumbers the nodes
        return {graph.nodes[i].name for i in forward_reads_by_backward(graph)}
    kept_before = kept()
    planned, after = recompute_elementwise(graph)
    marked = {n.op for n in graph.nodes.values() if n.recompute}
    assert after < planned and {"add", "reshape"} <= marked, marked
    assert recompute_pass(graph, cheap=False, sequenced=False).changed
    graph.lint()
    outside = {graph.nodes[r.node].name for n in copies(graph) for r in n.inputs
               if not graph.nodes[r.node].copy and graph.nodes[r.node].op not in ("input", "constant")}
    assert outside and outside <= kept_before
    assert kept() < kept_before
    for got, want in zip(evaluate(graph, NORM_ARGS), before):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_large_normalised_step_keeps_its_gradients(monkeypatch):
    """The model that runs, its copies in trace order, against float64 differences at orders 1 and 2."""
    import gcompile.passes
    from gcompile.testing import check_grad
    monkeypatch.setattr(gcompile.passes, "FILE_ORDER_MIN_BYTES", 1)
    x, params = NORM_ARGS[0][:8], NORM_ARGS[1:]
    check_grad(lambda x, *ps: gc.grad(norm_loss(x, *ps), [ps[0]])[0][0], [x, *params])
