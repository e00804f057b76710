"""Division and rounding toward zero, with numpy's names and PyTorch's gradients: reciprocal,
trunc, frac, fmod, remainder, floor_divide and trunc_divide.

fmod keeps the dividend's sign (C's fmod, ONNX Mod with fmod=1) and remainder the divisor's
(Python's %); floor_divide is Python's // (numpy's algorithm, exact where floor(a / b) would
round across an integer). Integer division by zero gives 0, as numpy does, where ONNX Runtime
would stop with an error. trunc_divide is torch.div(a, b, rounding_mode="trunc"): trunc(a / b)
for floats, ONNX's truncating Div for integers. trunc, floor_divide and trunc_divide pass no
gradient (piecewise constant);
fmod's and remainder's divisor gets -g·trunc(a/b) and -g·floor(a/b).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import helper

from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.dtypes import is_float
from ..ir.registry import Trait, defop
from . import integers
from .basic import cast
from .elementwise import (
    _onnx,
    _promote,
    _unary_def,
    divide,
    equal,
    floor,
    where,
)
from .emitter import Emitter, Value
from .shape_rules import binary_numeric, unary_float

__all__ = ["floor_divide", "fmod", "frac", "reciprocal", "remainder", "trunc", "trunc_divide"]

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


def trunc_divide(a, b) -> Tensor:
    """a / b rounded toward zero (torch.div(a, b, rounding_mode="trunc"), C's integer division): integer
    operands stay integers (division by zero gives 0, as floor_divide's); no gradient."""
    a, b = _promote(a, b)
    if is_float(a.dtype):
        return trunc(divide(a, b))
    if a.dtype == np.bool_:
        a, b = cast(a, np.int64), cast(b, np.int64)
    zero = equal(b, 0)
    return where(zero, np.zeros((), a.dtype), apply("div", [a, where(zero, np.ones((), b.dtype), b)]))


def _remainder_differs(e: Emitter, r: Value, b: Value) -> Value:
    """Where a nonzero fmod remainder r has the other sign than the divisor b."""
    return ~e.eq(r, 0) & e("Xor", r < 0, b < 0)


def _lower_fmod(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    a, b = e.wrap(names[0]), e.wrap(names[1])
    if is_float(e.dtype):
        return e("Mod", a, b, fmod=1).name
    # a - trunc(a / b)·b: ONNX Runtime's integer Mod with fmod=1 computes in float64 (ops/integers.py)
    return integers.safe_division(e, a, b, lambda a, b: a - e("Div", a, b) * b).name


def _lower_remainder(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    a, b = e.wrap(names[0]), e.wrap(names[1])
    if not is_float(e.dtype):
        return integers.safe_division(e, a, b, lambda a, b: e("Mod", a, b, fmod=0)).name
    r = e("Mod", a, b, fmod=1)          # fmod, moved to b's sign
    return e.where(_remainder_differs(e, r, b), r + b, r).name


def _lower_floor_divide(ctx, names, node):
    e = Emitter(ctx, node.outputs[0].dtype)
    a, b = e.wrap(names[0]), e.wrap(names[1])
    if not is_float(e.dtype):        # the truncated quotient, one less where the remainder's sign differs from b's
        def floored(a, b):
            q = a / b
            differs = _remainder_differs(e, a - q * b, b)
            return q - e("Cast", differs, to=helper.np_dtype_to_tensor_dtype(e.dtype)) if e.dtype.kind == "i" else q
        return integers.safe_division(e, a, b, floored).name
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
        if not is_float(a.dtype):
            return [None, None]
        return [g[0], -(g[0] * rounding(a / b))]
    return vjp


defop("fmod", infer=binary_numeric, reference=integers.safe_reference(np.fmod), lower=_lower_fmod,
      vjp=_quotient_vjp(trunc), traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("remainder", infer=binary_numeric, reference=integers.safe_reference(np.remainder), lower=_lower_remainder,
      vjp=_quotient_vjp(floor), traits={Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
defop("floor_divide", infer=binary_numeric, reference=integers.safe_reference(np.floor_divide),
      lower=_lower_floor_divide, traits={Trait.NONDIFF, Trait.CHEAP, Trait.BROADCASTS, Trait.ELEMENTWISE})
