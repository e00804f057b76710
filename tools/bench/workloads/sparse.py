"""Gathers and scatter-adds: W15 (a graph network, sums by edge destination with many repeated
indices), W19 (a text classifier over a 30,000-row embedding table)."""
from __future__ import annotations

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .common import RNG, Workload, config_values, jax_ce, jax_grad_step, param, torch_params, torch_tensor

# -- W15: message passing ---------------------------------------------------------------------------------
GRAPH = dict(nodes=2000, edges=20000, width=64, layers=3)


def message_passing(x, src, dst, ps, gather, add_at, relu):
    """Per layer, each edge carries its source's projected features to its destination, summed
    there (repeated destinations), plus a residual."""
    h = x
    for w in ps[:-1]:
        h = relu(add_at(h, dst, gather(h @ w, src)))
    return h @ ps[-1]


def w15_setup():
    n, e, d, layers = config_values(GRAPH, "nodes", "edges", "width", "layers")
    ps = [param(d, d) for _ in range(layers)] + [param(d, 1)]
    x = RNG.standard_normal((n, d)).astype(np.float32)
    src, dst = RNG.integers(0, n, e), RNG.integers(0, n, e)
    y = RNG.standard_normal((n, 1)).astype(np.float32)

    def step(x, src, dst, y, *ps):
        out = message_passing(x, src, dst, ps, lambda h, i: F.take(h, i, axis=0),
                              lambda h, i, m: F.index_add(h, 0, i, m), F.relu)
        value = F.mean(F.square(out - y))
        return value, gc.grad(value, list(ps))

    return step, None, [x, src, dst, y, *ps]


def w15_torch(args):
    import torch
    x, src, dst, y = (torch_tensor(a) for a in args[:4])
    ps = torch_params(args[4:])

    def run():
        out = message_passing(x, src, dst, ps, lambda h, i: h[i], lambda h, i, m: h.index_add(0, i, m), torch.relu)
        return torch.autograd.grad(((out - y) ** 2).mean(), ps)
    return run


def w15_jax(args):
    import jax
    import jax.numpy as jnp
    x, src, dst, y, ps = args[0], args[1], args[2], args[3], list(args[4:])

    def loss(ps, x, y):
        out = message_passing(x, src, dst, ps, lambda h, i: h[i], lambda h, i, m: h.at[i].add(m), jax.nn.relu)
        return jnp.mean((out - y) ** 2)
    return jax_grad_step(loss, ps, x, y)


# -- W19: an embedding-bag text classifier ------------------------------------------------------------------
EMBEDDING = dict(vocab=30000, width=128, batch=64, seq=64, hidden=256, classes=5)


def w19_setup():
    """The mean of each sequence's token embeddings, a GELU MLP, cross-entropy; the table's gradient
    adds 4,096 rows into 30,000."""
    vocab, d, b, s, hidden, classes = config_values(EMBEDDING, "vocab", "width", "batch", "seq", "hidden", "classes")
    ps = [param(vocab, d, scale=0.1), param(d, hidden), np.zeros(hidden, np.float32), param(hidden, classes),
          np.zeros(classes, np.float32)]
    ids = RNG.integers(0, vocab, (b, s)).astype(np.int64)
    t = RNG.integers(0, classes, b).astype(np.int64)

    def step(ids, t, *ps):
        h = F.mean(F.embedding(ids, ps[0]), 1)
        value = F.softmax_cross_entropy(F.gelu(h @ ps[1] + ps[2]) @ ps[3] + ps[4], t)
        return value, gc.grad(value, list(ps))

    return step, None, [ids, t, *ps]


def w19_torch(args):
    import torch
    nnf = torch.nn.functional
    ids, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])

    def run():
        h = nnf.embedding(ids, ps[0]).mean(1)
        return torch.autograd.grad(nnf.cross_entropy(nnf.gelu(h @ ps[1] + ps[2]) @ ps[3] + ps[4], t), ps)
    return run


def w19_jax(args):
    import jax

    def loss(ps, ids, t):
        h = ps[0][ids].mean(1)
        return jax_ce(jax.nn.gelu(h @ ps[1] + ps[2], approximate=False) @ ps[3] + ps[4], t)
    return jax_grad_step(loss, list(args[2:]), args[0], args[1])


WORKLOADS = [
    Workload("W15", "graph-network-step", w15_setup, w15_torch, w15_jax, GRAPH),
    Workload("W19", "embedding-text-step", w19_setup, w19_torch, w19_jax, EMBEDDING,
             dict(vocab=50000, width=256, batch=32, seq=128, hidden=256, classes=5)),
]
