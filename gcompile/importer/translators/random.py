"""Random draws: Bernoulli, RandomUniform(Like), RandomNormal(Like) and Dropout in training mode.

ONNX leaves the generator to each runtime, so no two runtimes (nor two runs of one) draw the same
values, and a model's `seed` attribute fixes only one runtime's stream. An imported draw is
instead a keyed one (ops/random.py): a pure function of the innermost gc.random_key context's
key, the draw's stream and the position, the same on every runtime and on resume. A training
step opens such a context with its step counter; elsewhere the caller opens one
(`with gc.random_key(step): model(x)`), and a draw outside any is refused rather than given a
fixed value. A node's `seed` names its stream (two nodes of one seed draw alike, as in ONNX);
without one, streams are numbered in the order the draws are traced.

Normal draws come from two uniform draws by the Box-Muller transform, in float32 (float64
outputs are float32 draws widened). Draws pass no gradient: Bernoulli's probabilities, like
torch.bernoulli's, get none.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ops import random
from ..table import np_dtype, onnx_op, require_float


def _stream(n) -> int | None:
    """The node's seed attribute as a stream number (its float32 bits), or None."""
    seed = n.attr("seed")
    return None if seed is None else int(np.asarray(seed, np.float32).view(np.int32))


def _keyed(n, drawn):
    """`drawn` (a keyed draw, None outside a gc.random_key context), or the refusal saying how to give a key."""
    if drawn is None:
        raise n.unsupported("a random draw in an imported model takes its key from gc.random_key: call the "
                            "model inside `with gc.random_key(step):` (a training step opens one with its step "
                            "counter), so that its values are the same on every runtime and on resume")
    return drawn


def _uniform(n, like, offset: int = 0):
    """Float32s uniform in [0, 1) of `like`'s shape, from the key of the innermost gc.random_key context;
    `offset` names another stream of the same node (the stream after its seed's, or the next in trace order)."""
    seed = _stream(n)
    return _keyed(n, random.keyed_uniform(like, np.float32, seed=None if seed is None else seed + offset))


def _dtype(n, default) -> np.dtype:
    elem = n.attr("dtype")
    return np.dtype(default) if elem is None else np_dtype(elem, f"the dtype of {n.describe()}")


def _shaped(n) -> np.ndarray:
    """A placeholder of the node's `shape` attribute (its values are never read)."""
    return np.zeros(tuple(int(d) for d in n.attr("shape")), np.float32)


def _scaled_uniform(n, like, dtype):
    low, high = float(n.attr("low", 0.0)), float(n.attr("high", 1.0))
    return F.cast(_uniform(n, like) * np.float32(high - low) + np.float32(low), dtype)


def _normal(n, like, dtype):
    """mean + scale · sqrt(-2 ln(1 - u1)) · cos(2π u2): 1 - u1 is in (0, 1], so the log is finite."""
    u1, u2 = _uniform(n, like), _uniform(n, like, offset=1)
    radius = F.sqrt(np.float32(-2.0) * F.log(np.float32(1.0) - u1))
    z = radius * F.cos(np.float32(2 * np.pi) * u2)
    return F.cast(z * np.float32(n.attr("scale", 1.0)) + np.float32(n.attr("mean", 0.0)), dtype)


@onnx_op("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", draws=True)
def _random(n, x=None):
    """The draw of the node's kind, shaped as its `shape` attribute or, for the *Like ops, as x (whose
    dtype is then the default dtype)."""
    like, default = (_shaped(n), np.float32) if x is None else (x, x.dtype)
    draw = _normal if n.op_type.startswith("RandomNormal") else _scaled_uniform
    return draw(n, like, _dtype(n, default))


@onnx_op("Bernoulli", draws=True)
def _bernoulli(n, p):
    p = F.stop_gradient(require_float(n, p, "probability"))
    return F.cast(F.less(_uniform(n, p), F.cast(p, np.float32)), _dtype(n, p.dtype))


@onnx_op("Dropout", draws=True)
def _dropout(n, x, ratio=None, training=None):
    """In training mode a keyed mask, scaled as F.dropout scales it; in inference mode, or with ratio 0,
    the identity."""
    training = training is not None and bool(n.known(training, "training_mode").reshape(-1)[0])
    rate = 0.5 if ratio is None else float(n.known(ratio, "ratio").reshape(-1)[0])
    if not training or rate == 0.0:
        return F.identity(x), (F.full(x.shape, 1, np.bool_) if n.wants(1) else None)
    require_float(n, x)
    if rate == 1.0:
        return x * 0, F.full(x.shape, 0, np.bool_)
    keep = _keyed(n, random.keyed_mask(x, rate, None if n.attr("seed") is None else int(n.attr("seed")), None))
    return x * (F.cast(keep, x.dtype) * np.asarray(1 / (1 - rate), x.dtype)), keep
