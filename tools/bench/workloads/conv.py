"""Convolutional classifiers: W2 (a small CNN with max pooling, tuned), W7 (a residual CNN with
training-mode batch norm), W20 (W7's network on a late stage's features), W14 (MobileNetV2-like:
depthwise convolutions, stride 1 and 2), W18 (a ResNet downsampling block). Each network is
written once, in any system's ops; the gcompile, PyTorch and JAX steps pass their own."""
from __future__ import annotations

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .common import (
    RNG,
    Workload,
    config_values,
    jax_bn,
    jax_ce,
    jax_conv,
    jax_grad_step,
    param,
    torch_bn,
    torch_classifier,
    torch_params,
    torch_tensor,
)


def _gc_bn(h, gamma, beta):
    return F.batch_norm(h, gamma, beta, training=True)


def _gc_pooled(h):
    return F.mean(h, (2, 3))


def _pooled(h):      # PyTorch's and JAX's global average pooling
    return h.mean((2, 3))


def _gc_classifier_step(logits):
    def step(x, t, *ps):
        value = F.softmax_cross_entropy(logits(x, ps), t)
        return value, gc.grad(value, list(ps))
    return step


def _jax_classifier(args, logits):
    x, t, ps = args[0], args[1], list(args[2:])
    return jax_grad_step(lambda ps, x, t: jax_ce(logits(x, ps), t), ps, x, t)


# -- W2: 2 x (conv 3x3 pad 1, relu, max pool 2), 3 -> 32 -> 64, a linear classifier; batch 32 x 3 x 32 x 32 ---
def w2_setup():
    ps = [param(32, 3, 3, 3, scale=0.2), np.zeros(32, np.float32), param(64, 32, 3, 3, scale=0.06),
          np.zeros(64, np.float32), param(64 * 8 * 8, 10), np.zeros(10, np.float32)]
    x = RNG.standard_normal((32, 3, 32, 32)).astype(np.float32)
    t = RNG.integers(0, 10, 32).astype(np.int64)

    def step(x, t, w1, b1, w2, b2, w3, b3):
        h = F.max_pool(F.relu(F.conv(x, w1, b1, pad=1)), 2)
        h = F.max_pool(F.relu(F.conv(h, w2, b2, pad=1)), 2)
        value = F.softmax_cross_entropy(F.linear(F.flatten(h), w3, b3), t)
        return value, gc.grad(value, [w1, b1, w2, b2, w3, b3])

    return step, None, [x, t, *ps]


def w2_torch(args):
    import torch
    nnf = torch.nn.functional
    x, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])

    def run():
        h = nnf.max_pool2d(torch.relu(nnf.conv2d(x, ps[0], ps[1], padding=1)), 2)
        h = nnf.max_pool2d(torch.relu(nnf.conv2d(h, ps[2], ps[3], padding=1)), 2)
        return torch.autograd.grad(nnf.cross_entropy(h.flatten(1) @ ps[4] + ps[5], t), ps)
    return run


def w2_jax(args):
    import jax
    import jax.numpy as jnp

    def loss(ps, x, t):
        def conv(h, w, b):
            return jax_conv(h, w, 1, 1) + b[None, :, None, None]

        def pool(h):
            return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        h = pool(jax.nn.relu(conv(x, ps[0], ps[1])))
        h = pool(jax.nn.relu(conv(h, ps[2], ps[3])))
        return jax_ce(h.reshape(h.shape[0], -1) @ ps[4] + ps[5], t)
    return jax_grad_step(loss, list(args[2:]), args[0], args[1])


# -- W7, W20: a residual CNN with training-mode batch norm -------------------------------------------------
RESNET = dict(batch=32, inputs=3, channels=32, size=32, blocks=2, classes=10)
# A late ResNet stage (CIFAR's last, ImageNet's third and fourth): few positions, many channels.
RESNET_LATE = dict(batch=32, inputs=64, channels=128, size=8, blocks=2, classes=10)


