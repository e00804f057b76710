"""The tracer: Tensor's operators and methods, numpy functions on Tensors, specs and the traced graph."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

from .opcheck import check_forward


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape).astype(dtype)


def test_tensor_attributes_while_tracing():
    seen = {}

    def f(x, i):
        seen.update(shape=x.shape, dtype=x.dtype, ndim=x.ndim, i_dtype=i.dtype, t_shape=x.T.shape,
                    is_tensor=isinstance(x, gc.Tensor), sum_shape=x.sum(axis=1, keepdims=True).shape)
        return x
    gc.compile(f, gc.spec(("batch", 3, 4)), gc.spec((2,), "int64"))
    assert seen == dict(shape=("batch", 3, 4), dtype=np.dtype(np.float32), ndim=3, i_dtype=np.dtype(np.int64),
                        t_shape=(4, 3, "batch"), is_tensor=True, sum_shape=("batch", 1, 4))


# Each function below runs unchanged on numpy arrays (the expectation) and on Tensors.
def test_arithmetic_operators():
    def f(a, b):
        return a + b, a - b, a * b, a / b, a ** b, -a, +a, abs(-a), a @ b
    a, b = rand(2, 3, seed=1), rand(3, seed=2)
    check_forward(f, [a, b], list(f(a, b)), rtol=1e-5)


def test_reflected_operators_with_python_scalars_and_arrays():
    c, m = rand(3, seed=4), rand(4, 2, seed=5)

    def f(x):
        return 1 + x, 1 - x, 2 * x, 1 / x, 2 ** x, c + x, c - x, c * x, c / x, c ** x, m @ x
    x = rand(2, 3, seed=3)
    check_forward(f, [x], list(f(x)), rtol=1e-5)


def test_comparison_operators():
    def f(a, b):
        return a < b, a <= b, a > b, a >= b, a == b, a != b, 1 < a, b > a  # noqa: SIM300  (reflected ops under test)
    a, b = rand(2, 3, seed=6), rand(3, seed=7)
    out = check_forward(f, [a, b], list(f(a, b)))
    assert all(o.dtype == np.bool_ for o in out)


def test_methods():
    def f(x):
        return (x.T, x.reshape(4, 6), x.reshape((-1,)), x.transpose(2, 0, 1), x.transpose(), x.sum(),
                x.sum(axis=(0, 2)), x.mean(axis=-1, keepdims=True), x.max(axis=1), x.min(), x.prod(axis=0),
                x.astype(np.float64), x.astype("int32"))
    x = rand(2, 3, 4, seed=8)
    check_forward(f, [x], list(f(x)), rtol=1e-5)


def test_numpy_ufuncs_and_functions_dispatch_to_gcompile():
    x = rand(2, 3, seed=9)

    def f(x):
        return (np.exp(x), np.maximum(x, 1.0), x + np.ones(3, np.float32), np.ones(3, np.float32) - x, np.sqrt(x),
                np.tanh(x), np.abs(-x), np.sum(x, axis=1), np.mean(x), np.max(x, axis=0), np.reshape(x, (3, 2)),
                np.transpose(x), np.where(x > 1, x, 0.0), np.matmul(x, np.ones((3, 1), np.float32)),
                np.dot(x, np.ones(3, np.float32)), np.square(x), np.power(x, 2), np.negative(x),
                np.einsum("ij->j", x), np.clip(x, 0.7, 1.5), np.log(x), np.minimum(x, 1.0), np.divide(1.0, x),
                np.linalg.matmul(x, np.ones((3, 2), np.float32)))

    check_forward(f, [x], list(f(x)), rtol=1e-5)
    traced = trace(f, [x])
    ops = {n.op for n in traced.graph.nodes.values()}
    assert {"exp", "maximum", "reduce_sum", "reduce_mean", "einsum", "where"} <= ops


def test_numpy_ufunc_results_are_tensors():
    kinds = []
    gc.compile(lambda x: kinds.append(type(np.exp(x))) or x, np.ones(2, np.float32))
    assert kinds == [gc.Tensor]


def test_closed_over_array_is_one_constant_node():
    w = rand(3, 3, seed=10)
    traced = trace(lambda x: x @ w + x @ w, [rand(2, 3)])
    constants = [n for n in traced.graph.nodes.values() if n.op == "constant"]
    assert len(constants) == 1 and np.array_equal(constants[0].attrs["value"], w)


def test_traced_graph_evaluates_like_numpy():
    x = rand(2, 3, seed=11)
    traced = trace(lambda x: F.relu(x - 1) * 3 + x.mean(), [x])
    np.testing.assert_allclose(evaluate(traced.graph, [x])[0], np.maximum(x - 1, 0) * 3 + x.mean(), rtol=1e-6)


def test_nodes_record_the_user_source_line():
    import inspect
    line = inspect.currentframe().f_lineno + 1
    traced = trace(lambda x: F.exp(x) * 2, [rand(2)])
    sources = {n.op: n.source for n in traced.graph.nodes.values()}
    assert sources["exp"] == sources["mul"] == f"test_trace.py:{line}"


def test_input_names_come_from_the_signature():
    def f(images, labels):
        return images * 2, labels
    traced = trace(f, [gc.spec(("batch", 2)), gc.spec(("batch",), "int64")])
    assert traced.input_names == ["images", "labels"]
    assert traced.graph.output_names == ["output_0", "output_1"]


def test_specs():
    s = gc.spec(("batch", 784))
    assert s.shape == ("batch", 784) and s.dtype == np.float32
    assert gc.spec(5, "int64").shape == (5,) and gc.spec("n").shape == ("n",)
    assert gc.spec((np.int64(3), 2), np.float64) == gc.Spec((3, 2), np.dtype(np.float64))
    assert repr(gc.spec(("batch", 3))) == "spec((batch, 3), 'float32')"


def test_example_arrays_as_specs():
    traced = trace(lambda a, b: a + b, [np.zeros((2, 3), np.float64), np.float64(1.0)])
    assert [s.shape for s in traced.specs] == [(2, 3), ()]
    assert all(s.dtype == np.float64 for s in traced.specs)


def test_symbolic_dims_survive_reshape_round_trip():
    seen = []

    def f(x):
        y = x.reshape(-1)
        z = y.reshape(-1, 3, 4)
        seen.extend([y.shape, z.shape, F.flatten(x).shape])
        return z
    gc.compile(f, gc.spec(("batch", 3, 4)))
    assert seen == [("12*batch",), ("batch", 3, 4), ("batch", 12)]


def test_symbolic_dims_broadcast_against_one_and_themselves():
    seen = []
    gc.compile(lambda x, y: seen.append(((x + y).shape, (x * x).shape)) or x, gc.spec(("n", 1)), gc.spec((1, "n")))
    assert seen == [(("n", "n"), ("n", 1))]
    with pytest.raises(gc.ShapeError, match=r"\(n,\) and \(m,\)"):
        gc.compile(lambda x, y: x + y, gc.spec(("n",)), gc.spec(("m",)))


def test_attributes_are_plain_python_values():
    traced = trace(lambda x: gc.grad(F.sum(F.transpose(x, (2, 0, 1)) * 2), [x])[0] + F.sum(x, axis=np.int64(1),
                                                                                            keepdims=True),
                   [np.ones((2, 3, 4))])
    for node in traced.graph.nodes.values():
        for key, value in node.attrs.items():
            if key not in ("value", "type", "dtype"):
                hash(value)
                for item in value if isinstance(value, tuple) else (value,):
                    assert type(item) in (int, float, bool, str), (node.op, key, value)


def test_numpy_scalars_can_be_returned():
    cf = gc.compile(lambda x: (x, np.float32(2.5)), np.ones(2, np.float32))
    assert cf(np.ones(2, np.float32))[1] == np.float32(2.5)
