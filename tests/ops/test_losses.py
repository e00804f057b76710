"""Losses, normalisation, scaled_dot_product_attention and embedding_bag: forward through
onnxruntime against numpy written from PyTorch's definitions, float64 gradient checks at orders 1
and 2, and the edges (probabilities of exactly 0 and 1, ignored targets, zero vectors, fully
masked attention rows, empty bags, padding ids). tests/ops/test_torch_parity.py compares them
with PyTorch's own values and gradients."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.tensor import apply_n
from gcompile.testing import check_lowering

from ..opcheck import check_forward, check_grads, check_values

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape)


X, Y = rand(4, 5), rand(4, 5)
LOG_PROBS = X - np.log(np.exp(X).sum(1, keepdims=True))
TARGET = np.array([1, 2, 0, 4])


# -- losses ---------------------------------------------------------------------------------------------
def test_nll_loss():
    w = RNG.random(5) + 0.5
    picked = LOG_PROBS[np.arange(4), TARGET]
    kept = TARGET != 2
    expected = -(picked * w[TARGET] * kept).sum() / (w[TARGET] * kept).sum()
    check_forward(lambda a, t, w: F.nll_loss(a, t, w, ignore_index=2), [LOG_PROBS, TARGET, w], expected)
    check_forward(lambda a, t: F.nll_loss(a, t, reduction="none"), [LOG_PROBS, TARGET], -picked)
    check_forward(lambda a: F.nll_loss(a[0], np.array(3)), [LOG_PROBS], -LOG_PROBS[0, 3])
    check_grads(lambda a, w: F.nll_loss(a, TARGET, w, ignore_index=0), [LOG_PROBS, w])
    got = gc.compile(lambda a, t: F.nll_loss(a, t, ignore_index=1), LOG_PROBS, np.ones(4, np.int64),
                     provider="cpu")(LOG_PROBS, np.ones(4, np.int64))
    assert np.isnan(got)                                   # every target ignored: 0 / 0, as torch


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss_of_one_unbatched_sample_is_0_d(reduction):
    """A (C,) input with a 0-d target is one sample: torch's loss is 0-d for every reduction."""
    w = np.array([0.5, 1.0, 2.0, 1.5, 3.0])
    expected = -LOG_PROBS[0, 3] * (w[3] if reduction != "mean" else 1.0)
    check_forward(lambda a, w: F.nll_loss(a[0], np.array(3), w, reduction=reduction), [LOG_PROBS, w],
                  np.asarray(expected))
    check_grads(lambda a, w: F.nll_loss(a[0], np.array(3), w, reduction=reduction), [LOG_PROBS, w])


def test_binary_cross_entropy_clamps_its_logs_at_minus_100():
    p = np.array([0.0, 1.0, 0.3, 0.999])
    t = np.array([1.0, 0.0, 0.4, 1.0])
    with np.errstate(divide="ignore"):
        expected = -(t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log1p(-p), -100))
    check_forward(lambda p, t: F.binary_cross_entropy(p, t, reduction="none"), [p, t], expected, rtol=1e-12)
    check_grads(lambda p, t: F.binary_cross_entropy(p, t, weight=np.array([2.0, 1])), [p[2:] * 0.5 + 0.2, t[2:]])


def test_binary_cross_entropy_with_logits_is_stable():
    x = np.array([-800.0, -2.0, 0.0, 3.0, 800.0])
    t = np.array([0.2, 1.0, 0.5, 0.0, 1.0])
    pw = 1.5
    sp = np.logaddexp(0, -x)
    expected = (1 - t) * x + (1 + (pw - 1) * t) * sp
    check_forward(lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none", pos_weight=pw), [x, t],
                  expected, rtol=1e-12)
    check_grads(lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw), [x[1:4] + 0.1, t[1:4]])


