"""Each pass keeps semantics on random inputs, reaches a fixed point (idempotent), and
leaves a valid graph (every operand produced by a node still in the graph)."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ir.registry import constant_equal_to
from gcompile.passes import base as passes_base
from gcompile.passes import eliminate_common_subexpressions, eliminate_dead_code, fold_constants, optimize, simplify

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4))
W = RNG.standard_normal((4, 4))


def _graph(fn, *arrays):
    return trace(fn, list(arrays)).graph


def _assert_valid(graph):
    graph.lint()
    for node in graph.nodes.values():
        for ref in node.inputs:
            assert ref.node in graph.nodes, f"{node.name} reads a removed node"
    for ref in graph.outputs:
        assert ref.node in graph.nodes


def _check(pass_fn, fn, arrays, expect_change=True):
    graph = _graph(fn, *arrays)
    before = evaluate(graph, arrays)
    n_before = len(graph)
    result = pass_fn(graph)
    assert result.changed == expect_change
    _assert_valid(graph)
    for a, b in zip(before, evaluate(graph, arrays)):
        np.testing.assert_array_equal(a, b)
    again = pass_fn(graph)
    assert not again.changed, "a second run must find nothing to do"
    return n_before, len(graph)


def _ops(graph):
    return sorted(n.op for n in graph.nodes.values())


def _reads_a_later_node(graph):
    """A broken pass: the first exp reads the graph's last node."""
    node = next(n for n in graph.topo_order() if n.op == "exp")
    graph.replace_inputs(node, [graph.outputs[0]])
    return passes_base.PassResult(graph, True)


def test_linting_after_every_pass_names_the_pass_that_broke_the_graph(monkeypatch):
    assert passes_base.LINT, "tests/conftest.py switches linting on"
    with pytest.raises(AssertionError, match="after the pass _reads_a_later_node: exp_0 reads"):
        passes_base.run_to_fixed_point(_graph(lambda x: F.exp(x) * 2, X), [_reads_a_later_node])
    monkeypatch.setattr(passes_base, "LINT", False)   # compiles skip the check
    passes_base.run_to_fixed_point(_graph(lambda x: F.exp(x) * 2, X), [_reads_a_later_node], max_rounds=1)


def test_dce_removes_unused_nodes():
    def fn(x):
        F.exp(x)            # dead
        return F.sin(x)
    before, after = _check(eliminate_dead_code, fn, [X])
    assert after == before - 1


def test_cse_merges_repeated_subexpressions():
    def fn(x, w):
        return F.tanh(x @ w) + F.tanh(x @ w)
    graph = _graph(fn, X, W)
    assert _ops(graph).count("matmul") == 2
    _check(eliminate_common_subexpressions, fn, [X, W])
    eliminate_common_subexpressions(graph)
    eliminate_dead_code(graph)
    assert _ops(graph).count("matmul") == 1 and _ops(graph).count("tanh") == 1


def test_cse_never_merges_random_ops():
    def fn(x):
        return F.dropout(x, 0.5, training=True, seed=1) + F.dropout(x, 0.5, training=True, seed=1)
    graph = _graph(fn, X)
    eliminate_common_subexpressions(graph)
    assert _ops(graph).count("dropout") == 2


def test_fold_computes_constant_subgraphs():
    c = np.arange(4.0)

    def fn(x):
        return x * F.exp(F.constant(c) * 2)
    graph = _graph(fn, X)
    _check(fold_constants, fn, [X])
    fold_constants(graph)
    eliminate_dead_code(graph)
    assert "exp" not in _ops(graph)


def test_fold_computes_what_reads_only_empty_values():
    """A value of static shape with no elements carries no data: what is computed from it alone (a
    sum over an empty axis, a product contracting one) is a constant, max and min of nothing are
    ONNX's -inf and +inf, and any/all of nothing False/True, as ONNX Runtime computes them."""
    def fn(x, e):
        return (x + F.sum(e, 0), F.max(e, 0), F.min(e, 0), F.any(e, 0), F.all(e, 0), F.transpose(e) @ e)
    empty = np.zeros((0, 4))
    graph = _graph(fn, X[:, :4], empty)
    before = evaluate(graph, [X[:, :4], empty])
    fold_constants(graph)
    eliminate_dead_code(graph)
    assert set(_ops(graph)) == {"input", "constant", "add"}
    for got, want, expected in zip(evaluate(graph, [X[:, :4], empty]), before,
                                   [None, np.full(4, -np.inf), np.full(4, np.inf), np.zeros(4, bool), np.ones(4, bool),
                                    np.zeros((4, 4))]):
        np.testing.assert_array_equal(got, want)
        if expected is not None:
            np.testing.assert_array_equal(got, expected)


