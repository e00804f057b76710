"""`gcompile viz`: SVG and self-contained HTML drawings of ONNX graphs, coloured by gradient order."""
import itertools
import re
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import gcompile as gc
import gcompile.functions as F
from gcompile.artifacts.describe import node_order
from gcompile.cli import main

SVG = "{http://www.w3.org/2000/svg}"
MODEL = """
import numpy as np
import gcompile as gc
import gcompile.functions as F

W = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)

@gc.export(x=gc.spec(("batch", 3)))
def predict(x):
    return F.tanh(x @ W)

@gc.export(x=gc.spec(("batch", 3)), w=gc.spec((3, 2)))
def curvature(x, w):
    loss = F.sum(F.tanh(x @ w) ** 2)
    g, = gc.grad(loss, [w])
    return gc.grad(F.sum(g * g), [w])[0]
"""


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def second_order(x, w):
    loss = F.sum(F.tanh(x @ w) ** 2)
    g, = gc.grad(loss, [w])
    return loss, gc.grad(F.sum(g * g), [w])[0]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    path = tmp_path_factory.mktemp("viz") / "second.onnx"
    gc.compile(second_order, gc.spec(("batch", 3)), gc.spec((3, 2))).save(path)
    return path


def drawn_nodes(root):
    """{node name: css classes} for every ONNX node box in an SVG tree."""
    found = {}
    for g in root.iter(f"{SVG}g"):
        classes = g.get("class", "").split()
        name = g.find(f"{SVG}text[@class='name']")
        if "node" in classes and name is not None and "io" not in classes:
            found[name.text] = classes
    return found


def test_svg_names_every_node_coloured_by_its_order(artifact, tmp_path):
    result = invoke("viz", artifact, "-o", tmp_path / "g.svg")
    assert result.exit_code == 0, result.output
    root = ET.parse(tmp_path / "g.svg").getroot()                     # valid XML
    assert root.tag == f"{SVG}svg"
    model = onnx.load(artifact)
    nodes = drawn_nodes(root)
    assert set(nodes) == {n.name for n in model.graph.node}
    for node in model.graph.node:
        order = node_order(node)
        assert ("glue" if order is None else f"order-{order}") in nodes[node.name], node.name
    assert {c for cs in nodes.values() for c in cs} >= {"order-0", "order-1", "order-2"}
    style = root.find(f"{SVG}style").text
    fills = {m.group(1): m.group(2) for m in re.finditer(r"\.(order-\d|glue) rect \{fill: (#\w+)\}", style)}
    assert len(set(fills.values())) == len(fills) >= 4                # one colour per order, and glue


def test_edges_carry_tensor_names_and_shapes(artifact, tmp_path):
    invoke("viz", artifact, "-o", tmp_path / "g.svg")
    root = ET.parse(tmp_path / "g.svg").getroot()
    wires = [g for g in root.iter(f"{SVG}g") if g.get("class") == "wire"]
    labels = [g.find(f"{SVG}title").text for g in wires]               # each edge's tooltip
    assert "x: float32(batch, 3)" in labels and "w: float32(3, 2)" in labels
    assert "matmul_0: float32(batch, 2)" in labels                    # from ONNX shape inference
    edges = [p for p in root.iter(f"{SVG}path") if p.get("class") == "edge"]
    assert len(edges) == len(labels) == len(wires)
    types = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "type"]
    assert "float32(batch, 3)" in types and "float32(batch, 2)" in types   # and each box shows its type


def test_boxes_do_not_overlap(artifact, tmp_path):
    invoke("viz", artifact, "-o", tmp_path / "g.svg")
    root = ET.parse(tmp_path / "g.svg").getroot()
    boxes = [tuple(float(r.get(k)) for k in ("x", "y", "width", "height"))
             for g in root.iter(f"{SVG}g") if "node" in g.get("class", "") for r in g.iter(f"{SVG}rect")]
    for (x1, y1, w1, h1), (x2, y2, w2, h2) in itertools.combinations(boxes, 2):
        assert x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1


