"""A model file gcompile writes protects itself: `cf.save`, `step.save`, `gcompile build` and
`gcompile grad` seal it with the sha256 of its bytes (and of its external data), and every loader
(gc.load_onnx, Trainer(path), the CLI) refuses a damaged copy with an error naming the file.

The corpus is generic over the file: one bit flipped at offsets spread over the whole file (and
over its external data file), and the file cut at those offsets; every copy must be refused.
Files other tools wrote carry no seal and load as before."""
import hashlib
import os
import shutil
import textwrap

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import gcompile as gc
import gcompile.functions as F
from gcompile.cli import main
from gcompile.runtime import modelfile

W = np.linspace(-1, 1, 64 * 8, dtype=np.float32).reshape(64, 8)
PARAMS = {"w": np.full((3, 2), 0.5, np.float32), "b": np.zeros(2, np.float32)}
MAX_CASES = 700   # per kind (flip, cut) and file: every offset of a small file, evenly spread over a larger one


def offsets(size: int) -> list[int]:
    """Offsets over the whole of a file of `size` bytes: all of them, or MAX_CASES evenly spread
    (the first and last bytes always among them)."""
    return sorted({round(i * (size - 1) / (MAX_CASES - 1)) for i in range(MAX_CASES)}) if size > MAX_CASES \
        else list(range(size))


