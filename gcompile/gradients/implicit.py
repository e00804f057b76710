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
adjoint="dense" (the default) builds J one VJP per element of x, so x needs a static shape and the
solve costs O(n³): right for small systems. adjoint="iterative" never forms J: it solves Jᵀu = -x̄
by a gc.while_loop of products with Jᵀ (a VJP of g) and J (a JVP, by the double-VJP trick), so x
may be large or of symbolic shape (a batch of equilibria, say): conjugate gradients on the
normal equations for custom_root, which converge for any invertible J, and for fixed_point the
iteration u <- x̄ + (∂f/∂x)ᵀu, one VJP a step, which converges wherever the forward iteration does
(the same contraction, transposed). Being loops of traced ops, these differentiate again too.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .. import functions as F
from ..errors import GcompileError, ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..frontend.trace import inline, trace_body
from ..ir import dims
from ..ir.dtypes import is_float
from ..ir.graph import Graph
from ..ir.registry import supply_vjp
from ..ops.control import while_loop
from ..ops.solvers import MAX_SOLVE_SIZE, solve
from .engine import grad
from .transforms import jvp, vjp

__all__ = ["RootInfo", "custom_root", "fixed_point"]


ADJOINTS = ("dense", "iterative")


class RootInfo(NamedTuple):
    """How a gc.custom_root or gc.fixed_point solve ended (return_info=True): Tensors computed at run
    time, so they can be returned from a compiled function or an exported model like any output.

    converged: a bool scalar, whether the residual is at most `tol` (false for a NaN residual).
    residual: a float scalar, max|g(x*)| for custom_root (g evaluated once more at the result), the
        last step's max|f(x) - x| for fixed_point (the loop's own stopping test).
    steps: an int64 scalar, the solver's steps (the fixed-point iteration's, the default Newton
        solver's); None for a solver= of one's own, whose steps gcompile does not see."""
    converged: Tensor
    residual: Tensor
    steps: Tensor | None


def _operands(what: str, x0: Any, params: tuple, adjoint: str, jacobian: bool,
              adjoint_steps: int) -> tuple[str, Tensor, list[Tensor]]:
    """The caller's source line, x0 and the params as Tensors; x0 must be float, and static where
    `jacobian` (something builds J one backward pass per element of x)."""
    where = user_location()
    if adjoint not in ADJOINTS:
        raise GcompileError(f"{what}: adjoint must be one of {', '.join(map(repr, ADJOINTS))}, got {adjoint!r} "
                            f"(at {where})")
    if isinstance(adjoint_steps, bool) or not isinstance(adjoint_steps, (int, np.integer)) or adjoint_steps < 1:
        raise GcompileError(f"{what}: adjoint_steps must be a positive int, got {adjoint_steps!r} (at {where})")
    x0 = as_tensor(x0)
    if not is_float(x0.dtype):
        raise ShapeError(f"{what}: x must be a float Tensor, got {x0.type} (at {where})")
    if jacobian and not dims.is_static(x0.shape):
        raise ShapeError(f"{what}: x is {x0.type}; building ∂g/∂x one VJP per element needs a static shape. "
                         f"For a symbolic or large x, pass adjoint='iterative', which never builds it (at {where})")
    return where, x0, [as_tensor(p) for p in params]


def _dense_solvable(what: str, x: Tensor, where: str) -> None:
    """Refuse, pointing at adjoint='iterative', an x with more elements than the dense solve takes."""
    n = int(np.prod(x.shape))
    if n > MAX_SOLVE_SIZE:
        raise ShapeError(f"{what}: x is {x.type}, {n} unknowns; the dense solve with ∂g/∂x (adjoint='dense', and "
                         f"custom_root's default Newton solver with it) is written out for at most {MAX_SOLVE_SIZE}. "
                         "Pass adjoint='iterative': conjugate gradients with products by ∂g/∂x and its transpose, "
                         f"no matrix, for any size (at {where})")


def _settled(residual: Tensor, tol: float) -> Tensor:
    """residual <= tol, as a scalar that is false for NaN, cut from the gradient."""
    return F.stop_gradient(F.less_equal(residual, tol))


def _max_abs(x: Tensor) -> Tensor:
    return F.stop_gradient(F.max(F.abs(x))) if x.ndim else F.stop_gradient(F.abs(x))


