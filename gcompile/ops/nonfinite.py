"""NaN and infinity: the tests isnan/isinf/isfinite and signbit (bool, no gradient), nan_to_num,
and the NaN-ignoring fmax/fmin.

Integer and bool tensors hold neither, so their tests are constant: numpy's answer, without a
node that ONNX's float-only IsNaN/IsInf would refuse.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..frontend.tensor import Tensor, apply, as_tensor
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from .basic import full
from .elementwise import _promote, equal, greater_equal, less, less_equal, logical_and, logical_or, where
from .shape_rules import require_float

__all__ = ["fmax", "fmin", "isfinite", "isinf", "isnan", "nan_to_num", "signbit"]


def _test_infer(types):
    require_float(types[0])
    return [tensor_type(np.bool_, types[0].shape)]


def _isfinite_lower(ctx, names, node):
    bad = ctx.emit("Or", [ctx.emit("IsNaN", names), ctx.emit("IsInf", names)])
    return ctx.emit("Not", [bad])


defop("isnan", infer=_test_infer, reference=np.isnan, lower=lambda ctx, names, node: ctx.emit("IsNaN", names),
      traits={Trait.NONDIFF, Trait.CHEAP, Trait.ELEMENTWISE})
defop("isinf", infer=_test_infer, reference=np.isinf, lower=lambda ctx, names, node: ctx.emit("IsInf", names),
      traits={Trait.NONDIFF, Trait.CHEAP, Trait.ELEMENTWISE})
defop("isfinite", infer=_test_infer, reference=np.isfinite, lower=_isfinite_lower,
      traits={Trait.NONDIFF, Trait.CHEAP, Trait.ELEMENTWISE})


def _test(op: str, for_exact: bool) -> Callable[..., Tensor]:
    def fn(x) -> Tensor:
        x = as_tensor(x)
        if not is_float(x.dtype):     # integers and bools are always finite
            return full(x.shape, for_exact, np.bool_)
        return apply(op, [x])
    fn.__name__ = op
    fn.__doc__ = f"Elementwise {op} as numpy.{op}: a bool tensor, with no gradient."
    return fn


isnan = _test("isnan", False)
isinf = _test("isinf", False)
isfinite = _test("isfinite", True)


def nan_to_num(x, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """x with NaN, +inf and -inf replaced (numpy.nan_to_num, torch.nan_to_num): by default 0 and the
    largest finite values of x's dtype. The gradient passes where x is finite and is 0 elsewhere."""
    x = as_tensor(x)
    if not is_float(x.dtype):
        return x
    big = float(np.finfo(x.dtype).max)
    y = where(isnan(x), nan, x)
    y = where(equal(x, np.inf), big if posinf is None else posinf, y)
    return where(equal(x, -np.inf), -big if neginf is None else neginf, y)


def fmax(a, b) -> Tensor:
    """The larger operand, ignoring NaN unless both are NaN (numpy.fmax, torch.fmax). As in PyTorch
    the gradient goes to the operand chosen: to a at ties, to the other operand beside a NaN."""
    a, b = _promote(a, b)
    return where(logical_or(greater_equal(a, b), isnan(b)), a, b)


def fmin(a, b) -> Tensor:
    """The smaller operand, ignoring NaN unless both are NaN (numpy.fmin, torch.fmin); gradients as fmax."""
    a, b = _promote(a, b)
    return where(logical_or(less_equal(a, b), isnan(b)), a, b)


def signbit(x) -> Tensor:
    """Whether x's sign bit is set (numpy.signbit, torch.signbit): True for negative numbers, -0.0 and
    -inf. ONNX reads no bits of a float, so -0.0 is told from 0.0 by the sign of 1/x, and a NaN
    reads False whatever its sign bit (numpy and torch read the bit)."""
    x = as_tensor(x)
    if x.dtype == np.bool_ or x.dtype.kind == "u":
        return full(x.shape, False, np.bool_)
    zero = np.zeros((), x.dtype)
    negative = less(x, zero)
    if not is_float(x.dtype):
        return negative
    return logical_or(negative, logical_and(equal(x, zero), less(np.ones((), x.dtype) / x, zero)))
