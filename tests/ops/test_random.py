"""Keyed random draws (ops/random.py): dropout masks that are a pure function of (key, stream,
position), the same bits on ONNX Runtime, gcompile's reference evaluator and onnx's
ReferenceEvaluator; their statistics; gradients through them (the same mask forward and
backward), in loops and branches whose reverse mode refuses runtime draws, under vmap; edges."""
import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ops.random import dropout_mask, keyed_uniform

from ..opcheck import check_grads

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float64):
    return RNG.uniform(1.0, 2.0, shape).astype(dtype)


def masks(ratio, shape, key, *, symbolic=False, seed=0, named=True):
    """The keep mask of F.dropout(key=key, seed=seed) (named=False: of the first draw under
    gc.random_key(key)) on ONNX Runtime, on the reference evaluator, and on onnx's
    ReferenceEvaluator running the portable model."""
    def fn(x, k):
        return dropout_mask(k, x, ratio, 0, seed, named)
    x, k = np.ones(shape, np.float32), np.asarray(key, np.int64)
    spec = gc.spec(tuple("n" if symbolic and i == 0 else d for i, d in enumerate(shape)), "float32")
    cf = gc.compile(fn, spec, k, provider="cpu")
    ours = evaluate(trace(fn, [x, k]).graph, [x, k])[0]
    portable = cf.model_for("portable")
    onnx.checker.check_model(portable, full_check=True)
    feeds = dict(zip([i.name for i in portable.graph.input], [x, k]))
    return cf(x, k), ours, ReferenceEvaluator(portable).run(None, feeds)[0]


@pytest.mark.parametrize("shape,symbolic", [((64, 48), False), ((64, 48), True), ((3, 5, 7), True), ((), False)])
def test_the_same_mask_on_every_evaluator(shape, symbolic):
    for key in ([0], [5], [2 ** 40 + 3, 11]):
        on_ort, on_ref, on_onnx = masks(0.3, shape, key, symbolic=symbolic)
        assert on_ort.dtype == np.bool_ and on_ort.shape == shape
        np.testing.assert_array_equal(on_ort, on_ref)
        np.testing.assert_array_equal(on_ort, on_onnx)


def test_masks_look_independent():
    """Keep rate 1 - ratio, and no dependence between neighbours, rows, keys or streams: over
    2^16 positions 5 standard deviations of a rate are about 0.01."""
    shape = (256, 256)
    base = masks(0.3, shape, [1])[0]
    assert abs(base.mean() - 0.7) < 0.01
    for other in (np.roll(base, 1, axis=1), np.roll(base, 1, axis=0), masks(0.3, shape, [2])[0],
                  masks(0.3, shape, [1], seed=1)[0], masks(0.3, shape, [1, 0])[0], masks(0.3, shape, [0, 1])[0]):
        both = (base & other).mean()
        assert abs(both - 0.49) < 0.01, both                 # P(keep)² when independent
    for ratio in (0.01, 0.5, 0.99):
        assert abs(masks(ratio, shape, [3])[0].mean() - (1 - ratio)) < 0.01


def test_dropout_with_a_key():
    """y = x · mask / (1 - ratio), the mask a function of the key: the same key the same mask, another
    key another one; float32 and float64 alike."""
    for dtype in (np.float32, np.float64):
        x = rand(40, 30, dtype=dtype)
        cf = gc.compile(lambda x, k: F.dropout(x, 0.25, training=True, key=k), x, np.int64(0), provider="cpu")
        assert "Dropout" not in {n.op_type for n in cf.model.graph.node}
        y0, y0again, y1 = cf(x, np.int64(0)), cf(x, np.int64(0)), cf(x, np.int64(1))
        np.testing.assert_array_equal(y0, y0again)
        keep = masks(0.25, x.shape, [0])[0]
        np.testing.assert_array_equal(y0, x * (keep.astype(dtype) * dtype(1 / 0.75)))
        assert 0.3 < ((y0 == 0) != (y1 == 0)).mean() < 0.45   # 2·0.25·0.75 apart


