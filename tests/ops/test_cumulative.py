"""Scans: cumsum, cumprod and logcumsumexp against numpy on ONNX Runtime (axes, options, dtypes,
symbolic and empty axes, the CumProd fallback before opset 26), and float64 gradient checks,
zeros included."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads, check_values


def rand(*shape, seed=0, dtype=np.float64, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


def np_scan(fn, x, axis, reverse=False, exclusive=False, identity=0):
    """numpy's scan with ONNX's options: flip for reverse, shift in the identity for exclusive."""
    if axis is None:
        x, axis = x.ravel(), 0
    x = np.flip(x, axis) if reverse else x
    y = fn(x, axis=axis)
    if exclusive:
        y = np.concatenate([np.full_like(np.take(y, [0], axis), identity), np.delete(y, -1, axis)], axis)
    return np.flip(y, axis) if reverse else y


SCANS = [(F.cumsum, np.cumsum, 0), (F.cumprod, np.cumprod, 1)]


@pytest.mark.parametrize("fn, ref, identity", SCANS, ids=["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
def test_scan_forward(fn, ref, identity, axis, reverse, exclusive):
    x = rand(2, 3, 4, seed=1, dtype=np.float32)
    expected = np_scan(ref, x.astype(np.float64), axis, reverse, exclusive, identity).astype(np.float32)
    check_forward(lambda x: fn(x, axis, reverse=reverse, exclusive=exclusive), [x], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, ref, identity", SCANS, ids=["cumsum", "cumprod"])
def test_scan_dtypes_follow_numpy(fn, ref, identity):
    x64 = rand(3, 5, seed=2)
    check_forward(lambda x: fn(x, 1), [x64], ref(x64, axis=1), rtol=1e-13)
    for dtype in (np.int32, np.int64, np.bool_):       # integers and bools scan in int64, as numpy and torch
        i = np.array([[1, 2, 0], [3, 1, 1]]).astype(dtype)
        out = check_forward(lambda i: fn(i, 0), [i], ref(i, axis=0))
        assert out[0].dtype == np.int64


@pytest.mark.parametrize("fn, ref, identity", SCANS, ids=["cumsum", "cumprod"])
def test_scan_through_numpy_and_empty_axes(fn, ref, identity):
    x = rand(3, 4, seed=3, dtype=np.float32)
    check_forward(lambda x: getattr(np, ref.__name__)(x, axis=1), [x], ref(x, axis=1), rtol=1e-5)
    empty = np.zeros((0, 3), np.float32)
    check_forward(lambda x: (fn(x, 0), fn(x, 1, exclusive=True)), [empty], [empty, empty])


@pytest.mark.parametrize("opset", [18, None])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_over_a_symbolic_axis_at_old_and_new_opsets(opset, exclusive, reverse):
    """Before opset 26 CumProd is a masked product, which works for symbolic sizes too."""
    cf = gc.compile(lambda x: F.cumprod(x, 0, exclusive=exclusive, reverse=reverse), gc.spec(("n", 3)),
                    opset=opset, provider="cpu")
    assert ("CumProd" in {n.op_type for n in cf.model.graph.node}) == (opset is None)
    for n in (1, 4):
        x = rand(n, 3, seed=n, dtype=np.float32)
        np.testing.assert_allclose(cf(x), np_scan(np.cumprod, x, 0, reverse, exclusive, 1), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 5, 8, "n"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_portable_cumprod_has_no_cumprod_op(n, exclusive, reverse):
    """The portable target writes no CumProd (OpenVINO 2026.4 has no conversion for CumProd-26):
    along a static axis ⌈log2 n⌉ products of moved copies, along a symbolic one the masked product."""
    cf = gc.compile(lambda x: F.cumprod(x, 1, exclusive=exclusive, reverse=reverse), gc.spec((2, n, 3)),
                    target="portable", provider="cpu")
    ops = {node.op_type for node in cf.model.graph.node}
    assert "CumProd" not in ops and ("ReduceProd" in ops) == (n == "n")
    size = 6 if n == "n" else n
    x = rand(2, size, 3, seed=size, dtype=np.float32)
    np.testing.assert_allclose(cf(x), np_scan(np.cumprod, x, 1, reverse, exclusive, 1), rtol=1e-5)
    if n != "n" and n > 1:
        assert ops >= {"Mul", "Slice", "Pad"}


def test_cumsum_gradient_is_the_reverse_scan_and_int_scans_have_none():
    x = rand(2, 5, seed=4)
    for options in ({}, {"reverse": True}, {"exclusive": True}, {"reverse": True, "exclusive": True}):
        check_grads(lambda x, options=options: F.cumsum(x * x, 1, **options), [x])
    i = np.arange(3)
    g = gc.compile(lambda x, i: gc.grad(F.sum(x * F.cumsum(i)), [x]), x[0, :3], i)(x[0, :3], i)
    np.testing.assert_allclose(g[0], [0, 1, 3])


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_gradients_at_and_away_from_zeros(exclusive, reverse):
    fn = lambda x: F.cumprod(x, 1, exclusive=exclusive, reverse=reverse)  # noqa: E731
    check_grads(fn, [rand(2, 5, seed=5, low=0.5, high=1.5)], order=2)
    zeros = np.array([[2.0, 0.0, 3.0, 0.5, 0.0, 1.2], [1.5, -0.5, 0.8, 0.0, 0.3, 2.0], [0.0, 0.0, 1.0, 2.0, 0.5, 3.0]])
    check_grads(fn, [zeros], order=3)          # exact at zeros to every order: no division by an input


def test_cumprod_gradient_at_zeros_matches_torch():
    """torch.cumprod([2, 0, 3, 0]) weighted by [1, 2, 3, 4]: the gradient is [1, 22, 0, 0]."""
    x, w = np.array([2.0, 0.0, 3.0, 0.0]), np.array([1.0, 2.0, 3.0, 4.0])
    check_values(lambda x: gc.grad(F.sum(F.cumprod(x) * w), [x]), [x], [[1.0, 22.0, 0.0, 0.0]])


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_gradient_over_a_symbolic_axis_matches_the_static_one(exclusive, reverse):
    """Along a symbolic axis cumprod's gradient takes its first-order form (no scan of unknown length)."""
    def f(x, w):
        return gc.grad(F.sum(F.cumprod(x, 0, exclusive=exclusive, reverse=reverse) * w), [x])[0]
    x = np.array([[2.0, 0.5], [0.0, -1.5], [3.0, 0.8], [0.5, 0.0], [0.0, 1.1], [1.2, 2.0]])
    w = rand(6, 2, seed=6)
    symbolic = gc.compile(f, *[gc.spec(("n", 2), "float64")] * 2, provider="cpu")(x, w)
    static = gc.compile(f, x, w, provider="cpu")(x, w)
    np.testing.assert_allclose(symbolic, static, rtol=1e-12, atol=1e-12)
    check_grads(lambda x: F.cumprod(x, 0, exclusive=exclusive, reverse=reverse), [x], order=1)