@pytest.mark.parametrize("name, np_fn", [
    ("l1_loss", lambda d: np.abs(d)),
    ("smooth_l1_loss", lambda d: np.where(np.abs(d) < 1, 0.5 * d * d, np.abs(d) - 0.5)),
    ("huber_loss", lambda d: np.where(np.abs(d) < 1, 0.5 * d * d, np.abs(d) - 0.5)),
])
def test_regression_losses(name, np_fn):
    check_forward(lambda a, b: getattr(F, name)(a, b, reduction="none"), [X, Y], np_fn(X - Y), rtol=1e-12)
    check_grads(lambda a, b: getattr(F, name)(a, b), [X, Y])


def test_smooth_l1_and_huber_parameters():
    d = X - Y
    check_forward(lambda a, b: (F.smooth_l1_loss(a, b, "sum", beta=0.5), F.huber_loss(a, b, "sum", delta=0.5),
                                F.smooth_l1_loss(a, b, beta=0.0)), [X, Y],
                  [np.where(np.abs(d) < 0.5, d * d, np.abs(d) - 0.25).sum(),
                   np.where(np.abs(d) < 0.5, 0.5 * d * d, 0.5 * (np.abs(d) - 0.25)).sum(), np.abs(d).mean()],
                  rtol=1e-12)


def test_kl_div():
    q = np.exp(LOG_PROBS[::-1])
    q[0, 0] = 0                                            # a zero target contributes 0
    pointwise = np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0) - q * LOG_PROBS
    check_forward(lambda a, b: (F.kl_div(a, b, "batchmean"), F.kl_div(a, b, "none"), F.kl_div(a[1:], np.log(b[1:]),
                                                                                           "sum", log_target=True)),
                  [LOG_PROBS, q], [pointwise.sum() / 4, pointwise, pointwise[1:].sum()], rtol=1e-12)
    check_grads(lambda a, b: F.kl_div(a, b, "batchmean"), [LOG_PROBS, q[1:2] + 0.5])
    check_grads(lambda a, b: F.kl_div(a, b, "mean", log_target=True), [LOG_PROBS, LOG_PROBS[::-1]])


def test_cosine_similarity_and_pairwise_distance():
    expected = (X * Y).sum(1) / np.linalg.norm(X, axis=1) / np.linalg.norm(Y, axis=1)
    check_forward(lambda a, b: F.cosine_similarity(a, b), [X, Y], expected, rtol=1e-12)
    zero = X.copy()
    zero[1] = 0
    check_forward(lambda a, b: F.cosine_similarity(a, b), [zero, Y], np.where(np.arange(4) == 1, 0, expected),
                  rtol=1e-12, atol=1e-15)
    check_grads(lambda a, b: F.cosine_similarity(a, b, axis=0), [X, Y[:1]])
    check_forward(lambda a, b: F.pairwise_distance(a, b, p=3), [X, Y],
                  (np.abs(X - Y + 1e-6) ** 3).sum(-1) ** (1 / 3), rtol=1e-12)
    check_grads(lambda a, b: F.pairwise_distance(a, b), [X, Y])


def test_margin_losses():
    s = np.sign(rand(5))
    check_forward(lambda a, b, s: F.margin_ranking_loss(a, b, s, margin=0.3, reduction="none"), [X[0], Y[0], s],
                  np.maximum(0, -s * (X[0] - Y[0]) + 0.3), rtol=1e-12)
    y = np.sign(Y)
    check_forward(lambda a, y: F.hinge_embedding_loss(a, y, 0.8, "none"), [X, y],
                  np.where(y == 1, X, np.maximum(0, 0.8 - X)), rtol=1e-12)
    d_pos = np.linalg.norm(X - Y + 1e-6, axis=-1)
    d_neg = np.linalg.norm(X - X[::-1] + 1e-6, axis=-1)
    check_forward(lambda a, p, n: F.triplet_margin_loss(a, p, n, reduction="none"), [X, Y, X[::-1]],
                  np.maximum(d_pos - d_neg + 1, 0), rtol=1e-12)
    check_grads(lambda a, b: F.margin_ranking_loss(a, b, s, margin=0.3), [X[0], Y[0]])
    check_grads(lambda a: F.hinge_embedding_loss(a, y, 0.8), [X])
    check_grads(lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=3.0, p=3, swap=True), [X, Y, rand(4, 5)])