def test_model_py_gives_one_self_contained_page_with_a_section_per_function(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    result = invoke("viz", tmp_path / "model.py", "-o", tmp_path / "graph.html")
    assert result.exit_code == 0, result.output
    assert "2 graph(s)" in result.output
    page = (tmp_path / "graph.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert re.findall(r"<h2>(\w+)</h2>", page) == ["predict", "curvature"]
    assert page.count("<svg") == 2 and "order-2" in page and "order-1" in page
    assert not re.search(r"<script|<link|src=|href=|@import", page)    # nothing fetched from the network
    assert "fwd" in page and "2nd" in page                            # node counts per order per section


def test_svg_of_a_model_py_stacks_its_functions(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    assert invoke("viz", tmp_path / "model.py", "-o", tmp_path / "g.svg").exit_code == 0
    root = ET.parse(tmp_path / "g.svg").getroot()
    titles = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "title"]
    assert titles == ["predict", "curvature"]


def test_a_foreign_model_without_orders_or_known_shapes(tmp_path):
    from onnx import TensorProto, helper
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("in", "out")]
    nodes = [helper.make_node("Relu", ["in"], ["mid"], name="first"),
             helper.make_node("Neg", ["mid"], ["out"], name="second & <last>")]
    model = helper.make_model(helper.make_graph(nodes, "foreign", io[:1], io[1:]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "foreign.onnx")
    assert invoke("viz", tmp_path / "foreign.onnx", "-o", tmp_path / "f.svg").exit_code == 0
    root = ET.parse(tmp_path / "f.svg").getroot()                     # names are escaped
    nodes = drawn_nodes(root)
    assert set(nodes) == {"first", "second & <last>"} and all("glue" in c for c in nodes.values())


def test_viz_of_a_compiled_model_in_python(tmp_path):
    from gcompile.artifacts import viz
    cf = gc.compile(lambda x: F.relu(x) * 2, np.ones(3, np.float32))
    viz.write(tmp_path / "g.svg", [("f", cf.model)], title="f")
    assert "order-0" in (tmp_path / "g.svg").read_text()


FLAT = """
import gcompile as gc
import gcompile.functions as F

@gc.export(x=gc.spec(("batch", 2, 3)))
def flat(x):
    return gc.grad(F.sum(F.tanh(F.reshape(x, (-1,))) ** 2), [x])[0]
"""


def _types(svg_text):
    return re.findall(r'class="type"[^>]*>([^<]*)<', svg_text)


def test_a_model_py_is_drawn_with_gcompiles_own_dims(tmp_path):
    """From a model.py gcompile knows every value's type: the flattened (batch, 2, 3) is 6*batch,
    which ONNX shape inference alone cannot name for the built .onnx (shown as '?', never unk__N)."""
    (tmp_path / "model.py").write_text(FLAT)
    assert invoke("viz", tmp_path / "model.py", "-o", tmp_path / "own.svg").exit_code == 0
    own = _types((tmp_path / "own.svg").read_text())
    assert "float32(6*batch,)" in own and "float32(batch, 2, 3)" in own and not any("?" in t for t in own)
    assert invoke("build", tmp_path / "model.py", "-o", tmp_path / "out").exit_code == 0
    assert invoke("viz", tmp_path / "out" / "flat.onnx", "-o", tmp_path / "file.svg").exit_code == 0
    drawn = (tmp_path / "file.svg").read_text()
    assert "unk__" not in drawn and "float32(?,)" in _types(drawn) and "float32(batch, 2, 3)" in _types(drawn)


def test_unknown_dims_of_an_onnx_file_are_named_from_the_graph_inputs(tmp_path):
    """Shape inference propagates dim names through shape computations (Shape -> Reshape), and a
    dim it cannot infer (a reshape to a shape fed at run time) takes the name of the dims it must
    equal through an elementwise op; no unk__N is shown."""
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    dyn = helper.make_tensor_value_info("dyn", TensorProto.INT64, [2])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4])
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s"], ["same"], name="reshape_to_shape"),
             helper.make_node("Reshape", ["x", "dyn"], ["opaque"], name="reshape_to_input"),
             helper.make_node("Add", ["opaque", "same"], ["sum"], name="add"),
             helper.make_node("Tanh", ["sum"], ["out"], name="tanh")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, dyn], [out]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    plain = onnx.shape_inference.infer_shapes(model)
    assert any(d.dim_param.startswith("unk__") for v in plain.graph.value_info for d in v.type.tensor_type.shape.dim)
    onnx.save(model, tmp_path / "m.onnx")
    assert invoke("viz", tmp_path / "m.onnx", "-o", tmp_path / "m.svg").exit_code == 0
    drawn = (tmp_path / "m.svg").read_text()
    assert "unk__" not in drawn
    root = ET.parse(tmp_path / "m.svg").getroot()
    by_name = {g.find(f"{SVG}text[@class='name']").text: g.find(f"{SVG}text[@class='type']").text
               for g in root.iter(f"{SVG}g") if "node" in g.get("class", "") and g.find(f"{SVG}title") is not None}
    assert by_name["reshape_to_shape"] == "float32(N, 4)"            # data propagation through Shape
    assert by_name["reshape_to_input"] == "float32(N, 4)"            # unified through the Add
    assert by_name["tanh"] == "float32(N, 4)"


def test_a_model_with_long_vectors_is_inferred_without_data_propagation(tmp_path, monkeypatch):
    """onnx's data propagation keeps a record per element of every 1-D value it passes through
    (gigabytes for a model with long vectors): past DATA_PROP_MAX_ELEMENTS, viz infers shapes
    without it and still shows every static shape; short vectors keep it (previous test)."""
    from onnx import TensorProto, helper

    from gcompile.artifacts import viz
    def vectors(n):     # x, its concatenation with itself and that one's tanh: 5 n elements of 1-D values
        nodes = [helper.make_node("Concat", ["x", "x"], ["c"], name="concat", axis=0),
                 helper.make_node("Tanh", ["c"], ["out"], name="tanh")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                                  [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2 * n])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 8
        return model
    calls = []
    real = onnx.shape_inference.infer_shapes

    def spy(m, *args, **kwargs):
        calls.append(kwargs.get("data_prop", False))
        return real(m, *args, **kwargs)
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    n = viz.DATA_PROP_MAX_ELEMENTS // 5
    assert viz.tensor_types(vectors(n + 1))["c"] == f"float32({2 * n + 2},)"
    assert calls == [False]
    calls.clear()
    assert viz.tensor_types(vectors(n))["c"] == f"float32({2 * n},)"
    assert calls == [False, True]


