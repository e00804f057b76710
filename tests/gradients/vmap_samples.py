"""A sample call of every registry op that does not declare Trait.ELEMENTWISE (those take their operands
from tests/elementwise_samples.py), for the check that gc.vmap batches each op numerically
(tests/gradients/test_vmap_ops.py): SAMPLES[op] is a function whose per-example trace records `op`,
its arguments at batch size B along axis 0, and which of them are batched. A new op fails that check,
named, until it gets its line here. Ops a gradient makes (conv_weight_grad, pool_scatter, ...) are
reached through gc.grad; the others are called as users call them, or with apply where no function
emits the op alone."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply, apply_n
from gcompile.ops.random import keyed_uniform

B = 3
RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape)


def ints(high, *shape):
    return RNG.integers(0, high, shape)


def spd(*shape):
    a = RNG.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + 3 * np.eye(shape[-1])


@dataclass
class Sample:
    fn: object
    args: list
    in_axes: list
    symbolic: bool = True          # also with the batch size a symbolic dim (per-example weights need it static)
    float32: bool = False          # ONNX Runtime's CPU kernels of the op (Conv, AveragePool) have no float64


def _grad(f, argnums=0):
    return gc.grad(f, argnums=argnums)


def _rnn(w, xs, h0):
    def step(h, x):
        h = F.tanh(h @ w + x)
        return h, F.sum(h)
    return gc.scan(step, h0, xs)


def _halve(x, limit):
    return gc.while_loop(lambda v: F.sum(F.abs(v[0])) > limit, lambda v: (v[0] * 0.5, v[1] + 1), (x, np.int64(0)))


def _branch(x, y):
    return gc.cond(F.sum(x) > 0, lambda x, y: x * y, lambda x, y: F.tanh(x) - y, x, y)


def _root(t):
    return gc.custom_root(lambda x, t: x + 0.3 * F.tanh(x) - t, F.zeros_like(t), t,
                          solver=lambda h, x: gc.fori_loop(0, 30, lambda i, x: x - 0.5 * h(x), x))


SAMPLES: dict[str, Sample] = {
    "after": Sample(lambda x, t: apply("after", [x, t]), [rand(B, 2), rand(B, 3)], [0, 0]),
    "argmax": Sample(lambda x: (F.argmax(x, axis=-1), F.argmax(x)), [rand(B, 3, 4)], [0]),
    "argmin": Sample(lambda x: F.argmin(x, axis=0, keepdims=True), [rand(B, 3, 4)], [0]),
    "avg_pool": Sample(lambda x: F.avg_pool(x, 2, stride=1, pad=1), [rand(B, 2, 2, 4, 4)], [0], float32=True),
    "avg_pool_grad": Sample(_grad(lambda x, w: F.sum(F.avg_pool(x, 2) * w)), [rand(B, 2, 2, 4, 4), rand(B, 2, 2, 2, 2)],
                            [0, 0], float32=True),
    "batch_norm": Sample(lambda x, g, b: F.batch_norm(x, g, b, axis=1, return_stats=True),
                         [rand(B, 5, 3, 2), rand(B, 3), rand(B, 3)], [0, 0, 0]),
    "group_norm": Sample(lambda x, w, b: apply_n("group_norm", [x, w, b], groups=2, eps=1e-5),
                         [rand(B, 2, 4, 3, 2), rand(B, 4), rand(B, 4)], [0, 0, 0]),
    "softmax_cross_entropy": Sample(lambda x, t: F.softmax_cross_entropy(x, t, axis=1, reduce="none"),
                                    [rand(B, 2, 4, 3), ints(4, B, 2, 3)], [0, 0]),
    "cholesky": Sample(F.cholesky, [spd(B, 2, 3, 3)], [0]),
    "concat": Sample(lambda x, y: F.concat([x, y], axis=-1), [rand(B, 2, 3), rand(B, 2, 1)], [0, 0]),
    "conv": Sample(lambda x, w, b: F.conv(x, w, b, pad=1, groups=2),
                   [rand(B, 2, 4, 5, 5), rand(B, 6, 2, 3, 3), rand(B, 6)], [0, 0, 0], symbolic=False, float32=True),
    "conv_transpose": Sample(lambda x, w, b: F.conv_transpose(x, w, b, stride=2, output_padding=1),
                             [rand(B, 2, 2, 3, 3), rand(B, 2, 3, 3, 3), rand(B, 3)], [0, 0, 0], symbolic=False,
                             float32=True),
    "conv_weight_grad": Sample(_grad(lambda w, x, g: F.sum(F.conv(x, w, stride=2, pad=1, dilation=2, groups=2) * g)),
                               [rand(4, 2, 3, 3), rand(B, 2, 4, 5, 5), rand(B, 2, 4, 2, 2)], [None, 0, 0],
                               float32=True),
    "count": Sample(lambda x: apply("count", [x], axes=(0, 2)), [rand(B, 2, 3, 4)], [0]),
    "cumprod": Sample(lambda x: F.cumprod(x, axis=-1, reverse=True, exclusive=True), [rand(B, 3, 4)], [0]),
    "cumsum": Sample(lambda x: F.cumsum(x, axis=0), [rand(B, 3, 4)], [0]),
    "det": Sample(F.det, [spd(B, 2, 3, 3)], [0]),
    "einsum": Sample(lambda a, b: F.einsum("ij,jk->ik", a, b), [rand(B, 2, 3), rand(B, 3, 4)], [0, 0]),
    "expand": Sample(lambda x: F.broadcast_to(x, (2, 3, 4)), [rand(B, 3, 1)], [0]),
    "gather": Sample(lambda x, i: F.take(x, i, axis=1), [rand(B, 3, 6), ints(6, B, 2, 2)], [0, 0]),
    "gather_elements": Sample(lambda x, i: F.take_along_axis(x, i, axis=1), [rand(B, 3, 6), ints(6, B, 3, 2)], [0, 0]),
    "gemm": Sample(lambda a, b, c: apply("gemm", [a, b, c], trans_a=True, trans_b=False),
                   [rand(B, 4, 2), rand(B, 4, 3), rand(B, 3)], [0, 0, 0]),
    "inv": Sample(F.inv, [spd(B, 3, 3)], [0]),
    "eigh": Sample(F.eigh, [spd(B, 3, 3)], [0]),
    "svd": Sample(lambda a: F.svd(a, full_matrices=False), [rand(B, 4, 3)], [0]),
    "pinv": Sample(F.pinv, [rand(B, 2, 3)], [0]),
    "matrix_exp": Sample(F.matrix_exp, [rand(B, 3, 3)], [0]),
    "layer_norm": Sample(lambda x, g, b: F.layer_norm(x, g, b), [rand(B, 2, 4), rand(B, 4), rand(B, 4)], [0, 0, 0]),
    "log_softmax": Sample(lambda x: F.log_softmax(x, axis=0), [rand(B, 3, 4)], [0]),
    "mask_ranks": Sample(lambda x, m: F.masked_select(x, m, size=5, fill=-1.0), [rand(B, 3, 4), rand(B, 3, 4) < 0],
                         [0, 0]),
    "matmul": Sample(lambda a, b: a @ b, [rand(B, 2, 3), rand(B, 3, 4)], [0, 0]),
    "max_pool": Sample(lambda x: F.max_pool(x, 2, return_indices=True), [rand(B, 2, 2, 4, 4)], [0]),
    "pad": Sample(lambda x: F.pad(x, ((1, 0), (0, 2)), mode="reflect"), [rand(B, 3, 4)], [0]),
    "pool_gather": Sample(_grad(lambda x, w: F.sum(_grad(lambda x: F.sum(F.max_pool(x * w, 2) ** 2))(x) ** 2)),
                          [rand(B, 1, 2, 4, 4), rand(B, 1, 2, 4, 4)], [0, 0]),
    "pool_scatter": Sample(_grad(lambda x, w: F.sum(F.max_pool(x, 2, stride=1) * w)),
                           [rand(B, 1, 2, 4, 4), rand(B, 1, 2, 3, 3)], [0, 0]),
    "reduce_max": Sample(lambda x: F.max(x, axis=1), [rand(B, 3, 4)], [0]),
    "reduce_mean": Sample(lambda x: F.mean(x, axis=(0, 1), keepdims=True), [rand(B, 3, 4)], [0]),
    "reduce_min": Sample(lambda x: F.min(x, axis=0), [rand(B, 3, 4)], [0]),
    "reduce_prod": Sample(lambda x: F.prod(x, axis=-1), [rand(B, 3, 4)], [0]),
    "reduce_sum": Sample(lambda x: F.sum(x, axis=1), [rand(B, 3, 4)], [0]),
    "reshape": Sample(lambda x: F.reshape(x, (4, -1)), [rand(B, 2, 3, 2)], [0]),
    "resize": Sample(lambda x: F.interpolate(x, size=(5, 3), mode="bilinear"), [rand(B, 2, 1, 3, 4)], [0]),
    "scan": Sample(_rnn, [rand(B, 3, 3) * 0.5, rand(B, 4, 3), rand(B, 3)], [0, 0, 0]),
    "scatter_add": Sample(lambda x, i, u: F.scatter_add(x, i, u, axis=1),
                          [rand(B, 2, 5), ints(5, B, 3), rand(B, 2, 3)], [0, 0, 0]),
    "scatter_add_elements": Sample(lambda x, i, u: F.scatter_add_along_axis(x, i, u, axis=1),
                                   [rand(B, 3, 5), ints(5, B, 3, 2), rand(B, 3, 2)], [0, 0, 0]),
    "scatter_reduce_elements": Sample(lambda x, i, u: F.scatter_reduce(x, 1, i, u, "amax"),
                                      [rand(B, 3, 4), ints(4, B, 3, 4), rand(B, 3, 4)], [0, 0, 0]),
    "slice": Sample(lambda x: x[1:, ::-2], [rand(B, 3, 5)], [0]),
    "slice_scatter": Sample(_grad(lambda x, w: F.sum(x[1:, ::2] * w)), [rand(B, 3, 5), rand(B, 2, 3)], [0, 0]),
    "slogdet": Sample(F.slogdet, [spd(B, 2, 3, 3)], [0]),
    "softmax": Sample(lambda x: F.softmax(x, axis=-1), [rand(B, 3, 4)], [0]),
    "solve": Sample(F.solve, [spd(B, 3, 3), rand(B, 3, 2)], [0, 0]),
    "topk": Sample(lambda x: F.topk(x, 2, axis=0), [rand(B, 3, 4)], [0]),
    "transpose": Sample(lambda x: F.transpose(x, (2, 0, 1)), [rand(B, 2, 3, 4)], [0]),
    "vector_norm": Sample(lambda x: F.vector_norm(x, 3, axis=-1), [rand(B, 3, 4)], [0]),
    # per-example keys (a shared key with batched values draws per example: tests/ops/test_random.py)
    "dropout_mask": Sample(lambda k: F.dropout(np.linspace(1.0, 2.0, 12).reshape(3, 4), 0.4, training=True, key=k),
                           [ints(1000, B, 2)], [0]),
    "keyed_uniform": Sample(lambda k: keyed_uniform(np.zeros((3, 4)), np.float64, key=k), [ints(1000, B, 2)], [0]),
    "cond": Sample(_branch, [rand(B, 3), rand(B, 3)], [0, 0]),
    "root": Sample(_root, [rand(B, 3)], [0]),
    "while": Sample(_halve, [rand(B, 3) * np.array([[1.0], [10.0], [100.0]]), np.array([1.0, 5.0, 0.1])], [0, 0]),
}
