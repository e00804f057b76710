"""Running compiled graphs and saved ONNX model files on onnxruntime.

gc.runtime.Trainer and gc.runtime.StepLayout are defined in gcompile.training, which builds on
this package; they are looked up there on first use, so importing runtime never imports training.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .compiled import CompiledFunction, compile_traced
from .jit import Jitted, compile, jit

if TYPE_CHECKING:
    from ..training.layout import StepLayout
    from ..training.trainer import Trainer

__all__ = ["CompiledFunction", "Jitted", "compile", "compile_traced", "jit", "StepLayout", "Trainer"]


def __getattr__(name: str) -> Any:
    if name == "StepLayout":
        from ..training.layout import StepLayout
        return StepLayout
    if name == "Trainer":
        from ..training.trainer import Trainer
        return Trainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
