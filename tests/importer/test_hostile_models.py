"""Hostile and broken ONNX files: gc.load_onnx and `gcompile grad` refuse them with a GcompileError
naming the file and the offending piece, before allocating what they declare, and values computed at
import time stay small (bigger ones are left to the runtime).

The size bombs run under `small_memory`: an address-space limit turns a regression into a
MemoryError in this test instead of an exhausted machine, and tracemalloc bounds the peak."""
import re

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import gcompile as gc
import gcompile.functions as F
from gcompile.cli import main
from gcompile.frontend.trace import trace
from gcompile.importer.grad import gradient_model
from gcompile.lowering import to_onnx
from gcompile.passes import optimize

from .helpers import mlp_model, small_memory

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
HUGE = 10 ** 10          # elements: 37 GiB of float32, if anything tried to hold them


def _model(nodes, inputs, outputs, initializers=(), opset=20):
    """inputs/outputs: (name, elem_type, shape) triples; initializers: TensorProtos."""
    info = [helper.make_tensor_value_info(*v) for v in inputs], [helper.make_tensor_value_info(*v) for v in outputs]
    graph = helper.make_graph(nodes, "hostile", *info, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _tensor(name, dims, data_type=FLOAT, raw=None, **fields):
    """A TensorProto exactly as given (onnx.helper would refuse the inconsistent ones)."""
    t = TensorProto(name=name, data_type=data_type, dims=dims, **fields)
    if raw is not None:
        t.raw_data = raw
    return t


def _const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype), name)


