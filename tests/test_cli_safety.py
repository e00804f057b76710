"""The command line where a model or its user misbehaves: output names that are not file names
(`run --out`), user code that calls sys.exit or is interrupted, a model that fails inside ONNX
Runtime, `build --check` of huge specs, `inspect` of a model newer than the installed tools, and
ONNX Runtime's own log lines kept off the terminal."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import gcompile.runtime.modelfile
from gcompile.cli import main, output_file_names


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def user_error(result, *fragments):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "gcompile bug" not in result.output
    assert result.stderr.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def identity_model(path, output_names, ir_version=8, opset=18):
    """A model copying its input `x` (float32, 2 values) to one output per name."""
    nodes = [helper.make_node("Identity", ["x"], [name], name=f"copy{i}") for i, name in enumerate(output_names)]
    graph = helper.make_graph(nodes, "copies", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in output_names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    path.write_bytes(model.SerializeToString())
    return path


def gather_model(path):
    graph = helper.make_graph([helper.make_node("Gather", ["data", "index"], ["y"], name="pick_row")], "gather",
                              [helper.make_tensor_value_info("data", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("index", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


# -- item 1: run --out keeps every output file inside DIR ------------------------------------------------------
def test_run_out_keeps_hostile_output_names_inside_the_folder(tmp_path):
    outside = tmp_path / "abs" / "target"
    names = ["../../x", str(outside), "a\\b", ".", "..", "nul\0byte", "a/b", "a_b", "A_B", "CON", "y" * 300,
             "plain"]
    work = tmp_path / "work"
    work.mkdir()
    model = identity_model(work / "copies.onnx", names)
    np.save(work / "x.npy", np.array([1.0, 2.0], np.float32))
    result = invoke("run", model, "-i", f"x={work / 'x.npy'}", "-o", work / "res")
    assert result.exit_code == 0, result.output
    written = sorted(os.listdir(work / "res"))
    assert len(written) == len(names) and all(n.endswith(".npy") and not n.startswith(".") for n in written)
    assert len({n.lower() for n in written}) == len(names)                   # no two outputs share a file
    assert sorted(os.listdir(tmp_path)) == ["work"] and sorted(os.listdir(work)) == ["copies.onnx", "res", "x.npy"]
    for name in written:
        np.testing.assert_array_equal(np.load(work / "res" / name), [1.0, 2.0])
        assert name in result.output                                         # the real file names are printed
    assert "plain.npy" in written
    assert f"wrote {len(names)} output(s) to {work / 'res'}" in result.output


def test_output_file_names_are_deterministic_and_safe():
    names = ["../../x", "/etc/passwd", ".", "..", "", "a/b", "a_b", "a\\b", "x" * 400, "ok.name-1"]
    files = output_file_names(names)
    assert files == output_file_names(names)
    assert files[-1] == "ok.name-1.npy"
    for file in files:
        assert os.path.basename(file) == file and not file.startswith(".") and len(file) <= 200
        assert set(file) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
    assert len({f.lower() for f in files}) == len(files)
    assert output_file_names(["a/b", "a_b", "A_B", "a_b_2"]) == ["a_b_3.npy", "a_b.npy", "A_B_4.npy", "a_b_2.npy"]


# -- item 8: user code that exits or is interrupted -----------------------------------------------------------
@pytest.mark.parametrize("body, line", [
    ("@gc.export(x=gc.spec((2,)))\ndef f(x):\n    sys.exit(0)\n", 5),
    ("sys.exit(0)\n", 3),
    ("@gc.export(x=gc.spec((2,)))\ndef f(x):\n    raise SystemExit('bye')\n", 5),
])
def test_sys_exit_in_user_code_is_the_users_error(tmp_path, body, line):
    (tmp_path / "model.py").write_text("import sys\nimport gcompile as gc\n" + body)
    result = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out")
    user_error(result, "SystemExit", f"model.py:{line}")
    assert not (tmp_path / "out").exists()


def test_keyboard_interrupt_in_user_code_exits_130(tmp_path):
    (tmp_path / "model.py").write_text("import gcompile as gc\n@gc.export(x=gc.spec((2,)))\ndef f(x):\n"
                                       "    raise KeyboardInterrupt\n")
    result = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out")
    assert result.exit_code == 130, result.output
    assert "interrupted" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_ctrl_c_anywhere_exits_130(tmp_path, monkeypatch):
    def interrupted(path):
        raise KeyboardInterrupt
    monkeypatch.setattr(gcompile.runtime.modelfile, "opened", interrupted)
    result = invoke("inspect", identity_model(tmp_path / "m.onnx", ["y"]))
    assert result.exit_code == 130 and "interrupted" in result.stderr, result.output


# -- item 11: the model's errors, --check's memory, too-new models, onnxruntime's log ---------------------------
def test_an_onnxruntime_error_while_running_is_the_models_error(tmp_path):
    model = gather_model(tmp_path / "gather.onnx")
    np.save(tmp_path / "data.npy", np.ones(3, np.float32))
    np.save(tmp_path / "index.npy", np.array([5]))
    result = invoke("run", model, "-i", f"data={tmp_path / 'data.npy'}", "-i", f"index={tmp_path / 'index.npy'}")
    user_error(result, "gather.onnx", "node 'pick_row' (Gather)", "out of data bounds")


def test_onnxruntime_log_lines_stay_off_the_terminal(tmp_path):
    model = gather_model(tmp_path / "gather.onnx")
    np.save(tmp_path / "data.npy", np.ones(3, np.float32))
    np.save(tmp_path / "index.npy", np.array([5]))
    proc = subprocess.run([sys.executable, "-m", "gcompile.cli", "run", str(model), "-i",
                           f"data={tmp_path / 'data.npy'}", "-i", f"index={tmp_path / 'index.npy'}"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "\x1b[" not in proc.stderr and "onnxruntime:" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1


def test_sessions_are_created_with_onnxruntime_logging_silenced(tmp_path, monkeypatch):
    severities, seen = [], []
    real_set, real_session = ort.set_default_logger_severity, ort.InferenceSession
    monkeypatch.setattr(ort, "set_default_logger_severity", lambda level: severities.append(level) or real_set(level))

    def session(model, options=None, **kwargs):
        seen.append((severities[-1] if severities else None, options.log_severity_level))
        return real_session(model, options, **kwargs)
    monkeypatch.setattr(ort, "InferenceSession", session)
    model = identity_model(tmp_path / "m.onnx", ["y"])
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    assert invoke("run", model, "-i", f"x={tmp_path / 'x.npy'}", "--provider", "cpu").exit_code == 0
    assert seen == [(4, 4)]                       # the default logger and the session's log: fatal only


def test_check_refuses_huge_random_inputs_before_allocating(tmp_path):
    (tmp_path / "model.py").write_text(textwrap.dedent("""
        import gcompile as gc
        @gc.export(x=gc.spec((1000000, 1000000)), y=gc.spec((3,)))
        def f(x, y):
            return x * 2
    """))
    result = invoke("build", tmp_path / "model.py", "-o", tmp_path / "out", "--check", "--provider", "cpu")
    user_error(result, "--check of 'f'", "input 'x'", "float32(1000000, 1000000)", "3.6 TiB")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("version", [{"ir_version": 99}, {"opset": 99}], ids=["ir_version", "opset"])
def test_inspect_describes_a_model_too_new_to_run(tmp_path, version):
    model = identity_model(tmp_path / "new.onnx", ["y"], **version)
    result = invoke("inspect", model)
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and "99" in result.stderr
    assert "y: float32(2,)" in result.stdout and "Identity" in result.stdout
    user_error(invoke("run", model, "-i", "x=nope.npy"), "99")


# -- input files: a .npy header is checked against the file before anything is allocated -------------------------
def _npy_bytes(shape, descr="<f4", data=b"") -> bytes:
    text = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode()
    text += b" " * (63 - (10 + len(text)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data


@pytest.mark.parametrize("content, fragment", [
    (_npy_bytes((1 << 31,), data=b"\0" * 16), "declares float32(2147483648,) (8589934592 bytes) but 16 bytes"),
    (_npy_bytes((2,), data=b"\0" * 64), "but more bytes follow it"),
    (_npy_bytes((2,), "|O", b"\0" * 16), "Python objects"),
    (b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 40, "cannot read"),
    (b"not a numpy file", "cannot read"),
])
def test_run_refuses_hostile_npy_inputs_before_allocating(tmp_path, content, fragment):
    """numpy's loader would allocate the 8 GiB this 100-byte file declares before noticing it is short."""
    import tracemalloc
    model = identity_model(tmp_path / "m.onnx", ["y"])
    (tmp_path / "x.npy").write_bytes(content)
    tracemalloc.start()
    try:
        result = invoke("run", model, "-i", f"x={tmp_path / 'x.npy'}")
        assert tracemalloc.get_traced_memory()[1] < 50_000_000
    finally:
        tracemalloc.stop()
    user_error(result, "--input x", fragment)


