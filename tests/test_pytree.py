"""Pytrees (frontend/pytree.py): flattening and rebuilding, registered nodes, paths, and pytree
arguments and outputs of gc.compile, gc.grad and gc.value_and_grad (has_aux included)."""
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend import pytree


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


class Pair(NamedTuple):
    w: object
    b: object


@gc.register_dataclass(static=("activation",))
@dataclass
class Layer:
    w: object
    b: object
    activation: str = "tanh"


def test_flatten_and_unflatten_round_trip_every_node_kind():
    tree = {"a": [1, (2, None)], "p": Pair(3, {"z": 4}), "l": Layer(5, 6, "relu")}
    leaves, treedef = pytree.flatten(tree)
    assert leaves == [1, 2, 3, 4, 5, 6]
    rebuilt = pytree.unflatten(treedef, [10 * v for v in leaves])
    assert rebuilt["a"] == [10, (20, None)] and rebuilt["p"] == Pair(30, {"z": 40})
    assert rebuilt["l"] == Layer(50, 60, "relu")
    assert pytree.paths(treedef, "params") == ["params.a.0", "params.a.1.0", "params.p.w", "params.p.b.z",
                                               "params.l.w", "params.l.b"]


def test_treedefs_compare_by_value_and_static_fields_count():
    _, a = pytree.flatten({"x": [np.zeros(2)], "l": Layer(1, 2)})
    _, b = pytree.flatten({"x": [np.ones(3)], "l": Layer(3, 4)})
    _, c = pytree.flatten({"x": [np.ones(3)], "l": Layer(3, 4, "relu")})
    assert a == b and hash(a) == hash(b) and a != c


def test_flatten_like_names_the_mismatch():
    _, treedef = pytree.flatten({"fc": {"w": 1, "b": 2}})
    assert pytree.flatten_like(treedef, {"fc": {"b": 20, "w": 10}}, "p") == [10, 20]   # by key, not by order
    with pytest.raises(gc.GcompileError, match=r"p\.fc: missing key\(s\) \['b'\]"):
        pytree.flatten_like(treedef, {"fc": {"w": 1}}, "p")
    with pytest.raises(gc.GcompileError, match=r"p: expected a dict with keys \['fc'\], got list"):
        pytree.flatten_like(treedef, [1], "p")


def test_register_dataclass_refuses_what_is_not_one():
    with pytest.raises(gc.GcompileError, match="not a dataclass"):
        gc.register_dataclass(int)
    with pytest.raises(gc.GcompileError, match="no field"):
        gc.register_dataclass(Layer, static=("nope",))


def test_tree_map():
    out = gc.tree_util.tree_map(lambda a, b: a + b, {"x": [1, 2]}, {"x": [10, 20]})
    assert out == {"x": [11, 22]}


# -- gc.compile ---------------------------------------------------------------------------------------
PARAMS = {"fc1": {"w": rand(4, 8, seed=1), "b": rand(8, seed=2)}, "out": [rand(8, 3, seed=3)]}


def mlp(params, x):
    h = F.tanh(x @ params["fc1"]["w"] + params["fc1"]["b"])
    return h @ params["out"][0]


def mlp_np(params, x):
    return np.tanh(x @ params["fc1"]["w"] + params["fc1"]["b"]) @ params["out"][0]


