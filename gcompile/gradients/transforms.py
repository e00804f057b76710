"""Functional transforms built on gc.grad: value_and_grad, vjp, jvp, hvp, jacobian, hessian.

All of them are traceable: call them inside a function being traced (or pass the
function they return to gc.compile), and they record ordinary nodes, so their results
export to ONNX and can be differentiated again. Conventions follow gc.grad: an input
the function does not depend on gets zeros of its shape, never an error.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import GcompileError
from ..frontend.tensor import Tensor, as_tensor, current_frame
from ..ir import dims
from ..ops.basic import add_n, cast, zeros_like
from ..ops.indexing import stack
from ..ops.reduce import sum as reduce_sum
from ..ops.shape import reshape
from .engine import grad, prune_new_nodes

__all__ = ["hessian", "hvp", "jacobian", "jvp", "value_and_grad", "vjp"]

Argnums = int | Sequence[int]


def _as_tuple(xs: Any) -> tuple:
    return tuple(xs) if isinstance(xs, (tuple, list)) else (xs,)


def _inner(xs: Sequence[Tensor], vs: Sequence[Tensor]) -> Tensor:
    """Σ_i ⟨x_i, v_i⟩ as a scalar."""
    return add_n([reduce_sum(x * v) for x, v in zip(xs, vs)])


def _paired(primals: Any, others: Any, what: str) -> tuple[list[Tensor], list[Tensor]]:
    """Primals as Tensors and `others` (tangents, vectors) cast to their dtypes, checked shape by shape."""
    primals = [as_tensor(p) for p in _as_tuple(primals)]
    others = [as_tensor(v) for v in _as_tuple(others)]
    if len(others) != len(primals):
        raise GcompileError(f"{len(primals)} primals but {len(others)} {what}")
    for p, v in zip(primals, others):
        if v.shape != p.shape:
            raise GcompileError(f"{what}: a {v.type} does not match its primal {p.type}")
    return primals, [cast(v, p.dtype) for p, v in zip(primals, others)]


def _select(args: Sequence[Tensor], argnums: Argnums) -> tuple[list[Tensor], bool]:
    """The Tensors at `argnums` (an int or a tuple of ints) and whether a single one was asked for."""
    single = isinstance(argnums, int)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -len(args) <= i < len(args):
            raise GcompileError(f"argnums {argnums!r} out of range for {len(args)} arguments")
    return [args[i] for i in nums], single


def _scalar(value: Any, who: str) -> Tensor:
    if not isinstance(value, Tensor) or value.shape != () or value.dtype.kind != "f":
        described = value.type if isinstance(value, Tensor) else type(value).__name__
        raise GcompileError(f"{who} needs a function returning a floating-point scalar Tensor (shape ()), "
                            f"got {described}; reduce it first (e.g. F.sum or F.mean)")
    return value


def value_and_grad(fn: Callable[..., Tensor], argnums: Argnums = 0) -> Callable[..., tuple[Tensor, Any]]:
    """A function returning (fn(*args), gradient of fn w.r.t. args[argnums]).

    fn must return a floating-point scalar Tensor. The gradient is a Tensor for an int
    `argnums` and a tuple of Tensors for a tuple, each shaped like its argument.
    """
    @functools.wraps(fn)
    def wrapped(*args):
        args = [as_tensor(a) for a in args]
        wrt, single = _select(args, argnums)
        value = _scalar(fn(*args), "value_and_grad")
        grads = grad(value, wrt)
        return value, grads[0] if single else tuple(grads)
    return wrapped


def vjp(fn: Callable, *primals: Any) -> tuple[Any, Callable[[Any], tuple[Tensor, ...]]]:
    """(fn(*primals), vjp_fn): vjp_fn(cotangents) returns one gradient per primal, as a tuple.

    `cotangents` mirrors fn's outputs: a Tensor (or array) for a single output, a sequence
    for a tuple or list of outputs; each is cast to its output's dtype.
    """
    xs = [as_tensor(p) for p in primals]
    outputs = fn(*xs)
    outs = list(_as_tuple(outputs))

    def vjp_fn(cotangents: Any) -> tuple[Tensor, ...]:
        cts = list(_as_tuple(cotangents)) if isinstance(outputs, (tuple, list)) else [cotangents]
        if len(cts) != len(outs):
            raise GcompileError(f"vjp_fn: {len(outs)} outputs but {len(cts)} cotangents")
        return tuple(grad(outs, xs, cts))
    return outputs, vjp_fn


def jvp(fn: Callable, primals: Any, tangents: Any) -> tuple[Any, Any]:
    """(fn(*primals), J·tangents): the forward-mode derivative along `tangents`.

    Computed by the double-VJP trick: with u a cotangent placeholder of each output's
    shape, g(u) = Jᵀu is linear in u, so ∂⟨g(u), t⟩/∂u = J t. The placeholder is a
    zeros node the result does not depend on; it and the nodes of g(u) that J t does
    not need are removed. Tangent outputs of non-float outputs are zeros.
    """
    primals, tangents = _paired(primals, tangents, "tangents")
    outputs = fn(*primals)
    outs = [as_tensor(y) for y in _as_tuple(outputs)]
    graph = current_frame().graph
    mark = graph.mark()
    floats = [y for y in outs if y.dtype.kind == "f"]
    placeholders = [zeros_like(y) for y in floats]
    pulled = grad(floats, primals, placeholders)
    pushed = iter(grad(_inner(pulled, tangents), placeholders) if floats else [])
    results = [next(pushed) if y.dtype.kind == "f" else zeros_like(y) for y in outs]
    prune_new_nodes(graph, mark, [r.ref for r in results])
    return outputs, results[0] if not isinstance(outputs, (tuple, list)) else type(outputs)(results)


def hvp(fn: Callable[..., Tensor], primals: Any, vectors: Any) -> Tensor | tuple[Tensor, ...]:
    """Hessian-vector product H·v of a scalar fn at `primals`, as ∇⟨∇fn, v⟩.

    `primals` and `vectors` are a Tensor each or matching sequences; the result is a Tensor
    or a tuple with one Tensor per primal (the block rows of H applied to all of v). fn's
    value is not returned: nodes of fn that H·v does not need are removed.
    """
    single = not isinstance(primals, (tuple, list))
    primals, vectors = _paired(primals, vectors, "vectors")
    graph = current_frame().graph
    mark = graph.mark()
    value = _scalar(fn(*primals), "hvp")
    result = grad(_inner(grad(value, primals), vectors), primals)
    prune_new_nodes(graph, mark, [r.ref for r in result])
    return result[0] if single else tuple(result)


def _static(shape: tuple, what: str) -> tuple:
    if not dims.is_static(shape):
        raise GcompileError(f"jacobian/hessian need static shapes (one VJP per output element), but {what} has "
                            f"shape {dims.format_shape(shape)}; use vjp, jvp or hvp for symbolic dims")
    return shape


def _jacobian_of(y: Tensor, xs: list[Tensor]) -> list[Tensor]:
    """∂y/∂x for each x, shaped y.shape + x.shape: one VJP per element of y (one-hot cotangents), stacked."""
    if y.dtype.kind != "f":
        raise GcompileError(f"jacobian of a non-float output ({y.type})")
    out_shape = _static(y.shape, "the output")
    for x in xs:
        _static(x.shape, "an input")
    if out_shape == ():
        return grad(y, xs)
    n = int(np.prod(out_shape))
    rows = [grad(y, xs, [np.eye(n, dtype=y.dtype)[k].reshape(out_shape)]) for k in range(n)]
    return [reshape(stack([row[i] for row in rows]), out_shape + x.shape) for i, x in enumerate(xs)]


def jacobian(fn: Callable, argnums: Argnums = 0) -> Callable[..., Any]:
    """A function returning the Jacobian of fn w.r.t. args[argnums], shaped out.shape + in.shape.

    For small static shapes: it takes one VJP per output element. A tuple `argnums` gives
    a tuple over arguments; a function returning a tuple of Tensors gives a tuple over
    outputs (of tuples over arguments when `argnums` is a tuple too), as JAX does.
    """
    @functools.wraps(fn)
    def wrapped(*args):
        args = [as_tensor(a) for a in args]
        wrt, single = _select(args, argnums)
        outputs = fn(*args)
        per_output = [_jacobian_of(as_tensor(y), wrt) for y in _as_tuple(outputs)]
        per_output = [js[0] if single else tuple(js) for js in per_output]
        return type(outputs)(per_output) if isinstance(outputs, (tuple, list)) else per_output[0]
    return wrapped


def hessian(fn: Callable[..., Tensor], argnums: Argnums = 0) -> Callable[..., Any]:
    """A function returning the Hessian of a scalar fn w.r.t. args[argnums], shaped in.shape + in.shape.

    A tuple `argnums` gives nested tuples: result[i][j] = ∂²fn/∂x_i∂x_j, shaped
    x_i.shape + x_j.shape. Static shapes only (one VJP per gradient element).
    """
    def scalar_fn(*args):
        return _scalar(fn(*args), "hessian")
    return functools.wraps(fn)(jacobian(jacobian(scalar_fn, argnums), argnums))
