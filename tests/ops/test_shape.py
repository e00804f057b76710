"""Shape ops: forward through onnxruntime against numpy (incl. symbolic dims) and float64 gradient checks."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("target", [(6, 4), (-1,), (4, -1), (2, 3, 2, 2), (24,), (1, 24, 1)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_reshape(target, dtype):
    x = np.arange(24).reshape(2, 3, 4).astype(dtype)
    check_forward(lambda x: (F.reshape(x, target), x.reshape(target), x.reshape(*target)), [x],
                  [x.reshape(target)] * 3)


def test_reshape_with_a_symbolic_batch():
    cf = gc.compile(lambda x: (F.reshape(x, -1), F.reshape(x, (-1, 6)), x.reshape("batch", 2, 3), F.ravel(x),
                               F.flatten(x), F.flatten(x, 0), F.reshape(F.reshape(x, -1), ("batch", 3, 2))),
                    gc.spec(("batch", 3, 2)))
    assert [tuple(d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim) for o in cf.model.graph.output] == \
        [("6*batch",), ("batch", 6), ("batch", 2, 3), ("6*batch",), ("batch", 6), ("6*batch",), ("batch", 3, 2)]
    for n in (1, 4):
        x = rand(n, 3, 2, seed=n)
        for got, e in zip(cf(x), [x.reshape(-1), x.reshape(-1, 6), x.reshape(n, 2, 3), x.ravel(), x.reshape(n, 6),
                                  x.reshape(-1), x]):
            np.testing.assert_array_equal(got, e)


def test_reshape_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(gc.ShapeError, match="more than one -1"):
        gc.compile(lambda x: F.reshape(x, (-1, -1)), x)
    with pytest.raises(gc.ShapeError, match=r"cannot reshape \(2, 3\) \(6 elements\) to \(4,\)"):
        gc.compile(lambda x: F.reshape(x, 4), x)
    with pytest.raises(gc.ShapeError, match=r"cannot reshape \(2, 3\) to \(-1, 4\)"):
        gc.compile(lambda x: F.reshape(x, (-1, 4)), x)
    with pytest.raises(gc.ShapeError, match=r"test_shape\.py:\d+"):
        gc.compile(lambda x: F.reshape(x, (5, -1)), x)


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1), (0, 1, 2)], ids=str)
def test_transpose(axes):
    x = rand(2, 3, 4, seed=1)
    check_forward(lambda x: F.transpose(x, axes), [x], np.transpose(x, axes))


def test_transpose_methods_and_swapaxes():
    x = rand(2, 3, 4, seed=2)
    check_forward(lambda x: (x.T, x.transpose(), x.transpose(1, 2, 0), x.transpose((2, 1, 0)), F.swapaxes(x, 0, -1)),
                  [x], [x.T, x.transpose(), x.transpose(1, 2, 0), x.transpose(2, 1, 0), np.swapaxes(x, 0, -1)])


def test_transpose_of_a_symbolic_batch():
    cf = gc.compile(lambda x: x.T, gc.spec(("batch", 3)))
    for n in (1, 5):
        x = rand(n, 3, seed=n)
        np.testing.assert_array_equal(cf(x), x.T)


def test_transpose_rejects_a_bad_permutation():
    with pytest.raises(gc.ShapeError, match="not a permutation"):
        gc.compile(lambda x: F.transpose(x, (0, 0)), np.ones((2, 3), np.float32))


@pytest.mark.parametrize("shape, target", [((3, 1), (3, 4)), ((4,), (2, 3, 4)), ((), (2, 2)), ((1, 3), (2, 1, 3))],
                         ids=str)
def test_broadcast_to(shape, target):
    x = rand(*shape, seed=3)
    check_forward(lambda x: F.broadcast_to(x, target), [x], np.broadcast_to(x, target))


def test_broadcast_to_a_symbolic_shape():
    cf = gc.compile(lambda x, b: F.broadcast_to(b, x.shape) + x, gc.spec(("batch", 3)), gc.spec((3,)))
    for n in (2, 3):
        x, b = rand(n, 3, seed=n), rand(3, seed=9)
        np.testing.assert_allclose(cf(x, b), x + b)


def test_broadcast_to_error():
    with pytest.raises(gc.ShapeError, match=r"cannot broadcast \(3,\) to \(2, 4\) \(at test_shape.py:\d+\)"):
        gc.compile(lambda x: F.broadcast_to(x, (2, 4)), np.ones(3, np.float32))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3, (0, 2), (0, -1)], ids=str)
def test_expand_dims(axis):
    x = rand(2, 3, seed=4)
    check_forward(lambda x: F.expand_dims(x, axis), [x], np.expand_dims(x, axis))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 3), 3], ids=str)
def test_squeeze(axis):
    x = rand(1, 3, 2, 1, seed=5)
    check_forward(lambda x: (F.squeeze(x, axis), x.squeeze(axis)), [x], [np.squeeze(x, axis)] * 2)


def test_squeeze_of_a_non_unit_axis_is_an_error():
    with pytest.raises(gc.ShapeError, match="has size 3, not 1"):
        gc.compile(lambda x: F.squeeze(x, 1), np.ones((1, 3), np.float32))


@pytest.mark.parametrize("start", [0, 1, 2, -1, -2])
def test_flatten(start):
    x = rand(2, 3, 2, 2, seed=6)
    expected = x.reshape(x.shape[:start % 4] + (-1,))
    check_forward(lambda x: (F.flatten(x, start), x.flatten(start)), [x], [expected] * 2)


def test_flatten_default_and_ravel():
    x = rand(2, 3, 4, seed=7)
    check_forward(lambda x: (F.flatten(x), F.ravel(x)), [x], [x.reshape(2, 12), x.ravel()])


# -- gradients (float64, reference evaluator) ------------------------------------------------------
def test_grad_reshape_transpose():
    x = rand(2, 3, 4, seed=8, dtype=np.float64)
    check_grads(lambda x: F.transpose(F.reshape(x * x, (4, 6)), (1, 0)) * np.arange(24.0).reshape(6, 4), [x])


def test_grad_transpose_3d_and_swapaxes():
    x = rand(2, 3, 4, seed=9, dtype=np.float64)
    check_grads(lambda x: (F.transpose(x * x, (2, 0, 1)), F.swapaxes(F.sin(x), 0, 1)), [x])


def test_grad_broadcast_to():
    x, y = rand(3, 1, seed=10, dtype=np.float64), rand(4, seed=11, dtype=np.float64)
    check_grads(lambda x, y: (F.broadcast_to(x * x, (2, 3, 4)), F.broadcast_to(F.exp(y), (3, 4))), [x, y])


def test_grad_squeeze_expand_dims_flatten():
    x = rand(1, 3, 2, seed=12, dtype=np.float64)
    check_grads(lambda x: (F.squeeze(x * x), F.expand_dims(F.sin(x), (0, -1)), F.flatten(F.cos(x), 0), F.ravel(x ** 3)),
                [x])


def test_zero_sized_dims():
    x = np.ones((0, 3), np.float32)
    check_forward(lambda x: (F.reshape(x, (3, 0)), F.reshape(x, (0, 1, 3)), F.flatten(x, 0)), [x],
                  [x.reshape(3, 0), x.reshape(0, 1, 3), x.reshape(-1)])
    cf = gc.compile(lambda x: F.reshape(x, (2, "batch", 3)), gc.spec(("batch", 2, 3)))
    for n in (0, 2):
        x = rand(n, 2, 3, seed=n)
        np.testing.assert_array_equal(cf(x), x.reshape(2, n, 3))


# -- zero-size results ---------------------------------------------------------------------------------
def test_tile_and_broadcast_to_onto_a_zero_size_dim_give_the_zero_size_shape():
    """ONNX Runtime's ExpandElimination took 1-vs-0 to 1 and dropped the Expand, so a reshape after
    it failed; an empty expand now lowers to a fill of the target shape."""
    x = rand(2, 3)
    check_forward(lambda x: F.tile(x, (0, 1)), [x], np.tile(x, (0, 1)))
    check_forward(lambda x: F.tile(x, 0), [x], np.tile(x, 0))
    check_forward(lambda x: F.reshape(F.broadcast_to(x[None], (0, 2, 3)), (0, 3)) * 2, [x], np.zeros((0, 3)))
    check_grads(lambda x: F.tile(x, (2, 0)), [x])
    check_forward(lambda x: gc.grad(F.sum(F.tile(x, (0, 1))), [x])[0], [x], np.zeros_like(x))
