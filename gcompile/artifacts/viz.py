"""`gcompile viz`: ONNX graphs drawn as a self-contained SVG or HTML page.

No graphviz and no scripts: a small layered layout (each node one layer below its deepest
producer, then barycentre sweeps to cut crossings) reads well for graphs of a few hundred
nodes and needs nothing but a browser. Node colours give the gradient order gcompile writes
into each node's doc_string ("order=N"): forward, backward, double backward, ...; nodes
without one (output identities, run-time shape glue, other exporters' nodes) are grey.
Edges carry the tensor's name and its dtype and shape (from ONNX shape inference). A loop (Scan,
Loop) or If is one box; its tooltip counts the nodes of its bodies, and the values its bodies read
from the outer scope (weights a loop step uses) are drawn as dashed edges into it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

import numpy as np
import onnx

from ..errors import GcompileError
from ..importer.inline import outer_names
from ..ir.dims import format_shape
from ..logs import logger
from ..runtime.files import atomic_write
from ..runtime.modelfile import graph_inputs, signature
from .describe import describe, node_order, order_label

NODE_H, GAP_X, GAP_Y, MARGIN, CHAR_W = 40, 28, 76, 20, 7
PALETTE = ["#cfe2ff", "#ffd8a8", "#f4b6c2", "#d3c4f0", "#c3ecd0", "#f6eeb0"]   # order 0, 1, 2, ...
GLUE = "#e6e6e6"
_READ_BY_BODY = " (read by the body)"   # the label of an edge into a loop from a value its body reads


@dataclass
class Box:
    key: str
    label: str
    sub: str
    css: str
    tip: str
    layer: int = 0
    width: int = 0
    x: float = 0.0
    preds: list = field(default_factory=list)
    succs: list = field(default_factory=list)


def _tensor_types(model) -> dict[str, str]:
    """Tensor name -> 'float32(batch, 3)' for every value ONNX shape inference can type."""
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError) as err:   # bad types, or too large to serialise
        logger.debug("shape inference failed (%s); edges show declared types only", err)
    types = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            sig = signature([value])[0]
            types[value.name] = f"{sig['dtype']}{format_shape(tuple(sig['shape']))}"
    for t in model.graph.initializer:
        types[t.name] = f"{onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name}{format_shape(tuple(t.dims))}"
    return types


def _order_class(node) -> str:
    order = node_order(node)
    return "glue" if order is None else f"order-{order}"


def _boxes(model) -> tuple[dict[str, Box], list[tuple[str, str, str]]]:
    """Boxes for graph inputs, nodes and graph outputs, and edges (from key, to key, tensor name)."""
    initializers = {t.name for t in model.graph.initializer}
    boxes: dict[str, Box] = {}
    producer: dict[str, str] = {}
    for value in graph_inputs(model):
        boxes[f"in:{value.name}"] = Box(f"in:{value.name}", value.name, "input", "io", f"graph input {value.name}")
        producer[value.name] = f"in:{value.name}"
    edges = []
    for i, node in enumerate(model.graph.node):
        key = f"node:{i}"
        weights = [n for n in node.input if n in initializers]
        inner = _body_nodes(node)
        tip = "\n".join(filter(None, [f"{node.name or '(unnamed)'}: {node.op_type}", node.doc_string,
                                      f"initializers: {', '.join(weights)}" if weights else "",
                                      f"bodies: {inner} nodes" if inner else ""]))
        boxes[key] = Box(key, node.op_type, node.name, _order_class(node), tip)
        edges += [(producer[n], key, n) for n in node.input if n in producer]
        edges += [(producer[n], key, n + _READ_BY_BODY) for n in sorted(outer_names(node) - set(node.input))
                  if n in producer]
        producer.update({out: key for out in node.output if out})
    for value in model.graph.output:
        key = f"out:{value.name}"
        boxes[key] = Box(key, value.name, "output", "io", f"graph output {value.name}")
        if value.name in producer:
            edges.append((producer[value.name], key, value.name))
    return boxes, edges


def _body_nodes(node) -> int:
    """Nodes in a node's subgraphs (loop bodies, If branches), at every level."""
    graphs = [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)]
    return sum(len(g.node) + sum(_body_nodes(n) for n in g.node) for g in graphs)


