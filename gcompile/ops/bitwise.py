"""Bitwise ops on integers, with numpy's names: and, or, xor, not (invert) and the shifts.

And, or, xor and not are ONNX's BitwiseAnd/Or/Xor/Not (opset 18) on integers; on bools they are
the logical ops, as in numpy. The shifts are arithmetic, which every ONNX runtime runs on every
integer type (ONNX's BitShift takes unsigned types only): a left shift by s is a product with 2**s
(wrapping as integer products do, so bits moved past the top are lost), a right shift a floored
division by 2**s (sign-extending, as numpy's right shift of a signed integer). A shift by a
negative amount or by the type's width or more gives what the sign fill alone gives, as ONNX
defines it: 0, or -1 for a right shift of a negative value. Integer results: no gradients.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply
from ..ir.registry import Trait, defop
from .basic import cast
from .division import floor_divide
from .elementwise import _onnx, _promote, greater_equal, less, logical_and, logical_not, logical_or, not_equal, where
from .indexing import take
from .shape_rules import binary_broadcast

__all__ = ["bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift"]


def _integers(values, what: str) -> list[Tensor]:
    """The operands promoted as numpy promotes them; an error unless they are integers or bools."""
    promoted = _promote(*values)
    if promoted[0].dtype.kind not in "biu":
        raise ShapeError(f"{what} takes integer or bool operands, got {', '.join(str(v.dtype) for v in promoted)} "
                         f"(at {user_location()})")
    return promoted


def _bitwise(op: str, logical, doc: str):
    def fn(a, b) -> Tensor:
        a, b = _integers((a, b), op)
        return logical(a, b) if a.dtype == np.bool_ else apply(op, [a, b])
    fn.__name__, fn.__doc__ = op, doc
    return fn


bitwise_and = _bitwise("bitwise_and", logical_and, "a & b bit by bit (numpy.bitwise_and); on bools, logical and.")
bitwise_or = _bitwise("bitwise_or", logical_or, "a | b bit by bit (numpy.bitwise_or); on bools, logical or.")
bitwise_xor = _bitwise("bitwise_xor", not_equal, "a ^ b bit by bit (numpy.bitwise_xor); on bools, logical xor.")


def bitwise_not(x) -> Tensor:
    """~x bit by bit (numpy.bitwise_not, numpy.invert): -x - 1 on signed integers; on bools, logical not."""
    x, = _integers((x,), "bitwise_not")
    return logical_not(x) if x.dtype == np.bool_ else apply("bitwise_not", [x])


invert = bitwise_not

def _integer_operands(types, **_):
    """Rule for the bitwise ops: integer operands only (on bools the public functions use the logical
    ops; ONNX's Bitwise ops take integers)."""
    for t in types:
        if t.dtype.kind not in "iu":
            raise ShapeError(f"bitwise ops take integer operands, got {t.dtype.name}")
    return binary_broadcast(types) if len(types) == 2 else [types[0]]


_TRAITS = {Trait.NONDIFF, Trait.CHEAP, Trait.ELEMENTWISE}
defop("bitwise_and", infer=_integer_operands, reference=np.bitwise_and, lower=_onnx("BitwiseAnd"),
      traits=_TRAITS | {Trait.BROADCASTS})
defop("bitwise_or", infer=_integer_operands, reference=np.bitwise_or, lower=_onnx("BitwiseOr"),
      traits=_TRAITS | {Trait.BROADCASTS})
defop("bitwise_xor", infer=_integer_operands, reference=np.bitwise_xor, lower=_onnx("BitwiseXor"),
      traits=_TRAITS | {Trait.BROADCASTS})
defop("bitwise_not", infer=_integer_operands, reference=np.bitwise_not, lower=_onnx("BitwiseNot"), traits=_TRAITS)


def _powers_of_two(dtype: np.dtype, count: int) -> np.ndarray:
    """2**0 .. 2**(count-1) in `dtype`, wrapped as the type wraps (2**7 is -128 in int8)."""
    return np.asarray([1 << k for k in range(count)], np.uint64).astype(f"u{dtype.itemsize}").view(dtype)


def _shift_operands(x, s, what: str) -> tuple[Tensor, Tensor, int]:
    x, s = _integers((x, s), what)
    if x.dtype == np.bool_:
        raise ShapeError(f"{what} takes integer operands, got bool (at {user_location()})")
    return x, s, x.dtype.itemsize * 8


def _shift_index(s: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """(whether 0 <= s < count, s as an int64 index where it is, else `count`): an index into a table of
    count + 1 entries whose last one stands for the shifts outside the range."""
    wide = cast(s, np.int64)
    valid = logical_and(greater_equal(wide, 0), less(wide, count))
    return valid, where(valid, wide, np.int64(count))


def left_shift(x, s) -> Tensor:
    """x << s (numpy.left_shift): x·2**s, the bits moved past the type's top lost; a shift by a negative
    amount or by the width or more gives 0."""
    x, s, bits = _shift_operands(x, s, "left_shift")
    _, index = _shift_index(s, bits)
    return x * take(np.append(_powers_of_two(x.dtype, bits), np.zeros(1, x.dtype)), index)


def right_shift(x, s) -> Tensor:
    """x >> s (numpy.right_shift): ⌊x / 2**s⌋, sign-extending on signed types; a shift by a negative amount
    or by the width or more gives the sign fill (-1 for negative x, else 0)."""
    x, s, bits = _shift_operands(x, s, "right_shift")
    top = bits - 1 if x.dtype.kind == "i" else bits       # 2**(bits-1) does not fit a signed type
    valid, index = _shift_index(s, top)
    divisor = take(np.append(_powers_of_two(x.dtype, top), np.ones(1, x.dtype)), index)
    fill = where(less(x, 0), np.asarray(-1, x.dtype), np.asarray(0, x.dtype)) if x.dtype.kind == "i" else 0
    return where(valid, floor_divide(x, divisor), fill)