def test_bad_reduction_is_named():
    with pytest.raises(gc.GcompileError, match="l1_loss: reduction must be"):
        gc.compile(lambda a, b: F.l1_loss(a, b, "avg"), X, Y)


# -- normalisation -----------------------------------------------------------------------------------------
IMG = rand(2, 6, 3, 2)


def standardise(x, axes, eps=1e-5):
    xc = x - x.mean(axes, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(axes, keepdims=True) + eps)


def test_group_and_instance_norm():
    w, b = rand(6), rand(6)
    grouped = standardise(IMG.reshape(2, 3, -1), (2,)).reshape(IMG.shape)
    check_forward(lambda x, w, b: F.group_norm(x, 3, w, b), [IMG, w, b],
                  grouped * w[:, None, None] + b[:, None, None], rtol=1e-10)
    check_forward(lambda x: F.instance_norm(x), [IMG], standardise(IMG, (2, 3)), rtol=1e-10)
    check_grads(lambda x, w, b: F.group_norm(x, 2, w, b), [IMG, w, b])
    check_grads(lambda x, w: F.instance_norm(x, w), [IMG, w])
    with pytest.raises(gc.ShapeError, match="divisible by num_groups=4"):
        gc.compile(lambda x: F.group_norm(x, 4), IMG)


def _group_norm_stats(x, groups, eps=1e-5):
    grouped = x.reshape(x.shape[0], groups, -1)
    return grouped.mean(2), 1 / np.sqrt(grouped.var(2) + eps)


def test_group_norm_to_third_order_and_through_its_statistics():
    """The closed-form VJP reads the op's mean and rstd outputs, so a second backward sends
    cotangents into them: each output alone, a product of them, and order 3 check that path."""
    w, b = rand(6), rand(6)
    def outputs(x, w, b):
        return apply_n("group_norm", [x, w, b], groups=3, eps=1e-5)

    check_forward(outputs, [IMG, w, b], [
        standardise(IMG.reshape(2, 3, -1), (2,)).reshape(IMG.shape) * w[:, None, None] + b[:, None, None],
        *_group_norm_stats(IMG, 3)], rtol=1e-10)
    for i in range(3):
        check_grads(lambda x, w, b, i=i: outputs(x, w, b)[i], [IMG, w, b])

    def mixed(x, w, b):
        y, mu, rstd = outputs(x, w, b)
        return F.sum(F.reshape(y * y, (2, 3, -1)), 2) * rstd * mu
    check_grads(mixed, [IMG, w, b])
    check_grads(lambda x, w, b: F.tanh(F.group_norm(x, 2, w, b)), [IMG, w, b], order=3)
    check_grads(lambda x: F.silu(F.group_norm(x, 1)), [rand(3, 4)], order=3)       # (N, C): no positions


@pytest.mark.parametrize("order", [1, 2])
def test_group_norm_gradients_on_onnxruntime_equal_the_reference(order):
    x, w, b, gy = rand(3, 8, 5, 4), rand(8), rand(8), rand(3, 8, 5, 4)

    def loss(x, w, b):
        return F.sum(F.silu(F.group_norm(x, 4, w, b)) * gy)

    def grads(x, w, b):
        g = gc.grad(loss(x, w, b), [x, w, b])
        return g if order == 1 else gc.grad(F.sum(g[0] * gy) + F.sum(g[1] * w), [x, w, b])

    check_lowering(grads, [x, w, b], rtol=1e-9, atol=1e-10)