def test_dot_output_for_graphviz(artifact, tmp_path):
    result = invoke("viz", artifact, "-o", tmp_path / "g.dot")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "g.dot").read_text()
    assert text.startswith("digraph gcompile {") and text.rstrip().endswith("}")
    model = onnx.load(artifact)
    for node in model.graph.node:
        assert f"\\n{node.name}\\n" in text
    assert '[label="x: float32(batch, 3)"]' in text and text.count(" -> ") >= len(model.graph.node)
    assert invoke("viz", artifact, "-o", tmp_path / "g.png").exit_code == 2   # other formats are refused


def test_layout_routes_long_edges_around_boxes():
    """A random DAG: boxes never overlap, every route enters rows only at its placeholders, and no
    route passes through a box it does not connect (checked on the curves actually drawn)."""
    from gcompile.artifacts.layout import layered_layout
    from gcompile.artifacts.viz import _path
    rng = np.random.default_rng(3)
    n = 120
    sizes = {i: (int(rng.integers(60, 180)), 54) for i in range(n)}
    edges = sorted({(int(a), int(b)) for b in range(1, n) for a in rng.choice(b, size=min(b, 2), replace=False)})
    layout = layered_layout(sizes, edges)
    assert layout.dummies > 0 and layout.unrouted == 0
    rects = {k: (p.x - p.width / 2, p.y, p.x + p.width / 2, p.y + p.height) for k, p in layout.boxes.items()}
    for (a, ra), (b, rb) in itertools.combinations(rects.items(), 2):
        assert ra[2] <= rb[0] or rb[2] <= ra[0] or ra[3] <= rb[1] or rb[3] <= ra[1], (a, b)
    for (src, dst), points in zip(edges, layout.routes):
        d = _path(points, 0, 0)
        for x, y in _sampled(d):
            for key, (left, top, right, bottom) in rects.items():
                if key not in (src, dst):
                    assert not (left + 1 < x < right - 1 and top + 1 < y < bottom - 1), (src, dst, key)
    assert layout.height / layout.width < 8


def _sampled(d):
    """Points along an SVG path of M, C and L commands (as viz writes them)."""
    tokens = re.findall(r"[MCL]|-?[\d.]+", d)
    points, x0, y0, i, op = [], 0.0, 0.0, 0, "M"
    while i < len(tokens):
        if tokens[i] in "MCL":
            op, i = tokens[i], i + 1
        n = 6 if op == "C" else 2
        v = [float(t) for t in tokens[i:i + n]]
        i += n
        if op == "C":
            for t in np.linspace(0, 1, 25)[1:]:
                u = 1 - t
                points.append((u ** 3 * x0 + 3 * u * u * t * v[0] + 3 * u * t * t * v[2] + t ** 3 * v[4],
                               u ** 3 * y0 + 3 * u * u * t * v[1] + 3 * u * t * t * v[3] + t ** 3 * v[5]))
        elif op == "L":
            points += [(x0 + (v[0] - x0) * t, y0 + (v[1] - y0) * t) for t in np.linspace(0, 1, 20)[1:]]
        x0, y0 = v[-2], v[-1]
    return points


def test_a_loop_is_one_box_with_its_body_size_and_the_weights_it_reads(tmp_path):
    from gcompile.artifacts import viz
    def fn(xs, h0, w):
        h, ys = gc.scan(lambda h, x: (F.tanh(h @ w + x), h), h0, xs)
        return gc.grad(F.sum(ys), [h0])[0]
    steps = 4     # ort-cpu's Scan reads w from outside its body
    cf = gc.compile(fn, np.ones((steps, 2, 3), np.float32), np.ones((2, 3), np.float32), np.ones((3, 3), np.float32))
    viz.write(tmp_path / "loop.svg", [("fn", cf.model)], title="fn")
    root = ET.parse(tmp_path / "loop.svg").getroot()
    scans = [g for g in root.iter(f"{SVG}g") if getattr(g.find(f"{SVG}text[@class='op']"), "text", "") == "Scan"]
    assert len(scans) == 2 and all("bodies:" in g.find(f"{SVG}title").text for g in scans)
    wires = [g for g in root.iter(f"{SVG}g") if g.get("class") == "wire"]
    dashed = [g for g in wires if "implicit" in g.find(f"{SVG}path").get("class", "")]
    assert dashed and all("(read by the body)" in g.find(f"{SVG}title").text for g in dashed)
    assert all(g.find(f"{SVG}path").get("stroke-dasharray") for g in dashed)
