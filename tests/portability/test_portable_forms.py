"""The portable target's own forms, on small graphs made to reach every case: a Pad with negative
amounts is a Slice (then a Pad of the rest), and a Scan reads nothing from outside its body (its
loop-invariant operands, constants and shape tensors are state variables, nested scans and the If
of a symbolic length included) and runs forwards. Each is compared with the plain form of the
ort-cpu target and with numpy on ONNX Runtime and on onnx's ReferenceEvaluator."""
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.install_check import onnxruntime
from gcompile.ir.evaluate import evaluate
from gcompile.lowering import to_onnx
from gcompile.lowering.context import LowerContext
from gcompile.lowering.targets import get_target
from gcompile.lowering.versions import choose_opset, runtime_limits
from gcompile.passes import optimize

from .constructs import CONSTRUCTS

AVOIDED = [c for c in CONSTRUCTS if c.name in ("backward-scan", "negative-pad", "scan-outer-read")]
UNREAD = next(c for c in CONSTRUCTS if c.name == "scan-unread-input")


def on_onnxruntime(model: onnx.ModelProto, feeds: dict) -> list:
    session = onnxruntime().InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_both(model: onnx.ModelProto, feeds: dict) -> tuple[list, list]:
    """The model's outputs on ONNX Runtime (CPU) and on the ReferenceEvaluator."""
    return on_onnxruntime(model, feeds), ReferenceEvaluator(model).run(None, feeds)


def padded(target: str, begins, ends, mode: str) -> onnx.ModelProto:
    """A model of one LowerContext.pad of its input x (3, 6), lowered for `target`."""
    graph = trace(lambda x: x, [gc.spec((3, 6))]).graph
    opset = choose_opset(None)
    ctx = LowerContext(graph, opset, ["x"], target=get_target(target))
    y = ctx.pad("x", begins, ends, mode=mode)
    body = helper.make_graph(ctx.nodes, "pad", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 6])],
                             [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, None)], ctx.initializers)
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = runtime_limits()[0]
    return model


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("begins, ends", [([0, -1], [2, -2]), ([-1, 2], [1, 0]), ([-1, 0], [0, -3])])
def test_negative_pad_amounts_are_a_slice_then_a_pad(begins, ends, mode):
    x = np.arange(18, dtype=np.float32).reshape(3, 6)
    cut = x[max(0, -begins[0]):3 + min(0, ends[0]), max(0, -begins[1]):6 + min(0, ends[1])]
    want = np.pad(cut, [(max(0, b), max(0, e)) for b, e in zip(begins, ends)], mode)
    model = padded("portable", begins, ends, mode)
    assert [c.find(model) for c in AVOIDED] == [[], [], []]
    assert [n.op_type for n in model.graph.node] == ["Slice"] + ["Pad"] * any(max(0, v) for v in begins + ends)
    for got in run_both(model, {"x": x}):
        np.testing.assert_array_equal(got[0], want)
    plain = padded("ort-cpu", begins, ends, mode)                 # ONNX Runtime's Pad crops first as well
    np.testing.assert_array_equal(on_onnxruntime(plain, {"x": x})[0], want)


def looped(xs, w, h0):
    """A reverse scan whose step reads a captured weight, a constant and the batch size, and runs a
    nested scan that reads a value of its step; its gradient adds the backward scans."""
    def step(h, x):
        z = F.tanh(x @ w + h * np.float32(0.5))

        def inner(c, column):
            return c + F.tanh(column * w[0, 0]), c
        s, _ = gc.scan(inner, F.full((h.shape[0],), 0.0), F.transpose(z))
        return z + s[:, None], F.sum(z, axis=1)
    h, ys = gc.scan(step, h0, xs, reverse=True)
    loss = F.sum(h ** 2) + F.sum(ys ** 2)
    return loss, gc.grad(loss, [w, h0])