def test_group_norm_edges():
    # a large mean against a small spread (float32): the statistics come from the centred groups
    x = (1e4 + RNG.standard_normal((2, 4, 8, 8))).astype(np.float32)
    got = gc.compile(lambda x: F.group_norm(x, 2), x, provider="cpu")(x)
    np.testing.assert_allclose(got, standardise(x.astype(np.float64).reshape(2, 2, -1), (2,)).reshape(x.shape),
                               atol=2e-3)
    # a constant group: y = 0, the gradient is finite
    flat = np.ones((1, 4, 3), np.float32)
    def value_and_grad(x):
        y = F.group_norm(x, 2)
        return y, gc.grad(F.sum(y ** 3 + y), [x])
    y, (gx,) = gc.compile(value_and_grad, flat, provider="cpu")(flat)
    np.testing.assert_array_equal(y, 0)
    assert np.isfinite(gx).all()
    # a NaN spoils its own group only
    x = rand(1, 4, 3)
    x[0, 0, 0] = np.nan
    y = gc.compile(lambda x: F.group_norm(x, 2), x, provider="cpu")(x)
    assert np.isnan(y[0, :2]).all() and np.isfinite(y[0, 2:]).all()
    # empty batch, empty positions: empty outputs, zero parameter gradients
    for shape in [(0, 4, 3), (2, 4, 0)]:
        x, w = np.zeros(shape), rand(4)
        y, (gx, gw) = gc.compile(lambda x, w: (F.group_norm(x, 2, w), gc.grad(F.sum(F.group_norm(x, 2, w)), [x, w])),
                                 x, w, provider="cpu")(x, w)
        assert y.shape == gx.shape == shape
        np.testing.assert_array_equal(gw, 0)
        # the reference evaluator too (its reshape to groups of -1 failed at an empty batch)
        check_values(lambda x, w: (F.group_norm(x, 2, w), *gc.grad(F.sum(F.group_norm(x, 2, w)), [x, w])), [x, w],
                     [x, x, np.zeros(4)])


