"""ONNX translators for the ops of decoder language models besides Attention: RotaryEmbedding,
SwiGLU, TensorScatter (the key/value cache update), CausalConvWithState and LinearAttention.

Each is written with gcompile ops, so it differentiates in every float input: the rotation in
the input and in the cos/sin caches (gathered by position), the cache update in the cache and the
update (a scattered-over position gets no gradient from the value it replaced), the causal
convolution in the input, weight, bias and state, and linear attention's recurrence, a gc.scan
over the time steps whose carry is the (d_k, d_v) state of every head, in every operand.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ir import dims
from ...ops.control import scan
from ...ops.indexing import slice_axes
from ...ops.shape_rules import normalize_axis
from ..table import onnx_op, require_float, scalar_like


def _split_heads(n, x, heads: int, what: str):
    """(batch, seq, heads * size) -> (batch, seq, heads, size)."""
    b, s, hidden = x.shape
    if not heads or not isinstance(hidden, int) or hidden % heads:
        raise n.unsupported(f"{what} of shape {tuple(x.shape)} in {heads} heads")
    return F.reshape(x, (b, s, heads, hidden // heads))


@onnx_op("RotaryEmbedding")
def _rotary_embedding(n, x, cos_cache, sin_cache, position_ids=None):
    """Each pair (x1, x2) of the rotated part of every head turned by the angle of its position:
    (x1 cos - x2 sin, x1 sin + x2 cos); pairs are the two halves of the rotated part, or
    neighbours with interleaved=1. Inputs (batch, heads, seq, size) or (batch, seq, heads * size)."""
    x = require_float(n, x)
    three_d = x.ndim == 3
    heads = _split_heads(n, x, n.attr("num_heads", 0), "an input") if three_d else x
    size = heads.shape[-1]
    rotated = n.attr("rotary_embedding_dim", 0) or size
    if not isinstance(size, int) or rotated % 2 or rotated > size:
        raise n.unsupported(f"rotary_embedding_dim {rotated} for heads of size {size!r}")
    if position_ids is not None:                                    # (positions, half) -> (batch, seq, half)
        cos_cache, sin_cache = F.take(cos_cache, position_ids, 0), F.take(sin_cache, position_ids, 0)
    half = rotated // 2
    if cos_cache.shape[-1] != half or sin_cache.shape[-1] != half:
        raise n.unsupported(f"caches of shape {tuple(cos_cache.shape)} for {rotated} rotated dims (the last axis "
                            f"holds rotary_embedding_dim / 2 = {half})")
    axis = 2 if three_d else 1                                       # the heads axis the caches broadcast over
    cos, sin = (F.cast(F.expand_dims(c, axis), x.dtype) for c in (cos_cache, sin_cache))
    part = slice_axes(heads, (3,), (0,), (rotated,), (1,)) if rotated < size else heads
    if n.attr("interleaved", 0):
        pairs = F.reshape(part, tuple(part.shape[:3]) + (half, 2))
        x1, x2 = (F.squeeze(p, -1) for p in F.split(pairs, [1], -1))
    else:
        x1, x2 = F.split(part, [half], -1)
    real, imag = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    if n.attr("interleaved", 0):
        turned = F.reshape(F.stack([real, imag], -1), tuple(part.shape))
    else:
        turned = F.concat([real, imag], -1)
    if rotated < size:
        turned = F.concat([turned, slice_axes(heads, (3,), (rotated,), (size,), (1,))], -1)
    return F.reshape(turned, tuple(x.shape)) if three_d else turned


@onnx_op("SwiGLU")
def _swiglu(n, a, b):
    """Swish(a) · b, Swish(a) = a · sigmoid(alpha · a) (F.silu's closed-form derivatives where alpha = 1)."""
    a, b = require_float(n, a, "A"), require_float(n, b, "B")
    if tuple(a.shape) != tuple(b.shape):
        raise n.unsupported(f"A {tuple(a.shape)} and B {tuple(b.shape)} of different shapes (no broadcasting)")
    alpha = n.attr("alpha", 1.0)
    gate = F.silu(a) if alpha == 1.0 else a * F.sigmoid(a * scalar_like(alpha, a))
    return gate * b


@onnx_op("TensorScatter")
def _tensor_scatter(n, cache, update, write_indices=None):
    """The update written into the cache along `axis`, each batch row from its own write index (modulo
    the cache's length in circular mode): a put_along_axis of the update at positions index + i."""
    axis = normalize_axis(n.attr("axis", -2), cache.ndim)
    mode = n.attr("mode", "linear")
    if mode not in ("linear", "circular") or axis == 0:
        raise n.unsupported(f"mode {mode!r} along axis {axis} (modes linear and circular, along an axis after "
                            "the batch)")
    length, steps = cache.shape[axis], update.shape[axis]
    if not isinstance(steps, int) or (mode == "circular" and not isinstance(length, int)):
        raise n.unsupported(f"an update of {steps!r} steps into a cache of {length!r}")
    positions = F.reshape(F.arange(steps), (1,) * axis + (steps,) + (1,) * (cache.ndim - axis - 1))
    if write_indices is not None:
        start = F.reshape(F.cast(write_indices, np.int64), (update.shape[0],) + (1,) * (cache.ndim - 1))
        positions = positions + start
    if mode == "circular":
        positions = F.remainder(positions, np.int64(length))
    return F.put_along_axis(cache, F.broadcast_to(positions, tuple(update.shape)), update, axis)


@onnx_op("CausalConvWithState")
def _causal_conv_with_state(n, x, weight, bias=None, past_state=None):
    """A depthwise 1-D convolution over the past state (zeros if absent) followed by the input, kernel k,
    no padding: each output position sees itself and the k - 1 before it. The present state is the
    last k - 1 positions of that concatenation."""
    x = require_float(n, x)
    activation = n.attr("activation", "none")
    if x.ndim != 3 or weight.ndim != 3 or activation not in ("none", "silu", "swish"):
        raise n.unsupported(f"input {tuple(x.shape)}, weight {tuple(weight.shape)} and activation {activation!r} "
                            "(it takes (batch, channels, length), (channels, 1, k) and none, silu or swish)")
    channels, k = x.shape[1], weight.shape[2]
    if not isinstance(channels, int) or not isinstance(k, int):
        raise n.unsupported(f"{channels!r} channels and a kernel of {k!r}")
    past = F.full((x.shape[0], channels, k - 1), 0, x.dtype) if past_state is None else past_state
    padded = F.concat([past, x], 2)
    y = F.conv(padded, weight, bias, groups=channels)
    if activation != "none":
        y = F.silu(y)
    total = padded.shape[2]
    if not n.wants(1):
        return y
    if not isinstance(total, int):
        raise n.unsupported(f"present_state after an input of symbolic length {x.shape[2]!r}")
    return y, slice_axes(padded, (2,), (total - (k - 1),), (total,), (1,))


def _per_step(x, heads: int):
    """(batch, seq, heads * size) -> (seq, batch, heads, size): the time axis first, for gc.scan."""
    b, s, hidden = x.shape
    return F.transpose(F.reshape(x, (b, s, heads, dims.divide(hidden, heads))), (1, 0, 2, 3))


@onnx_op("LinearAttention")
def _linear_attention(n, q, k, v, past_state=None, decay=None, beta=None):
    """The recurrence of ONNX's definition, one gc.scan step per token, in float32 at least (as the
    definition accumulates): S ← exp(g)·S; with the delta rule v ← β·(v − Sᵀk); S ← S + k ⊗ v; the
    output scale · qᵀS, each key/value head's state read by q_num_heads / kv_num_heads query heads."""
    q, k, v = (require_float(n, t, what) for t, what in ((q, "query"), (k, "key"), (v, "value")))
    rule = n.attr("update_rule", "gated_delta")
    q_heads, kv_heads = n.attr("q_num_heads", 0), n.attr("kv_num_heads", 0)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta") or (decay is None) == gated or (beta is None) == delta:
        raise n.unsupported(f"update_rule {rule!r} with{'' if decay is not None else 'out'} decay and "
                            f"with{'' if beta is not None else 'out'} beta (gated rules take a decay, delta "
                            "rules a beta)")
    if q.ndim != 3 or not kv_heads or q_heads % kv_heads or not all(
            isinstance(t.shape[2], int) for t in (q, k, v)) or q.shape[2] % q_heads or v.shape[2] % kv_heads:
        raise n.unsupported(f"query {tuple(q.shape)}, key {tuple(k.shape)}, value {tuple(v.shape)} in {q_heads} query "
                            f"and {kv_heads} key/value heads")
    d_k, d_v, group = q.shape[2] // q_heads, v.shape[2] // kv_heads, q_heads // kv_heads
    out_dtype = np.dtype(q.dtype)
    work = np.promote_types(out_dtype, np.float32)
    batch = q.shape[0]
    xs = [_per_step(F.cast(t, work), h) for t, h in ((q, q_heads), (k, kv_heads), (v, kv_heads))]
    if gated:
        xs.append(_per_step(F.cast(decay, work), kv_heads))     # (seq, batch, kv_heads, 1 or d_k)
    if delta:
        xs.append(_per_step(F.cast(beta, work), beta.shape[2]))  # (seq, batch, kv_heads or 1, 1)
    state_dtype = np.dtype(past_state.dtype) if past_state is not None else out_dtype
    state0 = F.full((batch, kv_heads, d_k, d_v), 0, work) if past_state is None else F.cast(past_state, work)
    scale = n.attr("scale", 0.0) or 1 / np.sqrt(d_k)

    def step(state, x):
        q_t, k_t, v_t, *rest = x
        if gated:
            state = state * F.expand_dims(F.exp(rest.pop(0)), -1)
        if delta:
            read = F.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = rest.pop(0) * (v_t - read)
        state = state + F.expand_dims(k_t, -1) * F.expand_dims(v_t, -2)
        shared = state if group == 1 else F.reshape(
            F.broadcast_to(F.expand_dims(state, 2), (batch, kv_heads, group, d_k, d_v)), (batch, q_heads, d_k, d_v))
        return state, F.einsum("bhd,bhdm->bhm", q_t, shared) * scalar_like(scale, q_t)

    state, ys = scan(step, state0, xs)                       # ys: (seq, batch, q_heads, d_v)
    out = F.reshape(F.transpose(ys, (1, 0, 2, 3)), (batch, q.shape[1], q_heads * d_v))
    return F.cast(out, out_dtype), F.cast(state, state_dtype)
