"""Graph inputs and outputs of the dtypes ONNX Runtime's Python API cannot exchange with numpy.

onnxruntime converts numpy arrays of numpy's own dtypes only: an ml_dtypes array (bfloat16, the
float8 formats, int4, uint4, float4 e2m1) is refused as a feed, and an output of those types has
no numpy form. The session therefore runs a copy of the model whose such inputs and outputs are of
a wider type holding every value exactly (float32, int8 or uint8) beside a Cast to or from the
model's own type; the caller's arrays are widened and its results narrowed again on the host,
exactly. The saved model keeps the declared types.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..ir import dtypes

_HOST: dict[np.dtype, np.dtype] = {**{d: np.dtype("float32") for d in (dtypes.BFLOAT16, *dtypes.NARROW_FLOATS)},
         dtypes.INT4: np.dtype("int8"), dtypes.UINT4: np.dtype("uint8")}


def host_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype an input or output of `dtype` is exchanged with onnxruntime in."""
    return _HOST.get(np.dtype(dtype), np.dtype(dtype))


def needs_host_types(model: onnx.ModelProto) -> bool:
    values = [*model.graph.input, *model.graph.output]
    return any(_elem_dtype(v) in _HOST for v in values)


def with_host_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose inputs and outputs of the types above are of their host type, cast at
    the graph's edges."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    head, tail = [], []
    for value in graph.input:
        dtype = _elem_dtype(value)
        if dtype in _HOST:
            inner = f"{value.name}__narrow"
            _rename_reads(graph, value.name, inner)
            head.append(helper.make_node("Cast", [value.name], [inner], to=value.type.tensor_type.elem_type))
            value.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(_HOST[dtype])
    for value in graph.output:
        dtype = _elem_dtype(value)
        if dtype in _HOST:
            host = helper.np_dtype_to_tensor_dtype(_HOST[dtype])
            value.type.tensor_type.elem_type = host
            producer = next((n for n in graph.node if value.name in n.output), None)
            if producer is not None and producer.op_type == "Identity":   # the lowering's output copy, which
                producer.op_type = "Cast"                                  # has no kernel for 4-bit types
                producer.attribute.append(helper.make_attribute("to", host))
                continue
            inner = f"{value.name}__narrow"
            _rename_writes(graph, value.name, inner)
            tail.append(helper.make_node("Cast", [inner], [value.name], to=host))
    nodes = head + list(graph.node) + tail
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _elem_dtype(value) -> np.dtype | None:
    elem = value.type.tensor_type.elem_type
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None


def _rename_reads(graph, old: str, new: str) -> None:
    """Every read of `old` in the graph's nodes (subgraphs, which may read it by name, included)."""
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _rename_reads(sub, old, new)


def _rename_writes(graph, old: str, new: str) -> None:
    for node in graph.node:
        node.output[:] = [new if n == old else n for n in node.output]
    for value in graph.input:
        if value.name == old:
            raise AssertionError(f"{old} is an input and an output")


def to_host(value: np.ndarray) -> np.ndarray:
    """A feed in its host dtype (unchanged for numpy's own dtypes)."""
    host = host_dtype(value.dtype)
    return value if host == value.dtype else value.astype(host)


def from_host(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An output back in its declared dtype."""
    return value if value.dtype == dtype else value.astype(dtype)