def test_fold_is_bounded():
    def fn(x):
        return x + F.sum(F.full((100, 100), 1.0, "float64"))
    graph = _graph(fn, X)
    fold_constants(graph)
    assert "fill" in _ops(graph), "a 10k-element fill is left to the runtime"


def test_fold_stores_no_weight_twice():
    """The gradient of x @ W reads W and Wᵀ: Wᵀ is not folded into a second copy while W stays;
    the Gemm pass reads W through transB instead. A copy of a constant nothing else reads, or a
    tiny one, is still folded."""
    w = RNG.standard_normal((64, 32)).astype(np.float32)
    x = RNG.standard_normal((5, 64)).astype(np.float32)

    def fn(x):
        return gc.grad(F.sum(F.tanh(x @ w)), [x])[0]
    graph = _graph(fn, x)
    before = evaluate(graph, [x])
    optimize(graph)
    _assert_valid(graph)
    constants = [n.attrs["value"] for n in graph.nodes.values() if n.op == "constant" and n.attrs["value"].size > 64]
    assert len(constants) == 1 and constants[0].shape == w.shape, [c.shape for c in constants]
    assert "transpose" not in _ops(graph)
    np.testing.assert_allclose(evaluate(graph, [x])[0], before[0], rtol=1e-6)
    model = gc.compile(fn, x, provider="cpu")
    assert sum(t.ByteSize() for t in model.model.graph.initializer) < 1.2 * w.nbytes
    np.testing.assert_allclose(model(x), before[0], rtol=1e-4, atol=1e-5)

    only_copy = _graph(lambda x: x @ F.transpose(F.constant(w), (1, 0)).T, x)   # the original has no other reader
    fold_constants(only_copy)
    eliminate_dead_code(only_copy)
    assert "transpose" not in _ops(only_copy)
    small = RNG.standard_normal((4, 4))
    tiny = _graph(lambda x: x @ small + x @ small.T, X)                    # 16 elements: folding is cheaper
    fold_constants(tiny)
    assert "transpose" not in _ops(tiny)


@pytest.mark.parametrize("fn, gone", [
    (lambda x: (x + 0) * 1 - 0, {"add", "mul", "sub"}),
    (lambda x: x / 1.0, {"div"}),
    (lambda x: -(-x), {"neg"}),  # noqa: B002  (a double negation is what simplify removes)
    (lambda x: F.transpose(F.transpose(x, (1, 0)), (1, 0)), {"transpose"}),
    (lambda x: F.reshape(F.reshape(x, (12,)), (2, 6)), set()),
    (lambda x: F.identity(F.stop_gradient(x)), {"identity", "stop_gradient"}),
    (lambda x: x ** 1 + x ** 2, {"pow"}),
])
def test_simplify_identities(fn, gone):
    graph = _graph(fn, X)
    before = evaluate(graph, [X])
    optimize(graph, 2)
    _assert_valid(graph)
    np.testing.assert_array_equal(before[0], evaluate(graph, [X])[0])
    assert not gone & set(_ops(graph))


def test_reshape_chain_becomes_one_reshape():
    graph = _graph(lambda x: F.reshape(F.reshape(x, (12,)), (2, 6)), X)
    optimize(graph, 2)
    assert _ops(graph).count("reshape") == 1


def test_the_gradient_of_a_split_becomes_a_concat_of_the_pieces():
    # q, k, v = x[:, :1], x[:, 1:3], x[:, 3:]: the backward sums three zero-padded pieces.
    def fn(x):
        q, k, v = x[:, :1], x[:, 1:3], x[:, 3:]
        return gc.grad(F.sum(F.sin(q) * 2) + F.sum(F.exp(k)) + F.sum(v * v), [x])[0]
    _check(simplify, fn, [X])   # semantics kept, a change made, idempotent
    graph = _graph(fn, X)
    optimize(graph, 2)
    assert "concat" in _ops(graph) and "slice_scatter" not in _ops(graph)


