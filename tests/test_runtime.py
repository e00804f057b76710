"""gc.compile's contract: inputs, constants, output structures, the ONNX model, saving,
providers, input checking, symbolic dims, names and source lines, determinism, opsets."""
import inspect
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.lowering.seal import SIZE as SEAL_SIZE
from gcompile.lowering.versions import MIN_OPSET, runtime_limits
from gcompile.runtime.providers import cuda_available

W = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def mlp(x):
    return F.log(F.sum(F.exp(F.relu(x @ W)), axis=-1))


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_specs_and_example_arrays_give_the_same_model():
    x = rand(2, 4)
    a = gc.compile(mlp, gc.spec((2, 4)), provider="cpu")
    b = gc.compile(mlp, x, provider="cpu")
    assert a.model.SerializeToString() == b.model.SerializeToString()
    np.testing.assert_allclose(a(x), np.log(np.exp(np.maximum(x @ W, 0)).sum(-1)), rtol=1e-5)


def test_closed_over_arrays_become_initializers_and_scalars_constants():
    cf = gc.compile(lambda x: x @ W * 2.5 + 1, rand(2, 4), provider="cpu")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in cf.model.graph.initializer}
    assert any(v.shape == W.shape and np.array_equal(v, W) for v in inits.values())
    assert any(v.shape == () and v == np.float32(2.5) for v in inits.values())
    assert [i.name for i in cf.model.graph.input] == ["x"]       # weights are not inputs


@pytest.mark.parametrize("structure", ["tensor", "tuple", "list", "dict", "nested"])
def test_output_structures_round_trip(structure):
    x = rand(3, seed=1)

    def f(x):
        a, b, c = x * 2, x + 1, x.sum()
        return {"tensor": a, "tuple": (a, b), "list": [a, b, c], "dict": {"double": a, "total": c},
                "nested": {"pair": (a, [b, c]), "list": [{"x2": a}]}}[structure]

    expected = f(x)  # numpy runs the same function on arrays
    got = gc.compile(f, x, provider="cpu")(x)

    def same(g, e):
        assert type(g) is type(e) or isinstance(e, np.generic) and isinstance(g, np.ndarray)
        if isinstance(e, dict):
            assert list(g) == list(e)
            for k in e:
                same(g[k], e[k])
        elif isinstance(e, (tuple, list)):
            assert len(g) == len(e)
            for gi, ei in zip(g, e):
                same(gi, ei)
        else:
            np.testing.assert_allclose(g, e, rtol=1e-6)
    same(got, expected)


def test_outputs_are_freed_as_soon_as_the_caller_drops_them():
    # A reference cycle in output rebuilding once kept every call's arrays alive until the
    # cyclic collector ran, so each call touched fresh memory (2-3 ms per step on W1).
    import gc as collector
    import weakref
    x = rand(3, seed=1)
    cf = gc.compile(lambda x: {"pair": (x * 2, [x + 1])}, x, provider="cpu")
    collector.disable()
    try:
        out = cf(x)
        refs = [weakref.ref(out["pair"][0]), weakref.ref(out["pair"][1][0])]
        del out
        assert [r() for r in refs] == [None, None]
    finally:
        collector.enable()


def test_dict_output_names_become_onnx_output_names():
    cf = gc.compile(lambda x: {"loss": F.sum(x), "x": x * 2}, rand(3), provider="cpu")
    assert [o.name for o in cf.model.graph.output] == ["loss", "x_out"]


def test_model_is_valid_standard_onnx_and_loads_in_onnxruntime():
    cf = gc.compile(mlp, gc.spec(("batch", 4)), provider="cpu")
    onnx.checker.check_model(cf.model, full_check=True)
    assert {o.domain for o in cf.model.opset_import} == {""}
    assert {n.domain for n in cf.model.graph.node} <= {""}
    ir_max, opset_max = runtime_limits()
    assert cf.model.ir_version <= ir_max
    assert cf.model.opset_import[0].version == opset_max
    assert cf.model.producer_name == "gcompile"
    ort.InferenceSession(cf.model.SerializeToString(), providers=["CPUExecutionProvider"])


