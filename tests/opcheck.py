"""Shared checks for op tests: forward through onnxruntime against a numpy expectation,
and float64 numeric gradient checks (first and second order) of the reference evaluator and
of the ONNX models ONNX Runtime runs, at static and symbolic sizes.

Every op that appears in a graph checked by `check_grads` is recorded, with the lowerings (an
op's plain form or a target's strategy) its ONNX models ran; tests/op_coverage.py fails the
run if a differentiable registry op was never gradient-checked, at a symbolic size too, or a
lowering never ran in a gradient check.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

import gcompile as gc
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.lowering.lower import recorded_lowerings
from gcompile.testing import check_grad, symbolic_specs

GRAD_CHECKED_OPS: set[str] = set()
SYMBOLIC_CHECKED_OPS: set[str] = set()   # of those, checked with a symbolic size too
LOWERINGS_CHECKED: Counter = Counter()   # (op, strategy or "plain"): the lowerings those checks ran


def check_forward(fn, inputs, expected, *, rtol=1e-5, atol=1e-6, specs=None):
    """Compile `fn` (inputs are example arrays, or `specs` when given), run it on onnxruntime
    with `inputs`, compare each output leaf with `expected` (an array or a list of arrays)."""
    import onnx
    cf = gc.compile(fn, *(specs or inputs), provider="cpu")
    onnx.checker.check_model(cf.model, full_check=True)
    assert {n.domain for n in cf.model.graph.node} <= {"", "ai.onnx"}
    got = cf.run_flat(*inputs)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    assert len(got) == len(expected), (len(got), len(expected))
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.shape == e.shape, f"shape {g.shape} vs expected {e.shape}"
        assert g.dtype == e.dtype or e.dtype.kind == g.dtype.kind, f"dtype {g.dtype} vs expected {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return got


def check_grads(fn, inputs, *, order=2, **kwargs):
    """check_grad for orders 1..order: float64 central differences against the reference
    evaluator and against ONNX Runtime's float32 model at static and symbolic sizes; records
    the ops checked."""
    arrays = [np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a) for a in inputs]
    ops = {n.op for n in trace(fn, arrays).graph.nodes.values()}
    GRAD_CHECKED_OPS.update(ops)
    specs = symbolic_specs(fn, arrays, kwargs.pop("symbolic", "auto"))
    if specs is not None:
        SYMBOLIC_CHECKED_OPS.update(ops)
    with recorded_lowerings() as seen:
        for k in range(1, order + 1):
            check_grad(fn, arrays, order=k, symbolic=specs or False, **kwargs)
    LOWERINGS_CHECKED.update(seen)


def check_values(fn, inputs, expected, *, rtol=1e-6, atol=1e-12):
    """Exact values (gradients at kinks, ties and infinities included; NaN where expected is NaN)
    on both the float64 reference evaluator and ONNX Runtime, from the same float64 inputs; each
    zero expected is the zero given, sign included (PyTorch's -0.0 where it gives one)."""
    got_ref = evaluate(trace(fn, inputs).graph, inputs)
    got_ort = gc.compile(fn, *inputs, provider="cpu").run_flat(*inputs)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    for where, got in (("reference", got_ref), ("onnxruntime", got_ort)):
        assert len(got) == len(expected), (where, len(got), len(expected))
        for g, e in zip(got, expected):
            e = np.asarray(e, np.float64)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=where)
            zeros = e == 0
            np.testing.assert_array_equal(np.signbit(np.asarray(g))[zeros], np.signbit(e)[zeros],
                                          err_msg=f"{where}: the sign of a zero")
