"""ONNX translators for signal processing: DFT and STFT, the window functions (Hann, Hamming,
Blackman) and MelWeightMatrix.

A discrete Fourier transform of a length fixed at import time is two products with the (n, k)
matrices cos(2πjk/n) and sin(2πjk/n), real and imaginary parts kept apart as ONNX keeps them (a
last axis of 1 or 2), so it lowers to MatMuls and differentiates like any product, in the signal
and (STFT) in the window. A signal axis of symbolic length is refused. The windows and the mel
filter bank are constants, computed at import time from their sizes.
"""
from __future__ import annotations

import numpy as np

from ... import functions as F
from ...ops.indexing import slice_axes
from ...ops.shape_rules import normalize_axis
from ..table import np_dtype, onnx_op, require_float


def _fourier_matrices(n: int, bins: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2πjk/n for j < n, k < bins; the angle reduced mod n in integers first, so
    large j·k lose nothing to rounding."""
    angle = 2 * np.pi * (np.outer(np.arange(n), np.arange(bins)) % n) / n
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def _fit(x, axis: int, length: int):
    """`x` cut or zero-padded at the end of `axis` to `length`."""
    axis = axis % x.ndim
    size = x.shape[axis]
    if length < size:
        return slice_axes(x, (axis,), (0,), (length,), (1,))
    if length > size:
        return F.pad(x, tuple((0, length - size) if a == axis else (0, 0) for a in range(x.ndim)))
    return x


def dft(n, x, axis: int, length: int | None, inverse: bool, onesided: bool):
    """ONNX's DFT of `x` (..., 1 or 2) along `axis` (of the signal's axes, not the last one)."""
    x = require_float(n, x)
    if x.shape[-1] not in (1, 2) or not 0 <= axis < x.ndim - 1:
        raise n.unsupported(f"a DFT along axis {axis} of an input of shape {tuple(x.shape)} (the last axis, of size "
                            "1 or 2, holds the real and imaginary parts)")
    size = x.shape[axis]
    if not isinstance(size, int) or (length is not None and length < 1):
        raise n.unsupported(f"a DFT of length {length if length is not None else size!r}: it must be known at import "
                            "time and positive")
    parts = [F.swapaxes(F.squeeze(p, -1), axis, -1) for p in F.split(x, [1], -1)] if x.shape[-1] == 2 else \
        [F.swapaxes(F.squeeze(x, -1), axis, -1), None]
    re, im = parts
    if inverse and onesided:                    # Hermitian input: a real signal of `length` samples
        length = length or 2 * (size - 1)
        bins = length // 2 + 1
        re, im = _fit(re, -1, bins), None if im is None else _fit(im, -1, bins)
        weight = np.full(bins, 2.0)             # the bins between 0 and the Nyquist one stand for two
        weight[0] = 1
        if length % 2 == 0:
            weight[-1] = 1
        cos, sin = ((m * weight).T / length for m in _fourier_matrices(length, bins, np.float64))
        cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
        y = F.matmul(re, cos) if im is None else F.matmul(re, cos) - F.matmul(im, sin)
        return F.expand_dims(F.swapaxes(y, axis, -1), -1)
    length = length or size
    re, im = _fit(re, -1, length), None if im is None else _fit(im, -1, length)
    bins = length // 2 + 1 if onesided else length
    cos, sin = _fourier_matrices(length, bins, x.dtype)
    sign = 1 if inverse else -1                  # e^(∓2πijk/n)
    out_re = F.matmul(re, cos)
    out_im = F.matmul(re, sin) * sign
    if im is not None:
        out_re = out_re - F.matmul(im, sin) * sign
        out_im = out_im + F.matmul(im, cos)
    if inverse:
        out_re, out_im = out_re / np.asarray(length, x.dtype), out_im / np.asarray(length, x.dtype)
    return F.stack([F.swapaxes(out_re, axis, -1), F.swapaxes(out_im, axis, -1)], -1)


@onnx_op("DFT")
def _dft(n, x, dft_length=None, axis=None):
    if n.opset < 20:                              # an attribute before opset 20, then an optional input
        axis = n.attr("axis", 1)
    elif axis is not None:
        axis = int(n.ints(axis, "axis")[0])
    else:
        axis = -2
    length = None if dft_length is None else int(n.ints(dft_length, "dft_length")[0])
    return dft(n, x, normalize_axis(axis, x.ndim), length, bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0)))


@onnx_op("STFT")
def _stft(n, signal, frame_step, window=None, frame_length=None):
    """Frames of the signal (batch, length, 1 or 2) taken every frame_step samples, each multiplied by the
    window and transformed: (batch, frames, bins, 2)."""
    signal = require_float(n, signal, "signal")
    step = int(n.ints(frame_step, "frame_step")[0])
    if frame_length is not None:
        size = int(n.ints(frame_length, "frame_length")[0])
    else:
        size = window.shape[0] if window is not None else signal.shape[1]
    if window is not None and window.shape[0] != size:
        raise n.unsupported(f"a window of {window.shape[0]} samples for frames of {size}")
    length = signal.shape[1]
    if not isinstance(length, int) or not isinstance(size, int) or step < 1 or not 0 < size <= length:
        raise n.unsupported(f"frames of {size!r} samples every {step} of a signal of length {length!r} (the lengths "
                            "must be known at import time)")
    frames = 1 + (length - size) // step
    starts = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    framed = F.take(signal, starts.astype(np.int64), axis=1)                # (batch, frames, size, c)
    if window is not None:
        framed = framed * F.reshape(F.cast(window, signal.dtype), (size, 1))
    return dft(n, framed, 2, None, False, bool(n.attr("onesided", 1)))


# -- windows and filter banks: constants ---------------------------------------------------------------------
def _window(n, size, formula):
    count = int(n.ints(size, "size")[0])
    periodic = bool(n.attr("periodic", 1))
    span = count if periodic else count - 1
    phase = 2 * np.pi * np.arange(count) / span if span else np.zeros(count)
    return formula(phase).astype(np_dtype(n.attr("output_datatype", 1), n.describe()))


@onnx_op("HannWindow")
def _hann(n, size):
    return _window(n, size, lambda t: np.sin(t / 2) ** 2)


@onnx_op("HammingWindow")
def _hamming(n, size):
    return _window(n, size, lambda t: 25 / 46 - 21 / 46 * np.cos(t))


@onnx_op("BlackmanWindow")
def _blackman(n, size):
    return _window(n, size, lambda t: 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t))


def _hz_to_mel(hz):
    return 2595 * np.log1p(hz / 700) / np.log(10)


@onnx_op("MelWeightMatrix")
def _mel_weight_matrix(n, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
    """The (dft_length // 2 + 1, num_mel_bins) triangular filters of ONNX's definition: num_mel_bins + 2
    edges evenly spaced in mel between the edge frequencies, each mapped to a bin by
    ⌊(dft_length + 1) · hz / sample_rate⌋, and filter i rising from edge i to edge i + 1 and falling
    to edge i + 2."""
    mels, length = int(n.ints(num_mel_bins, "num_mel_bins")[0]), int(n.ints(dft_length, "dft_length")[0])
    rate = n.known(sample_rate, "sample_rate").reshape(-1)[0]
    low, high = (n.known(v, what).reshape(-1)[0] for v, what in ((lower_edge_hertz, "lower_edge_hertz"),
                                                                   (upper_edge_hertz, "upper_edge_hertz")))
    low_mel, high_mel = _hz_to_mel(low), _hz_to_mel(high)
    edges = np.arange(mels + 2) * ((high_mel - low_mel) / (mels + 2)) + low_mel
    hz = 700 * np.expm1(edges / 2595 * np.log(10))
    bins = (((length + 1) * hz) // rate).astype(np.int64)
    weights = np.zeros((length // 2 + 1, mels))
    for i, (left, centre, right) in enumerate(zip(bins, bins[1:], bins[2:])):
        if centre == left:
            weights[centre, i] = 1
        else:
            weights[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            weights[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return weights.astype(np_dtype(n.attr("output_datatype", 1), n.describe()))
