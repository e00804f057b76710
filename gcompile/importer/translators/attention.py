"""The ONNX Attention translator (opset 23): scaled dot-product attention written with matmul and softmax.

Q, K, V are (batch, heads, seq, head_size) or (batch, seq, hidden) with q_num_heads/kv_num_heads;
an optional mask (bool: True attends; or an additive float bias, padded with "masked" up to the key
length), a key/value cache (past_key/past_value, concatenated before the new keys), is_causal
(bottom-right aligned when there is a cache), a custom scale, softcap and grouped-query heads
(each key/value head serves q_num_heads / kv_num_heads query heads, repeated in place). A query row
with every key masked gives zeros, as the definition says, instead of softmax's 0/0. The scale is
applied as sqrt(scale) to both Q and K, in the definition's order.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ir import dims
from ..table import np_dtype, onnx_op, require_float, scalar_like
from .shape import diagonal_offsets


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


def _bias(n, q, k, mask, past):
    """The additive bias (q_len, kv_len) or broadcastable, with -inf where masked; None when nothing is."""
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
    if n.attr("is_causal", 0):
        if not isinstance(q_len, int) or not isinstance(kv_len, int):
            raise n.unsupported(f"is_causal with symbolic sequence lengths ({q_len!r} queries, {kv_len!r} keys)")
        offset = 0 if past is None else past.shape[2]
        allowed = F.less_equal(diagonal_offsets(q_len, kv_len), np.int64(offset))   # key position <= query's
        causal = F.where(allowed, scalar_like(0, q), scalar_like(-np.inf, q))
        bias = causal if bias is None else bias + causal
    return bias


@onnx_op("Attention")
def _attention(n, q, k, v, mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
    q, k, v = (require_float(n, t, what) for t, what in ((q, "Q"), (k, "K"), (v, "V")))
    if nonpad_kv_seqlen is not None:
        raise n.unsupported("nonpad_kv_seqlen (opset 24)")
    if n.attr("left_window_size", -1) != -1 or n.attr("right_window_size", -1) != -1:
        raise n.unsupported("sliding-window attention (opset 25)")
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
    scores = F.matmul(q * root, F.swapaxes(k * root, -1, -2))
    softcap = n.attr("softcap", 0.0)
    if softcap > 0:
        scores = F.tanh(scores / scalar_like(softcap, q)) * scalar_like(softcap, q)
    bias = _bias(n, q, k, mask, past_key)
    precision = n.attr("softmax_precision")
    if precision is not None and np_dtype(precision, n.describe()) != np.dtype(q.dtype):
        raise n.unsupported(f"softmax_precision {precision} differing from the inputs' dtype {np.dtype(q.dtype).name}")
    if bias is None:
        probs = F.softmax(scores, -1)
    else:
        blocked = F.equal(F.max(bias, -1, keepdims=True), scalar_like(-np.inf, q))   # a row with no key to attend
        safe = F.where(blocked, scalar_like(0, q), scores + bias)
        probs = F.where(blocked, scalar_like(0, q), F.softmax(safe, -1))
    y = F.matmul(probs, v)
    if three_d:
        b, h, s, d = y.shape
        y = F.reshape(F.transpose(y, (0, 2, 1, 3)), (b, s, dims.product((h, d))))
    if not n.wants(3):
        return y, present_key, present_value
    mode = n.attr("qk_matmul_output_mode", 0)
    if mode == 3:
        return y, present_key, present_value, probs
    if mode == 0 and softcap <= 0:
        return y, present_key, present_value, scores
    raise n.unsupported(f"the qk_matmul_output of mode {mode}{' with softcap' if softcap > 0 else ''} (supported: "
                        "mode 3, and mode 0 without softcap)")
