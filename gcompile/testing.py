"""Numeric checks users can run on their own code (ARCHITECTURE.md §9.3).

check_grad compares, in float64, the central difference (L(x+εr) − L(x−εr)) / 2ε along
one random unit direction r over all float inputs with ⟨∇L(x), r⟩ from gc.grad, where
L is the function's outputs weighted by fixed random cotangents. check_double_grad
applies the same check to x ↦ ⟨∇L(x), v⟩ for a fixed random v, so it checks the
gradient of the gradient graph. Both run on the numpy reference evaluator, which has a
float64 kernel for every op; check_lowering compares onnxruntime with that evaluator.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .frontend import pytree
from .frontend.tensor import as_tensor
from .frontend.trace import is_output_leaf, trace
from .gradients import grad
from .ir.evaluate import evaluate
from .ops.basic import add_n
from .ops.reduce import sum as reduce_sum


def _float_positions(arrays) -> list[int]:
    return [i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]


def _weighted_scalar(fn, rng_seed: int):
    """x ↦ Σ_k ⟨w_k, f_k(x)⟩ with fixed random w_k (one per float output leaf)."""
    def scalar(*xs):
        leaves, _ = pytree.flatten(fn(*xs), is_output_leaf)
        rng = np.random.default_rng(rng_seed)
        terms = []
        for y in leaves:
            y = as_tensor(y)
            if y.dtype.kind != "f":
                continue
            w = rng.standard_normal([d if isinstance(d, int) else 1 for d in y.shape]).astype(y.dtype)
            terms.append(reduce_sum(y * w))
        return add_n(terms)
    return scalar


def _directional(fn, positions, vectors):
    """x ↦ ⟨∇fn(x), v⟩ summed over the float inputs (fn returns a scalar)."""
    def inner(*xs):
        out = fn(*xs)
        grads = grad(out, [xs[i] for i in positions])
        return add_n([reduce_sum(g * v) for g, v in zip(grads, vectors)])
    return inner


def _scalar_graph_eval(scalar_fn, arrays):
    traced = trace(scalar_fn, arrays)
    return lambda xs: float(evaluate(traced.graph, xs)[0])


def _check(scalar_fn, arrays, positions, eps, rtol, atol, seed, what):
    rng = np.random.default_rng(seed + 1)
    r = [rng.standard_normal(np.shape(arrays[i])) for i in positions]
    norm = np.sqrt(sum(float(np.sum(v * v)) for v in r)) or 1.0
    r = [v / norm for v in r]

    def with_grads(*xs):
        out = scalar_fn(*xs)
        return [out] + grad(out, [xs[i] for i in positions])

    traced = trace(with_grads, arrays)
    values = evaluate(traced.graph, arrays)
    analytic = sum(float(np.sum(g * v)) for g, v in zip(values[1:], r))
    f = _scalar_graph_eval(scalar_fn, arrays)

    def shifted(delta):
        xs = list(arrays)
        for i, v in zip(positions, r):
            xs[i] = arrays[i] + delta * v
        return f(xs)

    numeric = (shifted(eps) - shifted(-eps)) / (2 * eps)
    if not abs(numeric - analytic) <= atol + rtol * max(abs(numeric), abs(analytic)):
        raise AssertionError(f"{what} check failed: central difference {numeric:.10g} vs gradient "
                             f"{analytic:.10g} (difference {abs(numeric - analytic):.3g}, eps={eps}, "
                             f"rtol={rtol}, atol={atol})")
    return numeric, analytic


def _prepare(inputs):
    arrays = [np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a)
              for a in inputs]
    positions = _float_positions(arrays)
    if not positions:
        raise ValueError("check_grad needs at least one floating-point input")
    return arrays, positions


def check_grad(fn: Callable, inputs: Sequence[ArrayLike], *, order: int = 1, eps: float = 1e-5,
               rtol: float = 1e-5, atol: float = 1e-7, seed: int = 0) -> tuple[float, float]:
    """Check gc.grad of `fn` (any outputs) at `inputs` (arrays; float ones are promoted to float64).

    order=2 checks the gradient of the gradient (as check_double_grad), order=3 the next one.
    Returns (numeric, analytic) directional derivatives; raises AssertionError showing both.
    """
    arrays, positions = _prepare(inputs)
    scalar = _weighted_scalar(fn, seed)
    rng = np.random.default_rng(seed + 2)
    for _ in range(order - 1):
        vs = [rng.standard_normal(np.shape(arrays[i])) for i in positions]
        scalar = _directional(scalar, positions, vs)
    what = {1: "gradient", 2: "double-gradient"}.get(order, f"order-{order} gradient")
    return _check(scalar, arrays, positions, eps, rtol, atol, seed, what)


def check_double_grad(fn: Callable, inputs: Sequence[ArrayLike], **kwargs: Any) -> tuple[float, float]:
    """check_grad of x ↦ ⟨∇L(x), v⟩ for a fixed random v: checks the double-backward graph."""
    return check_grad(fn, inputs, order=2, **kwargs)


def check_lowering(fn: Callable, inputs: Sequence[ArrayLike], *, rtol: float = 1e-4, atol: float = 1e-5,
                   provider: str = "cpu") -> list[np.ndarray]:
    """Run `fn` through ONNX and onnxruntime and compare with the reference evaluator on the same inputs.

    Also validates the model with onnx.checker (full_check) and that it uses ai.onnx ops only.
    Returns the onnxruntime outputs (flattened).
    """
    import onnx

    from .runtime import compile
    cf = compile(fn, *inputs, provider=provider)
    onnx.checker.check_model(cf.model, full_check=True)
    domains = {n.domain for n in cf.model.graph.node} - {"", "ai.onnx"}
    assert not domains, f"non-standard op domains in the model: {domains}"
    got = cf.run_flat(*inputs)
    expected = evaluate(cf.graph, list(inputs))
    for name, g, e in zip(cf.graph.output_names, got, expected):
        assert g.shape == e.shape, f"output {name}: onnxruntime shape {g.shape} vs reference {e.shape}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {name}")
    return got