def _save(tmp_path, proto, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(proto.SerializeToString())
    return str(path)


def _add_model(w):
    """y = x + w, w the given initializer."""
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", FLOAT, [3])], [("y", FLOAT, None)], [w])


def _traced(f):
    traced = trace(lambda *xs: f(*xs), f.input_specs(), input_names=f.input_names)
    optimize(traced.graph, 2)
    return traced, to_onnx(traced.graph, f.input_names)[0]


# -- initializers whose declared size disagrees with their data ----------------------------------------
@pytest.mark.parametrize("tensor, declared", [
    (_tensor("w", [3], raw=b"\0" * 8), r"shape \(3,\) float32 \(12 bytes\) but stores 8 bytes"),
    (_tensor("w", [10 ** 6, 10 ** 6], raw=b"\0" * 8), r"\(1000000, 1000000\) float32 \(4000000000000 bytes\)"),
    (_tensor("w", [2 ** 62, 2 ** 62], raw=b"\0" * 8), r"\(4611686018427387904, 4611686018427387904\)"),
    (_tensor("w", [5], float_data=[1.0, 2.0]), r"\(5,\) float32 \(20 bytes\) but stores 8 bytes"),
    (_tensor("w", [3], raw=b"\0" * 16), r"\(12 bytes\) but stores 16 bytes"),
], ids=["short-raw", "1e12-elements", "overflowing-dims", "short-float-data", "long-raw"])
def test_an_initializer_whose_data_does_not_fill_its_shape_is_refused(tmp_path, tensor, declared):
    path = _save(tmp_path, _add_model(tensor))
    with small_memory(), pytest.raises(gc.GcompileError) as err:
        gc.load_onnx(path)
    assert f"{path}: initializer 'w' declares shape" in str(err.value)
    assert re.search(declared, str(err.value)), err.value


def test_a_constant_node_whose_data_does_not_fill_its_shape_is_refused():
    value = _tensor("value", [10 ** 6, 10 ** 6], raw=b"\0" * 8)
    m = _model([helper.make_node("Constant", [], ["c"], name="the_constant", value=value),
                helper.make_node("Add", ["x", "c"], ["y"])], [("x", FLOAT, [3])], [("y", FLOAT, None)])
    refusal = r"the given ModelProto: node 'the_constant' \(Constant\) is not valid ONNX: .*4000000000000 bytes"
    with small_memory(), pytest.raises(gc.GcompileError, match=refusal):
        gc.load_onnx(m)


def _external_model(folder, location, stored=b"\0" * 12, dims=(3,)):
    w = _tensor("w", list(dims), data_location=TensorProto.EXTERNAL)
    w.external_data.add(key="location", value=location)
    if "\0" not in location:
        (folder / location).write_bytes(stored)
    return _save(folder, _add_model(w))


def test_external_data_location_with_a_nul_byte_is_refused(tmp_path):
    path = _external_model(tmp_path, "w\0.bin")
    with pytest.raises(gc.GcompileError, match=rf"{re.escape(path)}: initializer 'w' keeps data in "
                                               r"'w\\x00.bin', a location holding a control character"):
        gc.load_onnx(path)


def test_external_data_shorter_than_its_shape_is_refused_before_reading(tmp_path):
    path = _external_model(tmp_path, "w.bin", stored=b"\0" * 8, dims=(10 ** 6, 10 ** 6))
    with small_memory(), pytest.raises(gc.GcompileError, match=r"initializer 'w' declares shape \(1000000, 1000000\) "
                                                               r"float32 \(4000000000000 bytes\) but its external "
                                                               r"data 'w.bin' holds 8 bytes"):
        gc.load_onnx(path)


# -- values computed at import time: bounded; bigger ones are left to the runtime ----------------------
def _bomb(op):
    """A model of a few hundred bytes y = x + c whose node `op` makes c of HUGE elements (or 2 * HUGE)."""
    side, one = [10 ** 5, 10 ** 5], _const("one", [1.0], np.float32)
    inputs = [("x", FLOAT, side if op in ("EyeLike", "Trilu") else [1])]
    nodes, inits = {
        "ConstantOfShape": ([helper.make_node(op, ["s"], ["c"])], [_const("s", side)]),
        "Expand": ([helper.make_node(op, ["one", "s"], ["c"])], [one, _const("s", side)]),
        "Tile": ([helper.make_node(op, ["one", "r"], ["c"])], [one, _const("r", [HUGE])]),
        "Range": ([helper.make_node(op, ["a", "b", "d"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=FLOAT)],
                  [_const("a", 0), _const("b", HUGE), _const("d", 1)]),
        "EyeLike": ([helper.make_node(op, ["x"], ["c"])], []),
        "Trilu": ([helper.make_node(op, ["x"], ["c"])], []),
        "OneHot": ([helper.make_node(op, ["i", "depth", "v"], ["c"])],
                   [_const("depth", [HUGE]), _const("v", [0.0, 1.0], np.float32)]),
    }[op]
    if op == "OneHot":
        inputs.append(("i", INT64, [2]))
    return _model(nodes + [helper.make_node("Add", ["x", "c"], ["y"])], inputs, [("y", FLOAT, None)], inits)


BOMBS = ["ConstantOfShape", "Expand", "Tile", "Range", "EyeLike", "Trilu", "OneHot"]


@pytest.mark.parametrize("op", BOMBS)
def test_huge_values_are_left_to_the_runtime_not_built_at_import(op):
    m = _bomb(op)
    assert m.ByteSize() < 400
    with small_memory():
        f = gc.load_onnx(m)
        traced, lowered = _traced(f)
    size = int(np.prod([d for d in traced.graph.type_of(traced.graph.outputs[0]).shape], dtype=object))
    assert size in (HUGE, 2 * HUGE)
    assert lowered.ByteSize() < 64 << 10
    biggest = max((int(np.prod(n.attrs["value"].shape)) for n in traced.graph.topo_order() if n.op == "constant"),
                  default=0)
    assert biggest <= 4096


def test_gcompile_grad_of_a_size_bomb_stays_small(tmp_path):
    path = _save(tmp_path, _bomb("ConstantOfShape"))
    with small_memory():
        proto = gradient_model(path, "x", loss="sum")
    assert [o.name for o in proto.graph.output] == ["y", "loss", "grad_x"]


def test_small_values_are_still_computed_at_import():
    # ConstantOfShape([2, 3]) -> Range(0, 6) -> Reshape: all known, all folded to one constant
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["r"]), helper.make_node("Reshape", ["r", "s"], ["c"]),
             helper.make_node("Cast", ["c"], ["cf"], to=FLOAT), helper.make_node("Add", ["x", "cf"], ["y"])]
    m = _model(nodes, [("x", FLOAT, [2, 3])], [("y", FLOAT, None)],
               [_const("a", 0), _const("b", 6), _const("d", 1), _const("s", [2, 3])])
    traced, _ = _traced(gc.load_onnx(m))
    constants = [n.attrs["value"] for n in traced.graph.topo_order() if n.op == "constant"]
    assert any(np.array_equal(c, np.arange(6.0).reshape(2, 3)) for c in constants)


