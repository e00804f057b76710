"""gc.value_and_grad, vjp, jvp, hvp, jacobian, hessian against closed forms and finite
differences, each compiled through ONNX/onnxruntime (float64) and compared with the
reference evaluator by gcompile.testing.check_lowering."""
import numpy as np
import pytest

import gcompile as gc
from gcompile import functions as F
from gcompile.frontend.trace import trace
from gcompile.testing import check_lowering

RNG = np.random.default_rng(5)
X, W = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
TIGHT = dict(rtol=1e-10, atol=1e-12)


def _run(fn, *arrays):
    """Outputs of fn from onnxruntime, after check_lowering compared them with the reference evaluator."""
    return check_lowering(fn, list(arrays), rtol=1e-10, atol=1e-12)


def _dead_nodes(fn, *arrays) -> list[str]:
    """Names of the nodes (other than inputs) no output of fn depends on."""
    graph = trace(fn, list(arrays)).graph
    live = set().union(*({r.node} | graph.ancestors(r.node) for r in graph.outputs))
    return [n.name for n in graph.nodes.values() if n.op != "input" and n.id not in live]


def _central(fn, arrays, directions, eps=1e-6):
    """(fn(a + εd) − fn(a − εd)) / 2ε for a numpy fn returning an array or a tuple of arrays."""
    up = fn(*[a + eps * d for a, d in zip(arrays, directions)])
    down = fn(*[a - eps * d for a, d in zip(arrays, directions)])
    if isinstance(up, tuple):
        return tuple((u - v) / (2 * eps) for u, v in zip(up, down))
    return (up - down) / (2 * eps)


def _loss(x, w):
    return F.sum(F.tanh(x @ w))


def _loss_grads(x, w):
    dt = 1 - np.tanh(x @ w) ** 2
    return dt @ w.T, x.T @ dt


# -- value_and_grad ---------------------------------------------------------------------------------
def test_value_and_grad_int_and_tuple_argnums():
    value, gw = _run(gc.value_and_grad(_loss, argnums=1), X, W)
    np.testing.assert_allclose(value, np.tanh(X @ W).sum(), **TIGHT)
    np.testing.assert_allclose(gw, _loss_grads(X, W)[1], **TIGHT)

    def both(x, w):
        value, (gx, gw) = gc.value_and_grad(_loss, argnums=(0, 1))(x, w)
        return value, gx, gw

    _, gx, gw = _run(both, X, W)
    for got, expected in zip((gx, gw), _loss_grads(X, W)):
        np.testing.assert_allclose(got, expected, **TIGHT)


def test_value_and_grad_needs_a_scalar_function():
    with pytest.raises(gc.GcompileError, match="scalar"):
        trace(gc.value_and_grad(lambda x: F.tanh(x)), [X])
    with pytest.raises(gc.GcompileError, match="argnums"):
        trace(gc.value_and_grad(_loss, argnums=2), [X, W])


# -- vjp --------------------------------------------------------------------------------------------
def test_vjp_of_two_outputs():
    c1, c2 = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 4))

    def fn(x, w, c1, c2):
        (y1, y2), vjp_fn = gc.vjp(lambda x, w: (F.tanh(x @ w), F.sin(x)), x, w)
        gx, gw = vjp_fn((c1, c2))
        return y1, gx, gw

    y1, gx, gw = _run(fn, X, W, c1, c2)
    dt = c1 * (1 - np.tanh(X @ W) ** 2)
    np.testing.assert_allclose(y1, np.tanh(X @ W), **TIGHT)
    np.testing.assert_allclose(gx, dt @ W.T + c2 * np.cos(X), **TIGHT)
    np.testing.assert_allclose(gw, X.T @ dt, **TIGHT)


def test_vjp_of_one_output_and_cotangent_count_error():
    c = RNG.standard_normal(4)

    def fn(x, c):
        y, vjp_fn = gc.vjp(lambda x: F.exp(x), x)
        return vjp_fn(c)[0]

    np.testing.assert_allclose(_run(fn, X[0], c)[0], c * np.exp(X[0]), **TIGHT)

    def wrong(x):
        _, vjp_fn = gc.vjp(lambda x: (F.exp(x), x * x), x)
        return vjp_fn([x])

    with pytest.raises(gc.GcompileError, match="2 outputs but 1 cotangents"):
        trace(wrong, [X])


# -- jvp --------------------------------------------------------------------------------------------
def _two_outputs(x, w):
    return F.tanh(x @ w), x * F.exp(x)


def _two_outputs_np(x, w):
    return np.tanh(x @ w), x * np.exp(x)


