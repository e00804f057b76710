"""Lowering the IR to standard ONNX (ai.onnx ops only)."""
from .lower import to_onnx
from .versions import choose_opset, runtime_limits

__all__ = ["to_onnx", "choose_opset", "runtime_limits"]