def test_a_slice_written_back_leaves_the_gradient_whole():
    # x[:, 1:] += c: x's gradient is the output's, cut at the slice and joined again (_rejoined)
    def fn(x):
        return gc.grad(F.sum(F.sin(F.slice_scatter(x, x[:, 1:] + 2.0, 1, 1))), [x])[0]
    _check(simplify, fn, [X])
    graph = _graph(fn, X)
    optimize(graph, 2)
    assert not {"slice_scatter", "add_n"} & set(_ops(graph)) and _ops(graph).count("concat") == 1   # the forward's


def test_a_class_token_cut_through_a_transpose_is_joined_back():
    # the token's gradient is placed before the transpose back, the rest's after it: the transpose
    # moves to the piece (_transposes_before_scatters), both places meet in one concat, and that
    # concat of the output gradient's two pieces is the gradient itself
    x = RNG.standard_normal((2, 5, 3))

    def fn(x):
        token = F.swapaxes(F.swapaxes(x, 0, 1)[:1], 0, 1)
        return gc.grad(F.sum(F.sin(F.concat([token, x[:, 1:] * 1.0], axis=1))), [x])[0]
    graph = _graph(fn, x)
    before = evaluate(graph, [x])
    optimize(graph, 2)
    _assert_valid(graph)
    np.testing.assert_array_equal(before[0], evaluate(graph, [x])[0])
    assert not {"slice_scatter", "add_n"} & set(_ops(graph)) and _ops(graph).count("concat") == 1   # the forward's


def test_a_slice_of_a_slice_places_its_gradient_with_one_pad():
    # x[1:][:, :2]: two one-axis scatters become one of both axes (_merge_scatters), one Pad
    def fn(x):
        return gc.grad(F.sum(F.sin(x[1:][:, :2])), [x])[0]
    _check(simplify, fn, [X])
    graph = _graph(fn, X)
    optimize(graph, 2)
    assert [n.attrs["axes"] for n in graph.nodes.values() if n.op == "slice_scatter"] == [(0, 1)]
    model = gc.compile(fn, X).model
    assert [n.op_type for n in model.graph.node].count("Pad") == 1


def test_transposed_pieces_of_one_cut_join_as_the_transposed_tensor():
    # concat(transpose(x[:1]), transpose(x[1:])) is transpose(x): the transposes move after the join
    # (_transposes_joined) and the join of x's own pieces is x
    graph = _graph(lambda x: F.concat([F.transpose(x[:1]), F.transpose(x[1:])], axis=1), X)
    before = evaluate(graph, [X])
    optimize(graph, 2)
    _assert_valid(graph)
    np.testing.assert_array_equal(before[0], evaluate(graph, [X])[0])
    assert _ops(graph) == ["input", "transpose"]


def test_pieces_read_elsewhere_stay_apart():
    # a transpose or a scatter that another op reads too is left where it is
    def fn(x):
        a, b = F.transpose(x[:1]), F.transpose(x[1:])
        return F.concat([a, b], axis=1) + F.sum(a)
    graph = _graph(fn, X)
    before = evaluate(graph, [X])
    optimize(graph, 2)
    np.testing.assert_array_equal(before[0], evaluate(graph, [X])[0])
    assert "concat" in _ops(graph)


@pytest.mark.parametrize("pieces", [
    lambda x: (x[:, :1], x[:, 2:]),             # a gap: the zeros between stay
    lambda x: (x[:, :3], x[:, 1:]),             # overlapping pieces add
    lambda x: (x[:1, :2], x[1:, 2:]),           # different axes
    lambda x: (x[:, ::3], x[:, 1::3]),          # strided pieces that miss a phase
    lambda x: (x[:, ::2], x[:, 2::2]),          # a phase twice, overlapping
])
def test_sums_of_pieces_that_do_not_tile_one_axis_stay_sums(pieces):
    def fn(x):
        return gc.grad(F.add_n([F.sum(F.sin(p)) for p in pieces(x)]), [x])[0]
    graph = _graph(fn, X)
    before = evaluate(graph, [X])
    optimize(graph, 2)
    _assert_valid(graph)
    assert "concat" not in _ops(graph)
    np.testing.assert_array_equal(before[0], evaluate(graph, [X])[0])


