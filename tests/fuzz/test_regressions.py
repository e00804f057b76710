"""Bugs tools/fuzz.py found, each as its shrunk reproducer run through every fuzz check
(tests/fuzz/checks.py), with the NumPy reference written out."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from . import npsem as N
from .checks import CHECKS, assert_close, run_check

RNG = np.random.default_rng(0)


def _all_checks(program, reference, specs, arrays):
    for check in CHECKS:
        run_check(check, program, reference, specs, arrays)


def test_slice_scatter_under_a_transpose_with_symbolic_batch():
    """The backward of a slice (slice_scatter) emitted Pad with its `axes` input; onnxruntime
    1.31's transpose optimizer permuted that partial pads list as if it covered every axis and
    the model failed at run time ("indices element out of data bounds") — symbolic batch only."""
    def program(x):
        return (x[:, :, :-1][:, [0]] * 1.5,)

    def reference(x):
        return (x[:, :, :-1][:, [0]] * 1.5,)

    x = RNG.standard_normal((2, 1, 3, 3)).astype(np.float32)
    _all_checks(program, reference, [gc.spec(("batch", 1, 3, 3))], [x])


def test_integer_power_of_an_exact_zero_has_finite_derivatives():
    """pow's VJP y·x^(y-1) became 0·x^-1 = 0·inf = NaN at x = 0 once the exponent reached 0:
    the third derivative of relu(x)**2 and the second of relu(x)**1 were NaN where relu is 0."""
    def program(x):
        r = F.relu(x)
        return (F.power(r, 2), r ** 1 * x, (x - x) ** 3)

    def reference(x):
        r = np.maximum(x, 0)
        return (r ** 2, r * x, (x - x) ** 3)

    x = np.array([[-1.5, 0.7, -0.3], [1.2, -0.8, 0.4]], np.float32)
    _all_checks(program, reference, [gc.spec(("batch", 3))], [x])


def test_power_backward_keeps_no_guard_for_a_nonzero_constant_exponent():
    """The zero-exponent guard of pow's VJP (a where) folds away when the exponent is a constant
    (and a square's gradient, 2·x**1, keeps no power at all)."""
    for exponent, power_left in ((2.5, True), (2, False)):
        compiled = gc.compile(lambda x, e=exponent: gc.grad(F.sum(x ** e), [x]), gc.spec(("batch", 3)), provider="cpu")
        ops = {node.op for node in compiled.graph.nodes.values()}
        assert ("pow" in ops) == power_left and not ops & {"where", "equal"}, ops


def test_numpy_dot_of_higher_rank_operands_is_a_tensor_product():
    """np.dot on Tensors ran matmul, whose batch broadcasting differs from dot's tensor product
    once the second operand has more than 2 dims (wrong shape and values)."""
    def program(a, b, c):
        return (np.dot(a, b), np.dot(c, b), np.dot(a[0], c[0].T), np.dot(c, a[0]), np.dot(a, 2.0))

    def reference(a, b, c):
        return (np.dot(a, b), np.dot(c, b), np.dot(a[0], c[0].T), np.dot(c, a[0]), np.dot(a, 2.0))

    arrays = [RNG.standard_normal(s).astype(np.float32) for s in ((3, 2), (2, 2, 3), (4, 3, 2))]
    _all_checks(program, reference, [gc.spec(a.shape) for a in arrays], arrays)


def test_numpy_pad_with_constant_values():
    """np.pad(x, pads, constant_values=v) on a Tensor raised TypeError (F.pad names it `value`)."""
    def program(x):
        return (np.pad(x, ((0, 0), (1, 2)), constant_values=0.5), np.pad(x, 1, mode="edge"))

    def reference(x):
        return (np.pad(x, ((0, 0), (1, 2)), constant_values=0.5), np.pad(x, 1, mode="edge"))

    x = RNG.standard_normal((2, 3)).astype(np.float32)
    _all_checks(program, reference, [gc.spec((2, 3))], [x])


def test_max_pool_gradient_where_padding_covers_a_whole_window():
    """The backward of disjoint-window max pooling lowers to MaxUnpool, which refuses a size it
    infers below 1 ((out-1)·stride + kernel - pads) even with output_shape given: one input
    position, kernel 2, stride 2, one pad each side. Such poolings keep ScatterElements."""
    def program(x):
        return (F.max_pool(F.global_avg_pool(x), (2,), (2,), ((1, 1),)),)

    def reference(x):
        return (x.mean(axis=2, keepdims=True),)   # one window holding the mean and -inf padding

    x = RNG.standard_normal((3, 2, 4)).astype(np.float32)
    _all_checks(program, reference, [gc.spec(("batch", 2, 4))], [x])


def test_zero_padding_before_pooling_is_not_merged_into_the_pool():
    """onnxruntime's Pad_Fusion merged a zero Pad into the following pool's pads: a MaxPool's
    pads count as -inf, so windows of negative values lost their padded zeros (a silent wrong
    maximum), and an AveragePool with pads as large as its kernel failed to load. Every Pad
    gcompile emits lists its axes, which that rule leaves alone."""
    def pad(x, n):
        return np.pad(x, ((0, 0), (0, 0), (n, n)))

    x = -np.abs(RNG.standard_normal((3, 2, 4))).astype(np.float32) - 0.5
    specs = [gc.spec(("batch", 2, 4))]
    _all_checks(lambda x: (F.max_pool(F.pad(x, ((0, 0), (0, 0), (1, 1))), (2,), (2,)),),
                lambda x: (pad(x, 1).reshape(x.shape[:2] + (-1, 2)).max(-1),), specs, [x])
    for check in CHECKS:
        if check != "float64":      # onnxruntime's CPU provider has no float64 AveragePool
            run_check(check, lambda x: (F.avg_pool(F.pad(x, ((0, 0), (0, 0), (2, 2))), (1,), (2,), 0,
                                                   count_include_pad=False),),
                      lambda x: (pad(x, 2)[..., ::2],), specs, [x])


def test_float32_cancellation_is_not_reported_as_a_wrong_lowering():
    """A layer_norm over three values has derivatives that are exactly 0 in float64 and about
    2.5e-4 in float32, from onnxruntime and from NumPy alike. The derivative check allows each
    output the error NumPy's float32 evaluation of the same graph makes, and no more."""
    def program(x0, x9, x11, x13, x14):
        v10 = F.einsum("a,za->za", np.mean(x0, keepdims=True), x9)
        return (F.layer_norm(F.subtract(v10, x11), x13, x14, axis=0, eps=1e-05),)

    def reference(x0, x9, x11, x13, x14):
        v10 = np.einsum("a,za->za", np.mean(x0, keepdims=True), x9)
        return (N.layer_norm(v10 - x11, x13, x14, axis=0, eps=1e-05),)

    arrays = [np.array(a, np.float32).reshape(s) for a, s in [
        ([1.0406636, -1.1424519], (2,)), ([-0.0672689, -0.42086112, -0.25071746], (3, 1)), ([0.594997], (1, 1)),
        ([0.56513005, 1.4429461, 0.78744364], (3, 1)), ([0.26070723, 0.08365785, -0.6728037], (3, 1))]]
    specs = [gc.spec(("batch",), np.float32)] + [gc.spec(a.shape, np.float32) for a in arrays[1:]]
    _all_checks(program, reference, specs, arrays)


def test_the_rounding_allowance_still_fails_a_wrong_value():
    assert_close(np.float32(2.5e-4), 0.0, "cancelled", noise=1e-4)
    with pytest.raises(AssertionError, match="1 of 1 values differ"):
        assert_close(np.float32(2.5e-4), 0.0, "cancelled", noise=0.0)
    with pytest.raises(AssertionError):
        assert_close(np.float32(1.0), 0.5, "wrong", noise=1e-4)


def test_a_loop_folded_to_its_one_remaining_output_keeps_its_shape():
    """After loop pruning left a scan of constants with its stacked outputs only, constant folding
    took the reference's 1-tuple for the value: a (1, T, ...) constant where (T, ...) was declared,
    which ONNX Runtime refused in the second-order graph ("Can't merge shape info")."""
    def program(c0, a, xs):
        return (gc.scan(lambda c, t: (c * F.sigmoid(t) + a * t, F.square(c) - t), c0, F.ceil(xs * 2.0))[0],)

    def reference(c0, a, xs):
        return (N.scan_loop(lambda c, t: (c * N.sigmoid(t) + a * t, np.square(c) - t), c0, N.ceil(xs * 2.0))[0],)

    arrays = [np.array([[0.2]], np.float32), np.array([[-0.13]], np.float32),
              np.array([[[0.21]], [[-0.72]]], np.float32)]
    _all_checks(program, reference, [gc.spec(a.shape) for a in arrays], arrays)


def test_checkpointed_while_loop_gradient_of_a_broadcast_closed_over_value():
    """With checkpoint_every, a while loop's backward is a loop over blocks whose body runs each
    block's own while loop and that loop's backward. hoist_loop_sums moved the sum of a closed-over
    operand's gradient out of the outer backward loop: it stacked a per-step value whose leading dim
    is the inner loop's number of steps, which changes from block to block (a (steps0, steps1, ...)
    value), and lowering failed ("symbolic dim 'steps0_..' does not appear in any graph input's
    shape"). Sums over values with a loop-local dim stay in the loop."""
    def program(x, a):
        return (gc.while_loop(lambda c: (c[1] < 3) & (F.mean(F.square(c[0])) < 4.0),
                              lambda c: (0.9 * c[0] + 0.5 * F.tanh(c[0] * a), c[1] + 1), (x, np.int64(0)),
                              checkpoint_every=2)[0],)

    def reference(x, a):
        return (N.while_loop(lambda c: c[1] < 3 and N.less(np.mean(np.square(c[0])), 4.0),
                             lambda c: (0.9 * c[0] + 0.5 * np.tanh(c[0] * a), c[1] + 1), (x, 0))[0],)

    rng = np.random.default_rng(1)
    x, a = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    with N.recording() as margins:
        reference(x.astype(np.float64), a.astype(np.float64))
    assert ("decision", 3) in margins                       # three steps: blocks of 2 and 1
    _all_checks(program, reference, [gc.spec(("batch", 3)), gc.spec((3,))], [x, a])


def test_second_order_through_a_while_loop_whose_step_is_affine():
    """The backward of a while loop's backward (second order) is a scan whose body reads nothing
    per step when the step is affine in the carry: it had no xs, and the reference evaluator could
    not count the steps of its symbolic length ("invalid literal for int() with base 10:
    'steps0_..'"). The rule keeps one xs for a symbolic length, as loop pruning does."""
    def program(x, w):
        h = gc.while_loop(lambda c: (c[1] < 4) & (F.sum(c[0]) < 3.0), lambda c: (c[0] * 0.5 + w, c[1] + 1),
                          (x, np.int64(0)))[0]
        return (h * h,)

    def reference(x, w):
        h = N.while_loop(lambda c: c[1] < 4 and N.less(np.sum(c[0]), 3.0), lambda c: (c[0] * 0.5 + w, c[1] + 1),
                         (x, 0))[0]
        return (h * h,)

    x, w = np.random.default_rng(2).standard_normal((3, 2)).astype(np.float32) * 0.3, np.array([0.6, 0.2], np.float32)
    with N.recording() as margins:
        reference(x.astype(np.float64), w.astype(np.float64))
    steps = [d for kind, d in margins if kind == "decision"]
    assert 0 < steps[0] < 4, steps                           # stopped by the data
    _all_checks(program, reference, [gc.spec(("batch", 2)), gc.spec((2,))], [x, w])


def test_a_program_that_draws_random_numbers_is_gradient_checked_on_the_reference():
    """The fuzzer's seeded dropout in training (ratio 0: it keeps every value) made check_grad
    refuse the program (ONNX Runtime's draws are not the reference evaluator's), a failure of every
    gradient check: those checks run on the reference evaluator alone for such programs, and the
    derivatives check still runs the ONNX model."""
    def program(x):
        return (F.tanh(F.dropout(F.tanh(x), 0.0, training=True, seed=3)),)

    def reference(x):
        return (np.tanh(np.tanh(x)),)

    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    _all_checks(program, reference, [gc.spec(("batch", 3))], [x])


def test_checkpointed_while_loop_over_a_carry_whose_dim_is_a_multiple_of_the_batch():
    """A while loop with checkpoint_every over a (3·batch, 1) carry: the backward loop over blocks
    runs each block's loop, whose stacked carries and zero cotangents have the dim 3*batch, in a
    body whose inputs carry no plain `batch`. Lowering could not compute 3*batch there ("symbolic
    dim 'batch' does not appear in any graph input's shape") and the reference evaluator could not
    resolve it (KeyError: 'batch'). A body reads such a dim off an input that has it, or `batch`
    from the enclosing graph; the evaluator solves batch from a k·batch it is given."""
    def program(x0):
        v2 = F.tile(x0, (3, 1))
        return (gc.while_loop(lambda c: (c[1] < 3) & (np.max(np.abs(c[0])) + F.cast(c[1], c[0].dtype) * 0.4 < 2.5),
                              lambda c: (0.5 * c[0] + 1.0 * F.erfc(c[0]), c[1] + 1), (v2, np.int64(0)),
                              checkpoint_every=3)[0],)

    def reference(x0):
        v2 = np.tile(x0, (3, 1))
        return (N.while_loop(lambda c: c[1] < 3 and N.less(np.max(np.abs(c[0])) + c[1] * 0.4, 2.5),
                             lambda c: (0.5 * c[0] + 1.0 * N.erfc(c[0]), c[1] + 1), (v2, 0))[0],)

    x = np.array([[-0.14230115711688995], [-0.10421820729970932]], np.float32)
    _all_checks(program, reference, [gc.spec(("batch", 1))], [x])
