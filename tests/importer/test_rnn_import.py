"""ONNX LSTM, GRU and RNN nodes through gc.load_onnx: models exported from PyTorch
(tools/make_rnn_onnx_fixtures.py) against onnxruntime and PyTorch's outputs and gradients;
hand-built nodes with every supported attribute and optional input against onnxruntime's own
kernels; float64 gradient checks to second order with sequence_lens; the refusals; and the
sha256 check of a built artifact against the manifest.json beside it."""
import hashlib
import json
import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gcompile as gc
import gcompile.functions as F
from gcompile.artifacts.build import build
from gcompile.frontend.trace import trace
from gcompile.testing import check_grad

from .test_torch_fixtures import close

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "rnn")
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE}


def _ort(model, feeds):
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


# -- models exported from PyTorch ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lstm", "gru", "rnn", "lstm_packed", "gru_packed"])
def test_exported_models_match_onnxruntime_and_pytorch(name):
    path = os.path.join(DATA, f"{name}.onnx")
    f, data = gc.load_onnx(path), np.load(os.path.join(DATA, f"{name}.npz"))
    feeds = [data[f"in__{n}"] for n in f.input_names]
    floats = [i for i, x in enumerate(feeds) if x.dtype.kind == "f"]
    params = [k[len("grad__"):] for k in data.files if k.startswith("grad__") and k[len("grad__"):] in f.params]
    assert len(params) == (8 if name == "rnn" else 16)
    weights = [data[f"w__{k}"].astype(np.float32) for k in range(len(f.output_names))]

    def step(*args):
        xs, ws, ps = args[:len(feeds)], args[len(feeds):len(feeds) + len(weights)], args[len(feeds) + len(weights):]
        outs = f(*xs, params=dict(zip(params, ps)))
        loss = F.add_n([F.sum(o * w) for o, w in zip(outs, ws)])
        return outs, gc.grad(loss, [xs[i] for i in floats] + list(ps))

    specs = f.input_specs()
    assert all(s.shape[-2 if s.shape[0] != "batch" else 0] == "batch" for s in specs)   # batch stays symbolic
    w_specs = [gc.spec((w.shape[0], "batch") + w.shape[2:]) for w in weights]
    compiled = gc.compile(step, *specs, *w_specs, *[f.params[p] for p in params], provider="cpu")
    outs, grads = compiled(*feeds, *weights, *[f.params[p] for p in params])

    for k, (got, runtime) in enumerate(zip(outs, _ort(path, dict(zip(f.input_names, feeds))))):
        np.testing.assert_allclose(got, runtime, rtol=1e-5, atol=1e-6, err_msg=f"output {k} vs onnxruntime")
        close(got, data[f"out__{k}"], f"output {k} vs PyTorch")
    if name.endswith("_packed"):        # zero past each sequence's end, as PyTorch pads
        lengths = data["in__lengths"]
        assert all(np.all(outs[0][lengths[b]:, b] == 0) for b in range(len(lengths)))
    names = [f.input_names[i] for i in floats] + params
    for n, g in zip(names, grads):
        close(g, data[f"grad__{n}"], f"gradient w.r.t. {n}")


