"""An inference-mode BatchNormalization of a Conv's (or ConvTranspose's) output that nothing else
reads is imported as one such op with scaled filters (ops/conv.py conv_batch_norm): the same values
and gradients, to any order, as the two ops, on ONNX Runtime, at static and symbolic batch sizes;
and not where the convolution's output is read elsewhere."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import gcompile as gc
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.testing import check_grad

from .helpers import model

RNG = np.random.default_rng(7)
PARAMS = ("W", "B", "scale", "shift", "mean", "var")


def weight_shape(op, channels, filters, groups, kernel) -> tuple:
    return (filters, channels // groups, *kernel) if op == "Conv" else (channels, filters // groups, *kernel)


def conv_bn_model(dtype, channels=2, filters=3, kernel=(3, 3), bias=True, readers=(), op="Conv", **conv_attrs):
    """x -> Conv (or `op`) -> BatchNormalization (inference) -> y; `readers`: more uses of the
    convolution's output z ("output": z is a graph output too, "node": a Sigmoid reads it, added to y)."""
    ins = ["x", "W"] + (["B"] if bias else [])
    nodes = [helper.make_node(op, ins, ["z"], **conv_attrs),
             helper.make_node("BatchNormalization", ["z", "scale", "shift", "mean", "var"],
                              ["y" if "node" not in readers else "n"], epsilon=1e-3)]
    if "node" in readers:
        nodes += [helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Add", ["n", "s"], ["y"])]
    outputs = [("y", None)] + ([("z", None)] if "output" in readers else [])
    spatial = ["h", "w"][-len(kernel):] if len(kernel) < 3 else ["d", "h", "w"]
    groups = conv_attrs.get("group", 1)
    inits = [("W", np.zeros(weight_shape(op, channels, filters, groups, kernel), dtype)),
             ("scale", np.ones(filters, dtype)),
             ("shift", np.zeros(filters, dtype)), ("mean", np.zeros(filters, dtype)), ("var", np.ones(filters, dtype))]
    inits += [("B", np.zeros(filters, dtype))] if bias else []
    return model(nodes, [("x", ["N", channels, *spatial])], outputs, inits, opset=17, dtype=dtype)


def params(channels=2, filters=3, kernel=(3, 3), groups=1, bias=True, op="Conv"):
    values = {"W": RNG.standard_normal(weight_shape(op, channels, filters, groups, kernel)),
              "B": RNG.standard_normal(filters),
              "scale": RNG.standard_normal(filters), "shift": RNG.standard_normal(filters),
              "mean": RNG.standard_normal(filters), "var": RNG.random(filters) + 0.5}
    return {k: v for k, v in values.items() if bias or k != "B"}


def imported(readers=(), channels=2, filters=3, kernel=(3, 3), bias=True, op="Conv", **conv_attrs):
    """fn(x, *params) running the model built for x's dtype (so that check_grad's float64
    reference and its float32 ONNX models each get theirs)."""
    names = [p for p in PARAMS if bias or p != "B"]

    def fn(x, *values):
        m = gc.load_onnx(conv_bn_model(np.dtype(x.dtype).type, channels, filters, kernel, bias, readers, op,
                                       **conv_attrs))
        out = m(x, params=dict(zip(names, values)))
        return out[0] if isinstance(out, tuple) else out
    return fn


GEOMETRIES = {
    "plain": dict(pads=[1, 1, 1, 1]),
    "no_bias": dict(pads=[1, 1, 1, 1], bias=False),
    "strided_uneven_pads": dict(strides=[2, 2], pads=[0, 1, 2, 0]),
    "grouped": dict(group=2, channels=4, filters=4, pads=[1, 1, 1, 1]),
    "depthwise_dilated": dict(group=3, channels=3, filters=3, dilations=[2, 1], pads=[2, 1, 2, 1]),
    "one_d": dict(kernel=(3,), pads=[1, 0]),
    "transpose_strided": dict(op="ConvTranspose", strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 0]),
    "transpose_grouped_no_bias": dict(op="ConvTranspose", group=2, channels=4, filters=6, pads=[0, 1, 1, 0],
                                      bias=False),
}


def _case(name, readers=()):
    attrs = dict(GEOMETRIES[name])
    shape = dict(channels=attrs.pop("channels", 2), filters=attrs.pop("filters", 3),
                 kernel=attrs.pop("kernel", (3, 3)), bias=attrs.pop("bias", True), op=attrs.pop("op", "Conv"))
    values = params(shape["channels"], shape["filters"], shape["kernel"], attrs.get("group", 1), shape["bias"],
                    shape["op"])
    x = RNG.standard_normal((2, shape["channels"], *([5] * len(shape["kernel"]))))
    return imported(readers, **shape, **attrs), x, list(values.values())


