"""Dense networks and their higher orders: W1 (an MLP classifier's step), W1f (its forward), W4
(WGAN-GP: a gradient penalty, second order), W5 (a PINN: u_t - u_xx, third order in the
parameters' gradient), W6 (a Hessian-vector product of W1's loss). The six the project tuned."""
from __future__ import annotations

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .common import RNG, Workload, jax_block, jax_ce, jax_grad_step, mlp, mlp_params, param, torch_params, torch_tensor

W1_SIZES, W1_BATCH, W1_CLASSES = [784, 1024, 1024, 10], 256, 10
W4_SIZES, W4_BATCH = [128, 512, 512, 1], 256
W5_WIDTH, W5_POINTS = 64, 1024


# -- W1, W1f: an MLP classifier 784-1024-1024-10, batch 256 ---------------------------------------------
def w1_setup():
    ps = mlp_params(W1_SIZES)
    x = RNG.standard_normal((W1_BATCH, W1_SIZES[0])).astype(np.float32)
    t = RNG.integers(0, W1_CLASSES, W1_BATCH).astype(np.int64)

    def loss(x, t, *ps):
        return F.softmax_cross_entropy(mlp(x, ps, F.relu), t)

    def step(x, t, *ps):
        value = loss(x, t, *ps)
        return value, gc.grad(value, list(ps))

    return step, loss, [x, t, *ps]


def w1_torch(args):
    import torch
    x, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:])
    return lambda: torch.autograd.grad(torch.nn.functional.cross_entropy(mlp(x, ps, torch.relu), t), ps)


def _w1_jax_loss(ps, x, t):
    import jax
    return jax_ce(mlp(x, ps, jax.nn.relu), t)


def w1_jax(args):
    return jax_grad_step(_w1_jax_loss, list(args[2:]), args[0], args[1])


def w1_forward_setup():
    _, loss, args = w1_setup()
    return loss, None, args


def w1_forward_torch(args):
    import torch
    x, t, ps = torch_tensor(args[0]), torch_tensor(args[1]), [torch_tensor(a) for a in args[2:]]
    return lambda: torch.nn.functional.cross_entropy(mlp(x, ps, torch.relu), t)


def w1_forward_jax(args):
    import jax
    return jax_block(jax.jit(_w1_jax_loss), list(args[2:]), args[0], args[1])


