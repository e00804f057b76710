"""Functional transforms built on gc.grad: grad(fn), value_and_grad, vjp, jvp, hvp, jacobian, hessian.

All of them are traceable: call them inside a function being traced (or pass the
function they return to gc.compile), and they record ordinary nodes, so their results
export to ONNX and can be differentiated again. Conventions follow gc.grad: an input
the function does not depend on gets zeros of its shape, never an error.

gc.grad is both the engine's call, gc.grad(outputs, inputs), and JAX's transform,
gc.grad(fn, argnums=0, has_aux=False): a callable first argument selects the transform.
Arguments differentiated by grad(fn) and value_and_grad may be pytrees (nested dicts of
parameters, gc.nn Modules); their gradients have the same structure.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import GcompileError
from ..frontend import pytree
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor, current_frame
from ..ir import dims
from ..ir.dtypes import is_float
from ..ops.basic import add_n, cast, zeros_like
from ..ops.indexing import stack
from ..ops.reduce import sum as reduce_sum
from ..ops.shape import reshape
from .engine import grad as grad_of
from .engine import prune_new_nodes

__all__ = ["grad", "hessian", "hvp", "jacobian", "jvp", "value_and_grad", "vjp"]

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
    if not isinstance(value, Tensor) or value.shape != () or not is_float(value.dtype):
        described = value.type if isinstance(value, Tensor) else type(value).__name__
        raise GcompileError(f"{who} needs a function returning a floating-point scalar Tensor (shape ()), "
                            f"got {described}; reduce it first (e.g. F.sum or F.mean)")
    return value


def _as_tensors(arg: Any) -> Any:
    """An argument with every leaf a Tensor (arrays and numbers become constants)."""
    return as_tensor(arg) if pytree.children_of(arg) is None else pytree.tree_map(as_tensor, arg)


def value_and_grad(fn: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
    """A function returning (fn(*args), gradient of fn w.r.t. args[argnums]).

    fn must return a floating-point scalar Tensor, or with has_aux=True a pair (scalar, aux),
    aux being any pytree carried along undifferentiated; the result is then ((value, aux),
    gradient), as in JAX. The gradient is shaped like its argument (a pytree argument, such as
    a dict of parameters or a gc.nn Module, gets a gradient of the same structure, with None
    for its buffers and its leaves that are not floating point), and is a tuple over arguments
    for a tuple `argnums`.
    """
    @functools.wraps(fn)
    def wrapped(*args):
        args = [_as_tensors(a) for a in args]
        wrt, single = _select(args, argnums)
        flat = [pytree.flatten(a) for a in wrt]
        result = fn(*args)
        if has_aux:
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise GcompileError("value_and_grad(has_aux=True) needs a function returning a pair (loss, aux), "
                                    f"got {type(result).__name__}")
            value, aux = _scalar(result[0], "value_and_grad"), result[1]
        else:
            value = _scalar(result, "value_and_grad")
        # In a pytree, buffers (a module's running statistics) and leaves that are not floating point
        # (a step counter) get None; a lone integer argument is an error.
        wanted = [leaf for leaves, tree in flat
                  for leaf, buffer in zip(leaves, pytree.buffer_mask(tree))
                  if tree.is_leaf or (is_float(leaf.dtype) and not buffer)]
        grads = dict(zip(map(id, wanted), grad_of(value, wanted)))
        trees = [pytree.unflatten(tree, [grads.get(id(leaf)) for leaf in leaves]) for leaves, tree in flat]
        gradient = trees[0] if single else tuple(trees)
        return ((value, aux) if has_aux else value), gradient
    return wrapped


def grad(fn_or_outputs: Any, *args: Any, **kwargs: Any) -> Any:
    """Two forms. gc.grad(outputs, inputs, grad_outputs=None), inside a traced function: the
    gradients of `outputs` w.r.t. `inputs` (see gradients/engine.py); `inputs` is a list of
    Tensors (giving a list) or another pytree of them, such as a dict (giving that structure).
    An output that is not a scalar needs its cotangent in `grad_outputs` (_check_seeded).

    gc.grad(fn, argnums=0, has_aux=False), JAX's transform: a function returning the gradient
    of the scalar fn w.r.t. args[argnums] (with has_aux, the pair (gradient, aux))."""
    if callable(fn_or_outputs) and not isinstance(fn_or_outputs, Tensor):
        return _grad_transform(fn_or_outputs, *args, **kwargs)
    return _grad_tensors(fn_or_outputs, *args, **kwargs)


def _grad_transform(fn: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
    value_grad = value_and_grad(fn, argnums, has_aux)

    @functools.wraps(fn)
    def wrapped(*args):
        value, gradient = value_grad(*args)
        return (gradient, value[1]) if has_aux else gradient
    return wrapped


def _grad_tensors(outputs: Any, inputs: Any, grad_outputs: Any = None) -> Any:
    _check_seeded(outputs, grad_outputs)
    if isinstance(inputs, (list, tuple)) and all(isinstance(x, Tensor) for x in inputs):
        return grad_of(outputs, inputs, grad_outputs)
    if isinstance(inputs, Tensor) or pytree.children_of(inputs) is None:
        return grad_of(outputs, inputs, grad_outputs)   # the engine's error names the mistake
    leaves, tree = pytree.flatten(inputs)
    return pytree.unflatten(tree, grad_of(outputs, leaves, grad_outputs))


def _check_seeded(outputs: Any, grad_outputs: Any) -> None:
    """Refuse a non-scalar output given no cotangent (grad_outputs None, or None in its entry), as
    PyTorch and JAX do: seeding it with ones silently differentiated its sum, which is rarely what
    was meant (a batch of losses, a vector field). Internal callers that mean ones pass them."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs) if isinstance(outputs, (list, tuple)) else []
    if grad_outputs is None:
        seeds = [None] * len(outs)
    elif isinstance(grad_outputs, (list, tuple)):
        seeds = list(grad_outputs)
    else:
        seeds = [grad_outputs]
    for y, seed in zip(outs, seeds):
        if seed is None and isinstance(y, Tensor) and y.shape != ():
            raise GcompileError(
                f"gc.grad of a non-scalar output ({y.type}, at {user_location()}) needs its cotangent: reduce it "
                "to a scalar first, e.g. gc.grad(F.sum(y), ...) or F.mean(y), or pass grad_outputs=[a cotangent "
                "of the output's shape] (PyTorch's backward and JAX's grad refuse it too)")


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
        return tuple(grad_of(outs, xs, cts))
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
    floats = [y for y in outs if is_float(y.dtype)]
    placeholders = [zeros_like(y) for y in floats]
    pulled = grad_of(floats, primals, placeholders)
    pushed = iter(grad_of(_inner(pulled, tangents), placeholders) if floats else [])
    results = [next(pushed) if is_float(y.dtype) else zeros_like(y) for y in outs]
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
    result = grad_of(_inner(grad_of(value, primals), vectors), primals)
    prune_new_nodes(graph, mark, [r.ref for r in result])
    return result[0] if single else tuple(result)