def test_jvp_matches_finite_differences():
    tx, tw = RNG.standard_normal(X.shape), RNG.standard_normal(W.shape)

    def fn(x, w, tx, tw):
        outputs, tangents = gc.jvp(_two_outputs, (x, w), (tx, tw))
        return outputs + tangents

    y1, y2, t1, t2 = _run(fn, X, W, tx, tw)
    np.testing.assert_allclose(y1, np.tanh(X @ W), **TIGHT)
    numeric = _central(_two_outputs_np, [X, W], [tx, tw])
    np.testing.assert_allclose(t1, numeric[0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(t2, numeric[1], rtol=1e-7, atol=1e-9)
    assert _dead_nodes(fn, X, W, tx, tw) == []    # the cotangent placeholders are gone


def test_jvp_single_output_and_unused_primal():
    def fn(x, w, tx, tw):
        y, t = gc.jvp(lambda x, w: F.sin(x), [x, w], [tx, tw])
        return t

    tx, tw = RNG.standard_normal(X.shape), RNG.standard_normal(W.shape)
    np.testing.assert_allclose(_run(fn, X, W, tx, tw)[0], np.cos(X) * tx, **TIGHT)
    with pytest.raises(gc.GcompileError, match="tangents"):
        trace(lambda x, t: gc.jvp(F.sin, (x,), (t,)), [X, W])


# -- hvp --------------------------------------------------------------------------------------------
def test_hvp_matches_finite_differences_of_the_gradient():
    vx, vw = RNG.standard_normal(X.shape), RNG.standard_normal(W.shape)

    def fn(x, w, vx, vw):
        return gc.hvp(lambda x, w: F.sum(F.tanh(x @ w) ** 2), (x, w), (vx, vw))

    def grads_np(x, w):
        t = np.tanh(x @ w)
        dt = 2 * t * (1 - t ** 2)
        return dt @ w.T, x.T @ dt

    hx, hw = _run(fn, X, W, vx, vw)
    numeric = _central(grads_np, [X, W], [vx, vw])
    np.testing.assert_allclose(hx, numeric[0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(hw, numeric[1], rtol=1e-7, atol=1e-9)
    assert _dead_nodes(fn, X, W, vx, vw) == []    # nor the value of fn, which hvp does not return


def test_hvp_single_primal_closed_form():
    x, v = RNG.standard_normal(4), RNG.standard_normal(4)
    hv, = _run(lambda x, v: gc.hvp(lambda x: F.sum(F.exp(x)) + F.sum(x) ** 2, x, v), x, v)
    np.testing.assert_allclose(hv, np.exp(x) * v + 2 * v.sum(), **TIGHT)


# -- jacobian and hessian -------------------------------------------------------------------------------
def test_jacobian_of_a_vector_function():
    a, x = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    jac, = _run(gc.jacobian(lambda x, a: F.tanh(a @ x)), x, a)
    assert jac.shape == (3, 4)
    np.testing.assert_allclose(jac, (1 - np.tanh(a @ x) ** 2)[:, None] * a, **TIGHT)


def test_jacobian_shapes_follow_out_shape_plus_in_shape():
    x, w = RNG.standard_normal((2, 3)), RNG.standard_normal(3)

    def fn(x, w):
        return gc.jacobian(lambda x, w: (x * x * w, F.sum(x, axis=0)), argnums=(0, 1))(x, w)

    dx1, dw1, dx2, dw2 = _run(fn, x, w)
    eye_x = np.eye(6).reshape(2, 3, 2, 3)
    np.testing.assert_allclose(dx1, eye_x * (2 * x * w)[:, :, None, None], **TIGHT)
    np.testing.assert_allclose(dw1, np.eye(3)[None] * (x * x)[:, :, None], **TIGHT)
    np.testing.assert_allclose(dx2, np.eye(3)[:, None, :] * np.ones((3, 2, 1)), **TIGHT)
    assert dw2.shape == (3, 3) and not dw2.any()


def test_hessian_closed_form():
    a, x = RNG.standard_normal((4, 4)), RNG.standard_normal(4)
    hess, = _run(gc.hessian(lambda x, a: 0.5 * F.sum(x * (a @ x)) + F.sum(F.exp(x))), x, a)
    np.testing.assert_allclose(hess, (a + a.T) / 2 + np.diag(np.exp(x)), **TIGHT)


def test_hessian_blocks_for_tuple_argnums():
    x, y = RNG.standard_normal(3), RNG.standard_normal(2)
    hxx, hxy, hyx, hyy = _run(gc.hessian(lambda x, y: F.sum(F.sin(x)) * F.sum(y * y), argnums=(0, 1)), x, y)
    np.testing.assert_allclose(hxx, np.diag(-np.sin(x)) * (y * y).sum(), **TIGHT)
    np.testing.assert_allclose(hxy, np.outer(np.cos(x), 2 * y), **TIGHT)
    np.testing.assert_allclose(hyx, np.outer(2 * y, np.cos(x)), **TIGHT)
    np.testing.assert_allclose(hyy, 2 * np.eye(2) * np.sin(x).sum(), **TIGHT)


def test_jacobian_and_hessian_refuse_symbolic_dims():
    spec = gc.spec(("batch", 3), "float64")
    with pytest.raises(gc.GcompileError, match="static shapes"):
        trace(gc.jacobian(F.tanh), [spec])
    with pytest.raises(gc.GcompileError, match="scalar"):
        trace(gc.hessian(F.tanh), [np.ones(3)])


def test_jvp_and_hvp_with_a_symbolic_batch():
    def fn(x, t, w):
        _, jt = gc.jvp(lambda x: F.tanh(x @ w), (x,), (t,))
        hv = gc.hvp(lambda x: F.sum(F.exp(x) * x), x, t)
        return jt, hv

    batch = gc.spec(("batch", 3), "float64")
    cf = gc.compile(fn, batch, batch, gc.spec((3, 2), "float64"), provider="cpu")
    w = RNG.standard_normal((3, 2))
    for n in (1, 4):
        x, t = RNG.standard_normal((n, 3)), RNG.standard_normal((n, 3))
        jt, hv = cf(x, t, w)
        np.testing.assert_allclose(jt, (1 - np.tanh(x @ w) ** 2) * (t @ w), **TIGHT)
        np.testing.assert_allclose(hv, np.exp(x) * (x + 2) * t, **TIGHT)