# -- hand-built nodes against onnxruntime's kernels ------------------------------------------------------
def rnn_model(op, direction="forward", *, steps=4, batch=3, features=2, hidden=3, lengths=True, states=True,
              bias=True, peepholes=False, layout=0, dtype=np.float32, seed=0, **attrs):
    """A one-node model: X, sequence_lens and the initial states are graph inputs (those asked for),
    W, R, B, P initializers. Returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    dirs, gates = (2 if direction == "bidirectional" else 1), GATES[op]
    inits = {"W": rng.standard_normal((dirs, gates * hidden, features)) * 0.7,
             "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.7}
    if bias:
        inits["B"] = rng.standard_normal((dirs, 2 * gates * hidden)) * 0.5
    if peepholes:
        inits["P"] = rng.standard_normal((dirs, 3 * hidden)) * 0.5
    x_shape = (batch, steps, features) if layout else (steps, batch, features)
    s_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    feeds = {"X": rng.standard_normal(x_shape).astype(dtype)}
    if lengths:
        feeds["L"] = np.array([steps, 1, steps - 1, 2][:batch], np.int32)
    state_names = ["h0", "c0"] if op == "LSTM" else ["h0"]
    if states:
        feeds.update({s: rng.standard_normal(s_shape).astype(dtype) for s in state_names})
    inputs = ["X", "W", "R", "B" if bias else "", "L" if lengths else ""] + [s if states else "" for s in state_names]
    inputs += ["P" if peepholes else ""] if op == "LSTM" else []
    while not inputs[-1]:
        inputs.pop()
    outputs = ["Y", "Y_h", "Y_c"][:len(state_names) + 1]
    elem = ELEM[np.dtype(dtype)]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, outputs, name="rnn", direction=direction, hidden_size=hidden, layout=layout,
                          **attrs)], op,
        [helper.make_tensor_value_info(k, TensorProto.INT32 if k == "L" else elem, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, elem, None) for o in outputs],
        [numpy_helper.from_array(v.astype(dtype), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=10), feeds


def _run(model, feeds):
    f = gc.load_onnx(model)
    args = [feeds[n] for n in f.input_names]
    return gc.compile(lambda *xs: f(*xs), *args, provider="cpu")(*args)


CASES = [
    ("LSTM", "forward", {}), ("LSTM", "reverse", {}), ("LSTM", "bidirectional", {}),
    ("LSTM", "bidirectional", {"lengths": False, "states": False, "bias": False}),
    ("LSTM", "bidirectional", {"peepholes": True, "clip": 0.6, "input_forget": 1}),
    ("LSTM", "reverse", {"peepholes": True, "activations": ["Relu", "Sigmoid", "Tanh"]}),
    ("GRU", "forward", {}), ("GRU", "reverse", {"linear_before_reset": 1, "bias": False}),
    ("GRU", "bidirectional", {"linear_before_reset": 1}), ("GRU", "bidirectional", {"linear_before_reset": 0}),
    ("GRU", "bidirectional", {"clip": 0.5, "states": False, "activations": ["Relu", "Sigmoid", "Sigmoid", "Relu"]}),
    ("RNN", "forward", {}), ("RNN", "reverse", {"lengths": False, "states": False}),
    ("RNN", "bidirectional", {"clip": 0.8, "activations": ["Relu", "Sigmoid"]}),
]


@pytest.mark.parametrize("op, direction, options", CASES)
def test_nodes_match_onnxruntime(op, direction, options):
    model, feeds = rnn_model(op, direction, **options)
    expected = _ort(model, feeds)
    got = _run(model, feeds)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=f"output {k}")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_batch_first_layout_is_the_transposed_layout_0(op):
    """onnxruntime refuses layout=1, so its layout-0 results on transposed inputs are the reference."""
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    model, feeds = rnn_model(op, "bidirectional", layout=1, **attrs)
    seq_first, _ = rnn_model(op, "bidirectional", layout=0, **attrs)
    moved = {k: v if k == "L" else np.swapaxes(v, 0, 1) for k, v in feeds.items()}
    expected = _ort(seq_first, moved)
    got = _run(model, feeds)
    np.testing.assert_allclose(got[0], np.transpose(expected[0], (2, 0, 1, 3)), rtol=1e-5, atol=1e-6)
    for g, e in zip(got[1:], expected[1:]):
        np.testing.assert_allclose(g, np.swapaxes(e, 0, 1), rtol=1e-5, atol=1e-6)


def test_only_the_asked_outputs_and_a_symbolic_batch():
    model, feeds = rnn_model("LSTM", "bidirectional")
    f = gc.load_onnx(model)
    cf = gc.compile(lambda x, lengths, h, c: f(x, lengths, h, c)[1], gc.spec((4, "n", 2)), gc.spec(("n",), np.int32),
                    gc.spec((2, "n", 3)), gc.spec((2, "n", 3)), provider="cpu")
    expected = _ort(model, feeds)[1]
    np.testing.assert_allclose(cf(*feeds.values()), expected, rtol=1e-5, atol=1e-6)
    fewer = {k: v[:2] if k == "L" else v[:, :2] for k, v in feeds.items()}      # sequences are independent
    np.testing.assert_allclose(cf(*fewer.values()), expected[:, :2], rtol=1e-5, atol=1e-6)

    model, feeds = rnn_model("GRU", "bidirectional", states=False)      # zero initial state of a symbolic batch
    f = gc.load_onnx(model)
    cf = gc.compile(lambda x, lengths: f(x, lengths), gc.spec((4, "n", 2)), gc.spec(("n",), np.int32), provider="cpu")
    for got, expected in zip(cf(*feeds.values()), _ort(model, feeds)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# -- float64 gradient checks with sequence_lens ----------------------------------------------------------------
@pytest.mark.parametrize("op, options", [("LSTM", {"peepholes": True}), ("GRU", {"linear_before_reset": 0}),
                                         ("GRU", {"linear_before_reset": 1}), ("RNN", {})])
def test_gradients_to_second_order_with_sequence_lens(op, options):
    model, feeds = rnn_model(op, "bidirectional", steps=3, batch=2, features=2, hidden=2, dtype=np.float64,
                             seed=3, **options)
    f = gc.load_onnx(model)
    names = sorted(f.params)
    n_in = len(f.input_names)

    def fn(*args):
        return f(*args[:n_in], params=dict(zip(names, args[n_in:])))

    inputs = [feeds[n] for n in f.input_names] + [f.params[n] for n in names]
    for order in (1, 2):
        check_grad(fn, inputs, order=order)


# -- refusals -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, attrs, message", [
    ("LSTM", {"activations": ["HardSigmoid", "Tanh", "Tanh"]}, "activation 'HardSigmoid' is not supported"),
    ("GRU", {"activations": ["Sigmoid", "Tanh"], "activation_alpha": [0.5]}, "activation_alpha"),
    ("RNN", {"activations": ["Tanh", "Tanh"]}, "2 activations given; RNN with 1 direction"),
    ("LSTM", {"layout": 2}, "layout=2"),
    ("GRU", {"direction": "sideways"}, "direction='sideways'"),
])
def test_unsupported_attributes_are_refused_clearly(op, attrs, message):
    attrs = {"direction": "forward", **attrs}
    model, feeds = rnn_model(op, attrs.pop("direction"), lengths=False, states=False, **attrs)
    f = gc.load_onnx(model)
    with pytest.raises(gc.UnsupportedError, match=f"ONNX node 'rnn' \\({op}, opset 14\\).*{message}"):
        trace(lambda x: f(x), [feeds["X"]])


def test_symbolic_sequence_length_runs_as_a_scan_and_with_sequence_lens_is_refused():
    model, _ = rnn_model("GRU", "bidirectional", lengths=False, states=False)
    f = gc.load_onnx(model)
    cf = gc.compile(lambda x: f(x), gc.spec(("T", 3, 2)), provider="cpu")
    guard = [n for n in cf.model.graph.node if n.op_type == "If"]   # zero steps or a Scan
    assert guard and "Scan" in {n.op_type for a in guard[0].attribute for n in a.g.node}
    for steps in (5, 1):
        model_t, feeds = rnn_model("GRU", "bidirectional", steps=steps, lengths=False, states=False)
        for got, want in zip(cf(feeds["X"]), _ort(model_t, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    model, feeds = rnn_model("GRU", states=False)
    f = gc.load_onnx(model)
    with pytest.raises(gc.UnsupportedError, match="symbolic sequence length 'T' with sequence_lens"):
        gc.compile(lambda x, lens: f(x, lens), gc.spec(("T", 3, 2)), gc.spec((3,), "int32"))


def test_bad_shapes_are_refused():
    model, feeds = rnn_model("LSTM", lengths=False, hidden=3)
    model.graph.node[0].attribute[1].i = 2         # hidden_size disagrees with R
    with pytest.raises(gc.ShapeError, match=r"W must have shape \(1, 8, 2\)"):
        trace(lambda *xs: gc.load_onnx(model)(*xs), list(feeds.values()))


# -- the manifest's sha256 ------------------------------------------------------------------------------------
MODEL = """
import numpy as np
import gcompile as gc