@pytest.mark.parametrize("steps", [40, "steps"], ids=["static length", "symbolic length"])
def test_portable_scans_are_closed_and_forward(steps):
    traced = trace(looped, [gc.spec((steps, "batch", 3)), gc.spec((3, 3)), gc.spec(("batch", 3))])
    optimize(traced.graph)
    rng = np.random.default_rng(7)
    feeds = {"xs": rng.standard_normal((40, 2, 3)).astype(np.float32),
             "w": (0.5 * rng.standard_normal((3, 3))).astype(np.float32),
             "h0": rng.standard_normal((2, 3)).astype(np.float32)}
    want = evaluate(traced.graph, [v.astype(np.float64) for v in feeds.values()])
    model = to_onnx(traced.graph, traced.input_names, target="portable")[0]
    scans = [n for graph in [model.graph, *(a.g for n in model.graph.node for a in n.attribute if a.g.node)]
             for n in graph.node if n.op_type == "Scan"]
    assert scans, "the loops are Scans"
    assert [c.find(model) for c in AVOIDED] == [[], [], []]
    plain = to_onnx(traced.graph, traced.input_names, target="ort-cpu")[0]
    assert any(c.find(plain) for c in AVOIDED)                    # what the portable form does differently
    results = [*run_both(model, feeds), on_onnxruntime(plain, feeds)]
    for got in results:
        for value, expected in zip(got, want):
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5 * max(1, np.abs(expected).max()))


def _nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attr.g)


def test_small_int64_constants_are_constants_in_the_loop_body():
    """Axes and target shapes that a portable Scan's body reads are Constant nodes in it, not state
    variables: OpenVINO (2026.4) infers the rank of a Reshape or a reduction only from constant ones,
    and failed to convert the backward Scan of a while loop whose step takes a mean (an If "with
    dynamic rank", or "Arguments do not have the same element type" in the Scan)."""
    def fn(x, w):
        h = gc.while_loop(lambda h: F.sum(h * h) < 20.0, lambda h: F.tanh(h @ w) + h * (1 + F.mean(h * h)), x)
        return gc.grad(F.sum(h), [x, w])
    cf = gc.compile(fn, gc.spec(("n", 3)), gc.spec((3, 3)), provider="cpu", target="portable")
    small = {t.name for t in cf.model.graph.initializer
             if t.data_type == onnx.TensorProto.INT64 and int(np.prod(t.dims)) <= 16}
    scans = [n for n in _nodes(cf.model.graph) if n.op_type == "Scan"]
    assert scans and small
    for scan in scans:
        assert not set(scan.input) & small
        body = next(a.g for a in scan.attribute if a.name == "body")
        assert any(n.op_type == "Constant" and n.attribute[0].t.data_type == onnx.TensorProto.INT64 for n in body.node)
    assert [c.find(cf.model) for c in AVOIDED] == [[], [], []]
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3)).astype(np.float32), (0.5 * rng.standard_normal((3, 3))).astype(np.float32)
    want = evaluate(trace(fn, [x.astype(np.float64), w.astype(np.float64)]).graph, [x, w])
    for got in run_both(cf.model, {"x": x, "w": w}):
        for value, expected in zip(got, want):
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5 * max(1, np.abs(expected).max()))


def counted(h0, w):
    """Scans without xs (a scan given `length`, forwards and in reverse, and a fori_loop), whose
    steps read a captured weight; their gradients add the backward loops."""
    h, ys = gc.scan(lambda h, _: (F.tanh(h @ w), F.sum(h, axis=1)), h0, length=3)
    g, zs = gc.scan(lambda h, _: (h * np.float32(0.9) + F.sin(h), h[:, 0]), h, length=4, reverse=True)
    k = gc.fori_loop(0, 2, lambda i, c: F.tanh(c @ w), g)
    loss = F.sum(k ** 2) + F.sum(ys * ys) + F.sum(zs)
    return [loss, ys, zs, *gc.grad(loss, [w, h0])]


