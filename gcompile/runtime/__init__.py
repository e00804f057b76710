"""Running compiled graphs and saved ONNX model files on onnxruntime.

gc.runtime.Trainer and gc.runtime.StepLayout are defined in gcompile.training, which builds on
this package; they are looked up there on first use, so importing runtime never imports training.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .compiled import CompiledFunction, compile, compile_traced

if TYPE_CHECKING:
    from ..training.layout import StepLayout
    from ..training.trainer import Trainer

__all__ = ["CompiledFunction", "compile", "compile_traced", "StepLayout", "Trainer"]


def __getattr__(name: str) -> Any:
    if name == "StepLayout":
        from ..training.layout import StepLayout
        return StepLayout
    if name == "Trainer":
        from ..training.trainer import Trainer
        return Trainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
