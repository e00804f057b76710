"""`gcompile viz`: ONNX graphs drawn as a self-contained SVG or HTML page, or as Graphviz .dot text.

No graphviz and no scripts: artifacts/layout.py lays the graph out in rows (long edges routed
around boxes, crossings cut, positions straightened), which reads well for graphs of a few
hundred nodes and needs nothing but a browser. Node colours give the gradient order gcompile
writes into each node's doc_string ("order=N"): forward, backward, double backward, ...; nodes
without one (output identities, run-time shape glue, other exporters' nodes) are grey.

Each box shows the op, the node's name and the type of what it computes (dtype and shape); an
edge's tensor name and type are its tooltip (no text is laid over edges, so nothing overprints,
and every look is also a presentation attribute, for renderers that ignore stylesheets). Types come from gcompile
itself where it built the model (a model.py: value_info with its own symbolic dims), else from
ONNX shape inference with data propagation, which carries the graph inputs' dim names through
shape computations; a dim still unknown after that is unified with named dims through the
elementwise ops that force equal sizes, and shown as "?" where nothing names it (never unk__N).
A loop (Scan, Loop) or If is one box; its tooltip counts the nodes of its bodies, and the values
its bodies read from the outer scope (weights a loop step uses) are drawn as dashed edges into it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from xml.sax import saxutils

import onnx

from ..errors import GcompileError
from ..importer.inline import outer_names
from ..ir.dims import format_shape
from ..logs import logger, phase
from ..runtime.files import atomic_write
from ..runtime.modelfile import graph_inputs, optional_inputs, signature
from .describe import describe, node_order, order_label
from .layout import layered_layout

MARGIN, GAP_X, GAP_Y = 20, 24, 40
OP_PX, SMALL_PX = 13, 11                  # font sizes (px) of the op and of the name and type lines
OP_CHAR, SMALL_CHAR = 8.4, 6.9            # widest average advance of those fonts, to size the boxes
NODE_H = 54
NAME_MAX = 34                             # characters of a node name shown; the tooltip has all of it
PALETTE = ["#cfe2ff", "#ffd8a8", "#f4b6c2", "#d3c4f0", "#c3ecd0", "#f6eeb0"]   # order 0, 1, 2, ...
GLUE = "#e6e6e6"
# ONNX ops whose inputs and output broadcast to one shape: a dim of size != 1 is the same in all.
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
                           "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "PRelu", "Mod",
                           "BitShift"})
# ONNX ops whose output has the first input's shape.
_SAME_SHAPE = frozenset({"Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cast", "Ceil", "Clip", "Cos",
                         "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "Identity", "IsInf", "IsNaN",
                         "LeakyRelu", "Log", "LogSoftmax", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu",
                         "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
                         "LayerNormalization", "Dropout", "BatchNormalization", "CumSum", "Hardmax"})
_READ_BY_BODY = " (read by the body)"   # the label of an edge into a loop from a value its body reads


@dataclass
class Box:
    key: str
    label: str
    sub: str
    kind: str          # what the type line says: the box's output types
    css: str
    tip: str

    @property
    def size(self) -> tuple[float, float]:
        width = max(OP_CHAR * len(self.label), SMALL_CHAR * max(len(self.sub), len(self.kind)), 40) + 18
        return round(width), NODE_H


# onnx's data propagation (which carries dim names through a model's shape computations: a Shape,
# a Concat of its pieces, a Reshape) keeps a dimension record for every element of each 1-D value
# it passes through, whatever the value holds: a model with long vectors (a flat parameter vector,
# a hostile file) would take gigabytes. Shape computations are short vectors, so a model whose 1-D
# values hold more elements than this in all is inferred without it (its static shapes are shown
# all the same; only dims named through shape computations become '?').
DATA_PROP_MAX_ELEMENTS = 1 << 18


def _vector_elements(inferred) -> int:
    """The elements of every 1-D value of static length in `inferred` (a model after shape inference)."""
    total = sum(t.dims[0] for t in inferred.graph.initializer if len(t.dims) == 1)
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else []
        if len(dims) == 1 and dims[0].HasField("dim_value"):
            total += dims[0].dim_value
    return total


def tensor_types(model) -> dict[str, str]:
    """Tensor name -> 'float32(batch, 3)' for every value whose type is declared or inferred."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        if _vector_elements(inferred) <= DATA_PROP_MAX_ELEMENTS:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError) as err:   # bad types, or too large to serialise
        logger.debug("shape inference failed (%s); showing declared types only", err)
        inferred = model
    shapes: dict[str, tuple] = {}
    dtypes: dict[str, str] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            sig = signature([value])[0]
            shapes[value.name], dtypes[value.name] = tuple(sig["shape"]), sig["dtype"]
    for t in model.graph.initializer:
        shapes[t.name] = tuple(t.dims)
        try:
            dtypes[t.name] = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
        except KeyError:   # an element type this onnx does not know (a damaged or newer file)
            dtypes[t.name] = f"type {t.data_type}"
    named = _name_unknown_dims(inferred, shapes)
    return {name: f"{dtypes[name]}{format_shape(tuple(named.get(d, d) for d in shape))}"
            for name, shape in shapes.items()}


