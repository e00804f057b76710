"""Running compiled graphs on onnxruntime."""
from .compiled import CompiledFunction, compile, compile_traced

__all__ = ["CompiledFunction", "compile", "compile_traced"]