def _layout(boxes: dict[str, Box], edges) -> list[list[Box]]:
    """Layers top to bottom; within a layer, boxes ordered by the mean position of their
    neighbours: a sweep down (by producers), up (by consumers) and down again."""
    for src, dst, _ in edges:
        boxes[dst].preds.append(boxes[src])
        boxes[src].succs.append(boxes[dst])
    for box in boxes.values():   # insertion order is topological: inputs, nodes in order, outputs
        box.layer = 1 + max((p.layer for p in box.preds), default=-1)
    layers: list[list[Box]] = [[] for _ in range(1 + max((b.layer for b in boxes.values()), default=0))]
    for box in boxes.values():
        layers[box.layer].append(box)
        box.width = CHAR_W * max(len(box.label), len(box.sub), 4) + 20
    position = {b.key: (i + 0.5) / len(layer) for layer in layers for i, b in enumerate(layer)}
    for sweep, side in ((layers, "preds"), (layers[::-1], "succs"), (layers, "preds")):
        for layer in sweep:
            layer.sort(key=lambda b: np.mean([position[n.key] for n in getattr(b, side)] or [position[b.key]]))
            position.update({b.key: (i + 0.5) / len(layer) for i, b in enumerate(layer)})
    widest = max((sum(b.width for b in layer) + GAP_X * (len(layer) - 1) for layer in layers), default=0)
    for layer in layers:
        x = MARGIN + (widest - sum(b.width for b in layer) - GAP_X * (len(layer) - 1)) / 2
        for box in layer:
            box.x, x = x, x + box.width + GAP_X
    return layers


def _svg_graph(model, top: float) -> tuple[list[str], float, float]:
    """SVG elements of one graph starting at y=`top`; returns (elements, width, height)."""
    boxes, edges = _boxes(model)
    layers = _layout(boxes, edges)
    types = _tensor_types(model)
    y_of = {b.key: top + b.layer * (NODE_H + GAP_Y) for b in boxes.values()}
    parts = []
    for src, dst, tensor in edges:
        a, b = boxes[src], boxes[dst]
        x1, y1 = a.x + a.width / 2, y_of[src] + NODE_H
        x2, y2 = b.x + b.width / 2, y_of[dst]
        bend = (y2 - y1) / 2
        css = "edge implicit" if tensor.endswith(_READ_BY_BODY) else "edge"
        label = f"{tensor}: {types.get(tensor.removesuffix(_READ_BY_BODY), '?')}"
        parts.append(f'<path class="{css}" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} '
                     f'{x2:.1f},{y2:.1f}" marker-end="url(#arrow)"><title>{escape(label)}</title></path>')
        parts.append(f'<text class="edge-label" x="{(x1 + x2) / 2 + 4:.1f}" y="{(y1 + y2) / 2:.1f}">'
                     f'{escape(label)}</text>')
    for box in boxes.values():
        y, cx = y_of[box.key], box.x + box.width / 2
        shape = (f'<rect rx="{NODE_H / 2 if box.css == "io" else 5}" x="{box.x:.1f}" y="{y:.1f}" '
                 f'width="{box.width}" height="{NODE_H}"/>')
        parts.append(f'<g class="node {box.css}"><title>{escape(box.tip)}</title>{shape}'
                     f'<text class="op" x="{cx:.1f}" y="{y + 17:.1f}">{escape(box.label)}</text>'
                     f'<text class="name" x="{cx:.1f}" y="{y + 31:.1f}">{escape(box.sub)}</text></g>')
    width = max((b.x + b.width for b in boxes.values()), default=0) + MARGIN
    return parts, width, len(layers) * (NODE_H + GAP_Y)


