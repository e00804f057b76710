"""gc.nn: modules and layers in torch.nn's style that are pytrees (see module.py)."""
from . import init
from .attention import MultiheadAttention, TransformerEncoderLayer
from .layers import *  # noqa: F403
from .layers import __all__ as _layers
from .module import Module, ModuleList, Sequential
from .recurrent import GRU, LSTM

__all__ = ["GRU", "LSTM", "Module", "ModuleList", "MultiheadAttention", "Sequential", "TransformerEncoderLayer", "init",
           *_layers]
