"""PyTorch's other activation functions (torch.nn.functional names and defaults).

Each is a composition of gcompile ops chosen so that its gradient is PyTorch's at every kink
and stays finite where the function is: hardtanh, relu6 and hardsigmoid pass no gradient at
their bounds (the clip op with strict bounds), celu is α·elu(x/α), mish and logsigmoid go
through the stable softplus. Second and higher derivatives come from the same ops' rules.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, as_tensor
from ..ir.dims import format_shape
from .basic import cast
from .elementwise import _promote, abs, bounded, elu, greater, less_equal, sigmoid, sign, softplus, tanh, where
from .indexing import split
from .nn import softmax
from .shape import reshape
from .shape_rules import axis_for

__all__ = ["celu", "glu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "logsigmoid", "mish", "prelu",
           "relu6", "softmin", "softshrink", "softsign", "tanhshrink", "threshold"]


def _float(x) -> Tensor:
    x = as_tensor(x)
    return x if x.dtype.kind == "f" else cast(x, np.float32)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clipped to [min_val, max_val]; the gradient is 0 at the bounds, as PyTorch's."""
    return bounded(_float(x), float(min_val), float(max_val), inclusive=False)


def relu6(x) -> Tensor:
    """min(max(x, 0), 6), hardtanh(x, 0, 6): gradient 0 at 0 and at 6."""
    return hardtanh(x, 0.0, 6.0)


def hardsigmoid(x) -> Tensor:
    """relu6(x + 3) / 6: 1/6 strictly between -3 and 3, 0 beyond and at ±3."""
    return bounded(_float(x) * (1 / 6) + 0.5, 0.0, 1.0, inclusive=False)


def hardswish(x) -> Tensor:
    """x·hardsigmoid(x): gradient 0 at -3, 1 at 3, as PyTorch's."""
    x = _float(x)
    return x * hardsigmoid(x)


def celu(x, alpha: float = 1.0) -> Tensor:
    """max(0, x) + min(0, α(exp(x/α) - 1)) = α·elu(x/α): gradient 1 at 0."""
    return elu(_float(x) * (1 / alpha), 1.0) * alpha


def _shrink(x, lambd: float, shift: float) -> Tensor:
    x = _float(x)
    return where(less_equal(abs(x), lambd), 0.0, x - sign(x) * shift)


def softshrink(x, lambd: float = 0.5) -> Tensor:
    """x ∓ λ beyond ±λ, 0 within (gradient 0 at ±λ); NaN stays NaN."""
    return _shrink(x, float(lambd), float(lambd))


def hardshrink(x, lambd: float = 0.5) -> Tensor:
    """x beyond ±λ, 0 within (gradient 0 at ±λ); NaN stays NaN."""
    return _shrink(x, float(lambd), 0.0)


def tanhshrink(x) -> Tensor:
    """x - tanh(x)."""
    x = _float(x)
    return x - tanh(x)


def softsign(x) -> Tensor:
    """x / (1 + |x|) (NaN at ±inf, as PyTorch)."""
    x = _float(x)
    return x / (1 + abs(x))


def logsigmoid(x) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), without overflow: -inf at -inf, gradient sigmoid(-x)."""
    return -softplus(-_float(x))


def mish(x) -> Tensor:
    """x·tanh(softplus(x))."""
    x = _float(x)
    return x * tanh(softplus(x))


def threshold(x, threshold: float, value: float) -> Tensor:
    """x where x > threshold, else value (torch.nn.functional.threshold): gradient 0 at the threshold."""
    x = _float(x)
    return where(greater(x, threshold), x, value)


def softmin(x, axis: int = -1) -> Tensor:
    """softmax(-x) along `axis`."""
    return softmax(-_float(x), axis)


def glu(x, axis: int = -1) -> Tensor:
    """a·sigmoid(b), where a and b are the two halves of x along `axis` (whose size must be even)."""
    x = _float(x)
    ax = axis_for(axis, x.ndim, "glu")
    n = x.shape[ax]
    if not isinstance(n, int) or n % 2:
        raise ShapeError(f"glu: axis {ax} of x {format_shape(x.shape)} must have an even static size, got {n!r} "
                         f"(at {user_location()})")
    a, b = split(x, 2, ax)
    return a * sigmoid(b)


def prelu(x, weight) -> Tensor:
    """x where x > 0, else weight·x, with one weight per channel (axis 1; a single weight for all),
    as torch.nn.functional.prelu. The weight gets the gradient Σ g·x over the entries x <= 0."""
    x, weight = _promote(_float(x), weight)
    if weight.shape == (1,):         # one weight for every entry: x keeps its shape (a 0-d x too, as torch)
        weight = reshape(weight, ())
    elif weight.shape != ():
        channels = x.shape[1] if x.ndim >= 2 else 1
        if weight.ndim != 1 or x.ndim < 2 or weight.shape[0] != channels:
            raise ShapeError(f"prelu: weight of shape {format_shape(weight.shape)} must have 1 or {channels!r} "
                             f"entries (the channels on axis 1 of x {format_shape(x.shape)}) (at {user_location()})")
        weight = reshape(weight, (channels,) + (1,) * (x.ndim - 2))
    return where(greater(x, 0), x, weight * x)
