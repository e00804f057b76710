"""Shape ops that move data without computing: reshape, transpose, broadcast, (un)squeeze, flatten."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir import dims
from ..ir.dims import format_shape
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from .shape_rules import broadcasts_to, normalize_axes, normalize_axis

__all__ = ["broadcast_to", "expand_dims", "flatten", "ravel", "reshape", "squeeze", "swapaxes", "transpose"]


# -- reshape -----------------------------------------------------------------------------------
def _resolve_target(shape, target) -> tuple:
    target = list(target)
    if sum(1 for d in target if isinstance(d, int) and d == -1) > 1:
        raise ShapeError(f"reshape target {tuple(target)} has more than one -1")
    total = dims.product(shape)
    if -1 in target:
        known = dims.product(d for d in target if d != -1)
        missing = dims.divide(total, known)
        if missing is None:
            raise ShapeError(f"cannot reshape {format_shape(shape)} to {tuple(target)}")
        target[target.index(-1)] = missing
    if dims.product(target) != total and dims.is_static(shape) == dims.is_static(target):
        raise ShapeError(f"cannot reshape {format_shape(shape)} ({total} elements) to {format_shape(tuple(target))}")
    return tuple(target)


def reshape(x, *shape) -> Tensor:
    """x with a new shape (ints, symbol names, at most one -1)."""
    x = as_tensor(x)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(d) if isinstance(d, (int, np.integer)) else d for d in shape)
    try:
        target = _resolve_target(x.shape, shape)
    except ShapeError as err:
        raise ShapeError(f"reshape: {err} (at {user_location()})") from None
    return x if target == x.shape else apply("reshape", [x], shape=target)


def _lower_reshape(ctx, names, node):
    # allowzero: a 0 in the target is a zero-sized dim, as in numpy (ONNX would copy the input's dim)
    return ctx.emit("Reshape", [names[0], ctx.shape_tensor(node.attrs["shape"])], allowzero=1)


defop("reshape", infer=lambda types, shape: [tensor_type(types[0].dtype, shape)],
      reference=lambda x, shape: np.reshape(x, shape), lower=_lower_reshape,
      vjp=lambda g, ins, outs, shape: [reshape(g[0], ins[0].shape)],
      traits={Trait.CHEAP, Trait.ELEMENT_COPY, Trait.NOOP_IF_SAME_TYPE})


# -- transpose ---------------------------------------------------------------------------------
def transpose(x, axes=None) -> Tensor:
    """x with its axes permuted (default: reversed)."""
    x = as_tensor(x)
    perm = tuple(reversed(range(x.ndim))) if axes is None else tuple(normalize_axis(int(a), x.ndim) for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {x.ndim} axes")
    return x if perm == tuple(range(x.ndim)) else apply("transpose", [x], perm=perm)


def swapaxes(x, a: int, b: int) -> Tensor:
    """x with axes a and b exchanged (negative axes count from the end), as numpy.swapaxes."""
    x = as_tensor(x)
    perm = list(range(x.ndim))
    a, b = normalize_axis(a, x.ndim), normalize_axis(b, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


defop("transpose", infer=lambda types, perm: [tensor_type(types[0].dtype, tuple(types[0].shape[p] for p in perm))],
      reference=lambda x, perm: np.transpose(x, perm),
      lower=lambda ctx, names, node: ctx.emit("Transpose", names, perm=list(node.attrs["perm"])),
      vjp=lambda g, ins, outs, perm: [transpose(g[0], tuple(np.argsort(perm)))],
      traits={Trait.CHEAP, Trait.ELEMENT_COPY})   # not NOOP_IF_SAME_TYPE: a square matrix's transpose has its type


# -- broadcast ---------------------------------------------------------------------------------
def broadcast_to(x, shape) -> Tensor:
    """x broadcast (numpy rules) to `shape`."""
    x, shape = as_tensor(x), tuple(shape)
    if x.shape == shape:
        return x
    if not broadcasts_to(x.shape, shape):
        raise ShapeError(f"broadcast_to: cannot broadcast {format_shape(x.shape)} to {format_shape(shape)} "
                         f"(at {user_location()})")
    return apply("expand", [x], shape=shape)


def _lower_expand(ctx, names, node):
    shape = node.attrs["shape"]
    if 0 in shape:
        # ONNX Runtime's ExpandElimination takes 1-vs-0 to 1 and drops the Expand: an empty result
        # needs no values, so make it directly.
        return ctx.fill(shape, 0, node.outputs[0].dtype)
    return ctx.emit("Expand", [names[0], ctx.shape_tensor(shape)])


defop("expand", infer=lambda types, shape: [tensor_type(types[0].dtype, shape)],
      reference=lambda x, shape: np.broadcast_to(x, shape).copy(), lower=_lower_expand,
      vjp=lambda g, ins, outs, shape: [g[0]],   # summed back to the input shape by gc.grad
      traits={Trait.CHEAP, Trait.ELEMENT_COPY, Trait.NOOP_IF_SAME_TYPE})


# -- squeeze / expand_dims / flatten (all reshapes) ---------------------------------------------
def expand_dims(x, axis) -> Tensor:
    """x with new size-1 axes inserted at `axis` (an int or a tuple, positions in the result)."""
    x = as_tensor(x)
    axes = normalize_axes(axis, x.ndim + (1 if isinstance(axis, (int, np.integer)) else len(axis)))
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def squeeze(x, axis=None) -> Tensor:
    """x without the size-1 axes listed (default: all size-1 axes)."""
    x = as_tensor(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = normalize_axes(axis, x.ndim)
        for a in axes:
            if x.shape[a] != 1:
                raise ShapeError(f"squeeze: axis {a} of {format_shape(x.shape)} has size {x.shape[a]}, not 1")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def flatten(x, start_axis: int = 1) -> Tensor:
    """x with the axes from `start_axis` on merged into one."""
    x = as_tensor(x)
    start = normalize_axis(start_axis, x.ndim)
    return reshape(x, x.shape[:start] + (dims.product(x.shape[start:]),))


def ravel(x) -> Tensor:
    """x flattened to one axis, in row-major order, as numpy.ravel (the length may be symbolic)."""
    x = as_tensor(x)
    return reshape(x, (dims.product(x.shape),))
