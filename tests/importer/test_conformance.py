"""The onnx package's own node test cases (generated in-process), imported with gc.load_onnx and
run on gcompile's numpy reference evaluator.

A case is *op-supported* when every node of its model (If branches included) has a translator.
Each such case either passes, is refused with an UnsupportedError (a feature gcompile does not
express, such as pooling with dilations: never a wrong result), or
is listed in EXCLUDED with a reason. Anything else fails the test.

Node tests feed every operand as a graph input, where exporters write axes, shapes, pads and the
like as constants. So a case refused because such an operand is only known at run time is run
again with its integer and bool inputs bound as constants, as an exporter would have written them,
and then with every input but the first bound (float parameters such as Resize's scales).
"""
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import gcompile as gc
from gcompile.errors import UnsupportedError
from gcompile.frontend.trace import trace
from gcompile.importer.table import SUPPORTED_DTYPES, TRANSLATORS
from gcompile.ir.dtypes import BFLOAT16, NARROW_FLOATS, is_float
from gcompile.ir.evaluate import evaluate

# Only goes up: the number of op-supported cases that pass.
PASS_FLOOR = 1481

EXCLUDED = {}

TOLERANCE = {np.dtype(np.float16): dict(rtol=2e-3, atol=2e-3), BFLOAT16: dict(rtol=1e-2, atol=1e-2),
             **{d: dict(rtol=0, atol=0) for d in NARROW_FLOATS}}


def _ops(graph):
    for node in graph.node:
        yield node.domain, node.op_type
        for attr in node.attribute:
            yield from _ops(attr.g)
            for g in attr.graphs:
                yield from _ops(g)


def _op_supported(case) -> bool:
    return all(d in ("", "ai.onnx") and (op in TRANSLATORS or op == "If") for d, op in _ops(case.model.graph))


def _leaves(values):
    """The arrays of a case's inputs or outputs: TensorProtos (the Cast cases store theirs so, for the
    dtypes numpy lacks) read as numpy or ml_dtypes arrays, sequences (lists) flattened."""
    for v in values:
        if isinstance(v, list):
            yield from _leaves(v)
        elif v is not None:          # an absent optional
            yield numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)


def _rebuild(values, leaves):
    """`values`' structure (lists for sequences) with the leaves taken from the iterator `leaves`."""
    return [_rebuild(v, leaves) if isinstance(v, list) else None if v is None else next(leaves) for v in values]


def _run(f, inputs, bind: str):
    """Evaluate with the inputs `bind` names held as constants: none, the integer and bool ones, or
    all but the first (float parameters such as Resize's scales)."""
    arrays = list(_leaves(inputs))
    known = [bind == "all_but_first" and i > 0 or bind == "ints" and a.dtype.kind in "biu"
             for i, a in enumerate(arrays)]
    runtime = [a for a, k in zip(arrays, known) if not k]

    def fn(*xs):
        it = iter(xs)
        return f(*_rebuild(inputs, iter([a if k else next(it) for a, k in zip(arrays, known)])))
    traced = trace(fn, [gc.spec(a.shape, a.dtype) for a in runtime])
    return evaluate(traced.graph, runtime)


def _check_case(case) -> None:
    f = gc.load_onnx(case.model)
    for inputs, expected in case.data_sets:
        if any(a.dtype not in SUPPORTED_DTYPES for a in _leaves(inputs)):
            raise UnsupportedError("an input dtype gcompile does not trace")
        for bind in ("none", "ints", "all_but_first"):
            try:
                got = _run(f, inputs, bind)
                break
            except UnsupportedError as err:
                if "must be known at import time" not in str(err) or bind == "all_but_first":
                    raise
        expected = list(_leaves(expected))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert (g.dtype, g.shape) == (e.dtype, e.shape)
            if is_float(e.dtype) or e.dtype in NARROW_FLOATS:
                np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64),
                                           **TOLERANCE.get(e.dtype, dict(rtol=1e-4, atol=1e-5)))
            else:
                np.testing.assert_array_equal(g, e)


@pytest.fixture(scope="module")
def cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases()


def test_onnx_node_conformance(cases):
    supported = [c for c in cases if _op_supported(c)]
    passed, refused, failed = [], [], []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for case in supported:
            if case.name in EXCLUDED:
                continue
            try:
                _check_case(case)
                passed.append(case.name)
            except UnsupportedError as err:
                refused.append((case.name, str(err)))
            except Exception as err:  # noqa: BLE001 - collected and reported below
                failed.append(f"{case.name}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    print(f"\nONNX node conformance: {len(supported)}/{len(cases)} cases op-supported; {len(passed)} pass, "
          f"{len(refused)} refused with UnsupportedError, {len(EXCLUDED)} excluded")
    assert not failed, "supported cases failing:\n" + "\n".join(failed)
    assert len(passed) >= PASS_FLOOR
