"""Division and rounding toward zero, with numpy's names and PyTorch's gradients: reciprocal,
trunc, frac, fmod, remainder, floor_divide.

fmod keeps the dividend's sign (C's fmod, ONNX Mod with fmod=1) and remainder the divisor's
(Python's %); floor_divide is Python's // (numpy's algorithm, exact where floor(a / b) would
round across an integer). Integer division by zero gives 0, as numpy does, where ONNX Runtime
would stop with an error. trunc and floor_divide pass no gradient (piecewise constant);
fmod's and remainder's divisor gets -g·trunc(a/b) and -g·floor(a/b).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.registry import Trait, defop
from .elementwise import (
    _onnx,
    _promote,
    _unary_def,
    floor,
)
from .emitter import Emitter, Value
from .shape_rules import binary_numeric, unary_float

__all__ = ["floor_divide", "fmod", "frac", "reciprocal", "remainder", "trunc"]

reciprocal = _unary_def("reciprocal", lambda x: 1 / x, _onnx("Reciprocal"),
                        lambda g, ins, outs: [-(g[0] * outs[0] * outs[0])])


# -- rounding toward zero ------------------------------------------------------------------------------
def trunc(x) -> Tensor:
    """x rounded toward zero (numpy.trunc); integers are returned as they are. No gradient."""
    x = as_tensor(x)
    return x if x.dtype.kind in "biu" else apply("trunc", [x])


def frac(x) -> Tensor:
    """x - trunc(x), the fractional part with x's sign (torch.frac); its gradient is 1."""
    x = as_tensor(x)
    return x - trunc(x)


def _lower_trunc(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    x = e.wrap(names[0])
    return e.where(x < 0, e("Ceil", x), e("Floor", x)).name


defop("trunc", infer=unary_float, reference=np.trunc, lower=_lower_trunc,
      traits={Trait.NONDIFF, Trait.CHEAP, Trait.ELEMENTWISE})


# -- division with remainders --------------------------------------------------------------------------
def _binary(op: str, doc: str) -> Callable[..., Tensor]:
    def fn(a, b) -> Tensor:
        return apply(op, _promote(a, b))
    fn.__name__, fn.__doc__ = op, doc
    return fn


fmod = _binary("fmod", "The remainder of a / b truncated toward zero, with a's sign (numpy.fmod, torch.fmod).")
remainder = _binary("remainder", "The remainder of a / b floored, with b's sign (numpy.remainder, torch.remainder, "
                                 "Python's %).")
floor_divide = _binary("floor_divide", "floor(a / b) as Python's // computes it (numpy.floor_divide); "
                                       "no gradient.")


def _integer_safe(e: Emitter, a: Value, b: Value, compute) -> Value:
    """compute(a, b') with b' = 1 where b == 0, then 0 there (numpy's integer result)."""
    zero = e.eq(b, 0)
    return e.where(zero, 0, compute(a, e.where(zero, 1, b)))


def _remainder_differs(e: Emitter, r: Value, b: Value) -> Value:
    """Where a nonzero fmod remainder r has the other sign than the divisor b."""
    return ~e.eq(r, 0) & e("Xor", r < 0, b < 0)


def _lower_fmod(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    a, b = e.wrap(names[0]), e.wrap(names[1])
    mod = lambda a, b: e("Mod", a, b, fmod=1)  # noqa: E731
    return (mod(a, b) if e.dtype.kind == "f" else _integer_safe(e, a, b, mod)).name


def _lower_remainder(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    a, b = e.wrap(names[0]), e.wrap(names[1])
    if e.dtype.kind != "f":
        return _integer_safe(e, a, b, lambda a, b: e("Mod", a, b, fmod=0)).name
    r = e("Mod", a, b, fmod=1)          # fmod, moved to b's sign
    return e.where(_remainder_differs(e, r, b), r + b, r).name


def _lower_floor_divide(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    a, b = e.wrap(names[0]), e.wrap(names[1])
    if e.dtype.kind != "f":        # a - a mod b is an exact multiple of b
        return _integer_safe(e, a, b, lambda a, b: (a - e("Mod", a, b, fmod=0)) / b).name
    # numpy's npy_divmod: (a - fmod(a, b)) / b is nearly an integer; step down where the remainder's
    # sign differs from b's, then round that to the nearest integer
    mod = e("Mod", a, b, fmod=1)
    div = (a - mod) / b
    div = e.where(_remainder_differs(e, mod, b), div - 1, div)
    floored = e("Floor", div)
    floored = e.where(div - floored > 0.5, floored + 1, floored)
    return e.where(e.eq(b, 0), a / b, floored).name


def _quotient_vjp(rounding):
    def vjp(g, ins, outs):
        a, b = ins
        if a.dtype.kind != "f":
            return [None, None]
        return [g[0], -(g[0] * rounding(a / b))]
    return vjp


def _int_safe_reference(fn):
    def reference(a, b):
        if np.result_type(a, b).kind == "f":
            return fn(a, b)
        return np.where(b == 0, 0, fn(a, np.where(b == 0, 1, b)))
    return reference


defop("fmod", infer=binary_numeric, reference=_int_safe_reference(np.fmod), lower=_lower_fmod,
      vjp=_quotient_vjp(trunc), traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("remainder", infer=binary_numeric, reference=_int_safe_reference(np.remainder), lower=_lower_remainder,
      vjp=_quotient_vjp(floor), traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("floor_divide", infer=binary_numeric, reference=_int_safe_reference(np.floor_divide),
      lower=_lower_floor_divide, traits={Trait.NONDIFF, Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
