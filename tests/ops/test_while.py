"""Reverse mode through gc.while_loop: gradients against float64 central differences (on the
reference evaluator and on the ONNX models ONNX Runtime runs, for the ort-cpu and portable
targets, at static and symbolic sizes) at zero, one and several steps, with a data-dependent stop,
of the carries and of closed-over values, to second order; and the shape of what is built (the
forward Loop stacks the carries, the backward is a Scan, nothing is unrolled)."""
import numpy as np
import onnx
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad

from ..opcheck import check_grads

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 3)) * 0.5
X = RNG.standard_normal((2, 3)) * 0.3


def counted(x, w, steps):
    """h <- tanh(h @ w) + h, `steps` times, counted by an int carry; the loss reads the final h and x."""
    def body(v):
        h, k = v
        return F.tanh(h @ w) * 0.7 + h, k + 1
    h, k = gc.while_loop(lambda v: v[1] < steps, body, (x, np.int64(0)))
    return F.sum(h * h) + F.sum(x * h), k


def loss(x, w, steps):
    return counted(x, w, steps)[0]


def onnx_ops(graph) -> list[str]:
    return [n.op_type for n in graph.node] + [op for n in graph.node for a in n.attribute
                                              if a.type == onnx.AttributeProto.GRAPH for op in onnx_ops(a.g)]


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_gradients_at_zero_one_and_several_steps(steps):
    assert int(evaluate(trace(counted, [X, W, np.int64(steps)]).graph, [X, W, np.int64(steps)])[1]) == steps
    check_grads(lambda x, w: loss(x, w, steps), [X, W], order=2)   # static and symbolic (x's axis 0), both targets


