"""The exact second-order identities of ARCHITECTURE.md §9.2, checked on the generated gradient graphs.

Each test differentiates a backward graph ⟨g, backward(dy)⟩ and compares the result,
evaluated in float64 by the reference evaluator, with its closed form computed in numpy.
"""
import numpy as np
import pytest

import gcompile as gc
from gcompile import functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

RNG = np.random.default_rng(7)
EXACT = dict(rtol=1e-10, atol=1e-13)


def _run(fn, *arrays):
    return evaluate(trace(fn, list(arrays)).graph, list(arrays))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _softmax_vjp(p, c, axis):
    return p * (c - (p * c).sum(axis, keepdims=True))


def test_power_with_constant_base():
    a = 2.5
    x, dy, g = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))

    def fn(x, dy, g):
        dx, = gc.grad(a ** x, [x], [dy])
        return [dx] + gc.grad(F.sum(g * dx), [x, dy])

    dx, ddx, ddy = _run(fn, x, dy, g)
    ax, ln = a ** x, np.log(a)
    np.testing.assert_allclose(dx, dy * ax * ln, **EXACT)
    np.testing.assert_allclose(ddx, g * dy * ax * ln ** 2, **EXACT)
    np.testing.assert_allclose(ddy, g * ax * ln, **EXACT)


def test_affine_backward_is_bilinear():
    x, w, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2)), RNG.standard_normal(2)
    dy, g_dx, g_dw, g_db = (RNG.standard_normal(s) for s in [(3, 2), (3, 4), (4, 2), (2,)])

    def fn(x, w, b, dy, g_dx, g_dw, g_db):
        dx, dw, db = gc.grad(x @ w + b, [x, w, b], [dy])
        s = F.sum(g_dx * dx) + F.sum(g_dw * dw) + F.sum(g_db * db)
        return [dx, dw, db] + gc.grad(s, [dy, x, w, b])

    dx, dw, db, d_dy, d_x, d_w, d_b = _run(fn, x, w, b, dy, g_dx, g_dw, g_db)
    np.testing.assert_allclose(dx, dy @ w.T, **EXACT)
    np.testing.assert_allclose(dw, x.T @ dy, **EXACT)
    np.testing.assert_allclose(db, dy.sum(0), **EXACT)
    np.testing.assert_allclose(d_dy, g_dx @ w + x @ g_dw + g_db, **EXACT)
    np.testing.assert_allclose(d_x, dy @ g_dw.T, **EXACT)
    np.testing.assert_allclose(d_w, g_dx.T @ dy, **EXACT)
    assert not d_b.any()    # the backward does not depend on b


@pytest.mark.parametrize("axis", [-1, 0])
def test_log_softmax_double_backward(axis):
    x, dy, g = (RNG.standard_normal((3, 4)) for _ in range(3))

    def fn(x, dy, g):
        dx, = gc.grad(F.log_softmax(x, axis=axis), [x], [dy])
        return [dx] + gc.grad(F.sum(g * dx), [x, dy])

    dx, ddx, ddy = _run(fn, x, dy, g)
    p = _softmax(x, axis)
    np.testing.assert_allclose(dx, dy - p * dy.sum(axis, keepdims=True), **EXACT)
    # w.r.t. x: softmax's VJP applied to g·(−Σdy)
    np.testing.assert_allclose(ddx, _softmax_vjp(p, -g * dy.sum(axis, keepdims=True), axis), **EXACT)
    # w.r.t. dy: the map dy ↦ dx is Jᵀ (J = log_softmax's Jacobian), so this is J·g = g − Σ(p·g)
    np.testing.assert_allclose(ddy, g - (p * g).sum(axis, keepdims=True), **EXACT)


def test_softmax_cross_entropy_double_backward():
    x, g, dz = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4)), RNG.standard_normal(3)
    t = np.array([2, 0, 3])

    def fn(x, t, dz, g):
        dx, = gc.grad(F.softmax_cross_entropy(x, t, reduce="none"), [x], [dz])
        return [dx] + gc.grad(F.sum(g * dx), [x, dz])

    dx, ddx, ddz = _run(fn, x, t, dz, g)
    p, onehot = _softmax(x, -1), np.eye(4)[t]
    np.testing.assert_allclose(dx, (p - onehot) * dz[:, None], **EXACT)
    np.testing.assert_allclose(ddx, _softmax_vjp(p, g * dz[:, None], -1), **EXACT)
    np.testing.assert_allclose(ddz, (g * (p - onehot)).sum(1), **EXACT)


@pytest.mark.parametrize("reduce, scale", [("mean", 1 / 3), ("sum", 1.0)])
def test_softmax_cross_entropy_reduced(reduce, scale):
    x, g, dz = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4)), np.asarray(0.7)
    t = np.array([1, 1, 0])

    def fn(x, t, dz, g):
        dx, = gc.grad(F.softmax_cross_entropy(x, t, reduce=reduce), [x], [dz])
        return [dx] + gc.grad(F.sum(g * dx), [dz])

    dx, ddz = _run(fn, x, t, dz, g)
    p, onehot = _softmax(x, -1), np.eye(4)[t]
    np.testing.assert_allclose(dx, (p - onehot) * dz * scale, **EXACT)
    np.testing.assert_allclose(ddz, (g * (p - onehot)).sum() * scale, **EXACT)


def test_convolution_backward_is_bilinear():
    x, w, b = RNG.standard_normal((2, 4, 5, 5)), RNG.standard_normal((6, 2, 3, 3)), RNG.standard_normal(6)
    conv = dict(stride=2, pad=1, groups=2)
    dy = RNG.standard_normal((2, 6, 3, 3))
    g_dx, g_dw, g_db = RNG.standard_normal(x.shape), RNG.standard_normal(w.shape), RNG.standard_normal(b.shape)

    def fn(x, w, b, dy, g_dx, g_dw, g_db):
        dx, dw, db = gc.grad(F.conv(x, w, b, **conv), [x, w, b], [dy])
        s = F.sum(g_dx * dx) + F.sum(g_dw * dw) + F.sum(g_db * db)
        expected = F.conv(g_dx, w, **conv) + F.conv(x, g_dw, **conv) + F.reshape(g_db, (1, 6, 1, 1))
        return gc.grad(s, [dy])[0], expected

    got, expected = _run(fn, x, w, b, dy, g_dx, g_dw, g_db)
    np.testing.assert_allclose(got, expected, **EXACT)