@pytest.mark.parametrize("shape, axis, step", [((3, 4), 1, 2), ((6, 2, 5), 0, 3), ((2, 3, 8), 2, 4)])
def test_the_gradient_of_every_strided_phase_becomes_their_interleaving(shape, axis, step):
    """x[..., 0::2] and x[..., 1::2] (rotary embeddings): the backward's spread-out pieces and their sum
    become one concat along a new axis, reshaped; values are unchanged."""
    x = RNG.standard_normal(shape)

    def fn(x):
        phases = [x[(slice(None),) * axis + (slice(start, None, step),)] for start in range(step)]
        return gc.grad(F.add_n([F.sum(F.sin(p) * (i + 2)) for i, p in enumerate(phases)]), [x])[0]
    _check(simplify, fn, [x])
    graph = _graph(fn, x)
    optimize(graph, 2)
    assert "concat" in _ops(graph) and "slice_scatter" not in _ops(graph)
    np.testing.assert_allclose(gc.compile(fn, x, provider="cpu")(x), evaluate(_graph(fn, x), [x])[0], rtol=1e-12)


@pytest.mark.parametrize("pieces", [
    lambda x: (x[:, ::2], x[:, ::2], x[:, 1::2]),                       # one phase taken twice
    lambda x: (x[:, 1::2], x[:, ::2], x[:, 1::2], x[:, 1::2]),         # out of order, one thrice
    # Swin's patch merging: x[:, a::2, b::2] for the four (a, b), each written as two one-axis slices (as
    # PyTorch's dynamo exporter does), so the outer scatters place each phase of axis 1 twice
    lambda x: tuple(x[:, a::2][:, :, b::2] for a, b in ((0, 0), (1, 0), (0, 1), (1, 1))),
])
def test_a_phase_placed_by_several_pieces_keeps_every_piece(pieces):
    """Each piece of a repeated phase counts: they are summed before the interleaving (the phases were
    once kept by start, one piece each, and the rest of the gradient silently dropped)."""
    x = RNG.standard_normal((2, 6, 4, 3))

    def fn(x):
        return gc.grad(F.add_n([F.sum(F.sin(p) * (i + 2)) for i, p in enumerate(pieces(x))]), [x])[0]
    expected = np.zeros_like(x)
    for i, index in enumerate(pieces(np.arange(x.size).reshape(x.shape))):
        np.add.at(expected.reshape(-1), index.reshape(-1), (np.cos(x.reshape(-1)[index]) * (i + 2)).reshape(-1))
    _check(simplify, fn, [x])
    graph = _graph(fn, x)
    optimize(graph, 2)
    assert "concat" in _ops(graph) and "slice_scatter" not in _ops(graph)
    np.testing.assert_allclose(evaluate(graph, [x])[0], expected, rtol=1e-12)
    np.testing.assert_allclose(gc.compile(fn, x, provider="cpu")(x), expected, rtol=1e-12)


def test_an_expand_feeding_an_op_that_broadcasts_anyway_is_dropped():
    b = RNG.standard_normal((1, 4))
    _check(simplify, lambda x: F.add_n([x, x * 2, F.broadcast_to(F.exp(b), (3, 4))]) * F.broadcast_to(b, (3, 4)),
           [X])   # semantics kept, a change made, idempotent
    graph = _graph(lambda x: x * F.broadcast_to(F.exp(x[:1]), (3, 4)), X)
    optimize(graph, 2)
    assert "expand" not in _ops(graph)


def _optimized_keeps_values(fn, rtol=0.0):
    graph = _graph(fn, X)
    before = evaluate(graph, [X])
    optimize(graph, 2)
    _assert_valid(graph)
    np.testing.assert_allclose(evaluate(graph, [X])[0], before[0], rtol=rtol, atol=0)
    return graph


def _shape_of(graph, op):
    return [n.outputs[0].shape for n in graph.nodes.values() if n.op == op]


def test_an_elementwise_op_of_an_expand_runs_unexpanded():
    # exp(broadcast(row)) is broadcast(exp(row)): the exp runs on the row, the add broadcasts it
    graph = _optimized_keeps_values(lambda x: F.broadcast_to(x[:1], (3, 4)) * F.broadcast_to(x[:, :1], (3, 4))
                                    + F.exp(F.broadcast_to(x[:1], (3, 4))))
    assert "expand" not in _ops(graph) and _shape_of(graph, "exp") == [(1, 4)]


