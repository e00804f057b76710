"""ONNX translator for text features: TfIdfVectorizer (scikit-learn's exported vectorizers), on integer
token ids (string pools are refused by their dtype).

The pool of n-grams is an attribute, so the counting is static: for each gram length n and skip
distance d (unigrams only at distance 1, as ONNX's definition counts them), the input's windows
x[i], x[i+d], ..., x[i+(n-1)d] are compared with every pool gram of that length, and the matches
summed per gram and added into its output position. Counts and weights: no gradient.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ops.indexing import slice_axes
from ..table import onnx_op


def _pool_grams(n) -> list[tuple[int, tuple] | None]:
    """(output position, tokens) of each pool n-gram, in pool order; those of a length outside
    [min, max] are None (they keep their place in the order the weights follow)."""
    pool = list(n.attr("pool_int64s") or [])
    counts = list(n.attr("ngram_counts"))
    indexes = list(n.attr("ngram_indexes"))
    low, high = n.attr("min_gram_length"), n.attr("max_gram_length")
    grams, gram_id = [], 0
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        for first in range(start, end, size):
            grams.append((indexes[gram_id], tuple(pool[first:first + size])) if low <= size <= high else None)
            gram_id += 1
    return grams


@onnx_op("TfIdfVectorizer")
def _tf_idf_vectorizer(n, x):
    if np.dtype(x.dtype).kind not in "iu" or n.attr("pool_strings"):
        raise n.unsupported(f"an input of dtype {np.dtype(x.dtype).name} (integer token ids with pool_int64s)")
    mode = n.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise n.unsupported(f"mode {mode!r} (TF, IDF or TFIDF)")
    rows = x if x.ndim == 2 else F.reshape(x, (1, -1))
    length = rows.shape[1]
    if x.ndim not in (1, 2) or not isinstance(length, int):
        raise n.unsupported(f"an input of shape {tuple(x.shape)} (a static length, in one or two dims)")
    size = max(n.attr("ngram_indexes")) + 1
    skips = n.attr("max_skip_count", 0)
    ids = F.cast(rows, np.int64)
    grams = _pool_grams(n)
    weights = np.asarray(n.attr("weights") or [1.0] * len(n.attr("ngram_indexes")), np.float32)
    total = F.full((rows.shape[0], size), 0, np.float32)
    for gram_length in sorted({len(g[1]) for g in grams if g is not None}):
        chosen = [j for j, g in enumerate(grams) if g is not None and len(g[1]) == gram_length]
        table = np.asarray([grams[j][1] for j in chosen], np.int64)                     # (grams, length)
        counts = None
        for distance in range(1, (skips + 2) if gram_length > 1 else 2):
            starts = length - (gram_length - 1) * distance
            if starts <= 0:
                continue
            window = F.stack([slice_axes(ids, (1,), (k * distance,), (k * distance + starts,), (1,))
                              for k in range(gram_length)], -1)                         # (rows, starts, length)
            hits = F.sum(F.cast(F.all(F.equal(F.expand_dims(window, 2), table), -1), np.float32), 1)
            counts = hits if counts is None else counts + hits                          # (rows, grams)
        if counts is None:
            continue
        if mode == "IDF":                       # the i-th weight scales the i-th pool gram (ONNX Runtime reads so)
            counts = F.cast(F.greater(counts, np.float32(0)), np.float32)
        if mode != "TF":
            counts = counts * weights[chosen]
        placed = np.zeros((len(chosen), size), np.float32)
        placed[np.arange(len(chosen)), [grams[j][0] for j in chosen]] = 1.0
        total = total + F.matmul(counts, placed)
    return total if x.ndim == 2 else F.reshape(total, (size,))
