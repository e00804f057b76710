"""Machine-learned potentials, second order through smooth activations: W9 (force matching with a
SiLU MLP), W13 (a pair potential: a softplus MLP of Gaussian features of every pairwise distance).
Each loss is on energies and forces = -dE/dx, its gradient taken w.r.t. the parameters."""
from __future__ import annotations

import numpy as np

import gcompile as gc
import gcompile.functions as F

from .common import RNG, Workload, config_values, jax_grad_step, mlp, mlp_params, param, torch_params, torch_tensor

# -- W9: force matching ---------------------------------------------------------------------------------------
FORCES = dict(batch=512, features=24, width=128)


def w9_setup():
    batch, features, width = config_values(FORCES, "batch", "features", "width")
    ps = mlp_params([features, width, width, 1])
    x = RNG.standard_normal((batch, features)).astype(np.float32)
    e_ref = RNG.standard_normal((batch, 1)).astype(np.float32)
    f_ref = RNG.standard_normal((batch, features)).astype(np.float32)

    def step(x, e_ref, f_ref, *ps):
        energy = mlp(x, ps, F.silu)
        gx, = gc.grad(F.sum(energy), [x])
        value = F.mse(energy, e_ref) + F.mse(-gx, f_ref)
        return value, gc.grad(value, list(ps))

    return step, None, [x, e_ref, f_ref, *ps]


def w9_torch(args):
    import torch
    e_ref, f_ref, ps = torch_tensor(args[1]), torch_tensor(args[2]), torch_params(args[3:])

    def run():
        x = torch_tensor(args[0]).requires_grad_(True)
        energy = mlp(x, ps, torch.nn.functional.silu)
        gx, = torch.autograd.grad(energy.sum(), [x], create_graph=True)
        loss = ((energy - e_ref) ** 2).mean() + ((-gx - f_ref) ** 2).mean()
        return torch.autograd.grad(loss, ps)
    return run


def w9_jax(args):
    import jax
    import jax.numpy as jnp

    def loss(ps, x, e_ref, f_ref):
        def energy(x):
            return mlp(x, ps, jax.nn.silu)
        gx = jax.grad(lambda x: jnp.sum(energy(x)))(x)
        return jnp.mean((energy(x) - e_ref) ** 2) + jnp.mean((-gx - f_ref) ** 2)
    return jax_grad_step(loss, list(args[3:]), args[0], args[1], args[2])


# -- W13: a pair potential --------------------------------------------------------------------------------
PAIRS = dict(batch=8, atoms=64, basis=16, width=32)


def pair_energy(r, ps, centers, softplus, np_like):
    """The energy of each configuration (B, atoms, 3); np_like is the system's numpy."""
    d = np_like.sqrt(np_like.sum((r[:, :, None, :] - r[:, None, :, :]) ** 2, -1) + 1e-6)
    h = softplus(np_like.exp(-(d[..., None] - centers) ** 2) @ ps[0] + ps[1]) @ ps[2] + ps[3]
    return np_like.sum(h, (1, 2, 3))


def pair_centers():
    return np.linspace(0.5, 5, PAIRS["basis"]).astype(np.float32)


def w13_setup():
    b, atoms, basis, width = config_values(PAIRS, "batch", "atoms", "basis", "width")
    ps = [param(basis, width, scale=0.3), np.zeros(width, np.float32), param(width, 1, scale=0.3),
          np.zeros(1, np.float32)]
    r = (RNG.standard_normal((b, atoms, 3)) * 2).astype(np.float32)
    e_ref = RNG.standard_normal(b).astype(np.float32)
    f_ref = RNG.standard_normal((b, atoms, 3)).astype(np.float32)
    centers = pair_centers()

    def step(r, e_ref, f_ref, *ps):
        energy = pair_energy(r, ps, centers, F.softplus, F)
        forces = -gc.grad(F.sum(energy), [r])[0]
        value = F.mse(energy, e_ref) + F.mse(forces, f_ref)
        return value, gc.grad(value, list(ps))

    return step, None, [r, e_ref, f_ref, *ps]


def w13_torch(args):
    import torch
    e_ref, f_ref, ps, centers = torch_tensor(args[1]), torch_tensor(args[2]), torch_params(args[3:]), \
        torch_tensor(pair_centers())

    def run():
        r = torch_tensor(args[0]).requires_grad_(True)
        energy = pair_energy(r, ps, centers, torch.nn.functional.softplus, torch)
        forces = -torch.autograd.grad(energy.sum(), [r], create_graph=True)[0]
        loss = ((energy - e_ref) ** 2).mean() + ((forces - f_ref) ** 2).mean()
        return torch.autograd.grad(loss, ps)
    return run


def w13_jax(args):
    import jax
    import jax.numpy as jnp
    centers = pair_centers()

    def loss(ps, r, e_ref, f_ref):
        def energy(r):
            return pair_energy(r, ps, centers, jax.nn.softplus, jnp)
        forces = -jax.grad(lambda r: jnp.sum(energy(r)))(r)
        return jnp.mean((energy(r) - e_ref) ** 2) + jnp.mean((forces - f_ref) ** 2)
    return jax_grad_step(loss, list(args[3:]), args[0], args[1], args[2])


WORKLOADS = [
    Workload("W9", "force-matching", w9_setup, w9_torch, w9_jax, FORCES, dict(batch=2048, features=32, width=256)),
    Workload("W13", "pair-potential", w13_setup, w13_torch, w13_jax, PAIRS, dict(batch=4, atoms=128, basis=32,
                                                                                  width=64)),
]
