"""ONNX LSTM, GRU and RNN nodes, as a scan over the sequence (ONNX Runtime CPU's target unrolls a short one).

The translators write ONNX's equations with gcompile ops, so an imported recurrent network
differentiates to any order (w.r.t. inputs, initial states and weights). ONNX stores the gates
in its own order (LSTM i, o, f, c; GRU z, r, h), not PyTorch's: the weights are split here in
ONNX's order, whatever produced them. The per-direction time loop (with sequence_lens: states
stop at each sequence's end, Y is zero past it, a reverse pass starts at each sequence's own
last step) is the one gc.functions.lstm/gru use.

Supported: directions forward, reverse, bidirectional; optional B, sequence_lens, initial_h,
initial_c, P (peepholes); activations Sigmoid, Tanh, Relu; clip; LSTM input_forget; GRU
linear_before_reset 0 and 1; layout 0 and 1. Refused with a clear error: other activations
and activation_alpha/beta.
"""
from __future__ import annotations

from ... import functions as F
from ...errors import ShapeError
from ...frontend.tensor import as_tensor
from ...ops.recurrent import _direction
from ..table import onnx_op, require_float
from .shape import iota

_ACTIVATIONS = {"sigmoid": F.sigmoid, "tanh": F.tanh, "relu": F.relu}
_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


def _activations(n, directions: int) -> list[tuple]:
    """The activation functions of each direction (f, g, h for LSTM; f, g for GRU; f for RNN)."""
    if n.has_attr("activation_alpha") or n.has_attr("activation_beta"):
        raise n.unsupported("activation_alpha/activation_beta are not supported (only activations without "
                            "parameters: Sigmoid, Tanh, Relu)")
    per = len(_DEFAULT_ACTIVATIONS[n.op_type])
    names = n.attr("activations") or list(_DEFAULT_ACTIVATIONS[n.op_type]) * directions
    if len(names) != per * directions:
        raise n.unsupported(f"{len(names)} activations given; {n.op_type} with {directions} direction(s) takes "
                            f"{per * directions}")
    unknown = [a for a in names if a.lower() not in _ACTIVATIONS]
    if unknown:
        raise n.unsupported(f"activation {unknown[0]!r} is not supported (supported: Sigmoid, Tanh, Relu)")
    fns = [_ACTIVATIONS[a.lower()] for a in names]
    return [tuple(fns[d * per:(d + 1) * per]) for d in range(directions)]


def _check_shape(what: str, value, expected: tuple) -> None:
    """A shape check where symbolic dims match any size (an exporter may name the batch twice)."""
    if value is None:
        return
    shape = tuple(value.shape)
    if len(shape) != len(expected) or any(a != e and isinstance(a, int) and isinstance(e, int)
                                          for a, e in zip(shape, expected)):
        raise ShapeError(f"{what} must have shape {expected} (directions first), got {shape}")


def _lstm_step(acts, clip, peepholes, input_forget):
    f, g, h_act = acts

    def step(gx, state, r, rb):
        h, c = state
        i, o, fg, cand = F.split(gx + _recurrent(h, r, rb), 4, axis=-1)   # ONNX gate order i, o, f, c
        pi, po, pf = (None, None, None) if peepholes is None else peepholes
        i = f(clip(i if pi is None else i + pi * c))
        fg = 1 - i if input_forget else f(clip(fg if pf is None else fg + pf * c))
        c_new = fg * c + i * g(clip(cand))
        o = f(clip(o if po is None else o + po * c_new))
        return o * h_act(c_new), c_new
    return step


def _gru_step(acts, clip, linear_before_reset):
    f, g = acts

    def step(gx, state, r, rb):
        (h,) = state
        x_z, x_r, x_h = F.split(gx, 3, axis=-1)                           # ONNX gate order z, r, h
        r_zr, r_h = r
        rb_zr, rb_h = rb
        h_z, h_r = F.split(_recurrent(h, r_zr, rb_zr), 2, axis=-1)
        z, reset = f(clip(x_z + h_z)), f(clip(x_r + h_r))
        if linear_before_reset:
            cand = g(clip(x_h + reset * _recurrent(h, r_h, rb_h)))
        else:
            cand = g(clip(x_h + _recurrent(reset * h, r_h, rb_h)))
        return (cand + z * (h - cand),)
    return step


