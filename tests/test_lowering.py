"""Lowering the IR to ONNX: run-time shape tensors for symbolic dims, element counts,
constants, names and opsets; every model is standard ai.onnx."""
import numpy as np
import onnx
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.lowering import to_onnx
from gcompile.lowering.versions import MIN_OPSET, runtime_limits


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def op_types(cf):
    return [n.op_type for n in cf.model.graph.node]


def test_reshape_of_a_symbolic_batch_and_back():
    cf = gc.compile(lambda x: (F.reshape(x, ("batch", 6)), F.reshape(F.reshape(x, ("batch", 6)), ("batch", 2, 3))),
                    gc.spec(("batch", 2, 3)), provider="cpu")
    shapes = [n for n in cf.model.graph.node if n.op_type == "Shape"]
    assert len(shapes) == 1                                            # the batch dim is read once, from x
    assert shapes[0].input == ["x"] and {(a.name, a.i) for a in shapes[0].attribute} == {("start", 0), ("end", 1)}
    for n in (1, 3, 8):
        x = rand(n, 2, 3, seed=n)
        flat, back = cf(x)
        np.testing.assert_array_equal(flat, x.reshape(n, 6))
        np.testing.assert_array_equal(back, x)


def test_monomial_dims_multiply_at_run_time():
    cf = gc.compile(lambda x, y: F.reshape(x, -1) + F.reshape(y, -1), gc.spec(("batch", 6)), gc.spec((2, "batch", 3)),
                    provider="cpu")
    assert cf.model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "6*batch"
    for n in (1, 4):
        x, y = rand(n, 6, seed=n), rand(2, n, 3, seed=n + 1)
        np.testing.assert_allclose(cf(x, y), x.ravel() + y.ravel())


def test_symbol_read_from_the_input_that_carries_it():
    cf = gc.compile(lambda a, b: F.broadcast_to(a, (3, "n")) * F.sum(b), gc.spec((1, 1)), gc.spec((2, "n")),
                    provider="cpu")
    shape_nodes = [n for n in cf.model.graph.node if n.op_type == "Shape"]
    assert [n.input[0] for n in shape_nodes] == ["b"]
    got = cf(np.full((1, 1), 2, np.float32), np.ones((2, 5), np.float32))
    np.testing.assert_array_equal(got, np.full((3, 5), 20, np.float32))


def test_a_symbol_no_input_carries_is_a_lowering_error():
    with pytest.raises(gc.LoweringError, match="symbolic dim 'n' does not appear in any graph input"):
        gc.compile(lambda x: (x, F.full(("n",), 1.0)), gc.spec((3,)))


def test_mean_over_a_symbolic_axis_counts_at_run_time():
    def f(x):
        return F.mean(x, axis=0), F.mean(x), gc.grad(F.mean(x * x), [x])[0]
    traced = trace(f, [gc.spec(("batch", 3))])
    assert "count" in {n.op for n in traced.graph.nodes.values()}
    cf = gc.compile(f, gc.spec(("batch", 3)), provider="cpu")
    assert "Shape" in op_types(cf) and "Cast" in op_types(cf)
    for n in (1, 5):
        x = rand(n, 3, seed=n)
        col, total, g = cf(x)
        np.testing.assert_allclose(col, x.mean(0), rtol=1e-6)
        np.testing.assert_allclose(total, x.mean(), rtol=1e-5)
        np.testing.assert_allclose(g, 2 * x / x.size, rtol=1e-6)


def test_gradients_with_a_symbolic_batch_match_the_reference_evaluator():
    w, b = rand(4, 3, seed=20), rand(3, seed=21)

    def f(x, y):
        h = F.tanh(F.linear(x, w, b))
        s = F.sum(F.logsumexp(h, axis=-1)) + F.mean(F.reshape(h, -1)) + F.max(h, axis=0).sum() \
            + F.einsum("bi,bi->", h, y) + F.sum(F.broadcast_to(F.expand_dims(y, 0), (2, "batch", 3)) * h)
        return gc.grad(s, [x, y]), gc.grad(F.sum(gc.grad(s, [x])[0]), [y])
    cf = gc.compile(f, gc.spec(("batch", 4)), gc.spec(("batch", 3)), provider="cpu")
    for n in (1, 3, 6):
        x, y = rand(n, 4, seed=n), rand(n, 3, seed=n + 1)
        got = cf.run_flat(x, y)
        assert [g.shape for g in got] == [(n, 4), (n, 3), (n, 3)]
        for g, e in zip(got, evaluate(cf.graph, [x, y])):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_mean_over_static_axes_uses_no_count():
    traced = trace(lambda x: gc.grad(F.sum(F.mean(x, axis=1)), [x])[0], [gc.spec(("batch", 3))])
    assert "count" not in {n.op for n in traced.graph.nodes.values()}