def _value_and_grads(fn, arrays):
    """fn's output and its gradients w.r.t. every argument (of L = Σ y·v), from the float64 graph
    on the reference evaluator."""
    v = np.random.default_rng(1).standard_normal(evaluate(trace(fn, arrays).graph, arrays)[0].shape)

    def step(*args):
        return fn(*args), gc.grad(lambda *a: (fn(*a) * v).sum(), argnums=tuple(range(len(args))))(*args)
    return evaluate(trace(step, arrays).graph, arrays)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_folded_conv_gradients_first_and_second_order(name):
    fn, x, values = _case(name)
    traced = trace(fn, [x.astype(np.float32), *(v.astype(np.float32) for v in values)])
    assert "batch_norm_inference" not in {n.op for n in traced.graph.nodes.values()}
    two_ops = _case(name, readers=("output",))[0]
    for got, want in zip(_value_and_grads(fn, [x, *values]), _value_and_grads(two_ops, [x, *values])):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    check_grad(fn, [x, *values], order=1)
    check_grad(fn, [x, *values], order=2)


@pytest.mark.parametrize("readers", [("output",), ("node",)])
def test_a_conv_output_read_elsewhere_keeps_its_normalisation(readers):
    values = params()
    x = RNG.standard_normal((2, 2, 5, 5))
    fn = imported(readers, pads=[1, 1, 1, 1])
    ops = [n.op for n in trace(fn, [x.astype(np.float32), *(v.astype(np.float32) for v in values.values())])
           .graph.nodes.values()]
    assert ops.count("batch_norm_inference") == 1 and ops.count("conv") == 1
    check_grad(fn, [x, *values.values()], order=1)


def _both(x, values, dtype=np.float32):
    """(y, dL/d(x, params)) of the folded model and of the same model with z also a graph output
    (kept as two ops), for L = Σ y·v, each on ONNX Runtime."""
    v = RNG.standard_normal((2, 3, 5, 5)).astype(dtype)
    results = []
    arrays = [x.astype(dtype), *(p.astype(dtype) for p in values)]
    for readers in ((), ("output",)):
        fn = imported(readers, pads=[1, 1, 1, 1])
        loss = lambda *a, fn=fn: (fn(*a) * v).sum()  # noqa: E731
        step = lambda *a, fn=fn, loss=loss: (fn(*a), gc.grad(loss, argnums=tuple(range(len(a))))(*a))  # noqa: E731
        results.append(gc.compile(step, *arrays, provider="cpu")(*arrays))
    return results