# -- external data: a location read from a file is a path only inside the model's folder --------------------------
def external_model(path, location: str, attribute: bool = False):
    """A model adding a 4-value float32 weight whose data is external, at `location`: an initializer,
    or (`attribute`) a Constant node's value."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4], np.ones(4, np.float32).tobytes(), raw=True)
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    if attribute:
        nodes.insert(0, helper.make_node("Constant", [], ["w"], value=weight))
    graph = helper.make_graph(nodes, "external", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [] if attribute else [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("location, reason", [
    ("w\0.bin", "a control character (a NUL byte)"), ("w\n.bin", "a control character"), ("", "an empty location"),
    ("/etc/passwd", "an absolute path"), ("C:\\w.bin", "an absolute path"), ("\\\\server\\w.bin", "an absolute path"),
    ("../w.bin", "'..'"), ("a\\..\\..\\w.bin", "'..'"), ("link/w.bin", "a link leading out of the folder"),
])
@pytest.mark.parametrize("command", ["run", "inspect", "viz", "grad"])
def test_hostile_external_data_locations_are_refused_by_every_command(tmp_path, command, location, reason):
    """A NUL byte in a location used to escape as 'internal error: ValueError: embedded null byte'."""
    folder, outside = tmp_path / "model", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    (folder / "link").symlink_to(outside)
    model = external_model(folder / "m.onnx", location)
    args = {"run": ["-i", "x=x.npy"], "inspect": [], "viz": ["-o", tmp_path / "m.svg"],
            "grad": ["--wrt", "params", "-o", tmp_path / "g.onnx"]}[command]
    user_error(invoke(command, model, *args), "m.onnx", repr(location), reason, "inside the model's folder")


def test_external_data_of_a_node_attribute_is_refused_not_read_from_the_working_directory(tmp_path, monkeypatch):
    """onnxruntime reads a Constant's external data relative to the working directory, which the
    manifest does not cover: a file there would have been the model's weight."""
    (tmp_path / "model").mkdir()
    model = external_model(tmp_path / "model" / "m.onnx", "w.bin", attribute=True)
    for folder in (tmp_path, tmp_path / "model"):
        (folder / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    np.save(tmp_path / "x.npy", np.zeros(4, np.float32))
    monkeypatch.chdir(tmp_path)
    user_error(invoke("run", model, "-i", "x=x.npy"), "m.onnx", "graph.node[0].attribute[0].t",
               "external data for the graph's initializers only")
    user_error(invoke("inspect", model), "graph.node[0].attribute[0].t")


# -- types as people read them ------------------------------------------------------------------------------------
def test_string_tensors_are_described_as_string(tmp_path):
    """inspect said 'x: object(2,)'; run refused text with 'expected object(2,), got str32(2,)' and, given
    object arrays back by onnxruntime, could not write them with --out."""
    io = [helper.make_tensor_value_info(n, TensorProto.STRING, [2]) for n in "xy"]
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "text", io[:1], io[1:]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    np.save(tmp_path / "words.npy", np.array(["a", "bc"]))
    np.save(tmp_path / "numbers.npy", np.ones(2))
    described = invoke("inspect", tmp_path / "m.onnx")
    assert described.exit_code == 0 and "x: string(2,)" in described.stdout and "y: string(2,)" in described.stdout
    ran = invoke("run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'words.npy'}", "-o", tmp_path / "out")
    assert ran.exit_code == 0, ran.output
    assert "y: string(2,)" in ran.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), ["a", "bc"])
    user_error(invoke("run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'numbers.npy'}"),
               "input 'x': expected string(2,), got float64(2,)")


