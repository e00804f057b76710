"""The error catalogue: every kind of bad input, at trace, run, build time and in the CLI,
gets a gcompile error whose message names the cause and where it is (source line, input
or output name, file), and the CLI prints it as one paragraph with exit code 2 and no
traceback. Each case returns (message or CLI result, fragments the message must hold).
"""
import os

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import gcompile as gc
import gcompile.artifacts.build
import gcompile.functions as F
from gcompile.cli import main
from gcompile.lowering.versions import runtime_limits

X23 = np.ones((2, 3), np.float32)
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def raised(call, kind=gc.GcompileError) -> str:
    with pytest.raises(kind) as err:
        call()
    return str(err.value)


def line_of(fn, offset=1) -> str:
    """'test_error_catalogue.py:N' for the line `offset` lines below `fn`'s def."""
    return f"test_error_catalogue.py:{fn.__code__.co_firstlineno + offset}"


pytestmark = pytest.mark.usefixtures("own_folder")   # (conftest.py: builds without -o write ./build)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def write(tmp_path, text, name="model.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def tiny_onnx(tmp_path, opset=None, op=("Relu", ""), name="tiny.onnx"):
    """A one-node float model; `op` is (op type, domain)."""
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "xy"]
    node = helper.make_node(op[0], ["x"], ["y"], domain=op[1])
    opsets = [helper.make_opsetid("", opset or runtime_limits()[1])]
    opsets += [helper.make_opsetid(op[1], 1)] if op[1] else []
    model = helper.make_model(helper.make_graph([node], "tiny", io[:1], io[1:]), opset_imports=opsets)
    model.ir_version = runtime_limits()[0]
    path = tmp_path / name
    onnx.save(model, path)
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    return path


def saved(tmp_path, threshold=2 ** 31):
    """A gcompile artifact with one 16 KiB weight, saved to tmp_path/m.onnx."""
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    cf = gc.compile(lambda x: F.tanh(x @ w), gc.spec(("batch", 64)))
    cf.save(tmp_path / "m.onnx", external_data_threshold=threshold)
    return tmp_path / "m.onnx"


# -- trace time ----------------------------------------------------------------------------------
@case
def trace_shape_mismatch(tmp_path):
    def f(a, b):
        return a + b
    return raised(lambda: gc.compile(f, X23, np.ones(4, np.float32)), gc.ShapeError), \
        ["add", "(2, 3)", "(4,)", line_of(f)]


@case
def trace_symbolic_matmul_mismatch(tmp_path):
    def f(a, b):
        return a @ b
    return raised(lambda: gc.compile(f, gc.spec(("batch", 3)), gc.spec((4, 2))), gc.ShapeError), \
        ["matmul", "(batch, 3)", "(4, 2)", line_of(f)]


@case
def trace_two_symbols_where_one_size_is_needed(tmp_path):
    def f(a, b):
        return F.concat([a, b], axis=1)
    return raised(lambda: gc.compile(f, gc.spec(("batch", 3)), gc.spec(("n", 3))), gc.ShapeError), \
        ["concat", "(batch, 3)", "(n, 3)", line_of(f)]


@case
def trace_dtype_mismatch(tmp_path):
    def f(logits, labels):
        return F.softmax_cross_entropy(logits, labels)
    return raised(lambda: gc.compile(f, X23, np.ones(2, np.float32)), gc.ShapeError), \
        ["labels must be integer", "float32", line_of(f)]


@case
def trace_unsupported_numpy_function(tmp_path):
    def f(x):
        return np.linalg.eigvals(x)
    return raised(lambda: gc.compile(f, X23), gc.TraceError), \
        ["numpy.linalg.eigvals is not supported", line_of(f)]


@case
def trace_unsupported_op_in_an_imported_onnx_model(tmp_path):
    imported = gc.load_onnx(str(tiny_onnx(tmp_path, op=("Frobnicate", ""))))
    return raised(lambda: gc.compile(imported, gc.spec((2,))), gc.UnsupportedError), \
        ["Frobnicate", "not supported"]


@case
def trace_gradient_of_an_integer_tensor(tmp_path):
    def f(x, i):
        return gc.grad(F.sum(x * i), [i])
    return raised(lambda: gc.compile(f, np.ones(3, np.float32), np.ones(3, np.int64))), \
        ["gradient with respect to", "int64", "not floating point", line_of(f)]


