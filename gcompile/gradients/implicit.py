"""Implicit differentiation: gc.custom_root and gc.fixed_point.

The solution x* of g(x, θ) = 0 is found by any traced code (a while loop, Newton's method, a
fixed-point iteration) and differentiated without reversing that code: by the implicit function
theorem, dx*/dθ = -J⁻¹ ∂g/∂θ with J = ∂g/∂x at x*, so the VJP of a cotangent x̄ is
θ̄ = (∂g/∂θ)ᵀ u with Jᵀ u = -x̄: one linear solve (ops/solvers.solve, Gauss-Jordan
elimination written in ai.onnx ops), whatever the number of solver steps.

The `root` op (ops/control.py) holds g as a body Graph; its operands are the body's inputs with
x*, from the solver, at x_index (read through stop_gradient: the solver gets no gradient), and
its output is x*. Its VJP traces the partials (J, u and (∂g/∂θ)ᵀ u) into a body of their own,
whose inputs x and θ are independent, and inlines it reading the root's *output* as x: the
gradient's graph then depends on x*(θ) through the root again, so differentiating it a second
time gives the second derivative of the implicit function (J's dependence on x* included).
J is built one VJP per element of x, so x needs a static shape (small systems: this is a dense
solve; a large one wants a matrix-free solver, not given here).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import functions as F
from ..errors import GcompileError, ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..frontend.trace import inline, trace_body
from ..ir import dims
from ..ir.graph import Graph
from ..ir.registry import supply_vjp
from ..ops.control import while_loop
from ..ops.solvers import solve
from .engine import grad

__all__ = ["custom_root", "fixed_point"]


def _operands(what: str, x0: Any, params: tuple) -> tuple[str, Tensor, list[Tensor]]:
    """The caller's source line, x0 and the params as Tensors; x0 must be float and static (J is
    built one backward pass per element of x)."""
    where = user_location()
    x0 = as_tensor(x0)
    if x0.dtype.kind != "f" or not dims.is_static(x0.shape):
        raise ShapeError(f"{what}: x must be a float Tensor of static shape, got {x0.type} (at {where})")
    return where, x0, [as_tensor(p) for p in params]


def custom_root(g: Callable[..., Any], x0: Any, *params: Any,
                solver: Callable[[Callable[[Tensor], Tensor], Tensor], Any] | None = None,
                tol: float = 1e-6, max_steps: int = 50) -> Tensor:
    """x* with g(x*, *params) = 0, found from x0 by `solver(h, x0)` (any traced code: a gc.while_loop,
    a fixed number of steps; h(x) = g(x, *params)), by default Newton's method until
    max|g(x)| <= tol or max_steps steps. The result differentiates by the implicit function
    theorem (one linear solve with ∂g/∂x at x*, no reversal of the solver's loop), w.r.t. params
    and the Tensors g closes over; x0 and the solver get no gradient. x is one float Tensor of
    static shape; g returns one value per element of x."""
    where, x0, args = _operands("custom_root", x0, params)

    def h(x):
        return as_tensor(g(x, *args))
    x_star = (solver or (lambda h, x: newton(h, x, tol, max_steps)))(h, x0)
    return _root(g, as_tensor(x_star), args, where)


def fixed_point(f: Callable[..., Any], x0: Any, *params: Any, tol: float = 1e-6, max_steps: int = 1000) -> Tensor:
    """x* = f(x*, *params), iterating x <- f(x, *params) from x0 (a gc.while_loop) until
    max|f(x) - x| <= tol or max_steps steps; differentiated by the implicit function theorem as the
    root of f(x, θ) - x (custom_root), never by reversing the iteration."""
    where, x0, args = _operands("fixed_point", x0, params)

    def step(v):
        x, fx, k = v
        return fx, as_tensor(f(fx, *args)), k + 1
    _, x_star, _ = while_loop(lambda v: F.logical_and(F.max(F.abs(v[1] - v[0])) > tol, v[2] < max_steps), step,
                              (x0, as_tensor(f(x0, *args)), np.int64(1)))
    return _root(lambda x, *p: as_tensor(f(x, *p)) - x, x_star, args, where)


def newton(h: Callable[[Tensor], Tensor], x0: Tensor, tol: float = 1e-6, max_steps: int = 50) -> Tensor:
    """Newton's method for h(x) = 0 in a gc.while_loop: x <- x - J(x)⁻¹ h(x), J by one VJP per element,
    until max|h(x)| <= tol or max_steps steps."""
    def step(v):
        x, k = v
        return x - _flat_solve(_jacobian(h(x), x), h(x)), k + 1
    x, _ = while_loop(lambda v: F.logical_and(F.max(F.abs(h(v[0]))) > tol, v[1] < max_steps), step,
                      (x0, np.int64(0)))
    return x


def _jacobian(r: Tensor, x: Tensor) -> Tensor:
    """∂r/∂x as an (n, n) matrix over the flattened elements."""
    n = int(np.prod(x.shape))
    eye = np.eye(n, dtype=x.dtype)
    rows = [grad([r], [x], [eye[k].reshape(x.shape)])[0] for k in range(n)]
    return F.reshape(F.stack(rows), (n, n))


def _flat_solve(a: Tensor, b: Tensor) -> Tensor:
    """a⁻¹ b for a flattened b, shaped as b."""
    return F.reshape(solve(a, F.reshape(b, (-1,))), b.shape)


def _root(g: Callable[..., Any], x_star: Tensor, params: list[Tensor], where: str) -> Tensor:
    x_star = F.stop_gradient(x_star)
    body, captured = trace_body(lambda v: [as_tensor(g(v[0], *v[1:]))], [x_star.type] + [p.type for p in params])
    if body.type_of(body.outputs[0]) != x_star.type:
        raise ShapeError(f"custom_root: g returns {body.type_of(body.outputs[0])} for an x of type {x_star.type}; "
                         f"it must return one value per element of x (at {where})")
    return apply("root", [*captured, x_star, *params], body=body, x_index=len(captured), source=where)


def _root_vjp(grads, inputs, outputs, *, body: Graph, x_index: int, source: str):
    (x_bar,) = grads
    result: list[Tensor | None] = [None] * len(inputs)
    wrt = [i for i, t in enumerate(inputs) if i != x_index and t.dtype.kind == "f"]
    if x_bar is None or not wrt:
        return result

    def partials(v: list[Tensor]) -> list[Tensor]:
        ins, seed = v[:-1], v[-1]
        r = inline(body, ins)[0]
        u = -_flat_solve(F.swapaxes(_jacobian(r, ins[x_index]), 0, 1), seed)   # Jᵀ u = -x̄
        return grad([r], [ins[i] for i in wrt], [u])

    try:
        core, captured = trace_body(partials, [t.type for t in inputs] + [x_bar.type])
    except GcompileError as err:
        raise type(err)(f"differentiating the root found at {source}: {err}") from None
    assert not captured, "the partials read only their inputs"
    operands = [outputs[0] if i == x_index else t for i, t in enumerate(inputs)]
    for i, g in zip(wrt, inline(core, operands + [x_bar])):
        result[i] = g
    return result


supply_vjp("root", _root_vjp)