def test_dropout_gradient_reuses_the_mask():
    """check_grad on ONNX Runtime and the reference evaluator (the same masks on both), orders 1
    and 2, static and symbolic sizes; d/dx is the mask over 1 - ratio."""
    def fn(x):
        return F.dropout(F.sin(x), 0.4, training=True, key=3, seed=2) * x
    check_grads(fn, [rand(6, 5)])
    x = rand(6, 5)
    dx = gc.compile(lambda x: gc.grad(F.sum(F.dropout(x, 0.4, training=True, key=3)), [x])[0], x, provider="cpu")(x)
    y = gc.compile(lambda x: F.dropout(x, 0.4, training=True, key=3), x, provider="cpu")(np.ones_like(x))
    np.testing.assert_array_equal(dx, y)


def test_edges():
    """ratio 0 keeps everything (no draw), ratio 1 gives x·0 (NaN where x is not finite, as torch),
    zero-size inputs, and NaN or infinities kept where the mask keeps them."""
    x = np.array([[1.5, -2.0, np.inf, np.nan, 0.0]] * 8, np.float32)
    for ratio, expected in ((0.0, x), (1.0, np.where(np.isfinite(x), 0, np.nan).astype(np.float32))):
        cf = gc.compile(lambda x, k, r=ratio: F.dropout(x, r, training=True, key=k), x, np.int64(4), provider="cpu")
        np.testing.assert_array_equal(cf(x, np.int64(4)), expected)
    assert masks(0.0, (5, 3), [1])[0].all() and not masks(1.0, (5, 3), [1])[0].any()
    y = gc.compile(lambda x, k: F.dropout(x, 0.5, training=True, key=k), x, np.int64(4), provider="cpu")(x, np.int64(4))
    kept = masks(0.5, x.shape, [4])[0]
    np.testing.assert_array_equal(np.isnan(y), np.isnan(x) | ~kept & np.isinf(x))
    for shape in ((0, 3), (4, 0), (0,)):
        on_ort, on_ref, on_onnx = masks(0.5, shape, [1], symbolic=True)
        assert on_ort.shape == on_ref.shape == on_onnx.shape == shape
        z = np.zeros(shape, np.float32)
        dz = gc.compile(lambda x: gc.grad(F.sum(F.dropout(x, 0.5, training=True, key=1)), [x])[0],
                        gc.spec(tuple("n" if i == 0 else d for i, d in enumerate(shape)), "float32"),
                        provider="cpu")(z)
        assert dz.shape == shape


def test_a_seed_inside_a_training_step():
    """gc.random_key(seed=s) in a loss function keeps the step's key: another seed, other masks; the
    same seed, the same masks."""
    params, x, labels = {"w": np.linspace(-1, 1, 12).reshape(4, 3)}, rand(8, 4), np.arange(8) % 3

    def make(seed):
        def loss(p, x, labels):
            with gc.random_key(seed=seed):
                return F.softmax_cross_entropy(F.dropout(x, 0.5, training=True) @ p["w"], labels)
        return gc.export_train_step(loss, params, gc.optim.SGD(0.1), x, labels, provider="cpu")
    steps = [make(s) for s in (0, 1, 1)]
    slots, count = steps[0].initial_state()
    losses = [float(step(params, slots, count, x, labels)[0]) for step in steps]
    assert losses[1] == losses[2] != losses[0]
    with pytest.raises(gc.GcompileError, match="give a key"):
        trace(lambda x: gc.random_key(seed=1).__enter__(), [rand(3)])


def test_bad_keys_are_refused():
    with pytest.raises(gc.GcompileError, match="key must be an integer scalar or vector"):
        trace(lambda x: F.dropout(x, 0.5, training=True, key=x), [rand(3)])
    with pytest.raises(gc.GcompileError, match="the key must be an integer scalar or vector"):
        trace(lambda x: gc.random_key(x).__enter__(), [rand(3)])
    with pytest.raises(gc.GcompileError, match="seed must be an int"):
        trace(lambda k: gc.random_key(k, seed=1.5).__enter__(), [np.int64(1)])


# -- contexts, loops, branches -----------------------------------------------------------------------------------
W = np.random.default_rng(3).standard_normal((6, 6)) * 0.4
W32 = np.random.default_rng(4).standard_normal((32, 32)) * 0.2


def _rnn(x, step, **scan_options):
    """A scan whose step drops half of its pre-activation, under the step's random_key."""
    with gc.random_key(step):
        def body(h, xt):
            h = F.tanh(F.dropout(h @ W32, 0.5, training=True) + xt)
            return h, h
        return gc.scan(body, x[0], x, **scan_options)[1]