def test_group_norm_with_symbolic_batch_and_positions():
    fn = lambda x, w: gc.grad(F.sum(F.group_norm(x, 2, w) ** 3), [x, w])      # noqa: E731
    cf = gc.compile(fn, gc.spec(("n", 4, "h", "w"), np.float64), gc.spec((4,), np.float64), provider="cpu")
    w = rand(4)
    for shape in [(2, 4, 3, 5), (1, 4, 6, 1)]:
        x = rand(*shape)
        for got, want in zip(cf(x, w), gc.compile(fn, x, w, provider="cpu")(x, w)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_rms_norm_and_normalize():
    w = rand(3, 2)
    check_forward(lambda x, w: F.rms_norm(x, (3, 2), w), [IMG, w],
                  IMG / np.sqrt((IMG ** 2).mean((2, 3), keepdims=True) + np.finfo(np.float64).eps) * w, rtol=1e-10)
    zero = X.copy()
    zero[2] = 0
    check_forward(lambda x: F.normalize(x), [zero], zero / np.maximum(np.linalg.norm(zero, axis=1, keepdims=True),
                                                                       1e-12), rtol=1e-12)
    check_grads(lambda x, w: F.rms_norm(x, 2, w[0], eps=1e-3), [IMG, w])
    check_grads(lambda x: (F.normalize(x), F.normalize(x, p=1.5, axis=0)), [X])
    got = gc.compile(lambda x: gc.grad(F.sum(F.normalize(x) * Y), [x])[0], zero, provider="cpu")(zero)
    assert np.isfinite(got).all()                          # the norm's gradient at a zero vector is 0, as torch


def torch_norm(x, p, axis):
    """torch.linalg.vector_norm over `axis`, kept: p = 0 counts the nonzeros, +-inf is max/min |x|, a
    negative p is 0 where an entry is 0."""
    a = np.abs(x)
    if p == 0:
        return (x != 0).sum(axis, keepdims=True).astype(x.dtype)
    if np.isinf(p):
        return (a.max if p > 0 else a.min)(axis, keepdims=True)
    with np.errstate(divide="ignore"):
        return (a ** p).sum(axis, keepdims=True) ** (1 / p)


@pytest.mark.parametrize("p", [0, -np.inf, -1.0, 0.5])
def test_normalize_and_pairwise_distance_take_every_p_of_vector_norm(p):
    """p = 0 (torch's count of nonzeros: no gradient), -inf and negative p, which normalize and
    pairwise_distance mistook (p = 0 divided by zero while tracing; -inf took max |x|); a zero row
    and a zero entry included."""
    x = X.copy()
    x[2], x[1, 3] = 0, 0
    check_forward(lambda x: F.normalize(x, p=p), [x], x / np.maximum(torch_norm(x, p, 1), 1e-12), rtol=1e-12)
    check_forward(lambda a, b: F.pairwise_distance(a, b, p=p), [x, Y], torch_norm(x - Y + 1e-6, p, -1)[:, 0],
                  rtol=1e-12)
    check_grads(lambda x: (F.normalize(x, p=p), F.pairwise_distance(x, Y, p=p)), [X])
    if p == 0:
        got = gc.compile(lambda x: gc.grad(F.sum(F.normalize(x, p=0) * Y), [x])[0], x, provider="cpu")(x)
        np.testing.assert_allclose(got, Y / np.maximum(torch_norm(x, 0, 1), 1e-12), rtol=1e-12)


# -- attention and bags -----------------------------------------------------------------------------------
def attention(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        mask = np.tril(np.ones(s.shape[-2:], bool))
    if mask is not None and mask.dtype == bool:
        s = np.where(mask, s, -np.inf)
    elif mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        w = np.exp(s - s.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
    return np.nan_to_num(w) @ v


QKV = [rand(2, 4, 3), rand(2, 5, 3), rand(2, 5, 2)]


def test_a_mask_known_when_tracing_is_added_not_selected():
    """is_causal (or a numpy mask) adds 0 / -inf to the scores, as torch's reference does: no
    Where in the step, forward or backward; a masked score of +inf gives NaN there as in torch."""
    q, k, v = (a.astype(np.float32) for a in QKV)
    step = lambda q, k, v: gc.grad(F.sum(F.scaled_dot_product_attention(q, k, v, is_causal=True) ** 2),  # noqa: E731
                                   [q, k, v])
    assert "Where" not in {n.op_type for n in gc.compile(step, q, k, v, provider="cpu").model.graph.node}
    big = q.copy()
    big[0, 0] = np.inf               # row 0's scores: ±inf, +inf at some masked keys
    y = gc.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), big, k, v,
                   provider="cpu")(big, k, v)
    s = big[0, 0] @ k[0].T / np.sqrt(3) + np.where(np.arange(5) <= 0, 0, -np.inf)     # torch's reference: inf - inf
    assert np.isnan(s).any() and np.isnan(y[0, 0]).all()
    assert np.isfinite(y[1]).all() and np.isfinite(y[0, 1:]).all()


def test_scaled_dot_product_attention():
    mask = RNG.random((4, 5)) > 0.4
    mask[2] = False                                        # a row with nothing to attend to gives zeros
    bias = rand(4, 5)
    check_forward(lambda q, k, v, m: (F.scaled_dot_product_attention(q, k, v),
                                      F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                      F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.4),
                                      F.scaled_dot_product_attention(q, k, v, attn_mask=bias)),
                  QKV + [mask], [attention(*QKV), attention(*QKV, mask), attention(*QKV, causal=True, scale=0.4),
                                 attention(*QKV, bias)], rtol=1e-10, atol=1e-12)
    check_grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), QKV)
    check_grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), QKV)
    with pytest.raises(gc.UnsupportedError, match="needs training=True"):
        gc.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1), *QKV)
    y = gc.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, training=True, seed=1),
                   *QKV, provider="cpu")(*QKV)
    assert y.shape == (2, 4, 2) and np.isfinite(y).all()


TABLE = rand(10, 3)
IDS = np.array([3, 7, 3, 0, 9, 9, 1, 4, 7])
OFFSETS = [0, 2, 2, 6]                                     # bags [0:2], [] (empty), [2:6], [6:9]