def _static(shape: tuple, what: str) -> tuple:
    if not dims.is_static(shape):
        raise GcompileError(f"jacobian/hessian need static shapes (one VJP per output element), but {what} has "
                            f"shape {dims.format_shape(shape)}; use vjp, jvp or hvp for symbolic dims")
    return shape


def _jacobian_of(y: Tensor, xs: list[Tensor]) -> list[Tensor]:
    """∂y/∂x for each x, shaped y.shape + x.shape: one VJP per element of y (one-hot cotangents), stacked."""
    if not is_float(y.dtype):
        raise GcompileError(f"jacobian of a non-float output ({y.type})")
    out_shape = _static(y.shape, "the output")
    for x in xs:
        _static(x.shape, "an input")
    if out_shape == ():
        return grad_of(y, xs)
    n = int(np.prod(out_shape))
    rows = [grad_of(y, xs, [np.eye(n, dtype=y.dtype)[k].reshape(out_shape)]) for k in range(n)]
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

    A tuple `argnums` gives nested tuples: `result[i][j]` = ∂²fn/∂x_i∂x_j, shaped
    x_i.shape + x_j.shape. Static shapes only (one VJP per gradient element).
    """
    def scalar_fn(*args):
        return _scalar(fn(*args), "hessian")
    return functools.wraps(fn)(jacobian(jacobian(scalar_fn, argnums), argnums))