def test_each_loop_step_draws_its_own_mask_whatever_the_loop_form():
    """The step's index is one more word of the key, so the masks are those of the step, not of the
    way the loop is built: unrolled, in blocks, checkpointed, all the same."""
    x, step = RNG.standard_normal((6, 32)), np.int64(9)
    plain = gc.compile(lambda x, s: _rnn(x, s), x, step, provider="cpu")(x, step)
    for options in ({"unroll": True}, {"unroll": 4}, {"checkpoint_every": 2}, {"checkpoint": True},
                    {"checkpoint_every": (4, 2)}):
        got = gc.compile(lambda x, s, o=options: _rnn(x, s, **o), x, step, provider="cpu")(x, step)
        np.testing.assert_allclose(got, plain, rtol=1e-12, atol=1e-14, err_msg=str(options))
    graph = trace(lambda x, s: _rnn(x, s), [x, step]).graph
    np.testing.assert_allclose(evaluate(graph, [x, step])[0], plain, rtol=1e-12, atol=1e-14)
    dropped = [np.isclose(plain[t], np.tanh(x[t]), rtol=1e-14, atol=0) for t in range(6)]   # tanh(0 + x_t)
    assert 0.3 < np.mean(dropped) < 0.7
    assert len({d.tobytes() for d in dropped}) == 6, "a step drew another step's mask"


def test_nested_loops():
    """A draw in a loop inside a loop's body: both loops' step indices are words of its key (the outer
    loop, traced first without an index, is traced again with one), whichever form each loop takes;
    the inner body reads a Tensor of the outermost function (captured by both bodies before the
    draw stops the first attempt)."""
    x, step = RNG.standard_normal((4, 6)), np.int64(3)

    def nested(x, s, unroll=1):
        with gc.random_key(s):
            def outer(h, xt):
                def inner(g, _):
                    return F.tanh(F.dropout(g @ W + x[0], 0.3, training=True)), g
                g, gs = gc.scan(inner, h + xt, None, length=3, unroll=unroll)
                return g, gs
            return gc.scan(outer, x[0], x, unroll=unroll)[1]
    plain = gc.compile(nested, x, step, provider="cpu")(x, step)
    unrolled = gc.compile(lambda x, s: nested(x, s, True), x, step, provider="cpu")(x, step)
    np.testing.assert_allclose(unrolled, plain, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(evaluate(trace(nested, [x, step]).graph, [x, step])[0], plain, rtol=1e-12, atol=1e-14)
    check_grads(lambda x, s: F.sum(nested(x, s) ** 2), [x, step], order=1)


def test_loops_without_draws_get_no_index():
    """The index rides along only where a draw asks for it: the loop is the one traced without a key."""
    x, step = RNG.standard_normal((6, 6)), np.int64(9)

    def fn(x, s, keyed):
        def body(h, xt):
            return F.tanh(h @ W + xt), h
        def run():
            y = gc.scan(body, x[0], x)[1]
            return gc.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 0.5, c[1] + 1), (y, np.int64(0)))[0]
        if keyed:
            with gc.random_key(s):
                return run()
        return run()
    with_key = trace(lambda x, s: fn(x, s, True), [x, step]).graph
    without = trace(lambda x, s: fn(x, s, False), [x, step]).graph
    shapes = [sorted((n.op, len(n.inputs)) for n in g.nodes.values()) for g in (with_key, without)]
    assert shapes[0] == shapes[1]


def test_reverse_mode_through_draws_in_nested_loops_and_branches():
    """The backward recomputes a keyed mask from its key rather than saving it, so what reverse mode
    refuses for runtime draws (a draw in a while loop's checkpoint_every blocks, in a gc.cond's
    branch) is differentiated: orders 1 and 2 against float64 central differences."""
    x, step = RNG.standard_normal((5, 6)), np.int64(2)

    def loss(x, step):
        with gc.random_key(step):
            def body(h, xt):
                return F.tanh(F.dropout(h @ W, 0.3, training=True) + xt), None
            h, _ = gc.scan(body, x[0], x, checkpoint_every=2)
            w = gc.while_loop(lambda c: c[1] < 3,
                              lambda c: (F.tanh(F.dropout(c[0], 0.2, training=True) * 2), c[1] + 1),
                              (h, np.int64(0)), checkpoint_every=2)[0]
            c = gc.cond(F.sum(x) > -100, lambda z: F.dropout(z, 0.2, training=True) * 3, lambda z: z, w)
            return F.sum(c * c) + F.sum(h)
    check_grads(loss, [x, step])
    with pytest.raises(gc.UnsupportedError, match="gc.cond whose branch draws random numbers"):
        trace(lambda x: gc.grad(F.sum(gc.cond(F.sum(x) > 0, lambda z: F.dropout(z, 0.5, training=True),
                                              lambda z: z, x)), [x]), [x])   # without a key: still refused


