"""Casts, constants, fills, identity, stop_gradient and add_n: forward through onnxruntime
against numpy, and float64 gradient checks."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)


@pytest.mark.parametrize("src, dst", [(np.float32, np.float64), (np.float64, np.float32), (np.float32, np.int64),
                                      (np.float32, np.int32), (np.int64, np.float32), (np.float32, np.bool_),
                                      (np.bool_, np.float32), (np.int32, np.int64)], ids=str)
def test_cast(src, dst):
    x = rand(2, 3, seed=1).astype(src) if src != np.bool_ else np.array([[True, False, True], [False, False, True]])
    out = check_forward(lambda x: (F.cast(x, dst), x.astype(dst)), [x], [x.astype(dst)] * 2)
    assert out[0].dtype == np.dtype(dst)


def test_float_to_int_cast_truncates_toward_zero():
    x = np.array([-2.7, -1.2, -0.5, 0.5, 1.9, 2.2], np.float32)
    check_forward(lambda x: F.cast(x, "int64"), [x], np.trunc(x).astype(np.int64))


def test_cast_to_the_same_dtype_adds_no_node():
    cf = gc.compile(lambda x: F.cast(x, np.float32) * 2, np.ones(3, np.float32))
    assert "Cast" not in {n.op_type for n in cf.model.graph.node}


def test_constant_full_and_fills():
    x = rand(2, 3, seed=2)
    out = check_forward(lambda x: (F.constant([1.5, 2.5]) * 1, x + F.constant(2, dtype="float32"),
                                   F.full((2, 3), 7, "int64"), F.full((3,), 0.25), F.zeros_like(x), F.ones_like(x)),
                        [x], [np.array([1.5, 2.5]), x + 2, np.full((2, 3), 7, np.int64), np.full(3, 0.25, np.float32),
                              np.zeros_like(x), np.ones_like(x)])
    assert out[2].dtype == np.int64 and out[3].dtype == np.float32


def test_fills_with_a_symbolic_batch():
    cf = gc.compile(lambda x: (F.zeros_like(x), F.ones_like(x) + x, F.full(("batch", 2), 3.0)),
                    gc.spec(("batch", 2), "float64"))
    for n in (1, 3):
        x = rand(n, 2, seed=n, dtype=np.float64)
        got = cf(x)
        np.testing.assert_array_equal(got[0], np.zeros((n, 2)))
        np.testing.assert_array_equal(got[1], 1 + x)
        np.testing.assert_array_equal(got[2], np.full((n, 2), 3.0))


@pytest.mark.parametrize("n, start, step, dtype", [(5, 0, 1, np.int64), (4, 2, 3, np.int32), (0, 0, 1, np.int64),
                                                   (6, -1.5, 0.25, np.float32), (3, 1, -2, np.float64)], ids=str)
def test_arange(n, start, step, dtype):
    expected = (np.arange(n).astype(dtype) * np.asarray(step, dtype) + np.asarray(start, dtype)).astype(dtype)
    (got,) = check_forward(lambda: F.arange(n, start, step, dtype), [], [expected])
    assert got.dtype == dtype


def test_arange_over_a_symbolic_dim_keeps_it_symbolic():
    def fn(x):
        r = F.arange(x.shape[0], dtype=x.dtype)
        assert r.shape == x.shape[:1]
        return x * F.expand_dims(r, 1)
    cf = gc.compile(fn, gc.spec(("batch", 3)), provider="cpu")
    assert cf.model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for n in (1, 4, 0):
        x = rand(n, 3)
        np.testing.assert_array_equal(cf(x), x * np.arange(n, dtype=np.float32)[:, None])
    check_grads(fn, [rand(4, 3)])        # the range is a constant of the gradient: d/dx = arange


@pytest.mark.parametrize("bad", [-1, 2.5, True, None])
def test_arange_refuses_a_length_that_is_not_a_size(bad):
    with pytest.raises(gc.ShapeError, match="arange"):
        gc.compile(lambda: F.arange(bad), provider="cpu")


def test_identity_and_stop_gradient_pass_values_through():
    x = rand(2, 3, seed=3)
    check_forward(lambda x: (F.identity(x), F.stop_gradient(x) * 2), [x], [x, x * 2])


def test_stop_gradient_blocks_the_gradient():
    x = rand(4, seed=4)

    def f(x):
        return gc.grad(F.sum(F.stop_gradient(x) * x + F.stop_gradient(x * x)), [x])[0]
    check_forward(f, [x], x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_add_n_broadcasts(dtype):
    a, b, c = (np.arange(6).reshape(2, 3) + 1).astype(dtype), np.arange(3).astype(dtype), np.array(5, dtype)
    check_forward(lambda a, b, c: (F.add_n([a, b, c]), F.add_n([a])), [a, b, c], [a + b + c, a])


def test_add_n_of_nothing_is_an_error():
    with pytest.raises(gc.ShapeError, match="at least one operand"):
        gc.compile(lambda x: F.add_n([]), np.ones(2, np.float32))


# -- gradients (float64, reference evaluator) ------------------------------------------------------
def test_grad_cast_chain():
    # A quadratic, so a wide central difference is exact and rounding to float32 stays small against it.
    x = np.array([[-2.3, -1.6, -0.4], [0.3, 1.4, 2.6]])    # away from integers: the int path has no gradient
    check_grads(lambda x: F.cast(F.cast(x * x, np.float32), np.float64) + F.cast(F.cast(x, "int64"), np.float64),
                [x], eps=1e-2, rtol=1e-4, atol=1e-5)


def test_grad_identity_and_add_n():
    a, b, c = rand(2, 3, seed=6, dtype=np.float64), rand(3, seed=7, dtype=np.float64), rand(1, 1, seed=8,
                                                                                          dtype=np.float64)
    check_grads(lambda a, b, c: F.identity(F.add_n([a * a, F.sin(b), c, a])), [a, b, c])
