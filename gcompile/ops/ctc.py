"""Connectionist temporal classification loss (log-space forward algorithm).

Composed from existing ops (gathers, where, logsumexp), so it differentiates to any
order. "log 0" is the finite LOG_ZERO rather than -inf: exp(LOG_ZERO - m) underflows to
exactly 0 for any reachable m, and LOG_ZERO plus a log-probability rounds back to about
LOG_ZERO, so the result is exact to float precision while no inf - inf (NaN) can arise in
the values or their gradients. Impossible alignments are found exactly from the lengths
and repeated labels, and their loss is replaced with where(), which passes them no gradient.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..errors import ShapeError
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dtypes import is_float
from .basic import cast, full
from .elementwise import equal, greater, logical_and, maximum, not_equal, where
from .indexing import concat, stack, take, take_along_axis
from .reduce import logsumexp, mean
from .reduce import sum as reduce_sum
from .shape import expand_dims

__all__ = ["ctc_loss"]

LOG_ZERO = -1e30


def _shift_right(x: Tensor, k: int, fill) -> Tensor:
    """x (N, L) moved k places to the right along axis 1, the first k columns set to `fill`."""
    return concat([full((x.shape[0], k), fill, x.dtype), x[:, :x.shape[1] - k]], axis=1)


def _extended_labels(labels: Tensor, label_lengths: Tensor, blank: int) -> tuple[Tensor, Tensor]:
    """(extended (N, 2S+1): blank, l1, blank, l2, ..., blank; labels), padded label positions made blanks."""
    n, s = labels.shape
    labels = where(greater(expand_dims(label_lengths, 1), np.arange(s, dtype=label_lengths.dtype)), labels, blank)
    with_blank = concat([labels, full((n, 1), blank, labels.dtype)], axis=1)
    order = np.full(2 * s + 1, s, dtype=np.int64)
    order[1::2] = np.arange(s)
    return take(with_blank, order, axis=1), labels


def _impossible(labels: Tensor, input_lengths: Tensor, label_lengths: Tensor) -> Tensor:
    """True where no alignment exists: fewer frames than labels plus the blanks that must
    separate repeated labels (padded positions are blanks, so they never repeat a label)."""
    needed = label_lengths
    if labels.shape[1] > 1:
        repeats = logical_and(equal(labels[:, 1:], labels[:, :-1]),
                              greater(expand_dims(label_lengths, 1),
                                      np.arange(1, labels.shape[1], dtype=label_lengths.dtype)))
        needed = needed + reduce_sum(cast(repeats, label_lengths.dtype), axis=1)
    return greater(cast(needed, input_lengths.dtype), input_lengths)


def ctc_loss(log_probs: Tensor | ArrayLike, labels: Tensor | ArrayLike, input_lengths: Tensor | ArrayLike,
             label_lengths: Tensor | ArrayLike, blank: int = 0, reduce: str = "mean",
             zero_infinity: bool = False) -> Tensor:
    """CTC loss, as PyTorch's nn.CTCLoss with the padded layout.

    log_probs (T, N, C) (log-softmax outputs), labels (N, S) int (padded; positions beyond a
    sequence's label length are ignored), input_lengths and label_lengths (N,) int. T, C and
    S must be static. reduce: "none" (N,), "sum", or "mean" (each loss divided by its label
    length, then averaged over the batch). An impossible alignment gives +inf, or 0 with
    zero_infinity=True; either way it sends no gradient (never NaN).
    """
    log_probs = as_tensor(log_probs)
    labels, input_lengths, label_lengths = (as_tensor(a) for a in (labels, input_lengths, label_lengths))
    if log_probs.ndim != 3 or not is_float(log_probs.dtype):
        raise ShapeError(f"ctc_loss: log_probs must be float (T, N, C), got {log_probs.type}")
    if labels.ndim != 2 or labels.dtype.kind not in "iu" or labels.shape[1] == 0:
        raise ShapeError(f"ctc_loss: labels must be int (N, S) with S >= 1, got {labels.type}")
    for what, a in (("input_lengths", input_lengths), ("label_lengths", label_lengths)):
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise ShapeError(f"ctc_loss: {what} must be an int vector (N,), got {a.type}")
    if reduce not in ("mean", "sum", "none"):
        raise ValueError(f"ctc_loss: reduce must be 'mean', 'sum' or 'none', got {reduce!r}")
    steps = log_probs.shape[0]
    if not isinstance(steps, int):
        raise ShapeError(f"ctc_loss: the time axis must be static, got {steps!r}")

    ext, labels = _extended_labels(labels, label_lengths, blank)
    width = ext.shape[1]
    # log-probability of each extended label at each step (T, N, 2S+1); -inf inputs made finite
    emit = maximum(take_along_axis(log_probs, expand_dims(ext, 0), axis=2), LOG_ZERO)
    skip = logical_and(not_equal(ext, blank), not_equal(ext, _shift_right(ext, 2, -1)))
    running = greater(expand_dims(input_lengths, 1), np.arange(steps, dtype=input_lengths.dtype).reshape(-1, 1, 1))

    alpha = where(np.arange(width) < 2, emit[0], LOG_ZERO)
    for t in range(1, steps):
        from_skip = where(skip, _shift_right(alpha, 2, LOG_ZERO), LOG_ZERO)
        paths = stack([alpha, _shift_right(alpha, 1, LOG_ZERO), from_skip])
        alpha = where(running[t], logsumexp(paths, axis=0) + emit[t], alpha)

    end = expand_dims(2 * label_lengths, 1)
    last = take_along_axis(alpha, end, axis=1)
    before = where(greater(end, 0), take_along_axis(alpha, maximum(end - 1, 0), axis=1), LOG_ZERO)
    loss = -logsumexp(concat([last, before], axis=1), axis=1)
    loss = where(_impossible(labels, input_lengths, label_lengths), 0.0 if zero_infinity else np.inf, loss)
    if reduce == "none":
        return loss
    if reduce == "sum":
        return reduce_sum(loss)
    return mean(loss / cast(maximum(label_lengths, 1), loss.dtype))