# -- W4: WGAN-GP, a critic 128-512-512-1, batch 256 -------------------------------------------------------
def w4_setup():
    ps = mlp_params(W4_SIZES)
    x = RNG.standard_normal((W4_BATCH, W4_SIZES[0])).astype(np.float32)

    def step(x, *ps):
        d = mlp(x, ps, F.relu)
        gx, = gc.grad(F.sum(d), [x])
        pen = F.mean((F.sqrt(F.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
        return pen, gc.grad(pen, list(ps))

    return step, None, [x, *ps]


def w4_torch(args):
    import torch
    ps = torch_params(args[1:])

    def run():
        x = torch_tensor(args[0]).requires_grad_(True)
        gx, = torch.autograd.grad(mlp(x, ps, torch.relu).sum(), [x], create_graph=True)
        pen = ((gx.pow(2).sum(1) + 1e-12).sqrt() - 1).pow(2).mean()
        return torch.autograd.grad(pen, ps, allow_unused=True)
    return run


def w4_jax(args):
    import jax
    import jax.numpy as jnp

    def pen(ps, x):
        gx = jax.grad(lambda x: jnp.sum(mlp(x, ps, jax.nn.relu)))(x)
        return jnp.mean((jnp.sqrt(jnp.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
    return jax_grad_step(pen, list(args[1:]), args[0])


# -- W5: a PINN, u(x, t) a tanh MLP 2-64-64-64-1 on 1,024 points --------------------------------------------
def w5_setup():
    ps = [param(1, W5_WIDTH), param(1, W5_WIDTH), np.zeros(W5_WIDTH, np.float32)] \
        + mlp_params([W5_WIDTH, W5_WIDTH, W5_WIDTH, 1])
    x = RNG.uniform(-1, 1, (W5_POINTS, 1)).astype(np.float32)
    t = RNG.uniform(0, 1, (W5_POINTS, 1)).astype(np.float32)

    def step(x, t, wx, wt, b0, *ps):
        u = mlp(F.tanh(x @ wx + t @ wt + b0), ps, F.tanh)
        u_x, u_t = gc.grad(F.sum(u), [x, t])
        u_xx, = gc.grad(F.sum(u_x), [x])
        value = F.mean((u_t - u_xx) ** 2)
        return value, gc.grad(value, [wx, wt, b0, *ps])

    return step, None, [x, t, *ps]


def w5_torch(args):
    import torch
    ps = torch_params(args[2:])

    def run():
        x, t = torch_tensor(args[0]).requires_grad_(True), torch_tensor(args[1]).requires_grad_(True)
        u = mlp(torch.tanh(x @ ps[0] + t @ ps[1] + ps[2]), ps[3:], torch.tanh)
        u_x, u_t = torch.autograd.grad(u.sum(), [x, t], create_graph=True)
        u_xx, = torch.autograd.grad(u_x.sum(), [x], create_graph=True)
        return torch.autograd.grad(((u_t - u_xx) ** 2).mean(), ps, allow_unused=True)
    return run


def w5_jax(args):
    import jax
    import jax.numpy as jnp

    def loss(ps, x, t):
        def u(x, t):
            return mlp(jnp.tanh(x @ ps[0] + t @ ps[1] + ps[2]), ps[3:], jnp.tanh)
        u_x = jax.grad(lambda x: jnp.sum(u(x, t)))
        u_t = jax.grad(lambda t: jnp.sum(u(x, t)))(t)
        u_xx = jax.grad(lambda x: jnp.sum(u_x(x)))(x)
        return jnp.mean((u_t - u_xx) ** 2)
    return jax_grad_step(loss, list(args[2:]), args[0], args[1])


# -- W6: a Hessian-vector product of W1's loss w.r.t. its parameters ----------------------------------------
def w6_setup():
    _, loss, args = w1_setup()
    vs = [RNG.standard_normal(a.shape).astype(np.float32) for a in args[2:]]

    def hvp(x, t, *rest):
        ps, vs_ = rest[:6], rest[6:]
        grads = gc.grad(loss(x, t, *ps), list(ps))
        return gc.grad(F.add_n([F.sum(g * v) for g, v in zip(grads, vs_)]), list(ps))

    return hvp, None, args + vs


def w6_torch(args):
    import torch
    x, t, ps, vs = torch_tensor(args[0]), torch_tensor(args[1]), torch_params(args[2:8]), \
        [torch_tensor(a) for a in args[8:]]

    def run():
        loss = torch.nn.functional.cross_entropy(mlp(x, ps, torch.relu), t)
        gs = torch.autograd.grad(loss, ps, create_graph=True)
        return torch.autograd.grad(sum((g * v).sum() for g, v in zip(gs, vs)), ps)
    return run


def w6_jax(args):
    import jax

    def hvp(ps, vs, x, t):
        return jax.jvp(lambda p: jax.grad(_w1_jax_loss)(p, x, t), (ps,), (vs,))[1]
    return jax_block(jax.jit(hvp), list(args[2:8]), list(args[8:]), args[0], args[1])


WORKLOADS = [
    Workload("W1", "mlp-step", w1_setup, w1_torch, w1_jax),
    Workload("W4", "wgan-gp", w4_setup, w4_torch, w4_jax),
    Workload("W5", "pinn", w5_setup, w5_torch, w5_jax),
    Workload("W6", "mlp-hvp", w6_setup, w6_torch, w6_jax),
    Workload("W1f", "mlp-forward", w1_forward_setup, w1_forward_torch, w1_forward_jax),
]