def test_a_huge_value_needed_at_import_is_refused():
    nodes = [helper.make_node("ConstantOfShape", ["n"], ["s"], value=_const("v", [1])),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_it")]
    m = _model(nodes, [("x", FLOAT, [1])], [("y", FLOAT, None)], [_const("n", [HUGE])])
    refusal = (r"the given ModelProto: ONNX node 'reshape_it' \(Reshape, opset 20\): its shape depends on a value "
               r"larger than the import-time bound \(4096 elements\)")
    with small_memory(), pytest.raises(gc.UnsupportedError, match=refusal):
        _traced(gc.load_onnx(m))


# -- files that are not models, negative dims, SSA violations -----------------------------------------
def test_an_empty_file_is_refused(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(gc.GcompileError, match=rf"{re.escape(str(path))}: the file is empty"):
        gc.load_onnx(str(path))
    with pytest.raises(gc.GcompileError, match="the given bytes: empty"):
        gc.load_onnx(b"")
    with pytest.raises(gc.GcompileError, match="the given ModelProto: it has no graph"):
        gc.load_onnx(onnx.ModelProto())
    result = CliRunner().invoke(main, ["grad", str(path), "--wrt", "x", "-o", str(tmp_path / "g.onnx")])
    assert result.exit_code == 2 and "the file is empty" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("where", ["input", "output", "value_info", "initializer"])
def test_a_negative_dim_in_a_declared_type_is_refused(tmp_path, where):
    shape = {w: [-3] if w == where else [3] for w in ("input", "output", "value_info")}
    w = _tensor("w", [-1] if where == "initializer" else [1], float_data=[1.0])
    m = _model([helper.make_node("Add", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
               [("x", FLOAT, shape["input"])], [("y", FLOAT, shape["output"])], [w])
    m.graph.value_info.append(helper.make_tensor_value_info("h", FLOAT, shape["value_info"]))
    name = {"input": "x", "output": "y", "value_info": "h", "initializer": "w"}[where]
    path = _save(tmp_path, m)
    with pytest.raises(gc.GcompileError, match=rf"{re.escape(path)}: .*'{name}'.* negative dim"):
        gc.load_onnx(path)


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand"])
def test_a_negative_dim_in_a_shape_operand_is_refused(op):
    node = helper.make_node(op, ["s"] if op == "ConstantOfShape" else ["x", "s"], ["c"], name="n1")
    m = _model([node, helper.make_node("Add", ["x", "c"], ["y"])], [("x", FLOAT, [1])], [("y", FLOAT, None)],
               [_const("s", [-2, 3])])
    f = gc.load_onnx(m)
    with pytest.raises(gc.GcompileError, match=rf"the given ModelProto: ONNX node 'n1' \({op}, opset 20\): its shape "
                                               r"\(-2, 3\) has a negative dim"):
        _traced(f)


def test_two_nodes_writing_one_tensor_are_refused(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"), helper.make_node("Neg", ["x"], ["y"], name="second")]
    m = _model(nodes, [("x", FLOAT, [3])], [("y", FLOAT, None)])
    path = _save(tmp_path, m)
    with pytest.raises(gc.GcompileError, match=rf"{re.escape(path)}: tensor 'y' is written by node 'second' \(Neg\) "
                                               r"but already by node 'first' \(Relu\)"):
        gc.load_onnx(path)
    m = _model([helper.make_node("Relu", ["x"], ["w"], name="over")], [("x", FLOAT, [3])], [("w", FLOAT, None)],
               [_const("w", [1.0, 2.0, 3.0], np.float32)])
    with pytest.raises(gc.GcompileError, match=r"tensor 'w' is written by node 'over' \(Relu\) but is already an "
                                               r"initializer"):
        gc.load_onnx(m)


def test_a_malformed_node_is_refused_by_the_onnx_checker(tmp_path):
    m = _model([helper.make_node("Transpose", ["x"], ["y"], name="t", perm=1.5)], [("x", FLOAT, [3])],
               [("y", FLOAT, None)])
    path = _save(tmp_path, m)
    with pytest.raises(gc.GcompileError, match=rf"{re.escape(path)}: node 't' \(Transpose\) is not valid ONNX: "):
        gc.load_onnx(path)


@pytest.mark.parametrize("value", [2, -1, 2 ** 40])
@pytest.mark.parametrize("op, attr", [("ReduceSum", "keepdims"), ("Gemm", "transA")])
def test_a_flag_attribute_other_than_0_or_1_is_refused(op, attr, value):
    """ONNX Runtime keeps a reduction's dims only for keepdims == 1 and the importer kept them for
    any nonzero value: the same file computed other shapes in each."""
    inputs = ["x", "x"] if op == "Gemm" else ["x"]
    m = _model([helper.make_node(op, inputs, ["y"], name="flagged", **{attr: value})], [("x", FLOAT, [3, 3])],
               [("y", FLOAT, None)])
    with pytest.raises(gc.GcompileError, match=rf"node 'flagged' \({op}\) is not valid ONNX: its attribute "
                                               rf"'{attr}' is {value}, where ONNX allows 0 or 1"):
        gc.load_onnx(m)


# -- corrupted bytes: a working model or a GcompileError, nothing else ---------------------------------
def test_corrupted_files_load_or_raise_gcompile_errors():
    data = mlp_model().SerializeToString()
    rng = np.random.default_rng(1234)
    variants = [data[:n] for n in np.linspace(1, len(data) - 1, 20).astype(int)]
    for _ in range(70):
        corrupt = bytearray(data)
        for at in rng.integers(0, len(data), rng.integers(1, 4)):
            corrupt[at] ^= int(rng.integers(1, 256))
        variants.append(bytes(corrupt))
    outcomes = {"loaded": 0, "refused": 0}
    with small_memory(peak=256 << 20):
        for variant in variants:
            try:
                _traced(gc.load_onnx(variant))
                outcomes["loaded"] += 1
            except gc.GcompileError as err:
                assert str(err).startswith("the given bytes"), err
                outcomes["refused"] += 1
    assert outcomes["loaded"] and outcomes["refused"], outcomes


# -- the node-reading layer: attributes of the schema's type, input counts, subgraphs -----------------------
def _scan_model():
    """y = the running sum of the rows of x (3, 2), as one Scan node named 'scan'."""
    body = helper.make_graph([helper.make_node("Add", ["c", "xi"], ["c2"]),
                              helper.make_node("Identity", ["c2"], ["yi"])], "body",
                             [helper.make_tensor_value_info("c", FLOAT, [2]),
                              helper.make_tensor_value_info("xi", FLOAT, [2])],
                             [helper.make_tensor_value_info("c2", FLOAT, [2]),
                              helper.make_tensor_value_info("yi", FLOAT, [2])])
    scan = helper.make_node("Scan", ["c0", "x"], ["cn", "y"], name="scan", body=body, num_scan_inputs=1)
    return _model([scan], [("x", FLOAT, [3, 2])], [("y", FLOAT, None)], [_const("c0", [0.0, 0.0], np.float32)])


def _damaged(edit):
    m = _scan_model()
    edit(m.graph.node[0])
    return m


def _rename_body(node):
    node.attribute[0].name = "ody"      # a flipped byte in the attribute's name


def _float_count(node):
    node.attribute[1].ClearField("i")
    node.attribute[1].type, node.attribute[1].f = onnx.AttributeProto.FLOAT, 1.5


def _body_as_int(node):
    node.attribute[0].ClearField("g")
    node.attribute[0].type, node.attribute[0].i = onnx.AttributeProto.INT, 3


def _other_op(node):
    node.op_type = "IsNaN"             # keeps its body attribute and its two inputs


@pytest.mark.parametrize("edit, reason", [
    (_rename_body, r"Unrecognized attribute: ody for operator Scan"),
    (_float_count, r"Mismatched attribute type in 'scan : num_scan_inputs'\. Expected: 'INT', actual: 'FLOAT'"),
    (_body_as_int, r"Mismatched attribute type in 'scan : body'\. Expected: 'GRAPH', actual: 'INT'"),
    (_other_op, r"has input size 2 not in range \[min=1, max=1\]"),
], ids=["attribute-renamed", "count-of-another-type", "body-of-another-type", "op-type-changed"])
def test_a_damaged_node_holding_a_graph_is_refused_naming_it(tmp_path, edit, reason):
    """Nodes holding graphs (Scan, Loop, If) skipped onnx's node check: a Scan whose body attribute
    lost its name reached the translator as None (AttributeError, `gcompile grad` exit 1)."""
    m = _damaged(edit)
    path = _save(tmp_path, m)
    op = m.graph.node[0].op_type
    with pytest.raises(gc.GcompileError,
                       match=rf"{re.escape(path)}: node 'scan' \({op}\) is not valid ONNX: .*{reason}"):
        gc.load_onnx(path)
    result = CliRunner().invoke(main, ["grad", path, "--wrt", "x", "-o", str(tmp_path / "g.onnx")])
    assert result.exit_code == 2, result.output
    assert "node 'scan'" in result.output and "this is a gcompile bug" not in result.output


def test_an_if_node_is_checked_too():
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", FLOAT, [3])])
    node = helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch, else_branch=branch)
    node.attribute[1].ClearField("g")
    node.attribute[1].type, node.attribute[1].f = onnx.AttributeProto.FLOAT, 0.5
    m = _model([node], [("x", FLOAT, [3]), ("c", TensorProto.BOOL, [])], [("y", FLOAT, None)])
    with pytest.raises(gc.GcompileError, match=r"node 'choose' \(If\) is not valid ONNX: Mismatched attribute type in "
                                               r"'choose : then_branch'"):
        gc.load_onnx(m)


def _nested_ifs(depth):
    """y = -x inside `depth` If nodes nested in their then branches (built field by field: onnx.helper
    parses what it copies, which protobuf refuses past about 30 levels)."""
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "inner", [],
                              [helper.make_tensor_value_info("y", FLOAT, [3])])
    for level in range(depth):
        node = onnx.NodeProto(op_type="If", input=["c"], output=["y"], name=f"if_{level}")
        for name in ("then_branch", "else_branch"):
            node.attribute.add(name=name, type=onnx.AttributeProto.GRAPH).g.CopyFrom(
                graph if name == "then_branch" else helper.make_graph(
                    [helper.make_node("Identity", ["x"], ["y"])], "plain", [],
                    [helper.make_tensor_value_info("y", FLOAT, [3])]))
        graph = onnx.GraphProto(name=f"level_{level}", output=[helper.make_tensor_value_info("y", FLOAT, [3])])
        graph.node.add().CopyFrom(node)
    m = _model([], [("x", FLOAT, [3]), ("c", TensorProto.BOOL, [])], [("y", FLOAT, [3])])
    m.graph.node.add().CopyFrom(graph.node[0])
    return m


def test_graphs_nested_deeper_than_the_bound_are_refused():
    """A ModelProto of 400 nested If nodes made every check recurse until Python's limit (RecursionError)."""
    from gcompile.importer.validate import MAX_NESTING
    f = gc.load_onnx(_nested_ifs(MAX_NESTING))
    traced, _ = _traced(f)
    assert traced.graph.outputs
    for depth in (MAX_NESTING + 1, 400):
        with pytest.raises(gc.GcompileError, match=rf"the given ModelProto: node 'if_{depth - MAX_NESTING - 1}' "
                                                   rf"\(If\) holds graphs nested more than {MAX_NESTING} deep"):
            gc.load_onnx(_nested_ifs(depth))


def _looped(depth, trip=5, needs_iteration=False):
    """Loops nested `depth` deep, each with a constant trip count and a condition its body computes
    from data (so each is first tried as a scan, then as a while loop); with needs_iteration each
    body also slices with its iteration number (so each is unrolled instead)."""
    body = None
    for level in range(depth):
        p = f"l{level}_"
        nodes = [helper.make_node("Sin", [p + "x"], [p + "y"]) if body is None else
                 helper.make_node("Loop", ["trip", ""] + [p + "x"], [p + "y"], body=body, name=f"loop_{level}")]
        if needs_iteration:
            nodes += [helper.make_node("Unsqueeze", [p + "i", "zero"], [p + "i1"]),
                      helper.make_node("Slice", [p + "y", "zero", p + "i1"], [p + "s"]),
                      helper.make_node("ReduceSum", [p + "s"], [p + "t"], keepdims=0),
                      helper.make_node("Identity", [p + "cond"], [p + "co"])]
        else:
            nodes += [helper.make_node("ReduceSum", [p + "y"], [p + "t"], keepdims=0),
                      helper.make_node("Less", [p + "t", "hundred"], [p + "co"])]
        body = helper.make_graph(nodes, f"body_{level}", [
            helper.make_tensor_value_info(p + "i", INT64, []),
            helper.make_tensor_value_info(p + "cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info(p + "x", FLOAT, [3])],
            [helper.make_tensor_value_info(p + "co", TensorProto.BOOL, []),
             helper.make_tensor_value_info(p + "y", FLOAT, [3])])
    return _model([helper.make_node("Loop", ["trip", "", "x"], ["y"], body=body, name="outer")],
                  [("x", FLOAT, [3])], [("y", FLOAT, None)],
                  [_const("hundred", 100.0, np.float32), _const("trip", trip), _const("zero", [0])])


def test_nested_loops_translate_their_bodies_a_bounded_number_of_times(monkeypatch):
    """A Loop whose condition turns out to be computed from data is translated again as a while loop:
    nested, each level doubled the work (12 levels, 2.8 KB: 2^12 translations of the innermost body)."""
    from gcompile.importer import inline
    translated = []
    original = inline.Inliner.run_node

    def counting(self, proto, *args):
        translated.append(proto.op_type)
        return original(self, proto, *args)
    monkeypatch.setattr(inline.Inliner, "run_node", counting)
    _traced(gc.load_onnx(_looped(12)))
    assert 12 < translated.count("Sin") <= 2 * 12


def test_loops_unrolled_inside_unrolled_loops_are_refused_past_the_bound():
    from gcompile.importer.inline import MAX_REPEATS
    _traced(gc.load_onnx(_looped(2, trip=30, needs_iteration=True)))         # 30 x 30 translations of the body
    with pytest.raises(gc.UnsupportedError, match=rf"ONNX node 'loop_1' \(Loop, opset 20\): it is unrolled into 40 "
                                                  rf"steps, so its body would be translated 1600 times, counting the "
                                                  rf"loops around it; gcompile translates a loop body at most "
                                                  rf"{MAX_REPEATS} times"):
        _traced(gc.load_onnx(_looped(2, trip=40, needs_iteration=True)))


def test_subgraph_initializers_are_read():
    """An If branch's own initializer was unknown to the importer ('reads 'w', which no earlier node produces')."""
    branch = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", FLOAT, [3])],
                               [_const("w", [2.0, 3.0, 4.0], np.float32)])
    plain = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "plain", [],
                              [helper.make_tensor_value_info("b", FLOAT, [3])])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=plain)],
               [("x", FLOAT, [3]), ("c", TensorProto.BOOL, [])], [("y", FLOAT, [3])])
    f = gc.load_onnx(m)
    run = gc.compile(lambda x, c: f(x, c), gc.spec((3,)), gc.spec((), "bool"), provider="cpu")
    x = np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_array_equal(run(x, np.array(True)), x * [2, 3, 4])
    np.testing.assert_array_equal(run(x, np.array(False)), -x)


