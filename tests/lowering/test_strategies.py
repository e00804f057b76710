"""Every target's strategy against the op's plain form (lowering/targets).

Each case is a function whose model, lowered for ort-cpu, takes a strategy where the case says
its guard holds, and the plain form where it says it does not; both models run on ONNX Runtime
and must agree. For every number a guard (or the strategy itself) compares sizes with (the
strategy's `thresholds`), cases lie on both sides of it. Gradient checks against central
differences reach every strategy through tests/ops (its coverage gate counts lowerings).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.lowering.lower import recorded_lowerings
from gcompile.lowering.targets import TARGETS


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def weight_grad(x_shape, co, kernel, stride=1, pad=0, dilation=1, groups=1, dtype=np.float32):
    """The weight gradient of a convolution, as a function of (x, g), and example inputs."""
    nsp = len(x_shape) - 2
    per = lambda v: (v,) * nsp if isinstance(v, int) else tuple(v)            # noqa: E731
    kw = dict(stride=per(stride), pad=tuple((p, p) for p in per(pad)), dilation=per(dilation), groups=groups)
    out = [(x_shape[2 + a] + 2 * kw["pad"][a][0] - kw["dilation"][a] * (kernel[a] - 1) - 1) // kw["stride"][a] + 1
           for a in range(nsp)]
    fn = lambda x, g: apply("conv_weight_grad", [x, g], kernel=tuple(kernel), **kw)   # noqa: E731
    return fn, [rand(*x_shape, seed=1, dtype=dtype), rand(x_shape[0], co, *out, seed=2, dtype=dtype)]


def conv(x_shape, w_shape, **kw):
    return (lambda x, w: F.conv(x, w, **kw)), [rand(*x_shape, seed=3), rand(*w_shape, seed=4)]


def pool_grad(x_shape, kernel, stride, dtype=np.float32):
    return (lambda x: gc.grad(F.sum(F.max_pool(x, kernel, stride) ** 2), [x])[0]), \
        [np.random.default_rng(5).permutation(np.linspace(-1, 1, int(np.prod(x_shape)))).reshape(x_shape)
         .astype(dtype)]


def embedding_grad(count, width, rows, into=None, bad=None, dtype=np.float32):
    """The scatter-add of `count` rows of `width` by indices into `rows` rows (repeated indices
    and every row hit or not), into zeros or the tensor `into`, one update `bad` if given."""
    idx = np.random.default_rng(6).integers(0, rows, count)
    updates = rand(count, width, seed=7, dtype=dtype)
    if bad is not None:
        updates[count // 2, 1] = bad
    if into is None:
        return (lambda u: F.scatter_add(np.zeros((rows, width), dtype), idx, u, 0)), [updates]
    return (lambda b, u: F.scatter_add(b, idx, u, 0)), [into.astype(dtype), updates]


def rnn_grad(steps, width=4, reverse=False, layers=1):
    """The gradient of a tanh RNN over `steps` (each step `layers` deep, so that the body's node
    count scales), with respect to its start and inputs."""
    w = rand(width, width, seed=8) * 0.5

    def loss(h0, xs):
        def step(h, x):
            for _ in range(layers):
                h = F.tanh(h @ w + x)
            return h, h * h
        h, ys = gc.scan(step, h0, xs, reverse=reverse)
        return F.sum(h) + F.sum(ys)
    return (lambda h0, xs: gc.grad(loss(h0, xs), [h0, xs])), [rand(2, width, seed=9), rand(steps, 2, width, seed=10)]


def transposed_product(k, m, n, trans_b=False, bias=False, dtype=np.float32):
    """aᵀ·b (a weight gradient's form: a Gemm with transA) of a (k, m) and b (k, n), or (n, k)
    with `trans_b`, plus a bias row with `bias`."""
    b = rand(n, k, seed=13, dtype=dtype) if trans_b else rand(k, n, seed=13, dtype=dtype)
    c = [rand(n, seed=14, dtype=dtype)] if bias else []

    def fn(a, b, *c):
        y = F.transpose(a) @ (F.transpose(b) if trans_b else b)
        return y + c[0] if c else y
    return fn, [rand(k, m, seed=12, dtype=dtype), b, *c]


# (op, strategy): [(what the case shows, threshold crossed or None, side, taken, (fn, inputs))]
CASES = {
    ("conv", "halves"): [
        ("12 filters, 9 positions, 8 images", "HALVES_MIN_BATCH", "at", True, conv((8, 4, 3, 3), (12, 4, 3, 3), pad=1)),
        ("7 images", "HALVES_MIN_BATCH", "below", False, conv((7, 4, 3, 3), (12, 4, 3, 3), pad=1)),
        ("twice as many filters as positions", None, "", True, conv((8, 4, 3, 3), (18, 4, 3, 3), pad=1)),
        ("more than twice", None, "", False, conv((8, 4, 3, 3), (19, 4, 3, 3), pad=1)),
    ],
    ("conv", "depthwise_banded"): [
        ("5x5, 25 taps", "BANDED_MIN_TAPS", "at", True, conv((2, 3, 6, 6), (3, 1, 5, 5), pad=2, groups=3)),
        ("4x6, 24 taps", "BANDED_MIN_TAPS", "below", False, conv((2, 3, 6, 8), (3, 1, 4, 6), pad=1, groups=3)),
        ("rows of 15 for a kernel 5 wide", "BANDED_MAX_WIDTH", "at", True,
         conv((2, 2, 4, 15), (2, 1, 5, 5), pad=2, groups=2)),
        ("rows of 16", "BANDED_MAX_WIDTH", "above", False, conv((2, 2, 4, 16), (2, 1, 5, 5), pad=2, groups=2)),
        ("a bias, uneven padding, taps in the padding only", None, "", True,
         ((lambda x, w, b: F.conv(x, w, b, pad=((4, 1), (1, 6)), groups=4)),
          [rand(3, 4, 2, 3, seed=3), rand(4, 1, 7, 5, seed=4), rand(4, seed=5)])),
        ("two filters per channel", None, "", False, conv((2, 3, 6, 6), (6, 1, 5, 5), pad=2, groups=3)),
        ("stride 2", None, "", False, conv((2, 3, 6, 6), (3, 1, 5, 5), pad=2, stride=2, groups=3)),
        ("dilation 2", None, "", False, conv((2, 3, 9, 9), (3, 1, 5, 5), pad=4, dilation=2, groups=3)),
    ],
    ("conv_transpose", "as_conv"): [
        ("stride 1", None, "", True,
         ((lambda x, w: F.conv_transpose(x, w, pad=1)), [rand(2, 4, 5, 5), rand(4, 3, 3, 3)])),
        ("stride 2", None, "", False,
         ((lambda x, w: F.conv_transpose(x, w, stride=2, pad=1)), [rand(2, 4, 5, 5), rand(4, 3, 3, 3)])),
        ("grouped, stride 1", None, "", True,
         ((lambda x, w: F.conv_transpose(x, w, groups=2)), [rand(2, 4, 5, 5), rand(4, 3, 3, 3)])),
    ],
    ("conv_weight_grad", "depthwise_rows"): [
        ("windows of 80", "DEPTHWISE_ROWS_MIN_LENGTH", "at", True,
         weight_grad((2, 4, 8, 8), 4, (3, 3), pad=1, groups=4)),
        ("windows of 72", "DEPTHWISE_ROWS_MIN_LENGTH", "below", False,
         weight_grad((2, 4, 8, 7), 4, (3, 3), pad=1, groups=4)),
        ("dilated, two filters per channel", None, "", True,
         weight_grad((2, 4, 12, 11), 8, (3, 2), pad=(2, 1), dilation=(2, 3), groups=4)),
        ("unpadded, a row of taps", None, "", True, weight_grad((3, 2, 9, 12), 2, (1, 4), groups=2)),
        ("strided", None, "", False, weight_grad((2, 4, 16, 16), 4, (3, 3), stride=2, pad=1, groups=4)),
        ("one group", None, "", False, weight_grad((2, 1, 16, 16), 4, (3, 3), pad=1)),
        ("float64", None, "", False, weight_grad((2, 4, 8, 8), 4, (3, 3), pad=1, groups=4, dtype=np.float64)),
    ],
    ("conv_weight_grad", "depthwise_conv"): [
        ("25 taps", "DEPTHWISE_CONV_MIN_TAPS", "at", True, weight_grad((2, 4, 6, 6), 4, (5, 5), pad=2, groups=4)),
        ("24 taps", "DEPTHWISE_CONV_MIN_TAPS", "below", False, weight_grad((2, 4, 6, 6), 4, (4, 6), pad=2, groups=4)),
        ("9 strided taps", "DEPTHWISE_STRIDED_CONV_MIN_TAPS", "at", True,
         weight_grad((2, 4, 8, 8), 4, (3, 3), stride=2, pad=1, groups=4)),
        ("8 strided taps", "DEPTHWISE_STRIDED_CONV_MIN_TAPS", "below", False,
         weight_grad((2, 4, 8, 8), 4, (2, 4), stride=2, pad=1, groups=4)),
        ("float64", None, "", False, weight_grad((2, 4, 8, 8), 4, (5, 5), pad=2, groups=4, dtype=np.float64)),
    ],
    ("conv_weight_grad", "depthwise_flat"): [
        ("windows of 128", "DEPTHWISE_FLAT_MIN_LENGTH", "at", True, weight_grad((2, 4, 128), 4, (3,), pad=1, groups=4)),
        ("windows of 127", "DEPTHWISE_FLAT_MIN_LENGTH", "below", False,
         weight_grad((2, 4, 127), 4, (3,), pad=1, groups=4)),
    ],
    ("conv_weight_grad", "patches"): [
        ("4x4 patches", "PATCH_MIN_WIDTH", "at", True, weight_grad((2, 3, 8, 8), 5, (4, 4), stride=4)),
        ("3x3 patches", "PATCH_MIN_WIDTH", "below", False, weight_grad((2, 3, 9, 9), 5, (3, 3), stride=3)),
    ],
    ("conv_weight_grad", "shifted"): [
        ("8 channels, 256 positions", "FEW_CHANNELS", "at", True, weight_grad((2, 8, 16, 16), 8, (3, 3), pad=1)),
        ("7 channels", "FEW_CHANNELS", "below", False, weight_grad((2, 7, 16, 16), 7, (3, 3), pad=1)),
        ("255 positions", "WEIGHT_GRAD_MIN_CONTRACTION", "below", False,
         weight_grad((2, 8, 15, 17), 8, (3, 3), pad=1)),
        ("256 positions", "WEIGHT_GRAD_MIN_CONTRACTION", "at", True, weight_grad((2, 8, 16, 16), 8, (3, 3), pad=1)),
        ("few outputs from many channels", None, "", True, weight_grad((2, 16, 16, 16), 3, (3, 3), pad=1)),
    ],
    ("conv_weight_grad", "taps"): [
        ("7 channels: taps joined", "FEW_CHANNELS", "below", True, weight_grad((4, 7, 6, 6), 8, (3, 3), pad=1)),
        ("8 channels: one product per tap", "FEW_CHANNELS", "at", True, weight_grad((4, 8, 6, 6), 8, (3, 3), pad=1)),
        ("chunks below", "WEIGHT_GRAD_MIN_CONTRACTION", "below", True,
         weight_grad((8, 8, 6, 6), 8, (3, 3), pad=1, stride=2)),
        ("per image", "WEIGHT_GRAD_MIN_CONTRACTION", "at", True, weight_grad((2, 4, 16, 16), 4, (3, 3), pad=1)),
        ("rows of 47", "FLAT_MOVE_MAX_ROW", "below", True, weight_grad((1, 2, 2, 47), 2, (3, 3), pad=1)),
        ("rows of 48", "FLAT_MOVE_MAX_ROW", "at", True, weight_grad((1, 2, 2, 48), 2, (3, 3), pad=1)),
        ("a symbolic-size-free grouped case", None, "", True, weight_grad((2, 4, 5, 5), 6, (3, 3), pad=2, groups=2)),
    ],
    ("gemm", "explicit_transpose"): [
        ("2**25 multiply-adds, a moved", "EXPLICIT_TRANSPOSE_MIN_WORK", "at", True, transposed_product(128, 512, 512)),
        ("2**25 - 2**18", "EXPLICIT_TRANSPOSE_MIN_WORK", "below", False, transposed_product(127, 512, 512)),
        ("b and the product moved, a bias", None, "", True, transposed_product(512, 1024, 64, bias=True)),
        ("a bias, a moved", None, "", True, transposed_product(512, 64, 1024, bias=True)),
        ("bᵀ given: the product moved", None, "", True, transposed_product(512, 256, 256, trans_b=True)),
        ("float64", None, "", False, transposed_product(128, 512, 512, dtype=np.float64)),
    ],
    ("pool_scatter", "unpool"): [
        ("disjoint windows", None, "", True, pool_grad((2, 3, 6, 6), 2, 2)),
        ("overlapping windows", None, "", False, pool_grad((2, 3, 6, 6), 3, 1)),
        ("float64", None, "", False, pool_grad((2, 3, 6, 6), 2, 2, np.float64)),
    ],
    ("softmax", "inner_axis_formula"): [
        ("classes on axis 1 of an image", None, "", True, ((lambda x: F.softmax(x, 1)), [rand(2, 5, 3, 3) * 4])),
        ("last axis", None, "", False, ((lambda x: F.softmax(x, -1)), [rand(2, 5) * 4])),
    ],
    ("log_softmax", "last_axis_kernel"): [
        ("last axis", None, "", True, ((lambda x: F.log_softmax(x, -1)), [rand(2, 5) * 4])),
        ("classes on axis 1 of an image", None, "", False, ((lambda x: F.log_softmax(x, 1)), [rand(2, 5, 3, 3) * 4])),
    ],
    ("softmax_cross_entropy", "last_axis_kernel"): [
        ("last axis", None, "", True,
         ((lambda x, t: F.softmax_cross_entropy(x, t, reduce="none")), [rand(4, 5) * 4, np.array([0, 4, 2, 1])])),
    ],
    ("scatter_add", "sorted_sums"): [
        ("65,536 update elements into zeros (a gather's gradient)", "SORTED_SUMS_MIN", "at", True,
         embedding_grad(4096, 16, 300)),
        ("65,520", "SORTED_SUMS_MIN", "below", False, embedding_grad(4095, 16, 300)),
        ("65,536 into a tensor", "SORTED_SUMS_MIN", "at", True, embedding_grad(4096, 16, 300, into=rand(300, 16))),
        ("an update not finite", None, "", True, embedding_grad(4096, 16, 300, bad=np.inf)),
        ("a NaN update", None, "", True, embedding_grad(4096, 16, 300, bad=np.nan)),
        ("float64", None, "", False, embedding_grad(4096, 16, 300, dtype=np.float64)),
    ],
    ("scan", "outer_reads"): [
        ("4 steps", None, "", True, rnn_grad(4)),
        ("33 steps backwards", None, "", True, rnn_grad(33, reverse=True)),
        ("a fori_loop of 40 steps", None, "", True,
         ((lambda x: gc.fori_loop(0, 40, lambda i, h: F.sin(h) * 1.01, x)), [rand(3, 4, seed=11)])),
    ],
    ("reduce_sum", "leading_product"): [
        ("leading axis", None, "", True, ((lambda x: F.sum(x, 0)), [rand(4, 5)])),
        ("trailing axis", None, "", False, ((lambda x: F.sum(x, 1)), [rand(4, 5)])),
        ("one row", None, "", False, ((lambda x: F.sum(x, 0)), [rand(1, 5)])),
    ],
    ("reduce_mean", "leading_product"): [
        ("leading axes, kept dims", None, "", True, ((lambda x: F.mean(x, (0, 1), keepdims=True)), [rand(3, 2, 5)])),
        ("trailing axis", None, "", False, ((lambda x: F.mean(x, 1)), [rand(4, 5)])),
    ],
}
IDS = [f"{op}-{name}-{i}" for (op, name), cases in CASES.items() for i in range(len(cases))]


def lowered(fn, inputs, target):
    with recorded_lowerings() as seen:
        cf = gc.compile(fn, *inputs, provider="cpu", target=target)
    return cf.run_flat(*inputs), seen


@pytest.mark.parametrize("key, case", [(k, c) for k, cases in CASES.items() for c in cases], ids=IDS)
def test_a_strategy_agrees_with_the_plain_form(key, case):
    what, _, _, taken, (fn, inputs) = case
    tuned, seen = lowered(fn, inputs, "ort-cpu")
    assert (key in seen) == taken, f"{what}: {key} {'not ' if taken else ''}taken ({dict(seen)})"
    try:
        plain, seen_plain = lowered(fn, inputs, "portable")
        assert all(name == "plain" for _, name in seen_plain)
    except gc.GcompileError as err:      # a float64 plain form ONNX Runtime's CPU provider has no kernel for
        assert "no float64 kernel" in str(err)
        plain = evaluate(trace(fn, inputs).graph, inputs)
    for t, p in zip(tuned, plain):
        scale = max(1.0, float(np.abs(p[np.isfinite(p)]).max(initial=0)))
        np.testing.assert_allclose(t, p, rtol=1e-5, atol=1e-5 * scale, err_msg=what)


def test_every_strategy_has_cases_on_both_sides_of_each_threshold():
    registered = {(s.op, s.name): s for target in TARGETS.values() for found in target.strategies.values()
                  for s in found}
    assert set(registered) == set(CASES)
    for key, s in registered.items():
        for threshold in s.thresholds:
            assert hasattr(sys.modules[s.lower.__module__], threshold), (key, threshold)
            sides = {side for _, crossed, side, _, _ in CASES[key] if crossed == threshold}
            assert sides in ({"below", "at"}, {"at", "above"}), f"{key}: {threshold} has cases {sides or 'none'}"


def test_an_embedding_gradient_makes_no_zeros_table_for_its_fallback():
    """The sorted sums write the gradient of a gather from a table in one pass; the plain form, the
    If's fallback for non-finite updates, adds into zeros it makes inside its branch. Made outside,
    ONNX Runtime filled a table of zeros on every run (a Llama's 94 MiB embedding gradient held
    beside the result), and a value only a branch reads is made whether or not the branch runs."""
    from gcompile.lowering.reads import node_reads, subgraphs
    table = np.zeros((3000, 64), np.float32)
    idx = np.random.default_rng(0).integers(0, 3000, (8, 128))
    cf = gc.compile(lambda t, g: gc.vjp(lambda t: F.take(t, idx, 0), t)[1](g)[0],
                    gc.spec((3000, "d")), gc.spec((8, 128, "d")), provider="cpu", target="ort-cpu")
    graph = cf.model.graph
    branching = [node for node in graph.node if subgraphs(node)]
    assert [node.op_type for node in branching] == ["If"]
    outside = {name for node in graph.node if not subgraphs(node) for name in node_reads(node)}
    only_branches = [node.op_type for node in graph.node
                     if not subgraphs(node) and not set(node.output) & (outside | {o.name for o in graph.output})]
    assert "ConstantOfShape" not in only_branches and "Expand" not in only_branches, only_branches
    g = np.random.default_rng(1).standard_normal((8, 128, 64)).astype(np.float32)
    want = np.zeros_like(table)
    np.add.at(want, idx.ravel(), g.reshape(-1, 64))
    np.testing.assert_allclose(cf(table, g), want, rtol=1e-5, atol=1e-5)
    g[0, 0, 0] = np.inf                          # the fallback's branch
    want[idx[0, 0], 0] = np.inf
    np.testing.assert_array_equal(np.isinf(cf(table, g)), np.isinf(want))
