"""Per-pixel outputs: W11 (a segmentation step: softmax over channels, bilinear upsampling, a skip
joined on channels), W17 (a small U-Net of the diffusion kind: group norm and SiLU)."""
from __future__ import annotations

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .common import (
    RNG,
    Workload,
    config_values,
    jax_avg_pool2,
    jax_conv,
    jax_grad_step,
    param,
    torch_params,
    torch_tensor,
)

# -- W11: segmentation ------------------------------------------------------------------------------------
SEGMENTATION = dict(batch=8, size=128, classes=4)


def w11_setup():
    """Conv, average pooling, a second conv, bilinear upsampling, the skip joined on channels,
    per-pixel classes by a 1x1 conv, cross-entropy over the channel axis."""
    b, size, classes = config_values(SEGMENTATION, "batch", "size", "classes")
    ps = [param(16, 3, 3, 3, scale=0.3), np.zeros(16, np.float32), param(32, 16, 3, 3, scale=0.1),
          np.zeros(32, np.float32), param(classes, 48, 1, 1, scale=0.1), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, 3, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, (b, size, size)).astype(np.int64)

    def step(x, t, *ps):
        h1 = F.relu(F.conv(x, ps[0], ps[1], pad=1))
        h2 = F.relu(F.conv(F.avg_pool(h1, 2), ps[2], ps[3], pad=1))
        up = F.interpolate(h2, scale_factor=2, mode="bilinear")
        value = F.softmax_cross_entropy(F.conv(F.concat([h1, up], 1), ps[4], ps[5]), t, axis=1)
        return value, gc.grad(value, list(ps))

    return step, None, [x, t, *ps]


def w11_torch(args):
    import torch
    nnf = torch.nn.functional
    x, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])

    def run():
        h1 = torch.relu(nnf.conv2d(x, ps[0], ps[1], padding=1))
        h2 = torch.relu(nnf.conv2d(nnf.avg_pool2d(h1, 2), ps[2], ps[3], padding=1))
        up = nnf.interpolate(h2, scale_factor=2, mode="bilinear", align_corners=False)
        logits = nnf.conv2d(torch.cat([h1, up], 1), ps[4], ps[5])
        return torch.autograd.grad(nnf.cross_entropy(logits, t), ps)
    return run


def w11_jax(args):
    import jax
    import jax.numpy as jnp

    def conv(h, w, b, pad):
        return jax_conv(h, w, 1, pad) + b[None, :, None, None]

    def loss(ps, x, t):
        h1 = jax.nn.relu(conv(x, ps[0], ps[1], 1))
        h2 = jax.nn.relu(conv(jax_avg_pool2(h1), ps[2], ps[3], 1))
        up = jax.image.resize(h2, h2.shape[:2] + h1.shape[2:], "bilinear")
        logp = jax.nn.log_softmax(conv(jnp.concatenate([h1, up], 1), ps[4], ps[5], 0), axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, t[:, None], 1))
    return jax_grad_step(loss, list(args[2:]), args[0], args[1])


# -- W17: a group-norm U-Net --------------------------------------------------------------------------------
DIFFUSION = dict(batch=8, size=64, channels=32, groups=8)


def w17_setup():
    """Convolutions with group norm and SiLU, average pooling down, bilinear upsampling, the skip
    joined on channels, a 1x1 read-out, MSE."""
    b, size, c, groups = config_values(DIFFUSION, "batch", "size", "channels", "groups")
    ps = [param(c, 3, 3, 3, scale=0.2), np.ones(c, np.float32), np.zeros(c, np.float32),
          param(2 * c, c, 3, 3), np.ones(2 * c, np.float32), np.zeros(2 * c, np.float32),
          param(c, 3 * c, 3, 3), np.ones(c, np.float32), np.zeros(c, np.float32), param(3, c, 1, 1)]
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


def w17_torch(args):
    import torch
    nnf, groups = torch.nn.functional, DIFFUSION["groups"]
    x, y, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])

    def block(h, w, g, be):
        return nnf.silu(nnf.group_norm(nnf.conv2d(h, w, padding=1), groups, g, be))

    def run():
        h1 = block(x, *ps[0:3])
        h2 = block(nnf.avg_pool2d(h1, 2), *ps[3:6])
        up = nnf.interpolate(h2, scale_factor=2, mode="bilinear", align_corners=False)
        out = nnf.conv2d(block(torch.cat([up, h1], 1), *ps[6:9]), ps[9])
        return torch.autograd.grad(nnf.mse_loss(out, y), ps)
    return run


def w17_jax(args):
    import jax
    import jax.numpy as jnp
    groups = DIFFUSION["groups"]

    def gn(h, g, be):
        n = h.shape[0]
        grouped = h.reshape(n, groups, -1)
        m = grouped.mean(-1, keepdims=True)
        v = ((grouped - m) ** 2).mean(-1, keepdims=True)
        h = ((grouped - m) / jnp.sqrt(v + 1e-5)).reshape(h.shape)
        return h * g[None, :, None, None] + be[None, :, None, None]

    def unit(h, w, g, be):
        return jax.nn.silu(gn(jax_conv(h, w, 1, 1), g, be))

    def loss(ps, x, y):
        h1 = unit(x, *ps[0:3])
        h2 = unit(jax_avg_pool2(h1), *ps[3:6])
        up = jax.image.resize(h2, h2.shape[:2] + h1.shape[2:], "bilinear")
        return jnp.mean((jax_conv(unit(jnp.concatenate([up, h1], 1), *ps[6:9]), ps[9], 1, 0) - y) ** 2)
    return jax_grad_step(loss, list(args[2:]), args[0], args[1])


WORKLOADS = [
    Workload("W11", "segmentation-step", w11_setup, w11_torch, w11_jax, SEGMENTATION),
    Workload("W17", "groupnorm-unet-step", w17_setup, w17_torch, w17_jax, DIFFUSION,
             dict(batch=4, size=96, channels=32, groups=8)),
]
