"""Trace-time errors a user must get: each is a gcompile error whose message names the cause."""
import inspect

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

X23 = np.ones((2, 3), np.float32)


def here(offset=1) -> str:
    """'test_trace_errors.py:N' for the line `offset` lines below the caller's."""
    return f"test_trace_errors.py:{inspect.currentframe().f_back.f_lineno + offset}"


def test_binary_shape_mismatch_names_both_shapes_and_the_source_line():
    def f(a, b):
        return a + b
    with pytest.raises(gc.ShapeError) as err:
        gc.compile(f, X23, np.ones((4,), np.float32))
    message = str(err.value)
    assert "add" in message and "(2, 3)" in message and "(4,)" in message
    assert f"test_trace_errors.py:{f.__code__.co_firstlineno + 1}" in message


def test_matmul_shape_mismatch_names_both_shapes_and_the_source_line():
    line = here(2)
    with pytest.raises(gc.ShapeError) as err:
        gc.compile(lambda a, b: a @ b, X23, np.ones((4, 5), np.float32))
    message = str(err.value)
    assert "matmul" in message and "(2, 3)" in message and "(4, 5)" in message and line in message


def test_symbolic_mismatch_names_the_symbols():
    with pytest.raises(gc.ShapeError, match=r"\(batch, 3\).*\(n, 3\)"):
        gc.compile(lambda a, b: a * b, gc.spec(("batch", 3)), gc.spec(("n", 3)))


@pytest.mark.parametrize("call", [lambda x: F.sum(x, axis=2), lambda x: F.mean(x, axis=-3), lambda x: x.max(5),
                                  lambda x: F.transpose(x, (0, 2)), lambda x: F.expand_dims(x, 4),
                                  lambda x: F.flatten(x, 3), lambda x: F.logsumexp(x, axis=(0, 7))])
def test_unknown_axis(call):
    with pytest.raises(gc.ShapeError, match=r"axis -?\d is out of range for a tensor of rank \d"):
        gc.compile(call, X23)


@pytest.mark.parametrize("call", [F.gelu, F.leaky_relu, F.elu, F.selu, F.softplus])
def test_integer_tensor_where_a_float_is_required(call):
    line = here(2)
    with pytest.raises(gc.ShapeError) as err:
        gc.compile(call, np.ones(3, np.int64))
    assert "must be a float tensor, got int64" in str(err.value) and line in str(err.value)


def test_data_dependent_control_flow():
    def f(x):
        if x.sum() > 0:
            return x
        return -x
    with pytest.raises(gc.TraceError, match="data-dependent control flow is not traceable") as err:
        gc.compile(f, X23)
    assert f"test_trace_errors.py:{f.__code__.co_firstlineno + 1}" in str(err.value)
    assert "F.where" in str(err.value)


@pytest.mark.parametrize("misuse", [lambda x: x if x else x, lambda x: x if (x > 0).min() and True else x,
                                    lambda x: [x][int(x.sum())], lambda x: x * float(x.max()), lambda x: np.asarray(x)])
def test_python_values_of_tensors_are_refused(misuse):
    with pytest.raises(gc.TraceError, match="(control flow|no value|Python index)"):
        gc.compile(misuse, X23)


@pytest.mark.parametrize("fn, name, hint", [
    (lambda x: np.nancumsum(x), "numpy.nancumsum", "gcompile.functions.nansum"),     # the closest spelling
    (lambda x: np.nancumprod(x, axis=0), "numpy.nancumprod", "gcompile.functions.cumprod"),
    (lambda x: np.unique(x), "numpy.unique", "see gcompile.functions"),
    (lambda x: np.linalg.eigvals(x), "numpy.linalg.eigvals", "see gcompile.functions"),   # (np.linalg.inv is supported)
    (lambda x: np.fft.fft(x), "numpy.fft.fft", "see gcompile.functions"),
    (lambda x: np.isnat(x), "numpy.isnat", "gcompile.functions.isnan"),
    (lambda x: np.add.reduce(x), "numpy.add.reduce", ""),
], ids=lambda v: v if isinstance(v, str) and v.startswith("numpy") else "")
def test_unsupported_numpy_function_names_itself(fn, name, hint):
    with pytest.raises(gc.TraceError) as err:
        gc.compile(fn, np.ones((2, 2), np.float32))
    message = str(err.value)
    assert f"{name} is not supported on traced Tensors" in message and hint in message
    assert "test_trace_errors.py:" in message