@pytest.mark.parametrize("batch", [2, "batch"], ids=["static size", "symbolic size"])
def test_portable_scans_without_xs_are_counted_loops(batch):
    """A scan with nothing to scan over is a Loop with a trip count in the portable form: OpenVINO
    (2026.4) ran the ort-cpu target's Scan over an unread placeholder for one step instead of three."""
    traced = trace(counted, [gc.spec((batch, 3)), gc.spec((3, 3))])
    optimize(traced.graph)
    rng = np.random.default_rng(5)
    feeds = {"h0": rng.standard_normal((2, 3)).astype(np.float32),
             "w": (0.5 * rng.standard_normal((3, 3))).astype(np.float32)}
    want = evaluate(traced.graph, [v.astype(np.float64) for v in feeds.values()])
    model = to_onnx(traced.graph, traced.input_names, target="portable")[0]
    assert [n.op_type for n in _nodes(model.graph)].count("Loop") == 3
    assert not UNREAD.find(model)                                 # the backward Scans have residuals to read
    plain = to_onnx(traced.graph, traced.input_names, target="ort-cpu")[0]
    assert UNREAD.find(plain)
    for got in [*run_both(model, feeds), on_onnxruntime(plain, feeds)]:
        assert len(got) == len(want)
        for value, expected in zip(got, want):
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5 * max(1, np.abs(expected).max()))


GROUPED = next(c for c in CONSTRUCTS if c.name == "grouped-conv-transpose")


def grouped(x, w, v, stride, pad, dilation, output_padding):
    """A grouped conv_transpose (4 -> 6 channels, 2 groups) and a grouped conv (4 -> 6 channels, 2
    groups) with their gradients: the conv's input gradient is a grouped conv_transpose as well."""
    u = F.conv_transpose(x, w, stride=stride, pad=pad, dilation=dilation, groups=2, output_padding=output_padding)
    y = F.conv(F.tanh(x), v, stride=stride, pad=pad, dilation=dilation, groups=2)
    loss = F.sum(u ** 2) + F.sum(y ** 3)
    return [u, y, *gc.grad(loss, [x, w, v])]


@pytest.mark.parametrize("stride, pad, dilation, output_padding", [
    (1, 0, 1, 0), (2, 1, 1, 1), ((2, 3), ((2, 0), (1, 3)), (1, 2), (1, 2)), (3, 3, 2, 0)],
    ids=["plain", "stride 2", "mixed", "crops"])
@pytest.mark.parametrize("batch", [2, "batch"], ids=["static batch", "symbolic batch"])
def test_portable_grouped_conv_transposes_are_convs(stride, pad, dilation, output_padding, batch):
    """A ConvTranspose with more than one channel per group is, in the portable form, the Conv it is
    the adjoint of over the input stuffed with zeros: onnx's ReferenceEvaluator (1.23) computes the
    grouped ConvTranspose wrongly or fails on it (onnx/onnx#8446)."""
    specs = [gc.spec((batch, 4, 7, 6)), gc.spec((4, 3, 2, 3)), gc.spec((6, 2, 3, 2))]
    traced = trace(lambda x, w, v: grouped(x, w, v, stride, pad, dilation, output_padding), specs)
    optimize(traced.graph)
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((2, 4, 7, 6)).astype(np.float32),
             "w": (0.5 * rng.standard_normal((4, 3, 2, 3))).astype(np.float32),
             "v": (0.5 * rng.standard_normal((6, 2, 3, 2))).astype(np.float32)}
    want = evaluate(traced.graph, [v.astype(np.float64) for v in feeds.values()])
    model = to_onnx(traced.graph, traced.input_names, target="portable")[0]
    assert not GROUPED.find(model)
    plain = to_onnx(traced.graph, traced.input_names, target="cuda")[0]   # the plain forms, no strategy
    assert len(GROUPED.find(plain)) >= 2                          # conv_transpose and the conv's input gradient
    for got in [*run_both(model, feeds), on_onnxruntime(plain, feeds)]:
        assert len(got) == len(want)
        for value, expected in zip(got, want):
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5 * max(1, np.abs(expected).max()))
