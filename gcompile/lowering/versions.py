"""Which ONNX IR version and opsets the installed onnxruntime accepts (ARCHITECTURE.md §10).

onnx may write a newer IR version than onnxruntime reads, so we probe: build a one-node
model per candidate and keep the newest that loads. Probed once per process (~10 ms).
"""
from __future__ import annotations

import functools

MIN_OPSET = 18   # reduce ops take axes as an input from here on; older opsets are not emitted


@functools.cache
def runtime_limits() -> tuple[int, int]:
    """(max IR version, max default-domain opset) that onnxruntime loads."""
    import onnx
    from onnx import TensorProto, helper

    from ..install_check import onnxruntime
    ort = onnxruntime()

    options = ort.SessionOptions()
    options.log_severity_level = 4

    def loads(ir_version: int, opset: int) -> bool:
        io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in "xy"]
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", io[:1], io[1:])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = ir_version
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            return True
        except Exception:
            return False

    ir = next(v for v in range(onnx.IR_VERSION, 6, -1) if loads(v, MIN_OPSET))
    opset = next(v for v in range(onnx.defs.onnx_opset_version(), MIN_OPSET - 1, -1) if loads(ir, v))
    return ir, opset


def choose_opset(requested: int | None) -> int:
    from ..errors import UnsupportedError
    _, max_opset = runtime_limits()
    if requested is None:
        return max_opset
    if not MIN_OPSET <= requested <= max_opset:
        raise UnsupportedError(f"opset {requested} is outside what gcompile and the installed onnxruntime "
                               f"support ({MIN_OPSET}..{max_opset})")
    return requested
