"""gc.scan, gc.fori_loop and gc.while_loop: each against its unrolled equivalent (values on ONNX Runtime
and on the reference evaluator, gradients to third order in float64; while_loop's gradients are in
test_while.py), the edges (zero and one step,
reverse, pytrees, nested loops, captured weights, gc.checkpoint, unroll, checkpoint_every, symbolic
lengths), the pruning of what a gradient does not need, and the errors."""
import re

import numpy as np
import onnx
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.errors import GcompileError, ShapeError, TraceError
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.passes import optimize
from gcompile.testing import check_grad, check_lowering

from ..opcheck import GRAD_CHECKED_OPS, check_forward, check_grads

T, N, H = 4, 2, 3


def rand(*shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def f32(*arrays):
    return [np.asarray(a, np.float32) for a in arrays]


def onnx_nodes(graph) -> int:
    """ONNX nodes of a graph, those of its subgraphs included."""
    return sum(1 + sum(onnx_nodes(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
               for n in graph.node)


def loops(graph) -> list:
    return [n for n in graph.nodes.values() if n.op in ("scan", "while")]


# An Elman cell with an extra output: the body reads a captured weight, the carry and x.
def cell(w):
    def step(h, x):
        h2 = F.tanh(h @ w + x)
        return h2, F.sin(h2) * x
    return step


def rnn_scan(xs, w, h0, reverse=False, checkpoint=False, unroll=1):
    return gc.scan(cell(w), h0, xs, reverse=reverse, checkpoint=checkpoint, unroll=unroll)


def rnn_unrolled(xs, w, h0, reverse=False):
    step, h, ys = cell(w), h0, [None] * len(xs)
    for t in (reversed(range(len(xs))) if reverse else range(len(xs))):
        h, ys[t] = step(h, xs[t])
    return h, F.stack(ys)


def np_rnn(xs, w, h0, reverse=False):
    h, ys = h0, [None] * len(xs)
    for t in (reversed(range(len(xs))) if reverse else range(len(xs))):
        h = np.tanh(h @ w + xs[t])
        ys[t] = np.sin(h) * xs[t]
    return h, np.stack(ys)


ARGS = [rand(T, N, H, seed=1), rand(H, H, seed=2, scale=0.5), rand(N, H, seed=3)]


# -- values ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_matches_numpy_on_onnxruntime(reverse):
    xs, w, h0 = f32(*ARGS)
    cf = gc.compile(lambda xs, w, h0: rnn_scan(xs, w, h0, reverse), xs, w, h0, target="portable")
    assert sum(n.op_type == "Scan" for n in cf.model.graph.node) == 1
    check_forward(lambda xs, w, h0: rnn_scan(xs, w, h0, reverse), [xs, w, h0],
                  list(np_rnn(*ARGS, reverse=reverse)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target, lengths", [("portable", (3, 50, 500)), ("ort-cpu", (3, 50, 500))])
def test_scan_graph_stays_the_same_size_whatever_the_length(target, lengths):
    sizes = set()
    for steps in lengths:
        cf = gc.compile(lambda xs, w, h0: gc.grad(F.sum(rnn_scan(xs, w, h0)[1]), [w]),
                        *f32(rand(steps, N, H), *ARGS[1:]), target=target)
        sizes.add(onnx_nodes(cf.model.graph))
    assert len(sizes) == 1


@pytest.mark.parametrize("steps", [0, 1])
def test_zero_and_one_steps(steps):
    xs, w, h0 = rand(steps, N, H), ARGS[1], ARGS[2]
    expected = (h0, np.zeros((0, N, H))) if steps == 0 else np_rnn(xs, w, h0)
    check_forward(rnn_scan, f32(xs, w, h0), [e.astype(np.float32) for e in expected], atol=1e-6)
    check_grads(lambda xs, w, h0: rnn_scan(xs, w, h0), [xs, w, h0], order=2)


def test_symbolic_length_runs_any_number_of_steps_zero_included():
    w = f32(ARGS[1])[0]

    def fn(xs, h0):
        h, ys = rnn_scan(xs, w, h0)
        return h, ys, gc.grad(F.sum(h) + F.sum(ys * ys), [xs, h0])
    cf = gc.compile(fn, gc.spec(("T", "N", H)), gc.spec(("N", H)))
    for steps in (3, 1, 0):
        xs, h0 = f32(rand(steps, N, H, seed=steps), rand(N, H))
        got, expected = cf.run_flat(xs, h0), evaluate(cf.graph, [xs, h0])
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    assert cf.run_flat(*f32(rand(0, N, H), rand(N, H)))[1].shape == (0, N, H)


def test_pytree_carries_xs_and_ys():
    def fn(xs, w, h0):
        def step(c, x):
            h, (k, decay) = c["h"], c["k"]
            h2 = F.tanh(h @ w + x["u"]) * decay
            return {"h": h2, "k": (k + 1, decay * 0.5)}, {"y": h2 * k, "s": F.sum(x["u"])}
        one = np.ones((), h0.dtype)
        c, ys = gc.scan(step, {"h": h0, "k": (one, one)}, {"u": xs})
        return c["h"], c["k"][0], c["k"][1], ys["y"], ys["s"]

    def np_fn(xs, w, h0):
        h, k, decay, ys, ss = h0, 1.0, 1.0, [], []
        for x in xs:
            h = np.tanh(h @ w + x) * decay
            ys.append(h * k)
            ss.append(x.sum())
            k, decay = k + 1, decay * 0.5
        return [h, k, decay, np.stack(ys), np.array(ss)]
    check_forward(fn, f32(*ARGS), [np.asarray(e, np.float32) for e in np_fn(*ARGS)], rtol=1e-5, atol=1e-5)
    check_grads(fn, ARGS, order=2)


def test_scan_without_xs_and_without_ys():
    def fn(w, h0):
        h, ys = gc.scan(lambda h, _: (F.tanh(h @ w), None), h0, length=5)
        assert ys is None
        return h

    def np_fn(w, h0):
        for _ in range(5):
            h0 = np.tanh(h0 @ w)
        return h0
    out = check_forward(fn, f32(*ARGS[1:]), [np_fn(*ARGS[1:]).astype(np.float32)], atol=1e-6)
    assert out[0].shape == (N, H)
    check_grads(fn, ARGS[1:], order=2)


def test_reverse_scan_without_xs_keeps_ys_aligned_with_steps():
    def fn(h0):
        return gc.scan(lambda c, _: (c + 1, c * 1), h0, length=4, reverse=True)
    h0 = np.zeros(2, np.float32)
    check_forward(fn, [h0], [h0 + 4, np.array([[3, 3], [2, 2], [1, 1], [0, 0]], np.float32)])


@pytest.mark.parametrize("unroll", [2, 3, True])
def test_unroll_gives_the_same_values(unroll):
    for reverse in (False, True):
        check_forward(lambda xs, w, h0, reverse=reverse: rnn_scan(xs, w, h0, reverse, unroll=unroll), f32(*ARGS),
                      [e.astype(np.float32) for e in np_rnn(*ARGS, reverse=reverse)], rtol=1e-5, atol=1e-5)
    graph = trace(lambda xs, w, h0: rnn_scan(xs, w, h0, unroll=unroll), ARGS).graph
    assert len(loops(graph)) == (0 if unroll is True else 1)


# -- gradients --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reverse, checkpoint", [(False, False), (True, False), (False, True)])
def test_gradients_to_third_order_match_the_unrolled_loop(reverse, checkpoint):
    GRAD_CHECKED_OPS.add("scan")
    # (both at static shapes, so both weigh their outputs alike: the unrolled loop needs a static length)
    for order in (1, 2, 3):
        numeric, analytic = check_grad(lambda xs, w, h0: rnn_scan(xs, w, h0, reverse, checkpoint), ARGS, order=order,
                                       symbolic=False)
        _, unrolled = check_grad(lambda xs, w, h0: rnn_unrolled(xs, w, h0, reverse), ARGS, order=order,
                                 symbolic=False)
        assert analytic == pytest.approx(unrolled, rel=1e-9, abs=1e-12)
    # the scan over a symbolic length, on ONNX Runtime
    check_grad(lambda xs, w, h0: rnn_scan(xs, w, h0, reverse, checkpoint), ARGS, order=2, symbolic=True)


def test_gradients_on_onnxruntime_match_the_reference_evaluator():
    def fn(xs, w, h0):
        def loss(xs, w, h0):
            h, ys = rnn_scan(xs, w, h0)
            return F.sum(h * h) + F.sum(ys)
        g = gc.grad(loss(xs, w, h0), [xs, w, h0])
        return g, gc.hvp(lambda w: loss(xs, w, h0), w, F.ones_like(w))
    check_lowering(fn, f32(*ARGS), rtol=1e-4, atol=1e-5)


def test_nested_scans_and_their_gradients():
    def fn(xs, w, h0):
        def outer(h, x):
            def inner(c, k):
                return F.tanh(c @ w + x * k), F.sum(c)
            return gc.scan(inner, h, np.arange(3, dtype=x.dtype) / 2)
        return gc.scan(outer, h0, xs)

    def unrolled(xs, w, h0):
        h, ys = h0, []
        for x in xs:
            inner = []
            for k in np.arange(3, dtype=x.dtype) / 2:
                inner.append(F.sum(h))
                h = F.tanh(h @ w + x * k)
            ys.append(F.stack(inner))
        return h, F.stack(ys)
    check_lowering(fn, f32(*ARGS))
    for order in (1, 2):
        _, analytic = check_grad(fn, ARGS, order=order, symbolic=False)
        assert analytic == pytest.approx(check_grad(unrolled, ARGS, order=order, symbolic=False)[1], rel=1e-9)
    check_grad(fn, ARGS, order=2, symbolic=True)
    graph = trace(fn, ARGS).graph
    assert [len(loops(n.attrs["body"])) for n in loops(graph)] == [1]


def test_scan_inside_checkpoint_and_its_gradient_on_onnxruntime():
    def fn(xs, w, h0):
        h, ys = gc.checkpoint(rnn_scan, xs, w, h0)
        return gc.grad(F.sum(h * h) + F.sum(ys), [w, h0])
    check_lowering(fn, f32(*ARGS), rtol=1e-4, atol=1e-5)
    check_grads(lambda xs, w, h0: gc.checkpoint(rnn_scan, xs, w, h0), ARGS, order=2)


def test_gradient_inside_the_body_of_a_captured_weight():
    """gc.grad in the step function, w.r.t. a Tensor of the enclosing function: the body captures it."""
    def fn(xs, w, h0):
        def step(h, x):
            e = F.sum(F.tanh(h @ w + x) ** 2)
            (gw,) = gc.grad(e, [w])
            return h - 0.1 * F.tanh(h @ gw), e
        return gc.scan(step, h0, xs)
    check_lowering(fn, f32(*ARGS), rtol=1e-4, atol=1e-5)
    check_grads(fn, ARGS, order=2)


def test_random_ops_in_the_body_are_saved_not_drawn_again():
    """Dropout inside the body: the backward loop uses the forward's mask, in every mode."""
    def fn(xs, w, h0, checkpoint, every):
        def step(h, x):
            return F.tanh(F.dropout(h @ w, 0.5, training=True) + x), h
        h, ys = gc.scan(step, h0, xs, checkpoint=checkpoint, checkpoint_every=every)
        return h, ys, gc.grad(F.sum(h), [xs])[0]
    xs, w, h0 = f32(*ARGS)
    for checkpoint, every in ((False, None), (True, None), (False, 3), (True, 2)):
        cf = gc.compile(lambda xs, w, h0, c=checkpoint, e=every: fn(xs, w, h0, c, e), xs, w, h0)
        h, ys, gx = (a.astype(np.float64) for a in cf(xs, w, h0))
        pre = ys[-1] @ w                                   # the last step's input to dropout
        mask = (np.arctanh(h) - xs[-1]) / pre              # what dropout multiplied it by
        assert set(np.round(mask, 3).ravel()) <= {0.0, 2.0}
        np.testing.assert_allclose(gx[-1], 1 - h ** 2, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(gx[-2], ((1 - h ** 2) * mask) @ w.T * (1 - ys[-1] ** 2), rtol=1e-3, atol=1e-4)


def test_integer_carries_and_xs_get_no_gradient_but_work():
    def fn(xs, w, h0):
        def step(c, x):
            h, k = c
            return (F.tanh(h @ w + x[0] * F.cast(k, h.dtype)), k + x[1]), k
        (h, k), ks = gc.scan(step, (h0, np.int64(1)), (xs, np.arange(T, dtype=np.int64)))
        return h, k, ks
    got = check_lowering(fn, f32(*ARGS))
    assert got[1] == 1 + sum(range(T)) and got[2].tolist() == [1, 1, 2, 4]
    check_grads(lambda xs, w, h0: fn(xs, w, h0)[0], ARGS, order=2)


# -- checkpoint_every -------------------------------------------------------------------------------------------
def rnn_every(k, reverse=False, checkpoint=False, unroll=1):
    return lambda xs, w, h0: gc.scan(cell(w), h0, xs, reverse=reverse, checkpoint=checkpoint, unroll=unroll,
                                     checkpoint_every=k)


XS11 = rand(11, N, H, seed=4)


def BATCH(steps):   # noqa: N802 - the specs of (xs, w, h0) with the batch axis symbolic (the steps must be static)
    return [gc.spec((steps, "n", H)), gc.spec((H, H)), gc.spec(("n", H))]


@pytest.mark.parametrize("steps, k, reverse, checkpoint, unroll", [
    (7, 1, False, False, 1),      # a block per step
    (6, 3, False, False, 1),      # k divides the length
    (7, 3, False, False, 1),      # a remainder of 1 step
    (7, 3, True, False, 1),       # reverse: the remainder runs first
    (7, 2, True, True, 1),        # checkpoint=True inside the blocks
    (7, 3, False, False, 2),      # unroll=2 inside a block of 3
    (7, 7, False, False, 1),      # k = length: the plain scan
    (4, 9, True, False, 1),       # k > length: the plain scan
    (11, (5, 2), False, False, 1),   # two levels: blocks of 5 steps, each 2 blocks of 2 and a step
    (11, (4, 3), True, True, 1),     # two levels, reverse, remainders at both
    (7, (9, 3), False, False, 1),    # a level longer than the loop is skipped
    (0, 3, False, False, 1),      # zero steps
])
def test_checkpoint_every_gives_the_plain_scans_values_and_gradients(steps, k, reverse, checkpoint, unroll):
    xs, w, h0 = XS11[:steps], ARGS[1], ARGS[2]
    fn = rnn_every(k, reverse, checkpoint, unroll)
    expected = np_rnn(xs, w, h0, reverse) if steps else (h0, np.zeros((0, N, H)))
    check_forward(fn, f32(xs, w, h0), [e.astype(np.float32) for e in expected], rtol=1e-5, atol=1e-5)
    got = evaluate(trace(fn, [xs, w, h0]).graph, [xs, w, h0])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14)
    # float64 differences against the reference evaluator and ONNX Runtime, at static sizes and a symbolic batch
    check_grads(fn, [xs, w, h0], order=2, symbolic=BATCH(steps))
    if steps:
        for order in (1, 2):
            _, blocked = check_grad(fn, [xs, w, h0], order=order, lowered=False)
            _, unrolled = check_grad(lambda xs, w, h0: rnn_unrolled(xs, w, h0, reverse), [xs, w, h0], order=order,
                                     lowered=False)
            assert blocked == pytest.approx(unrolled, rel=1e-9)


def test_checkpoint_every_without_xs_and_ys_and_with_pytrees():
    def no_ys(w, h0):
        h, ys = gc.scan(lambda h, _: (F.tanh(h @ w), None), h0, length=5, checkpoint_every=2)
        assert ys is None
        return h

    def np_no_ys(w, h0):
        for _ in range(5):
            h0 = np.tanh(h0 @ w)
        return h0
    check_forward(no_ys, f32(*ARGS[1:]), [np_no_ys(*ARGS[1:]).astype(np.float32)], atol=1e-6)
    check_grads(no_ys, ARGS[1:], order=2, symbolic=BATCH(0)[1:])

    def tree(xs, w, h0):
        def step(c, x):
            h, k = c["h"], c["k"]
            h2 = F.tanh(h @ w + x["u"]) * k
            return {"h": h2, "k": k * 0.9}, {"y": h2 * x["u"], "s": F.sum(x["u"])}
        c, ys = gc.scan(step, {"h": h0, "k": F.sum(h0) * 0 + 1}, {"u": xs}, reverse=True, checkpoint_every=3)
        return c["h"], c["k"], ys["y"], ys["s"]

    def np_tree(xs, w, h0):
        h, k, ys, ss = h0, 1.0, [None] * len(xs), [None] * len(xs)
        for t in reversed(range(len(xs))):
            h = np.tanh(h @ w + xs[t]) * k
            ys[t], ss[t], k = h * xs[t], xs[t].sum(), k * 0.9
        return [h, k, np.stack(ys), np.array(ss)]
    xs = XS11[:7]
    check_forward(tree, f32(xs, *ARGS[1:]), [np.asarray(e, np.float32) for e in np_tree(xs, *ARGS[1:])],
                  rtol=1e-5, atol=1e-5)
    check_grads(tree, [xs, *ARGS[1:]], order=2, symbolic=BATCH(7))


def test_fori_loop_checkpoint_every():
    def fn(w, h0, every):
        return gc.fori_loop(0, 7, lambda i, h: F.tanh(h @ w) * F.cast(i + 1, h.dtype) * 0.3, h0,
                            checkpoint_every=every)
    check_grads(lambda w, h0: fn(w, h0, 3), ARGS[1:], order=2, symbolic=BATCH(0)[1:])
    _, blocked = check_grad(lambda w, h0: fn(w, h0, 3), ARGS[1:], order=2, lowered=False)
    _, plain = check_grad(lambda w, h0: fn(w, h0, None), ARGS[1:], order=2, lowered=False)
    assert blocked == pytest.approx(plain, rel=1e-9)


def test_checkpoint_every_keeps_one_carry_per_block():
    """Forward: a scan of length // k blocks that stacks only the carry at each block's start (and the
    ys); backward: a reverse scan of as many blocks, whose body runs the block again (an inner scan of
    k steps that keeps that block's values) and its inner backward scan. The graph's size does not
    grow with the length."""
    def fn(steps, k):
        def g(w, h0):
            h, _ = gc.scan(lambda h, _: (F.tanh(h @ w) * 0.5 + h * 0.5, None), h0, length=steps,
                           checkpoint_every=k)
            return gc.grad(F.sum(h * h), [w, h0])
        return g
    graph = trace(fn(1000, 100), ARGS[1:]).graph
    optimize(graph, 2)
    (forward,) = [n for n in loops(graph) if n.order == 0]
    (backward,) = [n for n in loops(graph) if n.order == 1]
    assert forward.attrs["length"] == backward.attrs["length"] == 10
    assert [t.shape for t in forward.outputs] == [(N, H), (10, N, H)]          # the final carry, 10 carries
    assert [n.attrs["length"] for n in loops(forward.attrs["body"])] == [100]
    inner = loops(backward.attrs["body"])
    assert sorted((n.attrs["length"], n.attrs["reverse"]) for n in inner) == [(100, False), (100, True)]
    sizes = {onnx_nodes(gc.compile(fn(steps, 10), *f32(*ARGS[1:])).model.graph) for steps in (50, 500)}
    assert len(sizes) == 1
    # two levels: blocks of 100 steps, each a checkpointing scan over blocks of 10, each a scan of 10 steps
    graph = trace(fn(1000, (100, 10)), ARGS[1:]).graph
    optimize(graph, 2)
    (forward,) = [n for n in loops(graph) if n.order == 0]
    (middle,) = loops(forward.attrs["body"])
    assert [forward.attrs["length"], middle.attrs["length"]] == [10, 10]
    assert [n.attrs["length"] for n in loops(middle.attrs["body"])] == [10]
    assert forward.outputs[1].shape == (10, N, H)


# -- pruning and passes -----------------------------------------------------------------------------------
def _backward_loop(fn, args, level=1):
    graph = trace(fn, args).graph
    optimize(graph, level)
    (back,) = [n for n in loops(graph) if n.order == 1]
    return back, graph


def test_gradient_of_one_input_adds_no_work_for_the_others():
    def wrt(names):
        def fn(xs, w, h0):
            h, ys = rnn_scan(xs, w, h0)
            args = {"xs": xs, "w": w, "h0": h0}
            return gc.grad(F.sum(h) + F.sum(ys), [args[n] for n in names])
        return fn
    back_h0, _ = _backward_loop(wrt(["h0"]), ARGS)
    back_all, _ = _backward_loop(wrt(["xs", "w", "h0"]), ARGS)
    # only the carry's cotangent: no accumulator for w, no stacked cotangent for xs
    assert (back_h0.attrs["n_carry"], len(back_h0.outputs)) == (1, 1)
    assert (back_all.attrs["n_carry"], len(back_all.outputs)) == (2, 3)
    assert len(back_h0.attrs["body"]) < len(back_all.attrs["body"])
    # level 2 also moves the accumulation of w's gradient (Σ h_tᵀ·g_t) out of the loop: one Gemm after it
    back, graph = _backward_loop(wrt(["xs", "w", "h0"]), ARGS, level=2)
    assert (back.attrs["n_carry"], len(back.outputs)) == (1, 3)
    stacked = {n.id for n in graph.nodes.values() if n.op == "reshape" and n.inputs[0].node == back.id}
    assert len([n for n in graph.nodes.values() if n.op == "gemm" and {r.node for r in n.inputs} & stacked]) == 1
    for got, want in zip(evaluate(graph, ARGS), evaluate(trace(wrt(["xs", "w", "h0"]), ARGS).graph, ARGS)):
        np.testing.assert_allclose(got, want)


def test_unused_outputs_are_pruned_and_passthrough_carries_become_consts():
    def fn(xs, w, h0):
        (h, w_same, counter), ys = gc.scan(lambda c, x: ((F.tanh(c[0] @ c[1] + x), c[1], c[2] + 1), c[0] * 2),
                                           (h0, w, np.float64(0)), xs)
        return h + w_same.sum()
    graph = trace(fn, ARGS).graph
    optimize(graph)
    (node,) = loops(graph)
    assert (node.attrs["n_consts"], node.attrs["n_carry"], len(node.outputs)) == (1, 1, 1)
    np.testing.assert_allclose(evaluate(graph, ARGS)[0], np_rnn(*ARGS)[0] + ARGS[1].sum())


def test_equal_loops_merge():
    def fn(xs, w, h0):
        return rnn_scan(xs, w, h0)[0] + rnn_scan(xs, w, h0)[0]
    graph = trace(fn, ARGS).graph
    assert len(loops(graph)) == 2
    optimize(graph, 1)
    assert len(loops(graph)) == 1


def test_builds_are_deterministic():
    def fn(xs, w, h0):
        h, ys = rnn_scan(xs, w, h0, checkpoint=True)
        return gc.hvp(lambda w: F.sum(rnn_scan(xs, w, h0)[0] ** 2), w, F.ones_like(w)), ys
    models = [gc.compile(fn, *f32(*ARGS)).model.SerializeToString() for _ in range(2)]
    assert models[0] == models[1]


# -- fori_loop and while_loop ---------------------------------------------------------------------------------
def test_fori_loop_matches_python_and_differentiates():
    def fn(w, h0):
        return gc.fori_loop(1, 5, lambda i, h: F.tanh(h @ w) * F.cast(i, h.dtype), h0)

    def np_fn(w, h0):
        for i in range(1, 5):
            h0 = np.tanh(h0 @ w) * i
        return h0
    check_forward(fn, f32(*ARGS[1:]), [np_fn(*ARGS[1:]).astype(np.float32)], rtol=1e-5, atol=1e-5)
    check_grads(fn, ARGS[1:], order=3)
    w, h0 = ARGS[1:]
    check_grads(fn, [w, np.stack([h0, -h0])], symbolic=[w, gc.spec(("n", *h0.shape))])   # a batch of carries
    check_forward(lambda h0: gc.fori_loop(3, 3, lambda i, h: h * 2, h0), [ARGS[2]], [ARGS[2]])


def test_while_loop_runs_until_its_condition_fails():
    w = f32(ARGS[1])[0]

    def fn(h0, limit):
        return gc.while_loop(lambda v: v[1] < limit, lambda v: (F.tanh(v[0] @ w) + 1, v[1] + 1), (h0, np.int64(0)))
    h0 = f32(ARGS[2])[0]
    expected = h0.astype(np.float64)
    for _ in range(7):
        expected = np.tanh(expected @ w) + 1
    cf = gc.compile(fn, h0, np.int64(7))
    assert "Loop" in {n.op_type for n in cf.model.graph.node}
    h, k = cf(h0, np.int64(7))
    np.testing.assert_allclose(h, expected, rtol=1e-5)
    assert k == 7
    assert cf(h0, np.int64(0))[1] == 0
    np.testing.assert_allclose(evaluate(cf.graph, [h0, np.int64(7)])[0], expected, rtol=1e-5)


# -- errors -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, error, match", [
    (lambda h, x: (F.cast(h, "float32"), h), TraceError, "carry of type float32"),
    (lambda h, x: ((h, h), h), TraceError, "another structure"),
    (lambda h, x: h, TraceError, "must return a pair"),
])
def test_step_function_errors_name_the_problem(bad, error, match):
    with pytest.raises(error, match=match):
        trace(lambda xs, h0: gc.scan(bad, h0, xs), [ARGS[0], ARGS[2]])


def test_length_errors():
    with pytest.raises(GcompileError, match="give the number of steps as length="):
        trace(lambda h0: gc.scan(lambda c, x: (c, c), h0), [ARGS[2]])
    with pytest.raises(ShapeError, match="length=3 but xs has 4 steps"):
        trace(lambda xs, h0: gc.scan(lambda c, x: (c, c), h0, xs, length=3), [ARGS[0], ARGS[2]])
    with pytest.raises(ShapeError, match="different leading dims"):
        trace(lambda xs, h0: gc.scan(lambda c, x: (c, c), h0, (xs, xs[:2])), [ARGS[0], ARGS[2]])
    with pytest.raises(GcompileError, match="needs a static number of steps"):
        gc.compile(lambda xs, h0: gc.scan(lambda c, x: (c + x, c), h0, xs, unroll=2), gc.spec(("T", 3)),
                   gc.spec((3,)))
    for bad in (0, -2, True, 2.5, "3", (), (4, 4), (2, 4), (3, 0)):
        with pytest.raises(GcompileError, match=rf"checkpoint_every must be a positive int, .*got "
                                                rf"{re.escape(repr(bad))} \(at .*test_control.py:\d+"):
            trace(lambda xs, h0, bad=bad: gc.scan(lambda c, x: (c + x, c), h0, xs, checkpoint_every=bad),
                  [ARGS[0], ARGS[2]])
    with pytest.raises(GcompileError, match=r"checkpoint_every=2 needs a static number of steps, not 'T' "
                                            r"\(at .*test_control.py:\d+"):
        gc.compile(lambda xs, h0: gc.scan(lambda c, x: (c + x, c), h0, xs, checkpoint_every=2), gc.spec(("T", 3)),
                   gc.spec((3,)))
    with pytest.raises(GcompileError, match="bounds must be Python ints"):
        trace(lambda h0: gc.fori_loop(0, F.sum(h0), lambda i, h: h, h0), [ARGS[2]])


def test_a_symbolic_length_survives_pruning_of_every_xs_read():
    def fn(xs, h0):
        return gc.scan(lambda h, x: (h * 0.5, None), h0, xs)[0]   # x unused: the steps still count
    cf = gc.compile(fn, gc.spec(("T", N, H)), gc.spec((N, H)))
    for steps in (3, 0):
        xs, h0 = f32(rand(steps, N, H), ARGS[2])
        np.testing.assert_allclose(cf(xs, h0), h0 * 0.5 ** steps, rtol=1e-6)
        np.testing.assert_allclose(evaluate(cf.graph, [xs, h0])[0], h0 * 0.5 ** steps, rtol=1e-6)
