"""gc.vmap over every op family: each registry op batches (or is named, with the reason, among those
never batched); for each family, vmap(f) equals f stacked over the examples (reference evaluator,
and ONNX Runtime where the lowering of the batched op matters), with batched and shared operands
mixed and a symbolic batch size, and vmap(grad(f)) equals the per-example gradients stacked. The
batched graph has as many nodes at another batch size: no per-example copies, no Python loop."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply, apply_n
from gcompile.frontend.trace import trace
from gcompile.gradients import batching
from gcompile.gradients import vmap as _registers_the_rules  # noqa: F401
from gcompile.ir.evaluate import evaluate
from gcompile.ir.registry import REGISTRY, Trait

from ..elementwise_samples import ATTRS, arity, operands
from ..elementwise_samples import shapes as sample_shapes
from .vmap_samples import SAMPLES

RNG = np.random.default_rng(0)
B = 3


def rand(*shape):
    return RNG.standard_normal(shape)


def _leaves(args):
    return [leaf for a in args for leaf in gc.tree_util.leaves(a)]


def _examples(args, in_axes, index):
    """The arguments of example `index` (indices may be an array: a batch of other examples)."""
    return [a if ax is None else gc.tree_util.tree_map(lambda x, ax=ax: np.take(x, index, axis=ax), a)
            for a, ax in zip(args, in_axes)]


def _symbolic(args, in_axes):
    """Specs with the batch dim named "n"."""
    def spec(x, ax):
        shape = list(np.shape(x))
        shape[ax] = "n"
        return gc.spec(tuple(shape), np.asarray(x).dtype)
    return [a if ax is None else gc.tree_util.tree_map(lambda x, ax=ax: spec(x, ax), a) for a, ax in zip(args, in_axes)]


def check_vmap(fn, args, in_axes, *, ort=False, symbolic=True, rtol=1e-9, atol=1e-11):
    """vmap(fn, in_axes)(*args) against fn on each example, stacked on axis 0."""
    size = next(np.shape(gc.tree_util.leaves(a)[0])[ax] for a, ax in zip(args, in_axes) if ax is not None)
    batched = gc.vmap(fn, in_axes=in_axes)
    graph = trace(batched, args).graph
    got = evaluate(graph, _leaves(args))
    one = trace(fn, _examples(args, in_axes, 0)).graph
    per_example = [evaluate(one, _leaves(_examples(args, in_axes, i))) for i in range(size)]
    expected = [np.stack([e[k] for e in per_example]) for k in range(len(got))]
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, (k, g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {k}")
    more = _examples(args, in_axes, np.arange(2 * size + 1) % size)    # another batch size: the same graph size
    assert len(trace(batched, more).graph.nodes) == len(graph.nodes)
    if symbolic:
        sym = trace(batched, _symbolic(args, in_axes)).graph
        for k, g in enumerate(evaluate(sym, _leaves(args))):
            np.testing.assert_allclose(g, expected[k], rtol=rtol, atol=atol, err_msg=f"symbolic batch, output {k}")
    if ort:
        cf = gc.compile(batched, *(_symbolic(args, in_axes) if symbolic else args), provider="cpu")
        for k, g in enumerate(cf.run_flat(*_leaves(args))):
            np.testing.assert_allclose(g, expected[k], rtol=max(rtol, 1e-7), atol=max(atol, 1e-9),
                                       err_msg=f"onnxruntime, output {k}")
    return expected


# -- coverage: every op of the registry ---------------------------------------------------------------------------
def _check_elementwise(op):
    """Batched operands of lower per-example rank than a shared one, and the other way round."""
    attrs, n = ATTRS.get(op, {}), arity(op)
    shapes = sample_shapes(n)

    def fn(*xs):
        return apply_n(op, list(xs), **attrs)

    for mask in {(True,) * n, (True,) + (False,) * (n - 1), (False,) + (True,) * (n - 1)}:
        if not any(mask):
            continue
        arrays = operands(op, [(B, *s) if m else s for s, m in zip(shapes, mask)], RNG)
        with np.errstate(all="ignore"):
            check_vmap(fn, arrays, [0 if m else None for m in mask], symbolic=mask[0], rtol=1e-12, atol=0)


def _check_sample(op):
    """The op's sample with its batched arguments as given (also on ONNX Runtime), then with each one
    alone batched and the others shared."""
    sample = SAMPLES.get(op)
    if sample is None:
        pytest.fail(f"{op}: give it a sample call in tests/gradients/vmap_samples.py")
    dtype, (rtol, atol) = (np.float32, (1e-4, 1e-5)) if sample.float32 else (np.float64, (1e-8, 1e-10))
    all_args = [gc.tree_util.tree_map(lambda x: x.astype(dtype) if x.dtype.kind == "f" else x, a) for a in sample.args]
    first = _examples(all_args, sample.in_axes, 0)
    assert op in {n.op for n in trace(sample.fn, first).graph.nodes.values()}, f"the sample of {op} never records it"
    check_vmap(sample.fn, all_args, sample.in_axes, ort=True, symbolic=sample.symbolic, rtol=rtol, atol=atol)
    batched = [i for i, ax in enumerate(sample.in_axes) if ax is not None]
    for alone in batched if len(batched) > 1 else ():
        args = [a if i == alone else f for i, (a, f) in enumerate(zip(all_args, first))]
        axes = [ax if i == alone else None for i, ax in enumerate(sample.in_axes)]
        check_vmap(sample.fn, args, axes, symbolic=sample.symbolic, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", sorted(REGISTRY))
def test_every_registry_op_batches_or_is_refused_with_a_reason(op):
    """vmap of the op equals the op on each example, stacked; or the op is never batched, with the reason.
    A new op fails here, named, until it declares Trait.ELEMENTWISE (and has operands in
    tests/elementwise_samples.py) or gets a rule (gradients/batching_rules.py, batching_loops.py) and a
    sample (tests/gradients/vmap_samples.py), or joins batching.NOT_BATCHED with its reason."""
    if op in batching.NOT_BATCHED:
        assert batching.NOT_BATCHED[op].strip()
        with pytest.raises(gc.UnsupportedError, match=f"op '{op}' is never batched: "):
            batching.rule_for(op)
    elif Trait.ELEMENTWISE in REGISTRY[op].traits:
        _check_elementwise(op)
    else:
        assert op in batching.RULES, f"{op}: no batching rule"
        _check_sample(op)


def test_the_ops_never_batched_have_no_operands():
    """What NOT_BATCHED says: these ops read nothing, so no node of theirs reads a batched value."""
    graph = trace(lambda x: x + F.full((2,), 1.0, np.float64) + np.ones(2) + F.arange(2, dtype=np.float64),
                  [rand(2)]).graph
    ops = {n.op: n for n in graph.nodes.values()}
    assert set(batching.NOT_BATCHED) == {"input", "constant", "fill", "arange"} <= set(ops)
    assert all(not ops[name].inputs for name in batching.NOT_BATCHED)


def test_what_needs_static_sizes_is_refused_by_name():
    """Per-example convolution weights fold the batch into the group count, an ONNX attribute; batched
    indices into a batched operand are offset by example, which needs the indexed axis' size."""
    x, w = rand(B, 1, 2, 4, 4), rand(B, 3, 2, 3, 3)
    with pytest.raises(gc.UnsupportedError, match="vmap: conv with per-example weights needs a static batch size"):
        trace(gc.vmap(F.conv), _symbolic([x, w], [0, 0]))
    table, idx = gc.spec((B, "m", 2), np.float64), gc.spec((B, 4), np.int64)
    with pytest.raises(gc.UnsupportedError, match="batched indices into an axis of symbolic size 'm'"):
        trace(gc.vmap(lambda t, i: F.take(t, i, axis=0)), [table, idx])