W = np.arange(256, dtype=np.float32).reshape(16, 16) / 256

@gc.export(x=gc.spec(("batch", 16)))
def predict(x):
    return x @ W
"""


def _built(tmp_path):
    """The build folder, and the name of predict.onnx's external data file (named by its content)."""
    (tmp_path / "model.py").write_text(MODEL)
    out = tmp_path / "out"
    build(str(tmp_path / "model.py"), out, external_data_threshold=64)
    names = sorted(os.listdir(out))
    assert names[:2] == ["manifest.json", "predict.onnx"] and len(names) == 3
    assert names[2] == f"predict.onnx.{hashlib.sha256((out / names[2]).read_bytes()).hexdigest()[:16]}.data"
    return out, names[2]


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def test_a_built_artifact_loads_when_untouched_and_is_refused_when_changed(tmp_path):
    out, data_file = _built(tmp_path)
    x = np.ones((2, 16), np.float32)
    f = gc.load_onnx(str(out / "predict.onnx"))
    np.testing.assert_allclose(gc.compile(lambda x: f(x), x)(x), x @ (np.arange(256).reshape(16, 16) / 256), rtol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())["artifacts"][0]

    _flip_last_byte(out / data_file)
    with pytest.raises(gc.GcompileError, match=f"{data_file}: its sha256 is [0-9a-f]{{64}}, but .*manifest.json "
                                               f"records {manifest['external_data']['sha256']}"):
        gc.load_onnx(str(out / "predict.onnx"))
    _flip_last_byte(out / data_file)
    gc.load_onnx(str(out / "predict.onnx"))          # restored: loads again

    original = (out / "predict.onnx").read_bytes()
    (out / "predict.onnx").write_bytes(original.replace(b"predict", b"predicT"))
    with pytest.raises(gc.GcompileError, match="predict.onnx is damaged"):    # its own seal refuses it first
        gc.load_onnx(str(out / "predict.onnx"))
    gc.compile(lambda x: x * 2, x).save(out / "predict.onnx")                  # whole, but not the build's
    with pytest.raises(gc.GcompileError, match=f"predict.onnx: its sha256 is [0-9a-f]{{64}}, but .* records "
                                               f"{manifest['sha256']}"):
        gc.load_onnx(str(out / "predict.onnx"))


def test_without_a_manifest_entry_there_is_no_check(tmp_path):
    out, data_file = _built(tmp_path)
    _flip_last_byte(out / data_file)
    os.rename(out / "manifest.json", out / "manifest.json.old")
    with pytest.raises(gc.GcompileError, match="external data file .* is damaged"):   # the model's own seal
        gc.load_onnx(str(out / "predict.onnx"))
    _flip_last_byte(out / data_file)
    assert [p.shape for p in gc.load_onnx(str(out / "predict.onnx")).params.values()] == [(16, 16)]
    manifest = json.loads((out / "manifest.json.old").read_text())
    manifest["artifacts"] = []                       # a manifest that does not list the model
    (out / "manifest.json").write_text(json.dumps(manifest))
    gc.load_onnx(str(out / "predict.onnx"))
    (out / "manifest.json").write_text("{not json")
    with pytest.raises(gc.GcompileError, match="manifest beside .*predict.onnx cannot be read"):
        gc.load_onnx(str(out / "predict.onnx"))
