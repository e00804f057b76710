"""scaled_dot_product_attention and embedding_bag, as PyTorch defines them, composed from
matmul, softmax, gathers and reductions (so every gradient order comes from those rules)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from .basic import cast
from .elementwise import _promote, logical_and, not_equal, where
from .indexing import concat, take
from .linalg import matmul
from .nn import dropout, softmax
from .reduce import max as reduce_max
from .reduce import sum as reduce_sum
from .shape import expand_dims, swapaxes
from .windows import first_max

__all__ = ["embedding_bag", "scaled_dot_product_attention"]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, training: bool = False, seed: int | None = None) -> Tensor:
    """torch's scaled_dot_product_attention: softmax(q k^T * scale + mask) v for q (..., L, E),
    k (..., S, E), v (..., S, Ev); scale defaults to 1/sqrt(E). attn_mask is boolean (True takes
    part; a row with no True gives zeros, as torch) or float (added to the scores); is_causal
    masks with torch's lower triangle (L, S); a boolean mask known when tracing (is_causal, a numpy
    array) is added as 0 / -inf, as torch's reference does, so a masked score of +inf or NaN gives
    NaN as there. dropout_p > 0 needs training=True (the attention weights go through F.dropout
    with `seed`: a keyed mask inside gc.random_key, as in a training step, else ONNX's Dropout)."""
    q, k, v = _promote(query, key, value)
    if not is_float(q.dtype):
        raise ShapeError(f"scaled_dot_product_attention needs float tensors, got {q.dtype.name} "
                         f"(at {user_location()})")
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: query {format_shape(q.shape)}, key {format_shape(k.shape)} "
                         f"and value {format_shape(v.shape)} must be (..., L, E), (..., S, E), (..., S, Ev) "
                         f"(at {user_location()})")
    if dropout_p and not training:
        raise UnsupportedError(f"scaled_dot_product_attention: dropout_p={dropout_p} needs training=True (torch "
                               f"always drops; gcompile only in a training graph) (at {user_location()})")
    if is_causal and attn_mask is not None:
        raise ShapeError(f"scaled_dot_product_attention: give attn_mask or is_causal, not both (at {user_location()})")
    e = q.shape[-1]
    if scale is None:
        if not isinstance(e, int):
            raise ShapeError(f"scaled_dot_product_attention: the embedding dim {e!r} is symbolic; give `scale` "
                             f"(at {user_location()})")
        scale = 1 / math.sqrt(e)
    if isinstance(e, int) and isinstance(k.shape[-2], int) and e > k.shape[-2]:
        scores = matmul(q, swapaxes(k, -1, -2)) * scale
    else:           # the smaller of q (..., L, E) and the scores (..., L, S) is scaled, in the gradient too
        scores = matmul(q * scale, swapaxes(k, -1, -2))
    if is_causal:
        sizes = q.shape[-2], k.shape[-2]
        if not all(isinstance(d, int) for d in sizes):
            raise ShapeError(f"scaled_dot_product_attention: is_causal needs static L and S, got {sizes} "
                             f"(at {user_location()})")
        attn_mask = np.tril(np.ones(sizes, bool))
    rows_allowed = None          # of a boolean mask: a row with nothing allowed gives zeros, as torch's
    if attn_mask is not None:
        mask = attn_mask if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
        if mask.dtype == np.bool_ and isinstance(mask, Tensor):
            scores = where(mask, scores, np.asarray(-np.inf, scores.dtype))
            rows_allowed = not_equal(reduce_max(cast(mask, scores.dtype), -1, keepdims=True), 0)
        elif mask.dtype == np.bool_:
            # A mask known when tracing is added as 0 / -inf, as torch's reference computation
            # does: no select forward nor in the gradient (an add is cheaper than a select on
            # every runtime we measured; docs/strategies.md).
            # A row with nothing allowed adds 0 (its weights become zeros below), so that its
            # softmax, and the gradient through it, stay finite.
            rows = np.any(mask, -1, keepdims=True)
            scores = scores + np.where(mask | ~rows, 0, -np.inf).astype(scores.dtype)
            rows_allowed = None if rows.all() else rows
        else:
            scores = scores + _promote(scores, mask)[1]
    weights = softmax(scores, -1)
    if rows_allowed is not None:  # (softmax of a row of -inf is NaN)
        weights = where(rows_allowed, weights, np.zeros((), scores.dtype))
    if dropout_p:
        weights = dropout(weights, dropout_p, training=True, seed=seed)
    return matmul(weights, v)


_BAG_MODES = ("sum", "mean", "max")


