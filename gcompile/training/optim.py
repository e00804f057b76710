"""Optimizers for gc.export_train_step: torch.optim's update rules written with gcompile ops.

An optimizer declares its per-parameter state as `slots`: (slot name, initial value) pairs;
each slot has its parameter's shape and dtype and is named "<param>.<slot>" in the step
model ("w.momentum", "w.m", "w.v"). `update(params, grads, state, step)` runs while the
step is traced: dicts of Tensors in, (new params, new state) out, `step` being the int64
scalar number of the step being taken (1 for the first, as PyTorch counts). Because the
rules are ordinary traced ops, the whole step lowers to standard ONNX. Scalars that
PyTorch computes in Python floats (Adam's bias corrections) are computed in float64
from the traced step counter and then cast to each parameter's dtype.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import functions as F
from ..errors import GcompileError
from ..frontend import pytree
from ..frontend.tensor import Tensor

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "clip_by_global_norm", "cosine_schedule", "state_name"]


def state_name(param: str, slot: str) -> str:
    """The step model's name for a parameter's optimizer state."""
    return f"{param}.{slot}"


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise GcompileError(message)


def _active(value: Any) -> bool:
    """Whether a term with this coefficient is computed: always for a traced hyper-parameter (its
    value is only known at run time), else when it is non-zero."""
    return isinstance(value, Tensor) or bool(value)


def clip_by_global_norm(grads: Any, max_norm: Any) -> tuple[Any, Tensor]:
    """(grads scaled so that their global L2 norm is at most max_norm, that norm before scaling), as
    torch.nn.utils.clip_grad_norm_: the scale is max_norm / (norm + 1e-6), capped at 1. `grads` is a
    pytree of Tensors (a list, a dict, a Module's gradient); None leaves are left alone."""
    leaves, tree = pytree.flatten(grads)
    dtype = np.result_type(*[g.dtype for g in leaves])
    norm = F.sqrt(F.add_n([F.sum(F.square(F.cast(g, dtype))) for g in leaves]))
    scale = F.minimum(max_norm / (norm + 1e-6), 1.0)
    return pytree.unflatten(tree, [g * F.cast(scale, g.dtype) for g in leaves]), norm


def cosine_schedule(peak: float, total_steps: int, warmup_steps: int = 0, final: float = 0.0) -> Callable[[int], float]:
    """A learning-rate schedule for Trainer(hyperparams={"lr": ...}): linear warm-up from 0 to `peak`
    over warmup_steps, then a cosine decay to `final` at total_steps (and `final` after it).
    Called with the number of steps taken so far."""
    def lr(step: int) -> float:
        if step < warmup_steps:
            return peak * (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return final + (peak - final) * 0.5 * (1 + math.cos(math.pi * progress))
    return lr


class Optimizer:
    """Base class: `slots` declares the state, `rule` updates one parameter. `hyperparameters` names
    the attributes export_train_step(hyperparams=...) may turn into model inputs: the rules then
    see a traced scalar there instead of a float."""
    hyperparameters: tuple[str, ...] = ("lr",)

    @property
    def slots(self) -> tuple[tuple[str, float], ...]:
        """(slot name, initial value) pairs, one state entry per parameter each; none by default."""
        return ()

    def scalars(self, step: Tensor) -> dict[str, Tensor]:
        """Step-dependent scalars shared by every parameter (float64 Tensors); none by default."""
        return {}

    def rule(self, p: Tensor, g: Tensor, state: dict[str, Tensor], step: Tensor,
             scalars: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """(new p, {slot: new value}) for one parameter."""
        raise NotImplementedError

    def update(self, params: dict[str, Tensor], grads: dict[str, Tensor], state: dict[str, Tensor],
               step: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """New parameters and new state (same keys as `params` and `state`) after one step."""
        scalars = self.scalars(step)
        new_params: dict[str, Tensor] = {}
        new_state: dict[str, Tensor] = {}
        for name, p in params.items():
            new_params[name], updated = self.update_one(name, p, grads[name], state, step, scalars)
            new_state.update(updated)
        return new_params, new_state

    def update_one(self, name: str, p: Tensor, g: Tensor, state: dict[str, Tensor], step: Tensor,
                   scalars: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """(new p, {state entry: new value}) for the parameter `name` alone; `state` may hold every
        parameter's entries, `scalars` are self.scalars(step)."""
        slots = {slot: state[state_name(name, slot)] for slot, _ in self.slots}
        new_p, updated = self.rule(p, g, slots, step, scalars)
        return new_p, {state_name(name, slot): v for slot, v in updated.items()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class SGD(Optimizer):
    """torch.optim.SGD: g += wd·p; buf = momentum·buf + (1 - dampening)·g (buf = g on the first
    step); the step direction is buf, or g + momentum·buf with nesterov; p -= lr·direction."""
    hyperparameters = ("lr", "momentum", "dampening", "weight_decay")

    def __init__(self, lr: float, momentum: float = 0.0, dampening: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0) -> None:
        _check(lr >= 0 and momentum >= 0 and weight_decay >= 0,
               f"SGD: lr, momentum and weight_decay must be >= 0 (got {lr}, {momentum}, {weight_decay})")
        _check(not nesterov or (momentum > 0 and dampening == 0),
               "SGD: nesterov momentum needs momentum > 0 and dampening 0")
        self.lr, self.momentum, self.dampening = float(lr), float(momentum), float(dampening)
        self.nesterov, self.weight_decay = bool(nesterov), float(weight_decay)

    @property
    def slots(self) -> tuple[tuple[str, float], ...]:
        return (("momentum", 0.0),) if _active(self.momentum) else ()

    def rule(self, p: Tensor, g: Tensor, state: dict[str, Tensor], step: Tensor,
             scalars: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        if _active(self.weight_decay):
            g = g + self.weight_decay * p
        if not _active(self.momentum):
            return p - self.lr * g, {}
        if _active(self.dampening):
            buf = F.where(F.equal(step, 1), g, self.momentum * state["momentum"] + (1 - self.dampening) * g)
        else:   # the buffer starts at zero, so momentum·0 + g is the first gradient exactly
            buf = self.momentum * state["momentum"] + g
        direction = g + self.momentum * buf if self.nesterov else buf
        return p - self.lr * direction, {"momentum": buf}


class Adam(Optimizer):
    """torch.optim.Adam (amsgrad off): g += wd·p; m = lerp(m, g, 1 - β1); v = β2·v + (1 - β2)·g²;
    p -= lr/(1 - β1^t) · m / (√v / √(1 - β2^t) + eps)."""
    decoupled = False
    slots = (("m", 0.0), ("v", 0.0))
    hyperparameters = ("lr", "eps", "weight_decay")

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        beta1, beta2 = betas
        _check(lr >= 0 and eps >= 0 and weight_decay >= 0,
               f"{type(self).__name__}: lr, eps and weight_decay must be >= 0 (got {lr}, {eps}, {weight_decay})")
        _check(0 <= beta1 < 1 and 0 <= beta2 < 1, f"{type(self).__name__}: betas must lie in [0, 1), got {betas}")
        self.lr, self.betas, self.eps = float(lr), (float(beta1), float(beta2)), float(eps)
        self.weight_decay = float(weight_decay)

    def scalars(self, step: Tensor) -> dict[str, Tensor]:
        t = F.cast(step, np.float64)
        beta1, beta2 = self.betas
        return {"step_size": self.lr / (1 - F.power(beta1, t)), "bc2_sqrt": F.sqrt(1 - F.power(beta2, t))}

    def rule(self, p: Tensor, g: Tensor, state: dict[str, Tensor], step: Tensor,
             scalars: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        beta1, beta2 = self.betas
        if _active(self.weight_decay) and self.decoupled:
            p = p * (1 - self.lr * self.weight_decay)
        elif _active(self.weight_decay):
            g = g + self.weight_decay * p
        m = state["m"] + (1 - beta1) * (g - state["m"])
        v = beta2 * state["v"] + (1 - beta2) * (g * g)
        denom = F.sqrt(v) / F.cast(scalars["bc2_sqrt"], p.dtype) + self.eps
        return p - F.cast(scalars["step_size"], p.dtype) * (m / denom), {"m": m, "v": v}


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay, p *= 1 - lr·wd before the Adam step."""
    decoupled = True

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01) -> None:
        super().__init__(lr, betas, eps, weight_decay)