def _unknown(dim) -> bool:
    return isinstance(dim, str) and (dim.startswith("unk__") or dim == "?")


def _name_unknown_dims(model, shapes: dict[str, tuple]) -> dict:
    """unk__N -> the name or size it must equal, found through ops that force equal dims (union-find
    over elementwise and broadcasting ops); '?' where nothing names it."""
    parent: dict = {}

    def find(d):
        parent.setdefault(d, d)
        while parent[d] != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    def union(a, b):
        if a == 1 or b == 1 or a == "?" or b == "?":   # a broadcast 1 or an unnamed dim says nothing
            return
        ra, rb = find(a), find(b)
        if ra != rb:
            keep, drop = (ra, rb) if not _unknown(ra) else (rb, ra)   # a name or a size represents the class
            parent[drop] = keep

    for node in model.graph.node:
        if node.op_type in _BROADCASTING or node.op_type in _SAME_SHAPE:
            operands = node.input if node.op_type in _BROADCASTING else node.input[:1]
            known = [shapes[n] for n in [*operands, *node.output[:1]] if n in shapes]
            rank = max((len(s) for s in known), default=0)
            for axis in range(1, rank + 1):
                dims = [s[-axis] for s in known if len(s) >= axis]
                for a, b in zip(dims, dims[1:]):
                    union(a, b)
    return {d: (find(d) if not _unknown(find(d)) else "?") for s in shapes.values() for d in s if _unknown(d)}


def _order_class(node) -> str:
    order = node_order(node)
    return "glue" if order is None else f"order-{order}"


def _short(text: str, limit: int = NAME_MAX) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _boxes(model, types: dict[str, str]) -> tuple[dict[str, Box], list[tuple[str, str, str]]]:
    """Boxes for graph inputs, nodes and graph outputs, and edges (from key, to key, tensor name)."""
    initializers = {t.name for t in model.graph.initializer}
    optional = {v.name for v in optional_inputs(model)}
    boxes: dict[str, Box] = {}
    producer: dict[str, str] = {}
    for value in [*graph_inputs(model), *optional_inputs(model)]:
        key = f"in:{value.name}"
        what = "optional input" if value.name in optional else "input"
        boxes[key] = Box(key, _short(value.name, 24), what, types.get(value.name, "?"), "io",
                         f"graph {what} {value.name}: {types.get(value.name, '?')}")
        producer[value.name] = key
    edges = []
    for i, node in enumerate(model.graph.node):
        key = f"node:{i}"
        weights = [n for n in node.input if n in initializers and n not in optional]
        outs = [types.get(n, "?") for n in node.output if n]
        inner = _body_nodes(node)
        tip = "\n".join(filter(None, [f"{node.name or '(unnamed)'}: {node.op_type}", node.doc_string,
                                      "→ " + ", ".join(f"{n}: {types.get(n, '?')}" for n in node.output if n),
                                      f"initializers: {', '.join(weights)}" if weights else "",
                                      f"bodies: {inner} nodes" if inner else ""]))
        kind = outs[0] + (f" +{len(outs) - 1}" if len(outs) > 1 else "") if outs else ""
        boxes[key] = Box(key, node.op_type, _short(node.name), kind, _order_class(node), tip)
        edges += [(producer[n], key, n) for n in node.input if n in producer]
        edges += [(producer[n], key, n + _READ_BY_BODY) for n in sorted(outer_names(node) - set(node.input))
                  if n in producer]
        producer.update({out: key for out in node.output if out})
    for value in model.graph.output:
        key = f"out:{value.name}"
        boxes[key] = Box(key, _short(value.name, 24), "output", types.get(value.name, "?"), "io",
                         f"graph output {value.name}: {types.get(value.name, '?')}")
        if value.name in producer:
            edges.append((producer[value.name], key, value.name))
    return boxes, edges


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")   # characters XML 1.0 cannot hold, escaped or not