def test_scan_axis_errors_name_the_function():
    with pytest.raises(gc.ShapeError, match=r"cumsum: axis 2 is out of range .* \(at test_cumulative.py:\d+\)"):
        gc.compile(lambda x: F.cumsum(x, 2), np.ones((2, 3), np.float32))


# -- logcumsumexp ------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logcumsumexp_matches_numpy_without_overflow(axis, dtype):
    x = rand(3, 7, seed=7, dtype=dtype, low=-300, high=300)     # exp overflows float32 and float64 here
    flat = x.ravel() if axis is None else x
    expected = np.logaddexp.accumulate(flat.astype(np.float64), axis=0 if axis is None else axis)
    check_forward(lambda x: F.logcumsumexp(x, axis), [x], expected.astype(dtype), rtol=1e-6 if dtype == np.float32
                  else 1e-13)


def test_logcumsumexp_of_infinities_and_empty_axes():
    inf = np.inf
    x = np.array([[-inf, -inf, 1.0, inf, 2.0], [-inf, 3.0, -inf, -inf, 3.0]])
    check_forward(lambda x: F.logcumsumexp(x, 1), [x], np.logaddexp.accumulate(x, axis=1))
    empty = np.zeros((2, 0), np.float32)
    check_forward(lambda x: F.logcumsumexp(x, 1), [empty], empty)


