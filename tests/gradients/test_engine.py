"""gc.grad's contract: pruning, zeros for unused inputs, errors, stop_gradient, seeds,
intermediates, fan-out accumulation, order tags, non-differentiable ops, ONNX export,
symbolic broadcasting and the WGAN-GP example from the issue."""
import numpy as np
import pytest

import gcompile as gc
from gcompile import functions as F
from gcompile.frontend.tensor import apply
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad, check_lowering

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4))
W = RNG.standard_normal((4, 2))


def _traced(fn, arrays):
    traced = trace(fn, arrays)
    return traced.graph, evaluate(traced.graph, arrays)


def _tanh_sin(x, w):
    return F.sum(F.tanh(x @ w)) + F.sum(F.sin(x))


# -- pruning -------------------------------------------------------------------------------------
def test_grad_wrt_one_input_adds_no_node_of_another_inputs_path():
    graph, (gw,) = _traced(lambda x, w: gc.grad(_tanh_sin(x, w), [w]), [X, W])
    out = graph.outputs[0].node
    needed = graph.ancestors(out) | {out}     # the seed is among these ancestors
    backward = {i for i, n in graph.nodes.items() if n.order >= 1}
    assert backward and backward <= needed, [graph.nodes[i].name for i in backward - needed]
    np.testing.assert_allclose(gw, X.T @ (1 - np.tanh(X @ W) ** 2), rtol=1e-12)


def test_grad_wrt_fewer_inputs_builds_fewer_backward_nodes():
    only_w, _ = _traced(lambda x, w: gc.grad(_tanh_sin(x, w), [w]), [X, W])
    both, (gx, gw) = _traced(lambda x, w: gc.grad(_tanh_sin(x, w), [x, w]), [X, W])
    assert only_w.count_by_order()[1] < both.count_by_order()[1]
    assert not any(n.op == "cos" for n in only_w.nodes.values())      # sin's VJP is only on x's path
    assert any(n.op == "cos" for n in both.nodes.values())
    dt = 1 - np.tanh(X @ W) ** 2
    np.testing.assert_allclose(gx, dt @ W.T + np.cos(X), rtol=1e-12)
    np.testing.assert_allclose(gw, X.T @ dt, rtol=1e-12)


# -- unused inputs, integer inputs, seeds --------------------------------------------------------
def test_unused_input_gets_zeros_of_its_shape_and_dtype():
    def fn(x, z):
        gx, gz = gc.grad(F.sum(x * x), [x, z])
        return gx, gz

    x, z = X.astype(np.float32), np.ones((2, 5), np.float32)
    cf = gc.compile(fn, x, z, provider="cpu")
    gx, gz = cf(x, z)
    assert gz.shape == (2, 5) and gz.dtype == np.float32 and not gz.any()
    np.testing.assert_allclose(gx, 2 * x, rtol=1e-6)
    assert cf.graph.type_of(cf.graph.outputs[1]).dtype == np.float32


def test_grad_of_integer_tensor_is_a_clear_error():
    with pytest.raises(gc.GcompileError, match="int64.*not floating point"):
        trace(lambda x, n: gc.grad(F.sum(x * F.cast(n, np.float64)), [n]), [X, np.arange(4)])


def test_grad_outputs_must_match_output_shape():
    with pytest.raises(gc.GcompileError, match="grad_outputs"):
        trace(lambda x: gc.grad(F.sin(x), [x], [np.ones(4)]), [X])


