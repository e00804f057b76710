"""The ONNX Attention translator (opsets 23 to 25): scaled dot-product attention written with matmul and softmax.

Q, K, V are (batch, heads, seq, head_size) or (batch, seq, hidden) with q_num_heads/kv_num_heads;
an optional mask (bool: True attends; or an additive float bias, padded with "masked" up to the key
length), a key/value cache (past_key/past_value, concatenated before the new keys), is_causal
(bottom-right aligned when there is a cache), a custom scale, softcap and grouped-query heads
(each key/value head serves q_num_heads / kv_num_heads query heads, repeated in place). A query row
with every key masked gives zeros, as the definition says, instead of softmax's 0/0. The scale is
applied as sqrt(scale) to both Q and K, in the definition's order. Opset 24's nonpad_kv_seqlen masks
each example's keys past its valid length (and moves its causal frontier there), opset 25's
left_window_size and right_window_size limit each query to a window of keys around its position;
softmax_precision computes the softmax in that type, and the qk_matmul_output modes give the product,
after the softcap, after the bias too, or the probabilities.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ir import dims
from ...ir.dtypes import is_float
from ..table import np_dtype, onnx_op, require_float, scalar_like
from .shape import diagonal_offsets, iota


def _heads(x, heads: int):
    """(batch, seq, heads*size) -> (batch, heads, seq, size)."""
    b, s, hidden = x.shape
    return F.transpose(F.reshape(x, (b, s, heads, dims.divide(hidden, heads))), (0, 2, 1, 3))


def _repeat_heads(x, times: int):
    """Each head repeated `times` times in place: [h0, h0, h1, h1, ...]."""
    if times == 1:
        return x
    b, h, s, d = x.shape
    return F.reshape(F.broadcast_to(F.expand_dims(x, 2), (b, h, times, s, d)), (b, h * times, s, d))


def _bias(n, q, k, mask, past, nonpad):
    """The additive bias (q_len, kv_len) or broadcastable to (batch, heads, q_len, kv_len), with -inf
    where masked; None when nothing is. The causal and sliding-window masks are aligned to the end
    of the keys: query i sits at position offset + i, the offset being the cache's length, or with
    nonpad_kv_seqlen each example's valid keys less the queries."""
    q_len, kv_len = q.shape[2], k.shape[2]
    bias = None
    if mask is not None:
        if mask.shape[-1] != kv_len:
            if not isinstance(kv_len, int) or not isinstance(mask.shape[-1], int):
                raise n.unsupported(f"a mask of shape {tuple(mask.shape)} for {kv_len!r} keys")
            fill = False if mask.dtype == np.bool_ else -np.inf
            mask = F.pad(mask, ((0, 0),) * (mask.ndim - 1) + ((0, kv_len - mask.shape[-1]),), "constant", fill)
        bias = (F.where(mask, scalar_like(0, q), scalar_like(-np.inf, q)) if mask.dtype == np.bool_ else
                F.cast(mask, q.dtype))
    left, right = n.attr("left_window_size", -1), n.attr("right_window_size", -1)
    allowed = None
    if n.attr("is_causal", 0) or left >= 0 or right >= 0:
        if not isinstance(q_len, int) or not isinstance(kv_len, int):
            raise n.unsupported(f"is_causal or a sliding window with symbolic sequence lengths ({q_len!r} queries, "
                                f"{kv_len!r} keys)")
        if past is not None or nonpad is None:
            offset = 0 if past is None else past.shape[2]
        else:                                                # per example: (batch, 1, 1, 1)
            offset = F.reshape(F.cast(nonpad, np.int64), (-1, 1, 1, 1)) - np.int64(q_len)
        # how far key j lies before query i's position (at run time for a grid of a size the file
        # declares: diagonal_offsets)
        behind = offset - diagonal_offsets(q_len, kv_len)
        limits = [(behind, 0)] if n.attr("is_causal", 0) else []       # key j at or before the position
        if left >= 0:
            limits.append((-behind, -left))                               # at most left_window_size before
        if right >= 0:
            limits.append((behind, -right))                               # at most right_window_size after
        for value, floor in limits:
            allowed = _and(allowed, value >= floor if isinstance(value, np.ndarray) else
                           F.greater_equal(value, np.int64(floor)))
    if nonpad is not None:                                    # keys past each example's valid length
        allowed = _and(allowed, F.less(iota(kv_len),
                                       F.reshape(F.cast(nonpad, np.int64), (-1, 1, 1, 1))))
    if allowed is not None:
        blocked = np.where(allowed, 0, -np.inf).astype(q.dtype) if isinstance(allowed, np.ndarray) else \
            F.where(allowed, scalar_like(0, q), scalar_like(-np.inf, q))
        bias = blocked if bias is None else bias + blocked
    return bias


