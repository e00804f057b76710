"""The ONNX importer's translation table, and symbolic integer values (shapes with symbolic dims).

Every supported ONNX op has one translator: a function (node, *operands) -> value(s) written
with gcompile ops, so whatever it imports is differentiable through the existing VJP rules.
Operands are Tensors (run-time values), numpy arrays (values known at import time) or None
(an absent optional input). A value known at import time is never turned into run-time data:
when every operand of a node is known, the importer evaluates the node at import time.

Shape arithmetic on symbolic dims (Shape -> Gather -> Concat -> Reshape with a symbolic batch)
runs on SymInts, integer tensors whose entries are ints, dim names ("batch", "2*batch") or
expressions over them (sizes.py), so a Reshape to [Shape(x)[0], -1] becomes a gcompile reshape to
("batch", 12), and a Range to Max(Shape(x)[0], 0) an arange of length batch.

Also here: the ONNX element types gcompile traces (np_dtype, check_dtype) and the operand helpers
every translator module shares (require_float, scalar_like).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from ..errors import UnsupportedError
from ..ir import dtypes
from ..ir.dtypes import is_float
from . import sizes
from .sizes import NotSymbolic

DOMAINS = ("", "ai.onnx")


class SymInts:
    """An integer tensor known at import time up to symbolic dims: its entries are ints, dims ("batch",
    "2*batch") or sizes.Size expressions over dims (batch + 1, max(batch, 1)). Its dtype may also be a
    float one: a size cast to float (whole numbers, divided only exactly)."""
    __slots__ = ("dtype", "values")

    def __init__(self, values, dtype=np.int64):
        self.values = np.asarray(values, dtype=object)
        self.dtype = np.dtype(dtype)

    @property
    def shape(self) -> tuple:
        return self.values.shape

    @property
    def ndim(self) -> int:
        return self.values.ndim

    def __repr__(self) -> str:
        return f"SymInts({self.values.tolist()}, {self.dtype.name})"


class TensorSequence:
    """An ONNX sequence value (translators/sequence.py): its tensors in order (Tensors, or numpy arrays
    known at import time). Not a list or tuple, which the importer reads as a node's several outputs."""
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = list(items)


class OptionalValue:
    """An ONNX optional value (translators/sequence.py): its element (a Tensor, numpy array or
    TensorSequence), or None when empty. Known at import: which it is never depends on data."""
    __slots__ = ("element", "kind")

    def __init__(self, element, kind: str = "tensor"):
        self.element, self.kind = element, kind      # kind: "tensor" or "sequence", what it would hold


def sym_or_const(values, dtype=np.int64):
    """SymInts for object entries holding a symbol, else a plain numpy array of `dtype`."""
    values = np.asarray(values, dtype=object)
    flat = [v.item() if isinstance(v, np.generic) else v for v in values.reshape(-1)]
    if all(isinstance(v, (int, bool)) for v in flat):
        return np.asarray(flat, dtype=dtype).reshape(values.shape)
    return SymInts(np.asarray(flat, dtype=object).reshape(values.shape), dtype)


def entries(value) -> np.ndarray:
    """The object array of a SymInts or numpy array (Python ints, dims and Sizes); NotSymbolic for a
    run-time Tensor, or a float array holding a value that is not a whole number (sizes are)."""
    if isinstance(value, SymInts):
        return value.values
    if not isinstance(value, (np.ndarray, np.generic)):
        raise NotSymbolic()                    # a run-time Tensor operand
    arr = np.asarray(value)
    if is_float(arr.dtype) and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
        raise NotSymbolic()
    return np.asarray([int(v) for v in arr.reshape(-1)], dtype=object).reshape(arr.shape)


def entrywise(fn, *operands, dtype=None):
    """`fn` applied to the entries of SymInts and numpy operands (broadcast as ONNX does), in the dtype
    of the first SymInts (or `dtype`); NotSymbolic where the sizes' algebra does not decide it."""
    like = next(v for v in operands if isinstance(v, SymInts))
    values = np.frompyfunc(fn, len(operands), 1)(*(entries(v) for v in operands))
    return sym_or_const(values, like.dtype if dtype is None else dtype)