def bags(ids, offsets, mode, padding_idx=None, weights=None):
    ends = list(offsets[1:]) + [len(ids)]
    rows = TABLE[ids] * (1 if weights is None else weights[:, None])
    out = []
    for s, e in zip(offsets, ends):
        keep = [j for j in range(s, e) if ids[j] != padding_idx]
        part = rows[keep]
        out.append(np.zeros(3) if not keep else {"sum": part.sum(0), "mean": part.mean(0), "max": part.max(0)}[mode])
    return np.stack(out)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    check_forward(lambda w, i: (F.embedding_bag(i, w, OFFSETS, mode), F.embedding_bag(i, w, OFFSETS, mode,
                                                                                      padding_idx=3)),
                  [TABLE, IDS], [bags(IDS, OFFSETS, mode), bags(IDS, OFFSETS, mode, padding_idx=3)], rtol=1e-12)
    square = IDS.reshape(3, 3)
    check_forward(lambda w, i: F.embedding_bag(i, w, mode=mode), [TABLE, square],
                  bags(IDS, [0, 3, 6], mode), rtol=1e-12)
    check_grads(lambda w: F.embedding_bag(IDS, w, OFFSETS, mode, padding_idx=9), [TABLE])
    cf = gc.compile(lambda w, i: F.embedding_bag(i, w, mode=mode), TABLE, gc.spec(("bags", 3), np.int64))
    np.testing.assert_allclose(cf(TABLE, square[:2]), bags(IDS[:6], [0, 3], mode), rtol=1e-12)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_negative_padding_idx_counts_from_the_end(mode):
    """torch reads padding_idx=-1 as the last row (V - 1 = 9 here), and refuses one outside [-V, V)."""
    check_forward(lambda w, i: F.embedding_bag(i, w, OFFSETS, mode, padding_idx=-1), [TABLE, IDS],
                  bags(IDS, OFFSETS, mode, padding_idx=9), rtol=1e-12)
    check_grads(lambda w: F.embedding_bag(IDS, w, OFFSETS, mode, padding_idx=-7), [TABLE])
    with pytest.raises(gc.ShapeError, match=r"padding_idx -11 must lie in \[-V, V\)"):
        gc.compile(lambda w: F.embedding_bag(IDS, w, OFFSETS, mode, padding_idx=-11), TABLE)


def test_embedding_bag_weights_and_last_offset():
    psw = rand(9)
    check_forward(lambda w, i, p: (F.embedding_bag(i, w, OFFSETS, "sum", per_sample_weights=p),
                                   F.embedding_bag(i, w, [0, 3, 9], "sum", include_last_offset=True)),
                  [TABLE, IDS, psw], [bags(IDS, OFFSETS, "sum", weights=psw), bags(IDS, [0, 3], "sum")], rtol=1e-12)
    check_grads(lambda w, p: F.embedding_bag(IDS, w, OFFSETS, "sum", per_sample_weights=p), [TABLE, psw])
    with pytest.raises(gc.ShapeError, match="per_sample_weights need mode='sum'"):
        gc.compile(lambda w: F.embedding_bag(IDS, w, OFFSETS, "mean", per_sample_weights=psw), TABLE)
    with pytest.raises(gc.UnsupportedError, match="offsets must be known when tracing"):
        gc.compile(lambda w, o: F.embedding_bag(IDS, w, o), TABLE, np.array([0, 4]))


# -- likelihood and margin losses (PyTorch's formulas written out in numpy) -------------------------------------
def softplus(z):
    return np.logaddexp(0, z)


def test_poisson_and_gaussian_nll_losses():
    rate, counts = rand(3, 4), np.abs(np.round(3 * rand(3, 4)))
    stirling = np.where(counts > 1, counts * np.log(np.maximum(counts, 1)) - counts
                        + 0.5 * np.log(2 * np.pi * np.maximum(counts, 1)), 0)
    p = np.exp(rate)
    check_forward(lambda x, t: (F.poisson_nll_loss(x, t), F.poisson_nll_loss(x, t, full=True, reduction="none"),
                                F.poisson_nll_loss(F.exp(x), t, log_input=False, reduction="sum")), [rate, counts],
                  [np.mean(p - counts * rate), p - counts * rate + stirling,
                   np.sum(p - counts * np.log(p + 1e-8))], rtol=1e-12)
    x, t, v = rand(3, 4), rand(3, 4), np.abs(rand(3, 4)) + 0.1
    half_log_2pi = 0.5 * np.log(2 * np.pi)
    row_var = np.abs(rand(3)) + 0.1
    check_forward(lambda x, t, v, r: (F.gaussian_nll_loss(x, t, v), F.gaussian_nll_loss(x, t, v, full=True,
                                                                                         reduction="sum"),
                                      F.gaussian_nll_loss(x, t, r, reduction="none")), [x, t, v, row_var],
                  [np.mean(0.5 * (np.log(v) + (x - t) ** 2 / v)),
                   np.sum(0.5 * (np.log(v) + (x - t) ** 2 / v) + half_log_2pi),
                   0.5 * (np.log(row_var[:, None]) + (x - t) ** 2 / row_var[:, None])], rtol=1e-12)
    check_grads(lambda x, t, v: (F.poisson_nll_loss(x, t, reduction="none"), F.gaussian_nll_loss(x, t, v)),
                [rate, counts + 0.5, v])
    # var below eps is clamped, and its gradient passes the clamp (torch clamps without recording it)
    g = gc.compile(lambda v: gc.grad(F.gaussian_nll_loss(np.ones(2), np.zeros(2), v, reduction="sum"), [v])[0],
                   np.array([1e-9, 2.0]))(np.array([1e-9, 2.0]))
    np.testing.assert_allclose(g, [0.5 / 1e-6 - 0.5 / 1e-12, 0.5 / 2 - 0.5 / 4], rtol=1e-12)
    with pytest.raises(gc.ShapeError, match="gaussian_nll_loss: var .* does not fit input"):
        gc.compile(F.gaussian_nll_loss, x, t, rand(2))


