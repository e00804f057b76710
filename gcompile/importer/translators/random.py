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


def _uniform(n, like, dtype=np.float32):
    """Uniform floats in [0, 1) of `like`'s shape, from the key of the innermost gc.random_key context."""
    u = random.keyed_uniform(like, dtype, seed=_stream(n))
    if u is None:
        raise n.unsupported("a random draw in an imported model takes its key from gc.random_key: call the "
                            "model inside `with gc.random_key(step):` (a training step opens one with its step "
                            "counter), so that its values are the same on every runtime and on resume")
    return u


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
    seed = _stream(n)
    u1 = _uniform(n, like)
    u2 = _uniform(n, like) if seed is None else random.keyed_uniform(like, np.float32, seed=seed + 1)
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