def test_a_float64_file_for_a_float32_model_says_how_to_convert(tmp_path):
    model = identity_model(tmp_path / "m.onnx", ["y"])
    np.save(tmp_path / "x.npy", np.ones(2))
    user_error(invoke("run", model, "-i", f"x={tmp_path / 'x.npy'}"),
               "input 'x': expected float32(2,), got float64(2,) (convert it with .astype(np.float32))")


def test_a_shape_mismatch_of_the_right_dtype_gets_no_conversion_hint(tmp_path):
    """It said 'expected float32(2,), got float32(3,) (convert it with .astype(np.float32))'."""
    model = identity_model(tmp_path / "m.onnx", ["y"])
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    result = invoke("run", model, "-i", f"x={tmp_path / 'x.npy'}")
    user_error(result, "input 'x': expected float32(2,), got float32(3,)")
    assert "astype" not in result.stderr


def test_a_scalar_input_stays_a_scalar(tmp_path):
    """run fed a 0-d input as shape (1,) (numpy's ascontiguousarray makes 0-d arrays 1-d), and an
    elementwise model's output came back as (1,)."""
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "negate",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", np.array(2.0, np.float32))
    ran = invoke("run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out")
    assert ran.exit_code == 0, ran.output
    out = np.load(tmp_path / "out" / "y.npy")
    assert out.shape == () and out == -2.0


