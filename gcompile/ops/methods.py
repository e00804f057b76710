"""Tensor's operators, methods and numpy hooks, installed from one table onto the Tensor class.

Each entry maps a method name to the gcompile.functions call it stands for, so
`x + 1`, `x @ w` and `x.sum(axis=1)` record the same nodes as F.add, F.matmul, F.sum, and
np.exp(x) goes through numpy's protocols to F.exp. Installing them here keeps the tracing core
(frontend/tensor.py) free of the op library, which is built on it. gcompile.functions calls
install(itself) once it is complete, so whoever imports the op library can trace with operators
(the package root loads lazily and is not needed for that); the library is passed in rather than
imported, since it imports this module.
"""
from __future__ import annotations

from types import ModuleType

from ..frontend.tensor import Tensor
from . import numpy_dispatch


def _swap(fn):
    return lambda self, other: fn(other, self)


def methods(F: ModuleType) -> dict:
    """Method name -> what it stands for, in terms of the op library `F`."""
    def _reshape(self, *shape):
        return F.reshape(self, *shape)

    def _transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return F.transpose(self, axes or None)

    return {
        "__add__": F.add, "__radd__": _swap(F.add),
        "__sub__": F.subtract, "__rsub__": _swap(F.subtract),
        "__mul__": F.multiply, "__rmul__": _swap(F.multiply),
        "__truediv__": F.divide, "__rtruediv__": _swap(F.divide),
        "__floordiv__": F.floor_divide, "__rfloordiv__": _swap(F.floor_divide),
        "__mod__": F.remainder, "__rmod__": _swap(F.remainder),
        "__pow__": F.power, "__rpow__": _swap(F.power),
        "__matmul__": F.matmul, "__rmatmul__": _swap(F.matmul),
        "__neg__": F.negative, "__pos__": lambda self: self, "__abs__": F.abs,
        "__lt__": F.less, "__le__": F.less_equal, "__gt__": F.greater, "__ge__": F.greater_equal,
        "__eq__": F.equal, "__ne__": F.not_equal,
        "__and__": F.bitwise_and, "__or__": F.bitwise_or, "__xor__": F.bitwise_xor, "__invert__": F.bitwise_not,
        "__rand__": _swap(F.bitwise_and), "__ror__": _swap(F.bitwise_or), "__rxor__": _swap(F.bitwise_xor),
        "__lshift__": F.left_shift, "__rshift__": F.right_shift,
        "__getitem__": lambda self, index: F.getitem(self, index),
        "reshape": _reshape, "transpose": _transpose, "flatten": F.flatten, "squeeze": F.squeeze,
        "sum": F.sum, "mean": F.mean, "max": F.max, "min": F.min, "prod": F.prod,
        "astype": F.cast, "exp": F.exp, "log": F.log, "sqrt": F.sqrt, "tanh": F.tanh,
        "T": property(lambda self: F.transpose(self)),
        "__array_ufunc__": numpy_dispatch.array_ufunc, "__array_function__": numpy_dispatch.array_function,
    }


def install(F: ModuleType) -> None:
    """Put the operators and methods onto Tensor, and let numpy's hooks find `F`'s functions."""
    numpy_dispatch.use(F)
    for name, fn in methods(F).items():
        setattr(Tensor, name, fn)