COMPARISONS = ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
SYMBOLIC_BINARY = {"Mul": sizes.mul, "Div": sizes.div, "ExactDiv": sizes.exact_div, "Add": sizes.add,
                   "Sub": sizes.sub, "Min": sizes.minimum, "Max": sizes.maximum,
                   **{op: partial(sizes.compare, op) for op in COMPARISONS}}


# dtypes gcompile traces (ir/dtypes.py; ONNX's others: strings, complex, float8e8m0, 2-bit ints)
SUPPORTED_DTYPES = dtypes.TRACED
PACKED = frozenset((dtypes.INT4, dtypes.UINT4, dtypes.FLOAT4))    # stored two values a byte


def np_dtype(elem_type: int, what: str) -> np.dtype:
    """The numpy dtype of an ONNX element type; UnsupportedError for types gcompile does not trace."""
    from onnx import TensorProto, helper
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        dtype = None
    if dtype not in SUPPORTED_DTYPES:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise UnsupportedError(f"{what}: ONNX element type {name} is not supported (supported: "
                               f"{', '.join(sorted(d.name for d in SUPPORTED_DTYPES))})")
    return dtype


def check_dtype(value: np.ndarray, what: str) -> np.ndarray:
    """`value` itself, or an UnsupportedError when gcompile cannot trace its dtype."""
    if value.dtype not in SUPPORTED_DTYPES:
        raise UnsupportedError(f"{what}: a constant of dtype {value.dtype} is not supported")
    return value


def require_float(n, x, what: str = "input"):
    """`x` itself when it is a float operand of node `n`, else an UnsupportedError naming the node:
    translators whose gcompile ops take floats only refuse other dtypes here, with the ONNX node named."""
    if not is_float(np.dtype(x.dtype)):
        raise n.unsupported(f"{n.op_type} on a {np.dtype(x.dtype).name} {what} is not supported (float only)")
    return x


def scalar_like(value, like) -> np.ndarray:
    """`value` as a 0-d array of `like`'s dtype: a constant operand that keeps the op's dtype."""
    return np.asarray(value, dtype=like.dtype)


@dataclass(frozen=True)
class Translator:
    fn: Callable
    symbolic: bool = False      # fn accepts SymInts operands (else they are computed at run time first)
    numpy_only: bool = False    # fn is numpy: only nodes whose operands are all known at import time
    draws: bool = False         # fn draws random values: never evaluated at import time


TRANSLATORS: dict[str, Translator] = {}

_SAMPLING = ("sampling from a distribution: feed the samples as an input (gcompile imports Bernoulli and the "
             "uniform and normal draws, under gc.random_key)")
_STRINGS = "strings are not tensors gcompile computes on: tokenize or decode outside the model and feed the numbers"
# What to do instead, for ops an exporter may write that have no translator (the refusal names it).
ALTERNATIVES: dict[str, str] = {
    "Multinomial": _SAMPLING,
    "BitCast": "it reinterprets bits, which gcompile does not model: F.cast converts values",
    "FlexAttention": "Attention with an additive mask (F.scaled_dot_product_attention's mask) covers score "
                     "modifications that a mask can say",
    "ImageDecoder": "decode images outside the model and feed the pixels",
    **dict.fromkeys(("RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit"),
                    _STRINGS),
}


def onnx_op(*op_types: str, symbolic: bool = False, numpy_only: bool = False, draws: bool = False):
    """Register the decorated function as the translator of `op_types` (ai.onnx domain)."""
    def register(fn):
        for op_type in op_types:
            if op_type in TRANSLATORS:
                raise ValueError(f"ONNX op {op_type} translated twice")
            TRANSLATORS[op_type] = Translator(fn, symbolic, numpy_only, draws)
        return fn
    return register
