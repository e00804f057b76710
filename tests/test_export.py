"""@gc.export: spec validation at decoration time, artifact names, and finding marked functions."""
import types

import numpy as np
import pytest

import gcompile as gc
from gcompile.artifacts.build import lower_all
from gcompile.artifacts.marks import export_info, exported_functions


def test_export_records_specs_in_parameter_order_and_returns_the_function():
    def f(a, b):
        return a + b

    marked = gc.export(b=np.zeros((2,), np.int64), a=gc.spec(("batch", 3)))(f)
    assert marked is f and f(1, 2) == 3
    info = export_info(f)
    assert info.name == "f" and info.input_names == ("a", "b")
    assert info.specs == (gc.spec(("batch", 3), "float32"), gc.spec((2,), "int64"))


def test_a_pytree_of_specs_is_taken_as_gc_compile_takes_it(tmp_path):
    """@gc.export refused the dict of specs gc.compile accepts for one parameter; now both build the
    same model, an input per leaf named by its path, and a bad leaf is named at the decorator."""
    specs = {"w": gc.spec((3, 2)), "b": gc.spec((2,))}

    def predict(params, x):
        return gc.functions.tanh(x @ params["w"] + params["b"])
    gc.export(params=specs, x=gc.spec(("batch", 3)))(predict)
    module = types.ModuleType("pytree_model")
    module.predict, predict.__module__ = predict, "pytree_model"
    (_, model, *_), = lower_all(module)[1]
    compiled = gc.compile(predict, specs, gc.spec(("batch", 3)), provider="cpu")
    assert [i.name for i in model.graph.input] == ["params.w", "params.b", "x"]
    assert model.graph.SerializeToString() == compiled.model.graph.SerializeToString()
    with pytest.raises(gc.GcompileError, match="parameter 'params': bad spec: expected gc.spec"):
        gc.export(params={"w": "float32"}, x=gc.spec((3,)))(predict)


def test_unknown_parameter_is_named():
    with pytest.raises(gc.GcompileError, match=r"no positional parameter named 'y' \(parameters: x\)"):
        @gc.export(x=gc.spec((3,)), y=gc.spec((3,)))
        def f(x):
            return x


def test_missing_spec_is_named():
    with pytest.raises(gc.GcompileError, match="missing spec for parameter 'w'"):
        @gc.export(x=gc.spec((3,)))
        def f(x, w):
            return x * w


def test_defaulted_parameters_may_be_left_out_but_only_at_the_end():
    @gc.export(x=gc.spec((3,)))
    def f(x, scale=2.0):
        return x * scale

    assert export_info(f).input_names == ("x",)
    with pytest.raises(gc.GcompileError, match="parameter 'w' has a spec but the earlier parameter 'scale'"):
        @gc.export(x=gc.spec((3,)), w=gc.spec((3,)))
        def g(x, scale=2.0, w=None):
            return x * w


@pytest.mark.parametrize("bad, message", [
    ("float32", "bad spec"),
    (object(), "bad spec"),
])
def test_bad_spec_values_name_the_parameter(bad, message):
    with pytest.raises(gc.GcompileError, match=f"parameter 'x': {message}"):
        gc.export(x=bad)(lambda x: x)


def test_bad_spec_shape_is_rejected():
    with pytest.raises(gc.GcompileError, match="bad spec: dim -1"):
        gc.export(x=gc.spec(("batch", -1)))


def test_varargs_and_required_keyword_only_parameters_are_refused():
    with pytest.raises(gc.GcompileError, match=r"\*xs is not supported"):
        gc.export(x=gc.spec((3,)))(lambda x, *xs: x)
    with pytest.raises(gc.GcompileError, match="keyword-only parameter 'k' needs a default"):
        gc.export(x=gc.spec((3,)))(lambda x, *, k: x)


def test_name_renames_the_artifact_and_a_non_string_name_is_a_spec():
    @gc.export(x=gc.spec((3,)), name="renamed")
    def f(x):
        return x

    assert export_info(f).name == "renamed"

    @gc.export(name=gc.spec((3,)))
    def g(name):
        return name

    assert export_info(g).name == "g" and export_info(g).input_names == ("name",)
    with pytest.raises(gc.GcompileError, match="artifact name 'a/b'"):
        gc.export(x=gc.spec((3,)), name="a/b")(lambda x: x)


def test_bare_decorator_on_a_function_with_parameters_asks_for_specs():
    with pytest.raises(gc.GcompileError, match="missing spec for parameter 'x'"):
        @gc.export
        def f(x):
            return x


def test_exported_functions_in_source_order_and_only_from_the_module():
    source = (
        "import gcompile as gc\n"
        "@gc.export(x=gc.spec((2,)))\n"
        "def second_alphabetically_first_in_file(x):\n"
        "    return x\n"
        "def unmarked(x):\n"
        "    return x\n"
        "@gc.export(x=gc.spec((2,)))\n"
        "def a_last(x):\n"
        "    return x\n"
        "alias = a_last\n"
    )
    module = types.ModuleType("fake_model")
    exec(compile(source, "fake_model.py", "exec"), module.__dict__)
    other = types.ModuleType("other")
    exec(compile(source, "other.py", "exec"), other.__dict__)
    module.imported = other.a_last          # marked, but defined elsewhere: not this module's artifact
    names = [f.__name__ for f in exported_functions(module)]
    assert names == ["second_alphabetically_first_in_file", "a_last"]
