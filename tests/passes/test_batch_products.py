"""passes/gemm.batch_products: a sum of products over a shared-size axis becomes one product of
concatenations, a sum of reductions one reduction; values unchanged (NaN and Inf included),
idempotent, and left alone where it must not fire."""
import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.passes import batch_products, eliminate_dead_code, fuse_gemm, optimize

RNG = np.random.default_rng(0)


def ops(graph):
    return sorted(n.op for n in graph.nodes.values())


def run(fn, arrays):
    graph = trace(fn, arrays).graph
    fuse_gemm(graph)
    before = evaluate(graph, arrays)
    changed = batch_products(graph).changed
    eliminate_dead_code(graph)       # (the replaced terms are left to it, as in the pipeline)
    graph.lint()
    after = evaluate(graph, arrays)
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    assert not batch_products(graph).changed, "a second run must find nothing to do"
    return graph, changed


def test_a_sum_of_products_becomes_one_product_of_concatenations():
    a = [RNG.standard_normal((k, 3)) for k in (2, 4, 1)]
    b = [RNG.standard_normal((k, 5)) for k in (2, 4, 1)]
    a[1][0, 0] = np.nan
    b[2][0, 1] = np.inf

    def fn(a0, a1, a2, b0, b1, b2, c):
        return F.add_n([F.transpose(a0) @ b0, F.transpose(a1) @ b1, c, F.transpose(a2) @ b2])
    graph, changed = run(fn, [*a, *b, RNG.standard_normal((3, 5))])
    assert changed and ops(graph).count("gemm") == 1 and ops(graph).count("concat") == 2


def test_a_sum_of_reductions_becomes_one_reduction():
    xs = [RNG.standard_normal((k, 6)) for k in (3, 2, 5)]

    def fn(x0, x1, x2):
        return F.add_n([F.reshape(F.sum(x, 0, keepdims=True), (6,)) for x in (x0, x1, x2)])
    graph, changed = run(fn, xs)
    assert changed and ops(graph).count("reduce_sum") == 1


def test_left_alone_when_a_term_is_read_elsewhere_an_operand_repeats_or_a_size_is_symbolic():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 5))

    def shared(a, b, c, d):
        p = F.transpose(a) @ b
        return F.add_n([p, F.transpose(c) @ d]), p * 2.0
    assert not run(shared, [a, b, a + 1, b + 1])[1]

    def repeated(a, b, d):     # the same left operand twice: a sum of right operands would be cheaper
        return F.add_n([F.transpose(a) @ b, F.transpose(a) @ d])
    assert not run(repeated, [a, b, b + 1])[1]

    def symbolic(a, b, c, d):
        return F.add_n([F.transpose(a) @ b, F.transpose(c) @ d])
    specs = [gc.spec(("n", 3), np.float64), gc.spec(("n", 5), np.float64)] * 2
    graph = trace(symbolic, specs).graph
    fuse_gemm(graph)
    assert not batch_products(graph).changed


def test_a_recurrent_weight_gradient_is_one_product():
    """An RNN's hidden-to-hidden weight gets its gradient as one product over all steps."""
    steps, batch, hidden = 6, 3, 4
    xs = RNG.standard_normal((steps, batch, hidden))
    w = RNG.standard_normal((hidden, hidden)) * 0.3

    def loss(xs, w):
        h = xs[0]
        for t in range(1, steps):
            h = F.tanh(h @ w + xs[t])
        return gc.grad(F.sum(h * h), [w])[0]
    graph = trace(loss, [xs, w]).graph
    before = evaluate(graph, [xs, w])[0]
    optimize(graph, 2)
    graph.lint()
    products = [n for n in graph.nodes.values() if n.op in ("gemm", "matmul") and n.order == 1
                and n.outputs[0].shape == (hidden, hidden)]
    assert len(products) == 1
    np.testing.assert_allclose(evaluate(graph, [xs, w])[0], before, rtol=1e-10)