def _and(a, b):
    """a and b of numpy masks (kept a constant) or Tensors; a may be None."""
    if a is None:
        return b
    return a & b if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) else F.logical_and(a, b)


@onnx_op("Attention")
def _attention(n, q, k, v, mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
    q, k, v = (require_float(n, t, what) for t, what in ((q, "Q"), (k, "K"), (v, "V")))
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise n.unsupported("nonpad_kv_seqlen with past_key (the cache is either external or internal)")
    three_d = q.ndim == 3
    if three_d:
        q_heads, kv_heads = n.attr("q_num_heads"), n.attr("kv_num_heads")
        if q_heads is None or kv_heads is None:
            raise n.unsupported("3-D inputs without q_num_heads and kv_num_heads")
        q, k, v = _heads(q, q_heads), _heads(k, kv_heads), _heads(v, kv_heads)
    if past_key is not None:
        k, v = F.concat([past_key, k], 2), F.concat([past_value, v], 2)
    present_key, present_value = k, v
    if q.shape[1] != k.shape[1]:
        if k.shape[1] != v.shape[1] or q.shape[1] % k.shape[1]:
            raise n.unsupported(f"{q.shape[1]} query heads for {k.shape[1]} key and {v.shape[1]} value heads")
        k, v = _repeat_heads(k, q.shape[1] // k.shape[1]), _repeat_heads(v, q.shape[1] // k.shape[1])
    scale = n.attr("scale")
    root = scalar_like(np.sqrt(scale if scale is not None else 1 / np.sqrt(q.shape[3])), q)
    raw = F.matmul(q * root, F.swapaxes(k * root, -1, -2))
    softcap = n.attr("softcap", 0.0)
    scores = F.tanh(raw / scalar_like(softcap, q)) * scalar_like(softcap, q) if softcap > 0 else raw
    bias = _bias(n, q, k, mask, past_key, nonpad_kv_seqlen)
    biased = scores if bias is None else scores + bias
    precision = n.attr("softmax_precision")
    wide = np.dtype(q.dtype) if precision is None else np_dtype(precision, n.describe())
    if not is_float(wide):
        raise n.unsupported(f"softmax_precision {wide.name} (a float type)")
    logits = F.cast(biased, wide)              # the softmax in softmax_precision, its result in the inputs' dtype
    if bias is None:
        probs = F.softmax(logits, -1)
    else:
        blocked = F.equal(F.max(bias, -1, keepdims=True), scalar_like(-np.inf, q))   # a row with no key to attend
        probs = F.where(blocked, np.zeros((), wide), F.softmax(F.where(blocked, np.zeros((), wide), logits), -1))
    probs = F.cast(probs, q.dtype)
    y = F.matmul(probs, v)
    if three_d:
        b, h, s, d = y.shape
        y = F.reshape(F.transpose(y, (0, 2, 1, 3)), (b, s, dims.product((h, d))))
    if not n.wants(3):
        return y, present_key, present_value
    mode = n.attr("qk_matmul_output_mode", 0)
    if mode == 0 and softcap > 0:
        raise n.unsupported("the qk_matmul_output of mode 0 with softcap (ONNX's text gives the product before the "
                            "softcap, its reference implementation after it)")
    if mode not in (0, 1, 2, 3):
        raise n.unsupported(f"qk_matmul_output_mode {mode} (0 to 3)")
    return y, present_key, present_value, (raw, scores, biased, probs)[mode]
