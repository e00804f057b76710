"""Attention: W3 (a transformer block, tuned), W10 (the same block at sequence length 1024), W12
(a causal language-model step with attention dropout), W16 (a LLaMA-like block: RMSNorm, rotary
embeddings, SwiGLU)."""
from __future__ import annotations

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .common import RNG, Workload, config_values, jax_ce, jax_grad_step, jax_ln, param, torch_params, torch_tensor

# -- W3, W10: a transformer block (post-norm), mean-square loss ---------------------------------------------
BLOCK = dict(width=256, heads=4, ff=1024, seq=128, batch=8)
LONG_BLOCK = dict(width=128, heads=4, ff=512, seq=1024, batch=2)


def _block_setup(config: dict):
    d, heads, ff, seq, batch = config_values(config, "width", "heads", "ff", "seq", "batch")
    ps = [param(d, 3 * d), np.zeros(3 * d, np.float32), param(d, d), np.zeros(d, np.float32),
          np.ones(d, np.float32), np.zeros(d, np.float32), param(d, ff), np.zeros(ff, np.float32),
          param(ff, d), np.zeros(d, np.float32), np.ones(d, np.float32), np.zeros(d, np.float32)]
    x = RNG.standard_normal((batch, seq, d)).astype(np.float32)
    y = RNG.standard_normal((batch, seq, d)).astype(np.float32)

    def block(x, wqkv, bqkv, wo, bo, g1, be1, w1, b1, w2, b2, g2, be2):
        qkv = F.reshape(x @ wqkv + bqkv, (batch, seq, 3, heads, d // heads))
        q, k, v = (F.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))
        att = F.softmax(q @ F.swapaxes(k, -1, -2) * float(1 / np.sqrt(d // heads)), axis=-1)
        o = F.reshape(F.transpose(att @ v, (0, 2, 1, 3)), (batch, seq, d)) @ wo + bo
        h = F.layer_norm(x + o, g1, be1)
        return F.layer_norm(h + F.gelu(h @ w1 + b1) @ w2 + b2, g2, be2)

    def step(x, y, *ps):
        value = F.mse(block(x, *ps), y)
        return value, gc.grad(value, list(ps))

    return step, None, [x, y, *ps]


def block_torch(args, heads: int = 4):
    import torch
    nnf = torch.nn.functional
    x, y, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])
    b, s, d = x.shape

    def run():
        wqkv, bqkv, wo, bo, g1, be1, w1, b1, w2, b2, g2, be2 = ps
        qkv = (x @ wqkv + bqkv).reshape(b, s, 3, heads, d // heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        att = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(d // heads), -1)
        o = (att @ v).transpose(1, 2).reshape(b, s, d) @ wo + bo
        h = nnf.layer_norm(x + o, (d,), g1, be1)
        out = nnf.layer_norm(h + nnf.gelu(h @ w1 + b1) @ w2 + b2, (d,), g2, be2)
        return torch.autograd.grad(((out - y) ** 2).mean(), ps)
    return run


def block_jax(args, heads: int = 4):
    import jax
    import jax.numpy as jnp
    x, y, ps = args[0], args[1], list(args[2:])
    b, s, d = x.shape

    def loss(ps, x, y):
        wqkv, bqkv, wo, bo, g1, be1, w1, b1, w2, b2, g2, be2 = ps
        qkv = (x @ wqkv + bqkv).reshape(b, s, 3, heads, d // heads)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -1)
        o = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo + bo
        h = jax_ln(x + o, g1, be1)
        out = jax_ln(h + jax.nn.gelu(h @ w1 + b1, approximate=False) @ w2 + b2, g2, be2)
        return jnp.mean((out - y) ** 2)
    return jax_grad_step(loss, ps, x, y)


# -- W12: a causal language-model step --------------------------------------------------------------------
CAUSAL = dict(batch=8, seq=256, width=256, heads=8, vocab=1000, dropout=0.1)


def w12_setup():
    """Layer norm, causal self-attention with dropout on the attention weights, a residual, the
    vocabulary read-out and cross-entropy."""
    b, s, d, vocab, heads, p = config_values(CAUSAL, "batch", "seq", "width", "vocab", "heads", "dropout")
    ps = [np.ones(d, np.float32), np.zeros(d, np.float32), param(d, 3 * d), param(d, d), param(d, vocab)]
    x = RNG.standard_normal((b, s, d)).astype(np.float32)
    t = RNG.integers(0, vocab, (b, s)).astype(np.int64)

    def step(x, t, *ps):
        q, k, v = F.split(F.layer_norm(x, ps[0], ps[1]) @ ps[2], 3, -1)
        heads_of = lambda u: F.transpose(F.reshape(u, (b, s, heads, d // heads)), (0, 2, 1, 3))  # noqa: E731
        a = F.scaled_dot_product_attention(heads_of(q), heads_of(k), heads_of(v), is_causal=True, dropout_p=p,
                                           training=True)
        h = x + F.reshape(F.transpose(a, (0, 2, 1, 3)), (b, s, d)) @ ps[3]
        value = F.softmax_cross_entropy(h @ ps[4], t)
        return value, gc.grad(value, list(ps))

    return step, None, [x, t, *ps]


def w12_torch(args):
    import torch
    nnf = torch.nn.functional
    x, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])
    b, s, d = x.shape
    heads = CAUSAL["heads"]

    def run():
        q, k, v = (nnf.layer_norm(x, (d,), ps[0], ps[1]) @ ps[2]).split(d, -1)
        q, k, v = (u.reshape(b, s, heads, d // heads).transpose(1, 2) for u in (q, k, v))
        a = nnf.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=CAUSAL["dropout"])
        h = x + a.transpose(1, 2).reshape(b, s, d) @ ps[3]
        return torch.autograd.grad(nnf.cross_entropy((h @ ps[4]).reshape(b * s, -1), t.reshape(-1)), ps)
    return run


def w12_jax(args):
    import jax
    import jax.numpy as jnp
    x, t, ps = args[0], args[1], list(args[2:])
    b, s, d = x.shape
    heads, p = CAUSAL["heads"], CAUSAL["dropout"]
    causal = np.tril(np.ones((s, s), bool))

    def loss(ps, x, t, key):
        q, k, v = jnp.split(jax_ln(x, ps[0], ps[1]) @ ps[2], 3, -1)
        q, k, v = (u.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3) for u in (q, k, v))
        att = jax.nn.softmax(jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -jnp.inf), -1)
        att = jnp.where(jax.random.bernoulli(key, 1 - p, att.shape), att / (1 - p), 0)
        h = x + (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ ps[3]
        return jax_ce((h @ ps[4]).reshape(b * s, -1), t.reshape(-1))
    return jax_grad_step(loss, ps, x, t, jax.random.PRNGKey(0))


# -- W16: a LLaMA-like block ---------------------------------------------------------------------------------
LLAMA = dict(batch=4, seq=256, width=256, heads=4, vocab=2000, hidden=683)


def rope_tables():
    """cos and sin (seq, head width / 2) of rotary embeddings."""
    half = LLAMA["width"] // LLAMA["heads"] // 2
    angle = np.arange(LLAMA["seq"])[:, None] / 10000.0 ** (np.arange(half) / half)
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def rotated(u, cos, sin, join):
    """Rotary embedding of interleaved pairs (u[..., 0::2], u[..., 1::2]), as Meta's LLaMA code."""
    even, odd = u[..., 0::2], u[..., 1::2]
    return join([even * cos - odd * sin, even * sin + odd * cos])


def w16_setup():
    """Token embedding, RMSNorm, causal attention with rotary embeddings of interleaved pairs, a
    SwiGLU MLP, RMSNorm and the vocabulary read-out with cross-entropy, every weight's gradient."""
    b, s, d, heads, vocab, hidden = config_values(LLAMA, "batch", "seq", "width", "heads", "vocab", "hidden")
    ps = [param(vocab, d, scale=0.02), np.ones(d, np.float32), param(d, 3 * d), param(d, d),
          np.ones(d, np.float32), param(d, 2 * hidden), param(hidden, d), param(d, vocab)]
    ids = RNG.integers(0, vocab, (b, s)).astype(np.int64)
    t = RNG.integers(0, vocab, (b, s)).astype(np.int64)
    cos, sin = rope_tables()

    def step(ids, t, *ps):
        emb, n1, wqkv, wo, n2, w12, w3, head = ps
        x = F.embedding(ids, emb)
        heads_of = lambda u: F.transpose(F.reshape(u, (b, s, heads, d // heads)), (0, 2, 1, 3))  # noqa: E731
        q, k, v = (heads_of(u) for u in F.split(F.rms_norm(x, (d,), n1, eps=1e-6) @ wqkv, 3, -1))
        join = lambda parts: F.concat(parts, -1)  # noqa: E731
        a = F.scaled_dot_product_attention(rotated(q, cos, sin, join), rotated(k, cos, sin, join), v, is_causal=True)
        x = x + F.reshape(F.transpose(a, (0, 2, 1, 3)), (b, s, d)) @ wo
        gate, up = F.split(F.rms_norm(x, (d,), n2, eps=1e-6) @ w12, 2, -1)
        x = x + (F.silu(gate) * up) @ w3
        value = F.softmax_cross_entropy(x @ head, t)
        return value, gc.grad(value, list(ps))

    return step, None, [ids, t, *ps]


def w16_torch(args):
    import torch
    nnf = torch.nn.functional
    ids, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])
    b, s, d, heads = config_values(LLAMA, "batch", "seq", "width", "heads")
    cos, sin = (torch_tensor(a) for a in rope_tables())

    def run():
        emb, n1, wqkv, wo, n2, w12, w3, head = ps
        x = nnf.embedding(ids, emb)
        q, k, v = (u.reshape(b, s, heads, -1).transpose(1, 2)
                   for u in (nnf.rms_norm(x, (d,), n1, eps=1e-6) @ wqkv).chunk(3, -1))
        join = lambda parts: torch.cat(parts, -1)  # noqa: E731
        a = nnf.scaled_dot_product_attention(rotated(q, cos, sin, join), rotated(k, cos, sin, join), v,
                                             is_causal=True)
        x = x + a.transpose(1, 2).reshape(b, s, d) @ wo
        gate, up = (nnf.rms_norm(x, (d,), n2, eps=1e-6) @ w12).chunk(2, -1)
        x = x + (nnf.silu(gate) * up) @ w3
        return torch.autograd.grad(nnf.cross_entropy((x @ head).reshape(b * s, -1), t.reshape(-1)), ps)
    return run


def w16_jax(args):
    import jax
    import jax.numpy as jnp
    ids, t, ps = args[0], args[1], list(args[2:])
    b, s, d, heads = config_values(LLAMA, "batch", "seq", "width", "heads")
    cos, sin = rope_tables()
    causal = np.tril(np.ones((s, s), bool))

    def rms(h, w):
        return h / jnp.sqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * w

    def loss(ps, ids, t):
        emb, n1, wqkv, wo, n2, w12, w3, head = ps
        x = emb[ids]
        q, k, v = (u.reshape(b, s, heads, -1).transpose(0, 2, 1, 3) for u in jnp.split(rms(x, n1) @ wqkv, 3, -1))
        join = lambda parts: jnp.concatenate(parts, -1)  # noqa: E731
        q, k = rotated(q, cos, sin, join), rotated(k, cos, sin, join)
        att = jax.nn.softmax(jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -jnp.inf), -1)
        x = x + (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo
        gate, up = jnp.split(rms(x, n2) @ w12, 2, -1)
        x = x + (jax.nn.silu(gate) * up) @ w3
        return jax_ce((x @ head).reshape(b * s, -1), t.reshape(-1))
    return jax_grad_step(loss, ps, ids, t)


WORKLOADS = [
    Workload("W3", "transformer-step", lambda: _block_setup(BLOCK), block_torch, block_jax, BLOCK),
    Workload("W10", "attention-1k", lambda: _block_setup(LONG_BLOCK), block_torch, block_jax, LONG_BLOCK),
    Workload("W12", "causal-lm-step", w12_setup, w12_torch, w12_jax, CAUSAL,
             dict(batch=4, seq=512, width=256, heads=8, vocab=1000, dropout=0.1)),
    Workload("W16", "llama-block-step", w16_setup, w16_torch, w16_jax, LLAMA,
             dict(batch=2, seq=512, width=256, heads=4, vocab=2000, hidden=683)),
]
