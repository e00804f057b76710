"""Running compiled graphs on onnxruntime."""
from . import trainer as _trainer
from .compiled import CompiledFunction, compile, compile_traced
from .trainer import *  # noqa: F401,F403

__all__ = ["CompiledFunction", "compile", "compile_traced", *_trainer.__all__]
