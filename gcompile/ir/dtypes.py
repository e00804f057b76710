"""The element types gcompile traces, and how each is computed on ONNX Runtime's CPU kernels.

Most dtypes are computed as they are. ONNX also defines dtypes for which ONNX Runtime (1.31, CPU)
has few kernels or none: uint32 and uint64 have some, bfloat16 none but Cast and the ops that only
move elements, and the 8- and 4-bit formats (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, int4,
uint4, float4 e2m1) exist in ONNX for storage, Cast and (de)quantization only. So that a model
using them runs everywhere, each such dtype has a *compute dtype*: an op without a kernel for it is
recorded on operands cast to the compute dtype, and its results cast back (frontend.tensor.apply_n
calls `route`). The cast back gives the arithmetic ONNX and numpy define:

- uint32 in int64 holds every value exactly, and the cast back keeps the low bits, so sums,
  differences and products wrap modulo 2**32 as numpy's do (int64, not a wider cast at lowering,
  so that ops/integers.py's exact forms apply to the int64 node);
- ops that only order values (max, argmax, top-k) run on uint32 in int32 and on uint64 in int64, on
  the order-preserving map v - 2**31 (v - 2**63);
- uint64 in int64 keeps the bits: wrapping arithmetic (add, sub, mul, neg, sums, products) and the
  bitwise ops are exact on the bits; any other op on uint64 without a kernel is refused;
- bfloat16 in float32, rounded back to nearest-even after each op, as PyTorch's CPU bfloat16 ops
  and ml_dtypes compute it.

int8, uint8, int16, uint16 and float16 are not routed here: where ONNX Runtime lacks a kernel for one
node of theirs, lowering/kernels.py computes that node in a wider dtype and casts it back, which
changes no value. Routed at tracing is what needs more than that one node's cast: bfloat16's
rounding after each op, uint32 and uint64 (whose int64 nodes ops/integers.py must see to lower
exactly, and their order-preserving maps), the 8- and 4-bit formats (which lowering cannot read),
and the refusals.

The 8- and 4-bit formats take only Cast and the ops that move elements (ONNX defines no arithmetic
on them): anything else asks for a cast first. numpy has no such dtypes: their arrays are ml_dtypes'
(the library onnx itself reads them with), which is why they appear as np.dtype objects here.
docs/reference/dtypes.md lists every dtype and where it is computed.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import UnsupportedError

# -- the catalogue ---------------------------------------------------------------------------------
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT8 = tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                     ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
FLOAT4 = np.dtype(ml_dtypes.float4_e2m1fn)
INT4, UINT4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
NARROW_FLOATS = frozenset((*FLOAT8, FLOAT4))
STORAGE = frozenset((*NARROW_FLOATS, INT4, UINT4))        # Cast, (de)quantization and moves only

NATIVE = frozenset(np.dtype(t) for t in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                                         "uint8", "bool"))
TRACED = NATIVE | {np.dtype(t) for t in ("uint16", "uint32", "uint64")} | {BFLOAT16} | STORAGE

_FLOATS = frozenset(np.dtype(t) for t in ("float16", "float32", "float64", BFLOAT16))
_BY_NAME = {d.name: d for d in TRACED}

COMPUTE: dict[np.dtype, np.dtype] = {np.dtype("uint32"): np.dtype("int64"),
           np.dtype("uint64"): np.dtype("int64"), BFLOAT16: np.dtype("float32")}

# Ops whose ONNX lowering only moves, repeats or converts elements (Cast, Reshape, Transpose,
# Expand, Concat, Slice, Gather, Identity, control flow that carries values). Where ONNX Runtime 1.31
# has no CPU kernel for one (MOVE_KERNELS lists those it has), it runs in a dtype holding every value
# exactly (EXACT), so the cast back changes nothing. tests/test_dtypes.py runs each on every dtype.
MOVES = frozenset({"input", "constant", "cast", "identity", "stop_gradient", "reshape", "transpose", "expand",
                   "concat", "slice", "gather", "after", "scan", "while", "cond"})
_CARRIED = frozenset({"input", "constant", "cast", "after", "scan", "while", "cond"})
MOVE_KERNELS = {
    BFLOAT16: MOVES - {"expand"},
    **{d: _CARRIED | {"identity", "stop_gradient", "reshape", "transpose"} for d in FLOAT8},
    **{d: _CARRIED for d in (FLOAT4, INT4, UINT4)},
}
EXACT: dict[np.dtype, np.dtype] = {BFLOAT16: np.dtype("float32"), **{d: np.dtype("float32") for d in NARROW_FLOATS},
                                   INT4: np.dtype("int8"), UINT4: np.dtype("uint8")}

# Ops with an ONNX Runtime 1.31 CPU kernel for the dtype itself, for every ONNX op their lowering emits
# (probed op by op; tests/test_dtypes.py checks each against numpy).
_UNSIGNED = frozenset({"add", "sub", "mul", "div", "equal", "less", "less_equal", "greater", "greater_equal"})
_WIDE_UNSIGNED = _UNSIGNED | {"maximum", "minimum", "matmul", "abs", "sign", "clip", "cumprod", "fmod", "remainder",
                              "floor_divide"}
KERNELS = {
    np.dtype("uint32"): _WIDE_UNSIGNED | {"where"},
    np.dtype("uint64"): _WIDE_UNSIGNED,
    BFLOAT16: frozenset(),
}

# uint64 through int64: ops exact on the bits (two's complement wraps as uint64 does).
WRAPPING = frozenset({"add", "sub", "mul", "neg", "add_n", "reduce_sum", "reduce_prod", "cumsum", "einsum", "where",
                      "pad", "gather_elements", "scatter_add", "scatter_add_elements", "slice_scatter",
                      "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"})
# Ops that only compare values run on v - 2**(bits - 1), an order-preserving map onto the signed dtype of
# the same width: uint32 in int32 (cheaper than int64, whose orderings ONNX Runtime 1.31 gets wrong past
# 2**31 and gcompile lowers through other ops: ops/integers.py), uint64 in int64.
ORDERING = frozenset({"reduce_max", "reduce_min", "argmax", "argmin", "topk"})
ORDERED: dict[np.dtype, np.dtype] = {np.dtype("uint32"): np.dtype("int32"), np.dtype("uint64"): np.dtype("int64")}
# Outputs that are positions (int64 whatever the operands), never cast back.
INDEX_OUTPUTS = {"argmax": {0}, "argmin": {0}, "topk": {1}}


def is_float(dtype) -> bool:
    """A floating-point dtype: numpy's (kind 'f') and bfloat16; the 8- and 4-bit float formats
    only store values (they carry no gradient, as an integer cast does not)."""
    dtype = np.dtype(dtype)
    return dtype in _FLOATS or dtype.kind == "f" and dtype not in NARROW_FLOATS


def is_integer(dtype) -> bool:
    """A signed or unsigned integer dtype, 4-bit ones included."""
    dtype = np.dtype(dtype)
    return dtype.kind in "iu" or dtype in (INT4, UINT4)


def named(name: str) -> np.dtype | None:
    """The dtype a name such as "bfloat16" or "float8_e4m3fn" stands for (numpy knows these names only
    once ml_dtypes is imported), or None."""
    return _BY_NAME.get(name)


def as_dtype(dtype) -> np.dtype:
    """np.dtype(dtype), also for the names of ml_dtypes' types; TypeError for what is no dtype."""
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    return np.dtype(dtype)


