"""Constructs some ONNX runtimes refuse or run wrongly, found by running gcompile's artifacts on
them (docs/targets.md has the table), each with a check that lists where a model has it.

The portable target avoids them; tests/portability/test_constructs.py checks every artifact of
the corpus for each, so a lowering that brings one back fails there with the node named, also
where the runtime that refuses it is not installed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import onnx
from onnx import numpy_helper

from gcompile.lowering.reads import node_reads, subgraphs


@dataclass(frozen=True)
class Construct:
    name: str
    runtime: str                                # the runtime that refuses it
    why: str
    find: Callable[[onnx.ModelProto], list[str]]   # where the model has it: node names and source lines


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for body in subgraphs(node):
            yield from _graphs(body)


def _nodes(model: onnx.ModelProto, op_type: str) -> Iterator[onnx.NodeProto]:
    for graph in _graphs(model.graph):
        yield from (node for node in graph.node if node.op_type == op_type)


def _where(node: onnx.NodeProto) -> str:
    return f"{node.name} ({node.doc_string})" if node.doc_string else node.name


def _constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for graph in _graphs(model.graph) for t in graph.initializer}


def _backward_scans(model):
    return [_where(n) for n in _nodes(model, "Scan")
            if any(a.name in ("scan_input_directions", "scan_output_directions") and any(a.ints)
                   for a in n.attribute)]


def _negative_pads(model):
    constants = _constants(model)
    return [_where(n) for n in _nodes(model, "Pad")
            if n.input[1] in constants and (numpy_helper.to_array(constants[n.input[1]]) < 0).any()]


def _scan_outer_reads(model):
    return [f"{_where(n)} reads {', '.join(node_reads(n)[len([i for i in n.input if i]):])}"
            for n in _nodes(model, "Scan") if len(node_reads(n)) > len([i for i in n.input if i])]


def _scan_int64_constant_states(model):
    """Scans fed a small int64 constant (axes, a shape) as a state variable; the portable form holds it
    as a Constant node in the body (LowerContext.closed, INLINED_INT64_LIMIT)."""
    constants = _constants(model)
    found = []
    for n in _nodes(model, "Scan"):
        n_scanned = next(a.i for a in n.attribute if a.name == "num_scan_inputs")
        states = [c for c in n.input[:len(n.input) - n_scanned] if c in constants]
        small = [c for c in states if constants[c].data_type == onnx.TensorProto.INT64
                 and numpy_helper.to_array(constants[c]).size <= 16]
        if small:
            found.append(f"{_where(n)}: {', '.join(small)}")
    return found


def _scan_unread_inputs(model):
    """Scan inputs (scanned ones) that the body never reads: the ort-cpu target's placeholder for a
    loop with nothing to scan over."""
    found = []
    for n in _nodes(model, "Scan"):
        body = next(a.g for a in n.attribute if a.name == "body")
        n_scanned = next(a.i for a in n.attribute if a.name == "num_scan_inputs")
        read = {name for g in _graphs(body) for node in g.node for name in node.input} | {o.name for o in body.output}
        unread = [i.name for i in body.input[len(body.input) - n_scanned:] if i.name not in read]
        if unread:
            found.append(f"{_where(n)}: {', '.join(unread)}")
    return found


def _max_unpool(model):
    return [_where(n) for n in _nodes(model, "MaxUnpool")]


def _unit_numerators(model):
    constants = _constants(model)
    found = []
    for n in _nodes(model, "Div"):
        c = constants.get(n.input[0])
        if c is not None and len(c.dims) > 0 and numpy_helper.to_array(c).size == 1 \
                and numpy_helper.to_array(c).item() == 1:
            found.append(f"{_where(n)}: 1 of shape {list(c.dims)}")
    return found


def _dynamic_conv_weights(model):
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: v.type.tensor_type.shape for v in [*inferred.graph.value_info, *inferred.graph.input]}
    constants = _constants(model)
    found = []
    for op_type in ("Conv", "ConvTranspose"):
        for n in _nodes(model, op_type):
            shape = shapes.get(n.input[1])
            if n.input[1] not in constants and (shape is None or any(not d.HasField("dim_value") for d in shape.dim)):
                found.append(_where(n))
    return found


def _grouped_conv_transposes(model):
    """ConvTransposes with groups of more than one input or output channel (a depthwise one, one
    channel in and out per group, is computed right)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: v.type.tensor_type.shape for v in [*inferred.graph.value_info, *inferred.graph.input]}
    constants = _constants(model)
    found = []
    for n in _nodes(model, "ConvTranspose"):
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        if group == 1:
            continue
        dims = list(constants[n.input[1]].dims) if n.input[1] in constants else \
            [d.dim_value if d.HasField("dim_value") else None for d in shapes[n.input[1]].dim] \
            if n.input[1] in shapes else [None, None]
        if dims[0] != group or dims[1] != 1:
            found.append(_where(n))
    return found