def custom_root(g: Callable[..., Any], x0: Any, *params: Any,
                solver: Callable[[Callable[[Tensor], Tensor], Tensor], Any] | None = None,
                tol: float = 1e-6, max_steps: int = 50, adjoint: str = "dense", adjoint_steps: int = 1000,
                return_info: bool = False) -> Any:
    """x* with g(x*, *params) = 0, found from x0 by `solver(h, x0)` (any traced code: a gc.while_loop,
    a fixed number of steps; h(x) = g(x, *params)), by default Newton's method until
    max|g(x)| <= tol or max_steps steps. The result differentiates by the implicit function
    theorem (one linear solve with ∂g/∂x at x*, no reversal of the solver's loop), w.r.t. params
    and the Tensors g closes over; x0 and the solver get no gradient. x is one float Tensor; g
    returns one value per element of x.

    A solver that stops at max_steps (or a solver of one's own that stops short) returns its last
    iterate, and the gradient is the implicit one at that point, which is not a root: with
    return_info=True the result is (x*, RootInfo) whose `converged` says, at run time, whether
    max|g(x*)| <= tol (see RootInfo).

    adjoint="dense" solves the linear system with J = ∂g/∂x built whole (x of static shape, small
    systems), and the default solver is Newton's method with that J. adjoint="iterative" never
    builds J: the gradient's system is solved by conjugate gradients on the normal equations, with
    products by J and Jᵀ only, until max|Jᵀu + x̄| <= tol or adjoint_steps steps, and the default
    solver is Newton-Krylov (each Newton step solved the same way, to a tolerance that shrinks
    with the residual): for large x, or x of symbolic shape."""
    iterative = adjoint == "iterative"
    where, x0, args = _operands("custom_root", x0, params, adjoint, not iterative, adjoint_steps)

    def h(x):
        return as_tensor(g(x, *args))
    steps = None
    if solver is None:
        if not iterative:
            _dense_solvable("custom_root", x0, where)
        x_star, steps = newton(h, x0, tol, max_steps, krylov_steps=adjoint_steps if iterative else None,
                               return_steps=True)
    else:
        x_star = as_tensor(solver(h, x0))
    root = _root(g, as_tensor(x_star), args, where, "normal-cg" if iterative else "dense", tol, adjoint_steps)
    if not return_info:
        return root
    residual = _max_abs(h(F.stop_gradient(x_star)))
    return root, RootInfo(_settled(residual, tol), residual, steps)


def fixed_point(f: Callable[..., Any], x0: Any, *params: Any, tol: float = 1e-6, max_steps: int = 1000,
                adjoint: str = "dense", adjoint_steps: int = 1000, return_info: bool = False) -> Any:
    """x* = f(x*, *params), iterating x <- f(x, *params) from x0 (a gc.while_loop) until
    max|f(x) - x| <= tol or max_steps steps; differentiated by the implicit function theorem as the
    root of f(x, θ) - x (custom_root), never by reversing the iteration.

    Stopped by max_steps, it returns the last iterate (and the implicit gradient there, which is
    not the fixed point's): with return_info=True the result is (x*, RootInfo) whose `converged`
    says, at run time, whether the last step moved by at most tol (see RootInfo).

    adjoint="dense" solves with ∂f/∂x built whole (x of static shape); adjoint="iterative" by the
    iteration u <- x̄ + (∂f/∂x)ᵀu, one VJP of f a step, until it moves by at most tol or
    adjoint_steps steps: it converges wherever the forward iteration does, for any shape of x."""
    where, x0, args = _operands("fixed_point", x0, params, adjoint, adjoint == "dense", adjoint_steps)

    def step(v):
        x, fx, k = v
        return fx, as_tensor(f(fx, *args)), k + 1
    x, x_star, steps = while_loop(lambda v: F.logical_and(F.max(F.abs(v[1] - v[0])) > tol, v[2] < max_steps), step,
                                  (x0, as_tensor(f(x0, *args)), np.int64(1)))
    method = "dense" if adjoint == "dense" else "richardson"
    root = _root(lambda x, *p: as_tensor(f(x, *p)) - x, x_star, args, where, method, tol, adjoint_steps)
    if not return_info:
        return root
    residual = _max_abs(x_star - x)
    return root, RootInfo(_settled(residual, tol), residual, F.stop_gradient(steps))


def newton(h: Callable[[Tensor], Tensor], x0: Tensor, tol: float = 1e-6, max_steps: int = 50,
           krylov_steps: int | None = None, return_steps: bool = False) -> Any:
    """Newton's method for h(x) = 0 in a gc.while_loop: x <- x - J(x)⁻¹ h(x) until max|h(x)| <= tol or
    max_steps steps. J is built one VJP per element; with krylov_steps, never: each step solves
    J d = h(x) by conjugate gradients on the normal equations (products by J and Jᵀ, a JVP and a
    VJP of h) to max|J d - h(x)| <= min(1/2, sqrt(max|h|))·max|h| or krylov_steps steps (an inexact
    Newton-Krylov method, converging superlinearly near the root). With return_steps, also the
    number of steps taken."""
    def step(v):
        x, k = v
        r = h(x)
        if krylov_steps is None:
            d = _flat_solve(_jacobian(r, x), r)
        else:
            size = F.max(F.abs(r))
            d = _craig(lambda c: jvp(h, (x,), (c,))[1], lambda c: vjp(h, x)[1](c)[0], r,
                       F.minimum(F.sqrt(size), 0.5) * size, krylov_steps)
        return x - d, k + 1
    x, steps = while_loop(lambda v: F.logical_and(F.max(F.abs(h(v[0]))) > tol, v[1] < max_steps), step,
                          (x0, np.int64(0)))
    return (x, steps) if return_steps else x


def _jacobian(r: Tensor, x: Tensor) -> Tensor:
    """∂r/∂x as an (n, n) matrix over the flattened elements."""
    n = int(np.prod(x.shape))
    eye = np.eye(n, dtype=x.dtype)
    rows = [grad([r], [x], [eye[k].reshape(x.shape)])[0] for k in range(n)]
    return F.reshape(F.stack(rows), (n, n))


