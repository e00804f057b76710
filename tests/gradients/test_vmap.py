"""gc.vmap: a batched graph (no per-example copies) equal to running the function on each example,
for forward functions and for per-example gradients, vmap(grad(f)), over the op families with
batching rules; a clear error for an op without one."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile import nn

RNG = np.random.default_rng(0)
B = 4


def rand(*shape):
    return RNG.standard_normal(shape)


def _check(fn, shared, batched, in_axes=None, rtol=1e-9, atol=1e-10, dtype=np.float64):
    """vmap(fn) over the leading axis of `batched` (shared arguments first) against a loop of
    per-example calls, each compiled separately."""
    shared = [np.asarray(a, dtype) if np.asarray(a).dtype.kind == "f" else a for a in shared]
    batched = [np.asarray(a, dtype) if np.asarray(a).dtype.kind == "f" else a for a in batched]
    axes = in_axes or (None,) * len(shared) + (0,) * len(batched)
    cf = gc.compile(gc.vmap(fn, in_axes=axes), *shared, *batched, provider="cpu")
    got = gc.tree_util.leaves(cf(*shared, *batched))
    one = gc.compile(fn, *shared, *[b[0] for b in batched], provider="cpu")
    expected = [gc.tree_util.leaves(one(*shared, *[b[i] for b in batched])) for i in range(len(batched[0]))]
    for k, g in enumerate(got):
        np.testing.assert_allclose(g, np.stack([e[k] for e in expected]), rtol=rtol, atol=atol, err_msg=f"output {k}")
    return cf


def test_elementwise_reductions_and_shape_ops():
    def f(w, x, y):
        z = F.where(x > 0, x * w, F.exp(y[:, None]) - x)
        s = F.concat([z, F.transpose(z)[:1]], axis=0)
        return F.sum(s, axis=1), F.max(F.reshape(s, (-1,))), F.pad(s, ((1, 0), (0, 2))), F.mean(s ** 2, keepdims=True)
    _check(f, [rand(3, 3)], [rand(B, 3, 3), rand(B, 3)])


def test_matmul_softmax_layer_norm_and_attention():
    def attend(wq, g, b, x):
        q = F.layer_norm(x, g, b) @ wq
        weights = F.softmax(q @ F.swapaxes(q, -1, -2) / 2.0, axis=-1)
        return F.einsum("ij,jk->ik", weights, x), F.log_softmax(q, axis=0)
    _check(attend, [rand(6, 6), rand(6), rand(6)], [rand(B, 5, 6)])


def test_in_axes_and_out_axes():
    fn = gc.vmap(lambda a, b: a * b, in_axes=(1, None), out_axes=1)
    a, b = rand(3, B), rand(3)
    np.testing.assert_allclose(gc.compile(fn, a, b, provider="cpu")(a, b), a * b[:, None], rtol=1e-12)


def test_in_axes_moves_the_batch_axis_first_keeping_the_others_in_order():
    x = rand(2, 3, B)
    fn = gc.vmap(lambda x: F.reshape(x, (-1,)), in_axes=2)
    np.testing.assert_array_equal(gc.compile(fn, x, provider="cpu")(x), np.moveaxis(x, 2, 0).reshape(B, -1))


def test_per_example_gradients_of_an_mlp_with_a_symbolic_batch():
    w1, b1, w2 = rand(4, 8), rand(8), rand(8, 3)
    x, y = rand(B, 4), RNG.integers(0, 3, B)

    def loss(params, x, y):
        h = F.tanh(x @ params["w1"] + params["b1"])
        return F.softmax_cross_entropy(F.expand_dims(h @ params["w2"], 0), F.expand_dims(y, 0))

    params = {"w1": w1, "b1": b1, "w2": w2}
    cf = _check(gc.grad(loss), [params], [x, y])
    assert cf.graph.nodes and max(n.outputs[0].ndim for n in cf.graph.nodes.values()) <= 3   # batched, not unrolled
    sym = gc.compile(gc.vmap(gc.grad(loss), in_axes=(None, 0, 0)), params, gc.spec(("n", 4), "float64"),
                     gc.spec(("n",), "int64"), provider="cpu")
    np.testing.assert_allclose(sym(params, x, y)["w2"], cf(params, x, y)["w2"], rtol=1e-12)
    total = gc.compile(gc.grad(lambda p, x, y: F.sum(gc.vmap(loss, (None, 0, 0))(p, x, y))), params, x, y,
                       provider="cpu")(params, x, y)
    np.testing.assert_allclose(cf(params, x, y)["w1"].sum(0), total["w1"], rtol=1e-10)


def test_per_example_gradients_of_a_cnn_with_pooling():
    def loss(w, b, x):
        h = F.relu(F.conv(x[None], w, b, pad=1))
        return F.sum(F.max_pool(h, 2) ** 2) + F.sum(F.avg_pool(h, 2, count_include_pad=True))
    _check(gc.grad(loss, argnums=(0, 1)), [rand(3, 2, 3, 3), rand(3)], [rand(B, 2, 4, 4)], dtype=np.float32,
           rtol=1e-4, atol=1e-5)


def test_per_example_input_gradients_and_second_order():
    def saliency(w, x):                         # d loss / d x: conv_transpose, slice and pad adjoints
        def loss(x):
            h = F.conv(F.pad(x, ((0, 0), (1, 0), (0, 1)))[None], w)[..., 1:, :]
            return F.sum(F.max_pool(F.tanh(h), 2) ** 2)
        g = gc.grad(loss)(x)
        return g, gc.grad(lambda x: F.sum(gc.grad(loss)(x) ** 2))(x)     # double backward: pool_gather
    _check(saliency, [rand(3, 2, 2, 2)], [rand(B, 2, 5, 5)], dtype=np.float32, rtol=1e-4, atol=1e-5)


def test_per_example_gradients_through_embeddings():
    def loss(table, ids, w):
        return F.sum(F.tanh(F.embedding(ids, table)) * w)
    _check(gc.grad(loss), [rand(7, 3)], [RNG.integers(0, 7, (B, 5)), rand(B, 5, 3)])


def test_gather_with_batched_table_and_indices():
    _check(lambda t, i: F.take(t, i, axis=1), [], [rand(B, 3, 6), RNG.integers(0, 6, (B, 2, 2))])


def test_modules_under_vmap():
    model = nn.Sequential(nn.Linear(5, 4, rng=0), nn.LayerNorm(4), nn.GELU(), nn.Linear(4, 2, rng=1))
    x = rand(B, 5).astype(np.float32)
    out = gc.jit(lambda m, x: gc.vmap(lambda m, x: m(x), in_axes=(None, 0))(m, x))(model, x)
    np.testing.assert_allclose(out, gc.jit(lambda m, x: m(x))(model, x), rtol=1e-5, atol=1e-6)


def test_an_op_without_a_batching_rule_is_named(scratch_op):
    scratch_op("scratch_unbatched", infer=lambda types: [types[0]], reference=lambda x: x,
               vjp=lambda g, ins, outs: [g[0]])
    from gcompile.frontend.tensor import apply
    with pytest.raises(gc.UnsupportedError, match="op 'scratch_unbatched' has no batching rule"):
        gc.compile(gc.vmap(lambda x: apply("scratch_unbatched", [x])), rand(B, 2))
    with pytest.raises(gc.ShapeError, match="batch sizes 4 and 3"):
        gc.compile(gc.vmap(lambda a, b: a + b), rand(4, 2), rand(3, 2))


def test_training_batch_norm_and_closed_form_activations():
    """Ops with closed-form derivatives (poly, silu, gelu_deriv, silu_deriv) and training-mode
    batch norm, whose statistics become per-example under vmap, at first and second order."""
    def energy(w, x):
        h = F.batch_norm(x @ w, np.ones(3), np.zeros(3), axis=1)
        return F.sum(F.silu(h) + F.tanh(h) * F.sigmoid(h))

    def forces(w, x):
        return gc.grad(energy, argnums=1)(w, x)

    def loss_grad(w, x):
        return gc.grad(lambda w, x: F.sum(forces(w, x) ** 2))(w, x)
    _check(energy, [rand(4, 3)], [rand(B, 5, 4)])
    _check(forces, [rand(4, 3)], [rand(B, 5, 4)])
    _check(loss_grad, [rand(4, 3)], [rand(B, 5, 4)], rtol=1e-8, atol=1e-9)


def test_exact_gelu_derivatives_in_float32():   # ONNX Runtime's CPU Erf is float32 only
    def forces(x):
        return gc.grad(lambda x: F.sum(F.gelu(x, approximate=False) * x))(x)
    _check(lambda x: gc.grad(lambda x: F.sum(forces(x) ** 2))(x), [], [rand(B, 5)], rtol=1e-4, atol=1e-5,
           dtype=np.float32)