def _cumprods(model):
    return [_where(n) for n in _nodes(model, "CumProd")]


def _log_softmax(model):
    return [_where(n) for n in _nodes(model, "LogSoftmax")]


def _loop_scan_outputs_not_rows(model):
    """Loops whose body gives a scan output of rank 0, or of rank 2 or more with a first dim other than 1."""
    found = []
    for loop in _nodes(model, "Loop"):
        body = next(a.g for a in loop.attribute if a.name == "body")
        for out in body.output[len(body.input) - 1:]:
            dims = out.type.tensor_type.shape.dim
            if len(dims) == 0 or len(dims) >= 2 and dims[0].dim_value != 1:
                found.append(_where(loop))
                break
    return found


CONSTRUCTS = [
    Construct("backward-scan", "onnx-reference",
              "a Scan with scan_input_directions or scan_output_directions 1: onnx's ReferenceEvaluator (1.23) "
              "implements forward scans only", _backward_scans),
    Construct("negative-pad", "onnx-reference",
              "a Pad with negative amounts: onnx's ReferenceEvaluator (1.23) passes them to numpy.pad, which "
              "refuses them", _negative_pads),
    Construct("scan-outer-read", "openvino",
              "a Scan body reading values of the enclosing graph: OpenVINO's ONNX Scan converter counts the "
              "body's inputs against the node's and fails", _scan_outer_reads),
    Construct("scan-int64-constant-state", "openvino",
              "a Scan state variable fed a small int64 constant (a reduction's axes, a Reshape's shape): OpenVINO "
              "infers those ops' rank only from constant axes and shapes, and failed to convert such loops (an If "
              "or TensorIterator \"with dynamic rank\", or \"Arguments do not have the same element type\" in the "
              "Scan)", _scan_int64_constant_states),
    Construct("scan-unread-input", "openvino",
              "a Scan over an input its body does not read (a placeholder that counts the steps of a loop with "
              "nothing to scan over): OpenVINO (2026.4) ran such a Scan for one step instead of its length, "
              "silently", _scan_unread_inputs),
    Construct("max-unpool", "openvino", "MaxUnpool: OpenVINO's ONNX front end has no conversion for it",
              _max_unpool),
    Construct("unit-numerator", "onnxruntime-web",
              "Div(1, x) with the 1 of shape [1] or more: ONNX Runtime's DivMulFusion rewrites Div(1, x)·y to "
              "Div(y, x), dropping the 1's broadcast axes; onnxruntime-web then refuses the model (\"Mismatch "
              "between number of inferred and declared dimensions\")", _unit_numerators),
    Construct("dynamic-conv-weight", "openvino",
              "a Conv or ConvTranspose whose weight's shape is known only at run time (a weight gradient's Conv "
              "over the images of a symbolic batch): OpenVINO's CPU plugin \"doesn't support dynamic weights "
              "shape\"", _dynamic_conv_weights),
    Construct("loop-scan-output-not-a-row", "onnx-reference",
              "a Loop scan output other than a vector or a (1, ...) row: onnx's ReferenceEvaluator (1.23) joins "
              "a Loop's scan outputs with numpy.vstack, so a scalar per step gives (n, 1) and an (a, b) per step "
              "(n·a, b)", _loop_scan_outputs_not_rows),
    Construct("grouped-conv-transpose", "onnx-reference",
              "a ConvTranspose with group > 1 and more than one channel per group (a grouped convolution's input "
              "gradient): onnx's ReferenceEvaluator (1.23) slices the weight by output channels and writes one "
              "output channel per group (\"cannot reshape array\", or a broadcast error; onnx/onnx#8446)",
              _grouped_conv_transposes),
    Construct("cumprod", "openvino",
              "CumProd (opset 26): OpenVINO's ONNX front end (2026.4) has no conversion for it (\"No conversion rule "
              "found for operations: CumProd-26\")", _cumprods),
    Construct("log-softmax", "onnx-reference",
              "LogSoftmax: onnx's ReferenceEvaluator (1.23) computes it as log(Softmax(x)), -inf once a row's "
              "logits spread more than about 104", _log_softmax),
]