def test_logcumsumexp_gradients():
    check_grads(lambda x: F.logcumsumexp(x, 1), [rand(2, 6, seed=8)], order=2)
    check_grads(lambda x: F.logcumsumexp(x * 3, 0), [rand(5, 2, seed=9)], order=2)
    # PyTorch's gradient here is [nan, nan, 1, nan]; the limits are finite at the last two entries
    x = np.array([-np.inf, -np.inf, 1.0, np.inf])
    check_values(lambda x: gc.grad(F.sum(F.logcumsumexp(x)), [x]), [x], [[np.nan, np.nan, 1.0, 1.0]])


def test_logcumsumexp_needs_a_static_axis():
    with pytest.raises(gc.UnsupportedError, match="logcumsumexp along axis 0, whose size 'n' is symbolic"):
        gc.compile(lambda x: F.logcumsumexp(x, 0), gc.spec(("n", 3)))


def np_running(x, axis, largest):
    """torch.cummax / cummin by a loop: the last index of the running extremum, NaN propagating."""
    x = np.moveaxis(x, axis, -1)
    values, index = np.empty_like(x), np.zeros(x.shape, np.int64)
    for pos in np.ndindex(*x.shape[:-1]):
        best, at = None, 0
        for j, v in enumerate(x[pos]):
            if best is None or np.isnan(v) or (not np.isnan(best) and (v >= best if largest else v <= best)):
                best, at = v, j
            values[pos + (j,)], index[pos + (j,)] = best, at
    return np.moveaxis(values, -1, axis), np.moveaxis(index, -1, axis)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [0, -1, None])
def test_cummax_cummin_ties_and_nan(largest, axis):
    x = np.round(rand(4, 7, seed=3) * 2) / 2                  # many ties
    x[1, 3] = np.nan
    x[3, 1] = x[3, 5] = np.nan
    fn = F.cummax if largest else F.cummin
    flat = x.ravel() if axis is None else x
    check_forward(lambda x: fn(x, axis), [x], list(np_running(flat, 0 if axis is None else axis, largest)))
    xi = np.where(np.isnan(x), 3, x * 2).astype(np.int32)
    check_forward(lambda x: fn(x, axis), [xi], list(np_running(xi.ravel() if axis is None else xi,
                                                              0 if axis is None else axis, largest)))


def test_cummax_gradient_goes_to_the_picked_position():
    check_grads(lambda x: F.cummax(x, 1)[0] + F.cummin(x, 0)[0], [rand(3, 6, seed=4)])
    x = np.array([1.0, 3.0, 3.0, 2.0])                        # the later 3 is picked from index 2 on
    g = gc.compile(lambda x: gc.grad(F.sum(F.cummax(x, 0)[0] * np.array([1.0, 10.0, 100.0, 1000.0])), [x])[0],
                   x, provider="cpu")(x)
    np.testing.assert_array_equal(g, [1, 10, 1100, 0])


def test_cummax_edges():
    check_forward(lambda x: F.cummax(x, 1), [np.zeros((2, 0))], [np.zeros((2, 0)), np.zeros((2, 0), np.int64)])
    check_forward(lambda x: F.cummin(x, 0), [np.array([np.inf, -np.inf, 0.0])],
                  [np.array([np.inf, -np.inf, -np.inf]), np.array([0, 1, 1])])
    with pytest.raises(gc.UnsupportedError, match="symbolic"):
        gc.compile(lambda x: F.cummax(x, 0), gc.spec(("n",)))
