"""LSTM and GRU layers over F.lstm / F.gru, with torch.nn's parameter names (weight_ih_l0,
weight_hh_l0_reverse, ...), gate order and initialisation U(±1/√hidden_size)."""
from __future__ import annotations

import math
from typing import Any

from numpy.typing import DTypeLike

from .. import functions as F
from ..frontend.tensor import Tensor, as_tensor
from . import init
from .module import Module

__all__ = ["GRU", "LSTM"]


class _Recurrent(Module):
    gates = 4

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, bidirectional: bool = False, rng=None,
                 dtype: DTypeLike = "float32") -> None:
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional = bias, batch_first, bidirectional
        rng, bound, g = init.generator(rng), 1 / math.sqrt(hidden_size), self.gates * hidden_size
        for layer in range(num_layers):
            size = input_size if layer == 0 else hidden_size * self.directions
            for suffix in self._suffixes(layer):
                setattr(self, f"weight_ih{suffix}", init.uniform((g, size), bound, rng, dtype))
                setattr(self, f"weight_hh{suffix}", init.uniform((g, hidden_size), bound, rng, dtype))
                if bias:
                    setattr(self, f"bias_ih{suffix}", init.uniform((g,), bound, rng, dtype))
                    setattr(self, f"bias_hh{suffix}", init.uniform((g,), bound, rng, dtype))

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self, layer: int) -> list[str]:
        return [f"_l{layer}"] + ([f"_l{layer}_reverse"] if self.bidirectional else [])

    def _weights(self) -> list[tuple]:
        kinds = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        return [tuple(getattr(self, f"{kind}{suffix}", None) for kind in kinds)
                for layer in range(self.num_layers) for suffix in self._suffixes(layer)]

    def _inputs(self, x: Any) -> tuple[Tensor, tuple]:
        x = as_tensor(x)
        xs = F.swapaxes(x, 0, 1) if self.batch_first else x
        return xs, (self.num_layers * self.directions, xs.shape[1], self.hidden_size)

    def _output(self, ys: Tensor) -> Tensor:
        return F.swapaxes(ys, 0, 1) if self.batch_first else ys


class LSTM(_Recurrent):
    """torch.nn.LSTM: forward(x, (h0, c0)=None, lengths=None) -> (output, (h_n, c_n)). x is (T, N, I),
    or (N, T, I) with batch_first; T must be static (the layer unrolls). `lengths` (N,) stops each
    sequence at its length, as a packed sequence would."""
    gates = 4

    def forward(self, x: Any, hx: Any = None, lengths: Any = None):
        xs, state_shape = self._inputs(x)
        h0, c0 = hx if hx is not None else (F.full(state_shape, 0, xs.dtype),) * 2
        ys, h, c = F.lstm(xs, h0, c0, self._weights(), lengths, self.bidirectional, self.num_layers)
        return self._output(ys), (h, c)


class GRU(_Recurrent):
    """torch.nn.GRU: forward(x, h0=None, lengths=None) -> (output, h_n); see LSTM."""
    gates = 3

    def forward(self, x: Any, hx: Any = None, lengths: Any = None):
        xs, state_shape = self._inputs(x)
        h0 = hx if hx is not None else F.full(state_shape, 0, xs.dtype)
        ys, h = F.gru(xs, h0, self._weights(), lengths, self.bidirectional, self.num_layers)
        return self._output(ys), h