def unsealed(path) -> bytes:
    """The bytes of a saved model after its seal, the metadata entry gcompile writes first (lowering/serialize.py)."""
    with open(path, "rb") as fh:
        data = fh.read()
    assert onnx.load_from_string(data).metadata_props[0].key == "gcompile.sha256"
    return data[SEAL_SIZE:]


def test_save_writes_the_model_atomically(tmp_path):
    cf = gc.compile(mlp, gc.spec(("batch", 4)), provider="cpu")
    path = tmp_path / "sub" / "mlp.onnx"
    cf.save(path)
    cf.save(str(path))                           # overwrite in place
    assert os.listdir(tmp_path / "sub") == ["mlp.onnx"]                     # no temporary files left
    assert unsealed(path) == cf.model_for("portable").SerializeToString()
    cf.save(path, target="ort-cpu")              # the model this process runs, written on request
    assert unsealed(path) == cf.model.SerializeToString()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = rand(5, 4, seed=2)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], cf(x), rtol=1e-6)


def test_failed_save_leaves_no_temporary_file(tmp_path):
    cf = gc.compile(mlp, gc.spec((1, 4)), provider="cpu")
    (tmp_path / "taken").mkdir()                  # a folder where the file should go: the rename fails
    with pytest.raises(gc.GcompileError, match="cannot save .*taken: Is a directory"):
        cf.save(tmp_path / "taken")
    assert os.listdir(tmp_path) == ["taken"] and os.listdir(tmp_path / "taken") == []


def test_provider_choice():
    cf = gc.compile(mlp, gc.spec((1, 4)), provider="cpu")
    assert cf.provider == "cpu"
    auto = gc.compile(mlp, gc.spec((1, 4)))
    assert auto.provider == ("cuda" if cuda_available() else "cpu")
    if cuda_available():
        assert gc.compile(mlp, gc.spec((1, 4)), provider="cuda").provider == "cuda"
    else:
        with pytest.raises(gc.GcompileError, match="provider 'cuda' was requested but the CUDA execution provider"):
            gc.compile(mlp, gc.spec((1, 4)), provider="cuda")
    with pytest.raises(gc.GcompileError, match="unknown provider 'tpu'"):
        gc.compile(mlp, gc.spec((1, 4)), provider="tpu")


def test_float64_model_with_an_op_the_cpu_provider_lacks_is_refused_clearly():
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(gc.GcompileError) as err:
        gc.compile(lambda x: F.erf(x), np.ones(3), provider="cpu")
    message = str(err.value)
    assert "no float64 kernel for: Erf in erf_0" in message and f"test_runtime.py:{line}" in message
    assert "float32" in message


# -- input checking --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_inputs():
    return gc.compile(lambda x, y: x * 2 + F.sum(y), gc.spec(("batch", 3)), gc.spec(("batch", 2), "int64"),
                      provider="cpu")


def test_wrong_number_of_inputs(two_inputs):
    with pytest.raises(gc.InputError, match=r"takes 2 inputs \(x, y\), got 1"):
        two_inputs(np.ones((2, 3), np.float32))


def test_wrong_dtype_names_the_input_and_both_dtypes_and_how_to_convert(two_inputs):
    with pytest.raises(gc.InputError, match=r"input 'x': expected dtype float32, got float64 \(convert it with "
                                            r"\.astype\(np\.float32\)\)"):
        two_inputs(np.ones((2, 3)), np.ones((2, 2), np.int64))
    with pytest.raises(gc.InputError, match=r"input 'y': expected dtype int64, got int32 \(convert it with "
                                            r"\.astype\(np\.int64\)\)"):
        two_inputs(np.ones((2, 3), np.float32), np.ones((2, 2), np.int32))
    with pytest.raises(gc.InputError, match=r"input 'x': expected dtype float32, got string$"):   # not 'str32'
        two_inputs(np.array([["a", "b", "c"]]), np.ones((1, 2), np.int64))


