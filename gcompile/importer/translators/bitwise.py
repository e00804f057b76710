"""ONNX translators for the bitwise ops: BitwiseAnd/Or/Xor/Not and BitShift, on integers (no gradient).

BitShift takes signed types too (opset 28): a right shift sign-extends, and a shift by a negative
amount or by the width or more gives the sign fill, as F.left_shift and F.right_shift define it.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ..table import onnx_op

_BINARY = {"BitwiseAnd": F.bitwise_and, "BitwiseOr": F.bitwise_or, "BitwiseXor": F.bitwise_xor}


def _integer(n, *xs):
    for x in xs:
        if np.dtype(x.dtype).kind not in "iu":
            raise n.unsupported(f"{n.op_type} on a {np.dtype(x.dtype).name} operand (integers only)")
    return xs


@onnx_op(*_BINARY)
def _bitwise(n, a, b):
    return _BINARY[n.op_type](*_integer(n, a, b))


@onnx_op("BitwiseNot")
def _bitwise_not(n, x):
    return F.bitwise_not(*_integer(n, x))


@onnx_op("BitShift")
def _bit_shift(n, x, s):
    direction = n.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise n.unsupported(f"direction {direction!r} (LEFT or RIGHT)")
    return (F.left_shift if direction == "LEFT" else F.right_shift)(*_integer(n, x, s))
