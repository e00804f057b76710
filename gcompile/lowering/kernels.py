"""The dtypes ONNX ops are run in, and narrow dtypes computed in a wider one where a runtime has
no kernel for them.

ONNX allows each op a set of element types (its schema's type constraints), and ONNX Runtime's
CPU provider implements a subset of those: 1.31 has no int16 or uint16 Max, Min, Where,
ArgMax, ArgMin or Pad, no uint16 TopK, no bool Where, no int8, int16, uint8 or uint16 Einsum,
no uint8 CumSum, no uint64 sum or product, and no float16 or bool ScatterElements with a
reduction; an op's lowering may also meet a dtype
its ONNX op does not allow at all (ReduceSum and MatMul take no int8, int16 or bool; Neg no
uint8). LowerContext.emit asks `widening` before it emits a node: where the node's dtype is
missing, its operands of that dtype are cast to the first wider dtype that has a kernel and its
results cast back. That is exact:
int8, int16 and uint8 values are int32 values, and integer arithmetic wraps the same way once
the result is cast back (ONNX Runtime's narrowing Cast keeps the low bits); bool values are 0 and
1 (cast back, anything nonzero is true); a float16 operation computed in float32 and rounded once
is float16's correctly rounded result (float32 has more than twice float16's precision). The
types are read off the schema (output_dtypes), from the operands' dtypes the context knows.

float64 has no wider dtype: the ops ONNX Runtime's CPU provider lacks in float64 (convolutions
among them) are refused before a session is made (context.NO_FLOAT64_CPU_KERNEL).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

_dtype = np.dtype

# (op type, dtype) pairs ONNX allows but ONNX Runtime 1.31's CPU provider has no kernel for, found by
# compiling every registry op in every dtype gcompile traces (tests/lowering/test_dtype_kernels.py),
# each with the condition on the node's attributes under which the kernel is missing.
_ALWAYS: Callable[[dict], bool] = lambda attrs: True  # noqa: E731
_SHORT = frozenset({_dtype("int16"), _dtype("uint16")})
MISSING: dict[str, tuple[frozenset[np.dtype], Callable[[dict], bool]]] = {
    "Max": (_SHORT, _ALWAYS),
    "Min": (_SHORT, _ALWAYS),
    "Where": (_SHORT | {_dtype("bool")}, _ALWAYS),
    "ArgMax": (_SHORT, _ALWAYS),
    "ArgMin": (_SHORT, _ALWAYS),
    "TopK": (frozenset({_dtype("uint16")}), _ALWAYS),
    "Pad": (_SHORT, _ALWAYS),
    "Einsum": (_SHORT | {_dtype("int8"), _dtype("uint8")}, _ALWAYS),
    "CumSum": (frozenset({_dtype("uint8"), _dtype("uint32"), _dtype("uint64")}), _ALWAYS),
    "ReduceSum": (frozenset({_dtype("uint32"), _dtype("uint64")}), _ALWAYS),     # sums of unsigned ints (numpy's)
    "ReduceProd": (frozenset({_dtype("uint32"), _dtype("uint64")}), _ALWAYS),
    "Pow": (frozenset({_dtype("int8"), _dtype("int16"), _dtype("uint8")}), _ALWAYS),   # as an exponent too
    # ONNX Runtime's optimizer rewrites an int16 or uint16 Clip whose bounds are equal into a Where of that dtype
    "Clip": (_SHORT, _ALWAYS),
    "ScatterElements": (frozenset({_dtype("float16"), _dtype("bool")}),
                        lambda attrs: attrs.get("reduction", "none") not in (None, "none")),
}

# Where a narrow dtype is computed instead, in order of preference.
WIDER: dict[np.dtype, tuple[np.dtype, ...]] = {
    _dtype("bool"): (_dtype("int32"), _dtype("int64")),
    _dtype("int8"): (_dtype("int32"), _dtype("int64")),
    _dtype("uint8"): (_dtype("int32"), _dtype("int64")),
    _dtype("int16"): (_dtype("int32"), _dtype("int64")),
    _dtype("uint16"): (_dtype("int32"), _dtype("int64")),
    _dtype("int32"): (_dtype("int64"),),
    _dtype("uint32"): (_dtype("int64"),),
    _dtype("uint64"): (_dtype("int64"),),   # the same bits: sums, products and negation wrap alike (order differs)
    _dtype("float16"): (_dtype("float32"), _dtype("float64")),
}

_TYPE_STRS = {f"tensor({helper.tensor_dtype_to_string(t)[len('TensorProto.'):].lower()})": t
              for t in helper.get_all_tensor_dtypes()}


def _type_str_dtype(type_str: str) -> np.dtype | None:
    elem = _TYPE_STRS.get(type_str)
    if elem is None:
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    except Exception:     # strings, bfloat16 and float8 have no plain numpy dtype
        return None


@functools.cache
def _signature(op_type: str, opset: int):
    """(input type strings, last input variadic, output type strings, {type param: allowed dtypes})
    of the op's schema at `opset`, None for an op ONNX does not define."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:
        return None
    inputs = tuple(p.type_str for p in schema.inputs)
    variadic = bool(schema.inputs) and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    outputs = tuple(p.type_str for p in schema.outputs)
    allowed = {c.type_param_str: frozenset(d for d in map(_type_str_dtype, c.allowed_type_strs) if d is not None)
               for c in schema.type_constraints}
    return inputs, variadic, outputs, allowed