def test_a_non_scalar_output_needs_its_cotangent():
    """gc.grad used to seed a non-scalar output with ones, silently differentiating its sum; PyTorch's
    backward and JAX's grad refuse, and so does gc.grad, with both ways out in the message. A scalar
    needs none, and the transforms that seed outputs themselves (vjp, jacobian) are unaffected."""
    fix = r"reduce it to a scalar first, e.g. gc.grad\(F.sum\(y\), ...\) .* or pass grad_outputs="
    line = f"test_engine.py:{test_a_non_scalar_output_needs_its_cotangent.__code__.co_firstlineno + 7}"
    with pytest.raises(gc.GcompileError, match=rf"non-scalar output \(float64\(3, 4\), at {line}\) .*{fix}"):
        trace(lambda x: gc.grad(F.sin(x), [x]), [X])
    with pytest.raises(gc.GcompileError, match="non-scalar output"):   # None in grad_outputs means no cotangent
        trace(lambda x: gc.grad([F.sum(x), F.sin(x)], [x], [None, None]), [X])
    _, (g,) = _traced(lambda x: gc.grad([F.sum(x), F.sin(x)], [x], [None, np.ones((3, 4))]), [X])
    np.testing.assert_allclose(g, 1 + np.cos(X), rtol=1e-12)
    _, (g,) = _traced(lambda x: gc.vjp(F.sin, x)[1](np.ones((3, 4))), [X])
    np.testing.assert_allclose(g, np.cos(X), rtol=1e-12)


def test_multiple_outputs_weighted_by_grad_outputs():
    v, c1, c2 = RNG.standard_normal(4), RNG.standard_normal((3, 4)), RNG.standard_normal(4)

    def fn(x, v, c1, c2):
        return gc.grad([F.sin(x) * v, F.sum(x * x, axis=0)], [x, v], [c1, c2])

    _, (gx, gv) = _traced(fn, [X, v, c1, c2])
    np.testing.assert_allclose(gx, c1 * np.cos(X) * v + 2 * X * c2, rtol=1e-12)
    np.testing.assert_allclose(gv, (c1 * np.sin(X)).sum(0), rtol=1e-12)


def test_grad_wrt_an_intermediate_and_through_it():
    def fn(x, w):
        h = x @ w
        y = F.sum(F.tanh(h)) + F.sum(h * h)
        return gc.grad(y, [h, x])

    _, (gh, gx) = _traced(fn, [X, W])
    h = X @ W
    np.testing.assert_allclose(gh, 1 - np.tanh(h) ** 2 + 2 * h, rtol=1e-12)
    np.testing.assert_allclose(gx, gh @ W.T, rtol=1e-12)


def test_fan_out_is_accumulated_with_one_add_n():
    def fn(x):
        return gc.grad(F.sum(F.sin(x)) + F.sum(F.exp(x)) + F.sum(F.tanh(x)), [x])

    graph, (gx,) = _traced(fn, [X])
    sums = [n for n in graph.nodes.values() if n.op == "add_n" and n.order == 1]
    assert len(sums) == 1 and len(sums[0].inputs) == 3
    assert graph.outputs[0].node == sums[0].id
    np.testing.assert_allclose(gx, np.cos(X) + np.exp(X) + 1 - np.tanh(X) ** 2, rtol=1e-12)


# -- stop_gradient and non-differentiable ops ------------------------------------------------------
def test_stop_gradient_blocks():
    _, (gx,) = _traced(lambda x: gc.grad(F.sum(x * F.stop_gradient(x)), [x]), [X])
    np.testing.assert_array_equal(gx, X)
    _, (gz,) = _traced(lambda x: gc.grad(F.sum(F.stop_gradient(F.exp(x))), [x]), [X])
    assert gz.shape == X.shape and not gz.any()


def test_numeric_check_of_a_function_using_stop_gradient():
    def stable_logsumexp(x):
        m = F.stop_gradient(F.max(x, axis=1, keepdims=True))
        return F.log(F.sum(F.exp(x - m), axis=1)) + F.reshape(m, (3,))

    check_grad(stable_logsumexp, [X])
    check_grad(stable_logsumexp, [X], order=2)