def test_the_loop_stays_a_loop_forward_and_backward():
    def fn(x, w):
        return gc.grad(loss(x, w, 50), [x, w])
    cf = gc.compile(fn, gc.spec(("n", 3)), gc.spec((3, 3)))
    ops = onnx_ops(cf.model.graph)
    assert ops.count("Loop") == 1 and ops.count("Scan") == 1 and ops.count("Tanh") <= 3
    gx, gw = cf(X.astype(np.float32), W.astype(np.float32))
    ref = evaluate(cf.graph, [X, W])
    np.testing.assert_allclose(gx, ref[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw, ref[1], rtol=1e-4, atol=1e-5)


def test_a_run_time_number_of_steps():
    """The trip count is an input: one model serves every count, zero included."""
    def fn(x, w, steps):
        return gc.grad(loss(x, w, steps), [x, w])
    cf = gc.compile(fn, gc.spec(("n", 3)), gc.spec((3, 3)), gc.spec((), np.int64))
    for steps in (0, 1, 3, 7):
        got = cf(X.astype(np.float32), W.astype(np.float32), np.int64(steps))
        expected = evaluate(trace(fn, [X, W, np.int64(steps)]).graph, [X, W, np.int64(steps)])
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", ["ort-cpu", "portable"])
def test_an_empty_batch_at_run_time(target):
    """A batch of zero examples: the stacked carries the backward reads are rows (steps, 1, 0, 3),
    which the Reshape after the Loop read as (steps, 1, 3) (an ONNX 0 copies the input's dim) and
    failed; likewise the ys of a scan with no xs, a counted Loop on the portable target."""
    def fn(x, w, steps):
        def body(v):
            h, k = v
            return F.tanh(h @ w) + h * 0.5, k + 1
        h, _ = gc.while_loop(lambda v: v[1] < steps, body, (x, np.int64(0)))
        h2, ys = gc.scan(lambda c, _: (F.sin(c @ w), c * 2), h, None, length=3)
        return gc.grad(F.sum(h2 * h2) + F.sum(ys), [x, w])
    cf = gc.compile(fn, gc.spec(("n", 3)), gc.spec((3, 3)), gc.spec((), np.int64), provider="cpu", target=target)
    for steps in (0, 1, 3):
        gx, gw = cf(np.zeros((0, 3), np.float32), W.astype(np.float32), np.int64(steps))
        assert gx.shape == (0, 3)
        np.testing.assert_array_equal(gw, np.zeros((3, 3)))


def test_a_data_dependent_stop():
    """Iterate x <- x - 0.5 * tanh(x * w) until |x| < tol: the number of steps depends on the
    values (and stays the same for the small shifts of the central difference)."""
    def fn(x, w):
        y = gc.while_loop(lambda v: F.max(F.abs(v)) > 1e-2, lambda v: v - 0.5 * F.tanh(v * w), x)
        return F.sum(y * x) + F.sum(y * y) * 100

    x, w = np.array([0.8, -0.5, 0.3]), np.array([1.1, 0.9, 1.3])
    steps = 0
    v = x
    while np.max(np.abs(v)) > 1e-2:
        v, steps = v - 0.5 * np.tanh(v * w), steps + 1
    assert steps > 3
    check_grads(fn, [x, w], order=2)


def test_gradients_of_closed_over_values_and_pytree_carries():
    def fn(x, w, b):
        def body(c):
            h, (s, k) = c
            h = F.tanh(h @ w + b)
            return h, (s + F.sum(h * b), k + 1)
        h, (s, k) = gc.while_loop(lambda c: c[1][1] < 3, body, (x, (F.sum(x) * 0, np.int64(0))))
        return F.sum(h) * s
    check_grads(fn, [X, W, RNG.standard_normal(3)], order=2)


def test_third_order_through_the_loop():
    for order in (1, 2, 3):
        check_grad(lambda x, w: loss(x, w, 3), [X, W], order=order, symbolic=False)


def test_hvp_and_jacobian_through_the_loop():
    def fn(x, w):
        return gc.hvp(lambda w: loss(x, w, 3), w, F.ones_like(w))
    got = gc.compile(fn, X.astype(np.float32), W.astype(np.float32))(X.astype(np.float32), W.astype(np.float32))
    unrolled = gc.compile(lambda x, w: gc.hvp(lambda w: F.sum(_unrolled(x, w, 3) ** 2) + F.sum(x * _unrolled(x, w, 3)),
                                              w, F.ones_like(w)), X, W)(X, W)
    np.testing.assert_allclose(got, unrolled, rtol=1e-4, atol=1e-5)


def _unrolled(x, w, steps):
    h = x
    for _ in range(steps):
        h = F.tanh(h @ w) * 0.7 + h
    return h


def test_gradient_matches_the_unrolled_loop_exactly():
    _, looped = check_grad(lambda x, w: loss(x, w, 5), [X, W], lowered=False)
    _, unrolled = check_grad(lambda x, w: F.sum(_unrolled(x, w, 5) ** 2) + F.sum(x * _unrolled(x, w, 5)), [X, W],
                             lowered=False)
    assert looped == pytest.approx(unrolled, rel=1e-10)


def test_vmap_of_the_loop_still_runs_each_example_to_its_own_end():
    def fn(x):
        return gc.while_loop(lambda v: F.sum(v) < 10, lambda v: v * 2 + 0.1, x)
    xs = np.array([[1.0, 1.0], [0.1, 0.2], [6.0, 6.0]])
    got = gc.compile(gc.vmap(fn), xs)(xs)
    expected = []
    for x in xs:
        while x.sum() < 10:
            x = x * 2 + 0.1
        expected.append(x)
    np.testing.assert_allclose(got, np.array(expected), rtol=1e-6)


def test_gradient_of_a_vmapped_loop():
    """grad outside vmap: the batched loop (an `active` mask, finished examples kept) differentiates."""
    def fn(xs):
        ys = gc.vmap(lambda x: gc.while_loop(lambda v: F.sum(v * v) < 4, lambda v: v * 1.5 + 0.1, x))(xs)
        return F.sum(ys * ys)
    check_grad(fn, [np.array([[1.0, 1.0], [0.1, 0.2], [1.5, 0.5]])], symbolic=False)


def test_per_example_gradients_through_a_loop_of_a_shared_count():
    """vmap(grad(...)) where every example takes the same number of steps: the loops run in step."""
    def fn(xs, w):
        return F.sum(gc.vmap(lambda x: gc.grad(loss(x, w, 3), [x])[0])(xs) ** 2)
    check_grad(fn, [np.stack([X, 2 * X]), W], symbolic=False)


def test_per_example_gradients_through_checkpoint_every_blocks():
    """checkpoint_every's inner while carries the outer loop's step counter, which no example changes:
    batched, it came out of the inner loop marked per-example, the outer loop's condition became
    per-example and the gradient inside vmap was refused as stopping at a different step for each."""
    def fn(xs, w):
        def per(x):
            h, _ = gc.while_loop(lambda v: v[1] < 5, lambda v: (F.sin(v[0] * w) + v[0], v[1] + 1), (x, np.int64(0)),
                                 checkpoint_every=2)
            return gc.grad(F.sum(h * h), [x])[0]
        return F.sum(gc.vmap(per)(xs) ** 2)
    check_grad(fn, [RNG.standard_normal((3, 2)), np.array([1.1, 0.7])], symbolic=False)


def test_per_example_gradients_of_loops_stopping_at_different_steps_are_refused():
    def per(x):
        y = gc.while_loop(lambda v: F.sum(v * v) < 4, lambda v: v * 1.5 + 0.1, x)
        return gc.grad(F.sum(y * y), [x])[0]
    with pytest.raises(gc.errors.UnsupportedError, match="stops at a different step for each example"):
        trace(gc.vmap(per), [np.ones((3, 2))])


def test_a_loop_inside_a_scan_body_differentiates():
    """The scan's backward recomputes the inner loop (its stacked carries change length from step to
    step, so the outer loop cannot stack them)."""
    def fn(xs, w):
        def step(h, x):
            h2 = gc.while_loop(lambda v: F.sum(v * v) < 4.0, lambda v: F.tanh(v @ w) + v + x, h)
            return h2 * 0.1, F.sum(h2)
        h, ys = gc.scan(step, xs[0], xs)
        return F.sum(h * h) + F.sum(ys)
    check_grad(fn, [RNG.standard_normal((3, 3)) * 0.2, W], symbolic=False)



def test_checkpoint_every_with_a_closed_over_bias():
    """A bias's gradient is a sum over steps, which passes/loops.py moves out of a backward loop; in the
    backward of checkpoint_every=3 over 5 steps the blocks reversed take 3 steps and then 2, so those
    sums must stay in the loop over blocks (the model failed to lower; the neural ODE found it)."""
    def fn(x, w, b, every):
        def body(v):
            h, k = v
            return F.tanh(h @ w + b) * 0.7 + h, k + 1
        h, _ = gc.while_loop(lambda v: v[1] < 5, body, (x, np.int64(0)), checkpoint_every=every)
        return F.sum(h * h)
    b = RNG.standard_normal(3) * 0.3
    _, blocked = check_grad(lambda x, w, b: fn(x, w, b, 3), [X, W, b], symbolic=False)
    _, plain = check_grad(lambda x, w, b: fn(x, w, b, None), [X, W, b], lowered=False)
    assert blocked == pytest.approx(plain, rel=1e-10)

# -- implicit differentiation: gc.custom_root and gc.fixed_point --------------------------------------------------
def _g(x, a, d):
    return F.tanh(x @ a) + x - F.mean(d, axis=0)


def _newton_loss(a, d, implicit):
    from gcompile.gradients.implicit import newton
    x0 = F.full((3,), 0, a.dtype)
    x = gc.custom_root(_g, x0, a, d, tol=1e-12) if implicit else newton(lambda x: _g(x, a, d), x0, tol=1e-12)
    return F.sum(x * x) + F.sum(x)


D = RNG.standard_normal((4, 3)) * 0.5


def test_newton_by_reversal_and_implicitly_agree_to_second_order():
    """The same Newton solver (a while loop until |g| < tol) differentiated by reversing its loop and
    by the implicit function theorem: at the root both give the implicit function's derivatives."""
    for order in (1, 2):
        _, implicit = check_grad(lambda a, d: _newton_loss(a, d, True), [W, D], order=order, symbolic=False, rtol=1e-6)
        _, reversal = check_grad(lambda a, d: _newton_loss(a, d, False), [W, D], order=order, symbolic=False,
                                 rtol=1e-6)
        assert implicit == pytest.approx(reversal, rel=1e-7)


def test_custom_root_gradients_at_static_and_symbolic_sizes():
    check_grads(lambda d, a: _newton_loss(a, d, True), [D, W], order=2)   # d's axis 0 symbolic


def test_implicit_gradient_reverses_no_loop():
    def fn(a, d):
        return gc.grad(_newton_loss(a, d, True), [a, d])
    ops = onnx_ops(gc.compile(fn, W.astype(np.float32), D.astype(np.float32)).model.graph)
    assert ops.count("Loop") == 1 and "Scan" not in ops     # the solver's forward loop only


def test_fixed_point_gradients_and_closed_over_values():
    def fn(a, b):
        c = b * 2
        x = gc.fixed_point(lambda x, a: 0.5 * F.tanh(x @ a) + c, F.zeros_like(b), a, tol=1e-12)
        return F.sum(x * x)
    check_grads(fn, [W, RNG.standard_normal(3) * 0.5], order=2)


def test_custom_root_with_a_solver_of_ones_own_and_its_errors():
    def bisect(h, x):   # a scalar root by 60 halvings of [-2, 2] (h increasing)
        def step(v):
            lo, hi = v
            mid = (lo + hi) / 2
            up = h(mid) > 0
            return F.where(up, lo, mid), F.where(up, mid, hi)
        lo, hi = gc.fori_loop(0, 60, lambda i, v: step(v), (x - 2, x + 2))
        return (lo + hi) / 2

    def fn(t):
        return gc.custom_root(lambda x, t: x ** 3 + x - t, F.zeros_like(t), t, solver=bisect)
    t = np.array([0.7])
    x = float(evaluate(trace(fn, [t]).graph, [t])[0][0])
    assert x ** 3 + x == pytest.approx(0.7, abs=1e-12)
    check_grad(fn, [t], symbolic=False, rtol=1e-6)
    slope = evaluate(trace(lambda t: gc.grad(F.sum(fn(t)), [t]), [t]).graph, [t])[0]
    assert float(slope[0]) == pytest.approx(1 / (3 * x * x + 1), rel=1e-9)   # dx/dt = 1 / g'(x)
    with pytest.raises(gc.errors.ShapeError, match="one value per element of x"):
        trace(lambda t: gc.custom_root(lambda x, t: F.sum(x) - t, F.full((2,), 0, t.dtype), t,
                                       solver=lambda h, x: x), [t])


def test_iterative_adjoints_agree_with_the_dense_solve_to_second_order():
    """adjoint='iterative' (conjugate gradients on the normal equations for custom_root, u <- x̄ + (∂f/∂x)ᵀu
    for fixed_point) solves the same system as the dense solve, to the same derivatives."""
    b = RNG.standard_normal(3) * 0.5

    def fixed(a, b, adjoint):
        return F.sum(gc.fixed_point(lambda x, a: 0.5 * F.tanh(x @ a) + b, F.zeros_like(b), a, tol=1e-12,
                                    adjoint=adjoint) ** 2)

    def root(a, d, adjoint):
        x = gc.custom_root(_g, F.full((3,), 0, a.dtype), a, d, tol=1e-12, adjoint=adjoint)
        return F.sum(x * x) + F.sum(x)
    for order in (1, 2):
        for loss, inputs in ((fixed, [W, b]), (root, [W, D])):
            dense, iterative = (check_grad(lambda p, q, loss=loss, adjoint=adjoint: loss(p, q, adjoint), inputs,
                                           order=order, symbolic=False, rtol=1e-6)[1]
                                for adjoint in ("dense", "iterative"))
            assert iterative == pytest.approx(dense, rel=1e-8)


def test_custom_root_iterative_solves_newton_steps_without_a_jacobian():
    """With adjoint='iterative' the default solver is Newton-Krylov: each Newton step solved by conjugate
    gradients on the normal equations (a JVP and a VJP of g a step), so a batch of roots of symbolic size
    needs no solver of one's own; the roots and their derivatives to second order are the implicit
    function's, and no Jacobian is built (no node per element of x)."""
    def roots(z, a):
        return gc.custom_root(lambda x, a: x + 0.5 * F.tanh(x @ a) - z, F.zeros_like(z), a, adjoint="iterative",
                              tol=1e-12)
    z = RNG.standard_normal((4, 3))
    x = evaluate(trace(roots, [z, W]).graph, [z, W])[0]
    np.testing.assert_allclose(x + 0.5 * np.tanh(x @ W), z, atol=1e-11)
    check_grads(lambda z, a: F.sum(roots(z, a) ** 3), [z, W], order=2, rtol=1e-6)   # z's axis 0 symbolic
    small, large = (len(trace(roots, [RNG.standard_normal((n, 3)), W]).graph.nodes) for n in (2, 40))
    assert small == large


def test_a_dense_solve_over_more_unknowns_than_the_solver_takes_points_at_the_iterative_adjoint():
    """x of 40 elements: the dense solve (J one VJP per element, Gauss-Jordan written out) stops at
    MAX_SOLVE_SIZE unknowns; the refusal used to come from deep in the gradient's solve, naming a matrix
    the user never made. It now names x and adjoint='iterative', which works (a forward-only fixed_point
    of that size is fine: only its gradient solves)."""
    b = RNG.standard_normal(40) * 0.5
    x = np.zeros(40)
    for _ in range(200):
        x = 0.5 * np.tanh(x) + b
    cases = [(gc.fixed_point, lambda x, b: 0.5 * F.tanh(x) + b), (gc.custom_root, lambda x, b: x - 0.5 * F.tanh(x) - b)]
    for solve, f in cases:
        def slope(b, solve=solve, f=f, **options):
            return gc.grad(F.sum(solve(f, F.zeros_like(b), b, **options)), [b])[0]
        with pytest.raises(gc.errors.ShapeError, match="40 unknowns.*at most 32. Pass adjoint='iterative'"):
            trace(slope, [b])
        g = evaluate(trace(lambda b, slope=slope: slope(b, adjoint="iterative", tol=1e-12), [b]).graph, [b])[0]
        np.testing.assert_allclose(g, 1 / (1 - 0.5 / np.cosh(x) ** 2), rtol=1e-9)     # dx/db, elementwise
    trace(lambda b: gc.fixed_point(cases[0][1], F.zeros_like(b), b), [b])


def test_return_info_says_at_run_time_whether_the_solve_converged():
    """fixed_point and custom_root stopped by max_steps return their last iterate; return_info=True adds a
    RootInfo whose `converged` is decided at run time: one compiled function converges for one input and not
    for another, with the residual and step count to show it, and a NaN residual is not converged."""
    def solve(a, b):
        # x = a·x + b contracts by a factor a: a few steps for a = 0.2, thousands for a = 0.999
        x, info = gc.fixed_point(lambda x, a: a * x + b, F.zeros_like(b), a, tol=1e-6, max_steps=30,
                                 return_info=True)
        # y³ + y/a = b from 0 by Newton's method: a few steps for a = 0.2; for a = 100 the first step
        # overshoots to 100·b and the cubic then shrinks by about 2/3 a step
        y, root = gc.custom_root(lambda y, a: y ** 3 + y / a - b, F.zeros_like(b), a, tol=1e-6, max_steps=5,
                                 return_info=True)
        return x, y, info.converged, info.residual, info.steps, root.converged, root.residual, root.steps
    b = np.array([0.3, -0.2])
    cf = gc.compile(solve, np.float64(0.5), b, provider="cpu")
    x, y, converged, residual, steps, root_converged, root_residual, root_steps = cf(np.float64(0.2), b)
    np.testing.assert_allclose(x, b / 0.8, atol=1e-5)
    np.testing.assert_allclose(y ** 3 + y / 0.2, b, atol=1e-6)
    assert converged and residual <= 1e-6 and 2 < steps < 30
    assert root_converged and root_residual <= 1e-6 and 0 < root_steps < 5
    _, _, converged, residual, steps, root_converged, root_residual, root_steps = cf(np.float64(0.999), b)
    assert not converged and residual > 1e-6 and steps == 30                   # stopped by max_steps
    _, _, _, _, _, root_converged, root_residual, root_steps = cf(np.float64(100.0), b)
    assert not root_converged and root_residual > 1e-6 and root_steps == 5
    _, _, converged, residual, _, root_converged, root_residual, _ = cf(np.float64(np.nan), b)
    assert not converged and np.isnan(residual) and not root_converged and np.isnan(root_residual)


def test_return_info_of_a_solver_of_ones_own_and_in_a_saved_model(tmp_path):
    """With a solver= of one's own the residual is g at its result (its steps are not known: None), and the
    flag is an output of a saved model like any other, read by plain ONNX Runtime."""
    import onnxruntime as ort

    def solve(t):
        x, info = gc.custom_root(lambda x, t: x ** 3 + x - t, F.zeros_like(t), t, return_info=True,
                                 solver=lambda h, x: gc.fori_loop(0, 3, lambda i, x: x - 0.2 * h(x), x))
        assert info.steps is None
        return x, info.converged, info.residual
    t = np.array([0.7], np.float32)
    path = tmp_path / "root.onnx"
    gc.compile(solve, t, provider="cpu").save(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x, converged, residual = session.run(None, {session.get_inputs()[0].name: t})
    assert not converged and residual == pytest.approx(abs(x[0] ** 3 + x[0] - 0.7), rel=1e-5)


def test_iterative_adjoints_take_a_batch_of_equilibria_of_symbolic_size():
    """A batch of equilibria (a deep-equilibrium layer): x is (batch, 3) with the batch symbolic, which the
    dense solve (J built one VJP per element) refuses; the iterative adjoints take it, to second order."""
    def equilibria(z, a):
        return gc.fixed_point(lambda x, a: 0.5 * F.tanh(x @ a + z), F.zeros_like(z), a, tol=1e-12,
                              adjoint="iterative")

    def roots(z, a):   # the same equilibria as roots, found by a solver that needs no Jacobian
        return gc.custom_root(lambda x, a: x - 0.5 * F.tanh(x @ a + z), F.zeros_like(z), a, adjoint="iterative",
                              tol=1e-12, solver=lambda h, x: gc.fori_loop(0, 80, lambda i, x: x - h(x), x))
    z = RNG.standard_normal((4, 3))
    for solve in (equilibria, roots):   # z's axis 0 symbolic, as check_grads makes it
        check_grads(lambda z, a, solve=solve: F.sum(solve(z, a) ** 3), [z, W], order=2, rtol=1e-6)
    with pytest.raises(gc.errors.ShapeError, match="adjoint='iterative'"):
        trace(lambda z, a: gc.fixed_point(lambda x, a: F.tanh(x @ a), F.zeros_like(z), a), [gc.spec(("n", 3)), W])
    with pytest.raises(gc.errors.ShapeError, match="adjoint='iterative', which never builds it"):
        trace(lambda z, a: gc.custom_root(lambda x, a: x @ a - z, F.zeros_like(z), a), [gc.spec(("n", 3)), W])
    with pytest.raises(gc.errors.GcompileError, match="adjoint must be one of 'dense', 'iterative'"):
        trace(lambda a: gc.fixed_point(lambda x, a: F.tanh(x @ a), F.full((3,), 0, a.dtype), a, adjoint="cg"), [W])


def test_a_gradient_inside_a_loop_of_what_was_computed_outside_it_is_refused():
    """In a loop body, y and x from outside are two captured values with no path between them: the
    gradient would be zeros where y depends on x. Refused; computed inside the body it is right."""
    def outside(x):
        y = F.sin(x)
        return gc.while_loop(lambda v: v[1] < 2, lambda v: (gc.grad([y], [x], [v[0]])[0], v[1] + 1),
                             (F.ones_like(x), np.int64(0)))[0]

    def inside(x):
        return gc.while_loop(lambda v: v[1] < 2, lambda v: (gc.grad([F.sin(x)], [x], [v[0]])[0], v[1] + 1),
                             (F.ones_like(x), np.int64(0)))[0]
    x = np.array([0.3, 0.5, 0.9])
    with pytest.raises(gc.errors.GcompileError, match="no path between them"):
        trace(outside, [x])
    np.testing.assert_allclose(evaluate(trace(inside, [x]).graph, [x])[0], np.cos(x) ** 2, rtol=1e-12)


# -- gc.cond: a branch chosen at run time -----------------------------------------------------------------------
def _branches(x, w):
    y = gc.cond(F.sum(x) > 0, lambda x: F.tanh(x @ w) * 2, lambda x: F.sin(x) * F.sum(w), x)
    return F.sum(y * y)


@pytest.mark.parametrize("sign", [1, -1])
def test_cond_gradients_on_either_branch(sign):
    check_grads(_branches, [sign * np.abs(X), W], order=2)


def test_the_backward_of_a_cond_is_a_cond():
    def fn(x, w):
        return gc.grad(_branches(x, w), [x, w])
    cf = gc.compile(fn, gc.spec(("n", 3)), gc.spec((3, 3)))
    assert [n.op_type for n in cf.model.graph.node].count("If") == 2
    for x in (X, -X):
        got = cf(x.astype(np.float32), W.astype(np.float32))
        for g, e in zip(got, evaluate(cf.graph, [x, W])):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sign", [1, -1])
def test_cond_operands_and_results_are_pytrees_with_ints(sign):
    """As jax.lax.cond: an operand may be a dict of Tensors (it was refused as "a value of type
    dict"), and an int leaf rides along with the float ones."""
    def fn(x, w):
        def then(d, k):
            return {"a": F.tanh(d["p"] * w), "k": k + 1, "b": (d["q"] * 2,)}

        def other(d, k):
            return {"a": d["p"] * d["q"], "k": k * 3, "b": (w * 1.0,)}
        out = gc.cond(F.sum(x * w) > 0, then, other, {"p": x, "q": x * x}, np.int64(2))
        return F.sum(out["a"]) + F.sum(out["b"][0] ** 2) * F.cast(out["k"], x.dtype)
    check_grad(fn, [sign * np.array([0.3, 0.5]), np.array([1.0, 2.0])], order=2, symbolic=False)


def test_cond_branches_must_agree():
    with pytest.raises(gc.TraceError, match="both must return the same dtypes and shapes"):
        trace(lambda x: gc.cond(F.sum(x) > 0, lambda x: x, lambda x: x[:1], x), [X])


def test_the_portable_model_has_none_of_the_constructs_other_runtimes_refuse():
    """tests/portability/constructs.py: no backward Scan, no Scan body reading outer values; and onnx's
    own ReferenceEvaluator runs the gradient model (a Loop with scan outputs, a Scan in an If)."""
    from onnx.reference import ReferenceEvaluator

    from ..portability.constructs import CONSTRUCTS

    def fn(x, w):
        return gc.grad(loss(x, w, 4), [x, w])
    cf = gc.compile(fn, gc.spec(("n", 3)), gc.spec((3, 3)), provider="cpu", target="portable")
    for construct in CONSTRUCTS:
        assert not construct.find(cf.model), construct.name
    x, w = X.astype(np.float32), W.astype(np.float32)
    got = ReferenceEvaluator(cf.model).run(None, dict(zip([i.name for i in cf.model.graph.input], [x, w])))
    for g, e in zip(got, cf(x, w)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [0, 1, 5, 7])
def test_checkpoint_every_k_steps_gives_the_same_gradients(steps):
    """checkpoint_every=3: a loop over blocks of at most 3 steps; its gradient is the plain loop's, on
    the reference evaluator and the ONNX models (static and symbolic sizes, both targets)."""
    def fn(x, w, every):
        def body(v):
            h, k = v
            return F.tanh(h @ w) * 0.7 + h, k + 1
        h, _ = gc.while_loop(lambda v: v[1] < steps, body, (x, np.int64(0)), checkpoint_every=every)
        return F.sum(h * h) + F.sum(x * h)
    _, blocked = check_grad(lambda x, w: fn(x, w, 3), [X, W], order=2 if steps == 7 else 1)
    _, plain = check_grad(lambda x, w: fn(x, w, None), [X, W], order=2 if steps == 7 else 1, lowered=False)
    assert blocked == pytest.approx(plain, rel=1e-10)
    with pytest.raises(gc.GcompileError, match="checkpoint_every must be a positive int"):
        trace(lambda x, w: fn(x, w, 0), [X, W])


# -- random draws in the step: drawn once, by the forward loop ----------------------------------------------------
def _dropped(x, w, every=None, seed=None):
    """h <- dropout(h) * w while the mean of h stays under 3 (at most 5 steps): h_n = x * Π 2·m_t·w."""
    return gc.while_loop(lambda c: (c[1] < 5) & (F.mean(c[0]) < 3.0),
                         lambda c: (F.dropout(c[0], 0.5, training=True, seed=seed) * w, c[1] + 1),
                         (x, np.int64(0)), checkpoint_every=every)


def test_the_backward_reads_the_draws_of_the_forward_loop():
    """The backward used to compute the step again and draw other masks on ONNX Runtime: the
    gradient was not the forward's. Since h_n = x · Π 2·m_t·w, ∂Σh_n/∂x = h_n/x and ∂Σh_n/∂w =
    n Σ_rows h_n / w, from the same run."""
    def fn(x, w):
        h, n = _dropped(x, w)
        return (h, n, *gc.grad(F.sum(h), [x, w]))
    # Unseeded: an element survives five steps with probability 1/32, so with 4 x 8 elements all of
    # them died in about one run in three; with 64 x 64 that is (31/32)**4096, about e**-130.
    x = RNG.uniform(0.5, 1.5, (64, 64)).astype(np.float32)
    w = RNG.uniform(0.8, 1.2, 64).astype(np.float32)
    h, n, gx, gw = gc.compile(fn, gc.spec(("n", 64)), w)(x, w)
    assert n > 1 and 0 < np.count_nonzero(h) < h.size
    np.testing.assert_allclose(gx, h / x, rtol=1e-5)
    np.testing.assert_allclose(gw, n * h.sum(0) / w, rtol=1e-4)


def test_gradients_through_saved_draws_to_third_order():
    """The seeded draws are the same at every step in the reference evaluator, so central
    differences apply: the saved draws carry the derivatives of every order."""
    def fn(x, w):
        return gc.while_loop(lambda c: (c[1] < 3) & (F.mean(c[0]) < 3.0),
                             lambda c: (F.tanh(F.dropout(c[0], 0.5, training=True, seed=4)) * w + c[0] ** 2 * 0.1,
                                        c[1] + 1), (x, np.int64(0)))[0]
    for order in (1, 2, 3):
        check_grad(fn, [RNG.uniform(0.5, 1.5, (4, 8)), RNG.uniform(0.8, 1.2, 8)], order=order, lowered=False)


def test_draws_the_backward_cannot_save_are_refused():
    x, w = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    with pytest.raises(gc.errors.UnsupportedError, match="drop checkpoint_every"):
        trace(lambda x, w: gc.grad(F.sum(_dropped(x, w, every=2)[0]), [x]), [x, w])
    with pytest.raises(gc.errors.UnsupportedError, match="gc.cond whose branch draws random numbers"):
        trace(lambda x: gc.grad(F.sum(gc.cond(F.sum(x) > 0, lambda z: F.dropout(z, 0.5, training=True),
                                               lambda z: z * 2.0, x)), [x]), [x])
    trace(lambda x, w: _dropped(x, w, every=2)[0], [x, w])     # the forward alone is fine