def _legend(orders: list[str], top: float) -> list[str]:
    parts, x = [], MARGIN
    for css in orders:
        label = "glue (no order)" if css == "glue" else f"{order_label(int(css[6:]))} (order {css[6:]})"
        parts.append(f'<g class="node {css}"><rect x="{x}" y="{top}" width="16" height="16" rx="3"/></g>'
                     f'<text class="legend" x="{x + 22}" y="{top + 13}">{escape(label)}</text>')
        x += 40 + CHAR_W * len(label)
    return parts


def _style(orders: list[str]) -> str:
    fills = "".join(f".{css} rect {{fill: {GLUE if css == 'glue' else PALETTE[int(css[6:]) % len(PALETTE)]}}}\n"
                    for css in orders)
    return ("<style>\n"
            "text {font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif}\n"
            ".node rect {stroke: #555; stroke-width: 1}\n"
            ".io rect {fill: #ffffff; stroke-dasharray: 4 2}\n"
            f"{fills}"
            ".op {font-size: 12px; font-weight: bold; text-anchor: middle}\n"
            ".name {font-size: 10px; fill: #333; text-anchor: middle}\n"
            ".edge {fill: none; stroke: #888; stroke-width: 1.2}\n"
            ".implicit {stroke-dasharray: 5 3}\n"
            ".edge-label {font-size: 9px; fill: #225; paint-order: stroke; stroke: #fff; stroke-width: 3px}\n"
            ".title {font-size: 15px; font-weight: bold}\n"
            ".legend {font-size: 11px}\n"
            "</style>")


def _orders(models) -> list[str]:
    found = {_order_class(node) for _, model in models for node in model.graph.node}
    return sorted(c for c in found if c != "glue") + (["glue"] if "glue" in found else [])


def render_svg(sections: list[tuple[str, object]]) -> str:
    """One SVG document: a legend, then each (title, ONNX model) graph below the previous one."""
    orders = _orders(sections)
    parts, width = _legend(orders, MARGIN), 0.0
    y: float = MARGIN + 36
    for title, model in sections:
        parts.append(f'<text class="title" x="{MARGIN}" y="{y + 14}">{escape(title)}</text>')
        graph, w, h = _svg_graph(model, y + 30)
        parts += graph
        y, width = y + 30 + h, max(width, w)
    width = max(width, 400)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{y:.0f}" '
            f'viewBox="0 0 {width:.0f} {y:.0f}">\n'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker></defs>\n'
            f"{_style(orders)}\n" + "\n".join(parts) + "\n</svg>\n")


def render_html(sections: list[tuple[str, object]], title: str) -> str:
    """A page with one section per graph: its node counts per order, then its drawing."""
    body = []
    for name, model in sections:
        info = describe(model)
        counts = [f"{order_label(int(k))} {v}" for k, v in info["nodes_by_order"].items()]
        if info["untagged_nodes"]:
            counts.append(f"glue {info['untagged_nodes']}")
        body.append(f"<section><h2>{escape(name)}</h2>\n<p>{info['nodes']} nodes ({escape(', '.join(counts))}); "
                    f"{info['parameters']} parameters; opset {info['opset']}</p>\n"
                    f"{render_svg([(name, model)])}</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title>\n<style>body {{font-family: sans-serif; margin: 1.5em}} "
            "section {overflow-x: auto; margin-bottom: 2em}</style></head>\n"
            f"<body><h1>{escape(title)}</h1>\n" + "\n".join(body) + "\n</body></html>\n")


def write(path, sections: list[tuple[str, object]], title: str) -> None:
    """Write `sections` as SVG or HTML, chosen by `path`'s extension, atomically."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".svg":
        text = render_svg(sections)
    elif ext in (".html", ".htm"):
        text = render_html(sections, title)
    else:
        raise GcompileError(f"cannot draw to {path!r}: the output must end in .svg or .html")
    try:
        atomic_write(path, text.encode())
    except OSError as err:
        raise GcompileError(f"cannot write {path!r}: {err.strerror or err}") from None

