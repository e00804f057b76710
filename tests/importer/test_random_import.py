"""Imported random draws (importer/translators/random.py): Bernoulli, RandomUniform(Like),
RandomNormal(Like) and training-mode Dropout draw keyed values under gc.random_key, the same on
ONNX Runtime, gcompile's reference evaluator and onnx's ReferenceEvaluator; outside a key they
are refused; they pass no gradient (Dropout passes its mask's)."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

from ..opcheck import check_grads

N = 2000
OUTPUTS = ("u", "b", "z", "z64", "u16", "d", "mask")


def _model(elem=TensorProto.FLOAT):
    """The draws on x and p of element type `elem` (float64 for the gradient checks)."""
    nodes = [h.make_node("RandomUniformLike", ["x"], ["u"], low=-2.0, high=3.0),
             h.make_node("Bernoulli", ["p"], ["b"]),
             h.make_node("RandomNormalLike", ["x"], ["z"], mean=1.0, scale=2.0, seed=3.0),
             h.make_node("RandomNormal", [], ["z64"], shape=[N, 4], dtype=TensorProto.DOUBLE),
             h.make_node("RandomUniform", [], ["u16"], shape=[3], dtype=TensorProto.FLOAT16, seed=1.0),
             h.make_node("Dropout", ["x", "ratio", "training"], ["d", "mask"])]
    inputs = [h.make_tensor_value_info(n, elem, ["n", N]) for n in ("x", "p")]
    outputs = [h.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in OUTPUTS]
    inits = [h.make_tensor("ratio", elem, [], [0.25]),
             h.make_tensor("training", TensorProto.BOOL, [], [True])]
    graph = h.make_graph(nodes, "draws", inputs, outputs, inits)
    return gc.load_onnx(h.make_model(graph, opset_imports=[h.make_opsetid("", 22)]).SerializeToString())


def _keyed(f):
    def run(x, p, k):
        with gc.random_key(k):
            return f(x, p)
    return run


def test_draws_follow_their_distributions_and_are_the_same_everywhere():
    f = _model()
    run = _keyed(f)
    x, p, k = np.ones((4, N), np.float32), np.full((4, N), 0.3, np.float32), np.int64(5)
    cf = gc.compile(run, gc.spec(("n", N)), gc.spec(("n", N)), k, provider="cpu")
    u, b, z, z64, u16, d, mask = outs = cf(x, p, k)
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    assert set(np.unique(b)) <= {0, 1} and abs(b.mean() - 0.3) < 0.02 and b.dtype == np.float32
    assert abs(z.mean() - 1) < 0.05 and abs(z.std() - 2) < 0.05
    assert z64.dtype == np.float64 and z64.shape == (N, 4) and abs(z64.mean()) < 0.05 and abs(z64.std() - 1) < 0.05
    assert u16.dtype == np.float16 and u16.shape == (3,)
    np.testing.assert_array_equal(d, np.where(mask, x / np.float32(0.75), 0))
    assert abs(mask.mean() - 0.75) < 0.02
    for again, out in zip(cf(x, p, k), outs):
        np.testing.assert_array_equal(again, out)                           # a pure function of the key
    assert np.mean(cf(x, p, np.int64(6))[0] == u) < 0.01
    ours = evaluate(trace(run, [x, p, k]).graph, [x, p, k])
    portable = cf.model_for("portable")
    theirs = ReferenceEvaluator(portable).run(None, dict(zip([i.name for i in portable.graph.input], [x, p, k])))
    for name, got, ref, other in zip(OUTPUTS, outs, ours, theirs):
        exact = name not in ("z", "z64")                                    # log, sqrt and cos round apart
        for want in (ref, other):
            if exact:
                np.testing.assert_array_equal(got, want, err_msg=name)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_draw_outside_a_key_is_refused():
    f = _model()
    x = np.ones((2, N), np.float32)
    with pytest.raises(gc.UnsupportedError, match=r"RandomUniformLike.*takes its key from gc.random_key"):
        gc.compile(f, x, x)


def test_gradients_pass_through_dropout_masks_only():
    """d/dx through the imported Dropout is its mask over 1 - ratio, Bernoulli's probabilities get 0,
    to second order at static and symbolic sizes."""
    f = _model(TensorProto.DOUBLE)

    def loss(x, p):
        with gc.random_key(7):
            u, b, z, z64, u16, d, mask = f(x, p)
        return F.sin(d) * x + b * p * p + u * x

    check_grads(loss, [np.linspace(0.5, 1.5, 2 * N).reshape(2, N), np.full((2, N), 0.4)])