def test_equal_constants_share_one_initializer():
    cf = gc.compile(lambda x: x * np.float32(3) + np.full(2, 3, np.float32) * x * 3, rand(2), provider="cpu")
    values = [onnx.numpy_helper.to_array(i) for i in cf.model.graph.initializer]
    keys = [(v.dtype.str, v.shape, v.tobytes()) for v in values]
    assert len(keys) == len(set(keys))


def test_names_are_unique_and_readable():
    cf = gc.compile(lambda x: F.log1p(x) + F.log1p(x * x), np.abs(rand(3)), provider="cpu")
    names = [n.name for n in cf.model.graph.node]
    assert len(names) == len(set(names))
    assert {"log1p_0", "log1p_1", "mul_0", "add_0"} <= set(names)
    produced = [o for n in cf.model.graph.node for o in n.output]
    assert len(produced) == len(set(produced))


def test_input_names_never_collide_with_node_names():
    cf = gc.compile(lambda add_0, exp_0: F.exp(add_0 + exp_0), rand(2), rand(2), provider="cpu")
    onnx.checker.check_model(cf.model, full_check=True)
    a, b = rand(2, seed=1), rand(2, seed=2)
    np.testing.assert_allclose(cf(a, b), np.exp(a + b), rtol=1e-6)


def test_to_onnx_reports_ops_without_float64_kernels():
    traced = trace(lambda x: F.tan(x) + F.exp(x), [np.ones(3)])
    model, float64_ops = to_onnx(traced.graph, traced.input_names)
    assert len(float64_ops) == 1 and float64_ops[0].startswith("Tan in tan_0 (test_lowering.py:")
    traced32 = trace(lambda x: F.tan(x), [np.ones(3, np.float32)])
    assert to_onnx(traced32.graph, traced32.input_names)[1] == []


def test_runtime_limits_are_what_onnxruntime_loads():
    ir, opset = runtime_limits()
    assert 7 <= ir <= onnx.IR_VERSION and MIN_OPSET <= opset <= onnx.defs.onnx_opset_version()


def everything(x, y, i):
    """One function touching every op family of the core, for the domain and opset checks."""
    h = F.tanh(F.linear(x, y, F.sum(y, 0)))
    h = F.gelu(h) + F.softplus(h, 2.0) + F.elu(h) + F.selu(h) + F.leaky_relu(h) + F.silu(h) + F.erf(h)
    h = F.where(h > 0, F.log1p(F.abs(h)), F.expm1(h)) + F.rsqrt(1 + h * h) + F.clip(h, -1, 1) ** 2
    h = F.einsum("bi,ij->bj", h, F.transpose(y)) + F.broadcast_to(F.cast(i, np.float32), (1, 4))
    s = F.logsumexp(h, axis=-1) + F.mean(h, axis=0).sum() + F.max(h) - F.min(h, axis=1) + F.prod(F.sigmoid(h), 1)
    return {"s": s, "g": gc.grad(F.sum(s), [x, y]), "flat": F.flatten(F.expand_dims(h, 1)), "n": F.add_n([i, i])}


@pytest.mark.parametrize("opset", [MIN_OPSET, None])
def test_every_model_is_standard_onnx(opset):
    specs = (gc.spec(("batch", 4)), gc.spec((4, 3)), gc.spec((4,), "int64"))
    cf = gc.compile(everything, *specs, opset=opset, provider="cpu")
    onnx.checker.check_model(cf.model, full_check=True)
    assert {n.domain for n in cf.model.graph.node} == {""}
    assert [(o.domain, o.version) for o in cf.model.opset_import] == [("", opset or runtime_limits()[1])]
    x, y, i = rand(2, 4, seed=1), rand(4, 3, seed=2), np.arange(4)
    got = cf.run_flat(x, y, i)
    for g, e in zip(got, evaluate(cf.graph, [x, y, i])):       # onnxruntime vs the numpy reference evaluator
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    out = cf(x, y, i)
    np.testing.assert_array_equal(out["n"], 2 * i)
    assert out["flat"].shape == (2, 4) and out["g"][1].shape == (4, 3)
