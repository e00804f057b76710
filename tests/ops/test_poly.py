"""ops/poly.py: polynomial evaluation (the closed-form derivatives of tanh and sigmoid) and silu's
derivatives of every order: forward on ONNX Runtime against numpy, numeric gradients to third
order, the edges (0, ±inf, NaN), the closed forms against formulas written here, and how few
nodes they lower to."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply, apply_n
from gcompile.frontend.trace import trace
from gcompile.ops import poly as P
from gcompile.passes import optimize

from ..opcheck import check_forward, check_grads

EDGES = np.array([0.0, -0.0, 1.0, -1.0, 30.0, -30.0, np.nan, np.inf, -np.inf])


def rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape)


def sig(x):
    return 0.5 * (1 + np.tanh(0.5 * x))


@pytest.mark.parametrize("coeffs", [(1.0, 0.0, -1.0), (0.0, 1.0, -1.0), (0.5, -2.0, 0.0, 3.0),
                                    (-1.0, 0.0, 0.0, 0.0, 2.0)])
def test_poly_forward_and_grads(coeffs):
    x = np.concatenate([rand(7), EDGES[:-2]])      # (numpy's polyval is NaN at ±inf, see below)
    expected = np.polynomial.polynomial.polyval(x, coeffs)
    for dtype in (np.float32, np.float64):
        check_forward(lambda y: apply("poly", [y], coeffs=coeffs), [x.astype(dtype)], expected.astype(dtype),
                      rtol=1e-5, atol=1e-5)
    check_grads(lambda y: apply("poly", [y], coeffs=coeffs), [rand(3, 2, seed=1)], order=3)


def test_poly_at_infinity_is_the_limit():
    inf = np.array([np.inf, -np.inf], np.float32)
    for coeffs, want in [(P.TANH_PRIME, [-np.inf, -np.inf]), (P.SIGMOID_PRIME, [-np.inf, -np.inf]),
                         ((0.5, -2.0, 0.0, 3.0), [np.inf, -np.inf])]:
        check_forward(lambda y, c=coeffs: apply("poly", [y], coeffs=c), [inf], np.array(want, np.float32))


def test_poly_lowers_to_few_nodes():
    def count(coeffs):
        cf = gc.compile(lambda y: apply("poly", [y], coeffs=coeffs), np.ones(3, np.float32), provider="cpu")
        return [n.op_type for n in cf.model.graph.node if n.op_type != "Identity"]
    assert count(P.TANH_PRIME) == ["Mul", "Sub"]          # 1 - y*y
    assert count(P.SIGMOID_PRIME) == ["Sub", "Mul"]       # (1 - s) * s
    assert len(count(P.sigmoid_derivatives(2)[2])) <= 6


def test_polynomial_helpers():
    assert P.derivative((1.0, 0.0, -1.0)) == (0.0, -2.0)
    assert P.derivative((3.0,)) == (0.0,)
    assert P.times((1.0, 1.0), (1.0, -1.0)) == (1.0, 0.0, -1.0)
    s = rand(5)
    for k, c in enumerate(P.sigmoid_derivatives(3)):   # against derivatives written out here
        want = [s, s * (1 - s), s * (1 - s) * (1 - 2 * s), s * (1 - s) * (1 - 6 * s + 6 * s * s)][k]
        np.testing.assert_allclose(np.polynomial.polynomial.polyval(s, c), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_silu_deriv_forward_and_grads(order):
    x = np.concatenate([rand(7), EDGES[:6]])        # finite points: 0, ±1, ±30
    s = sig(x)
    want = [None, s * (1 + x * (1 - s)), s * (1 - s) * (2 + x * (1 - 2 * s)),
            s * (1 - s) * (3 * (1 - 2 * s) + x * (1 - 6 * s + 6 * s * s))][order]
    for dtype in (np.float32, np.float64):
        check_forward(lambda x: P.silu_deriv(x, apply_n("silu", [x])[1], order), [x.astype(dtype)],
                      want.astype(dtype), rtol=1e-5, atol=1e-5)
    check_grads(lambda x: P.silu_deriv(x, apply_n("silu", [x])[1], order), [rand(3, 2, seed=2)], order=2)


def test_silu_through_both_outputs_and_at_the_edges():
    x = rand(3, 4, seed=3)
    check_grads(lambda x: F.silu(x) * apply_n("silu", [x])[1], [x], order=2)   # its sigmoid output too
    check_grads(F.silu, [x], order=3)
    edges = EDGES.astype(np.float32)
    y = gc.compile(F.silu, edges, provider="cpu")(edges)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(np.isnan(y), np.isnan(edges * sig(edges)))
    g = gc.compile(lambda x: gc.grad(F.sum(F.silu(x)), [x])[0], edges, provider="cpu")(edges)
    assert g[0] == 0.5 and g[4] == pytest.approx(1.0) and g[5] == pytest.approx(0.0, abs=1e-9)


def test_silu_keeps_the_dtype_it_had_as_a_product():
    assert gc.compile(F.silu, np.arange(3), provider="cpu")(np.arange(3)).dtype == np.float64
    assert gc.compile(F.silu, np.ones(3, np.float32), provider="cpu")(np.ones(3, np.float32)).dtype == np.float32


def test_second_order_graphs_are_small():
    """Force matching (energy of a SiLU MLP, forces = -dE/dx, then the parameter gradient): the
    second-order part has one silu_deriv per layer and order, no backward of a product."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((4, 8)), rng.standard_normal((8, 1))

    def step(x, w1, w2):
        energy = F.silu(x @ w1) @ w2
        fx, = gc.grad(F.sum(energy), [x])
        loss = F.sum(fx * fx)
        return gc.grad(loss, [w1, w2])
    graph = trace(step, [rng.standard_normal((5, 4)), w1, w2]).graph
    optimize(graph, 2)
    ops = [n.op for n in graph.nodes.values()]
    assert ops.count("silu_deriv") == 2 and "sigmoid" not in ops
    check_grads(step, [rng.standard_normal((5, 4)), w1, w2], order=1)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_gelu_deriv_forward_and_grads(order):
    from math import erf, pi, sqrt
    x = np.concatenate([rand(7), EDGES[:6], [np.nan]])
    pdf = np.exp(-x * x / 2) / sqrt(2 * pi)
    cdf = 0.5 * (1 + np.vectorize(erf)(x / sqrt(2)))
    want = [None, cdf + x * pdf, (2 - x * x) * pdf, (x ** 3 - 4 * x) * pdf][order]
    dtypes = (np.float32,) if order == 1 else (np.float32, np.float64)   # (no float64 Erf on the CPU)
    for dtype in dtypes:
        check_forward(lambda x: P.gelu_deriv(x, order), [x.astype(dtype)], want.astype(dtype), rtol=1e-5, atol=1e-6)
    check_grads(lambda x: P.gelu_deriv(x, order), [rand(3, 2, seed=4)], order=2)
    assert P.gelu_polys(3) == (0.0, -4.0, 0.0, 1.0)


def test_gelu_through_its_closed_forms():
    x = rand(3, 4, seed=5)
    check_grads(F.gelu, [x], order=3)
    graph = trace(lambda x: gc.grad(F.sum(gc.grad(F.sum(F.gelu(x)), [x])[0]), [x])[0], [x]).graph
    optimize(graph, 2)
    ops = [n.op for n in graph.nodes.values()]
    assert "gelu_deriv" in ops and "erf" not in ops and "exp" not in ops