def test_degenerate_statistics_and_nonfinite_inputs_match_the_two_ops():
    """A zero scale, a zero variance (var + eps = eps) and a negative one past -eps (NaN scale) give
    the same values and gradients as the two ops; so does an input with an infinity and a NaN,
    whose non-finite outputs fall in the same places (each is inf·w·s either way)."""
    values = params()
    values["scale"][0], values["var"][1], values["var"][2] = 0.0, 0.0, -1.0
    x = RNG.standard_normal((2, 2, 5, 5))
    (y, grads), (y_ref, grads_ref) = _both(x, list(values.values()))
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(y[:, 2]).all() and np.isfinite(y[:, :2]).all()
    for g, g_ref in zip(grads, grads_ref):
        np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    x[0, 0, 2, 2], x[1, 1, 0, 4] = np.inf, np.nan
    values["var"][2] = 1.0
    (y, _), (y_ref, _) = _both(x, list(values.values()))
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(y), test(y_ref))
    assert np.isinf(y).any() and np.isnan(y).any()
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_import_time_folding_of_constant_parameters():
    """With the weights and statistics the model's own initializers (an inference model), the
    scaled filters are computed from constants and the model gives the two ops' values."""
    values = {k: v.astype(np.float32) for k, v in params().items()}
    m = conv_bn_model(np.float32, pads=[1, 1, 1, 1])
    for init in m.graph.initializer:
        init.CopyFrom(helper.make_tensor(init.name, TensorProto.FLOAT, values[init.name].shape,
                                         values[init.name].ravel().tolist()))
    x = RNG.standard_normal((3, 2, 5, 5)).astype(np.float32)
    got = gc.compile(gc.load_onnx(m), gc.spec(("n", 2, 5, 5)), provider="cpu")(x)
    from .helpers import ort_run
    np.testing.assert_allclose(got, ort_run(m, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_translator_notes_tell_values_of_two_graphs_apart():
    """A loop body's values and those of the graph around it are numbered alike: a note about one
    (a Conv's output, a QuantizeLinear's) is not found for the other."""
    from gcompile.frontend.tensor import Tensor
    from gcompile.importer.inline import Inliner
    outer, body = (trace(lambda x: x * 2.0, [gc.spec((2,))]) for _ in range(2))
    a, b = (Tensor(t.graph, t.graph.outputs[0], t.graph.type_of(t.graph.outputs[0])) for t in (outer, body))
    assert a.ref == b.ref and a.graph is not b.graph
    inliner = Inliner({"": 17})
    inliner.note("conv", a, "fact")
    assert inliner.noted("conv", a) == "fact" and inliner.noted("conv", b) is None
    assert inliner.noted("conv", np.zeros(2)) is None


def _fact_outside_reader_inside(kind: str, chain: int):
    """A value a translator notes a fact about outside a Loop, and inside the Loop's body (two
    steps) `chain` + 1 Neg nodes on the carried value and then the op that would use the fact:
    kind "conv": x -> Conv -> BatchNormalization -> y outside, the body normalises its value with
    the same statistics; kind "quantize": x -> QuantizeLinear -> q outside (int8), the body
    dequantizes its int8 value with the same scale. Neither body value comes from the outer op,
    whatever number it gets in the body."""
    reader = {"conv": ("BatchNormalization", ["scale", "shift", "mean", "var"], TensorProto.FLOAT),
              "quantize": ("DequantizeLinear", ["qs", "qz"], TensorProto.INT8)}[kind]
    op, operands, elem = reader
    body_nodes = [helper.make_node("Identity", ["v_in"], ["v0"])]
    body_nodes += [helper.make_node("Neg", [f"v{i}"], [f"v{i + 1}"]) for i in range(chain)]
    body_nodes += [helper.make_node("Neg", [f"v{chain}"], ["u"]),            # read by `op` alone
                   helper.make_node(op, ["u", *operands], ["read"], **({"epsilon": 1e-3} if kind == "conv" else {})),
                   helper.make_node("Identity", [f"v{chain}"], ["v_out"]),
                   helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    body = helper.make_graph(body_nodes, "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_in", elem, None)],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_out", elem, None),
                              helper.make_tensor_value_info("read", TensorProto.FLOAT, None)])
    if kind == "conv":
        nodes = [helper.make_node("Conv", ["x", "W", "B"], ["z"], pads=[1, 1, 1, 1]),
                 helper.make_node("BatchNormalization", ["z", "scale", "shift", "mean", "var"], ["y"], epsilon=1e-3)]
        inits = [(k, v.astype(np.float32)) for k, v in params(channels=3, filters=3).items()]
    else:
        nodes = [helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["y"])]
        inits = [("qs", np.float32(0.05)), ("qz", np.int8(3))]
    nodes.append(helper.make_node("Loop", ["trips", "", "y"], ["last", "reads"], body=body))
    return model(nodes, [("x", ["N", 3, 4, 4])], [("last", None, elem), ("reads", None)],
                 inits + [("trips", np.int64(2))], opset=17)


@pytest.mark.parametrize("kind", ["conv", "quantize"])
@pytest.mark.parametrize("chain", range(40))    # past the numbers of both outer values
def test_a_note_about_the_graph_around_a_loop_does_not_reach_its_body(kind, chain):
    """The body's reader computes what ONNX Runtime computes, for every number its input gets in
    the body: a note keyed by number alone once folded a body's normalisation into the outer
    convolution."""
    from .helpers import ort_run
    m = _fact_outside_reader_inside(kind, chain)
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    got = gc.compile(gc.load_onnx(m), gc.spec(("n", 3, 4, 4)), provider="cpu")(x)
    for g, want in zip(got, ort_run(m, {"x": x})):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_a_conv_output_read_around_a_branch_keeps_its_normalisation_in_it():
    """An If whose condition is known at import runs its branch in the graph around it: a
    BatchNormalization there that reads the outer Conv's output, which the outer graph also
    returns, is not that value's only reader and stays a normalisation."""
    stats = ["scale", "shift", "mean", "var"]
    branch = helper.make_graph([helper.make_node("BatchNormalization", ["z", *stats], ["n"], epsilon=1e-3)],
                               "then", [], [helper.make_tensor_value_info("n", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["z"], ["m"])], "else", [],
                              [helper.make_tensor_value_info("m", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["z"], pads=[1, 1, 1, 1]),
             helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)]
    values = params()
    inits = [(k, v.astype(np.float32)) for k, v in values.items()] + [("cond", np.array(True))]
    m = model(nodes, [("x", ["N", 2, 5, 5])], [("y", None), ("z", None)], inits, opset=17)
    x = RNG.standard_normal((2, 2, 5, 5)).astype(np.float32)
    ops = [n.op for n in trace(lambda x: gc.load_onnx(m)(x), [x]).graph.nodes.values()]
    assert ops.count("batch_norm_inference") == 1 and ops.count("conv") == 1
    from .helpers import ort_run
    for got, want in zip(gc.compile(gc.load_onnx(m), gc.spec(("n", 2, 5, 5)), provider="cpu")(x), ort_run(m, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
