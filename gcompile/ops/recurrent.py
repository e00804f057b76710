"""Recurrent cells and layers: lstm_cell, gru_cell, lstm, gru (PyTorch weight layout).

Everything is composed from existing ops (matmul, sigmoid, tanh, where, stack, scan, ...), so
the gradients of every order come from their VJP rules. Weights use PyTorch's layout and
gate order (LSTM i, f, g, o; GRU r, z, n), used as x @ w_ihᵀ, so they move between the two
unchanged. A layer's time loop is one scan (an ONNX Scan in the portable form; a target may
unroll a short one: lowering/targets/ort_cpu/loops.py).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..errors import ShapeError
from ..frontend.tensor import Tensor, as_tensor
from .control import scan
from .elementwise import greater, sigmoid, tanh, where
from .indexing import concat, split, stack
from .shape import reshape

__all__ = ["gru", "gru_cell", "lstm", "lstm_cell"]

def _affine(x: Tensor, w, b) -> Tensor:
    """x @ wᵀ (+ b): PyTorch's (out, in) weight layout."""
    y = x @ as_tensor(w).T
    return y if b is None else y + b


def _check_weights(what: str, gates: int, x: Tensor, h: Tensor, w_ih, w_hh) -> None:
    hidden = h.shape[-1]
    w_ih, w_hh = as_tensor(w_ih), as_tensor(w_hh)
    if w_ih.shape != (gates * hidden, x.shape[-1]) or w_hh.shape != (gates * hidden, hidden):
        raise ShapeError(f"{what}: with input size {x.shape[-1]} and hidden size {hidden}, w_ih must be "
                         f"{(gates * hidden, x.shape[-1])} and w_hh {(gates * hidden, hidden)}; got "
                         f"{w_ih.shape} and {w_hh.shape}")


def _lstm_step(gx: Tensor, state, w_hh, b_hh):
    """One LSTM step from the input projection gx = x @ w_ihᵀ + b_ih."""
    h, c = state
    i, f, g, o = split(gx + _affine(h, w_hh, b_hh), 4, axis=-1)
    c_new = sigmoid(f) * c + sigmoid(i) * tanh(g)
    return sigmoid(o) * tanh(c_new), c_new


def _gru_step(gx: Tensor, state, w_hh, b_hh):
    """One GRU step from gx = x @ w_ihᵀ + b_ih: n = tanh(x_n + r * (W_hn h + b_hn))."""
    (h,) = state
    x_r, x_z, x_n = split(gx, 3, axis=-1)
    h_r, h_z, h_n = split(_affine(h, w_hh, b_hh), 3, axis=-1)
    r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
    n = tanh(x_n + r * h_n)
    return (n + z * (h - n),)


def lstm_cell(x: Tensor | ArrayLike, h: Tensor | ArrayLike, c: Tensor | ArrayLike, w_ih: Tensor | ArrayLike,
              w_hh: Tensor | ArrayLike, b_ih: Tensor | ArrayLike | None = None,
              b_hh: Tensor | ArrayLike | None = None) -> tuple[Tensor, Tensor]:
    """One LSTM step: x (N, I), h and c (N, H), w_ih (4H, I), w_hh (4H, H); returns (h', c')."""
    x, h = as_tensor(x), as_tensor(h)
    _check_weights("lstm_cell", 4, x, h, w_ih, w_hh)
    return _lstm_step(_affine(x, w_ih, b_ih), (h, as_tensor(c)), w_hh, b_hh)


def gru_cell(x: Tensor | ArrayLike, h: Tensor | ArrayLike, w_ih: Tensor | ArrayLike, w_hh: Tensor | ArrayLike,
             b_ih: Tensor | ArrayLike | None = None, b_hh: Tensor | ArrayLike | None = None) -> Tensor:
    """One GRU step: x (N, I), h (N, H), w_ih (3H, I), w_hh (3H, H); returns h'."""
    x, h = as_tensor(x), as_tensor(h)
    _check_weights("gru_cell", 3, x, h, w_ih, w_hh)
    return _gru_step(_affine(x, w_ih, b_ih), (h,), w_hh, b_hh)[0]