def test_vmap_draws_each_examples_own_mask():
    """A key shared by the examples: example b draws with key (k, b), as the positions of one batched
    tensor draw different masks; per-example keys: each example's own (the registry check)."""
    xb, step = rand(4, 10), np.int64(5)
    w = np.linspace(0.5, 1.5, 10)

    def batched(xb, s):
        with gc.random_key(s):
            return gc.vmap(lambda x: F.dropout(x * w, 0.5, training=True))(xb)
    got = gc.compile(batched, gc.spec(("n", 10), "float64"), step, provider="cpu")(xb, step)
    for b in range(4):
        keep = masks(0.5, (10,), [5, b], named=False)[0]
        np.testing.assert_array_equal(got[b], xb[b] * w * (keep * 2.0))
    assert len({got[b].nonzero()[0].tobytes() for b in range(4)}) > 1

    def per_example_grads(xb, s):
        with gc.random_key(s):
            return gc.vmap(lambda x: gc.grad(F.sum(F.tanh(F.dropout(x * w, 0.5, training=True)) ** 2), [x])[0])(xb)
    g = gc.compile(per_example_grads, xb, step, provider="cpu")(xb, step)
    np.testing.assert_array_equal(g == 0, got == 0)          # the gradient's mask is the forward's


def _uniforms(shape, key, dtype=np.float32, symbolic=False):
    """keyed_uniform(x, dtype, key=key) on ONNX Runtime, the reference evaluator and onnx's
    ReferenceEvaluator running the portable model."""
    def fn(x):
        return keyed_uniform(x, dtype, key=key)
    x = np.ones(shape, dtype)
    spec = gc.spec(tuple("n" if symbolic and i == 0 else d for i, d in enumerate(shape)), np.dtype(dtype).name)
    cf = gc.compile(fn, spec, provider="cpu")
    portable = cf.model_for("portable")
    onnx.checker.check_model(portable, full_check=True)
    return cf(x), evaluate(trace(fn, [x]).graph, [x])[0], \
        ReferenceEvaluator(portable).run(None, {portable.graph.input[0].name: x})[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_uniform_draws_are_the_same_on_every_evaluator(dtype):
    """Multiples of 2^-24 in [0, 1) (float16 rounds them), mean 1/2 and variance 1/12 over 2^14
    positions, the same bits on every evaluator at a static and a symbolic size, and in float32 and
    float64 alike; another key draws other values, zero-size and 0-d shapes too."""
    for symbolic in (False, True):
        on_ort, on_ref, on_onnx = _uniforms((128, 128), 9, dtype, symbolic)
        assert on_ort.dtype == dtype and on_ort.shape == (128, 128)
        np.testing.assert_array_equal(on_ort, on_ref)
        np.testing.assert_array_equal(on_ort, on_onnx)
    u = on_ort.astype(np.float64)
    assert u.min() >= 0 and u.max() <= 1 and abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    if dtype != np.float16:
        assert u.max() < 1 and np.all(u * 2 ** 24 == np.round(u * 2 ** 24))
        np.testing.assert_array_equal(u, _uniforms((128, 128), 9, np.float32)[0].astype(np.float64))
    assert np.mean(u == _uniforms((128, 128), 10, dtype)[0]) < 0.01
    for shape in ((0, 3), (), (5,)):
        assert all(v.shape == shape for v in _uniforms(shape, 1, dtype, symbolic=bool(shape)))


def test_uniform_draws_pass_no_gradient():
    """x · u with u drawn like x: the gradient is u itself (u is constant in x), orders 1 and 2."""
    def fn(x):
        return F.sin(x) * keyed_uniform(x, x.dtype, key=3)
    check_grads(fn, [rand(6, 5)])