def test_an_expand_that_sets_the_output_shape_stays_after_the_ops_it_feeds():
    # the output needs the expanded shape: exp and the doubling run on the row, one expand after them
    graph = _optimized_keeps_values(lambda x: F.exp(F.broadcast_to(x[:1], (3, 4))) * 2.0)
    assert _ops(graph).count("expand") == 1 and _shape_of(graph, "exp") == [(1, 4)]
    assert _shape_of(graph, "expand") == [(3, 4)]


def _product_shapes(graph):
    return [n.outputs[0].shape for n in graph.nodes.values() if n.op in ("matmul", "gemm")]


def test_a_product_of_an_expand_runs_on_the_rows_unexpanded():
    # each row of a product reads its own row of the left operand: broadcast(row) @ w is
    # broadcast(row @ w), which the multiply broadcasts; exp read the expand too, and then alone
    def fn(x):
        rows = F.broadcast_to(x[:1], (3, 4))
        return (rows @ W) * x + F.exp(rows)
    graph = _optimized_keeps_values(fn, 1e-15)      # (a BLAS may round a product of one row differently)
    assert _product_shapes(graph) == [(1, 4)] and _shape_of(graph, "exp") == [(1, 4)]
    assert "expand" not in _ops(graph)
    # each column reads its own column of the right operand (numpy's product of one column rounds
    # differently from its product of four)
    graph = _optimized_keeps_values(lambda x: (x @ F.broadcast_to(F.reshape(x[0], (4, 1)), (4, 4))) * x, 1e-15)
    assert (3, 1) in _product_shapes(graph) and (3, 4) not in _product_shapes(graph)
    # an expand of a contracted axis stays a product of the expanded operand
    graph = _optimized_keeps_values(lambda x: F.broadcast_to(x[:, :1], (3, 4)) @ W)
    assert _product_shapes(graph) == [(3, 4)]


def test_the_gradient_of_a_summed_product_multiplies_by_one_row():
    """A force field's forces: the seed of sum(tanh(x @ w) @ v) reaches the gradient of x @ w as
    the one row v @ 1, not as a product of ones over every row (rows enough that constant
    folding leaves the seed's expand of ones unmaterialised)."""
    x, v = RNG.standard_normal((5000, 4)), RNG.standard_normal((4, 1))

    def forces(x, w, v):
        return gc.grad(F.sum(F.tanh(x @ w) @ v), [x])[0]
    graph = _graph(forces, x, W, v)
    optimize(graph, 2)
    assert "expand" not in _ops(graph) and (1, 4) in _product_shapes(graph)
    expected = (1 - np.tanh(x @ W) ** 2) * v.T @ W.T
    np.testing.assert_allclose(gc.compile(forces, x, W, v, provider="cpu")(x, W, v), expected, rtol=1e-10, atol=1e-12)


def test_a_shared_or_random_expand_stays_where_it_is():
    def shared(x):
        row = F.broadcast_to(x[:1], (3, 4))
        return F.exp(row) * F.sin(row)
    graph = _optimized_keeps_values(shared)
    assert _shape_of(graph, "exp") == [(3, 4)]             # one expand, two readers: moving it would copy it
    graph = _graph(lambda x: F.dropout(F.broadcast_to(x[:1], (3, 4)), 0.5, training=True, seed=1), X)
    optimize(graph, 2)
    assert _shape_of(graph, "dropout") == [(3, 4)]          # a draw per element, not one per column


def test_simplify_keeps_broadcasting():
    # x (3,4) + zeros (2,3,4) broadcasts: the add must stay.
    z = np.zeros((2, 3, 4))
    _check(simplify, lambda x: x + z, [X], expect_change=False)


def test_simplify_does_not_touch_nan_unsafe_patterns():
    graph = _graph(lambda x: x * 0 + (x - x), X)
    optimize(graph, 2)
    inf = np.full((3, 4), np.inf)
    assert np.isnan(evaluate(graph, [inf])[0]).all()


