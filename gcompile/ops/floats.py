"""The sign and spacing of floats: copysign and nextafter (numpy's names, PyTorch's gradients).

nextafter reads no bits (ONNX has no bit cast for floats): the spacing of floats at a is a power
of two found from log2|a| (corrected by comparing with the power it gives), halved below an
exact power of two, and the smallest subnormal below the normal range; a plus that spacing
toward b is exact.
"""
from __future__ import annotations

import math

import numpy as np

from ..frontend.tensor import Tensor, apply
from ..ir.registry import Trait, defop
from .elementwise import (
    abs,
    equal,
    floor,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    logical_and,
    logical_or,
    maximum,
    not_equal,
    power,
    promote_float,
    sign,
    where,
)
from .emitter import Emitter, sign_bit
from .shape_rules import binary_float

__all__ = ["copysign", "nextafter"]


# -- copysign and nextafter ------------------------------------------------------------------------------------
def copysign(a, b) -> Tensor:
    """|a| with the sign of b (numpy.copysign): -0.0 counts as negative; a NaN divisor's sign bit
    cannot be read with ONNX ops and counts as positive. a's gradient is ±g (0 at a = 0, as PyTorch),
    b gets none."""
    return apply("copysign", promote_float(a, b))


def nextafter(a, b) -> Tensor:
    """The next float after a in the direction of b (numpy.nextafter, torch.nextafter), in a's float
    dtype: b itself where a == b, NaN if either is NaN, ±the smallest subnormal after ±0, the
    largest finite float after ±inf. Its gradient is 1 in a and 0 in b (the step is piecewise
    constant)."""
    a, b = promote_float(a, b)
    info = np.finfo(a.dtype)
    dtype = a.dtype
    tiny_sub = np.asarray(info.smallest_subnormal, dtype)
    magnitude = abs(a)
    normal = logical_and(greater_equal(magnitude, info.smallest_normal), less(magnitude, np.inf))
    safe = where(normal, magnitude, np.ones((), dtype))
    exponent = floor(log(safe) * (1 / math.log(2)))
    two = np.asarray(2.0, dtype)
    low = power(two, exponent)                          # the binade's power of two, corrected by one step
    exponent = where(greater(low, safe), exponent - 1, where(less_equal(low * 2, safe), exponent + 1, exponent))
    low = power(two, exponent)
    above = low * np.asarray(2.0 ** -info.nmant, dtype)  # the spacing inside [low, 2 low)
    below = maximum(where(equal(safe, low), above * 0.5, above), tiny_sub)
    above, below = where(normal, above, tiny_sub), where(normal, below, tiny_sub)
    up = greater(b, a)
    away = logical_or(logical_and(greater(a, 0), up), logical_and(less(a, 0), less(b, a)))   # |a| grows
    step = where(away, above, below)
    out = a + where(up, step, -step)
    zero = np.zeros((), dtype)
    out = where(equal(a, zero), where(up, tiny_sub, -tiny_sub), out)
    largest = np.asarray(info.max, dtype)
    out = where(equal(magnitude, np.inf), where(greater(a, zero), largest, -largest), out)
    out = where(equal(a, b), b, out)
    return where(logical_or(not_equal(a, a), not_equal(b, b)), np.asarray(np.nan, dtype), out)


def _lower_copysign(ctx, names, node):
    """|a| times -1 or 1 (a Where between the two constants): a Where between -|a| and |a| gave
    +0.0 for -0.0 on ONNX Runtime, whose Where returns +0.0 where it picks a -0.0 from its first
    operand."""
    e = Emitter(ctx, node.outputs[0].dtype)
    return (e("Abs", e.wrap(names[0])) * e.where(sign_bit(e.wrap(names[1])), e.const(-1.0), e.const(1.0))).name


defop("copysign", infer=binary_float, reference=np.copysign, lower=_lower_copysign,
      vjp=lambda g, ins, outs: [g[0] * sign(ins[0]) * sign(outs[0]), None],
      traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