def test_per_example_gradients_through_the_new_elementwise_ops():
    def loss(w, x):
        y = F.sinh(x * w) + F.arcsinh(x) + F.cosh(x) * F.erfc(x) + F.lgamma(2 + x * x) + F.clip(x * w, -0.3, 0.4)
        z = F.polygamma(1, 3 + x) + F.reciprocal(2 + w * x) + F.xlogy(x * x, 1 + w * w)
        return F.sum(y * z + F.hypot(x, w) + F.where(F.isfinite(x), F.trunc(3 * x) * x, 0.0))
    w = rand(4)
    check_vmap(gc.grad(loss), [w, rand(B, 4)], [None, 0], ort=True, rtol=1e-9, atol=1e-10)
    check_vmap(gc.grad(loss, argnums=1), [rand(B, 4), rand(4)], [0, None], rtol=1e-9, atol=1e-10)


def test_nested_vmap_batches_the_batched_ops_again():
    """The inner vmap's batched ops are recorded nodes like any other: the outer vmap batches them."""
    def layer(w, x):
        return F.tanh(x @ w) + F.softmax(x, axis=-1) @ w
    check_vmap(gc.vmap(layer, in_axes=(None, 0)), [rand(B, 3, 4), rand(5, 3)], [0, None], ort=True)
    check_vmap(gc.vmap(gc.grad(lambda w, x: F.sum(layer(w, x) ** 2)), in_axes=(None, 0)),
               [rand(B, 3, 4), rand(B, 5, 3)], [0, 0])