def test_non_differentiable_ops_give_zero_gradient():
    x = np.array([[0.3, -1.7, 2.2], [1.4, -0.6, 0.9]])

    def fn(x):
        blocked = (F.floor(x) + F.ceil(x) + F.sign(x) + F.round(x) + F.cast(F.cast(x, np.int32), x.dtype)
                   + F.cast(F.greater(x, 0.5), x.dtype) + F.cast(F.less_equal(x, 0), x.dtype))
        return gc.grad(F.sum(blocked), [x]) + gc.grad(F.sum(x * F.floor(x)), [x])

    _, (g_blocked, g_mixed) = _traced(fn, [x])
    assert g_blocked.shape == x.shape and not g_blocked.any()
    np.testing.assert_array_equal(g_mixed, np.floor(x))


# -- order tags -----------------------------------------------------------------------------------
def test_backward_nodes_are_tagged_by_order():
    def fn(x):
        gx, = gc.grad(F.sum(F.tanh(x) * x), [x])
        ggx, = gc.grad(F.sum(gx * gx), [x])
        return ggx

    graph, _ = _traced(fn, [X])
    assert set(graph.count_by_order()) == {0, 1, 2}
    out = graph.nodes[graph.outputs[0].node]
    assert out.order == 2
    first = trace(lambda x: gc.grad(F.sum(F.tanh(x) * x), [x]), [X]).graph
    assert graph.count_by_order()[1] == first.count_by_order()[1]


# -- ONNX export ----------------------------------------------------------------------------------
def test_gradient_models_are_standard_onnx_and_load_in_onnxruntime():
    x, w = X.astype(np.float32), W.astype(np.float32)

    def second_order(x, w):
        gx, gw = gc.grad(F.sum(F.tanh(x @ w) ** 2), [x, w])
        return gc.grad(F.sum(gx * gx), [w])[0], gw

    assert set(trace(second_order, [x, w]).graph.count_by_order()) == {0, 1, 2}
    # gc.compile, onnx.checker (full_check), ai.onnx domains only, onnxruntime vs the reference evaluator
    check_lowering(second_order, [x, w])


# -- symbolic dims ----------------------------------------------------------------------------------
def test_symbolic_batch_broadcast_is_summed_back():
    def fn(x, b):
        return gc.grad(F.sum(F.tanh(x + b)), [b])[0]

    cf = gc.compile(fn, gc.spec(("batch", 3), "float64"), gc.spec((3,), "float64"), provider="cpu")
    b = np.array([0.1, -0.2, 0.3])
    for batch in (2, 5):
        x = RNG.standard_normal((batch, 3))
        gb = cf(x, b)
        assert gb.shape == (3,)
        np.testing.assert_allclose(gb, (1 - np.tanh(x + b) ** 2).sum(0), rtol=1e-12)


