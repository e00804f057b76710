"""ctc_loss: forward through onnxruntime against a per-sequence numpy forward algorithm
written here, numeric gradient checks to second order (variable lengths, every reduction),
impossible alignments (inf / zero_infinity, never NaN gradients), long sequences and errors."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_forward, check_grads

LABELS = np.array([[1, 2, 2], [3, 1, 0], [2, 0, 0]], np.int64)
LABEL_LENGTHS = np.array([3, 2, 1], np.int64)
INPUT_LENGTHS = np.array([6, 4, 5], np.int64)


def log_probs(steps=6, batch=3, classes=4, seed=0):
    x = np.random.default_rng(seed).standard_normal((steps, batch, classes))
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_ctc(lp, labels, input_lengths, label_lengths, blank=0):
    """-log p(labels | lp) per sequence: the textbook recursion over the extended labels."""
    out = []
    for n in range(lp.shape[1]):
        lab = labels[n, :label_lengths[n]]
        ext = [blank]
        for c in lab:
            ext += [int(c), blank]
        alpha = np.full(len(ext), -np.inf)
        alpha[0] = lp[0, n, ext[0]]
        if len(ext) > 1:
            alpha[1] = lp[0, n, ext[1]]
        for t in range(1, input_lengths[n]):
            prev = alpha.copy()
            for s in range(len(ext)):
                terms = [prev[s]] + ([prev[s - 1]] if s >= 1 else [])
                if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                    terms.append(prev[s - 2])
                alpha[s] = np.logaddexp.reduce(terms) + lp[t, n, ext[s]]
        out.append(-np.logaddexp.reduce(alpha[-2:] if len(ext) > 1 else alpha[-1:]))
    return np.array(out)


def np_reduce(loss, label_lengths, reduce):
    if reduce == "none":
        return loss
    return loss.sum() if reduce == "sum" else np.mean(loss / np.maximum(label_lengths, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduce", ["none", "sum", "mean"])
def test_ctc_forward(dtype, reduce):
    lp = log_probs()
    expected = np_reduce(np_ctc(lp, LABELS, INPUT_LENGTHS, LABEL_LENGTHS), LABEL_LENGTHS, reduce)
    check_forward(lambda lp, y, il, ll: F.ctc_loss(lp, y, il, ll, reduce=reduce),
                  [lp.astype(dtype), LABELS, INPUT_LENGTHS, LABEL_LENGTHS], np.asarray(expected, dtype),
                  rtol=1e-5, atol=1e-5)


def test_ctc_blank_last_and_int32_symbolic_batch():
    lp = log_probs(5, 2, 3, seed=3)
    labels, il, ll = np.array([[0, 1], [1, 1]], np.int32), np.array([5, 4], np.int32), np.array([2, 2], np.int32)
    expected = np_ctc(lp, labels, il, ll, blank=2)
    check_forward(lambda lp, y, il, ll: F.ctc_loss(lp, y, il, ll, blank=2, reduce="none"),
                  [lp.astype(np.float32), labels, il, ll], expected.astype(np.float32), rtol=1e-5, atol=1e-5,
                  specs=[gc.spec((5, "batch", 3)), gc.spec(("batch", 2), "int32"), gc.spec(("batch",), "int32"),
                         gc.spec(("batch",), "int32")])


@pytest.mark.parametrize("reduce", ["none", "sum", "mean"])
def test_ctc_grads(reduce):
    check_grads(lambda lp, y, il, ll: F.ctc_loss(lp, y, il, ll, reduce=reduce),
                [log_probs(), LABELS, INPUT_LENGTHS, LABEL_LENGTHS])


def test_ctc_grads_through_log_softmax_with_impossible_row_zeroed():
    labels = np.array([[1, 1, 1], [2, 3, 0]], np.int64)     # row 0 needs 5 frames and has 4
    il, ll = np.array([4, 4], np.int64), np.array([3, 2], np.int64)
    logits = np.random.default_rng(1).standard_normal((4, 2, 4))
    check_grads(lambda x, y, il, ll: F.ctc_loss(F.log_softmax(x), y, il, ll, reduce="mean", zero_infinity=True),
                [logits, labels, il, ll])


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_impossible_alignment(zero_infinity):
    labels = np.array([[1, 1], [1, 2]], np.int64)
    il, ll = np.array([2, 2], np.int64), np.array([2, 2], np.int64)   # [1, 1] needs 3 frames
    lp = log_probs(2, 2, 3)

    def fn(lp, y, il, ll):
        loss = F.ctc_loss(lp, y, il, ll, reduce="none", zero_infinity=zero_infinity)
        return loss, gc.grad(F.sum(F.where(loss < np.inf, loss, 0.0)), [lp])[0], \
            gc.grad(F.ctc_loss(lp, y, il, ll, reduce="sum", zero_infinity=zero_infinity), [lp])[0]
    loss, g_masked, g_sum = gc.compile(fn, lp, labels, il, ll)(lp, labels, il, ll)
    possible = np_ctc(lp[:, 1:], labels[1:], il[1:], ll[1:])[0]
    np.testing.assert_allclose(loss, [0.0 if zero_infinity else np.inf, possible], rtol=1e-12)
    for g in (g_masked, g_sum):
        assert np.all(np.isfinite(g))
        np.testing.assert_array_equal(g[:, 0], 0.0)
        assert np.any(g[:, 1] != 0)


def test_ctc_long_sequence_and_minus_inf_log_probs_are_stable():
    steps = 100
    lp = log_probs(steps, 2, 5, seed=4) * 20      # very peaked: products of probabilities underflow
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    lp[:, :, 4] = -np.inf                          # a class that never occurs
    labels = np.array([[1, 2, 3, 1], [3, 3, 0, 0]], np.int64)
    il, ll = np.array([steps, 80], np.int64), np.array([4, 2], np.int64)
    expected = np_ctc(lp, labels, il, ll)
    assert np.all(np.isfinite(expected)) and expected.max() > 200
    check_forward(lambda lp, y, il, ll: F.ctc_loss(lp, y, il, ll, reduce="none"),
                  [lp.astype(np.float32), labels, il, ll], expected.astype(np.float32), rtol=1e-5)
    # d(loss)/d(log_probs) is minus the posterior of each class at each frame: it sums to -1 over
    # the classes at every valid frame and is 0 after a sequence's end.
    grad = gc.compile(lambda lp, y, il, ll: gc.grad(F.ctc_loss(lp, y, il, ll, reduce="sum"), [lp])[0],
                      lp.astype(np.float32), labels, il, ll)(lp.astype(np.float32), labels, il, ll)
    valid = np.arange(steps)[:, None] < il
    np.testing.assert_allclose(grad.sum(-1), np.where(valid, -1.0, 0.0), atol=1e-4)
    np.testing.assert_array_equal(grad[:, :, 4], 0.0)


def test_ctc_errors():
    lp = log_probs()
    with pytest.raises(gc.ShapeError, match="labels must be int"):
        gc.compile(lambda lp: F.ctc_loss(lp, LABELS.astype(np.float32), INPUT_LENGTHS, LABEL_LENGTHS), lp)
    with pytest.raises(ValueError, match="reduce must be"):
        gc.compile(lambda lp: F.ctc_loss(lp, LABELS, INPUT_LENGTHS, LABEL_LENGTHS, reduce="avg"), lp)