def flipped(data: bytes, offset: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 1 << (offset * 5 % 8)   # a different bit from one offset to the next
    return bytes(out)


def corpus(data: bytes):
    """(what, damaged bytes) for one bit flipped at each offset, and the file cut at each offset."""
    for offset in offsets(len(data)):
        yield f"bit {offset * 5 % 8} of byte {offset} flipped", flipped(data, offset)
    for offset in offsets(len(data)):
        if offset:
            yield f"cut to {offset} bytes", data[:offset]


def loss(p, x, y):
    return F.mean((x @ p["w"] + p["b"] - y) ** 2)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One file of each writer: a compiled function, a training step, one with external data."""
    folder = tmp_path_factory.mktemp("saved")
    gc.compile(lambda x: F.tanh(x @ W) * 2.0, gc.spec(("batch", 64)), provider="cpu").save(folder / "predict.onnx")
    gc.compile(lambda x: x @ W, gc.spec((2, 64)), provider="cpu").save(folder / "big.onnx", external_data_threshold=0)
    step = gc.export_train_step(loss, PARAMS, gc.optim.Adam(0.01), gc.spec(("batch", 3)), gc.spec(("batch", 2)),
                                provider="cpu")
    step.save(folder / "step.onnx")
    return folder


def damaged(err: BaseException, path) -> bool:
    """The clear error: a GcompileError naming the file and saying it is damaged."""
    text = str(err)
    return isinstance(err, gc.GcompileError) and text.startswith(str(path)) and "damaged" in text


def refused_copies(original, target, load, named=None) -> list[str]:
    """The corpus of `original`, each written to `target`, that `load(target)` did NOT refuse with
    the clear error naming `named` (default: `target`): what loaded, or failed some other way."""
    data = original.read_bytes()
    missed = []
    for what, copy in corpus(data):
        target.write_bytes(copy)
        try:
            load(target)
        except Exception as err:   # noqa: BLE001 - any other failure is a miss too
            if not damaged(err, named or target):
                missed.append(f"{what}: {type(err).__name__}: {str(err)[:200]}")
        else:
            missed.append(f"{what}: loaded")
    return missed


def opened(path):
    with modelfile.opened(path):   # what Trainer(path) and every command read a file with
        pass


@pytest.mark.parametrize("load", [gc.load_onnx, opened], ids=["load_onnx", "cli-and-trainer-reader"])
def test_every_flip_and_cut_of_a_saved_model_is_refused(saved, tmp_path, load):
    assert refused_copies(saved / "predict.onnx", tmp_path / "copy.onnx", load) == []


def test_every_flip_and_cut_of_a_saved_models_bytes_is_refused(saved, tmp_path):
    """gc.load_onnx(bytes) checks the seal the bytes of a saved file carry (it parsed them unchecked)."""
    assert refused_copies(saved / "predict.onnx", tmp_path / "copy.onnx", lambda p: gc.load_onnx(p.read_bytes()),
                          "the given bytes") == []


@pytest.mark.parametrize("role", ["gradient", "update"])
def test_every_flip_and_cut_of_a_saved_split_step_is_refused(tmp_path, role):
    """SplitStep.save wrote both models unsealed: damaged copies loaded and computed other numbers."""
    from gcompile.distributed import SplitStep, export_split_step
    split = export_split_step(loss, PARAMS, gc.optim.Adam(0.01), gc.spec(("batch", 3)), gc.spec(("batch", 2)),
                              provider="cpu")
    split.save(tmp_path / "saved")
    shutil.copytree(tmp_path / "saved", tmp_path / "copy")
    target = tmp_path / "copy" / f"{role}.onnx"
    assert refused_copies(tmp_path / "saved" / f"{role}.onnx", target,
                          lambda _: SplitStep.load(tmp_path / "copy")) == []


def test_every_flip_and_cut_of_a_saved_training_step_is_refused_by_the_trainer(saved, tmp_path):
    assert refused_copies(saved / "step.onnx", tmp_path / "copy.onnx", lambda p: gc.runtime.Trainer(p, PARAMS)) == []


@pytest.mark.parametrize("load", [gc.load_onnx, opened], ids=["load_onnx", "cli-and-trainer-reader"])
def test_every_flip_and_cut_of_external_data_is_refused(saved, tmp_path, load):
    folder = tmp_path / "copy"
    shutil.copytree(saved, folder)
    location, = [n for n in os.listdir(folder) if n.startswith("big.onnx.") and n.endswith(".data")]
    model = folder / "big.onnx"
    assert refused_copies(saved / location, folder / location, lambda _: load(model), model) == []


def test_the_cli_refuses_a_damaged_file_with_exit_2_naming_it(saved, tmp_path):
    data = (saved / "predict.onnx").read_bytes()
    np.save(tmp_path / "x.npy", np.ones((2, 64), np.float32))
    for offset in offsets(len(data))[::25]:
        (tmp_path / "m.onnx").write_bytes(flipped(data, offset))
        for args in (["inspect"], ["run", "-i", f"x={tmp_path / 'x.npy'}"], ["viz", "-o", str(tmp_path / "m.svg")]):
            result = CliRunner().invoke(main, [args[0], str(tmp_path / "m.onnx"), *args[1:]])
            assert result.exit_code == 2 and "damaged" in result.stderr and str(tmp_path / "m.onnx") in result.stderr, \
                (offset, args, result.output)


def test_sealed_files_load_and_compute_what_was_saved(saved):
    x = np.linspace(0, 1, 2 * 64, dtype=np.float32).reshape(2, 64)
    f = gc.load_onnx(saved / "predict.onnx")
    np.testing.assert_allclose(gc.compile(f, x, provider="cpu")(x), np.tanh(x @ W) * 2.0, rtol=1e-5)
    big = gc.compile(gc.load_onnx(saved / "big.onnx"), x, provider="cpu")
    np.testing.assert_allclose(big(x), x @ W, rtol=1e-5)
    trainer = gc.runtime.Trainer(saved / "step.onnx", PARAMS)
    assert np.isfinite(trainer.step(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32)))


def test_saving_twice_gives_the_same_bytes(tmp_path):
    for name in ("a.onnx", "b.onnx"):
        gc.compile(lambda x: x @ W, gc.spec((2, 64)), provider="cpu").save(tmp_path / name)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_files_of_other_tools_and_resaved_files_load_unchecked(saved, tmp_path):
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    other = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.save(other, tmp_path / "other.onnx")
    gc.load_onnx(tmp_path / "other.onnx")
    resaved = onnx.load(saved / "predict.onnx")   # a tool reading and writing the model moves the seal entry
    resaved.doc_string = "edited by another tool"
    onnx.save(resaved, tmp_path / "resaved.onnx")
    gc.load_onnx(tmp_path / "resaved.onnx")
    described = CliRunner().invoke(main, ["inspect", str(tmp_path / "resaved.onnx")])
    assert described.exit_code == 0 and "integrity: no gcompile seal" in described.stdout
    assert "integrity: sealed by gcompile" in CliRunner().invoke(main, ["inspect", str(saved / "predict.onnx")]).stdout


def test_build_and_grad_outputs_are_sealed_and_keep_protecting_themselves_when_copied(tmp_path):
    (tmp_path / "model.py").write_text(textwrap.dedent("""
        import gcompile as gc
        import gcompile.functions as F

        @gc.export(x=gc.spec((2, 3)))
        def predict(x):
            return F.tanh(x)
    """))
    assert CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(tmp_path / "out")]).exit_code == 0
    grad = CliRunner().invoke(main, ["grad", str(tmp_path / "out" / "predict.onnx"), "--wrt", "x",
                                     "-o", str(tmp_path / "grad.onnx")])
    assert grad.exit_code == 0, grad.output
    for path in (tmp_path / "out" / "predict.onnx", tmp_path / "grad.onnx"):
        copy = tmp_path / "loose" / path.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(flipped(path.read_bytes(), len(path.read_bytes()) // 2))   # no manifest beside it
        with pytest.raises(gc.GcompileError, match="damaged"):
            gc.load_onnx(copy)


def test_builds_stay_byte_identical(tmp_path):
    (tmp_path / "model.py").write_text("import gcompile as gc\n\n@gc.export(x=gc.spec((2,)))\ndef f(x):\n"
                                       "    return x * 3\n")
    digests = []
    for out in ("a", "b"):
        assert CliRunner().invoke(main, ["build", str(tmp_path / "model.py"), "-o", str(tmp_path / out)]).exit_code == 0
        digests.append({n: hashlib.sha256((tmp_path / out / n).read_bytes()).hexdigest()
                        for n in sorted(os.listdir(tmp_path / out))})
    assert digests[0] == digests[1]