def test_tensor_from_another_trace():
    leaked = []
    gc.compile(lambda x: leaked.append(x) or x, X23)
    with pytest.raises(gc.TraceError, match="belongs to another traced function"):
        gc.compile(lambda y: y + leaked[0], X23)
    with pytest.raises(gc.TraceError, match="only be used on Tensors inside a function being traced"):
        leaked[0] * 2


@pytest.mark.parametrize("shape, dtype, match", [
    ((-1, 3), "float32", "dim -1 in shape"),
    ((2, 2.5), "float32", "dim 2.5 in shape"),
    (("bad name", 3), "float32", "dim 'bad name'"),
    ((True, 3), "float32", "dim True"),
    ((2, 3), "float7", "unknown dtype 'float7'"),
    ((2, 3), "complex64", "dtype complex64 is not supported"),
    (3.5, "float32", "shape must be a tuple"),
    # what is not a shape is refused, with the right form: a dict gave its keys as dims (784 dropped), a set too
    ({"batch": None, "features": 784}, "float32",
     r"got dict \{'batch': None, 'features': 784\}; write gc.spec\(\('batch', 784\)\)"),
    ({"batch", "x"}, "float32", r"must be a tuple of ints and symbol names, in order, got set"),
    ((784.0, "batch"), "float32", r"dim 784.0 .*; write gc.spec\(\(784, 'batch'\)\)"),
    (("batch", None), "float32", r"dim None .*; write it as gc.spec\(\(\"batch\", 784\)\)"),
    ("batch,784", "float32", "dim 'batch,784'"),
    ((2,), np.str_, "dtype string is not supported"),
])
def test_bad_specs(shape, dtype, match):
    with pytest.raises(gc.GcompileError, match=match):
        gc.spec(shape, dtype)


def test_bad_argument_instead_of_a_spec():
    with pytest.raises(gc.GcompileError, match="expected gc.spec"):
        gc.compile(lambda x: x, "not a spec")


@pytest.mark.parametrize("target, match", [((-1, -1), "more than one -1"), ((4,), r"\(6 elements\) to \(4,\)"),
                                           ((-1, 4), r"cannot reshape \(2, 3\) to \(-1, 4\)")])
def test_bad_reshape(target, match):
    line = here(2)
    with pytest.raises(gc.ShapeError, match=match) as err:
        gc.compile(lambda x: x.reshape(target), X23)
    assert line in str(err.value)


def test_bad_return_value():
    with pytest.raises(gc.TraceError, match="must return Tensors"):
        gc.compile(lambda x: "text", X23)
    with pytest.raises(gc.GcompileError, match="returned no Tensor"):
        gc.compile(lambda x: (), X23)


def test_non_numeric_constant():
    with pytest.raises(gc.TraceError,
                       match=r"cannot use a value of type .* as a tensor \(at test_trace_errors\.py:\d+"):
        gc.compile(lambda x: x + "a", X23)


def test_numpy_functions_reach_gcompiles_and_its_refusals():
    """np.linalg.svd reaches F.svd, which names the bound of its iteration for a matrix beyond it."""
    with pytest.raises(gc.UnsupportedError, match=r"svd: matrices of size \(65, 65\) are beyond the bound \(64\)"):
        gc.compile(lambda x: np.linalg.svd(x), np.ones((65, 65), np.float32))


def test_the_users_frame_is_one_with_a_line_the_user_wrote():
    """Generated code ('<string>', a dataclass's __init__) and library files (collections) hold no
    line of the user's: a RecursionError in a model was reported at '<string>:3'."""
    import collections

    from gcompile.frontend.source import user_frame
    internal, library = gc.functions.__file__, collections.__file__
    frames = [(internal, 10), ("<string>", 3), (library, 598), ("<frozen importlib._bootstrap>", 1), ("model.py", 4),
              ("main.py", 9)]
    assert user_frame(frames) == ("model.py", 4)
    assert user_frame([(internal, 10), ("<stdin>", 2), (library, 598)]) == ("<stdin>", 2)   # typed at a REPL
    assert user_frame([(internal, 10), ("<frozen importlib._bootstrap>", 1)]) is None
