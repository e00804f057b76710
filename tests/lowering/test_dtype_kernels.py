"""Every registry op, in every dtype gcompile traces, runs on ONNX Runtime's CPU provider or is
refused when traced (or, in float64, before a session is made: context.NO_FLOAT64_CPU_KERNEL).

ONNX Runtime 1.31 has no kernel for some (op, dtype) pairs ONNX allows (int16 and uint16 Max,
Min, Where and Pad; int8 and uint8 Einsum; uint8 and uint64 CumSum; ...), and an op's lowering may meet a dtype its
ONNX op does not allow (ReduceSum of int8, MatMul of int16, Neg of uint8); either way the runtime
used to answer with its raw NOT_IMPLEMENTED or INVALID_GRAPH. lowering/kernels.py computes such
nodes in a wider dtype. Here each op is called as its sample says (tests/elementwise_samples.py
for elementwise ops, tests/gradients/vmap_samples.py for the others) on operands of each dtype;
the calls its shape rule accepts are compiled together, one model per dtype, run, and compared
with the reference evaluator. A failure names the (op, dtype) pairs."""
from __future__ import annotations

import numpy as np
import pytest

import gcompile as gc
from gcompile.errors import GcompileError
from gcompile.frontend.tensor import apply_n
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.lowering.lower import to_onnx

from ..elementwise_samples import ATTRS, arity, elementwise_ops, operands
from ..gradients.vmap_samples import SAMPLES

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "int64", "float16", "float32", "float64"]


def _as(dtype: str):
    """A float sample array as `dtype`: bools by sign, integers scaled and never 0 (no integer
    division by zero), unsigned ones from magnitudes."""
    def convert(x):
        x = np.asarray(x)
        if x.dtype.kind != "f":
            return x                       # indices and masks stay as they are
        if dtype == "bool":
            return x > 0
        if np.dtype(dtype).kind in "iu":
            scaled = np.abs(x) * 5 if np.dtype(dtype).kind == "u" else x * 5
            return np.where(np.abs(scaled) < 1, 1, np.round(scaled)).astype(dtype)
        return x.astype(dtype)
    return convert


def _calls(dtype: str) -> list[tuple[str, object, list]]:
    """(op, function, arguments) of every registry op with a sample, its float operands as `dtype`."""
    rng = np.random.default_rng(0)
    convert = _as(dtype)
    calls = []
    for op in elementwise_ops():
        xs = [convert(x) for x in operands(op, [(2, 3)] * arity(op), rng)]
        if op == "pow" and xs[1].dtype.kind in "iu":     # integers to negative powers have no value (numpy, torch)
            xs[1] = np.abs(xs[1])
        calls.append((op, lambda *xs, op=op: apply_n(op, list(xs), **ATTRS.get(op, {})), xs))
    for op, sample in SAMPLES.items():
        first = [a if ax is None else gc.tree_util.tree_map(lambda x: x[0], a)
                 for a, ax in zip(sample.args, sample.in_axes)]
        calls.append((op, sample.fn, [gc.tree_util.tree_map(convert, a) for a in first]))
    return calls


def _accepted(dtype: str) -> list[tuple[str, object, list]]:
    """The calls traced without a refusal, less those refused in float64 before a session is made."""
    kept = []
    for op, fn, args in _calls(dtype):
        try:
            with np.errstate(all="ignore"):
                traced = trace(fn, args)
        except GcompileError:
            continue
        if dtype == "float64" and to_onnx(traced.graph, traced.input_names)[1]:
            continue
        kept.append((op, fn, args))
    return kept


def _together(calls):
    """One function computing every call, on the calls' arguments flattened, and those arguments."""
    trees = [gc.tree_util.flatten(args) for _, _, args in calls]

    def fn(*leaves):
        outs, at = [], 0
        for (_, call, _), (flat, tree) in zip(calls, trees):
            args = gc.tree_util.unflatten(tree, list(leaves[at:at + len(flat)]))
            at += len(flat)
            outs.extend(gc.tree_util.leaves(call(*args)))
        return outs
    return fn, [leaf for flat, _ in trees for leaf in flat]


def _failures(calls) -> list[str]:
    """The calls that fail on ONNX Runtime or differ from the reference evaluator, each alone."""
    failed = []
    for op, fn, args in calls:
        one, leaves = _together([(op, fn, args)])
        try:
            _check(one, leaves)
        except Exception as err:   # noqa: BLE001 - the runtime's own error, to be named
            failed.append(f"{op}: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
    return failed


def _check(fn, leaves) -> None:
    with np.errstate(all="ignore"):
        expected = evaluate(trace(fn, leaves).graph, leaves)
        got = gc.compile(fn, *leaves, provider="cpu", optimize=0).run_flat(*leaves)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        if g.dtype.kind != "f":
            np.testing.assert_array_equal(g, e)
        elif np.all(np.isfinite(e)) and np.all(np.abs(e) < 1e4):    # not a singular matrix made of bools
            np.testing.assert_allclose(g, e, rtol=1e-2 if g.dtype == np.float16 else 1e-5, atol=1e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_op_runs_in_every_dtype_it_accepts(dtype):
    calls = _accepted(dtype)
    assert len(calls) > 20, f"only {len(calls)} ops accept {dtype}"
    fn, leaves = _together(calls)
    try:
        _check(fn, leaves)
    except Exception:
        failures = _failures(calls)
        assert not failures, f"in {dtype}:\n" + "\n".join(failures)
        raise
