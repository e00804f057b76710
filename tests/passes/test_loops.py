"""The loop passes (passes/loops.py) and every pass inside loop bodies: values unchanged (NaN and Inf
included), a fixed point reached, the graph valid, and no rewrite where none applies."""
import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir import dims
from gcompile.ir.evaluate import evaluate
from gcompile.passes import fuse_gemm, hoist_loop_sums, optimize, prune_loops
from gcompile.passes.base import run_in_bodies

RNG = np.random.default_rng(0)
XS = RNG.standard_normal((5, 3, 4))
W = RNG.standard_normal((4, 4)) * 0.5
H0 = RNG.standard_normal((3, 4))


def _scans(graph):
    return [n for n in graph.nodes.values() if n.op == "scan"]


def _check(pass_fn, fn, arrays, expect_change=True):
    graph = trace(fn, list(arrays)).graph
    before = evaluate(graph, arrays)
    assert pass_fn(graph).changed == expect_change
    graph.lint()
    for a, b in zip(before, evaluate(graph, arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert not pass_fn(graph).changed
    return graph


def accumulating(xs, w, h0):
    """A step that accumulates x_tᵀ·h (a weight's gradient) and Σ h (a bias's) in carries."""
    def step(c, x):
        h, gw, gb = c
        h2 = F.tanh(h @ w + x)
        return (h2, gw + F.transpose(x) @ h2, gb + F.sum(h2, axis=0)), None
    (h, gw, gb), _ = gc.scan(step, (h0, F.zeros_like(w), F.zeros_like(h0[0])), xs)
    return h, gw, gb


def test_sums_move_out_of_the_loop():
    arrays = [XS, W, H0]
    graph = trace(accumulating, arrays).graph
    optimize(graph, 1)
    run_in_bodies(graph, fuse_gemm)                    # the products as gemm, as level 2 writes them
    before = evaluate(graph, arrays)
    assert hoist_loop_sums(graph).changed
    graph.lint()
    (node,) = _scans(graph)
    assert node.attrs["n_carry"] == 1                  # only h is carried now
    for a, b in zip(before, evaluate(graph, arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert not hoist_loop_sums(graph).changed


def _hoisted_carries(monkeypatch, limit, fn, arrays):
    """The carries hoist_loop_sums moved out of fn's loops with HOIST_MAX_BYTES = limit (values
    unchanged either way)."""
    import gcompile.passes.loops as loops
    monkeypatch.setattr(loops, "HOIST_MAX_BYTES", limit)
    graph = trace(fn, arrays).graph
    optimize(graph, 1)
    run_in_bodies(graph, fuse_gemm)
    before = evaluate(graph, arrays)
    carries = sum(n.attrs["n_carry"] for n in _scans(graph))
    hoist_loop_sums(graph)
    graph.lint()
    for a, b in zip(before, evaluate(graph, arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    return carries - sum(n.attrs["n_carry"] for n in _scans(graph))


def test_sums_whose_stacked_operands_pass_the_byte_limit_stay_in_the_loop(monkeypatch):
    """Each accumulator of `accumulating` stacks h2, (3, 4) float64 over 5 steps: 480 bytes (x_t is
    the loop's xs, stacked already). At the limit both move out; a byte below, neither."""
    assert _hoisted_carries(monkeypatch, 480, accumulating, [XS, W, H0]) == 2
    assert _hoisted_carries(monkeypatch, 479, accumulating, [XS, W, H0]) == 0


def test_sums_of_a_loop_of_unknown_length_stay_in_the_loop(monkeypatch):
    """A while loop's backward runs as many steps as the forward took, unknown when compiling: what
    it would stack has no bound, so its weight and bias gradients accumulate step by step."""
    def fn(x, w, b):
        def body(v):
            h, k = v
            return F.tanh(h @ w + b) * 0.7 + h, k + 1
        h, _ = gc.while_loop(lambda v: v[1] < 5, body, (x, np.int64(0)))
        return gc.grad(F.sum(h * h), [x, w, b])
    assert _hoisted_carries(monkeypatch, 1 << 40, fn, [H0, W, XS[0, 0]]) == 0


def test_no_hoisting_when_the_accumulator_is_read_in_the_step_or_the_loop_checkpoints():
    def reads_acc(xs, w, h0):
        def step(c, x):
            h, s = c
            h2 = F.tanh(h @ w + x + F.sum(s))
            return (h2, s + F.sum(h2, axis=0)), None
        return gc.scan(step, (h0, F.zeros_like(h0[0])), xs)[0]
    _check(hoist_loop_sums, reads_acc, [XS, W, H0], expect_change=False)

    def checkpointed(xs, w, h0):
        def step(c, x):
            h, s = c
            h2 = F.tanh(h @ w + x)
            return (h2, s + F.sum(h2, axis=0)), None
        return gc.scan(step, (h0, F.zeros_like(h0[0])), xs, checkpoint=True)[0]
    _check(hoist_loop_sums, checkpointed, [XS, W, H0], expect_change=False)


def test_prune_keeps_values_with_nan_and_inf_and_reaches_a_fixed_point():
    xs = XS.copy()
    xs[1, 0, 0], xs[2, 1, 1] = np.nan, np.inf

    def fn(xs, w, h0):
        (h, counter, same), ys = gc.scan(lambda c, x: ((F.tanh(c[0] @ w + x), c[1] + 1, c[2]), (c[0] * x, x)),
                                         (h0, np.float64(0), w), xs)
        return h, ys[0] + same.sum()
    graph = _check(prune_loops, fn, [xs, W, H0])
    (node,) = _scans(graph)
    assert (node.attrs["n_carry"], len(node.outputs)) == (1, 2)   # no counter, no passthrough, no ys[1]


def test_prune_leaves_a_loop_whose_outputs_are_all_read():
    def fn(xs, w, h0):
        return gc.scan(lambda h, x: (F.tanh(h @ w + x), h * 2), h0, xs)
    _check(prune_loops, fn, [XS, W, H0], expect_change=False)


def test_passes_run_inside_bodies():
    def fn(xs, w, h0):
        def step(h, x):
            a = F.tanh(h @ w + x) * 1.0 + 0.0          # simplify: no mul, no add
            b = F.tanh(h @ w + x)                       # cse: the same as a
            return a + b, F.exp(np.zeros(2)) * h[:, :2]  # fold: exp(0)
        return gc.scan(step, h0, xs)
    graph = trace(fn, [XS, W, H0]).graph
    body = _scans(graph)[0].attrs["body"]
    ops_before = [n.op for n in body.nodes.values()]
    before = evaluate(graph, [XS, W, H0])
    optimize(graph)
    ops_after = [n.op for n in _scans(graph)[0].attrs["body"].nodes.values()]
    assert ops_before.count("tanh") == 2 and ops_after.count("tanh") == 1
    assert "exp" not in ops_after and ops_after.count("mul") < ops_before.count("mul")
    for a, b in zip(before, evaluate(graph, [XS, W, H0])):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_loops_drawing_random_numbers_are_never_merged_folded_or_recomputed():
    def two_dropout_loops(h0):
        def noisy(h, _):
            return F.dropout(h, 0.5, training=True), None
        a, _ = gc.scan(noisy, h0, length=3)
        b, _ = gc.scan(noisy, h0, length=3)     # the same body and operands: still two draws
        return a - b
    graph = trace(two_dropout_loops, [np.ones((3, 4))]).graph
    optimize(graph)
    assert len(_scans(graph)) == 2
    constant = trace(lambda x: x + gc.scan(lambda h, _: (F.dropout(h, 0.5, training=True), None),
                                           np.ones(4), length=2)[0], [np.ones(4)]).graph
    optimize(constant)
    assert len(_scans(constant)) == 1           # all operands constant, but not folded

    def checkpointed(h0):
        h = gc.checkpoint(lambda h0: gc.scan(lambda h, _: (F.dropout(F.tanh(h), 0.5, training=True), None),
                                             h0, length=3)[0], h0)
        return gc.grad(F.sum(h * h), [h0])[0]
    graph = trace(checkpointed, [np.ones((3, 4))]).graph
    optimize(graph)
    assert len([n for n in _scans(graph) if n.order == 0]) == 1   # the random forward loop is not copied


def test_no_hoisting_of_sums_whose_terms_change_shape_from_step_to_step():
    """The backward of gc.while_loop(checkpoint_every=3) over 5 steps is a scan over 2 blocks whose body
    reverses a block (3 steps, then 2): a bias's gradient there sums values stacked over the block's
    steps, (steps, ...) at a length each block has its own. hoist_loop_sums once stacked those over
    the blocks too, a ragged value no ONNX Scan can hold (lowering found no size for it, and the
    evaluator cannot stack it)."""
    def fn(x, w, b):
        def body(v):
            h, k = v
            return F.tanh(h @ w + b) * 0.7 + h, k + 1
        h, _ = gc.while_loop(lambda v: v[1] < 5, body, (x, np.int64(0)), checkpoint_every=3)
        return gc.grad(F.sum(h * h), [x, w, b])
    arrays = [H0[:2, :3], W[:3, :3], XS[0, 0, :3]]
    graph = trace(fn, arrays).graph
    before = evaluate(graph, arrays)
    optimize(graph, 2)
    graph.lint()
    for node in _scans(graph):
        inputs = {s for r in node.attrs["body"].inputs for d in node.attrs["body"].type_of(r).shape
                  if isinstance(d, str) for s in dims.symbols(d)}
        for t in node.outputs[node.attrs["n_carry"]:]:
            assert all(s in inputs for d in t.shape[1:] if isinstance(d, str) for s in dims.symbols(d)), t
    for a, b in zip(before, evaluate(graph, arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