def limits(dtype) -> tuple[float, float]:
    """The smallest and largest finite value of a number dtype (ints and ml_dtypes' formats too)."""
    dtype = np.dtype(dtype)
    info = ml_dtypes.iinfo(dtype) if is_integer(dtype) else ml_dtypes.finfo(dtype)
    return float(info.min), float(info.max)


# -- routing ---------------------------------------------------------------------------------------
_ROUTABLE = TRACED - NATIVE - {np.dtype("uint16")}      # uint16: lowering/kernels.py


def route(op_name: str, dtypes) -> tuple[np.dtype, np.dtype, str] | None:
    """How to record `op_name` on operands of `dtypes`: None to record it as it is, else (dtype, compute
    dtype, 'plain' or 'ordered') for the first operand dtype it has no kernel for. UnsupportedError
    where the op cannot be computed exactly through the compute dtype."""
    if _ROUTABLE.isdisjoint(dtypes):     # the common case, checked first: tracing calls this for every op
        return None
    for dtype in dtypes:
        if op_name in MOVES:
            if dtype in MOVE_KERNELS and op_name not in MOVE_KERNELS[dtype]:
                return dtype, EXACT[dtype], "plain"
            continue
        if dtype in STORAGE:
            raise UnsupportedError(
                f"{op_name} on a {dtype.name} operand: the 8- and 4-bit formats only store values (ONNX defines "
                "Cast, QuantizeLinear and DequantizeLinear for them); cast it to float32 or int32 first")
        if dtype not in COMPUTE or op_name in KERNELS[dtype]:
            continue
        if op_name in ORDERING and dtype in ORDERED:
            return dtype, ORDERED[dtype], "ordered"
        if dtype != np.dtype("uint64") or op_name in WRAPPING:
            return dtype, COMPUTE[dtype], "plain"
        raise UnsupportedError(
            f"{op_name} on uint64: ONNX Runtime has no uint64 kernel for it, and int64 gives it the same result "
            "only for values below 2**63; cast to int64 or float64 explicitly")
    return None


def runs_as_is(op_name: str, dtypes) -> bool:
    """Whether a node of `op_name` on operands of `dtypes` may be recorded as it is (no routing): a
    graph pass that builds a node checks this, so that it never undoes a routing."""
    try:
        return route(op_name, dtypes) is None
    except UnsupportedError:
        return False


def _shift(dtype: np.dtype) -> np.ndarray:
    """-2**(bits - 1) in `dtype`: added with wraparound, it maps an unsigned value onto the signed dtype
    of its width in the same order."""
    return np.asarray(np.iinfo(dtype).min, dtype)


def to_compute(x, how: str, wide: np.dtype, cast, add):
    """x (a Tensor of a routed dtype) in the compute dtype `wide`; `cast` and `add` are the traced ops."""
    return add(cast(x, wide), _shift(wide)) if how == "ordered" else cast(x, wide)


def from_compute(y, dtype, how: str, cast, add):
    """A result y computed by `to_compute`'s operands back in `dtype`."""
    return cast(add(y, _shift(y.dtype)) if how == "ordered" else y, dtype)