def resnet(x, ps, conv, bn, relu, mean):
    """The W7 and W20 network: a stem conv-BN-relu, then a basic block per six parameters
    (conv-BN-relu-conv-BN + skip, relu), global average pooling, the classifier's two."""
    h = relu(bn(conv(x, ps[0]), ps[1], ps[2]))
    for k in range((len(ps) - 5) // 6):
        w1, g1, b1, w2, g2, b2 = ps[3 + 6 * k:9 + 6 * k]
        r = relu(bn(conv(h, w1), g1, b1))
        h = relu(bn(conv(r, w2), g2, b2) + h)
    return mean(h) @ ps[-2] + ps[-1]


def _resnet_setup(config: dict):
    b, inputs, c, size, blocks, classes = config_values(config, "batch", "inputs", "channels", "size", "blocks",
                                                        "classes")
    ps = [param(c, inputs, 3, 3, scale=0.2), np.ones(c, np.float32), np.zeros(c, np.float32)]
    for _ in range(blocks):
        for _ in range(2):
            ps += [param(c, c, 3, 3, scale=0.06), np.ones(c, np.float32), np.zeros(c, np.float32)]
    ps += [param(c, classes), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, inputs, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, b).astype(np.int64)
    step = _gc_classifier_step(lambda x, ps: resnet(x, ps, lambda h, w: F.conv(h, w, pad=1), _gc_bn, F.relu,
                                                    _gc_pooled))
    return step, None, [x, t, *ps]


def resnet_torch(args):
    import torch
    conv = lambda h, w: torch.nn.functional.conv2d(h, w, padding=1)  # noqa: E731
    return torch_classifier(args, lambda x, ps: resnet(x, ps, conv, torch_bn, torch.relu, _pooled))


def resnet_jax(args):
    import jax
    return _jax_classifier(args, lambda x, ps: resnet(x, ps, lambda h, w: jax_conv(h, w, 1, 1), jax_bn,
                                                      jax.nn.relu, _pooled))


# -- W14: MobileNetV2-like ----------------------------------------------------------------------------------
MOBILE = dict(batch=16, size=64, classes=10)
# (input channels, output channels, kernel, stride, groups) per convolution of W14; each is followed
# by training-mode batch norm and relu6, except the projections (indices 2, 5, 8); 8 adds 5's output.
MOBILE_LAYERS = [(3, 32, 3, 2, 1), (32, 32, 3, 1, 32), (32, 16, 1, 1, 1), (16, 96, 1, 1, 1), (96, 96, 3, 2, 96),
                 (96, 24, 1, 1, 1), (24, 144, 1, 1, 1), (144, 144, 3, 1, 144), (144, 24, 1, 1, 1)]


def mobilenet(x, ps, conv, bn, relu6, mean):
    """The W14 network: conv(h, w, stride, pad, groups)."""
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
    """A strided stem, inverted residual blocks of 1x1 expansions, 3x3 depthwise convolutions
    (stride 1 and 2) and 1x1 projections, training-mode batch norm, relu6."""
    b, size, classes = config_values(MOBILE, "batch", "size", "classes")
    ps = []
    for ci, co, k, _, groups in MOBILE_LAYERS:
        ps += [param(co, ci // groups, k, k, scale=0.3), np.ones(co, np.float32), np.zeros(co, np.float32)]
    ps += [param(MOBILE_LAYERS[-1][1], classes), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, 3, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, b).astype(np.int64)
    step = _gc_classifier_step(lambda x, ps: mobilenet(
        x, ps, lambda h, w, s, p, g: F.conv(h, w, stride=s, pad=p, groups=g), _gc_bn,
        lambda h: F.clip(h, 0.0, 6.0), _gc_pooled))
    return step, None, [x, t, *ps]


def w14_torch(args):
    import torch
    conv = lambda h, w, s, p, g: torch.nn.functional.conv2d(h, w, stride=s, padding=p, groups=g)  # noqa: E731
    return torch_classifier(args, lambda x, ps: mobilenet(x, ps, conv, torch_bn, lambda h: torch.clamp(h, 0.0, 6.0),
                                                          _pooled))


def w14_jax(args):
    import jax.numpy as jnp
    return _jax_classifier(args, lambda x, ps: mobilenet(x, ps, jax_conv, jax_bn, lambda h: jnp.clip(h, 0.0, 6.0),
                                                         _pooled))


# -- W18: a ResNet downsampling block -----------------------------------------------------------------------
DOWNSAMPLE = dict(batch=32, channels=32, size=32, classes=10)


def downsample(x, ps, conv, bn, relu, mean):
    """The W18 network: a ResNet stage's first block, which halves the size and doubles the
    channels (3x3 stride-2 conv-BN-relu, 3x3 conv-BN; a 1x1 stride-2 conv-BN shortcut; relu of the
    sum), then global average pooling and a linear classifier. conv(h, w, stride, pad)."""
    h = relu(bn(conv(x, ps[0], 2, 1), ps[1], ps[2]))
    h = relu(bn(conv(h, ps[3], 1, 1), ps[4], ps[5]) + bn(conv(x, ps[6], 2, 0), ps[7], ps[8]))
    return mean(h) @ ps[9] + ps[10]


def w18_setup():
    """Strided convolutions and their weight gradients, training-mode batch norm, a projected shortcut."""
    b, c, size, classes = config_values(DOWNSAMPLE, "batch", "channels", "size", "classes")
    ones, zeros = np.ones(2 * c, np.float32), np.zeros(2 * c, np.float32)
    ps = [param(2 * c, c, 3, 3, scale=0.06), ones, zeros, param(2 * c, 2 * c, 3, 3, scale=0.04), ones, zeros,
          param(2 * c, c, 1, 1, scale=0.1), ones, zeros, param(2 * c, classes), np.zeros(classes, np.float32)]
    x = RNG.standard_normal((b, c, size, size)).astype(np.float32)
    t = RNG.integers(0, classes, b).astype(np.int64)
    step = _gc_classifier_step(lambda x, ps: downsample(x, ps, lambda h, w, s, p: F.conv(h, w, stride=s, pad=p),
                                                        _gc_bn, F.relu, _gc_pooled))
    return step, None, [x, t, *ps]


def w18_torch(args):
    import torch
    conv = lambda h, w, s, p: torch.nn.functional.conv2d(h, w, stride=s, padding=p)  # noqa: E731
    return torch_classifier(args, lambda x, ps: downsample(x, ps, conv, torch_bn, torch.relu, _pooled))


def w18_jax(args):
    import jax
    return _jax_classifier(args, lambda x, ps: downsample(x, ps, jax_conv, jax_bn, jax.nn.relu, _pooled))


WORKLOADS = [
    Workload("W2", "cnn-step", w2_setup, w2_torch, w2_jax),
    Workload("W7", "resnet-bn-step", lambda: _resnet_setup(RESNET), resnet_torch, resnet_jax, RESNET,
             # a CIFAR ResNet's first stage (16 channels)
             dict(batch=64, inputs=3, channels=16, size=32, blocks=2, classes=10)),
    Workload("W14", "mobilenet-step", w14_setup, w14_torch, w14_jax, MOBILE, dict(batch=8, size=112, classes=10)),
    Workload("W18", "resnet-downsample-step", w18_setup, w18_torch, w18_jax, DOWNSAMPLE,
             dict(batch=16, channels=64, size=56, classes=10)),
    Workload("W20", "resnet-late-stage-step", lambda: _resnet_setup(RESNET_LATE), resnet_torch, resnet_jax,
             RESNET_LATE,
             # an ImageNet ResNet's third stage (14 x 14 x 256)
             dict(batch=8, inputs=128, channels=256, size=14, blocks=1, classes=10)),
]