def escape(text: str) -> str:
    """`text` as SVG and HTML text. Names and doc_strings come from the file, which may be hostile:
    markup is escaped, and characters no XML document may hold (control characters, which would
    make the whole drawing unreadable) become U+FFFD."""
    return saxutils.escape(_NOT_XML.sub("\ufffd", text))


def _attr(text: str) -> str:
    return escape(text).replace('"', "&quot;")


def _path(points: list[tuple[float, float]], dx: float, dy: float) -> str:
    """SVG path data through the route's points: a vertical-tangent curve across each gap between
    rows, a straight line through each row an edge crosses."""
    (x0, y0), rest = points[0], points[1:]
    parts = [f"M{x0 + dx:.1f},{y0 + dy:.1f}"]
    previous = points[0]
    for i, (x, y) in enumerate(rest):
        px, py = previous
        if i % 2 == 0:   # across a gap
            mid = (py + y) / 2
            parts.append(f"C{px + dx:.1f},{mid + dy:.1f} {x + dx:.1f},{mid + dy:.1f} {x + dx:.1f},{y + dy:.1f}")
        else:            # down through a row, at the edge's placeholder
            parts.append(f"L{x + dx:.1f},{y + dy:.1f}")
        previous = (x, y)
    return " ".join(parts)


def _body_nodes(node) -> int:
    """Nodes in a node's subgraphs (loop bodies, If branches), at every level."""
    graphs = [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)]
    return sum(len(g.node) + sum(_body_nodes(n) for n in g.node) for g in graphs)


def _svg_graph(model, top: float) -> tuple[list[str], float, float]:
    """SVG elements of one graph starting at y=`top`; returns (elements, width, height)."""
    types = tensor_types(model)
    boxes, edges = _boxes(model, types)
    with phase("layout"):
        layout = layered_layout({k: b.size for k, b in boxes.items()}, [(s, d) for s, d, _ in edges], GAP_X, GAP_Y)
    logger.debug("viz %s: %d boxes in %d rows, %d edges (%d placeholders, %d left unrouted), %d crossings",
                 model.graph.name, len(boxes), layout.layers, len(edges), layout.dummies, layout.unrouted,
                 layout.crossings)
    dx, dy = MARGIN, top
    parts = []
    for (src, dst, tensor), points in zip(edges, layout.routes):
        implicit = tensor.endswith(_READ_BY_BODY)   # a value a loop's body reads from the outer scope
        label = f"{tensor}: {types.get(tensor.removesuffix(_READ_BY_BODY), '?')}"   # the tooltip: boxes show types
        parts.append(f'<g class="wire" data-from="{_attr(src)}" data-to="{_attr(dst)}"><title>{escape(label)}</title>'
                     f'<path class="edge{" implicit" if implicit else ""}" d="{_path(points, dx, dy)}" '
                     f'{EDGE if len(points) <= LONG else LONG_EDGE}'
                     f'{DASHED if implicit else ""} '
                     'marker-end="url(#arrow)"/></g>')
    for key, box in boxes.items():
        placed = layout.boxes[key]
        w, h = placed.width, placed.height
        x, y, cx = placed.x - w / 2 + dx, placed.y + dy, placed.x + dx
        shape = (f'<rect rx="{h / 2 if box.css == "io" else 5}" x="{x:.1f}" y="{y:.1f}" width="{w:.0f}" '
                 f'height="{h:.0f}" {_box_paint(box.css)}/>')
        parts.append(f'<g class="node {box.css}" data-key="{_attr(key)}"><title>{escape(box.tip)}</title>{shape}'
                     f'<text class="op" x="{cx:.1f}" y="{y + 17:.1f}" {OP_TEXT}>{escape(box.label)}</text>'
                     f'<text class="name" x="{cx:.1f}" y="{y + 32:.1f}" {NAME_TEXT}>{escape(box.sub)}</text>'
                     f'<text class="type" x="{cx:.1f}" y="{y + 46:.1f}" {TYPE_TEXT}>{escape(box.kind)}</text></g>')
    return parts, layout.width + 2 * MARGIN, layout.height