def test_wrong_shape_names_the_input_and_both_shapes(two_inputs):
    with pytest.raises(gc.InputError, match=r"input 'x': expected shape \(batch, 3\), got \(2, 4\)"):
        two_inputs(np.ones((2, 4), np.float32), np.ones((2, 2), np.int64))
    with pytest.raises(gc.InputError, match=r"input 'y': expected shape \(batch, 2\), got \(2,\)"):
        two_inputs(np.ones((2, 3), np.float32), np.ones(2, np.int64))


def test_symbol_bound_to_two_sizes_names_both(two_inputs):
    with pytest.raises(gc.InputError, match=r"symbolic dim 'batch' is 2 in input 'x' but 5 in input 'y'"):
        two_inputs(np.ones((2, 3), np.float32), np.ones((5, 2), np.int64))


def test_inputs_are_accepted_as_non_contiguous_arrays(two_inputs):
    x = np.ones((3, 6), np.float32)[:, ::2]
    np.testing.assert_allclose(two_inputs(x, np.ones((3, 2), np.int64)), x * 2 + 6)


def test_symbolic_dims_are_dim_params_and_run_at_any_size():
    cf = gc.compile(mlp, gc.spec(("batch", 4)), provider="cpu")
    (dim0, dim1), = [i.type.tensor_type.shape.dim for i in cf.model.graph.input]
    assert dim0.dim_param == "batch" and dim1.dim_value == 4
    assert cf.model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for n in (1, 2, 17):
        x = rand(n, 4, seed=n)
        np.testing.assert_allclose(cf(x), np.log(np.exp(np.maximum(x @ W, 0)).sum(-1)), rtol=1e-5)


# -- names, source lines, determinism --------------------------------------------------------------
def test_nodes_carry_readable_names_and_the_user_source_line():
    line = inspect.currentframe().f_lineno + 1
    cf = gc.compile(lambda x: F.exp(x) * 2, rand(3), provider="cpu")
    nodes = {n.op_type: n for n in cf.model.graph.node}
    assert nodes["Exp"].name == "exp_0" and nodes["Mul"].name == "mul_0"
    assert f"test_runtime.py:{line}" in nodes["Exp"].doc_string
    assert f"test_runtime.py:{line}" in nodes["Mul"].doc_string


def test_compiling_twice_is_byte_identical():
    def f(x, y):
        h = F.tanh(x @ W + np.arange(3, dtype=np.float32))
        return {"out": F.logsumexp(h * y, axis=-1), "g": gc.grad(F.sum(h), [x])[0]}
    specs = (gc.spec(("batch", 4)), gc.spec(("batch", 3)))
    assert gc.compile(f, *specs).model.SerializeToString() == gc.compile(f, *specs).model.SerializeToString()


@pytest.mark.parametrize("opset", [MIN_OPSET, runtime_limits()[1]])
def test_opset_override_within_range(opset):
    cf = gc.compile(mlp, gc.spec(("batch", 4)), opset=opset, provider="cpu")
    assert cf.model.opset_import[0].version == opset
    onnx.checker.check_model(cf.model, full_check=True)
    x = rand(2, 4)
    np.testing.assert_allclose(cf(x), np.log(np.exp(np.maximum(x @ W, 0)).sum(-1)), rtol=1e-5)


@pytest.mark.parametrize("opset", [MIN_OPSET - 1, runtime_limits()[1] + 1])
def test_opset_outside_range_is_a_clear_error(opset):
    limits = f"\\({MIN_OPSET}\\.\\.{runtime_limits()[1]}\\)"
    with pytest.raises(gc.UnsupportedError, match=f"opset {opset} is outside .*{limits}"):
        gc.compile(mlp, gc.spec((1, 4)), opset=opset)


def test_output_that_is_an_input_and_a_tensor_returned_twice():
    x = rand(2, 3, seed=3)
    cf = gc.compile(lambda x: (x, x * 2, x * 2, x), x, provider="cpu")
    onnx.checker.check_model(cf.model, full_check=True)
    a, b, c, d = cf(x)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(d, x)
    np.testing.assert_allclose(b, x * 2)
    np.testing.assert_allclose(c, x * 2)


