"""PyTorch's losses and similarity: nll_loss, binary_cross_entropy(_with_logits), l1_loss,
smooth_l1_loss, huber_loss, kl_div, poisson_nll_loss, gaussian_nll_loss, cosine_similarity,
pairwise_distance, margin_ranking_loss, hinge_embedding_loss and triplet_margin_loss, with torch's
argument names (`reduction`); the other margin losses are in ops/margin_losses.py.

All are compositions, written so their gradients are finite where torch's are (a norm at 0, a
log at 0 with a zero weight, the kinks of the hinge losses take torch's side).
"""
from __future__ import annotations

import numpy as np

from ..errors import GcompileError, ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from .activations import relu
from .basic import cast, stop_gradient
from .elementwise import (
    _promote,
    abs,
    exp,
    greater,
    less,
    log,
    log1p,
    maximum,
    minimum,
    not_equal,
    where,
)
from .indexing import take
from .nn import label_index, picked
from .reduce import mean
from .reduce import sum as reduce_sum
from .shape import broadcast_to, expand_dims, reshape
from .shape_rules import broadcast_shapes
from .statistics import vector_norm

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_similarity", "hinge_embedding_loss",
           "huber_loss", "kl_div", "l1_loss", "margin_ranking_loss", "nll_loss", "pairwise_distance",
           "gaussian_nll_loss", "poisson_nll_loss", "smooth_l1_loss", "triplet_margin_loss"]


def _reduction(loss: Tensor, reduction: str, what: str) -> Tensor:
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return reduce_sum(loss)
    if reduction == "none":
        return loss
    raise GcompileError(f"{what}: reduction must be 'mean', 'sum' or 'none', got {reduction!r} "
                        f"(at {user_location()})")


def _floats(*values) -> list[Tensor]:
    xs = _promote(*values)
    return xs if is_float(xs[0].dtype) else [cast(x, np.float32) for x in xs]


def _zero(x: Tensor) -> np.ndarray:
    return np.zeros((), x.dtype)


# -- classification -------------------------------------------------------------------------------------
def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """torch's nll_loss on log-probabilities `input` (N, C, *d) or (C,) and integer class `target`
    (N, *d) or (): -weight[t] * input[t]; targets equal to ignore_index count for nothing, and
    "mean" divides by the summed weights of the others (NaN if every target is ignored, as torch).
    reduction "none" gives the target's shape (0-d for a (C,) input, as torch)."""
    input, target = _floats(input)[0], as_tensor(target)
    if target.dtype.kind not in "iu":
        raise ShapeError(f"nll_loss: target must hold integer classes, got {target.dtype.name} (at {user_location()})")
    unbatched = input.ndim == 1
    if unbatched:            # one sample: a batch of one, whose per-sample loss is the 0-d result
        input, target = expand_dims(input, 0), expand_dims(target, 0)
    c = input.shape[1]
    if input.ndim < 2 or target.shape != input.shape[:1] + input.shape[2:] or not isinstance(c, int):
        raise ShapeError(f"nll_loss: target {format_shape(target.shape)} does not fit input "
                         f"{format_shape(input.shape)} (classes on axis 1, static) (at {user_location()})")
    counted = not_equal(target, ignore_index)
    kept = cast(counted, input.dtype)
    if weight is not None:
        inside, index = label_index(target, c)
        kept = kept * where(inside, take(_promote(input, weight)[1], index), np.zeros((), input.dtype))
    loss = where(counted, -picked(input, target, 1) * kept, np.zeros((), input.dtype))
    if reduction == "mean":
        return reduce_sum(loss) / reduce_sum(kept)
    loss = _reduction(loss, reduction, "nll_loss")
    return reshape(loss, ()) if unbatched else loss


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean") -> Tensor:
    """torch's binary_cross_entropy of probabilities `input` against `target`: -(t log p + (1-t)
    log(1-p)), each log clamped at -100 as torch clamps it (so p = 0 or 1 stay finite)."""
    p, t = _floats(input, target)
    loss = -(t * maximum(log(p), -100.0) + (1 - t) * maximum(log1p(-p), -100.0))
    return _reduction(loss if weight is None else loss * weight, reduction, "binary_cross_entropy")


def binary_cross_entropy_with_logits(input, target, weight=None, reduction: str = "mean", pos_weight=None) -> Tensor:
    """torch's binary_cross_entropy_with_logits: (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x),
    computed stably (softplus(-x) = relu(-x) + log1p(exp(-|x|)))."""
    x, t = _floats(input, target)
    softplus_neg = relu(-x) + log1p(exp(minimum(x, -x)))
    scale = 1 if pos_weight is None else 1 + (pos_weight - 1) * t
    loss = (1 - t) * x + scale * softplus_neg
    return _reduction(loss if weight is None else loss * weight, reduction, "binary_cross_entropy_with_logits")


# -- regression -------------------------------------------------------------------------------------------
def l1_loss(input, target, reduction: str = "mean", weight=None) -> Tensor:
    """torch's l1_loss: |input - target| (gradient 0 where they are equal, as torch's sign)."""
    x, t = _floats(input, target)
    loss = abs(x - t)
    return _reduction(loss if weight is None else loss * weight, reduction, "l1_loss")