# Every look is also written as presentation attributes, so renderers without CSS (image viewers,
# converters) draw the same picture; the stylesheet adds only the hover effects.
FONT = 'font-family="DejaVu Sans, Verdana, Arial, sans-serif"'
OP_TEXT = f'{FONT} font-size="{OP_PX}" font-weight="bold" text-anchor="middle" fill="#000"'
NAME_TEXT = f'{FONT} font-size="{SMALL_PX}" text-anchor="middle" fill="#333"'
TYPE_TEXT = f'{FONT} font-size="{SMALL_PX}" text-anchor="middle" fill="#114"'
EDGE = 'fill="none" stroke="#8a8a8a" stroke-width="1.2"'
LONG_EDGE = 'fill="none" stroke="#b4b4b4" stroke-width="0.9"'   # lighter: a value kept for the backward, rows away
LONG = 2 + 2 * 4                                                 # route points of an edge crossing 4 rows
DASHED = ' stroke-dasharray="5 3"'


def _fill(css: str) -> str:
    return "#ffffff" if css == "io" else GLUE if css == "glue" else PALETTE[int(css[6:]) % len(PALETTE)]


def _box_paint(css: str) -> str:
    return f'fill="{_fill(css)}" stroke="#555" stroke-width="1"' + (' stroke-dasharray="4 2"' if css == "io" else "")


def _legend(orders: list[str], top: float) -> list[str]:
    parts, x = [], MARGIN
    for css in orders:
        label = "glue (no order)" if css == "glue" else f"{order_label(int(css[6:]))} (order {css[6:]})"
        parts.append(f'<g class="node {css}"><rect x="{x}" y="{top}" width="16" height="16" rx="3" '
                     f'{_box_paint(css)}/></g>'
                     f'<text class="legend" x="{x + 22}" y="{top + 13}" {FONT} font-size="{SMALL_PX}">'
                     f'{escape(label)}</text>')
        x += 40 + round(SMALL_CHAR * len(label))
    return parts


def _style(orders: list[str]) -> str:
    fills = "".join(f".{css} rect {{fill: {_fill(css)}}}\n" for css in orders)
    return ("<style>\n"
            "text {font-family: 'DejaVu Sans', Verdana, Arial, sans-serif}\n"
            ".node rect {stroke: #555; stroke-width: 1}\n"
            ".io rect {fill: #ffffff; stroke-dasharray: 4 2}\n"
            f"{fills}"
            f".op {{font-size: {OP_PX}px; font-weight: bold; text-anchor: middle}}\n"
            f".name {{font-size: {SMALL_PX}px; fill: #333; text-anchor: middle}}\n"
            f".type {{font-size: {SMALL_PX}px; fill: #114; text-anchor: middle}}\n"
            ".edge {fill: none; stroke: #8a8a8a; stroke-width: 1.2}\n"
            ".wire:hover .edge {stroke: #c2410c; stroke-width: 2.4}\n"

            ".title {font-size: 15px; font-weight: bold}\n"
            f".legend {{font-size: {SMALL_PX}px}}\n"
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
        parts.append(f'<text class="title" x="{MARGIN}" y="{y + 14}" {FONT} font-size="15" font-weight="bold">'
                     f'{escape(title)}</text>')
        graph, w, h = _svg_graph(model, y + 30)
        parts += graph
        y, width = y + 30 + h + MARGIN, max(width, w)
    width = max(width, 400)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{y:.0f}" '
            f'viewBox="0 0 {width:.0f} {y:.0f}">\n'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#8a8a8a"/></marker></defs>\n'
            f"{_style(orders)}\n" + "\n".join(parts) + "\n</svg>\n")