def test_cosine_embedding_and_soft_margin_losses():
    a, b, y = rand(4, 3), rand(4, 3), np.array([1.0, -1.0, 1.0, -1.0])
    a[1] = 0.0                                                             # a zero vector: torch's 1e-12
    cos = (a * b).sum(1) / np.sqrt(((a * a).sum(1) + 1e-12) * ((b * b).sum(1) + 1e-12))
    want = np.where(y == 1, 1 - cos, np.maximum(cos - 0.2, 0))
    check_forward(lambda a, b, y: (F.cosine_embedding_loss(a, b, y, 0.2, "none"), F.cosine_embedding_loss(a, b, y),
                                   F.cosine_embedding_loss(a[0], b[0], y[0])), [a, b, y],
                  [want, np.mean(np.where(y == 1, 1 - cos, np.maximum(cos, 0))), 1 - cos[0]], rtol=1e-12)
    x = rand(3, 4)
    t = np.sign(rand(3, 4))
    check_forward(lambda x, t: (F.soft_margin_loss(x, t),
                                F.multilabel_soft_margin_loss(x, (t + 1) / 2, reduction="none"),
                                F.multilabel_soft_margin_loss(x, (t + 1) / 2, weight=np.arange(4.0))), [x, t],
                  [np.mean(softplus(-t * x)), np.mean((t + 1) / 2 * softplus(-x) + (1 - t) / 2 * softplus(x), 1),
                   np.mean(np.mean(((t + 1) / 2 * softplus(-x) + (1 - t) / 2 * softplus(x)) * np.arange(4.0), 1))],
                  rtol=1e-12)
    check_forward(F.soft_margin_loss, [np.array([800.0, -800.0]), np.array([-1.0, 1.0])], np.float64(800.0))
    check_grads(lambda a, b, x: (F.cosine_embedding_loss(a, b, y, 0.1, "none"), F.soft_margin_loss(x, t),
                                 F.multilabel_soft_margin_loss(x, (t + 1) / 2)), [a + 0.1, b, x])


def multi_margin(x, y, p=1, margin=1.0, weight=None):
    n, c = x.shape
    out = np.zeros(n)
    for i in range(n):
        for j in range(c):
            if j != y[i]:
                out[i] += max(0.0, margin - x[i, y[i]] + x[i, j]) ** p * (1 if weight is None else weight[y[i]])
    return out / c


def multilabel_margin(x, y):
    n, c = x.shape
    out = np.zeros(n)
    for i in range(n):
        listed = []
        for k in y[i]:
            if k < 0:
                break
            listed.append(k)
        for j in listed:
            out[i] += sum(max(0.0, 1 - x[i, j] + x[i, k]) for k in range(c) if k not in listed)
    return out / c


