"""Graph -> onnx.ModelProto, walking nodes in a deterministic topological order."""
from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import onnx
from onnx import helper

from ..collector import collector_paused
from ..ir.graph import Graph
from ..version import __version__
from .context import LowerContext, value_info
from .dedupe import dedupe_nodes
from .order import schedule_order
from .reads import drop_unread
from .targets import DEFAULT_TARGET, get_target
from .versions import choose_opset, runtime_limits

TARGET_KEY = "gcompile.target"   # the model metadata naming the target it was lowered for
# The model metadata saying the nodes are written in the order they should run (order.py: set on
# graphs of large planned peaks); runtime/providers.py then runs them in that order.
ORDER_KEY = "gcompile.order"


def file_order(model):
    """An onnx ModelProto's nodes where its metadata says they are to run in their file order (the
    `order` of runtime/providers.make_session), else None."""
    return model.graph.node if any(p.key == ORDER_KEY and p.value == "file" for p in model.metadata_props) else None

_recorders: list[Counter] = []


@contextlib.contextmanager
def recorded_lowerings() -> Iterator[Counter]:
    """Within the block, counts how many nodes each (op, strategy) lowered ("plain" for an op's own
    form), over every model lowered: the test suite's coverage gate asks which strategies the
    gradient checks reached."""
    seen: Counter = Counter()
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


@collector_paused
def to_onnx(graph: Graph, input_names: list[str], opset: int | None = None,
            name: str = "gcompile", value_types: bool = False,
            target: str = DEFAULT_TARGET) -> tuple[onnx.ModelProto, list[str]]:
    """Lower `graph` to a standard ai.onnx model for `target` (lowering/targets), which the
    model's metadata records as gcompile.target.

    Returns the model and a list of ops that onnxruntime's CPU provider cannot run in
    float64 (empty for most models); the runtime refuses those before loading. With
    `value_types`, every node output's type, with gcompile's own symbolic dims ("batch",
    "batch*3"), is recorded as value_info too (for `gcompile viz`; artifacts leave it out).
    """
    opset = choose_opset(opset)
    ctx = LowerContext(graph, opset, input_names, reserved=graph.output_names, target=get_target(target))
    names: dict = dict(zip(graph.inputs, input_names))
    ctx.lower_nodes(names)
    outputs = []
    for ref, out_name in zip(graph.outputs, graph.output_names):
        ctx.nodes.append(helper.make_node("Identity", [names[ref]], [out_name], name=out_name))
        outputs.append(value_info(out_name, graph.type_of(ref)))
    inputs = [value_info(n, graph.type_of(r)) for n, r in zip(input_names, graph.inputs)]
    nodes = dedupe_nodes(ctx.nodes, set(graph.output_names) | ctx.apart)   # (a recomputed copy stays a copy)
    nodes, read = drop_unread(nodes, set(graph.output_names))
    initializers = [t for t in ctx.initializers if t.name in read]
    in_file_order = graph.run_in_order
    if not in_file_order:
        nodes = schedule_order(nodes, graph.output_names)   # how ONNX Runtime loads and runs it: see order.py
    typed: dict = {}
    if value_types:   # each node output once, not the values that are graph inputs, initializers or outputs
        declared = set(input_names) | set(graph.output_names) | {t.name for t in initializers}
        produced = {out for node in nodes for out in node.output}   # a merged repeat's outputs are gone
        for node in graph.topo_order():
            for i, t in enumerate(node.outputs):
                tensor = names.get(node.out(i))
                if tensor is not None and tensor in produced and tensor not in declared \
                        and node.op not in ("input", "constant"):
                    typed.setdefault(tensor, value_info(tensor, t))
    onnx_graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers,
                                   value_info=list(typed.values()))
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="gcompile", producer_version=__version__)
    model.ir_version = runtime_limits()[0]
    helper.set_model_props(model, {TARGET_KEY: target, **({ORDER_KEY: "file"} if in_file_order else {})})
    for seen in _recorders:
        seen.update(ctx.lowerings)
    return model, ctx.float64_ops