def test_constant_output_and_unused_input():
    cf = gc.compile(lambda x, y: (x + 1, np.arange(3.0)), rand(2), rand(4), provider="cpu")
    a, b = cf(np.ones(2, np.float32), np.zeros(4, np.float32))
    np.testing.assert_array_equal(a, [2, 2])
    np.testing.assert_array_equal(b, [0, 1, 2])


def test_compiled_function_exposes_its_graph_and_input_names():
    cf = gc.compile(lambda images, labels: images.sum() + labels.sum(), rand(2), np.ones(2, np.int64), provider="cpu")
    assert cf.input_names == ["images", "labels"]
    assert [i.name for i in cf.model.graph.input] == ["images", "labels"]
    assert {n.op for n in cf.graph.nodes.values()} >= {"input", "reduce_sum"}


def test_output_names_never_collide():
    cf = gc.compile(lambda x: {"x": x * 2, "x_out": x * 3}, rand(3), provider="cpu")
    names = [o.name for o in cf.model.graph.output]
    assert len(set(names)) == 2 and "x" not in names
    out = cf(np.ones(3, np.float32))
    np.testing.assert_allclose(out["x"], 2)
    np.testing.assert_allclose(out["x_out"], 3)


def test_reduction_axis_on_a_scalar_is_an_error():
    with pytest.raises(gc.ShapeError, match="out of range"):
        gc.compile(lambda x: F.sum(x, axis=0), np.float32(1.0), provider="cpu")


def test_device_values_skip_the_copy_and_give_the_same_result():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    cf = gc.compile(lambda x, w: F.tanh(x @ w), gc.spec(("batch", 3)), w, provider="cpu")
    x = np.ones((2, 3), np.float32)
    w_dev = cf.to_device(w)
    np.testing.assert_array_equal(cf(x, w_dev), cf(x, w))
    with pytest.raises(gc.InputError, match="'w'.*expected shape"):
        cf(x, cf.to_device(np.ones((4, 3), np.float32)))
    with pytest.raises(gc.InputError, match="expected dtype float32, got float64"):
        cf(x, cf.to_device(w.astype(np.float64)))


def test_check_numerics_reads_device_values_too():
    """A NaN in an OrtValue input was not checked, and the NaN output was reported 'although every
    input is finite'."""
    cf = gc.compile(lambda x, w: x @ w, gc.spec((2, 3)), gc.spec((3, 4)), provider="cpu", check_numerics=True)
    w = np.ones((3, 4), np.float32)
    w[2, 1] = np.nan
    with pytest.raises(gc.InputError, match=r"input 'w' of .* has 1 NaN value\(s\), the first at index \(2, 1\)"):
        cf(np.ones((2, 3), np.float32), cf.to_device(w))


def test_saved_artifacts_follow_the_umask(tmp_path):
    cf = gc.compile(lambda x: x * 2, rand(3), provider="cpu")
    old = os.umask(0o022)
    try:
        cf.save(tmp_path / "m.onnx")
    finally:
        os.umask(old)
    assert (tmp_path / "m.onnx").stat().st_mode & 0o777 == 0o644


def test_sessions_keep_zero_padding_before_a_max_pool_of_a_foreign_model():
    # onnxruntime's Pad_Fusion would merge this Pad into the MaxPool, whose pads count as -inf:
    # the padded zeros, each window's maximum here, would be lost. gcompile's sessions turn it off.
    from onnx import TensorProto, helper, numpy_helper

    from gcompile.runtime.providers import make_session
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["padded"]),
         helper.make_node("MaxPool", ["padded"], ["y"], kernel_shape=[2], strides=[2])], "pad_then_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 1], np.int64), "pads")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    x = -np.array([[[0.3, 0.6, 0.9, 0.2]]], np.float32)
    np.testing.assert_array_equal(make_session(model.SerializeToString(), "cpu").run(None, {"x": x})[0],
                                  np.array([[[0.0, -0.6, 0.0]]], np.float32))
