"""gc.jit and gc.compile as a bare decorator: specs from the first call, a cache keyed by
structure, shapes, dtypes and static values, re-tracing on a new signature, static_argnums."""
import importlib
import warnings

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

jit_module = importlib.import_module("gcompile.runtime.jit")   # gc.runtime.jit is the function


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_bare_compile_decorator_compiles_on_first_call_and_caches():
    calls = []

    @gc.compile
    def f(x, w):
        calls.append(1)
        return F.tanh(x @ w)

    x, w = rand(3, 4), rand(4, 2, seed=1)
    np.testing.assert_allclose(f(x, w), np.tanh(x @ w), rtol=1e-5)
    f(rand(3, 4, seed=2), w)
    assert len(calls) == 1 and f.cache_size == 1          # same signature: no new trace
    f(rand(5, 4), w)                                      # new shape: traced again
    f(rand(5, 4).astype(np.float64), w.astype(np.float64))
    assert len(calls) == 3 and f.cache_size == 3
    assert f.__name__ == "f" and "3 signature(s)" in repr(f)


def test_decorator_with_options_and_keyword_arguments():
    @gc.compile(provider="cpu", name="scaled")
    def f(x, scale=2.0, *, shift):
        return x * scale + shift

    x = np.ones(3, np.float32)
    np.testing.assert_allclose(f(x, shift=np.float32(1)), 3.0)
    np.testing.assert_allclose(f(x, 3.0, shift=np.float32(1)), 4.0)   # a new Python scalar: a new trace
    assert f.cache_size == 2
    cf = f.compiled(x, shift=np.float32(1))
    assert cf.provider == "cpu" and cf.model.graph.name == "scaled"
    assert [i.name for i in cf.model.graph.input] == ["x", "shift"]


def test_static_argnums_and_python_scalars_are_baked_in():
    @gc.jit(static_argnums=1)
    def power(x, n):
        y = x
        for _ in range(n - 1):     # Python control flow on a static argument
            y = y * x
        return y

    x = rand(4)
    np.testing.assert_allclose(power(x, 3), x ** 3, rtol=1e-6)
    np.testing.assert_allclose(power(x, 2), x ** 2, rtol=1e-6)
    assert power.cache_size == 2 and [i.name for i in power.compiled(x, 3).model.graph.input] == ["x"]
    with pytest.raises(gc.GcompileError, match="argument 'n' is static .* must be hashable"):
        power(x, [3])


def test_pytree_arguments_and_foreign_arrays():
    @gc.jit
    def f(params, x):
        return {"y": x @ params["w"] + params["b"], "norm": F.sum(params["w"] ** 2)}

    params = {"w": rand(3, 2), "b": np.zeros(2, np.float32)}
    out = f(params, np.ones((1, 3), np.float32))
    np.testing.assert_allclose(out["y"], params["w"].sum(0, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(out["norm"], (params["w"] ** 2).sum(), rtol=1e-5)
    assert f.compiled(params, np.ones((1, 3), np.float32)).input_names == ["params.w", "params.b", "x"]
    cf = f.compiled(params, np.ones((1, 3), np.float32))         # arrays only: it takes the same pytrees
    np.testing.assert_array_equal(cf(params, np.ones((1, 3), np.float32))["y"], out["y"])
    # a list is a pytree node: its Python floats are static leaves, baked into the trace
    np.testing.assert_allclose(f(params, [[1.0, 0.0, 0.0]])["y"], params["w"][:1], rtol=1e-6)
    assert f.compiled(params, [[1.0, 0.0, 0.0]]).input_names == ["params.w", "params.b"]


def test_jitted_function_is_inlined_when_traced():
    @gc.jit
    def inner(x):
        return x * 2

    cf = gc.compile(lambda x: inner(x) + 1, rand(3), provider="cpu")
    np.testing.assert_allclose(cf(np.ones(3, np.float32)), 3.0)
    assert inner.cache_size == 0


def test_many_signatures_warn_once(monkeypatch):
    monkeypatch.setattr(jit_module, "RETRACE_WARNING", 3)
    f = gc.jit(lambda x: x + 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            f(np.zeros(n, np.float32))
    assert len([w for w in caught if "compiled for 3 different signatures" in str(w.message)]) == 1


def test_compile_of_a_function_taking_no_argument_compiles_at_once():
    """Without specs gc.compile is the jit decorator, except for a function with no parameter at
    all: there is no call to wait for."""
    cf = gc.compile(lambda: F.arange(3) * 2, provider="cpu")
    assert isinstance(cf, gc.CompiledFunction)
    np.testing.assert_array_equal(cf(), [0, 2, 4])
    assert isinstance(gc.compile(lambda x: x * 2), gc.Jitted)
