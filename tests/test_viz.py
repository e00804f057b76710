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
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "edge-label"]
    assert "x: float32(batch, 3)" in labels and "w: float32(3, 2)" in labels
    assert "matmul_0: float32(batch, 2)" in labels                    # from ONNX shape inference
    edges = [p for p in root.iter(f"{SVG}path") if p.get("class") == "edge"]
    assert len(edges) == len(labels)


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


def test_a_loop_is_one_box_with_its_body_size_and_the_weights_it_reads(tmp_path):
    from gcompile.artifacts import viz
    def fn(xs, h0, w):
        h, ys = gc.scan(lambda h, x: (F.tanh(h @ w + x), h), h0, xs)
        return gc.grad(F.sum(ys), [h0])[0]
    cf = gc.compile(fn, np.ones((4, 2, 3), np.float32), np.ones((2, 3), np.float32), np.ones((3, 3), np.float32))
    viz.write(tmp_path / "loop.svg", [("fn", cf.model)], title="fn")
    root = ET.parse(tmp_path / "loop.svg").getroot()
    scans = [g for g in root.iter(f"{SVG}g") if getattr(g.find(f"{SVG}text[@class='op']"), "text", "") == "Scan"]
    assert len(scans) == 2 and all("bodies:" in g.find(f"{SVG}title").text for g in scans)
    dashed = [p for p in root.iter(f"{SVG}path") if "implicit" in p.get("class", "")]
    assert dashed and all("(read by the body)" in p.find(f"{SVG}title").text for p in dashed)