# -- axes: scans, sorting, norms, scatter_reduce, masked_select -----------------------------------------------------
def test_axis_ops_shift_their_axes():
    def f(x, w):
        values, indices = F.topk(x * w, 2, axis=-1)
        return (F.cumsum(x, axis=0), F.cumprod(x, axis=-1, reverse=True, exclusive=True), values, indices,
                F.sort(x, axis=0, descending=True), F.argsort(x, axis=-1), F.argmax(x, axis=-1),
                F.argmin(x, axis=0, keepdims=True), F.argmax(x), F.vector_norm(x, 3, axis=-1),
                F.vector_norm(x, np.inf, axis=(0, 1)), F.median(x, axis=1))
    x, w = rand(B, 3, 4), rand(4)
    check_vmap(f, [x, w], [0, None], ort=True)
    check_vmap(f, [np.moveaxis(x, 0, 2), w], [2, None])          # batch axis not first
    check_vmap(f, [x[0], rand(B, 4)], [None, 0])


def test_per_example_gradients_through_axis_ops():
    def loss(w, x):
        y = x * w
        return (F.sum(F.cumprod(y, axis=-1) * F.cumsum(y, axis=0)) + F.sum(F.topk(y, 2, axis=0)[0] ** 2)
                + F.sum(F.vector_norm(y, 2, axis=-1)) + F.sum(F.sort(y, axis=-1) * np.arange(4.0)))
    check_vmap(gc.grad(loss), [rand(4), rand(B, 3, 4)], [None, 0], ort=True)
    check_vmap(gc.grad(loss, argnums=1), [rand(B, 4), rand(3, 4)], [0, None])


def test_scatter_reduce_and_masked_select():
    def f(x, index, src, mask):
        return (F.scatter_reduce(x, 1, index, src, "amax"), F.scatter_reduce(x, 0, index, src, "prod"),
                F.masked_select(x, mask, size=5, fill=-1.0))
    x, src, index, mask = rand(B, 3, 4), rand(B, 3, 4), RNG.integers(0, 3, (B, 3, 4)), RNG.random((B, 3, 4)) < 0.5
    check_vmap(f, [x, index, src, mask], [0, 0, 0, 0], ort=True)
    check_vmap(f, [x[0], index, src[0], mask], [None, 0, None, 0])

    def loss(x, index, src):
        return (F.sum(F.scatter_reduce(x, 1, index, src, "amax") ** 2)
                + F.sum(F.scatter_reduce(x, 1, index, src, "prod")))
    check_vmap(gc.grad(loss, argnums=(0, 2)), [x, index[0], src], [0, None, 0])