@case
def trace_data_dependent_control_flow(tmp_path):
    def f(x):
        return x if x.sum() > 0 else -x
    return raised(lambda: gc.compile(f, X23), gc.TraceError), ["data-dependent control flow", line_of(f)]


@case
def trace_data_dependent_while_loop(tmp_path):
    """A while on a Tensor was pointed at F.where only."""
    def f(x):
        while x.sum() > 0:
            x = x - 1
        return x
    return raised(lambda: gc.compile(f, X23), gc.TraceError), \
        ["data-dependent control flow", line_of(f), "F.where(cond, a, b)", "gc.while_loop(cond_fn, body_fn, init)"]


@case
def trace_gradient_with_respect_to_a_closed_over_array(tmp_path):
    """The message printed the whole array over 13 lines, and did not say how to differentiate it."""
    w = np.ones((784, 10), np.float32)

    def f(x):
        return gc.grad(F.sum(x @ w), [w])
    message = raised(lambda: gc.compile(f, gc.spec(("batch", 784))))
    assert "\n" not in message and "1." not in message, message
    return message, ["a numpy array float32(784, 10)", line_of(f), "make it an argument of the traced function"]


@case
def trace_gradient_outside_a_traced_function(tmp_path):
    """It failed with a bare TypeError ('float' object is not iterable) from the engine."""
    return raised(lambda: gc.grad(1.0, [2.0]), gc.TraceError), \
        ["inside the function given to gc.compile", "gc.grad(fn) is the gradient function"]


@case
def trace_bad_reshape(tmp_path):
    def f(x):
        return F.reshape(x, (5,))
    return raised(lambda: gc.compile(f, X23), gc.ShapeError), ["reshape", "(2, 3)", "(5,)", line_of(f)]


@case
def trace_bad_spec(tmp_path):
    return raised(lambda: gc.spec((-1, 3))), ["bad spec", "dim -1", "(-1, 3)"]


@case
def trace_vmap_batch_sizes_differ(tmp_path):
    def f(a, b):
        return gc.vmap(lambda a, b: a + b)(a, b)
    return raised(lambda: gc.compile(f, np.ones((4, 2)), np.ones((3, 2))), gc.ShapeError), \
        ["vmap", "batch sizes 4 and 3", line_of(f)]


@case
def trace_has_aux_without_a_pair(tmp_path):
    return raised(lambda: gc.compile(lambda w: gc.grad(F.sum, has_aux=True)(w), X23)), \
        ["has_aux=True", "needs a function returning a pair (loss, aux)", "Tensor"]


@case
def trace_jit_static_argument_unhashable(tmp_path):
    f = gc.jit(lambda x, n: x * len(n), static_argnums=1)
    return raised(lambda: f(X23, [1, 2])), ["argument 'n' is static", "must be hashable", "list"]


@case
def trace_train_step_unknown_hyperparameter(tmp_path):
    params = {"w": np.ones((3, 2), np.float32)}
    return raised(lambda: gc.export_train_step(lambda p, x: F.sum(x @ p["w"]), params, gc.optim.Adam(), X23,
                                               hyperparams={"temperature": 1.0})), \
        ["'temperature'", "neither a hyper-parameter of Adam", "lr, eps, weight_decay", "keyword argument"]


@case
def run_pytree_argument_of_another_structure(tmp_path):
    cf = gc.compile(lambda p, x: x @ p["w"] + p["b"], {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)},
                    X23, provider="cpu")
    return raised(lambda: cf({"w": np.ones((3, 2), np.float32)}, X23), gc.InputError), \
        ["<lambda>", "argument p", "missing key(s) ['b']"]


@case
def run_state_dict_of_another_shape(tmp_path):
    layer = gc.nn.Linear(3, 2)
    return raised(lambda: layer.load_state_dict({"weight": np.ones((3, 2)), "bias": np.ones(2)}), gc.InputError), \
        ["load_state_dict", "'weight'", "(2, 3)", "got (3, 2)"]


# -- run time ------------------------------------------------------------------------------------
def two_inputs(**options):
    return gc.compile(lambda x, w: x @ w, gc.spec(("batch", 3)), gc.spec((3, "k")), **options)


@case
def run_missing_input(tmp_path):
    return raised(lambda: two_inputs()(X23), gc.InputError), ["takes 2 inputs", "x, w", "got 1"]


@case
def run_wrong_shape(tmp_path):
    return raised(lambda: two_inputs()(np.ones((2, 4), np.float32), X23.T), gc.InputError), \
        ["input 'x'", "expected shape (batch, 3)", "got (2, 4)"]