# -- the WGAN-GP example ----------------------------------------------------------------------------
def wgan_gp_penalty(x, w1, b1, w2, b2):
    d = F.relu(x @ w1 + b1) @ w2 + b2
    gx, = gc.grad(F.sum(d), [x])
    pen = F.mean((F.sqrt(F.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
    return pen, gc.grad(pen, [w1, b1, w2, b2])


def _numpy_penalty(x, w1, b1, w2, b2):
    mask = (x @ w1 + b1 > 0).astype(x.dtype)
    gx = (np.ones((x.shape[0], 1)) @ w2.T * mask) @ w1.T
    return np.mean((np.sqrt(np.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)


def test_wgan_gp_compiles_and_matches_finite_differences():
    rng = np.random.default_rng(3)
    params = [rng.standard_normal((4, 6)), rng.standard_normal(6), rng.standard_normal((6, 1)), rng.standard_normal(1)]
    cf = gc.compile(wgan_gp_penalty, gc.spec(("batch", 4), "float64"), *params, provider="cpu")
    assert set(cf.graph.count_by_order()) == {0, 1, 2}
    for batch in (3, 5):
        x = rng.standard_normal((batch, 4))
        pen, grads = cf(x, *params)
        np.testing.assert_allclose(pen, _numpy_penalty(x, *params), rtol=1e-10)
        eps = 1e-6
        for i, (p, g) in enumerate(zip(params, grads)):
            assert g.shape == p.shape
            numeric = np.zeros_like(p)
            for k in np.ndindex(p.shape):
                up, down = [q.copy() for q in params], [q.copy() for q in params]
                up[i][k] += eps
                down[i][k] -= eps
                numeric[k] = (_numpy_penalty(x, *up) - _numpy_penalty(x, *down)) / (2 * eps)
            np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-8)


def test_wgan_gp_in_float32_as_in_the_issue():
    rng = np.random.default_rng(4)
    args64 = [rng.standard_normal(s) for s in [(5, 4), (4, 6), (6,), (6, 1), (1,)]]
    args32 = [a.astype(np.float32) for a in args64]
    pen, grads = gc.compile(wgan_gp_penalty, gc.spec(("batch", 4), "float32"), *args32[1:], provider="cpu")(*args32)
    pen64, grads64 = gc.compile(wgan_gp_penalty, *args64, provider="cpu")(*args64)
    assert pen.dtype == np.float32 and all(g.dtype == np.float32 for g in grads)
    np.testing.assert_allclose(pen, pen64, rtol=1e-5)
    for g, g64 in zip(grads, grads64):
        np.testing.assert_allclose(g, g64, rtol=1e-4, atol=1e-5)


def test_check_grad_accepts_constant_outputs_beside_tensors():
    from gcompile.testing import check_grad
    x = np.random.default_rng(3).standard_normal((2, 3))
    check_grad(lambda x: (F.tanh(x), np.ones(2)), [x])


def test_check_grad_names_an_output_whose_size_the_values_decide():
    """An ONNX Loop whose trip count is an input stacks a run-time number of rows: check_grad cannot draw
    the weights of such an output and says so (it raised a TypeError from numpy)."""
    from onnx import TensorProto, helper
    value = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.DOUBLE),
         helper.make_node("Mul", ["x", "fi"], ["y"])], "body",
        [value("i", TensorProto.INT64, []), value("c", TensorProto.BOOL, [])],
        [value("c2", TensorProto.BOOL, []), value("y", TensorProto.DOUBLE, [2])])
    graph = helper.make_graph([helper.make_node("Loop", ["m", "cond"], ["ys"], body=body)], "loop",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2]),
                               helper.make_tensor_value_info("m", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("ys", TensorProto.DOUBLE, None)],
                              [helper.make_tensor(name="cond", data_type=TensorProto.BOOL, dims=[], vals=[True])])
    f = gc.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    with pytest.raises(ValueError, match="output 0 has shape .* decided by the values"):
        check_grad(lambda x, m: f(x, m), [np.array([1.0, 2.0]), np.asarray(3)], lowered=False)


# -- the VJP rule contract ------------------------------------------------------------------------
def _maximum_cotangents(g, ins, outs):
    """Left at the output's shape: gc.grad sums each back to its operand's shape."""
    first = F.greater_equal(ins[0], ins[1])
    return [F.where(first, g[0], 0.0), F.where(first, 0.0, g[0])]


def test_a_rule_may_leave_cotangents_at_the_broadcast_shape(scratch_op):
    scratch_op("test_max_unsummed", vjp=_maximum_cotangents)
    x, b = np.array([[0.5, -2.0, 3.0], [1.0, 4.0, -1.0]]), np.array([0.0, 1.0, 2.0])
    check_grad(lambda x, b: F.sum(apply("test_max_unsummed", [x, b]) ** 2), [x, b])


def test_a_rule_returning_a_gradient_its_input_cannot_broadcast_to_is_a_bug(scratch_op):
    scratch_op("test_max_bad_vjp", vjp=lambda g, ins, outs: [F.sum(g[0], axis=0), g[0]])
    with pytest.raises(AssertionError, match="vjp of test_max_bad_vjp: gradient float64"):
        trace(lambda x, b: gc.grad(F.sum(apply("test_max_bad_vjp", [x, b])), [x]),
              [np.zeros((2, 3)), np.zeros(3)])