def _rnn_step(acts, clip):
    (f,) = acts

    def step(gx, state, r, rb):
        (h,) = state
        return (f(clip(gx + _recurrent(h, r, rb))),)
    return step


def _recurrent(h, r, rb):
    y = F.matmul(h, F.transpose(r))
    return y if rb is None else y + rb


def _masks(seq_lens, steps: int):
    """(T, N, 1) bool: true while step t is inside sequence n."""
    seq_lens = as_tensor(seq_lens)
    return F.expand_dims(F.greater(seq_lens, F.reshape(F.cast(iota(steps), seq_lens.dtype), (steps, 1))), -1)


@onnx_op("LSTM", "GRU", "RNN")
def _recurrent_node(n, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):
    x = require_float(n, x)
    layout = n.attr("layout", 0)
    if layout not in (0, 1):
        raise n.unsupported(f"layout={layout} (0 or 1)")
    if layout:                                   # batch-first: (N, T, I), states (N, D, H)
        x = F.transpose(x, (1, 0, 2))
        h0, c0 = (None if s is None else F.transpose(as_tensor(s), (1, 0, 2)) for s in (h0, c0))
    direction = n.attr("direction", "forward")
    if direction not in _DIRECTIONS:
        raise n.unsupported(f"direction={direction!r} (forward, reverse or bidirectional)")
    reverses = _DIRECTIONS[direction]
    dirs, gates = len(reverses), _GATES[n.op_type]
    steps, batch, features = x.shape
    if not isinstance(steps, int) and seq_lens is not None:
        raise n.unsupported(f"a symbolic sequence length {steps!r} with sequence_lens: the masks need a static "
                            "length")
    hidden = n.attr("hidden_size", r.shape[-1])
    for what, value, shape in (("W", w, (dirs, gates * hidden, features)), ("R", r, (dirs, gates * hidden, hidden)),
                               ("B", b, (dirs, 2 * gates * hidden)), ("initial_h", h0, (dirs, batch, hidden)),
                               ("initial_c", c0, (dirs, batch, hidden)), ("P", p, (dirs, 3 * hidden))):
        _check_shape(what, value, shape)
    bound = n.attr("clip")
    clip = (lambda v: v) if bound is None else (lambda v: F.clip(v, -bound, bound))
    masks = None if seq_lens is None else _masks(seq_lens, steps)
    w, r = as_tensor(w), as_tensor(r)
    outputs, finals = [], []
    for d, (reverse, acts) in enumerate(zip(reverses, _activations(n, dirs))):
        wb, rb = (None, None) if b is None else F.split(as_tensor(b)[d], 2)
        r_d = r[d]
        if n.op_type == "LSTM":
            peepholes = None if p is None else F.split(as_tensor(p)[d], 3)
            step = _lstm_step(acts, clip, peepholes, n.attr("input_forget", 0))
        elif n.op_type == "GRU":
            step = _gru_step(acts, clip, n.attr("linear_before_reset", 0))
            r_d = F.split(r_d, [2 * hidden], axis=0)
            rb = (None, None) if rb is None else F.split(rb, [2 * hidden])
        else:
            step = _rnn_step(acts, clip)
        state = tuple(F.full((batch, hidden), 0, x.dtype) if s is None else as_tensor(s)[d]
                      for s in ((h0, c0) if n.op_type == "LSTM" else (h0,)))
        gx = F.matmul(x, F.transpose(w[d]))
        ys, state = _direction(step, gx if wb is None else gx + wb, state, r_d, rb, masks, reverse)
        outputs.append(ys)
        finals.append(state)
    y = F.stack(outputs, axis=1)                 # (T, D, N, H)
    states = [F.stack([s[k] for s in finals]) for k in range(len(finals[0]))]   # (D, N, H) each
    if layout:
        y = F.transpose(y, (2, 0, 1, 3))
        states = [F.transpose(s, (1, 0, 2)) for s in states]
    return (y, *states)