def test_a_sequence_given_to_an_op_taking_a_tensor_is_refused():
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"], name="r")]
    with pytest.raises(gc.UnsupportedError, match=r"ONNX node 'r' \(Relu, opset 20\): its input 0 \('s'\) is a "
                                                  r"sequence of tensors, where Relu takes a tensor"):
        _traced(gc.load_onnx(_model(nodes, [("x", FLOAT, [3])], [("y", FLOAT, None)])))


# -- sizes a file declares never become constants of that size ---------------------------------------------
SIDE = 10 ** 5           # a side of HUGE elements


def _sized(case):
    """A small model one of whose translators builds a constant from a size the file declares: a
    Loop's trip count, the lengths of causal attention, an einsum diagonal, an RNN's sequence
    length (with sequence_lens), a Tile of a shape."""
    if case == "loop":
        body = helper.make_graph([helper.make_node("Identity", ["cond"], ["co"]),
                                  helper.make_node("Sin", ["v"], ["w"])], "body",
                                 [helper.make_tensor_value_info("i", INT64, []),
                                  helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                  helper.make_tensor_value_info("v", FLOAT, [3])],
                                 [helper.make_tensor_value_info("co", TensorProto.BOOL, []),
                                  helper.make_tensor_value_info("w", FLOAT, [3])])
        return _model([helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], [("x", FLOAT, [3])],
                      [("y", FLOAT, None)], [_const("n", HUGE)])
    if case == "attention":
        return _model([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
                      [(name, FLOAT, [1, 1, SIDE, 2]) for name in "qkv"], [("y", FLOAT, None)], opset=23)
    if case == "einsum":
        return _model([helper.make_node("Einsum", ["x"], ["y"], equation="ii->i")], [("x", FLOAT, [SIDE, SIDE])],
                      [("y", FLOAT, None)])
    if case == "rnn":
        return _model([helper.make_node("RNN", ["x", "w", "r", "", "lens"], ["y"], hidden_size=1)],
                      [("x", FLOAT, [HUGE, 1, 1]), ("lens", TensorProto.INT32, [1])], [("y", FLOAT, None)],
                      [_const("w", [[[0.5]]], np.float32), _const("r", [[[0.25]]], np.float32)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Tile", ["s", "r"], ["t"]),
             helper.make_node("Cast", ["t"], ["y"], to=FLOAT)]
    return _model(nodes, [("x", FLOAT, ["n"])], [("y", FLOAT, None)], [_const("r", [HUGE])])


@pytest.mark.parametrize("case", ["loop", "attention", "einsum", "rnn", "tile-of-a-shape"])
def test_sizes_a_file_declares_never_become_constants_that_large(case):
    """Each of these built a numpy constant of the declared size at import: 8 TiB for the loop's
    iteration numbers, 10^10 elements for the attention mask and the identity matrix, ..."""
    m = _sized(case)
    with small_memory():
        traced, lowered = _traced(gc.load_onnx(m))
    biggest = max((int(np.prod(n.attrs["value"].shape)) for n in traced.graph.topo_order() if n.op == "constant"),
                  default=0)
    assert biggest <= 4096 and lowered.ByteSize() < 64 << 10


def test_a_resize_too_large_to_interpolate_is_refused_before_allocating():
    m = _model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="up", mode="linear")],
               [("x", FLOAT, [1, 1, 1, SIDE])], [("y", FLOAT, None)], [_const("sizes", [1, 1, 1, 2 * SIDE])])
    with small_memory(), pytest.raises(gc.UnsupportedError, match=rf"ONNX node 'up' \(Resize, opset 20\): resizing an "
                                                                  rf"axis of size {SIDE} to {2 * SIDE} needs a "):
        _traced(gc.load_onnx(m))


@pytest.mark.parametrize("where", ["input", "value_info"])
def test_a_declared_shape_of_more_elements_than_int64_counts_is_refused(where):
    """Such a shape reached the lowering, which failed converting it (OverflowError, exit 1)."""
    m = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
               [("x", FLOAT, [2 ** 40, 2 ** 30] if where == "input" else [3])], [("y", FLOAT, None)])
    if where == "value_info":
        m.graph.value_info.append(helper.make_tensor_value_info("h", FLOAT, [2 ** 62, 4]))
    name = {"input": "x", "value_info": "h"}[where]
    with pytest.raises(gc.GcompileError, match=rf"{where} '{name}' declares shape .* elements, more than any "
                                               r"runtime counts \(2\*\*63 - 1\)"):
        gc.load_onnx(m)


def test_a_shape_too_large_for_int64_is_a_lowering_error():
    spec = gc.spec((2 ** 62, 8))
    with pytest.raises(gc.GcompileError, match=r"reshape \(at .*test_hostile_models.py:\d+\): the sizes .* do not fit "
                                               r"in int64"):
        gc.compile(lambda x: F.reshape(x, (2 ** 65,)), spec, provider="cpu")