@case
def run_wrong_dtype(tmp_path):
    return raised(lambda: two_inputs()(X23, X23.T.astype(np.float64)), gc.InputError), \
        ["input 'w'", "float32", "float64"]


@case
def run_symbol_bound_to_two_sizes(tmp_path):
    cf = gc.compile(lambda a, b: a * b, gc.spec(("batch", 3)), gc.spec(("batch", 3)))
    return raised(lambda: cf(X23, np.ones((5, 3), np.float32)), gc.InputError), \
        ["'batch'", "2 in input 'a'", "5 in input 'b'"]


@case
def run_nan_input_with_check_numerics(tmp_path):
    x = X23.copy()
    x[1, 2] = np.nan
    assert np.isnan(two_inputs()(x, X23.T)).any()          # unchecked by default: NaN flows through
    return raised(lambda: two_inputs(check_numerics=True)(x, X23.T), gc.InputError), \
        ["input 'x'", "1 NaN", "(1, 2)", "check_numerics"]


@case
def run_inf_output_with_check_numerics(tmp_path):
    cf = gc.compile(lambda x: F.log(x), gc.spec((2, 3)), check_numerics=True)
    x = X23.copy()
    x[0, 1] = 0.0
    return raised(lambda: cf(x)), ["output 'output'", "1 Inf", "(0, 1)", "every input is finite"]


# -- build time (the Python API of `gcompile build`) ---------------------------------------------
def build(tmp_path, model):
    return lambda: gcompile.artifacts.build.build(model, tmp_path / "out")


@case
def build_model_file_missing(tmp_path):
    return raised(build(tmp_path, tmp_path / "absent.py")), ["absent.py", "not found"]


@case
def build_model_file_not_python(tmp_path):
    path = tmp_path / "model.txt"
    path.write_text("not python")
    return raised(build(tmp_path, path)), ["model.txt", "give a .py file"]


@case
def build_syntax_error(tmp_path):
    path = write(tmp_path, "import gcompile as gc\nx = [1,\ny = 2\n")
    return raised(build(tmp_path, path)), ["model.py:2", "syntax error"]


@case
def build_binary_model_file(tmp_path):
    """Python names no line for a NUL byte: the message said 'model.py:None'."""
    path = tmp_path / "model.py"
    path.write_bytes(b"import gcompile as gc\n\x7fELF\x02\x01\x00\xff\n")
    message = raised(build(tmp_path, path))
    assert "None" not in message, message
    return message, ["model.py:2", "syntax error", "null bytes", "a binary file"]


@case
def build_syntax_error_of_code_the_model_evaluates(tmp_path):
    """A SyntaxError from eval() in the model is raised at the model's line, not '<string>:1'."""
    path = write(tmp_path, "import gcompile as gc\n\nrule = eval('1 +')\n")
    message = raised(build(tmp_path, path))
    assert "<string>:" not in message, message
    return message, ["importing", "model.py:3", "SyntaxError"]


@case
def build_infinite_recursion_in_the_model(tmp_path):
    """The innermost frame outside gcompile was a dataclass's generated __init__: '<string>:3'."""
    path = write(tmp_path, "import gcompile as gc\n\ndef g(x):\n    return g(x + 1)\n\n"
                           "@gc.export(x=gc.spec((2,)))\ndef h(x):\n    return g(x)\n")
    message = raised(build(tmp_path, path))
    assert "<string>" not in message, message
    return message, ["cannot build 'h'", "RecursionError", "model.py:4)"]