def test_multi_margin_and_multilabel_margin_losses():
    x = rand(5, 4)
    y = np.array([0, 3, 1, 1, 2])
    w = np.abs(rand(4))
    check_forward(lambda x: (F.multi_margin_loss(x, y, reduction="none"), F.multi_margin_loss(x, y, p=2, margin=0.5),
                             F.multi_margin_loss(x, y, weight=w, reduction="sum"), F.multi_margin_loss(x[0], y[0])),
                  [x], [multi_margin(x, y), np.mean(multi_margin(x, y, 2, 0.5)),
                        np.sum(multi_margin(x, y, weight=w)), multi_margin(x[:1], y[:1])[0]], rtol=1e-12)
    labels = np.array([[3, 0, -1, 1], [1, 1, 2, -1], [-1, 2, 0, 0], [0, 1, 2, 3], [2, -1, -1, -1]])
    check_forward(lambda x: (F.multilabel_margin_loss(x, labels, "none"), F.multilabel_margin_loss(x, labels),
                             F.multilabel_margin_loss(x[0], labels[0])), [x],
                  [multilabel_margin(x, labels), np.mean(multilabel_margin(x, labels)),
                   multilabel_margin(x[:1], labels[:1])[0]], rtol=1e-12)
    check_forward(lambda x: (F.multi_margin_loss(x, np.array(0)), F.multilabel_margin_loss(x, np.array(0))),
                  [np.array(1.5)], [0.0, 0.0])              # one class: nothing to compare
    check_grads(lambda x, y, labels: (F.multi_margin_loss(x, y, reduction="none"), F.multi_margin_loss(x, y, p=2),
                                      F.multilabel_margin_loss(x, labels, "none")), [x, y, labels])


def np_local_response_norm(x, size, alpha, beta, k):
    c = x.shape[1]
    sq = x * x
    div = np.zeros_like(x)
    for ch in range(c):
        lo, hi = ch - size // 2, ch + (size - 1) // 2
        div[:, ch] = sq[:, max(lo, 0):min(hi, c - 1) + 1].sum(1)
    return x / (k + alpha * div / size) ** beta


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_local_response_norm(size):
    x = rand(2, 4, 3, 2)
    check_forward(lambda x: F.local_response_norm(x, size, alpha=0.3, beta=0.6, k=1.5), [x],
                  np_local_response_norm(x, size, 0.3, 0.6, 1.5), rtol=1e-12)
    check_grads(lambda x: F.local_response_norm(x, size, alpha=0.3), [x[:, :, :, 0]])


def test_local_response_norm_edges():
    check_forward(lambda x: F.local_response_norm(x, 3), [np.zeros((2, 3, 0))], np.zeros((2, 3, 0)))
    with pytest.raises(gc.ShapeError, match=r"local_response_norm: x must be \(N, C, \*\)"):
        gc.compile(lambda x: F.local_response_norm(x, 3), rand(3))


def test_pytorch_losses_of_an_empty_batch():
    """An empty batch: reduction 'none' gives an empty loss, 'sum' 0, 'mean' NaN (0/0, as torch's
    own for these losses; its multi_margin and multilabel_margin return whatever memory held), and
    the gradient is empty."""
    x, y, labels, listed = np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), np.zeros((0, 4), np.int64)
    losses = [(lambda x, r: F.cosine_embedding_loss(x, x + 1, y, reduction=r), (0,)),
              (lambda x, r: F.poisson_nll_loss(x, x, reduction=r), (0, 4)),
              (lambda x, r: F.gaussian_nll_loss(x, x, x * x + 1, reduction=r), (0, 4)),
              (lambda x, r: F.soft_margin_loss(x, x, r), (0, 4)),
              (lambda x, r: F.multi_margin_loss(x, labels, reduction=r), (0,)),
              (lambda x, r: F.multilabel_margin_loss(x, listed, r), (0,)),
              (lambda x, r: F.multilabel_soft_margin_loss(x, x, reduction=r), (0,))]
    check_forward(lambda x: [loss(x, r) for loss, _ in losses for r in ("none", "sum", "mean")], [x],
                  [want for _, shape in losses for want in (np.zeros(shape), 0.0, np.nan)])
    check_values(lambda x: gc.grad(sum(F.sum(loss(x, "sum")) for loss, _ in losses), [x]), [x], [x])