def test_quantization_per_example_and_shared_scales():
    """F.quantize_linear, F.dequantize_linear and F.fake_quantize (per tensor, per axis, per block) with the
    scale batched or shared, and fake quantization's per-example gradients in x and the scale."""
    x = rand(B, 3, 4) * 3
    scale, per_axis, blocks = np.abs(rand(B)) + 0.2, np.abs(rand(3)) + 0.2, np.abs(rand(3, 2)) + 0.2
    zero = np.array([5, -3, 0], np.int8)

    def f(x, s, a, b):
        q = F.quantize_linear(x, s, np.int8(-2))
        return (q, F.dequantize_linear(q, s, np.int8(-2)), F.quantize_linear(x, a, zero, axis=0),
                F.fake_quantize(x, a, zero, axis=0), F.fake_quantize(x, b, np.uint8(100), axis=1, block_size=2))
    check_vmap(f, [x, scale, per_axis, blocks], [0, 0, None, None], ort=True)
    check_vmap(f, [x, scale[0], per_axis, blocks], [0, None, None, None])

    def loss(x, s):
        return F.sum(F.fake_quantize(x, s, np.uint8(128)) ** 2)
    check_vmap(gc.grad(loss, argnums=(0, 1)), [x, scale], [0, 0], ort=True)


# -- linear algebra -------------------------------------------------------------------------------------------------
def _spd(*shape):
    a = RNG.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + 3 * np.eye(shape[-1])


def test_solvers_take_the_batch_as_a_leading_matrix_dim():
    def f(a, b):
        sign, logdet = F.slogdet(a)
        return F.inv(a), F.det(a), sign, logdet, F.solve(a, b), F.solve(a, b[0, :, 0]), F.cholesky(a)
    a, b = _spd(B, 2, 3, 3), rand(B, 2, 3, 2)
    check_vmap(f, [a, b], [0, 0], ort=True)
    check_vmap(f, [a[0], b], [None, 0])
    check_vmap(f, [a, b[0]], [0, None], ort=True, symbolic=False)


def test_per_example_gradients_through_solvers_and_gemm():
    def loss(w, x):
        a = w + x[:, None] * x[None, :]                       # symmetric positive definite per example
        y = apply("gemm", [a, w, x[:, None]], trans_a=False, trans_b=True)    # the fused Gemm op, 2-d only
        return (F.sum(F.inv(a) * w) + F.det(a) + F.slogdet(a)[1] + F.sum(F.solve(a, w)) + F.sum(F.cholesky(a))
                + F.sum(y * y))
    w = _spd(3, 3)
    check_vmap(gc.grad(loss), [w, rand(B, 3)], [None, 0], ort=True, rtol=1e-8, atol=1e-10)
    check_vmap(gc.grad(loss, argnums=1), [_spd(B, 3, 3), rand(3)], [0, None], rtol=1e-8, atol=1e-10)


def test_gemm_with_each_operand_batched_or_shared():
    def f(a, b, c):
        return apply("gemm", [a, b, c], trans_a=True, trans_b=False), apply("gemm", [a, b], trans_a=True,
                                                                             trans_b=False)
    a, b, c = rand(B, 4, 2), rand(B, 4, 3), rand(B, 3)
    for axes in ((0, 0, 0), (0, None, None), (None, 0, None), (None, None, 0)):
        args = [x if ax == 0 else x[0] for x, ax in zip((a, b, c), axes)]
        if axes[:2] == (None, None):
            continue                            # the second output would read no batched value
        check_vmap(f, args, list(axes), ort=axes == (0, 0, 0))
    check_vmap(lambda a, b, c: apply("gemm", [a, b, c], trans_a=True, trans_b=False), [a[0], b[0], c],
               [None, None, 0])


# -- resampling, and the scheduling op -----------------------------------------------------------------------------
def test_resize_merges_the_batch_into_its_images():
    def f(x):
        return (F.interpolate(x, size=(5, 3), mode="bilinear"), F.interpolate(x, scale_factor=2, mode="bicubic",
                                                                               align_corners=True))
    check_vmap(f, [rand(B, 2, 1, 3, 4)], [0], ort=True)

    def loss(w, x):
        return F.sum(F.interpolate(x * w, size=(5, 3), mode="bilinear") ** 2)
    check_vmap(gc.grad(loss), [rand(4), rand(B, 2, 1, 3, 4)], [None, 0])