def render_html(sections: list[tuple[str, object]], title: str) -> str:
    """A page with one section per graph: its node counts per order, then its drawing at its natural
    size (1 unit = 1 CSS pixel, scrolling sideways where it is wider than the window)."""
    body = []
    for name, model in sections:
        info = describe(model)
        counts = [f"{order_label(int(k))} {v}" for k, v in info["nodes_by_order"].items()]
        if info["untagged_nodes"]:
            counts.append(f"glue {info['untagged_nodes']}")
        body.append(f"<section><h2>{escape(name)}</h2>\n<p>{info['nodes']} nodes ({escape(', '.join(counts))}); "
                    f"{info['parameters']} parameters; opset {info['opset']}. Rest the pointer on a box or an edge "
                    f"for its details.</p>\n{render_svg([(name, model)])}</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title>\n<style>body {{font-family: sans-serif; margin: 1.5em}} "
            "section {overflow-x: auto; margin-bottom: 2em} svg {display: block}</style></head>\n"
            f"<body><h1>{escape(title)}</h1>\n" + "\n".join(body) + "\n</body></html>\n")


def _dot_text(text: str) -> str:
    """`text` as a quoted Graphviz string: quotes and backslashes escaped, line breaks as \\n, and
    other control characters (a NUL would end the string for Graphviz) as U+FFFD."""
    text = _NOT_XML.sub("\ufffd", text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
    return '"' + text.replace("\r", "\ufffd") + '"'


def render_dot(sections: list[tuple[str, object]]) -> str:
    """Graphviz text (`dot -Tsvg`): one cluster per graph, boxes and colours as in the SVG, edges
    labelled with their tensor's name and type."""
    lines = ["digraph gcompile {", '  graph [rankdir=TB, fontname="DejaVu Sans"];',
             '  node [shape=box, style="rounded,filled", fontname="DejaVu Sans", fontsize=11];',
             '  edge [fontname="DejaVu Sans", fontsize=9, color="#8a8a8a"];']
    for s, (title, model) in enumerate(sections):
        types = tensor_types(model)
        boxes, edges = _boxes(model, types)
        lines.append(f"  subgraph cluster_{s} {{\n    label={_dot_text(title)};")
        for key, box in boxes.items():
            fill = _fill(box.css)
            label = "\n".join(filter(None, [box.label, box.sub, box.kind]))
            lines.append(f"    {_dot_text(f'{s}:{key}')} [label={_dot_text(label)}, fillcolor=\"{fill}\", "
                         f"tooltip={_dot_text(box.tip)}];")
        for src, dst, tensor in edges:
            lines.append(f"    {_dot_text(f'{s}:{src}')} -> {_dot_text(f'{s}:{dst}')} "
                         f"[label={_dot_text(f'{tensor}: {types.get(tensor, chr(63))}')}];")
        lines.append("  }")
    return "\n".join(lines) + "\n}\n"


def write(path, sections: list[tuple[str, object]], title: str) -> None:
    """Write `sections` as SVG, HTML or Graphviz .dot, chosen by `path`'s extension, atomically."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".svg":
        text = render_svg(sections)
    elif ext in (".html", ".htm"):
        text = render_html(sections, title)
    elif ext in (".dot", ".gv"):
        text = render_dot(sections)
    else:
        raise GcompileError(f"cannot draw to {path!r}: the output must end in .svg, .html or .dot")
    atomic_write(path, text.encode())

