"""Benchmark: the benchmark workloads of docs/performance.md through gcompile on onnxruntime, and the
same workloads in PyTorch (eager) and JAX (jit) when installed, timed in this process,
alternating, median of --runs runs after warm-up. Also node counts per gradient order
before and after passes, build latency, and compile-time scaling on deep MLPs.

    python tools/bench.py [--runs 20] [--repeat 3] [--only W1,W4] [--json out.json] [--scaling 1000,10000,100000]
    python tools/bench.py --memory     # peak RSS of a long LSTM step with and without recompute
    python tools/bench.py --contended 1           # the same with a busy neighbour process on the machine
    python tools/bench.py --cpu-time              # single-threaded work, CPU time (robust on a busy machine)
    python tools/bench.py --only "" --scaling "" --build-scaling 1000,10000,100000   # build to first result
    python tools/bench.py --distributed [--runs 30]   # Ray data-parallel training: 1 vs 2 workers, allreduce cost
    python tools/bench.py --loops      # loops: build and load times, node counts, scan against unrolled
    python tools/bench.py --other-shapes          # each kind of workload at a second, untuned shape

Workloads W1-W6 (and W1f) are the six the project tuned; W7-W10 are of the same kinds, not tuned
for: a residual CNN with training-mode batch norm, an LSTM step, force matching (second order
through SiLU), attention at sequence length 1024. W11-W13 are kinds added when profiling other
models found onnxruntime kernels to route around: a segmentation step (softmax over channels),
a causal language-model step (a causal mask, attention dropout), a pair potential (softplus,
forces, second order), a MobileNetV2-like step (depthwise convolutions, stride 1 and 2).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np

# Alternating systems in one process is only fair if none of them keeps its worker threads
# spinning into the next one's runs. onnxruntime's (and JAX's) spin only briefly after a run, and
# _median_ms pauses before each block; PyTorch's OpenMP threads are told not to spin at all.
# (Set before torch is imported.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# --cpu-time measures single-threaded work: every system gets one thread (JAX's flags must be set
# before it is imported).
CPU_TIME = "--cpu-time" in sys.argv
if CPU_TIME:
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_loops  # noqa: E402
from bench_loops import LOOP_WORKLOADS, loop_report, torch_loop_workloads  # noqa: E402

import gcompile as gc  # noqa: E402
import gcompile.functions as F  # noqa: E402
from gcompile.frontend.trace import trace  # noqa: E402
from gcompile.logs import Progress  # noqa: E402
from gcompile.passes import optimize  # noqa: E402

RNG = np.random.default_rng(0)


def _param(*shape, scale=None):
    scale = scale if scale is not None else 1 / np.sqrt(shape[0])
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# -- workloads in gcompile: each returns (fn, args, torch_fn or None, jax_fn or None) ----------------
def _mlp_params(sizes):
    ps = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        ps += [_param(a, b), np.zeros(b, np.float32)]
    return ps


def _mlp(x, ps, act=F.relu):
    h = x
    for i in range(0, len(ps), 2):
        h = h @ ps[i] + ps[i + 1]
        if i + 2 < len(ps):
            h = act(h)
    return h


def w1_setup():
    ps = _mlp_params([784, 1024, 1024, 10])
    x = RNG.standard_normal((256, 784)).astype(np.float32)
    t = RNG.integers(0, 10, 256).astype(np.int64)

    def loss(x, t, *ps):
        return F.softmax_cross_entropy(_mlp(x, ps), t)

    def step(x, t, *ps):
        value = loss(x, t, *ps)
        return value, gc.grad(value, list(ps))

    return step, loss, [x, t, *ps]


def w2_setup():
    ps = [_param(32, 3, 3, 3, scale=0.2), np.zeros(32, np.float32), _param(64, 32, 3, 3, scale=0.06),
          np.zeros(64, np.float32), _param(64 * 8 * 8, 10), np.zeros(10, np.float32)]
    x = RNG.standard_normal((32, 3, 32, 32)).astype(np.float32)
    t = RNG.integers(0, 10, 32).astype(np.int64)

    def step(x, t, w1, b1, w2, b2, w3, b3):
        h = F.max_pool(F.relu(F.conv(x, w1, b1, pad=1)), 2)
        h = F.max_pool(F.relu(F.conv(h, w2, b2, pad=1)), 2)
        value = F.softmax_cross_entropy(F.linear(F.flatten(h), w3, b3), t)
        return value, gc.grad(value, [w1, b1, w2, b2, w3, b3])

    return step, None, [x, t, *ps]


def w3_setup(d=256, heads=4, ff=1024, seq=128, batch=8):
    ps = [_param(d, 3 * d), np.zeros(3 * d, np.float32), _param(d, d), np.zeros(d, np.float32),
          np.ones(d, np.float32), np.zeros(d, np.float32), _param(d, ff), np.zeros(ff, np.float32),
          _param(ff, d), np.zeros(d, np.float32), np.ones(d, np.float32), np.zeros(d, np.float32)]
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


def w4_setup():
    ps = _mlp_params([128, 512, 512, 1])
    x = RNG.standard_normal((256, 128)).astype(np.float32)

    def step(x, *ps):
        d = _mlp(x, ps)
        gx, = gc.grad(F.sum(d), [x])
        pen = F.mean((F.sqrt(F.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
        return pen, gc.grad(pen, list(ps))

    return step, None, [x, *ps]


def w5_setup():
    ps = [_param(1, 64), _param(1, 64), np.zeros(64, np.float32)] + _mlp_params([64, 64, 64, 1])
    x = RNG.uniform(-1, 1, (1024, 1)).astype(np.float32)
    t = RNG.uniform(0, 1, (1024, 1)).astype(np.float32)

    def step(x, t, wx, wt, b0, *ps):
        u = _mlp(F.tanh(x @ wx + t @ wt + b0), ps, act=F.tanh)
        u_x, u_t = gc.grad(F.sum(u), [x, t])
        u_xx, = gc.grad(F.sum(u_x), [x])
        value = F.mean((u_t - u_xx) ** 2)
        return value, gc.grad(value, [wx, wt, b0, *ps])

    return step, None, [x, t, *ps]


def w6_setup():
    _, loss, args = w1_setup()
    vs = [RNG.standard_normal(a.shape).astype(np.float32) for a in args[2:]]

    def hvp(x, t, *rest):
        ps, vs_ = rest[:6], rest[6:]
        grads = gc.grad(loss(x, t, *ps), list(ps))
        return gc.grad(F.add_n([F.sum(g * v) for g, v in zip(grads, vs_)]), list(ps))

    return hvp, None, args + vs


def w1_forward_setup():
    _, loss, args = w1_setup()
    return loss, None, args


# -- workloads of the same kinds that were not tuned for (docs/performance.md, "Beyond the six") -----
RESNET = dict(batch=32, inputs=3, channels=32, size=32, blocks=2, classes=10)
# A late ResNet stage (CIFAR's last, ImageNet's third and fourth): few positions, many channels.
RESNET_LATE = dict(batch=32, inputs=64, channels=128, size=8, blocks=2, classes=10)


def _bn(h, gamma, beta):
    return F.batch_norm(h, gamma, beta, training=True)


def _resnet(x, ps, conv, bn, relu, mean):
    """The W7 and W20 networks in any system's ops (the references pass theirs): a stem
    conv-BN-relu, then a basic block per six parameters before the classifier's two."""
    h = relu(bn(conv(x, ps[0]), ps[1], ps[2]))
    for k in range((len(ps) - 5) // 6):
        w1, g1, b1, w2, g2, b2 = ps[3 + 6 * k:9 + 6 * k]
        r = relu(bn(conv(h, w1), g1, b1))
        h = relu(bn(conv(r, w2), g2, b2) + h)
    return mean(h) @ ps[-2] + ps[-1]


def w7_setup():
    """A residual CNN step with training-mode batch norm: a stem conv and two basic blocks
    (conv-BN-relu-conv-BN + skip, relu), global average pooling, a linear classifier."""
    return _resnet_setup(RESNET)


def w20_setup():
    """W7's network on a late stage's features: 8 x 8 positions, 128 channels."""
    return _resnet_setup(RESNET_LATE)


def _resnet_setup(config: dict):
    b, inputs, c, size, blocks, classes = (config[k] for k in ("batch", "inputs", "channels", "size", "blocks",
                                                                "classes"))
    ps = [_param(c, inputs, 3, 3, scale=0.2), np.ones(c, np.float32), np.zeros(c, np.float32)]
    for _ in range(blocks):
        for _ in range(2):
            ps += [_param(c, c, 3, 3, scale=0.06), np.ones(c, np.float32), np.zeros(c, np.float32)]
    ps += [_param(c, classes), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, inputs, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, b).astype(np.int64)

    def step(x, t, *ps):
        z = _resnet(x, ps, lambda h, w: F.conv(h, w, pad=1), _bn, F.relu, lambda h: F.mean(h, (2, 3)))
        value = F.softmax_cross_entropy(z, t)
        return value, gc.grad(value, list(ps))

    return step, None, [x, t, *ps]


LSTM = dict(steps=50, batch=32, features=64, hidden=128)


def w8_setup():
    """An LSTM training step: one layer over 50 steps, a linear read-out of every step, MSE."""
    steps, batch, features, hidden = (LSTM[k] for k in ("steps", "batch", "features", "hidden"))
    ps = [_param(4 * hidden, features, scale=0.1), _param(4 * hidden, hidden, scale=0.1),
          np.zeros(4 * hidden, np.float32), np.zeros(4 * hidden, np.float32), _param(hidden, 1)]
    xs = RNG.standard_normal((steps, batch, features)).astype(np.float32)
    ys = RNG.standard_normal((steps, batch, 1)).astype(np.float32)
    zero = np.zeros((1, batch, hidden), np.float32)

    def step(xs, ys, w_ih, w_hh, b_ih, b_hh, w_out):
        out, _, _ = F.lstm(xs, zero, zero, [(w_ih, w_hh, b_ih, b_hh)])
        value = F.mse(out @ w_out, ys)
        return value, gc.grad(value, [w_ih, w_hh, b_ih, b_hh, w_out])

    return step, None, [xs, ys, *ps]


FORCES = dict(batch=512, features=24, width=128)


def w9_setup():
    """Force matching (a machine-learned potential): an energy MLP with SiLU, forces = -dE/dx,
    a loss on energies and forces, its gradient with respect to the parameters (second order
    through smooth activations)."""
    batch, features, width = (FORCES[k] for k in ("batch", "features", "width"))
    ps = _mlp_params([features, width, width, 1])
    x = RNG.standard_normal((batch, features)).astype(np.float32)
    e_ref = RNG.standard_normal((batch, 1)).astype(np.float32)
    f_ref = RNG.standard_normal((batch, features)).astype(np.float32)

    def step(x, e_ref, f_ref, *ps):
        energy = _mlp(x, ps, act=F.silu)
        gx, = gc.grad(F.sum(energy), [x])
        value = F.mse(energy, e_ref) + F.mse(-gx, f_ref)
        return value, gc.grad(value, list(ps))

    return step, None, [x, e_ref, f_ref, *ps]


def w10_setup():
    """The W3 transformer block at sequence length 1024 (batch 2, width 128, 4 heads)."""
    return w3_setup(d=128, heads=4, ff=512, seq=1024, batch=2)


SEGMENTATION = dict(batch=8, size=128, classes=4)


def w11_setup():
    """A segmentation step: conv, average pooling, a second conv, bilinear upsampling, the skip
    joined on channels, per-pixel classes by a 1x1 conv, cross-entropy over the channel axis."""
    b, size, classes = (SEGMENTATION[k] for k in ("batch", "size", "classes"))
    ps = [_param(16, 3, 3, 3, scale=0.3), np.zeros(16, np.float32), _param(32, 16, 3, 3, scale=0.1),
          np.zeros(32, np.float32), _param(classes, 48, 1, 1, scale=0.1), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, 3, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, (b, size, size)).astype(np.int64)

    def step(x, t, *ps):
        h1 = F.relu(F.conv(x, ps[0], ps[1], pad=1))
        h2 = F.relu(F.conv(F.avg_pool(h1, 2), ps[2], ps[3], pad=1))
        up = F.interpolate(h2, scale_factor=2, mode="bilinear")
        value = F.softmax_cross_entropy(F.conv(F.concat([h1, up], 1), ps[4], ps[5]), t, axis=1)
        return value, gc.grad(value, list(ps))

    return step, None, [x, t, *ps]


CAUSAL = dict(batch=8, seq=256, width=256, heads=8, vocab=1000, dropout=0.1)


def w12_setup():
    """A causal language-model step: layer norm, causal self-attention with dropout on the
    attention weights, a residual, the vocabulary read-out and cross-entropy."""
    b, s, d, vocab = (CAUSAL[k] for k in ("batch", "seq", "width", "vocab"))
    heads, p = CAUSAL["heads"], CAUSAL["dropout"]
    ps = [np.ones(d, np.float32), np.zeros(d, np.float32), _param(d, 3 * d), _param(d, d), _param(d, vocab)]
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


PAIRS = dict(batch=8, atoms=64, basis=16, width=32)


def _pair_energy(r, ps, centers, softplus, np_like):
    """The energy of each configuration (B, atoms, 3): a softplus MLP of Gaussian features of every
    pairwise distance, summed (in any system's ops: np_like is its numpy)."""
    d = np_like.sqrt(np_like.sum((r[:, :, None, :] - r[:, None, :, :]) ** 2, -1) + 1e-6)
    h = softplus(np_like.exp(-(d[..., None] - centers) ** 2) @ ps[0] + ps[1]) @ ps[2] + ps[3]
    return np_like.sum(h, (1, 2, 3))


def w13_setup():
    """A pair-potential step: energies from all pairwise distances through a softplus MLP, forces =
    -dE/dr, a loss on both, its gradient with respect to the parameters (second order)."""
    b, atoms, basis, width = (PAIRS[k] for k in ("batch", "atoms", "basis", "width"))
    ps = [_param(basis, width, scale=0.3), np.zeros(width, np.float32), _param(width, 1, scale=0.3),
          np.zeros(1, np.float32)]
    r = (RNG.standard_normal((b, atoms, 3)) * 2).astype(np.float32)
    e_ref = RNG.standard_normal(b).astype(np.float32)
    f_ref = RNG.standard_normal((b, atoms, 3)).astype(np.float32)
    centers = _pair_centers()

    def step(r, e_ref, f_ref, *ps):
        energy = _pair_energy(r, ps, centers, F.softplus, F)
        forces = -gc.grad(F.sum(energy), [r])[0]
        value = F.mse(energy, e_ref) + F.mse(forces, f_ref)
        return value, gc.grad(value, list(ps))

    return step, None, [r, e_ref, f_ref, *ps]


def _pair_centers():
    return np.linspace(0.5, 5, PAIRS["basis"]).astype(np.float32)


MOBILE = dict(batch=16, size=64, classes=10)
# (input channels, output channels, kernel, stride, groups) per convolution of W14; each is followed
# by training-mode batch norm and relu6, except the projections (indices 2, 5, 8); 8 adds 5's output.
MOBILE_LAYERS = [(3, 32, 3, 2, 1), (32, 32, 3, 1, 32), (32, 16, 1, 1, 1), (16, 96, 1, 1, 1), (96, 96, 3, 2, 96),
                 (96, 24, 1, 1, 1), (24, 144, 1, 1, 1), (144, 144, 3, 1, 144), (144, 24, 1, 1, 1)]


def _mobilenet(x, ps, conv, bn, relu6, mean):
    """The W14 network in any system's ops: conv(h, w, stride, pad, groups)."""
    h = skip = x
    for i, (_, _, k, stride, groups) in enumerate(MOBILE_LAYERS):
        h = bn(conv(h, ps[3 * i], stride, k // 2, groups), ps[3 * i + 1], ps[3 * i + 2])
        if i == 8:
            h = h + skip
        elif i in (2, 5):
            skip = h
        else:
            h = relu6(h)
    return mean(h) @ ps[-2] + ps[-1]


def w14_setup():
    """A MobileNetV2-like step: a strided stem, inverted residual blocks of 1x1 expansions, 3x3
    depthwise convolutions (stride 1 and 2) and 1x1 projections, training-mode batch norm, relu6."""
    b, size, classes = (MOBILE[k] for k in ("batch", "size", "classes"))
    ps = []
    for ci, co, k, _, groups in MOBILE_LAYERS:
        ps += [_param(co, ci // groups, k, k, scale=0.3), np.ones(co, np.float32), np.zeros(co, np.float32)]
    ps += [_param(MOBILE_LAYERS[-1][1], classes), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, 3, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, b).astype(np.int64)

    def step(x, t, *ps):
        z = _mobilenet(x, ps, lambda h, w, s, p, g: F.conv(h, w, stride=s, pad=p, groups=g), _bn,
                       lambda h: F.clip(h, 0.0, 6.0), lambda h: F.mean(h, (2, 3)))
        value = F.softmax_cross_entropy(z, t)
        return value, gc.grad(value, list(ps))

    return step, None, [x, t, *ps]


GRAPH = dict(nodes=2000, edges=20000, width=64, layers=3)


def _message_passing(x, src, dst, ps, gather, add_at, relu):
    """The W15 network in any system's ops: per layer, each edge carries its source's projected
    features to its destination, summed there (repeated destinations), plus a residual."""
    h = x
    for w in ps[:-1]:
        h = relu(add_at(h, dst, gather(h @ w, src)))
    return h @ ps[-1]


def w15_setup():
    """A graph network's training step: gathers by edge source and sums by edge destination, so
    its gradient is scatter-adds with many repeated indices (docs/performance.md, scatter-adds)."""
    n, e, d, layers = (GRAPH[k] for k in ("nodes", "edges", "width", "layers"))
    ps = [_param(d, d) for _ in range(layers)] + [_param(d, 1)]
    x = RNG.standard_normal((n, d)).astype(np.float32)
    src, dst = RNG.integers(0, n, e), RNG.integers(0, n, e)
    y = RNG.standard_normal((n, 1)).astype(np.float32)

    def step(x, src, dst, y, *ps):
        out = _message_passing(x, src, dst, ps, lambda h, i: F.take(h, i, axis=0),
                               lambda h, i, m: F.index_add(h, 0, i, m), F.relu)
        value = F.mean(F.square(out - y))
        return value, gc.grad(value, list(ps))

    return step, None, [x, src, dst, y, *ps]


LLAMA = dict(batch=4, seq=256, width=256, heads=4, vocab=2000, hidden=683)


def _rope_tables():
    """cos and sin (seq, head width / 2) of rotary embeddings, for W16."""
    half = LLAMA["width"] // LLAMA["heads"] // 2
    angle = np.arange(LLAMA["seq"])[:, None] / 10000.0 ** (np.arange(half) / half)
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def _rotated(u, cos, sin, join):
    """Rotary embedding of interleaved pairs (u[..., 0::2], u[..., 1::2]), as Meta's LLaMA code."""
    even, odd = u[..., 0::2], u[..., 1::2]
    return join([even * cos - odd * sin, even * sin + odd * cos])


def w16_setup():
    """A LLaMA-like block's training step: token embedding, RMSNorm, causal attention with rotary
    embeddings of interleaved pairs, a SwiGLU MLP, RMSNorm and the vocabulary read-out with
    cross-entropy, every weight's gradient."""
    b, s, d, heads, vocab, hidden = (LLAMA[k] for k in ("batch", "seq", "width", "heads", "vocab", "hidden"))
    ps = [_param(vocab, d, scale=0.02), np.ones(d, np.float32), _param(d, 3 * d), _param(d, d),
          np.ones(d, np.float32), _param(d, 2 * hidden), _param(hidden, d), _param(d, vocab)]
    ids = RNG.integers(0, vocab, (b, s)).astype(np.int64)
    t = RNG.integers(0, vocab, (b, s)).astype(np.int64)
    cos, sin = _rope_tables()

    def step(ids, t, *ps):
        emb, n1, wqkv, wo, n2, w12, w3, head = ps
        x = F.embedding(ids, emb)
        heads_of = lambda u: F.transpose(F.reshape(u, (b, s, heads, d // heads)), (0, 2, 1, 3))  # noqa: E731
        q, k, v = (heads_of(u) for u in F.split(F.rms_norm(x, (d,), n1, eps=1e-6) @ wqkv, 3, -1))
        join = lambda parts: F.concat(parts, -1)  # noqa: E731
        a = F.scaled_dot_product_attention(_rotated(q, cos, sin, join), _rotated(k, cos, sin, join), v, is_causal=True)
        x = x + F.reshape(F.transpose(a, (0, 2, 1, 3)), (b, s, d)) @ wo
        gate, up = F.split(F.rms_norm(x, (d,), n2, eps=1e-6) @ w12, 2, -1)
        x = x + (F.silu(gate) * up) @ w3
        value = F.softmax_cross_entropy(x @ head, t)
        return value, gc.grad(value, list(ps))

    return step, None, [ids, t, *ps]


DIFFUSION = dict(batch=8, size=64, channels=32, groups=8)


def w17_setup():
    """A small U-Net step of the diffusion kind: convolutions with group norm and SiLU, average
    pooling down, bilinear upsampling, the skip joined on channels, a 1x1 read-out, MSE."""
    b, size, c, groups = (DIFFUSION[k] for k in ("batch", "size", "channels", "groups"))
    ps = [_param(c, 3, 3, 3, scale=0.2), np.ones(c, np.float32), np.zeros(c, np.float32),
          _param(2 * c, c, 3, 3), np.ones(2 * c, np.float32), np.zeros(2 * c, np.float32),
          _param(c, 3 * c, 3, 3), np.ones(c, np.float32), np.zeros(c, np.float32), _param(3, c, 1, 1)]
    x = RNG.standard_normal((b, 3, size, size)).astype(np.float32)
    y = RNG.standard_normal((b, 3, size, size)).astype(np.float32)

    def step(x, y, *ps):
        def block(h, w, g, be):
            return F.silu(F.group_norm(F.conv(h, w, pad=1), groups, g, be))
        h1 = block(x, *ps[0:3])
        h2 = block(F.avg_pool(h1, 2), *ps[3:6])
        up = F.interpolate(h2, scale_factor=2, mode="bilinear")
        value = F.mse(F.conv(block(F.concat([up, h1], 1), *ps[6:9]), ps[9]), y)
        return value, gc.grad(value, list(ps))

    return step, None, [x, y, *ps]


DOWNSAMPLE = dict(batch=32, channels=32, size=32, classes=10)


def _downsample(x, ps, conv, bn, relu, mean):
    """The W18 network in any system's ops: a ResNet stage's first block, which halves the size and
    doubles the channels (3x3 stride-2 conv-BN-relu, 3x3 conv-BN; a 1x1 stride-2 conv-BN shortcut;
    relu of the sum), then global average pooling and a linear classifier."""
    h = relu(bn(conv(x, ps[0], 2, 1), ps[1], ps[2]))
    h = relu(bn(conv(h, ps[3], 1, 1), ps[4], ps[5]) + bn(conv(x, ps[6], 2, 0), ps[7], ps[8]))
    return mean(h) @ ps[9] + ps[10]


def w18_setup():
    """A ResNet downsampling block's training step (strided convolutions and their weight
    gradients, training-mode batch norm, a projected shortcut)."""
    b, c, size, classes = (DOWNSAMPLE[k] for k in ("batch", "channels", "size", "classes"))
    ones, zeros = np.ones(2 * c, np.float32), np.zeros(2 * c, np.float32)
    ps = [_param(2 * c, c, 3, 3, scale=0.06), ones, zeros, _param(2 * c, 2 * c, 3, 3, scale=0.04), ones, zeros,
          _param(2 * c, c, 1, 1, scale=0.1), ones, zeros, _param(2 * c, classes), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, c, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, b).astype(np.int64)

    def step(x, t, *ps):
        z = _downsample(x, ps, lambda h, w, s, p: F.conv(h, w, stride=s, pad=p), _bn, F.relu,
                        lambda h: F.mean(h, (2, 3)))
        value = F.softmax_cross_entropy(z, t)
        return value, gc.grad(value, list(ps))

    return step, None, [x, t, *ps]


EMBEDDING = dict(vocab=30000, width=128, batch=64, seq=64, hidden=256, classes=5)


def w19_setup():
    """A text classifier's step over a large embedding table: the mean of each sequence's token
    embeddings, a GELU MLP, cross-entropy; the table's gradient adds 4,096 rows into 30,000."""
    vocab, d, b, s, hidden, classes = (EMBEDDING[k] for k in ("vocab", "width", "batch", "seq", "hidden", "classes"))
    ps = [_param(vocab, d, scale=0.1), _param(d, hidden), np.zeros(hidden, np.float32), _param(hidden, classes),
          np.zeros(classes, np.float32)]
    ids = RNG.integers(0, vocab, (b, s)).astype(np.int64)
    t = RNG.integers(0, classes, b).astype(np.int64)

    def step(ids, t, *ps):
        h = F.mean(F.embedding(ids, ps[0]), 1)
        value = F.softmax_cross_entropy(F.gelu(h @ ps[1] + ps[2]) @ ps[3] + ps[4], t)
        return value, gc.grad(value, list(ps))

    return step, None, [ids, t, *ps]


# Each kind of workload again at a second shape that nobody profiled or tuned for (`--other-shapes`):
# the first shapes were tuned one by one, and speed that holds only there is not the kind's.
# Key: the workload; value: its configuration above and the shape it takes instead.
# W7's: a CIFAR ResNet's first stage (16 channels); W20's: an ImageNet ResNet's third (14 x 14 x 256).
OTHER_SHAPES = {
    "W7": (RESNET, dict(batch=64, inputs=3, channels=16, size=32, blocks=2, classes=10)),
    "W20": (RESNET_LATE, dict(batch=8, inputs=128, channels=256, size=14, blocks=1, classes=10)),
    "W18": (DOWNSAMPLE, dict(batch=16, channels=64, size=56, classes=10)),
    "W8": (LSTM, dict(steps=100, batch=16, features=32, hidden=256)),
    "W9": (FORCES, dict(batch=2048, features=32, width=256)),
    "W13": (PAIRS, dict(batch=4, atoms=128, basis=32, width=64)),
    "W14": (MOBILE, dict(batch=8, size=112, classes=10)),
    "W12": (CAUSAL, dict(batch=4, seq=512, width=256, heads=8, vocab=1000, dropout=0.1)),
    "W16": (LLAMA, dict(batch=2, seq=512, width=256, heads=4, vocab=2000, hidden=683)),
    "W17": (DIFFUSION, dict(batch=4, size=96, channels=32, groups=8)),
    "W19": (EMBEDDING, dict(vocab=50000, width=256, batch=32, seq=128, hidden=256, classes=5)),
}


@contextlib.contextmanager
def _other_shape(key: str):
    """Workload `key`'s configuration changed, in place, to its OTHER_SHAPES shape while the block
    runs: the setups and the PyTorch and JAX twins read it when they are called."""
    config, shape = OTHER_SHAPES[key]
    saved = dict(config)
    config.clear()
    config.update(shape)
    try:
        yield
    finally:
        config.clear()
        config.update(saved)


WORKLOADS = {
    "W1": ("mlp-step", w1_setup), "W2": ("cnn-step", w2_setup), "W3": ("transformer-step", w3_setup),
    "W4": ("wgan-gp", w4_setup), "W5": ("pinn", w5_setup), "W6": ("mlp-hvp", w6_setup),
    "W1f": ("mlp-forward", w1_forward_setup),
    "W7": ("resnet-bn-step", w7_setup), "W8": ("lstm-step", w8_setup), "W9": ("force-matching", w9_setup),
    "W10": ("attention-1k", w10_setup),
    "W11": ("segmentation-step", w11_setup), "W12": ("causal-lm-step", w12_setup), "W13": ("pair-potential", w13_setup),
    "W14": ("mobilenet-step", w14_setup), "W15": ("graph-network-step", w15_setup),
    "W16": ("llama-block-step", w16_setup), "W17": ("groupnorm-unet-step", w17_setup),
    "W18": ("resnet-downsample-step", w18_setup), "W19": ("embedding-text-step", w19_setup),
    "W20": ("resnet-late-stage-step", w20_setup),
    **LOOP_WORKLOADS,
}


# -- reference implementations -----------------------------------------------------------------------
def torch_workloads():
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(1 if CPU_TIME else os.cpu_count() or 1)
    T = lambda a: torch.tensor(a)  # noqa: E731

    def mlp(x, ps, act=torch.relu):   # the same layers as _mlp, in torch ops
        return _mlp(x, ps, act)

    def params(args):
        return [T(a).requires_grad_(True) for a in args]

    def bn(h, g, b):       # training-mode batch norm (W7, W14)
        return torch.nn.functional.batch_norm(h, None, None, g, b, training=True)

    def w1(args):
        x, t, ps = T(args[0]), T(args[1]), params(args[2:])
        return lambda: torch.autograd.grad(torch.nn.functional.cross_entropy(mlp(x, ps), t), ps)

    def w1f(args):
        x, t, ps = T(args[0]), T(args[1]), [T(a) for a in args[2:]]
        return lambda: torch.nn.functional.cross_entropy(mlp(x, ps), t)

    def w2(args):
        x, t, ps = T(args[0]), T(args[1]), params(args[2:])
        nnf = torch.nn.functional

        def run():
            h = nnf.max_pool2d(torch.relu(nnf.conv2d(x, ps[0], ps[1], padding=1)), 2)
            h = nnf.max_pool2d(torch.relu(nnf.conv2d(h, ps[2], ps[3], padding=1)), 2)
            return torch.autograd.grad(nnf.cross_entropy(h.flatten(1) @ ps[4] + ps[5], t), ps)
        return run

    def w3(args):
        x, y, ps = T(args[0]), T(args[1]), params(args[2:])
        nnf = torch.nn.functional
        b, s, d = x.shape
        heads = 4

        def run():
            wqkv, bqkv, wo, bo, g1, be1, w1_, b1, w2_, b2, g2, be2 = ps
            qkv = (x @ wqkv + bqkv).reshape(b, s, 3, heads, d // heads)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
            att = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(d // heads), -1)
            o = (att @ v).transpose(1, 2).reshape(b, s, d) @ wo + bo
            h = nnf.layer_norm(x + o, (d,), g1, be1)
            out = nnf.layer_norm(h + nnf.gelu(h @ w1_ + b1) @ w2_ + b2, (d,), g2, be2)
            return torch.autograd.grad(((out - y) ** 2).mean(), ps)
        return run

    def w4(args):
        ps = params(args[1:])

        def run():
            x = T(args[0]).requires_grad_(True)
            gx, = torch.autograd.grad(mlp(x, ps).sum(), [x], create_graph=True)
            pen = ((gx.pow(2).sum(1) + 1e-12).sqrt() - 1).pow(2).mean()
            return torch.autograd.grad(pen, ps, allow_unused=True)
        return run

    def w5(args):
        ps = params(args[2:])

        def run():
            x, t = T(args[0]).requires_grad_(True), T(args[1]).requires_grad_(True)
            u = mlp(torch.tanh(x @ ps[0] + t @ ps[1] + ps[2]), ps[3:], act=torch.tanh)
            u_x, u_t = torch.autograd.grad(u.sum(), [x, t], create_graph=True)
            u_xx, = torch.autograd.grad(u_x.sum(), [x], create_graph=True)
            return torch.autograd.grad(((u_t - u_xx) ** 2).mean(), ps, allow_unused=True)
        return run

    def w6(args):
        x, t, ps, vs = T(args[0]), T(args[1]), params(args[2:8]), [T(a) for a in args[8:]]

        def run():
            gs = torch.autograd.grad(torch.nn.functional.cross_entropy(mlp(x, ps), t), ps, create_graph=True)
            return torch.autograd.grad(sum((g * v).sum() for g, v in zip(gs, vs)), ps)
        return run

    def classifier(args, logits):
        """A classification step (W7, W14, W18): images args[0], labels args[1], parameters after."""
        x, t, ps = T(args[0]), T(args[1]), params(args[2:])
        return lambda: torch.autograd.grad(torch.nn.functional.cross_entropy(logits(x, ps), t), ps)

    def pooled(h):
        return h.mean((2, 3))

    def w7(args):
        conv = lambda h, w: torch.nn.functional.conv2d(h, w, padding=1)  # noqa: E731
        return classifier(args, lambda x, ps: _resnet(x, ps, conv, bn, torch.relu, pooled))

    def w14(args):
        conv = lambda h, w, s, p, g: torch.nn.functional.conv2d(h, w, stride=s, padding=p, groups=g)  # noqa: E731
        return classifier(args, lambda x, ps: _mobilenet(x, ps, conv, bn, lambda h: torch.clamp(h, 0.0, 6.0), pooled))

    def w18(args):
        conv = lambda h, w, s, p: torch.nn.functional.conv2d(h, w, stride=s, padding=p)  # noqa: E731
        return classifier(args, lambda x, ps: _downsample(x, ps, conv, bn, torch.relu, pooled))

    def w19(args):
        ids, t, ps = T(args[0]), T(args[1]), params(args[2:])
        nnf = torch.nn.functional

        def run():
            h = nnf.embedding(ids, ps[0]).mean(1)
            return torch.autograd.grad(nnf.cross_entropy(nnf.gelu(h @ ps[1] + ps[2]) @ ps[3] + ps[4], t), ps)
        return run

    def w8(args):
        xs, ys = T(args[0]), T(args[1])
        lstm = torch.nn.LSTM(LSTM["features"], LSTM["hidden"])
        with torch.no_grad():
            for name, a in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), args[2:6]):
                getattr(lstm, name).copy_(T(a))
        w_out = T(args[6]).requires_grad_(True)
        ps = list(lstm.parameters()) + [w_out]

        def run():
            out, _ = lstm(xs)
            return torch.autograd.grad(((out @ w_out - ys) ** 2).mean(), ps)
        return run

    def w9(args):
        e_ref, f_ref, ps = T(args[1]), T(args[2]), params(args[3:])

        def run():
            x = T(args[0]).requires_grad_(True)
            energy = mlp(x, ps, act=torch.nn.functional.silu)
            gx, = torch.autograd.grad(energy.sum(), [x], create_graph=True)
            loss = ((energy - e_ref) ** 2).mean() + ((-gx - f_ref) ** 2).mean()
            return torch.autograd.grad(loss, ps)
        return run

    def w11(args):
        x, t, ps = T(args[0]), T(args[1]), params(args[2:])
        nnf = torch.nn.functional

        def run():
            h1 = torch.relu(nnf.conv2d(x, ps[0], ps[1], padding=1))
            h2 = torch.relu(nnf.conv2d(nnf.avg_pool2d(h1, 2), ps[2], ps[3], padding=1))
            up = nnf.interpolate(h2, scale_factor=2, mode="bilinear", align_corners=False)
            logits = nnf.conv2d(torch.cat([h1, up], 1), ps[4], ps[5])
            return torch.autograd.grad(nnf.cross_entropy(logits, t), ps)
        return run

    def w12(args):
        x, t, ps = T(args[0]), T(args[1]), params(args[2:])
        nnf = torch.nn.functional
        b, s, d = x.shape
        heads = CAUSAL["heads"]

        def run():
            q, k, v = (nnf.layer_norm(x, (d,), ps[0], ps[1]) @ ps[2]).split(d, -1)
            q, k, v = (u.reshape(b, s, heads, d // heads).transpose(1, 2) for u in (q, k, v))
            a = nnf.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=CAUSAL["dropout"])
            h = x + a.transpose(1, 2).reshape(b, s, d) @ ps[3]
            return torch.autograd.grad(nnf.cross_entropy((h @ ps[4]).reshape(b * s, -1), t.reshape(-1)), ps)
        return run

    def w13(args):
        e_ref, f_ref, ps, centers = T(args[1]), T(args[2]), params(args[3:]), T(_pair_centers())

        def run():
            r = T(args[0]).requires_grad_(True)
            energy = _pair_energy(r, ps, centers, torch.nn.functional.softplus, torch)
            forces = -torch.autograd.grad(energy.sum(), [r], create_graph=True)[0]
            loss = ((energy - e_ref) ** 2).mean() + ((forces - f_ref) ** 2).mean()
            return torch.autograd.grad(loss, ps)
        return run

    def w15(args):
        x, src, dst, y, ps = T(args[0]), T(args[1]), T(args[2]), T(args[3]), params(args[4:])

        def run():
            out = _message_passing(x, src, dst, ps, lambda h, i: h[i], lambda h, i, m: h.index_add(0, i, m),
                                   torch.relu)
            return torch.autograd.grad(((out - y) ** 2).mean(), ps)
        return run

    def w16(args):
        ids, t, ps = T(args[0]), T(args[1]), params(args[2:])
        nnf = torch.nn.functional
        b, s, d, heads = (LLAMA[k] for k in ("batch", "seq", "width", "heads"))
        cos, sin = (T(a) for a in _rope_tables())

        def run():
            emb, n1, wqkv, wo, n2, w12, w3, head = ps
            x = nnf.embedding(ids, emb)
            q, k, v = (u.reshape(b, s, heads, -1).transpose(1, 2)
                       for u in (nnf.rms_norm(x, (d,), n1, eps=1e-6) @ wqkv).chunk(3, -1))
            join = lambda parts: torch.cat(parts, -1)  # noqa: E731
            a = nnf.scaled_dot_product_attention(_rotated(q, cos, sin, join), _rotated(k, cos, sin, join), v,
                                                 is_causal=True)
            x = x + a.transpose(1, 2).reshape(b, s, d) @ wo
            gate, up = (nnf.rms_norm(x, (d,), n2, eps=1e-6) @ w12).chunk(2, -1)
            x = x + (nnf.silu(gate) * up) @ w3
            return torch.autograd.grad(nnf.cross_entropy((x @ head).reshape(b * s, -1), t.reshape(-1)), ps)
        return run

    def w17(args):
        x, y, ps = T(args[0]), T(args[1]), params(args[2:])
        nnf, groups = torch.nn.functional, DIFFUSION["groups"]

        def block(h, w, g, be):
            return nnf.silu(nnf.group_norm(nnf.conv2d(h, w, padding=1), groups, g, be))

        def run():
            h1 = block(x, *ps[0:3])
            h2 = block(nnf.avg_pool2d(h1, 2), *ps[3:6])
            up = nnf.interpolate(h2, scale_factor=2, mode="bilinear", align_corners=False)
            out = nnf.conv2d(block(torch.cat([up, h1], 1), *ps[6:9]), ps[9])
            return torch.autograd.grad(nnf.mse_loss(out, y), ps)
        return run

    return {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6, "W1f": w1f,
            "W7": w7, "W8": w8, "W9": w9, "W10": w3, "W11": w11, "W12": w12, "W13": w13, "W14": w14,
            "W15": w15, "W16": w16, "W17": w17, "W18": w18, "W19": w19, "W20": w7, **torch_loop_workloads()}


def jax_workloads():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}

    def mlp(x, ps, act=jax.nn.relu):
        return _mlp(x, ps, act)

    def ce(z, t):
        return jnp.mean(jax.nn.logsumexp(z, axis=1) - jnp.take_along_axis(z, t[:, None], 1)[:, 0])

    def w1_loss(ps, x, t):
        return ce(mlp(x, ps), t)

    def block(f, *args):
        return lambda: jax.block_until_ready(f(*args))

    def ln(h, g, be):      # layer norm over the last axis (W3, W12)
        m = h.mean(-1, keepdims=True)
        v = ((h - m) ** 2).mean(-1, keepdims=True)
        return (h - m) / jnp.sqrt(v + 1e-5) * g + be

    def bn(h, g, b):       # training-mode batch norm over the channels of NCHW (W7, W14)
        m = h.mean((0, 2, 3), keepdims=True)
        v = ((h - m) ** 2).mean((0, 2, 3), keepdims=True)
        return (h - m) / jnp.sqrt(v + 1e-5) * g[None, :, None, None] + b[None, :, None, None]

    def w1(args):
        f = jax.jit(jax.grad(w1_loss))
        return block(f, list(args[2:]), args[0], args[1])

    def w1f(args):
        return block(jax.jit(w1_loss), list(args[2:]), args[0], args[1])

    def w4(args):
        def pen(ps, x):
            gx = jax.grad(lambda x: jnp.sum(mlp(x, ps)))(x)
            return jnp.mean((jnp.sqrt(jnp.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
        return block(jax.jit(jax.grad(pen)), list(args[1:]), args[0])

    def w5(args):
        def loss(ps, x, t):
            def u(x, t):
                return mlp(jnp.tanh(x @ ps[0] + t @ ps[1] + ps[2]), ps[3:], act=jnp.tanh)
            u_x = jax.grad(lambda x: jnp.sum(u(x, t)))
            u_t = jax.grad(lambda t: jnp.sum(u(x, t)))(t)
            u_xx = jax.grad(lambda x: jnp.sum(u_x(x)))(x)
            return jnp.mean((u_t - u_xx) ** 2)
        return block(jax.jit(jax.grad(loss)), list(args[2:]), args[0], args[1])

    def w6(args):
        def hvp(ps, vs, x, t):
            return jax.jvp(lambda p: jax.grad(w1_loss)(p, x, t), (ps,), (vs,))[1]
        return block(jax.jit(hvp), list(args[2:8]), list(args[8:]), args[0], args[1])

    def w2(args):
        x, t, ps = args[0], args[1], list(args[2:])

        def loss(ps, x, t):
            def conv(h, w, b):
                y = jax.lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1)))
                return y + b[None, :, None, None]

            def pool(h):
                return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
            h = pool(jax.nn.relu(conv(x, ps[0], ps[1])))
            h = pool(jax.nn.relu(conv(h, ps[2], ps[3])))
            return ce(h.reshape(h.shape[0], -1) @ ps[4] + ps[5], t)
        return block(jax.jit(jax.grad(loss)), ps, x, t)

    def w3(args):
        x, y, ps = args[0], args[1], list(args[2:])
        b, s, d = x.shape
        heads = 4

        def loss(ps, x, y):
            wqkv, bqkv, wo, bo, g1, be1, w1_, b1, w2_, b2, g2, be2 = ps
            qkv = (x @ wqkv + bqkv).reshape(b, s, 3, heads, d // heads)
            q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
            att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -1)
            o = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo + bo
            h = ln(x + o, g1, be1)
            out = ln(h + jax.nn.gelu(h @ w1_ + b1, approximate=False) @ w2_ + b2, g2, be2)
            return jnp.mean((out - y) ** 2)
        return block(jax.jit(jax.grad(loss)), ps, x, y)

    def w7(args):
        x, t, ps = args[0], args[1], list(args[2:])

        def conv(h, w):
            return jax.lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1)))

        def loss(ps, x, t):
            return ce(_resnet(x, ps, conv, bn, jax.nn.relu, lambda h: h.mean((2, 3))), t)
        return block(jax.jit(jax.grad(loss)), ps, x, t)

    def w14(args):
        x, t, ps = args[0], args[1], list(args[2:])

        def conv(h, w, stride, pad, groups):
            return jax.lax.conv_general_dilated(h, w, (stride, stride), ((pad, pad), (pad, pad)),
                                                feature_group_count=groups)

        def loss(ps, x, t):
            return ce(_mobilenet(x, ps, conv, bn, lambda h: jnp.clip(h, 0.0, 6.0), lambda h: h.mean((2, 3))), t)
        return block(jax.jit(jax.grad(loss)), ps, x, t)

    def w18(args):
        x, t, ps = args[0], args[1], list(args[2:])

        def conv(h, w, stride, pad):
            return jax.lax.conv_general_dilated(h, w, (stride, stride), ((pad, pad), (pad, pad)))

        def loss(ps, x, t):
            return ce(_downsample(x, ps, conv, bn, jax.nn.relu, lambda h: h.mean((2, 3))), t)
        return block(jax.jit(jax.grad(loss)), ps, x, t)

    def w19(args):
        ids, t, ps = args[0], args[1], list(args[2:])

        def loss(ps, ids, t):
            h = ps[0][ids].mean(1)
            return ce(jax.nn.gelu(h @ ps[1] + ps[2], approximate=False) @ ps[3] + ps[4], t)
        return block(jax.jit(jax.grad(loss)), ps, ids, t)

    def w8(args):
        xs, ys, ps = args[0], args[1], list(args[2:])

        def loss(ps, xs, ys):
            w_ih, w_hh, b_ih, b_hh, w_out = ps
            gx = xs @ w_ih.T + b_ih

            def cell(state, g):
                h, c = state
                i, f, gg, o = jnp.split(g + h @ w_hh.T + b_hh, 4, axis=-1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (h, c), h
            zero = jnp.zeros((xs.shape[1], LSTM["hidden"]), xs.dtype)
            _, out = jax.lax.scan(cell, (zero, zero), gx)
            return jnp.mean((out @ w_out - ys) ** 2)
        return block(jax.jit(jax.grad(loss)), ps, xs, ys)

    def w9(args):
        x, e_ref, f_ref, ps = args[0], args[1], args[2], list(args[3:])

        def loss(ps, x, e_ref, f_ref):
            def energy(x):
                return mlp(x, ps, act=jax.nn.silu)
            gx = jax.grad(lambda x: jnp.sum(energy(x)))(x)
            return jnp.mean((energy(x) - e_ref) ** 2) + jnp.mean((-gx - f_ref) ** 2)
        return block(jax.jit(jax.grad(loss)), ps, x, e_ref, f_ref)

    def w11(args):
        x, t, ps = args[0], args[1], list(args[2:])

        def conv(h, w, b, pad):
            y = jax.lax.conv_general_dilated(h, w, (1, 1), ((pad, pad), (pad, pad)))
            return y + b[None, :, None, None]

        def loss(ps, x, t):
            h1 = jax.nn.relu(conv(x, ps[0], ps[1], 1))
            pooled = jax.lax.reduce_window(h1, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4
            h2 = jax.nn.relu(conv(pooled, ps[2], ps[3], 1))
            up = jax.image.resize(h2, h2.shape[:2] + h1.shape[2:], "bilinear")
            logp = jax.nn.log_softmax(conv(jnp.concatenate([h1, up], 1), ps[4], ps[5], 0), axis=1)
            return -jnp.mean(jnp.take_along_axis(logp, t[:, None], 1))
        return block(jax.jit(jax.grad(loss)), ps, x, t)

    def w12(args):
        x, t, ps = args[0], args[1], list(args[2:])
        b, s, d = x.shape
        heads, p = CAUSAL["heads"], CAUSAL["dropout"]
        causal = np.tril(np.ones((s, s), bool))

        def loss(ps, x, t, key):
            q, k, v = jnp.split(ln(x, ps[0], ps[1]) @ ps[2], 3, -1)
            q, k, v = (u.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3) for u in (q, k, v))
            att = jax.nn.softmax(jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -jnp.inf), -1)
            att = jnp.where(jax.random.bernoulli(key, 1 - p, att.shape), att / (1 - p), 0)
            h = x + (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ ps[3]
            return ce((h @ ps[4]).reshape(b * s, -1), t.reshape(-1))
        return block(jax.jit(jax.grad(loss)), ps, x, t, jax.random.PRNGKey(0))

    def w13(args):
        r, e_ref, f_ref, ps = args[0], args[1], args[2], list(args[3:])
        centers = _pair_centers()

        def loss(ps, r, e_ref, f_ref):
            def energy(r):
                return _pair_energy(r, ps, centers, jax.nn.softplus, jnp)
            forces = -jax.grad(lambda r: jnp.sum(energy(r)))(r)
            return jnp.mean((energy(r) - e_ref) ** 2) + jnp.mean((forces - f_ref) ** 2)
        return block(jax.jit(jax.grad(loss)), ps, r, e_ref, f_ref)

    def w15(args):
        x, src, dst, y, ps = args[0], args[1], args[2], args[3], list(args[4:])

        def loss(ps, x, y):
            out = _message_passing(x, src, dst, ps, lambda h, i: h[i], lambda h, i, m: h.at[i].add(m),
                                   jax.nn.relu)
            return jnp.mean((out - y) ** 2)
        return block(jax.jit(jax.grad(loss)), ps, x, y)

    def w16(args):
        ids, t, ps = args[0], args[1], list(args[2:])
        b, s, d, heads = (LLAMA[k] for k in ("batch", "seq", "width", "heads"))
        cos, sin = _rope_tables()
        causal = np.tril(np.ones((s, s), bool))

        def rms(h, w):
            return h / jnp.sqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * w

        def loss(ps, ids, t):
            emb, n1, wqkv, wo, n2, w12, w3, head = ps
            x = emb[ids]
            q, k, v = (u.reshape(b, s, heads, -1).transpose(0, 2, 1, 3) for u in jnp.split(rms(x, n1) @ wqkv, 3, -1))
            join = lambda parts: jnp.concatenate(parts, -1)  # noqa: E731
            q, k = _rotated(q, cos, sin, join), _rotated(k, cos, sin, join)
            att = jax.nn.softmax(jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads), -jnp.inf), -1)
            x = x + (att @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ wo
            gate, up = jnp.split(rms(x, n2) @ w12, 2, -1)
            x = x + (jax.nn.silu(gate) * up) @ w3
            return ce((x @ head).reshape(b * s, -1), t.reshape(-1))
        return block(jax.jit(jax.grad(loss)), ps, ids, t)

    def w17(args):
        x, y, ps = args[0], args[1], list(args[2:])
        groups = DIFFUSION["groups"]

        def gn(h, g, be):
            n, c = h.shape[:2]
            grouped = h.reshape(n, groups, -1)
            m = grouped.mean(-1, keepdims=True)
            v = ((grouped - m) ** 2).mean(-1, keepdims=True)
            h = ((grouped - m) / jnp.sqrt(v + 1e-5)).reshape(h.shape)
            return h * g[None, :, None, None] + be[None, :, None, None]

        def conv(h, w, pad):
            return jax.lax.conv_general_dilated(h, w, (1, 1), ((pad, pad), (pad, pad)))

        def unit(h, w, g, be):
            return jax.nn.silu(gn(conv(h, w, 1), g, be))

        def loss(ps, x, y):
            h1 = unit(x, *ps[0:3])
            pooled = jax.lax.reduce_window(h1, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4
            h2 = unit(pooled, *ps[3:6])
            up = jax.image.resize(h2, h2.shape[:2] + h1.shape[2:], "bilinear")
            return jnp.mean((conv(unit(jnp.concatenate([up, h1], 1), *ps[6:9]), ps[9], 0) - y) ** 2)
        return block(jax.jit(jax.grad(loss)), ps, x, y)

    return {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6, "W1f": w1f,
            "W7": w7, "W8": w8, "W9": w9, "W10": w3, "W11": w11, "W12": w12, "W13": w13, "W14": w14,
            "W15": w15, "W16": w16, "W17": w17, "W18": w18, "W19": w19, "W20": w7}


# -- measurement -------------------------------------------------------------------------------------
def _median_ms(fns: dict, runs: int, block: int = 5) -> dict:
    """Median ms per call of each system, `runs` timed calls each after warm-up. Systems alternate
    in blocks of `block` calls, each block after a pause and one untimed call: drift hits every
    column alike, and no system is timed while another one's thread pool still spins. With
    --cpu-time the clock is the process's CPU time (single-threaded work, which a busy machine
    stretches far less than wall time)."""
    clock = time.process_time if CPU_TIME else time.perf_counter
    times: dict = {k: [] for k in fns}
    for f in fns.values():
        for _ in range(3):
            f()
    while any(len(t) < runs for t in times.values()):
        for k, f in fns.items():
            time.sleep(0.05)   # lets the previous system's worker threads stop spinning and park
            f()
            for _ in range(min(block, runs - len(times[k]))):
                t0 = clock()
                f()
                times[k].append(clock() - t0)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def _single_thread(cf):
    """A call of cf's model on a one-thread session with gcompile's options (for --cpu-time)."""
    import onnxruntime as ort

    from gcompile.runtime.providers import DISABLED_OPTIMIZERS, session_options
    session = ort.InferenceSession(cf.model.SerializeToString(), session_options(len(cf.model.graph.node), 1),
                                   providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS)
    names = [o.name for o in cf.model.graph.output]
    return lambda *args: session.run(names, dict(zip(cf.input_names, args)))


def _node_counts(fn, args):
    graph = trace(fn, args).graph
    before = graph.count_by_order()
    optimize(graph, 2)
    return before, graph.count_by_order()


def run_workloads(names, runs, other_shapes: bool = False):
    """Each workload of `names` through gcompile and its references; with other_shapes, each at
    its OTHER_SHAPES shape instead (its row named with a prime: W7')."""
    torch_w, jax_w = torch_workloads(), jax_workloads()
    results, steps = {}, {}
    bar = Progress(len(names), "bench")   # draws on a terminal only; results still go to stdout
    for key in names:
        bar.step(key)
        with _other_shape(key) if other_shapes else contextlib.nullcontext():
            row, steps[key], line = _time_workload(key, torch_w, jax_w, runs)
        name = f"{key}'" if other_shapes else key
        bar.echo(name.ljust(4) + line)
        results[name] = row
        bar.advance()
    bar.clear()
    if "W1" in steps and "W1f" in steps and not other_shapes:
        # Timed side by side, as the systems are: the two rows above ran minutes apart, and this
        # machine's speed drifts more than the ratio's margin in that time.
        pair = _median_ms({"step": steps["W1"], "forward": steps["W1f"]}, runs)
        ratio = pair["step"] / pair["forward"]
        print(f"W1 backward+forward / forward = {ratio:.2f} ({pair['step']:.1f} / {pair['forward']:.1f} ms, "
              f"timed alternating; target <= 2.3)")
        results["W1_bwd_fwd_ratio"] = ratio
    return results


def _time_workload(key, torch_w, jax_w, runs):
    """(the row of figures, gcompile's step, the printed line after the name) of one workload."""
    label, setup = WORKLOADS[key]
    fn, _, args = setup()
    t0 = time.perf_counter()
    cf = gc.compile(fn, *args, provider="cpu")
    cf(*args)
    build_ms = 1e3 * (time.perf_counter() - t0)
    call = _single_thread(cf) if CPU_TIME else cf
    fns = {"gcompile": lambda call=call, args=args: call(*args)}
    if key in torch_w:
        fns["torch"] = torch_w[key](args)
    if key in jax_w:
        t0 = time.perf_counter()
        fns["jax"] = jax_w[key](args)
        fns["jax"]()
        jax_build = 1e3 * (time.perf_counter() - t0)
    times = _median_ms(fns, runs)
    before, after = _node_counts(fn, args)
    row = {"label": label, "ms": times, "build_ms": build_ms, "nodes_before": before, "nodes_after": after,
           "provider": cf.provider}
    if "jax" in fns:
        row["jax_build_ms"] = jax_build
    line = f" {label:17s} gcompile {times['gcompile']:7.1f} ms"
    for ref in ("torch", "jax"):
        if ref in times:
            line += f"  {ref} {times[ref]:7.1f} ms  ratio {times['gcompile'] / times[ref]:.2f}"
    line += f"  | build {build_ms:.0f} ms" + (f" (jax {jax_build:.0f} ms)" if "jax" in fns else "")
    line += f"  | nodes by order {dict(before)} -> {dict(after)}"
    return row, fns["gcompile"], line


def summarise(passes: list[dict]) -> dict:
    """Across repeated passes: the median of each system's per-pass medians, and the range of
    gcompile's ratios to each reference (this machine's speed drifts for minutes at a time, and
    not alike for every system)."""
    summary = {}
    print(f"\nover {len(passes)} passes: median ms (ratio range)")
    for key in passes[0]:
        if not isinstance(passes[0][key], dict):
            continue
        ms = {system: float(np.median([p[key]["ms"][system] for p in passes])) for system in passes[0][key]["ms"]}
        line, row = f"{key:4s} gcompile {ms['gcompile']:7.1f} ms", {"ms": ms}
        for ref in ("torch", "jax"):
            if ref in ms:
                ratios = [p[key]["ms"]["gcompile"] / p[key]["ms"][ref] for p in passes]
                row[f"ratio_{ref}"] = (min(ratios), float(np.median(ratios)), max(ratios))
                line += (f"  {ref} {ms[ref]:7.1f} ms  ratio {np.median(ratios):.2f} "
                         f"({min(ratios):.2f}-{max(ratios):.2f})")
        print(line)
        summary[key] = row
    if all("W1_bwd_fwd_ratio" in p for p in passes):
        ratios = [p["W1_bwd_fwd_ratio"] for p in passes]
        print(f"W1 backward+forward / forward {np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        summary["W1_bwd_fwd_ratio"] = (min(ratios), float(np.median(ratios)), max(ratios))
    return summary


def compile_scaling(sizes):
    """Trace + grad + passes + lowering of a deep narrow tanh MLP with about N nodes."""
    from gcompile.lowering import to_onnx
    rows = []
    bar = Progress(len(sizes), "scaling")
    for n in sizes:
        bar.step(f"{n} nodes")
        depth = max(1, n // 9)   # ~9 nodes per layer counting forward and backward
        ws = [_param(8, 8) for _ in range(depth)]

        def fn(x, ws=ws):
            h = x
            for w in ws:
                h = F.tanh(h @ w)
            return gc.grad(F.sum(h), [x])[0]
        timings = []
        for _ in range(max(1, 5000 // n)):   # the small graphs compile in tens of ms: median of several
            t0 = time.perf_counter()
            traced = trace(fn, [gc.spec(("batch", 8))])
            nodes = len(traced.graph)
            optimize(traced.graph, 2)
            to_onnx(traced.graph, traced.input_names)
            timings.append(time.perf_counter() - t0)
        seconds = float(np.median(timings))
        rows.append({"nodes": nodes, "seconds": seconds, "nodes_per_s": nodes / seconds})
        bar.echo(f"compile scaling: {nodes:7d} nodes  {seconds:7.2f} s  {nodes / seconds:9.0f} nodes/s")
        bar.advance()
    bar.clear()
    return rows


def _scaling_graph(kind: str, n: int):
    """(fn, args) of a gradient graph of about n ONNX nodes: 'mlp', a deep narrow tanh MLP's
    gradient with respect to every layer's weight (an input and an output per layer), or
    'lstm', an LSTM's weight gradients over a long sequence, unrolled (four inputs and outputs; as
    a scan its graph would not grow with the sequence: see --loops)."""
    if kind == "mlp":
        ws = [_param(8, 8) for _ in range(max(1, n // 8))]   # ~8 ONNX nodes per layer, both passes

        def mlp(x, *ws):
            h = x
            for w in ws:
                h = F.tanh(h @ w)
            return gc.grad(F.sum(h * h), list(ws))
        return mlp, [RNG.standard_normal((4, 8)).astype(np.float32), *ws]
    steps = max(1, n // 45)                                 # ~45 ONNX nodes per step, both passes
    ws = [_param(32, 8, scale=0.3), _param(32, 8, scale=0.3), np.zeros(32, np.float32)]
    zero = np.zeros((1, 4, 8), np.float32)

    def lstm(xs, w_ih, w_hh, b):
        out, _, _ = F.lstm(xs, zero, zero, [(w_ih, w_hh, b, None)])
        return gc.grad(F.sum(out * out), [w_ih, w_hh, b])
    return lstm, [RNG.standard_normal((steps, 4, 8)).astype(np.float32), *ws]


def build_scaling(sizes, kinds=("mlp", "lstm")):
    """Build to first result of gradient graphs of about N ONNX nodes (see _scaling_graph): trace +
    grad + passes + lowering, then ONNX Runtime's session, then the first call. Linear growth
    means the per-node cost stays flat."""
    from gcompile.lowering import order, to_onnx
    from gcompile.runtime.providers import make_session
    rows = []
    for kind, n in ((k, n) for k in kinds for n in sizes):
        fn, args = _scaling_graph(kind, n)
        clock = [(time.perf_counter(), time.process_time())]
        with bench_loops.unrolled_lstm():
            traced = trace(fn, args)
        optimize(traced.graph, 2)
        model, _ = to_onnx(traced.graph, traced.input_names)
        data = model.SerializeToString()
        clock.append((time.perf_counter(), time.process_time()))
        session = make_session(data, "cpu", nodes=len(model.graph.node))
        clock.append((time.perf_counter(), time.process_time()))
        session.run(None, dict(zip(traced.input_names, args)))
        clock.append((time.perf_counter(), time.process_time()))
        nodes = len(model.graph.node)
        row: dict = {"kind": kind, "onnx_nodes": nodes, "outputs": len(model.graph.output),
                     "loader_waits": order.loader_waits(model.graph.node)}
        for clock_kind, k in (("wall", 0), ("cpu", 1)):   # CPU time: what a quiet machine would take
            for phase, i in (("build", 0), ("session", 1), ("first_run", 2), ("total", None)):
                a, b = (clock[0], clock[-1]) if i is None else (clock[i], clock[i + 1])
                row[f"{phase}_{clock_kind}_s"] = b[k] - a[k]
        rows.append(row)
        print(f"build to first result, {kind}: {nodes:7d} ONNX nodes, {row['outputs']} outputs; seconds wall (CPU): "
              + "  ".join(f"{p} {row[p + '_wall_s']:.2f} ({row[p + '_cpu_s']:.2f})"
                          for p in ("build", "session", "first_run", "total"))
              + f"  {1e6 * row['total_cpu_s'] / nodes:.0f} us CPU per node; loader waits "
              f"{row['loader_waits'] / nodes:.1f} per node", flush=True)
    return rows


class BusyNeighbour:
    """`count` processes that each keep one core busy (a Python loop), as another user's job
    would: started on entry, ended on exit (only the processes started here)."""

    def __init__(self, count: int):
        self.count, self.procs = count, []

    def __enter__(self):
        import subprocess
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        time.sleep(1.0)   # let them reach the scheduler's steady state
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def _lstm_memory_run(mode: str, steps: int = 100, batch: int = 512, hidden: int = 64, features: int = 16) -> dict:
    """One variant of recompute_memory, in its own process: build the long-sequence LSTM step,
    reset the peak RSS (Linux: /proc/self/clear_refs), run it once, report the growth."""
    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))
    rng = np.random.default_rng(0)
    xs = (rng.standard_normal((steps, batch, features)) * 0.5).astype(np.float32)
    ws = [_param(4 * hidden, features, scale=0.1), _param(4 * hidden, hidden, scale=0.1),
          np.zeros(4 * hidden, np.float32)]
    h0 = np.zeros((batch, hidden), np.float32)

    def step(xs, h0, w_ih, w_hh, b):
        h, c = h0, h0
        if mode in ("scan", "scan-checkpoint"):   # one loop; its backward saves each step's values, or the carries
            (h, c), _ = gc.scan(lambda hc, x: (F.lstm_cell(x, *hc, w_ih, w_hh, b), None), (h, c), xs,
                                checkpoint=mode == "scan-checkpoint")
        for t in range(0 if mode.startswith("scan") else steps):
            if mode == "checkpoint":
                h, c = gc.checkpoint(F.lstm_cell, xs[t], h, c, w_ih, w_hh, b)
            else:
                h, c = F.lstm_cell(xs[t], h, c, w_ih, w_hh, b)
        loss = F.sum(h * h)
        return loss, gc.grad(loss, [w_ih, w_hh, b])
    cf = gc.compile(step, xs, h0, *ws, provider="cpu", recompute=mode == "cheap")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    t0 = time.perf_counter()
    loss = float(cf(xs, h0, *ws)[0])
    return {"mode": mode, "peak_mb": status("VmHWM") - before, "first_run_ms": 1e3 * (time.perf_counter() - t0),
            "onnx_nodes": len(cf.model.graph.node), "loss": loss}


def recompute_memory() -> list[dict]:
    """Peak RSS growth of one ORT run of a 100-step LSTM (batch 512, hidden 64) forward +
    weight gradients: no recompute, recompute=True (cheap nodes), gc.checkpoint per step
    (ARCHITECTURE.md §9.4), and as one gc.scan saving each step's values or (checkpoint=True) the
    carries only. Each variant runs in a fresh process so that arenas do not mix."""
    import subprocess
    rows = []
    for mode in ("none", "cheap", "checkpoint", "scan", "scan-checkpoint"):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-variant", mode],
                             check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"LSTM T=100 step, {r['mode']:15s} peak +{r['peak_mb']:6.1f} MB  first run "
              f"{r['first_run_ms']:7.1f} ms  {r['onnx_nodes']} ONNX nodes  loss {r['loss']:.4f}")
    return rows


# -- data-parallel training on Ray (--distributed; needs the distributed extra) ------------------------
def _dp_step(features: int, hidden: int, classes: int, batch: int, depth: int = 2):
    """(split step, fused step, x, labels) of a float32 ReLU MLP classifier trained with SGD."""
    from gcompile.distributed import export_split_step
    sizes = [features] + [hidden] * depth + [classes]
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"w{i}"], params[f"b{i}"] = _param(a, b), np.zeros(b, np.float32)

    def loss(p, x, t):
        return F.softmax_cross_entropy(_mlp(x, [p[k] for k in params]), t)

    specs = gc.spec(("batch", features), "float32"), gc.spec(("batch",), "int64")
    split = export_split_step(loss, params, gc.optim.SGD(0.01), *specs, provider="cpu")
    fused = gc.export_train_step(loss, params, gc.optim.SGD(0.01), *specs, provider="cpu")
    x = RNG.standard_normal((batch, features)).astype(np.float32)
    return split, fused, x, RNG.integers(0, classes, batch).astype(np.int64)


def _timed_steps(trainer, batch, steps: int, warmup: int = 3) -> tuple[float, list[dict]]:
    """(median seconds per step, per-step timings where the trainer reports them)."""
    for _ in range(warmup):
        trainer.step(*batch)
    seconds, timings = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step(*batch)
        seconds.append(time.perf_counter() - t0)
        if hasattr(trainer, "timings"):
            timings.append(trainer.timings())
    return float(np.median(seconds)), timings


def distributed_bench(steps: int = 30, sizes=(10_000, 100_000, 1_000_000, 4_000_000)) -> dict:
    """Steps and samples per second of one training step on 1 vs 2 Ray workers (and the one-process
    Trainer), and the cost per step of the gradient allreduce as the model grows."""
    import ray

    from gcompile.distributed import DistributedTrainer
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             object_store_memory=512 * 1024 ** 2)
    throughput = []
    split, fused, x, t = _dp_step(features=256, hidden=512, classes=10, batch=1024)
    n_params = sum(int(np.prod(v.shape)) for v in split.params.values())
    per_step, _ = _timed_steps(gc.runtime.Trainer(fused), (x, t), steps)
    throughput.append({"system": "Trainer (1 process, all cores)", "workers": 1, "s_per_step": per_step})
    for workers in (1, 2):
        with DistributedTrainer(split, workers=workers) as trainer:
            per_step, timings = _timed_steps(trainer, (x, t), steps)
        throughput.append({"system": f"DistributedTrainer, {workers} worker(s) x 1 CPU", "workers": workers,
                           "s_per_step": per_step,
                           "communication_s": float(np.median([m["communication"] for m in timings]))})
    for row in throughput:
        row.update(steps_per_s=1 / row["s_per_step"], samples_per_s=len(x) / row["s_per_step"])
        print(f"MLP 256-512-512-10 ({n_params} params), batch {len(x)}: {row['system']:40s} "
              f"{row['steps_per_s']:7.1f} steps/s {row['samples_per_s']:9.0f} samples/s")
    communication = []
    for size in sizes:   # a linear model on a tiny batch: the step is nearly all gradient traffic
        features = size // 10
        split, _, x, t = _dp_step(features=features, hidden=0, classes=10, batch=8, depth=0)
        for workers in (1, 2):
            with DistributedTrainer(split, workers=workers) as trainer:
                per_step, timings = _timed_steps(trainer, (x, t), max(5, steps // 3))
            med = {k: float(np.median([m[k] for m in timings])) for k in timings[0]}
            communication.append({"params": size + 10, "megabytes": 4 * (size + 10) / 1e6, "workers": workers,
                                  "s_per_step": per_step, **med})
            r = communication[-1]
            print(f"linear model {r['params']:9d} params ({r['megabytes']:6.2f} MB), {workers} worker(s): step "
                  f"{1e3 * r['s_per_step']:7.2f} ms = gradients {1e3 * r['gradients']:6.2f} + reduce "
                  f"{1e3 * r['reduce']:6.2f} + apply {1e3 * r['apply']:6.2f} + communication/scheduling "
                  f"{1e3 * r['communication']:6.2f} ms")
    ray.shutdown()
    return {"throughput": throughput, "communication": communication}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the workloads, summarised at the end")
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--scaling", default="1000,10000,100000", help="node counts; empty to skip")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--build-scaling", default="", help="ONNX node counts for build-to-first-result timing, "
                        "e.g. 1000,10000,100000; empty to skip")
    parser.add_argument("--contended", type=int, default=0, metavar="N",
                        help="run with N busy neighbour processes (each keeps one core busy)")
    parser.add_argument("--cpu-time", action="store_true", help="every system on one thread, timed by CPU time")
    parser.add_argument("--memory", action="store_true", help="only the recompute peak-memory comparison")
    parser.add_argument("--memory-variant", help=argparse.SUPPRESS)
    parser.add_argument("--distributed", action="store_true",
                        help="only data-parallel training on Ray: 1 vs 2 workers, allreduce cost by model size")
    parser.add_argument("--loops", action="store_true", help="only the loop figures (tools/bench_loops.py)")
    parser.add_argument("--other-shapes", action="store_true",
                        help="the workloads of OTHER_SHAPES (those of --only) at their second shape")
    args = parser.parse_args(argv)
    if args.distributed:
        results = {"distributed": distributed_bench(args.runs)}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
        return
    if args.memory_variant:
        print(json.dumps(_lstm_memory_run(args.memory_variant)))
        return
    if args.loops:
        results = {"loops": loop_report(_median_ms, args.runs)}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
        return
    if args.memory:
        results = {"recompute_memory": recompute_memory()}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
        return
    names = [k for k in args.only.split(",") if k and (k in OTHER_SHAPES or not args.other_shapes)]
    with BusyNeighbour(args.contended):
        if args.contended:
            print(f"contended: {args.contended} busy neighbour process(es) running")
        passes = [run_workloads(names, args.runs, args.other_shapes) for _ in range(args.repeat)]
        results: dict = {"workloads": passes[0] if args.repeat == 1 else passes, "contended": args.contended}
        if args.repeat > 1:
            results["summary"] = summarise(passes)
        if args.scaling:
            results["scaling"] = compile_scaling([int(s) for s in args.scaling.split(",")])
        if args.build_scaling:
            results["build_scaling"] = build_scaling([int(s) for s in args.build_scaling.split(",")])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
