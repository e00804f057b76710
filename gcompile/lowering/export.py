"""Graph -> onnx.ModelProto, walking nodes in a deterministic topological order."""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.external_data_helper import set_external_data

from ..collector import collector_paused
from ..errors import GcompileError
from ..ir.graph import Graph, TensorType
from ..ops.registry import get_op
from .context import LowerContext
from .versions import choose_opset, runtime_limits


def value_info(name: str, t: TensorType):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
    return helper.make_tensor_value_info(name, elem, [d for d in t.shape])


@collector_paused
def to_onnx(graph: Graph, input_names: list[str], opset: int | None = None,
            name: str = "gcompile") -> tuple[onnx.ModelProto, list[str]]:
    """Lower `graph` to a standard ai.onnx model.

    Returns the model and a list of ops that onnxruntime's CPU provider cannot run in
    float64 (empty for most models); the runtime refuses those before loading.
    """
    opset = choose_opset(opset)
    ctx = LowerContext(graph, opset, input_names, reserved=graph.output_names)
    names: dict = {}
    for ref, input_name in zip(graph.inputs, input_names):
        names[ref] = input_name
    for node in graph.topo_order():
        if node.op == "input":
            continue
        ctx.begin(node)
        if node.op == "constant":
            names[node.out(0)] = ctx.const(node.attrs["value"])
            continue
        outs = get_op(node.op).lower(ctx, [names[r] for r in node.inputs], node)
        outs = [outs] if isinstance(outs, str) else list(outs)
        for i, out in enumerate(outs):
            names[node.out(i)] = out
    ctx.begin(None)
    outputs = []
    for ref, out_name in zip(graph.outputs, graph.output_names):
        ctx.nodes.append(helper.make_node("Identity", [names[ref]], [out_name], name=out_name))
        outputs.append(value_info(out_name, graph.type_of(ref)))
    inputs = [value_info(n, graph.type_of(r)) for n, r in zip(input_names, graph.inputs)]
    onnx_graph = helper.make_graph(ctx.nodes, name, inputs, outputs, initializer=ctx.initializers)
    from .. import __version__
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="gcompile", producer_version=__version__)
    model.ir_version = runtime_limits()[0]
    return model, ctx.float64_ops


EXTERNAL_DATA_THRESHOLD = 2 * 1024 ** 3   # protobuf cannot serialise a message of 2 GiB
_MIN_EXTERNAL_TENSOR = 1024               # smaller initializers (axes, scalars) stay inline
_ALIGN = 64


def external_data_name(model_path) -> str:
    """The external data file beside a model: predict.onnx -> predict.onnx.data."""
    return os.path.basename(os.fspath(model_path)) + ".data"


def serialize(model: onnx.ModelProto, location: str,
              threshold: int = EXTERNAL_DATA_THRESHOLD) -> tuple[bytes, bytes | None]:
    """The model's bytes, and the bytes of its external data file `location` (a name
    relative to the model's folder), or None when the model stays one file.

    A model whose size reaches `threshold` bytes keeps every initializer of 1 KiB or more
    in the data file instead, in graph order, 64-byte aligned, so equal models give equal
    files. `model` is left as it was.
    """
    if threshold < 0:
        raise GcompileError(f"external_data_threshold must be >= 0 bytes, got {threshold}")
    if model.ByteSize() < threshold:
        return model.SerializeToString(), None
    moved, chunks, offset = [], [], 0
    try:
        for tensor in model.graph.initializer:
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < _MIN_EXTERNAL_TENSOR:
                continue
            raw = tensor.raw_data
            chunks.append(b"\0" * (-offset % _ALIGN))
            offset += len(chunks[-1])
            set_external_data(tensor, location, offset, len(raw))
            tensor.ClearField("raw_data")
            moved.append((tensor, raw))
            chunks.append(raw)
            offset += len(raw)
        return model.SerializeToString(), (b"".join(chunks) if moved else None)
    finally:
        for tensor, raw in moved:
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT
            tensor.raw_data = raw
