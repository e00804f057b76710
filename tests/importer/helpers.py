"""Small hand-built ONNX models for the importer tests, and a bound on the memory a test may use."""
import contextlib
import os
import re
import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from gcompile.testing import float64_model as as_float64  # noqa: F401 (the tests' name for it)

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE}


def model(nodes, inputs, outputs, initializers=(), opset=20, dtype=np.float32):
    """A ModelProto; inputs/outputs are (name, shape) pairs of `dtype` or (name, shape, elem_type)."""
    def info(entry):
        name, shape, *elem = entry
        return helper.make_tensor_value_info(name, elem[0] if elem else ELEM[np.dtype(dtype)], shape)
    graph = helper.make_graph(nodes, "test", [info(i) for i in inputs], [info(o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def mlp_model(dtype=np.float32, seed=0):
    """Gemm(transB) -> LayerNormalization -> Gelu -> MatMul -> Softmax, batch symbolic ("N")."""
    rng = np.random.default_rng(seed)
    params = {"W": rng.standard_normal((5, 4)), "b": rng.standard_normal(5) * 0.1,
              "scale": 1 + 0.1 * rng.standard_normal(5), "shift": 0.1 * rng.standard_normal(5),
              "W2": rng.standard_normal((5, 3))}
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["h"], transB=1, alpha=0.7),
             helper.make_node("LayerNormalization", ["h", "scale", "shift"], ["n"], epsilon=1e-5),
             helper.make_node("Gelu", ["n"], ["g"]),
             helper.make_node("MatMul", ["g", "W2"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    return model(nodes, [("x", ["N", 4])], [("y", ["N", 3])],
                 [(k, v.astype(dtype)) for k, v in params.items()], dtype=dtype)


def single_node(op_type, inputs, n_outputs=1, opset=21, **attrs):
    """A one-node model: float arrays in `inputs` (a list of (name, array), or (name, array, role) with
    role "const" for a float initializer or "input" for an integer graph input) become graph inputs,
    integer ones initializers (as exporters write axes, targets of a fixed batch, ...); None skips an
    optional input."""
    names = [entry[0] if entry[1] is not None else "" for entry in inputs]
    graph_input = [v is not None and (role == ["input"] or v.dtype.kind == "f" and role != ["const"])
                   for _, v, *role in inputs]
    floats = [(name, v) for (name, v, *_), g in zip(inputs, graph_input) if g]
    ints = [(name, v) for (name, v, *_), g in zip(inputs, graph_input) if v is not None and not g]
    outs = [f"out{i}" for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, outs, **attrs)], op_type,
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for name, v in floats],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
        [numpy_helper.from_array(v, name) for name, v in ints])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), [v for _, v in floats]


def ort_run(proto, feeds: dict) -> list:
    """`proto` run by ONNX Runtime's CPU provider (written at IR version 10, which every supported
    ONNX Runtime reads, since onnx.helper writes the newest one; outputs declared without a type get
    the one onnx's shape inference gives them, as ONNX Runtime wants one)."""
    import onnx
    import onnxruntime as ort
    copy = type(proto)()
    copy.CopyFrom(proto)
    copy.ir_version = min(copy.ir_version, 10)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(copy).graph.output}
    for out in copy.graph.output:
        if not out.type.tensor_type.elem_type:
            out.type.CopyFrom(inferred[out.name].type)
    session = ort.InferenceSession(copy.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@contextlib.contextmanager
def address_space(headroom: int = 1 << 30):
    """Run the block with at most `headroom` more address space than now: an allocation of what a
    hostile file declares is then a MemoryError in the test, not an exhausted machine."""
    resource = pytest.importorskip("resource")
    status = "/proc/self/status"
    match = re.search(r"VmSize:\s+(\d+) kB", open(status).read()) if os.path.exists(status) else None  # noqa: SIM115
    if not match:
        pytest.skip("needs Linux's /proc/self/status")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(match.group(1)) * 1024 + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def small_memory(peak=64 << 20, headroom=1 << 30):
    """address_space(headroom), and a check that the memory Python and numpy allocated in the
    block peaked under `peak` bytes."""
    with address_space(headroom):
        tracemalloc.start()
        try:
            yield
            used = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert used < peak, f"peak {used} bytes"


def assert_outputs_match(got, expected, tol: float) -> None:
    """Each output of gcompile's run equals the reference's: dtype, shape, and values within `tol`."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


def sine_loss(f):
    """A scalar of every float output of the imported `f`, Σ sum(sin(y_k)) · w_k with fixed random w_k:
    nonlinear, so second-order checks see every output's curvature."""
    import gcompile.functions as F
    weights = [np.random.default_rng(i).standard_normal(1) for i in range(8)]

    def loss(*xs):
        outs = f(*xs)
        floats = [o for o in (outs if isinstance(outs, tuple) else (outs,)) if np.dtype(o.dtype).kind == "f"]
        return F.add_n([F.sum(F.sin(o) * w) for o, w in zip(floats, weights)])
    return loss
