"""Multi-head attention and a transformer encoder layer with torch.nn's names and layouts."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .. import functions as F
from ..errors import GcompileError
from ..frontend.tensor import Tensor, as_tensor
from . import init
from .layers import Dropout, LayerNorm, Linear
from .module import Module

__all__ = ["MultiheadAttention", "TransformerEncoderLayer"]


def _masked(scores: Tensor, mask: Any) -> Tensor:
    """scores with a boolean mask's True positions at -inf, or a float mask added."""
    mask = as_tensor(mask)
    if mask.dtype == np.bool_:
        return F.where(mask, np.asarray(-np.inf, scores.dtype), scores)
    return scores + F.cast(mask, scores.dtype)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention (kdim = vdim = embed_dim): in_proj_weight (3E, E), in_proj_bias,
    out_proj. Inputs are (L, N, E), or (N, L, E) with batch_first=True.

    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) returns (output, weights): weights (N, L, S),
    per head (N, H, L, S) with average_attn_weights=False, or None with need_weights=False.
    Masks are boolean (True = not attended) or float (added to the scores); attn_mask is (L, S)
    or (N * H, L, S), key_padding_mask (N, S).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, rng=None, dtype: DTypeLike = "float32") -> None:
        if embed_dim % num_heads:
            raise GcompileError(f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        rng = init.generator(rng)
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        self.dropout = float(dropout)
        self.in_proj_weight = init.xavier_uniform((3 * embed_dim, embed_dim), embed_dim, 3 * embed_dim, rng, dtype)
        self.in_proj_bias = init.zeros((3 * embed_dim,), dtype) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, rng=rng, dtype=dtype)
        if bias:
            self.out_proj.bias = init.zeros((embed_dim,), dtype)

    def _heads(self, x: Tensor) -> Tensor:
        """(N, L, E) -> (N, H, L, E/H)."""
        return F.transpose(F.reshape(x, x.shape[:2] + (self.num_heads, -1)), (0, 2, 1, 3))

    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None, need_weights: bool = True,
                attn_mask: Any = None, average_attn_weights: bool = True, is_causal: bool = False):
        q, k, v = (as_tensor(t) for t in (query, key, value))
        if not self.batch_first:
            q, k, v = (F.swapaxes(t, 0, 1) for t in (q, k, v))
        e = self.embed_dim
        if query is key and key is value:   # self-attention: one product for q, k and v
            q, k, v = F.split(F.linear(q, F.transpose(self.in_proj_weight), self.in_proj_bias), 3, axis=-1)
        else:
            w = F.split(self.in_proj_weight, 3, axis=0)
            b = F.split(self.in_proj_bias, 3, axis=0) if self.in_proj_bias is not None else [None] * 3
            q, k, v = (F.linear(t, F.transpose(wi), bi) for t, wi, bi in zip((q, k, v), w, b))
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        scores = F.matmul(q, F.swapaxes(k, -1, -2)) * (1 / math.sqrt(e // self.num_heads))
        n, length, source = scores.shape[0], scores.shape[2], scores.shape[3]
        if attn_mask is not None:
            mask = as_tensor(attn_mask)
            scores = _masked(scores, mask if mask.ndim == 2 else F.reshape(mask, (n, self.num_heads, length, source)))
        elif is_causal:
            scores = _masked(scores, np.triu(np.ones((length, source), bool), 1))
        if key_padding_mask is not None:
            scores = _masked(scores, F.reshape(as_tensor(key_padding_mask), (n, 1, 1, source)))
        weights = F.softmax(scores, axis=-1)
        attended = F.dropout(weights, self.dropout, training=self.training) if self.dropout else weights
        out = F.matmul(attended, v)
        out = F.reshape(F.transpose(out, (0, 2, 1, 3)), (n, length, e))
        out = self.out_proj(out)
        if not self.batch_first:
            out = F.swapaxes(out, 0, 1)
        if not need_weights:
            return out, None
        return out, F.mean(weights, axis=1) if average_attn_weights else weights


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer: self-attention and a feed-forward block, each with a
    residual connection and LayerNorm (after the block, or before it with norm_first=True)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, rng=None, dtype: DTypeLike = "float32") -> None:
        if activation not in ("relu", "gelu"):
            raise GcompileError(f"TransformerEncoderLayer: activation must be 'relu' or 'gelu', got {activation!r}")
        rng = init.generator(rng)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first, rng, dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias, rng, dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias, rng, dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation = activation

    def _attend(self, x, mask, padding_mask, is_causal):
        out, _ = self.self_attn(x, x, x, key_padding_mask=padding_mask, need_weights=False, attn_mask=mask,
                                is_causal=is_causal)
        return self.dropout1(out)

    def _feed_forward(self, x):
        h = self.linear1(x)
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)
        return self.dropout2(self.linear2(self.dropout(h)))

    def forward(self, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None, is_causal: bool = False):
        x = as_tensor(src)
        if self.norm_first:
            x = x + self._attend(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._attend(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._feed_forward(x))
