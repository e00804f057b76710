"""bitwise_and, bitwise_or, bitwise_xor, bitwise_not, left_shift, right_shift and the Tensor operators
& | ^ ~ << >>: ONNX Runtime and the reference evaluator against numpy on every integer type gcompile
traces, negative values, broadcasting, 0-d and zero-size operands, bools, and the shifts' edges (a
shift by the width or more, by a negative amount, bits moved past the sign)."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.errors import ShapeError
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

from ..opcheck import check_forward

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8]


def _values(dtype, shape, seed=0):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    v = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return v


def _both(fn, inputs, expected):
    """ONNX Runtime (check_forward) and the reference evaluator, exactly."""
    check_forward(fn, inputs, expected, rtol=0, atol=0)
    got = evaluate(trace(fn, inputs).graph, inputs)
    for g, e in zip(got, expected if isinstance(expected, list) else [expected]):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("dtype", INTS)
def test_and_or_xor_not_match_numpy(dtype):
    a, b = _values(dtype, (3, 4)), _values(dtype, (4,), seed=1)
    expected = [np.bitwise_and(a, b), np.bitwise_or(a, b), np.bitwise_xor(a, b), np.invert(a)]
    _both(lambda a, b: [F.bitwise_and(a, b), F.bitwise_or(a, b), F.bitwise_xor(a, b), F.bitwise_not(a)], [a, b],
          expected)
    _both(lambda a, b: [a & b, a | b, a ^ b, ~a], [a, b], expected)


def test_operators_on_bools_stay_logical_and_numpy_ufuncs_dispatch():
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    _both(lambda p, q: [p & q, p | q, p ^ q, ~p], [p, q], [p & q, p | q, p ^ q, ~p])
    a = np.array([6, -7], np.int32)
    _both(lambda a: [np.bitwise_and(a, 3), np.invert(a), np.left_shift(a, 2)], [a],
          [np.bitwise_and(a, 3), np.invert(a), np.left_shift(a, 2)])


@pytest.mark.parametrize("dtype", INTS)
def test_shifts_match_numpy_for_shifts_inside_the_width(dtype):
    bits = np.iinfo(dtype).bits
    x = _values(dtype, (2, 2 * bits))
    s = np.tile(np.arange(bits, dtype=dtype), 2)
    with np.errstate(all="ignore"):
        expected = [np.left_shift(x, s), np.right_shift(x, s)]
    _both(lambda x, s: [x << s, x >> s], [x, s], expected)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8])
def test_shifts_outside_the_width_give_the_sign_fill(dtype):
    """ONNX's definition (BitShift, opset 28): a shift by a negative amount or by the width or more
    gives -1 for a right shift of a negative value, else 0."""
    bits = np.iinfo(dtype).bits
    x = np.array([5, 100, 1, 0] + ([-5, -128] if np.iinfo(dtype).min < 0 else [250, 128]), dtype)
    for amount in ([bits, bits + 3, -1, -bits] if np.iinfo(dtype).min < 0 else [bits, bits + 3]):
        s = np.full(x.shape, amount, dtype)
        fill = np.where(x < 0, -1, 0).astype(dtype)
        _both(lambda x, s: [F.left_shift(x, s), F.right_shift(x, s)], [x, s], [np.zeros_like(x), fill])


def test_left_shift_drops_bits_past_the_sign_and_right_shift_sign_extends():
    x = np.array([64, -1, 127, -128, 3], np.int8)
    _both(lambda x: [x << 1, x << 7, x >> 7, x >> 1], [x],
          [np.array([-128, -2, -2, 0, 6], np.int8), np.array([0, -128, -128, 0, -128], np.int8),
           np.array([0, -1, 0, -1, 0], np.int8), np.array([32, -1, 63, -64, 1], np.int8)])


def test_zero_size_and_zero_d_operands():
    e = np.zeros((0, 3), np.int32)
    _both(lambda e: [e & 1, e << 2, ~e], [e], [e, e, e])
    x, s = np.array(-20, np.int64), np.array(2, np.int64)
    _both(lambda x, s: [x >> s, x << s, x ^ s], [x, s], [np.array(-5), np.array(-80), np.array(-18)])


def test_symbolic_sizes_and_mixed_types_promote_as_numpy():
    a, b = np.array([[1, -2, 3]], np.int8), np.array([7, 8, 9], np.int32)
    check_forward(lambda a, b: [a | b, a >> 1], [a, b], [a | b, a >> 1], specs=[gc.spec(("n", 3), np.int8),
                                                                             gc.spec((3,), np.int32)])


def test_floats_are_refused_with_the_operands_named():
    with pytest.raises(ShapeError, match="bitwise_and takes integer or bool operands, got float32"):
        trace(lambda x: F.bitwise_and(x, 1), [gc.spec((2,))])
    with pytest.raises(ShapeError, match="left_shift takes integer operands, got bool"):
        trace(lambda x: F.left_shift(x, x), [gc.spec((2,), np.bool_)])


def test_the_ops_refuse_floats_and_bools_below_the_public_functions():
    """The registry ops themselves (what a pass or the importer records): integers only."""
    from gcompile.frontend.tensor import apply
    for dtype in (np.float32, np.bool_):
        with pytest.raises(ShapeError, match=f"bitwise ops take integer operands, got {np.dtype(dtype).name}"):
            trace(lambda x: apply("bitwise_xor", [x, x]), [gc.spec((2,), dtype)])
        with pytest.raises(ShapeError, match="bitwise ops take integer operands"):
            trace(lambda x: apply("bitwise_not", [x]), [gc.spec((2,), dtype)])


def test_results_pass_no_gradient():
    x = np.array([1.5, -2.0])

    def fn(x):
        bits = F.cast(F.bitwise_and(F.cast(x, np.int32), 1) << 1, x.dtype)
        return gc.grad(F.sum(x * 3 + bits), [x])
    check_forward(fn, [x], [np.full(2, 3.0)])