@pytest.mark.parametrize("command", ["inspect", "run"])
def test_a_model_whose_input_is_not_a_tensor_is_refused(tmp_path, command):
    """A sequence input escaped as 'internal error: KeyError: 0'."""
    graph = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "sequence",
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    user_error(invoke(command, tmp_path / "m.onnx"), "'s' is a sequence, not a tensor")


@pytest.mark.parametrize("option", ["-i", "--input"])
def test_an_input_given_as_two_words_gets_the_form_to_write(tmp_path, option):
    """`-i x x.npy` got click's 'Got unexpected extra argument (x.npy)' and nothing more."""
    model = identity_model(tmp_path / "m.onnx", ["y"])
    result = invoke("run", model, option, "x", "x.npy")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{option} takes NAME=FILE.npy as one word: write {option} x=x.npy" in result.output, result.output
    assert "unexpected extra argument (extra)" in invoke("run", model, "extra").output   # other mistakes as before


# -- strings a hostile file holds: not UTF-8, markup, terminal escapes ------------------------------------------------
MARK = "MARKMARKMARKMARK"   # 16 characters, replaced in the serialised bytes by 16 others


def marked_model(field: str):
    """A model with a Loop (a subgraph) whose `field` holds MARK: the Loop's body copies -x."""
    def text(name, value):
        return MARK if field == name else value
    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]),
                              helper.make_node("Identity", ["x_in"], ["x_out"], name=text("body.node.name", "copy"),
                                               doc_string=text("body.node.doc_string", "in the body"))],
                             text("body.name", "body"),
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [2])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [2])])
    x = text("input.name", "x")
    nodes = [helper.make_node("Neg", [x], ["n"], name=text("node.name", "negate"),
                              doc_string=text("node.doc_string", "model.py:3 order=0")),
             helper.make_node("Loop", ["trips", "", "n"], ["y"], body=body, name="loop"),
             helper.make_node("Relu", ["n"], ["r"], domain=text("node.domain", ""))]
    graph = helper.make_graph(nodes, text("graph.name", "hostile"),
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])],
                              [helper.make_tensor("trips", TensorProto.INT64, [], [1])],
                              doc_string=text("graph.doc_string", ""))
    imports = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(MARK, 1)] if field == "node.domain" else [])
    model = helper.make_model(graph, opset_imports=imports, producer_name=text("producer_name", "tool"),
                              producer_version=text("producer_version", "1.0"), doc_string=text("doc_string", ""))
    model.ir_version = 8
    helper.set_model_props(model, {text("metadata.key", "k"): text("metadata.value", "v")})
    return model


TEXT_FIELDS = ["node.name", "node.doc_string", "graph.name", "graph.doc_string", "producer_name", "producer_version",
               "doc_string", "body.node.name", "body.node.doc_string", "body.name"]
NAME_FIELDS = ["input.name", "metadata.key", "metadata.value", "node.domain"]
COMMANDS = {"inspect": [], "run": ["-i", "x=X"], "viz-svg": ["-o", "D.svg"], "viz-html": ["-o", "D.html"],
            "viz-dot": ["-o", "D.dot"]}


def run_command(command, path, tmp_path):
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    args = [a.replace("X", str(tmp_path / "x.npy")).replace("D", str(tmp_path / "drawing"))
            for a in COMMANDS[command]]
    return invoke(command.split("-")[0], path, *args)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("field", TEXT_FIELDS + NAME_FIELDS)
def test_text_that_is_not_utf8_is_shown_and_names_that_are_not_are_refused(tmp_path, field, command):
    """A byte that is not UTF-8 in a node's doc_string made inspect and viz exit 1 (a regex on
    bytes), in a node's name viz; every string field a command prints or draws is covered."""
    path = tmp_path / "m.onnx"
    path.write_bytes(marked_model(field).SerializeToString().replace(MARK.encode(), b"bad\xff\xfe text here."))
    result = run_command(command, path, tmp_path)
    if field in NAME_FIELDS:
        user_error(result, "m.onnx", "not UTF-8 text")
        with pytest.raises(gcompile.GcompileError, match="not UTF-8 text"):
            gcompile.load_onnx(path)
    else:
        assert result.exit_code == 0 and "gcompile bug" not in result.output, result.output
        assert "\\xff" not in result.output
        if command == "inspect" and field == "graph.name":
            assert "bad\ufffd\ufffd text here." in result.stdout


HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "]]><svg onload=alert(1)>",
           "a\x1b[31mred\x1b[0m\r\nline", "nul\x00byte", "ctl\x01\x07\x0b\x0c", "&amp;&lt;", "'single' \\ back"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_strings_are_drawn_as_text_and_never_reach_the_terminal_raw(tmp_path, hostile):
    import html.parser
    import xml.etree.ElementTree as ElementTree
    model = marked_model("")
    model.graph.name = model.graph.node[0].name = model.graph.node[0].doc_string = hostile
    model.producer_name = hostile
    model.graph.node[2].domain = "evil." + hostile
    model.opset_import.append(helper.make_opsetid("evil." + hostile, 1))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    described = invoke("inspect", path)
    assert described.exit_code == 0, described.output
    assert "\x1b" not in described.output and "\x00" not in described.output and "\r" not in described.output
    for suffix in ("svg", "html", "dot"):
        drawn = invoke("viz", path, "-o", tmp_path / f"d.{suffix}")
        assert drawn.exit_code == 0, drawn.output
    svg = (tmp_path / "d.svg").read_text()
    tree = ElementTree.fromstring(svg)        # well-formed XML: nothing a browser refuses to draw
    tags = {element.tag.split("}")[1] for element in tree.iter()}
    assert tags <= {"svg", "defs", "marker", "path", "style", "g", "title", "rect", "text"}, tags
    assert not [a for element in tree.iter() for a in element.attrib if a.lower().startswith("on")]

    class Page(html.parser.HTMLParser):
        found: list = []

        def handle_starttag(self, tag, attrs):
            self.found.append((tag, [name for name, _ in attrs if name.lower().startswith("on")]))
    page = Page()
    page.feed((tmp_path / "d.html").read_text())
    assert "script" not in {tag for tag, _ in page.found} and not [a for _, a in page.found if a]
    assert "\x00" not in (tmp_path / "d.dot").read_text()


# -- damaged files of other tools (no seal): every command answers 0 or 2, never an internal error -----------------
def unsealed_models():
    """A model with a loop and one with initializers and a symbolic batch, as another tool would
    save them (no seal: damage reaches the parser and every command's own reading)."""
    import gcompile.functions as F

    def running_sum(x):
        def body(c, xi):
            c = F.tanh(c + xi)
            return c, c * 2.0
        return F.sum(gcompile.scan(body, x[0], x)[1])
    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
    return {"scan": (gcompile.compile(running_sum, gcompile.spec((4, 3)), provider="cpu"), (4, 3)),
            "dense": (gcompile.compile(lambda x: F.tanh(x @ w) + F.sum(x), gcompile.spec(("batch", 3)),
                                       provider="cpu"), (2, 3))}


@pytest.mark.parametrize("name", ["scan", "dense"])
def test_damaged_files_of_other_tools_are_exit_0_or_2_for_every_command(tmp_path, name):
    compiled, shape = unsealed_models()[name]
    data = compiled.model_for("portable").SerializeToString()
    np.save(tmp_path / "x.npy", np.ones(shape, np.float32))
    commands = {"inspect": [], "run": ["-i", f"x={tmp_path / 'x.npy'}"], "viz": ["-o", tmp_path / "d.html"]}
    internal = []
    for offset in range(0, len(data), 11):
        for what, copy in ((f"bit flipped at {offset}", flip(data, offset)), (f"cut at {offset}", data[:offset])):
            (tmp_path / "m.onnx").write_bytes(copy)
            for command, args in commands.items():
                result = invoke(command, tmp_path / "m.onnx", *args)
                if result.exit_code not in (0, 2):
                    internal.append((what, command, result.output[-200:]))
    assert internal == []


def flip(data: bytes, offset: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 1 << (offset * 5 % 8)
    return bytes(out)


def test_an_initializer_of_an_unknown_element_type_is_drawn():
    """viz exited 1 (KeyError) on an initializer whose data_type no onnx knows (a damaged file)."""
    from gcompile.artifacts.viz import tensor_types
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])]))
    model.graph.initializer[0].data_type = 71
    assert tensor_types(model)["w"] == "type 71(2,)"
