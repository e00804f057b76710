"""What every workload family shares: the Workload record, the random parameters, the MLP, and the
small helpers each reference system's versions use (imported from the system only when called)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# One generator for every setup, as the benchmark always had: a workload's values depend on the
# setups called before it, its shapes and computation never do.
RNG = np.random.default_rng(0)


@dataclass(frozen=True)
class Workload:
    """One benchmark workload: `setup()` returns (gcompile step, its loss or None, example args);
    `torch(args)` and `jax(args)` return a zero-argument call of the same step in that system on
    the same arrays (None where the system has no twin). `config` is the shape dictionary the
    setup and the twins read when called; `other_shape` the second, untuned shape that
    `--other-shapes` puts in it."""
    key: str
    label: str
    setup: Callable[[], tuple]
    torch: Callable[[list], Callable[[], Any]] | None = None
    jax: Callable[[list], Callable[[], Any]] | None = None
    config: dict | None = None
    other_shape: dict | None = None


def param(*shape, scale=None):
    scale = scale if scale is not None else 1 / np.sqrt(shape[0])
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def mlp_params(sizes):
    ps = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        ps += [param(a, b), np.zeros(b, np.float32)]
    return ps


def mlp(x, ps, act):
    """Dense layers with `act` between them, in any system's ops."""
    h = x
    for i in range(0, len(ps), 2):
        h = h @ ps[i] + ps[i + 1]
        if i + 2 < len(ps):
            h = act(h)
    return h


def config_values(config: dict, *keys):
    return tuple(config[k] for k in keys)


# -- PyTorch helpers ----------------------------------------------------------------------------------------
def torch_tensor(a):
    import torch
    return torch.tensor(a)


def torch_params(arrays):
    return [torch_tensor(a).requires_grad_(True) for a in arrays]


def torch_bn(h, g, b):
    """Training-mode batch norm (the CNN classifiers)."""
    import torch
    return torch.nn.functional.batch_norm(h, None, None, g, b, training=True)


def torch_classifier(args, logits):
    """A classification step: images args[0], labels args[1], parameters after."""
    import torch
    x, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])
    return lambda: torch.autograd.grad(torch.nn.functional.cross_entropy(logits(x, ps), t), ps)


# -- JAX helpers --------------------------------------------------------------------------------------------
def jax_block(f, *args):
    """A call of jitted `f` that waits for its result."""
    import jax
    return lambda: jax.block_until_ready(f(*args))


def jax_grad_step(loss, *args):
    """The jitted gradient of `loss` w.r.t. its first argument, as a blocking call on args."""
    import jax
    return jax_block(jax.jit(jax.grad(loss)), *args)


def jax_ce(z, t):
    import jax
    import jax.numpy as jnp
    return jnp.mean(jax.nn.logsumexp(z, axis=1) - jnp.take_along_axis(z, t[:, None], 1)[:, 0])


def jax_ln(h, g, be):
    """Layer norm over the last axis."""
    import jax.numpy as jnp
    m = h.mean(-1, keepdims=True)
    v = ((h - m) ** 2).mean(-1, keepdims=True)
    return (h - m) / jnp.sqrt(v + 1e-5) * g + be


def jax_bn(h, g, b):
    """Training-mode batch norm over the channels of NCHW."""
    import jax.numpy as jnp
    m = h.mean((0, 2, 3), keepdims=True)
    v = ((h - m) ** 2).mean((0, 2, 3), keepdims=True)
    return (h - m) / jnp.sqrt(v + 1e-5) * g[None, :, None, None] + b[None, :, None, None]


def jax_conv(h, w, stride=1, pad=0, groups=1):
    import jax
    return jax.lax.conv_general_dilated(h, w, (stride, stride), ((pad, pad), (pad, pad)),
                                        feature_group_count=groups)


def jax_avg_pool2(h):
    import jax
    return jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4