def embedding_bag(input, weight, offsets=None, mode: str = "mean", per_sample_weights=None,
                  include_last_offset: bool = False, padding_idx: int | None = None) -> Tensor:
    """torch's embedding_bag: rows of weight (V, D) gathered at the integer ids `input` and reduced
    per bag by "sum", "mean" or "max" (the first maximum gets the gradient, as torch). Bags are the
    rows of a 2-d input (B, n), or, for a 1-d input, the runs starting at `offsets`, which must be
    known when tracing (so every bag's length is static). Empty bags give zeros; ids equal to
    padding_idx (a negative one counts from the end, as torch) are left out (and not counted by
    "mean"); per_sample_weights (input's shape) scale the rows, with mode "sum" only."""
    weight = as_tensor(weight)
    ids = as_tensor(input)
    if ids.dtype.kind not in "iu" or weight.ndim != 2:
        raise ShapeError(f"embedding_bag: input must hold integer ids and weight be (V, D), got {ids.dtype.name} and "
                         f"{format_shape(weight.shape)} (at {user_location()})")
    if mode not in _BAG_MODES:
        raise ShapeError(f"embedding_bag: mode must be one of {', '.join(_BAG_MODES)}, got {mode!r} "
                         f"(at {user_location()})")
    if per_sample_weights is not None and mode != "sum":
        raise ShapeError(f"embedding_bag: per_sample_weights need mode='sum', got {mode!r} (at {user_location()})")
    gathered = take(weight, ids, axis=0)                                           # (*ids.shape, D)
    if per_sample_weights is not None:
        gathered = gathered * expand_dims(_promote(weight, per_sample_weights)[1], -1)
    if padding_idx is not None:
        rows = weight.shape[0]
        if not isinstance(rows, int) or not -rows <= padding_idx < rows:
            raise ShapeError(f"embedding_bag: padding_idx {padding_idx} must lie in [-V, V) for a static V, the rows "
                             f"of weight {format_shape(weight.shape)} (at {user_location()})")
        padding_idx %= rows
    present = None if padding_idx is None else not_equal(ids, padding_idx)
    if ids.ndim == 2:
        if offsets is not None:
            raise ShapeError(f"embedding_bag: offsets are for a 1-d input, got {format_shape(ids.shape)} "
                             f"(at {user_location()})")
        return _bag_reduce(gathered, present, mode)                               # each row of ids is a bag
    if ids.ndim != 1 or offsets is None:
        raise ShapeError(f"embedding_bag: a 1-d input needs offsets, a 2-d input none; got input "
                         f"{format_shape(ids.shape)} (at {user_location()})")
    if isinstance(offsets, Tensor):
        raise UnsupportedError("embedding_bag: offsets must be known when tracing (a list or numpy array): bag "
                               f"lengths decide the result's layout (at {user_location()})")
    length = ids.shape[0]
    if not isinstance(length, int):
        raise ShapeError(f"embedding_bag: the input length {length!r} must be static (at {user_location()})")
    starts = [int(o) for o in np.asarray(offsets).ravel()]
    ends = starts[1:] + [length]
    if include_last_offset:
        starts, ends = starts[:-1], ends[:-1]
    if any(s < 0 or e > length or s > e for s, e in zip(starts, ends)) or (starts and starts[0] != 0):
        raise ShapeError(f"embedding_bag: offsets {starts} must start at 0 and increase within the input's length "
                         f"{length} (at {user_location()})")
    width = max([e - s for s, e in zip(starts, ends)] + [0])
    positions = np.full((len(starts), width), length, np.int64)                  # `length`: no entry there
    for b, (s, e) in enumerate(zip(starts, ends)):
        positions[b, :e - s] = np.arange(s, e)
    extra = as_tensor(np.zeros((1, weight.shape[1]), gathered.dtype))
    picked = take(concat([gathered, extra]), positions, axis=0)                  # (B, width, D)
    members: Tensor | np.ndarray = positions < length
    if present is not None:
        members = logical_and(members, take(concat([present, as_tensor(np.zeros(1, bool))]), positions))
    return _bag_reduce(picked, members, mode)


def _bag_reduce(picked: Tensor, members, mode: str) -> Tensor:
    """picked (B, n, D) reduced over n, counting only the members (B, n) (None: all)."""
    zero = np.zeros((), picked.dtype)
    if members is None:
        members = np.ones(picked.shape[1:2], bool)
    mask = expand_dims(members, -1) if isinstance(members, Tensor) else members[..., None]
    count = (reduce_sum(cast(members, picked.dtype), -1, keepdims=True) if isinstance(members, Tensor)
             else as_tensor(members.sum(-1, keepdims=True).astype(picked.dtype)))
    if mode == "max":
        best, _ = first_max(swapaxes(where(mask, picked, np.asarray(-np.inf, picked.dtype)), 1, 2))
        return where(not_equal(count, 0), best, zero)                             # an empty bag gives zeros
    total = reduce_sum(where(mask, picked, zero), 1)
    if mode == "sum":
        return total
    return total / where(not_equal(count, 0), count, np.ones((), picked.dtype))
