"""Against PyTorch, through fixtures made by tools/make_sequence_fixtures.py (no torch here):
nn.LSTM / nn.GRU (2 layers, bidirectional, packed variable lengths) outputs and gradients,
and nn.CTCLoss values and logit gradients for every reduction, with an impossible alignment."""
import os

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "sequence")


def load(name):
    with np.load(os.path.join(DATA, f"{name}.npz")) as f:
        return dict(f)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_rnn_matches_pytorch(kind):
    d = load(kind)
    n_states = 2 if kind == "lstm" else 1
    states = [d[f"state{k}"] for k in range(n_states)]
    params = [d[f"param{k}"] for k in range(16)]
    out_weights = [d[f"w{k}"] for k in range(1 + n_states)]

    def fn(xs, lengths, *rest):
        sts, ps = rest[:n_states], rest[n_states:]
        weights = [ps[i:i + 4] for i in range(0, 16, 4)]
        layer = F.lstm if kind == "lstm" else F.gru
        outs = layer(xs, *sts, weights, lengths=lengths, bidirectional=True, num_layers=2)
        loss = F.add_n([F.sum(o * w) for o, w in zip(outs, out_weights)])
        return outs, gc.grad(loss, [xs, *sts, *ps])

    arrays = [d["xs"], d["lengths"], *states, *params]
    graph = trace(fn, arrays).graph
    got = evaluate(graph, arrays)   # float64 on the reference evaluator
    expected = [d["ys"], *(d[f"final{k}"] for k in range(n_states)), d["grad_xs"],
                *(d[f"grad_state{k}"] for k in range(n_states)), *(d[f"grad_param{k}"] for k in range(16))]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    f32 = [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays]
    ort = gc.compile(fn, *f32).run_flat(*f32)   # and the lowering, in float32
    for g, e in zip(ort, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduce", ["none", "sum", "mean"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_matches_pytorch(reduce, zero_infinity):
    d = load("ctc")
    key = f"{reduce}_{int(zero_infinity)}"

    def fn(logits, labels, il, ll):
        loss = F.ctc_loss(F.log_softmax(logits), labels, il, ll, reduce=reduce, zero_infinity=zero_infinity)
        return loss, gc.grad(F.sum(loss), [logits])[0]

    arrays = [d["logits"], d["labels"], d["input_lengths"], d["label_lengths"]]
    loss, grad = gc.compile(fn, *arrays)(*arrays)
    np.testing.assert_allclose(loss, d[f"loss_{key}"], rtol=1e-10)
    expected = d[f"grad_{key}"]
    finite = np.isfinite(expected)          # PyTorch gives NaN for an impossible row's gradient,
    assert zero_infinity or not finite.all()  # gcompile gives 0 there
    np.testing.assert_allclose(grad[finite], expected[finite], rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(grad[~finite], 0.0)
    impossible = np.isinf(d["loss_none_0"])
    assert impossible.sum() == 1
    np.testing.assert_array_equal(grad[:, impossible], 0.0)