@case
def build_model_raises(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n\n\nopen('no-such-weights.npy')\n")
    return raised(build(tmp_path, path)), ["importing", "model.py:4", "FileNotFoundError", "no-such-weights.npy"]


@case
def build_no_exported_function(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n")
    return raised(build(tmp_path, path)), ["model.py has no exported function", "@gc.export"]


@case
def build_spec_for_a_missing_parameter(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n\n@gc.export(y=gc.spec((3,)))\ndef f(x):\n    return x\n")
    return raised(build(tmp_path, path)), ["model.py:3", "no positional parameter named 'y'", "parameters: x"]


@case
def build_shape_error_in_an_exported_function(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n\n@gc.export(x=gc.spec((3,)), y=gc.spec((2,)))\n"
                           "def pair(x, y):\n    return x * y\n")
    return raised(build(tmp_path, path)), ["cannot build 'pair'", "mul", "(3,)", "(2,)", "model.py:5"]


@case
def build_output_directory_cannot_be_written(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n@gc.export(x=gc.spec((3,)))\ndef f(x):\n    return x * 2\n")
    (tmp_path / "out").write_text("a file, not a folder")
    return raised(build(tmp_path, path)), ["cannot write the build", "out"]


# -- the command line ----------------------------------------------------------------------------
@case
def cli_run_corrupt_onnx(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(os.urandom(64))
    return invoke("run", path), ["garbage.onnx", "not a valid ONNX model"]


@case
def cli_run_truncated_onnx(tmp_path):
    data = saved(tmp_path).read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    return invoke("run", tmp_path / "cut.onnx"), ["cut.onnx", "is damaged", "truncated"]


@case
def cli_run_newer_opset_than_the_runtime(tmp_path):
    newest = runtime_limits()[1]
    path = tiny_onnx(tmp_path, opset=newest + 1)
    return invoke("run", path, "--input", f"x={tmp_path / 'x.npy'}"), \
        ["tiny.onnx", f"opset {newest + 1}", f"opset {newest} at most"]


@case
def cli_run_unsupported_custom_op(tmp_path):
    path = tiny_onnx(tmp_path, op=("Frobnicate", "example.custom"))
    return invoke("run", path, "--input", f"x={tmp_path / 'x.npy'}"), \
        ["onnxruntime cannot load", "tiny.onnx", "Frobnicate"]


@case
def cli_inspect_unknown_standard_op(tmp_path):
    path = tiny_onnx(tmp_path, op=("Frobnicate", ""))
    return invoke("inspect", path), ["tiny.onnx", "not a valid ONNX model", "Frobnicate"]


@case
def cli_run_external_data_missing(tmp_path):
    path = saved(tmp_path, threshold=0)
    data_file, = [n for n in os.listdir(tmp_path) if n.endswith(".data")]
    os.remove(tmp_path / data_file)
    return invoke("run", path), ["m.onnx", data_file, "not beside it"]


@case
def cli_run_input_not_npy(tmp_path):
    path = saved(tmp_path)
    (tmp_path / "x.npy").write_text("1, 2, 3")
    return invoke("run", path, "--input", f"x={tmp_path / 'x.npy'}"), ["--input x", "x.npy", "cannot read"]


@case
def cli_run_wrong_input_shape(tmp_path):
    path = saved(tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 63), np.float32))
    return invoke("run", path, "--input", f"x={tmp_path / 'x.npy'}"), \
        ["input 'x'", "expected float32(batch, 64)", "got float32(2, 63)"]


@case
def cli_run_output_folder_cannot_be_written(tmp_path):
    path = saved(tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 64), np.float32))
    (tmp_path / "res").write_text("a file")
    return invoke("run", path, "--input", f"x={tmp_path / 'x.npy'}", "--out", tmp_path / "res" / "sub"), \
        ["cannot write output.npy", "res"]


@case
def cli_run_output_names_a_file_outside_the_folder(tmp_path):
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "../escape")]
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["../escape"])], "g", io[:1], io[1:]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    result = invoke("run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "res")
    assert result.exit_code == 0 and os.listdir(tmp_path / "res") == ["_.._escape.npy"], result.output
    return result.output, ["_.._escape.npy  (output '../escape')"]


@case
def cli_run_model_fails_in_onnxruntime(tmp_path):
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
          helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
          helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]
    model = helper.make_model(helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"], name="pick")], "g",
                                                io[:2], io[2:]), opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    np.save(tmp_path / "i.npy", np.array([3]))
    return invoke("run", tmp_path / "m.onnx", "-i", f"x={tmp_path / 'x.npy'}", "-i", f"i={tmp_path / 'i.npy'}"), \
        ["m.onnx", "node 'pick' (Gather)", "out of data bounds"]


