"""Exception types users can catch; every message names the cause and, when known, the user's source line."""


class GcompileError(Exception):
    """Base class: an error caused by the user's program, spec or inputs (the CLI exits 2 on these)."""


class TraceError(GcompileError):
    """The Python function cannot be traced (data-dependent control flow, unsupported numpy call, ...)."""


class ShapeError(GcompileError):
    """Operand shapes or dtypes do not fit an op."""


class UnsupportedError(GcompileError):
    """An op, dtype or ONNX feature gcompile does not support."""


class InputError(GcompileError):
    """Arguments given to a compiled function do not match its specs."""


class LoweringError(GcompileError):
    """The graph cannot be expressed as ONNX for the chosen opset and runtime."""