def _formal(types: Sequence[str], variadic: bool, index: int) -> str | None:
    if index < len(types):
        return types[index]
    return types[-1] if variadic and types else None


def _bound(op_type: str, opset: int, dtypes: Sequence[np.dtype | None]) -> dict[str, np.dtype]:
    """The schema's type params fixed by the operands whose dtype is known."""
    signature = _signature(op_type, opset)
    if signature is None:
        return {}
    inputs, variadic, _, allowed = signature
    bound: dict[str, np.dtype] = {}
    for i, dtype in enumerate(dtypes):
        param = _formal(inputs, variadic, i)
        if dtype is not None and param is not None and param in allowed:
            bound.setdefault(param, dtype)
    return bound


def output_dtypes(op_type: str, opset: int, dtypes: Sequence[np.dtype | None], attrs: dict[str, Any],
                  n_out: int) -> list[np.dtype | None]:
    """The dtype of each output of an op_type node whose operands have `dtypes` (None: unknown)."""
    if op_type == "Cast":
        return [np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"]))]
    if op_type in ("Constant", "ConstantOfShape"):
        value = attrs.get("value")
        if isinstance(value, onnx.TensorProto):
            return [np.dtype(helper.tensor_dtype_to_np_dtype(value.data_type))]
        return [np.dtype(np.float32) if op_type == "ConstantOfShape" else None]
    signature = _signature(op_type, opset)
    if signature is None:
        return [None] * n_out
    _, _, outputs, _ = signature
    bound = _bound(op_type, opset, dtypes)
    result: list[np.dtype | None] = []
    for i in range(n_out):
        formal = _formal(outputs, False, i) or ""
        result.append(bound.get(formal) if formal in bound else _type_str_dtype(formal))
    return result


def widening(op_type: str, opset: int, dtypes: Sequence[np.dtype | None],
             attrs: dict[str, Any]) -> tuple[str, np.dtype, np.dtype] | None:
    """(type param, its dtype, the dtype to compute in) where an op_type node on operands of
    `dtypes` has no kernel (its schema does not allow the dtype, or MISSING lists it) and a wider
    dtype has one; None where it runs as it is (or nothing wider would)."""
    signature = _signature(op_type, opset)
    if signature is None:
        return None
    allowed = signature[3]
    missing, when = MISSING.get(op_type, (frozenset(), _ALWAYS))

    def runs(param: str, dtype: np.dtype) -> bool:
        return dtype in allowed[param] and not (dtype in missing and when(attrs))
    for param, dtype in _bound(op_type, opset, dtypes).items():
        if runs(param, dtype):
            continue
        wide = next((w for w in WIDER.get(dtype, ()) if runs(param, w)), None)
        if wide is not None:
            return param, dtype, wide
    return None


def formal_params(op_type: str, opset: int, n_in: int, n_out: int) -> tuple[list[str | None], list[str | None]]:
    """The schema's type param (or fixed type) of each input and output of an op_type node."""
    signature = _signature(op_type, opset)
    if signature is None:
        return [None] * n_in, [None] * n_out
    inputs, variadic, outputs, _ = signature
    return [_formal(inputs, variadic, i) for i in range(n_in)], [_formal(outputs, False, i) for i in range(n_out)]