def test_after_keeps_its_value_and_dependency():
    check_vmap(lambda x, t: apply("after", [x, t]), [rand(B, 2), rand(3)], [0, None])
    check_vmap(lambda x, t: apply("after", [x, t]), [rand(2), rand(B, 3)], [None, 0])


# -- loops ------------------------------------------------------------------------------------------------------------
def _rnn_loss(w, u, xs, h0):
    def step(h, x):
        h = F.tanh(h @ w + x @ u)
        return h, F.sum(h * x[:1])
    h, ys = gc.scan(step, h0, xs)
    return F.sum(h ** 2) + F.sum(ys)


def test_scan_batches_its_body():
    w, u, xs, h0 = rand(4, 4) * 0.5, rand(2, 4), rand(B, 5, 2), rand(4)
    check_vmap(_rnn_loss, [w, u, xs, h0], [None, None, 0, None], ort=True)     # the carry becomes batched
    check_vmap(_rnn_loss, [w, u, xs[0], rand(B, 4)], [None, None, None, 0])   # only the carry is batched
    check_vmap(_rnn_loss, [rand(B, 4, 4), u, xs[0], h0], [0, None, None, None], ort=True)   # a batched const

    def counted(x):                  # an int carry and a y no example changes stay unbatched inside
        def step(c, t):
            return (c[0] + t, c[1] * 0.5 + F.sum(t)), t * 2
        return gc.scan(step, (np.int64(0), x), np.arange(4, dtype=np.int64))
    check_vmap(counted, [rand(B, 2)], [0])


def test_nested_loops_and_checkpointed_regions():
    def f(w, x):
        def outer(c, row):
            inner, _ = gc.scan(lambda h, v: (F.tanh(h * w + v), None), c, row)
            return inner, F.mean(inner)
        c, ys = gc.scan(outer, x[0], x)
        return gc.fori_loop(0, 2, lambda i, c: c * w, c), ys
    check_vmap(f, [rand(3), rand(B, 4, 3)], [None, 0], ort=True)

    def loss(w, x):
        return F.sum(gc.checkpoint(lambda x: F.sin(F.exp(x * w) * w), x))
    check_vmap(gc.grad(loss), [rand(3), rand(B, 3)], [None, 0])
    graph = trace(gc.vmap(gc.grad(loss), (None, 0)), [rand(3), rand(B, 3)]).graph
    assert any(n.recompute and n.op == "exp" for n in graph.nodes.values())   # the batched region stays one


def test_per_example_gradients_of_an_rnn():
    """vmap(grad(f)) through a scan: the forward and backward loops of each example's gradient, batched."""
    w, u, xs, h0 = rand(4, 4) * 0.5, rand(2, 4), rand(B, 5, 2), rand(4)
    grads = gc.grad(_rnn_loss, argnums=(0, 1, 3))
    check_vmap(grads, [w, u, xs, h0], [None, None, 0, None], ort=True)
    graph = trace(gc.vmap(grads, (None, None, 0, None)), [w, u, xs, h0]).graph
    assert [n.op for n in graph.nodes.values()].count("scan") == 2            # one forward, one backward loop
    second = gc.grad(lambda w, u, xs, h0: F.sum(gc.grad(_rnn_loss)(w, u, xs, h0) ** 2))
    check_vmap(second, [w, u, xs, h0], [None, None, 0, None], rtol=1e-8, atol=1e-10)


def test_per_example_gradients_of_an_lstm():
    hidden, feat = 3, 2
    weights = [[rand(4 * hidden, feat) * 0.5, rand(4 * hidden, hidden) * 0.5, rand(4 * hidden), rand(4 * hidden)]]

    def loss(weights, xs):
        ys, h, c = F.lstm(xs[:, None], np.zeros((1, 1, hidden)), np.zeros((1, 1, hidden)), weights)
        return F.sum(ys ** 2) + F.sum(h * c)
    xs = rand(B, 8, feat)                                                     # long enough for F.lstm to scan
    check_vmap(gc.grad(loss), [weights, xs], [None, 0], ort=True, rtol=1e-8, atol=1e-10)
    graph = trace(gc.vmap(gc.grad(loss), (None, 0)), [weights, xs]).graph
    ops = [n.op for n in graph.nodes.values()]
    assert ops.count("scan") == 2 and ops.count("while") == 0                 # batched loops, not unrolled steps