@case
def cli_inspect_file_its_manifest_refuses(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n@gc.export(x=gc.spec((2,)))\ndef f(x):\n    return x * 2\n")
    assert invoke("build", path, "-o", tmp_path / "out").exit_code == 0
    artifact = tmp_path / "out" / "f.onnx"
    gc.compile(lambda x: x * 3, gc.spec((2,)), provider="cpu").save(artifact)   # another model, whole and sealed
    return invoke("inspect", artifact), ["f.onnx", "sha256", "manifest.json", "the manifest refused it"]


@case
def cli_build_model_calls_sys_exit(tmp_path):
    path = write(tmp_path, "import sys\nimport gcompile as gc\n@gc.export(x=gc.spec((2,)))\ndef f(x):\n"
                           "    sys.exit(1)\n")
    return invoke("build", path, "-o", tmp_path / "out"), ["cannot build 'f'", "SystemExit: 1", "model.py:5"]


@case
def cli_build_check_inputs_too_large(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n@gc.export(x=gc.spec((100000, 100000)))\ndef f(x):\n"
                           "    return x * 2\n")
    return invoke("build", path, "-o", tmp_path / "out", "--check", "--provider", "cpu"), \
        ["--check of 'f'", "input 'x'", "float32(100000, 100000)", "37.3 GiB"]


@case
def run_trainer_checkpoint_of_another_shape(tmp_path):
    step = gc.export_train_step(lambda p, x: F.sum(p["w"] * x), {"w": np.ones(3, np.float32)}, gc.optim.SGD(0.1),
                                gc.spec((3,)), provider="cpu")
    np.savez(tmp_path / "ckpt.npz", **{"params/w": np.ones(4, np.float32), "step": np.array(0, np.int64)})
    return raised(lambda: gc.runtime.Trainer(step).load(tmp_path / "ckpt.npz"), gc.InputError), \
        ["ckpt.npz", "'params/w'", "expects float32(3,)", "got float32(4,)"]


@case
def cli_build_negative_external_data_threshold(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n")
    result = invoke("build", path, "--external-data-threshold", "-1")
    assert result.exit_code == 2 and "Traceback" not in result.output   # click's own usage error
    return result.output, ["--external-data-threshold", "-1"]


@case
def cli_viz_unknown_format(tmp_path):
    return invoke("viz", saved(tmp_path), "-o", tmp_path / "graph.png"), ["graph.png", ".svg, .html or .dot"]


@case
def cli_viz_model_with_a_trace_error(tmp_path):
    path = write(tmp_path, "import gcompile as gc\n@gc.export(x=gc.spec((3,)))\ndef f(x):\n    return x @ x.T @ x.no\n")
    return invoke("viz", path, "-o", tmp_path / "g.svg"), ["cannot build 'f'", "model.py:4", "AttributeError"]


def message_of(outcome) -> str:
    """The message of an API error, or of a CLI user error after checking its form."""
    if isinstance(outcome, str):
        return outcome
    assert outcome.exit_code == 2, outcome.output
    assert "Traceback" not in outcome.output
    text = outcome.stderr.strip()
    assert text.startswith("error: ") and "\n\n" not in text      # one paragraph
    return text


def test_catalogue_is_complete():
    stages = {fn.__name__.split("_")[0] for fn in CASES}
    assert len(CASES) >= 25 and stages == {"trace", "run", "build", "cli"}


@pytest.mark.parametrize("make", CASES, ids=lambda fn: fn.__name__)
def test_error_names_cause_and_where(make, tmp_path):
    outcome, fragments = make(tmp_path)
    message = message_of(outcome)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_inspect_warns_about_a_newer_opset_but_still_describes(tmp_path):
    newest = runtime_limits()[1]
    result = invoke("inspect", tiny_onnx(tmp_path, opset=newest + 1))
    assert result.exit_code == 0, result.output
    assert f"opset {newest + 1}" in result.stderr and f"opset {newest} at most" in result.stderr
    assert "Relu" in result.stdout


def test_failed_check_keeps_the_previous_good_build(tmp_path):
    good = "import gcompile as gc\nimport gcompile.functions as F\n@gc.export(x=gc.spec((4,)))\ndef f(x):\n" \
           "    return F.exp(x)\n"
    path = write(tmp_path, good)
    out = tmp_path / "out"
    assert invoke("build", path, "-o", out, "--external-data-threshold", "0").exit_code == 0
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    path.write_text(good.replace("F.exp(x)", "F.log(x * 0.0)"))     # builds, but --check sees -inf
    message = message_of(invoke("build", path, "-o", out, "--check", "--provider", "cpu"))
    assert "'f'" in message and "non-finite" in message
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before   # and no temporary files


def test_debug_adds_the_traceback_and_quiet_keeps_the_error(tmp_path):
    path = write(tmp_path, "import gcompile as gc\nraise RuntimeError('weights missing')\n")
    debug = invoke("build", path, "--debug")
    assert debug.exit_code == 2 and "Traceback" in debug.stderr and "weights missing" in debug.stderr
    quiet = invoke("build", path, "-q")
    assert quiet.exit_code == 2 and message_of(quiet).count("weights missing") == 1
