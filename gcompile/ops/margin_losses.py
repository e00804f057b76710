"""PyTorch's margin and soft-margin losses beyond ops/losses.py: cosine_embedding_loss,
soft_margin_loss, multi_margin_loss, multilabel_margin_loss and multilabel_soft_margin_loss, with
torch's argument names and formulas (its epsilon in the cosine, its division by the class count).

Compositions: a hinge's gradient at its kink is torch's (0: the clamp's), and the soft margins
are softplus, exact for large margins of either sign.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dims import format_shape
from .activations import relu, softplus
from .basic import cast
from .cumulative import cumprod
from .elementwise import equal, logical_and, not_equal, power, sqrt, where
from .indexing import take_along_axis
from .losses import _floats, _reduction, _zero
from .reduce import any as reduce_any
from .reduce import mean
from .reduce import sum as reduce_sum
from .shape import expand_dims, reshape, squeeze

__all__ = ["cosine_embedding_loss", "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
           "soft_margin_loss"]

_COSINE_EPS = 1e-12          # torch adds it to each squared norm


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean") -> Tensor:
    """torch's cosine_embedding_loss: 1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it
    is -1 (0 elsewhere), the cosine over the last axis of (N, D) or (D,) inputs with 1e-12 added to
    each squared norm, as torch."""
    a, b, y = _floats(input1, input2, target)
    if a.ndim not in (1, 2) or a.shape != b.shape:
        raise ShapeError(f"cosine_embedding_loss: input1 {format_shape(a.shape)} and input2 {format_shape(b.shape)} "
                         f"must be one (N, D) or (D,) shape (at {user_location()})")
    axis = a.ndim - 1
    dot = reduce_sum(a * b, axis)
    cos = dot / sqrt((reduce_sum(a * a, axis) + _COSINE_EPS) * (reduce_sum(b * b, axis) + _COSINE_EPS))
    loss = where(equal(y, 1), 1 - cos, _zero(cos)) + where(equal(y, -1), relu(cos - margin), _zero(cos))
    return _reduction(loss, reduction, "cosine_embedding_loss")


def soft_margin_loss(input, target, reduction: str = "mean") -> Tensor:
    """torch's soft_margin_loss: log(1 + exp(-target·input)), as softplus."""
    x, y = _floats(input, target)
    return _reduction(softplus(-y * x), reduction, "soft_margin_loss")


def multilabel_soft_margin_loss(input, target, weight=None, reduction: str = "mean") -> Tensor:
    """torch's multilabel_soft_margin_loss: the mean over the classes (the last axis) of
    -(t·log σ(x) + (1 - t)·log σ(-x)), weighted per class by `weight`."""
    x, t = _floats(input, target)
    loss = t * softplus(-x) + (1 - t) * softplus(x)
    if weight is not None:
        loss = loss * _floats(weight, x)[0]
    return _reduction(mean(loss, -1), reduction, "multilabel_soft_margin_loss")


def _classes(input, target, what: str) -> tuple[Tensor, Tensor, bool]:
    """input as (N, C) (a (C,) or 0-d input as one row) and integer target, with whether it was one row."""
    x = _floats(input)[0]
    target = as_tensor(target)
    if target.dtype.kind not in "iu":
        raise ShapeError(f"{what}: target must hold integer classes, got {target.dtype.name} (at {user_location()})")
    one = x.ndim <= 1
    if one:
        x, target = reshape(x, (1, -1)), reshape(target, (1, -1))
    if x.ndim != 2 or not isinstance(x.shape[1], int):
        raise ShapeError(f"{what}: input must be (N, C) or (C,) with a static C, got {format_shape(x.shape)} "
                         f"(at {user_location()})")
    return x, cast(target, np.int64), one


def _per_sample(loss: Tensor, one: bool, reduction: str, what: str) -> Tensor:
    loss = _reduction(loss, reduction, what)
    return reshape(loss, ()) if one and reduction == "none" else loss


def multi_margin_loss(input, target, p: int = 1, margin: float = 1.0, weight=None, reduction: str = "mean") -> Tensor:
    """torch's multi_margin_loss for input (N, C) or (C,) and class target (N,) or (): the sum over the
    other classes j of max(0, margin - x[y] + x[j])^p (p 1 or 2), times weight[y], over C."""
    x, y, one = _classes(input, target, "multi_margin_loss")
    if p not in (1, 2):
        raise ShapeError(f"multi_margin_loss: p must be 1 or 2, got {p!r} (at {user_location()})")
    y = reshape(y, (-1,)) if one else y
    if y.shape != x.shape[:1]:
        raise ShapeError(f"multi_margin_loss: target {format_shape(y.shape)} does not fit input "
                         f"{format_shape(x.shape)} (at {user_location()})")
    c = x.shape[1]
    right = take_along_axis(x, expand_dims(y, 1), 1)                             # (N, 1)
    hinge = relu(margin - right + x)
    hinge = hinge if p == 1 else power(hinge, 2.0)
    other = not_equal(expand_dims(y, 1), np.arange(c, dtype=np.int64))
    loss = reduce_sum(where(other, hinge, _zero(x)), 1)
    if weight is not None:
        loss = loss * squeeze(take_along_axis(expand_dims(_floats(weight, x)[0], 0), expand_dims(y, 1), 1), 1)
    return _per_sample(loss / c, one, reduction, "multi_margin_loss")


def multilabel_margin_loss(input, target, reduction: str = "mean") -> Tensor:
    """torch's multilabel_margin_loss for input (N, C) or (C,) and target of the same shape listing
    each sample's classes up to the first -1: for each listed class j (as often as it is listed) and
    each class i not listed, max(0, 1 - (x[j] - x[i])), summed and divided by C."""
    x, y, one = _classes(input, target, "multilabel_margin_loss")
    if y.shape != x.shape:
        raise ShapeError(f"multilabel_margin_loss: target {format_shape(y.shape)} must have input's shape "
                         f"{format_shape(x.shape)} (at {user_location()})")
    c = x.shape[1]
    listed = cast(cumprod(cast(not_equal(y, -1), np.int64), axis=1), np.bool_)   # before the first -1
    classes = where(listed, y, np.int64(0))
    chosen = reduce_any(logical_and(expand_dims(listed, 2), equal(expand_dims(classes, 2),
                                                                  np.arange(c, dtype=np.int64))), 1)   # (N, C)
    picked = take_along_axis(x, classes, 1)                                        # x[y_k], (N, C)
    hinge = relu(1 - expand_dims(picked, 2) + expand_dims(x, 1))                   # (N, k, i)
    counted = logical_and(expand_dims(listed, 2), ~expand_dims(chosen, 1))
    loss = reduce_sum(where(counted, hinge, _zero(x)), (1, 2)) / c
    return _per_sample(loss, one, reduction, "multilabel_margin_loss")