def _direction(step, gx: Tensor, state, w_hh, b_hh, masks: Tensor | None, reverse: bool):
    """Run one direction over all steps. With masks ((T, N, 1) bool: step t of sequence n is
    valid), a sequence's state stops changing after its last valid step, and its outputs there
    are zero; reversed, each sequence starts from its own last valid step (as PyTorch's packed
    sequences). One scan over the steps."""
    def body(state, inputs):
        g, valid = inputs if masks is not None else (inputs, None)
        new = step(g, state, w_hh, b_hh)
        if valid is None:
            return new, new[0]
        new = tuple(where(valid, n, s) for n, s in zip(new, state))
        return new, where(valid, new[0], 0.0)

    state, ys = scan(body, tuple(state), gx if masks is None else (gx, masks), reverse=reverse)
    return ys, state


def _layers(what, step, gates, xs, states0, weights, lengths, bidirectional, num_layers):
    """The multi-layer, optionally bidirectional driver shared by lstm and gru."""
    xs = as_tensor(xs)
    states0 = [as_tensor(s) for s in states0]
    directions = 2 if bidirectional else 1
    if xs.ndim != 3 or lengths is not None and not isinstance(xs.shape[0], int):
        raise ShapeError(f"{what}: xs must be (T, N, input_size), with a static T when lengths are given, got "
                         f"shape {xs.shape}")
    if len(weights) != num_layers * directions:
        raise ShapeError(f"{what}: expected {num_layers * directions} weight tuples (layers x directions), "
                         f"got {len(weights)}")
    for s in states0:
        if s.ndim != 3 or s.shape[0] != num_layers * directions:
            raise ShapeError(f"{what}: initial states must be (layers*directions={num_layers * directions}, "
                             f"N, hidden), got {s.shape}")
    masks = None
    if lengths is not None:
        lengths = as_tensor(lengths)
        steps = np.arange(xs.shape[0], dtype=lengths.dtype).reshape(-1, 1)
        masks = reshape(greater(lengths, steps), xs.shape[0], lengths.shape[0], 1)
    finals = []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            k = layer * directions + d
            w_ih, w_hh, b_ih, b_hh = (tuple(weights[k]) + (None, None))[:4]
            if step is _lstm_step and b_hh is not None:   # both biases join x's projection, outside the loop:
                b_ih, b_hh = (b_hh if b_ih is None else as_tensor(b_ih) + b_hh), None   # each step: one Gemm
            state = tuple(s[k] for s in states0)
            _check_weights(what, gates, xs, state[0], w_ih, w_hh)
            ys, state = _direction(step, _affine(xs, w_ih, b_ih), state, w_hh, b_hh, masks, reverse=d == 1)
            outputs.append(ys)
            finals.append(state)
        xs = concat(outputs, axis=-1)
    return (xs, *(stack([f[i] for f in finals]) for i in range(len(states0))))


def lstm(xs: Tensor | ArrayLike, h0: Tensor | ArrayLike, c0: Tensor | ArrayLike,
         weights: Sequence[Sequence[Tensor | ArrayLike | None]], lengths: Tensor | ArrayLike | None = None,
         bidirectional: bool = False, num_layers: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """A multi-layer LSTM over xs (T, N, I), as PyTorch's nn.LSTM (seq-first).

    h0, c0: (num_layers * directions, N, H). weights: one (w_ih, w_hh, b_ih, b_hh) per layer
    and direction in PyTorch's order (layer 0 forward, layer 0 reverse, layer 1 ...; biases may
    be None). lengths: optional int (N,), the valid steps of each sequence. Returns
    (ys (T, N, directions * H), h_n, c_n), with ys zero at padded steps.
    """
    return _layers("lstm", _lstm_step, 4, xs, (h0, c0), weights, lengths, bidirectional, num_layers)


def gru(xs: Tensor | ArrayLike, h0: Tensor | ArrayLike, weights: Sequence[Sequence[Tensor | ArrayLike | None]],
        lengths: Tensor | ArrayLike | None = None, bidirectional: bool = False,
        num_layers: int = 1) -> tuple[Tensor, Tensor]:
    """A multi-layer GRU over xs (T, N, I), as PyTorch's nn.GRU; see lstm. Returns (ys, h_n)."""
    return _layers("gru", _gru_step, 3, xs, (h0,), weights, lengths, bidirectional, num_layers)