def test_the_gradient_of_a_square_has_no_power_left():
    """d(x**2) = 2·x**1: x**1 is x and x**2 is x*x (onnxruntime's Pow calls pow() per element),
    with the values of Pow at the edges: -0, ±inf, NaN, huge values that overflow."""
    x = np.array([[0.0, -0.0, 1.5, -2.0], [np.inf, -np.inf, np.nan, 3e200], [1e-200, -7.0, 2.0, 0.5]])
    fn = lambda x: (x ** 2, gc.grad(F.sum(x ** 2 * 3), [x])[0], x ** 1)     # noqa: E731
    graph = _graph(fn, x)
    optimize(graph, 2)
    assert "pow" not in _ops(graph)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = [np.power(x, 2), 6 * np.power(x, 1), x]
    for got, want in zip(evaluate(graph, [x]), expected):
        np.testing.assert_array_equal(got, want)
    onnx_ops = [n.op_type for n in gc.compile(fn, x.astype(np.float32), provider="cpu").model.graph.node]
    assert "Pow" not in onnx_ops


def test_optimize_shrinks_gradient_graphs_and_keeps_values():
    def fn(x, w):
        loss = F.sum(F.tanh(x @ w) ** 2)
        return gc.grad(loss, [w])[0]
    graph = _graph(fn, X, W)
    before_values = evaluate(graph, [X, W])
    before = len(graph)
    optimize(graph, 2)
    _assert_valid(graph)
    assert len(graph) < before
    np.testing.assert_allclose(evaluate(graph, [X, W])[0], before_values[0], rtol=1e-12)


def test_compile_levels_agree():
    def fn(x, w):
        return gc.grad(F.mean(F.sigmoid(x @ w)), [x, w])
    x, w = X.astype(np.float32), W.astype(np.float32)
    results = [gc.compile(fn, x, w, optimize=level)(x, w) for level in (0, 1, 2)]
    for r in results[1:]:
        for a, b in zip(results[0], r):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_gemm_fusion_absorbs_bias_and_transposes():
    b = RNG.standard_normal(4)

    def fn(x, w):
        return F.transpose(x) @ w + b, F.transpose(x) @ F.transpose(w) + 1.0
    graph = _graph(fn, X.T.copy(), W)
    before = evaluate(graph, [X.T.copy(), W])
    optimize(graph, 2)
    _assert_valid(graph)
    assert _ops(graph).count("gemm") == 2 and "matmul" not in _ops(graph) and "transpose" not in _ops(graph)
    for a, e in zip(evaluate(graph, [X.T.copy(), W]), before):
        np.testing.assert_allclose(a, e, rtol=1e-12)


def test_gemm_fusion_keeps_a_shared_product_and_batched_matmuls():
    def fn(x, w):
        y = x @ w
        return y + 1.0, y * 2.0, F.reshape(x, (1, 4, 3)) @ w + 1.0   # y is shared; the last is 3-D
    graph = _graph(fn, X.T.copy(), W[:3])
    optimize(graph, 2)
    gemms = [n for n in graph.nodes.values() if n.op == "gemm"]
    assert len(gemms) == 1 and len(gemms[0].inputs) == 2, "the shared product takes no bias"
    assert _ops(graph).count("matmul") == 1 and _ops(graph).count("add") == 2


def test_gemm_absorbs_a_transposed_result():
    def fn(x, w):
        return F.transpose(x @ w)
    graph = _graph(fn, X, W)
    before = evaluate(graph, [X, W])[0]
    optimize(graph, 2)
    _assert_valid(graph)
    assert _ops(graph).count("gemm") == 1 and "transpose" not in _ops(graph)
    np.testing.assert_allclose(evaluate(graph, [X, W])[0], before, rtol=1e-12)


def test_seed_ones_disappear_from_double_backward():
    v = RNG.standard_normal((4, 4))

    def hvp(x, w):
        g, = gc.grad(F.sum(F.tanh(x @ w)), [w])
        return gc.grad(F.sum(g * v), [w])[0]
    graph = _graph(hvp, X, W)
    optimize(graph, 2)
    assert "expand" not in _ops(graph) and "fill" not in _ops(graph)


def _where_shapes(graph):
    return [n.outputs[0].shape for n in graph.nodes.values() if n.op == "where"]


def test_a_select_of_a_max_pool_gradient_moves_before_the_scatter_keeping_every_value():
    """relu's gradient under a max_pool selects on the pooled gradient after simplify, with the same
    values at zeros, ties inside a window, NaN and infinities (overlapping windows: a maximum that
    two windows share gets both seeds)."""
    x = np.array([[[[0.0, 0.0, -1.0, 2.0], [np.nan, 1.0, 1.0, -np.inf],
                    [np.inf, -2.0, 0.0, 3.0], [0.0, -0.0, 5.0, 5.0]]]])
    r = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)

    def f(x):
        return gc.grad(F.sum(F.max_pool(F.relu(x), 2, stride=1) * r), [x])[0]

    graph = trace(f, [x]).graph
    before = evaluate(graph, [x])[0]
    optimize(graph)
    _assert_valid(graph)
    assert _where_shapes(graph) == [(1, 1, 3, 3)]
    np.testing.assert_array_equal(evaluate(graph, [x])[0], before)
    np.testing.assert_array_equal(gc.compile(f, x)(x), before)