# -- per-example gradients through the common layers ---------------------------------------------------------------
def test_per_example_gradients_of_an_attention_block():
    """Embedding, linear projections, causal scaled dot-product attention, layer norm, gelu, embedding_bag."""
    vocab, d = 7, 4
    params = {"table": rand(vocab, d), "wq": rand(d, d), "wk": rand(d, d), "wv": rand(d, d), "bq": rand(d),
              "g": 1 + 0.1 * rand(d), "b": rand(d), "bag": rand(vocab, d)}

    def loss(p, ids, target):
        h = F.embedding(ids, p["table"])
        q, k, v = F.linear(h, p["wq"], p["bq"]), h @ p["wk"], h @ p["wv"]
        a = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
        y = F.gelu(F.layer_norm(h + a, p["g"], p["b"]), approximate=True)
        bag = F.embedding_bag(ids[None], p["bag"], mode="sum")[0]
        return F.sum((y - target) ** 2) + F.sum(F.tanh(bag) * target[0])
    ids, target = RNG.integers(0, vocab, (B, 5)), rand(B, 5, d)
    check_vmap(gc.grad(loss), [params, ids, target], [None, 0, 0], ort=True, rtol=1e-8, atol=1e-10)


def test_per_example_gradients_of_a_cnn_with_norms_and_pooling():
    """Conv, training-mode batch norm, group and instance norm, max/avg/adaptive pooling and a linear head,
    in float32 (ONNX Runtime's CPU Conv and pooling kernels)."""
    f32 = np.float32
    params = {"w": rand(4, 2, 3, 3).astype(f32), "c": rand(4).astype(f32), "gn": (1 + rand(4)).astype(f32),
              "bn": rand(4).astype(f32), "head": rand(4, 3).astype(f32)}

    def loss(p, x, y):
        h = F.conv(x[None], p["w"], p["c"], pad=1)
        h = F.relu(F.batch_norm(h, p["gn"], p["bn"]) + F.group_norm(h, 2, p["gn"], p["bn"]) + F.instance_norm(h))
        h = F.max_pool(h, 2) + F.avg_pool(h, 2)
        h = F.reshape(F.adaptive_avg_pool(h, 1), (1, 4))
        return F.softmax_cross_entropy(F.linear(h, p["head"]), y[None])
    x, y = rand(B, 2, 4, 4).astype(f32), RNG.integers(0, 3, B)
    check_vmap(gc.grad(loss), [params, x, y], [None, 0, 0], ort=True, rtol=1e-4, atol=1e-5)


def test_while_loop_examples_stop_at_their_own_step():
    def halve(x, limit):
        y, n = gc.while_loop(lambda v: F.sum(F.abs(v[0])) > limit, lambda v: (v[0] * 0.5, v[1] + 1),
                             (x, np.int64(0)))
        return y, n
    x = rand(4, 3) * np.array([[1.0], [10.0], [100.0], [0.01]])
    expected = check_vmap(halve, [x, 1.0], [0, None], ort=True)
    assert len(set(expected[1])) > 1                                     # the trip counts differ
    check_vmap(halve, [x[1], np.array([1.0, 5.0, 0.1])], [None, 0], ort=True)

    def flip(x):                      # a finished example's condition would hold again after another step
        return gc.while_loop(lambda v: v[0] < 3, lambda v: (v[0] * -2, v[1] + 1), (x, np.int64(0)))
    assert list(check_vmap(flip, [np.array([5.0, -1.0, 0.5])], [0], ort=True)[1]) == [0, 3, 4]

    def climb(step):                  # the first test reads no batched value, the later ones do
        return gc.while_loop(lambda v: v < 3, lambda v: v + step, np.float64(0))
    np.testing.assert_array_equal(check_vmap(climb, [np.array([0.5, 1.0, 2.5])], [0], ort=True)[0], [3, 3, 5])

    def fixed(x):                     # the condition reads no batched value: the examples loop in step
        return gc.while_loop(lambda v: v[1] < 3, lambda v: (v[0] * 2 + 1, v[1] + 1), (x, np.int64(0)))
    check_vmap(fixed, [rand(B, 2)], [0], ort=True)
    graph = trace(gc.vmap(fixed), [rand(B, 2)]).graph
    loop = next(n for n in graph.nodes.values() if n.op == "while")
    assert len(loop.inputs) == 3                                        # no active mask