def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """torch's smooth_l1_loss: 0.5 d^2 / beta where d = |input - target| < beta, else d - beta/2
    (beta = 0 is l1_loss)."""
    x, t = _floats(input, target)
    d = abs(x - t)
    if beta == 0:
        return _reduction(d, reduction, "smooth_l1_loss")
    return _reduction(where(less(d, beta), 0.5 * d * d / beta, d - 0.5 * beta), reduction, "smooth_l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None) -> Tensor:
    """torch's huber_loss: 0.5 d^2 where d = |input - target| < delta, else delta (d - delta/2)."""
    x, t = _floats(input, target)
    d = abs(x - t)
    loss = where(less(d, delta), 0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduction(loss if weight is None else loss * weight, reduction, "huber_loss")


def kl_div(input, target, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """torch's kl_div with log-probabilities `input`: target (log target - input), with 0 where the
    target is 0; log_target=True takes the target as log-probabilities. reduction "batchmean"
    divides the sum by the first dim (torch's advice for the true KL divergence)."""
    x, t = _floats(input, target)
    if log_target:
        loss = exp(t) * (t - x)
    else:
        positive = greater(t, 0)
        loss = where(positive, t * log(where(positive, t, np.ones((), t.dtype))), _zero(t)) - t * x
    if reduction == "batchmean":
        return reduce_sum(loss) / (loss.shape[0] if loss.ndim else 1)
    return _reduction(loss, reduction, "kl_div")


# -- likelihoods ------------------------------------------------------------------------------------------
def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, eps: float = 1e-8,
                     reduction: str = "mean") -> Tensor:
    """torch's poisson_nll_loss: exp(input) - target·input for a log-rate input (log_input), else
    input - target·log(input + eps); full=True adds Stirling's approximation of log(target!),
    target·log(target) - target + log(2π·target)/2, where target > 1."""
    x, t = _floats(input, target)
    loss = exp(x) - t * x if log_input else x - t * log(x + eps)
    if full:
        big = greater(t, 1)
        safe = where(big, t, np.ones((), t.dtype))
        loss = loss + where(big, safe * log(safe) - safe + 0.5 * log(2 * np.pi * safe), _zero(t))
    return _reduction(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """torch's gaussian_nll_loss: (log(var) + (input - target)²/var)/2, plus log(2π)/2 with full=True.
    var has input's shape, or one fewer trailing dim, or a last dim of 1 (one variance per row); it
    is clamped below at eps with its gradient passed through the clamp, as torch does."""
    x, t, v = _floats(input, target, var)
    if v.ndim == x.ndim - 1 and v.shape == x.shape[:-1]:
        v = expand_dims(v, -1)
    if v.ndim != x.ndim or not all(a in (b, 1) for a, b in zip(v.shape[-1:], x.shape[-1:])) or \
            broadcast_shapes(v.shape, x.shape) != broadcast_shapes(x.shape, t.shape):
        raise ShapeError(f"gaussian_nll_loss: var {format_shape(v.shape)} does not fit input {format_shape(x.shape)} "
                         f"(at {user_location()})")
    v = v + stop_gradient(maximum(v, eps) - v)
    loss = 0.5 * (log(v) + (x - t) * (x - t) / v)
    return _reduction(loss + 0.5 * np.log(2 * np.pi) if full else loss, reduction, "gaussian_nll_loss")


# -- similarity and margins ---------------------------------------------------------------------------------
def cosine_similarity(x1, x2, axis: int = 1, eps: float = 1e-8) -> Tensor:
    """torch's cosine_similarity along `axis` (torch's dim): the sum of x1/||x1|| * x2/||x2||, each
    norm clamped below at eps, as torch computes it."""
    a, b = _floats(x1, x2)
    shape = broadcast_shapes(a.shape, b.shape)                     # torch takes the norms after broadcasting
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    na = maximum(vector_norm(a, 2, axis, keepdims=True), eps)
    nb = maximum(vector_norm(b, 2, axis, keepdims=True), eps)
    return reduce_sum((a / na) * (b / nb), axis)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """torch's pairwise_distance: ||x1 - x2 + eps||_p over the last axis."""
    a, b = _floats(x1, x2)
    return vector_norm(a - b + eps, p, -1, keepdims=keepdim)


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean") -> Tensor:
    """torch's margin_ranking_loss: max(0, -target (input1 - input2) + margin)."""
    a, b, y = _floats(input1, input2, target)
    return _reduction(relu(-y * (a - b) + margin), reduction, "margin_ranking_loss")


def hinge_embedding_loss(input, target, margin: float = 1.0, reduction: str = "mean") -> Tensor:
    """torch's hinge_embedding_loss: input where target is 1, max(0, margin - input) where it is -1
    (other target values get both terms, as torch computes them)."""
    x, y = _floats(input, target)
    loss = where(not_equal(y, 1), relu(margin - x), _zero(x)) + where(not_equal(y, -1), x, _zero(x))
    return _reduction(loss, reduction, "hinge_embedding_loss")


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, reduction: str = "mean") -> Tensor:
    """torch's triplet_margin_loss: max(d(a, p) - d(a, n) + margin, 0) with pairwise_distance d;
    swap=True uses min(d(a, n), d(p, n)) for the negative distance."""
    a, pos, neg = _floats(anchor, positive, negative)
    d_pos = pairwise_distance(a, pos, p, eps)
    d_neg = pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = minimum(d_neg, pairwise_distance(pos, neg, p, eps))
    return _reduction(relu(d_pos - d_neg + margin), reduction, "triplet_margin_loss")