def test_a_select_by_another_tensor_stays_after_the_scatter():
    """The mask of where(z > 0, pool_scatter(...)) says nothing about a pool of x at its maxima."""
    rng = np.random.default_rng(1)
    x, z = rng.standard_normal((2, 1, 1, 4, 4))

    def f(x, z):
        g = gc.grad(F.sum(F.max_pool(x, 2) ** 2), [x])[0]
        return F.where(z > 0, g, 0.0)

    graph = trace(f, [x, z]).graph
    optimize(graph)
    assert _where_shapes(graph) == [(1, 1, 4, 4)]


TIED_IDS = np.array([3, 1, 3, 0, 3])


def _tied(w, h, a, b):
    """A tied embedding's loss: rows of w looked up (index 3 three times) and w as the output
    projection; w's gradient is the lookup's scatter plus the projection's product."""
    return F.sum(F.take(w, TIED_IDS, axis=0) * a) + F.sum(F.matmul(h, F.transpose(w)) * b)


@pytest.mark.parametrize("terms", [2, 3])
def test_a_scatter_into_zeros_in_a_sum_adds_into_the_other_terms(terms):
    """The gradient of a tied embedding: its scatter adds into the product term, not into zeros;
    with a third term, into their sum. Values match numpy's, NaN and infinities in the updates
    included (an update at a repeated index, an infinite product term)."""
    rng = np.random.default_rng(2)
    w, h, a, b = rng.standard_normal((5, 4)), rng.standard_normal((2, 4)), rng.standard_normal((5, 4)), \
        rng.standard_normal((2, 5))
    a[1, 2], a[4, 0], b[0, 1] = np.nan, np.inf, -np.inf

    def fn(w, h, a, b):
        loss = _tied(w, h, a, b) + (F.sum(F.sin(w)) if terms == 3 else 0.0)
        return gc.grad(loss, [w])[0]

    expected = b.T @ h
    np.add.at(expected, TIED_IDS, a)
    if terms == 3:
        expected = expected + np.cos(w)
    graph = _graph(fn, w, h, a, b)
    optimize(graph, 2)
    _assert_valid(graph)
    scatters = [n for n in graph.nodes.values() if n.op == "scatter_add"]
    assert len(scatters) == 1 and not constant_equal_to(graph, scatters[0].inputs[0], 0)
    assert graph.nodes[scatters[0].inputs[0].node].op == "gemm"     # (with three terms, the sine's as its C)
    np.testing.assert_allclose(evaluate(graph, [w, h, a, b])[0], expected, rtol=1e-12)
    f32 = [v.astype(np.float32) for v in (w, h, a, b)]
    np.testing.assert_allclose(gc.compile(fn, *f32)(*f32), expected, rtol=1e-5, atol=1e-5)


def test_a_scatter_into_zeros_read_twice_or_broadcast_in_a_sum_stays():
    """A scatter that something else reads too, or a sum that broadcasts its terms, keeps the
    scatter into zeros."""
    rng = np.random.default_rng(3)
    w, g, v = rng.standard_normal((5, 4)), rng.standard_normal((3, 4)), rng.standard_normal((4,))
    ids = np.array([1, 1, 4])

    def twice(w, g):
        s = F.scatter_add(F.zeros_like(w), ids, g)
        return s + w, s * 2.0

    def broadcast(w, g, v):
        return F.scatter_add(F.zeros_like(w), ids, g) + v

    for fn, args in ((twice, (w, g)), (broadcast, (w, g, v))):
        graph = _graph(fn, *args)
        before = evaluate(graph, list(args))
        optimize(graph, 2)
        scatters = [n for n in graph.nodes.values() if n.op == "scatter_add"]
        assert len(scatters) == 1 and constant_equal_to(graph, scatters[0].inputs[0], 0)
        for x, y in zip(before, evaluate(graph, list(args))):
            np.testing.assert_array_equal(x, y)