def test_elementwise_ops_need_no_rule_of_their_own():
    """The generic rule covers every ELEMENTWISE op; RULES holds only the others."""
    assert not [name for name in batching.RULES if Trait.ELEMENTWISE in REGISTRY[name].traits]


# -- PyTorch's compositions (issue #45 item 4) -------------------------------------------------------------------
def _pytorch_compositions(x, w, labels, listed, idx):
    """One call of each of PyTorch's pointwise names, product forms, losses, spatial ops and shape
    helpers on an example x (3, 4) with shared weights w (4,), class labels (3,), multilabel lists
    (3, 4) and max-pool indices (1, 1, 2, 2) of the example's own."""
    a = F.reshape(x, 2, 3, 2)
    pooled = F.reshape(x[:2, :2], 1, 1, 2, 2)
    return (F.logaddexp2(x, w), F.addcmul(x, x, w, value=0.5), F.addcdiv(x, w, 2 + x * x, value=-2),
            F.xlog1py(x, w * w), F.sinc(x), F.deg2rad(x) + F.rad2deg(w), F.trunc_divide(x, 0.3),
            F.logical_xor(x > 0, w > 0), F.heaviside(F.trunc(x), w),
            F.addmv(x[:, 0], x, w, 0.5, 2), F.addbmm(x[:, :3], a, F.transpose(a, (0, 2, 1))), F.addr(x, x[:, 0], w),
            F.vecdot(x, w), F.block_diag(x, w), F.pdist(x, 1.5), F.lstsq(x, w[:3])[0],
            F.cosine_embedding_loss(x, x * w, np.array([1, -1, 1]), 0.2, "none"), F.poisson_nll_loss(x, w * w),
            F.gaussian_nll_loss(x, w, 1 + x * x, reduction="none"), F.soft_margin_loss(x, F.sign(w)),
            F.multi_margin_loss(x, labels, p=2), F.multilabel_margin_loss(x, listed, "none"),
            F.multilabel_soft_margin_loss(x, w > 0),
            F.local_response_norm(F.reshape(x, 1, 4, 3), 3, alpha=0.3),
            F.bilinear(x, x[:, :2], F.reshape(x[:2], 1, 4, 2)),
            F.channel_shuffle(F.reshape(x, 1, 4, 3), 2), F.max_unpool(pooled, idx, 2),
            *F.meshgrid(w, x[:, 0]), F.atleast_3d(w), F.column_stack([w, x[0]]), F.diff(x), F.trapezoid(x, w),
            F.cumulative_trapezoid(x, axis=0))


def test_pytorch_compositions_batch_and_give_per_example_gradients():
    x, labels = rand(B, 3, 4), RNG.integers(0, 4, (B, 3))
    listed = np.where(RNG.random((B, 3, 4)) < 0.3, -1, RNG.integers(0, 4, (B, 3, 4)))
    idx = RNG.integers(0, 16, (B, 1, 1, 2, 2))             # unpooled 4x4 planes; a repeated index keeps the last write
    args = [x, rand(4), labels, listed, idx]
    check_vmap(_pytorch_compositions, args, [0, None, 0, 0, 0], ort=True)

    def loss(x, w, labels, listed, idx):
        return sum(F.sum(out * out) for out in _pytorch_compositions(x, w, labels, listed, idx)
                   if out.dtype.kind == "f")
    check_vmap(gc.grad(loss, argnums=(0, 1)), args, [0, None, 0, 0, 0])