def _flat_solve(a: Tensor, b: Tensor) -> Tensor:
    """a⁻¹ b for a flattened b, shaped as b."""
    return F.reshape(solve(a, F.reshape(b, (-1,))), b.shape)


def _root(g: Callable[..., Any], x_star: Tensor, params: list[Tensor], where: str, adjoint: str, tol: float,
          adjoint_steps: int) -> Tensor:
    x_star = F.stop_gradient(x_star)
    body, captured = trace_body(lambda v: [as_tensor(g(v[0], *v[1:]))], [x_star.type] + [p.type for p in params])
    if body.type_of(body.outputs[0]) != x_star.type:
        raise ShapeError(f"custom_root: g returns {body.type_of(body.outputs[0])} for an x of type {x_star.type}; "
                         f"it must return one value per element of x (at {where})")
    return apply("root", [*captured, x_star, *params], body=body, x_index=len(captured), source=where,
                 adjoint=adjoint, tol=float(tol), adjoint_steps=int(adjoint_steps))


def _dense_adjoint(r: Tensor, x: Tensor, x_bar: Tensor) -> Tensor:
    """u with Jᵀu = -x̄, J = ∂r/∂x built whole."""
    return -_flat_solve(F.swapaxes(_jacobian(r, x), 0, 1), x_bar)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return F.sum(a * b)


def _craig(product: Callable[[Tensor], Tensor], transposed: Callable[[Tensor], Tensor], b: Tensor, tol: Any,
           steps: int) -> Tensor:
    """u with A u = b by conjugate gradients on the normal equations (Craig's method: u = Aᵀy with
    AAᵀy = b), which needs A only as products, `product(c)` = A c and `transposed(c)` = Aᵀ c, until
    max|b - A u| <= tol or `steps` steps. It converges for any invertible A (at the pace of A's
    squared condition number). The products are traced in the loop's body, where a gradient
    starts afresh."""
    tiny = np.finfo(b.dtype).tiny

    def step(v):
        u, r, p, rr, k = v
        alpha = rr / F.maximum(_dot(p, p), tiny)
        r = r - alpha * product(p)
        new_rr = _dot(r, r)
        return u + alpha * p, r, transposed(r) + new_rr / F.maximum(rr, tiny) * p, new_rr, k + 1
    u, *_ = while_loop(lambda v: F.logical_and(F.max(F.abs(v[1])) > tol, v[4] < steps), step,
                       (F.zeros_like(b), b, transposed(b), _dot(b, b), np.int64(0)))
    return u


def _normal_cg_adjoint(residual: Callable[[Tensor], Tensor], x: Tensor, x_bar: Tensor, tol: float,
                       steps: int) -> Tensor:
    """u with Jᵀu = -x̄ (_craig with A = Jᵀ: Jᵀc is a VJP of the residual at x, Jc a JVP)."""
    return _craig(lambda c: vjp(residual, x)[1](c)[0], lambda c: jvp(residual, (x,), (c,))[1], -x_bar, tol, steps)


def _richardson_adjoint(residual: Callable[[Tensor], Tensor], x: Tensor, x_bar: Tensor, tol: float,
                        steps: int) -> Tensor:
    """u with Jᵀu = -x̄ for the residual f(x) - x of a fixed point, by u <- u + (Jᵀu + x̄), that is
    u <- x̄ + (∂f/∂x)ᵀu: one VJP a step, converging as the forward iteration x <- f(x) does."""
    def change(u: Tensor) -> Tensor:   # traced in the loop's body: a gradient there starts there
        return vjp(residual, x)[1](u)[0] + x_bar

    def step(v):
        u, moved, k = v
        u = u + moved
        return u, change(u), k + 1
    u, *_ = while_loop(lambda v: F.logical_and(F.max(F.abs(v[1])) > tol, v[2] < steps), step,
                       (x_bar, change(x_bar), np.int64(0)))
    return u


def _root_vjp(grads, inputs, outputs, *, body: Graph, x_index: int, source: str, adjoint: str, tol: float,
              adjoint_steps: int):
    (x_bar,) = grads
    result: list[Tensor | None] = [None] * len(inputs)
    wrt = [i for i, t in enumerate(inputs) if i != x_index and is_float(t.dtype)]
    if x_bar is None or not wrt:
        return result
    if adjoint == "dense":
        _dense_solvable("the implicit gradient", inputs[x_index], source)

    def partials(v: list[Tensor]) -> list[Tensor]:
        ins, seed = v[:-1], v[-1]
        r = inline(body, ins)[0]
        x = ins[x_index]
        if adjoint == "dense":
            u = _dense_adjoint(r, x, seed)
        else:
            def residual(z: Tensor) -> Tensor:
                return inline(body, [z if i == x_index else t for i, t in enumerate(ins)])[0]
            solve_iteratively = _normal_cg_adjoint if adjoint == "normal-cg" else _richardson_adjoint
            u = solve_iteratively(residual, x, seed, tol, adjoint_steps)
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