def test_compile_takes_pytree_arguments_named_by_their_paths():
    cf = gc.compile(mlp, PARAMS, gc.spec(("batch", 4)), provider="cpu")
    assert cf.input_names == ["params.fc1.w", "params.fc1.b", "params.out.0", "x"]
    assert [i.name for i in cf.model.graph.input] == cf.input_names
    x = rand(5, 4, seed=4)
    np.testing.assert_allclose(cf(PARAMS, x), mlp_np(PARAMS, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(gc.InputError, match=r"argument params\.fc1: missing key\(s\) \['b'\]"):
        cf({"fc1": {"w": PARAMS["fc1"]["w"]}, "out": PARAMS["out"]}, x)
    with pytest.raises(gc.InputError, match=r"takes 2 arguments \(params, x\), got 1"):
        cf(PARAMS)


def test_pytree_outputs_keep_their_structure_and_name_onnx_outputs():
    cf = gc.compile(lambda p, x: {"y": mlp(p, x), "aux": (x * 2, None, Pair(x, x + 1))}, PARAMS, rand(2, 4),
                    provider="cpu")
    assert [o.name for o in cf.model.graph.output] == ["y", "aux.0", "aux.2.w", "aux.2.b"]
    out = cf(PARAMS, np.ones((2, 4), np.float32))
    assert out["aux"][1] is None and isinstance(out["aux"][2], Pair)
    np.testing.assert_allclose(out["aux"][2].b, 2.0)


def test_input_names_that_would_clash_are_refused():
    with pytest.raises(gc.GcompileError, match="would both be named 'a.b.c'"):
        gc.compile(lambda a: a["b"]["c"], {"b.c": rand(2), "b": {"c": rand(2)}}, provider="cpu")


# -- gradients ---------------------------------------------------------------------------------------
def test_grad_transform_and_value_and_grad_give_gradients_shaped_like_the_params():
    x = rand(6, 4, seed=5)

    def loss(params, x):
        return F.mean(mlp(params, x) ** 2)

    def both(params, x):
        value, g = gc.value_and_grad(loss)(params, x)
        return value, g, gc.grad(loss)(params, x)

    value, g, g2 = gc.compile(both, PARAMS, x, provider="cpu")(PARAMS, x)
    assert set(g) == {"fc1", "out"} and isinstance(g["out"], list) and g["fc1"]["w"].shape == (4, 8)
    eps, d = 1e-2, np.zeros_like(PARAMS["fc1"]["w"])
    d[1, 2] = 1.0

    def at(delta):
        p = {"fc1": {"w": PARAMS["fc1"]["w"] + delta, "b": PARAMS["fc1"]["b"]}, "out": PARAMS["out"]}
        return float(np.mean(mlp_np(p, x).astype(np.float64) ** 2))
    assert abs((at(eps * d) - at(-eps * d)) / (2 * eps) - g["fc1"]["w"][1, 2]) < 1e-3
    np.testing.assert_allclose(value, at(0 * d), rtol=1e-5)
    for a, b in zip(gc.tree_util.leaves(g), gc.tree_util.leaves(g2)):
        np.testing.assert_array_equal(a, b)


def test_has_aux_carries_metrics_undifferentiated():
    def loss(w, x):
        y = x @ w
        return F.sum(y * y), {"mean": F.mean(y), "n": F.sum(x * 0 + 1)}

    def step(w, x):
        (value, metrics), g = gc.value_and_grad(loss, has_aux=True)(w, x)
        g2, metrics2 = gc.grad(loss, has_aux=True)(w, x)
        return value, metrics, g, g2, metrics2["mean"]

    w, x = rand(3, 2, seed=6), rand(4, 3, seed=7)
    value, metrics, g, g2, mean2 = gc.compile(step, w, x, provider="cpu")(w, x)
    np.testing.assert_allclose(g, 2 * x.T @ (x @ w), rtol=1e-5)
    np.testing.assert_array_equal(g, g2)
    np.testing.assert_allclose(metrics["mean"], (x @ w).mean(), rtol=1e-5)
    assert metrics["n"] == 12 and mean2 == metrics["mean"]
    with pytest.raises(gc.GcompileError, match=r"has_aux=True\) needs a function returning a pair"):
        gc.compile(lambda w: gc.grad(lambda w: F.sum(w), has_aux=True)(w), w)


def test_engine_grad_accepts_a_dict_of_inputs():
    def f(w, b):
        g = gc.grad(F.sum(w * b), {"w": w, "b": b})
        return g["w"], g["b"]
    gw, gb = gc.compile(f, rand(3), rand(3, seed=1), provider="cpu")(np.ones(3, np.float32), np.full(3, 2, np.float32))
    np.testing.assert_array_equal(gw, 2.0)
    np.testing.assert_array_equal(gb, 1.0)
    with pytest.raises(gc.GcompileError, match="must be a list of Tensors"):
        gc.compile(lambda w: gc.grad(F.sum(w), w), rand(3))
