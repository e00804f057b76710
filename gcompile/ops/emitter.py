"""Arithmetic on ONNX value names, for lowering rules that emit long formulas.

`Emitter(ctx, dtype)` wraps the LowerContext of one node: `e.wrap(name)` gives a `Value` whose
operators (+ - * / unary -, < <= > >=, & | ~) emit ONNX nodes, with Python numbers turned into
constants of the node's dtype; `e("Op", *values, **attrs)` emits any other op and `e.where`,
`e.eq` the two that have no operator. A special function then reads like its formula.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class Value:
    """One ONNX value being built; every operation emits a node through its Emitter."""
    __slots__ = ("e", "name")

    def __init__(self, e: Emitter, name: str):
        self.e, self.name = e, name

    def _binary(self, op_type: str, other: Any, swap: bool = False) -> Value:
        a, b = self, self.e.lift(other)
        return self.e(op_type, b, a) if swap else self.e(op_type, a, b)

    def __add__(self, o): return self._binary("Add", o)
    def __radd__(self, o): return self._binary("Add", o, True)
    def __sub__(self, o): return self._binary("Sub", o)
    def __rsub__(self, o): return self._binary("Sub", o, True)
    def __mul__(self, o): return self._binary("Mul", o)
    def __rmul__(self, o): return self._binary("Mul", o, True)
    def __truediv__(self, o): return self._binary("Div", o)
    def __rtruediv__(self, o): return self._binary("Div", o, True)
    def __neg__(self): return self.e("Neg", self)
    def __lt__(self, o): return self._binary("Less", o)
    def __le__(self, o): return self._binary("LessOrEqual", o)
    def __gt__(self, o): return self._binary("Greater", o)
    def __ge__(self, o): return self._binary("GreaterOrEqual", o)
    def __and__(self, o): return self._binary("And", o)
    def __or__(self, o): return self._binary("Or", o)
    def __invert__(self): return self.e("Not", self)


class Emitter:
    """Emits the nodes of one lowering rule; numbers become constants of `dtype`."""

    def __init__(self, ctx, dtype):
        self.ctx, self.dtype = ctx, np.dtype(dtype)

    def wrap(self, name: str) -> Value:
        return Value(self, name)

    def const(self, value) -> Value:
        return Value(self, self.ctx.const(np.asarray(value, self.dtype)))

    def lift(self, value) -> Value:
        return value if isinstance(value, Value) else self.const(value)

    def __call__(self, op_type: str, *inputs, **attrs) -> Value:
        names = [self.lift(v).name for v in inputs]
        return Value(self, self.ctx.emit(op_type, names, **attrs))

    def where(self, cond: Value, a, b) -> Value:
        return self("Where", cond, a, b)

    def eq(self, a, b) -> Value:
        return self("Equal", a, b)

    def chebyshev(self, coefficients, u: Value) -> Value:
        """Σ c_k T_k(u) by Clenshaw's recurrence (stable for any number of terms)."""
        b1 = b2 = None
        two_u = u * 2
        for c in coefficients[:0:-1]:
            term = self.const(c) if b1 is None else two_u * b1 + c
            b1, b2 = (term if b2 is None else term - b2), b1
        if b1 is None:
            return self.const(coefficients[0])
        head = u * b1 + coefficients[0]
        return head if b2 is None else head - b2

    def polynomial(self, coefficients, x: Value) -> Value:
        """Σ c_k x^k by Horner's rule (coefficients from the constant term up)."""
        acc = self.const(coefficients[-1])
        for c in coefficients[-2::-1]:
            acc = acc * x + c
        return acc


def sign_bit(v: Value) -> Value:
    """v < 0 or v is -0.0 (whose reciprocal is -inf); a NaN's sign bit cannot be read with ONNX ops."""
    e = v.e
    return (v < 0) | (e.eq(v, 0) & (e("Reciprocal", v) < 0))
