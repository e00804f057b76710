"""Damaged and hostile models of other tools (no seal) end in a loaded model whose numbers are
ONNX Runtime's for the same file, or a GcompileError naming the file: gc.load_onnx, tracing, a
gradient, lowering and running never raise anything else, never hang and never allocate what a
file declares; every command answers 0 or 2. The same models saved by each of gcompile's writers
carry a seal, and any damage to their bytes is refused by every loader. The mutations are those
of model_mutations.py, seeded; `python -m tests.importer.model_mutations 2000` runs many more by
hand."""
import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import gcompile as gc
import gcompile.functions as F
from gcompile.cli import main
from gcompile.errors import GcompileError
from gcompile.runtime import modelfile

from .helpers import address_space
from .model_mutations import DATA, corpus, damaged_bytes, flip, has_loop, mutants, outcome

PER_MODEL = 12          # seeded mutants per model of the corpus
SECONDS = 20            # for one case: load, trace, differentiate and lower a damaged small model


@pytest.fixture(scope="module")
def models():
    return corpus()


def _scan_attribute_flips(data: bytes):
    """Every single-bit flip of the scan model's bytes that spell its Scan node's attribute names,
    and of the byte before each (the name's length): the damage of the first report (a flipped
    byte in 'body' left the Scan without its body: 'gcompile grad' exit 1)."""
    for name in (b"body", b"num_scan_inputs"):
        at = data.find(b"\x0a" + bytes([len(name)]) + name)      # AttributeProto.name: field 1, length
        assert at >= 0, name
        for offset in range(at + 1, at + 2 + len(name)):
            for bit in range(8):
                yield f"scan: bit {bit} of byte {offset} flipped", flip(data, offset, bit)


def test_damaged_models_load_or_are_refused(models, tmp_path):
    rng = np.random.default_rng(43)
    cases = [case for name, data in models.items() for case in mutants(name, data, rng, PER_MODEL)]
    cases += list(_scan_attribute_flips(models["scan"]))
    seen: collections.Counter = collections.Counter()
    bugs = []
    with address_space(2 << 30):
        for what, variant in cases:
            status, detail = outcome(variant, str(tmp_path), SECONDS)
            seen[status] += 1
            if status == "bug":
                bugs.append(f"{what}: {detail}")
    assert not bugs, "\n".join(bugs)
    assert seen["checked"] and seen["refused"], seen


def test_every_command_answers_0_or_2_on_damaged_models(tmp_path, models):
    """inspect, run, viz and grad on a few mutants of each model (inputs fed as the undamaged model
    declares them; a damaged model may then refuse them, with exit 2)."""
    from gcompile.runtime.modelfile import random_feeds
    rng = np.random.default_rng(44)
    internal = []
    for name, data in models.items():
        model = onnx.load_from_string(data)
        feeds = []
        for input_name, value in random_feeds(model).items():
            np.save(tmp_path / f"{len(feeds)}.npy", value)
            feeds += ["-i", f"{input_name}={tmp_path / f'{len(feeds) // 2}.npy'}"]
        first = model.graph.input[0].name
        commands = {"inspect": [], "run": feeds, "viz": ["-o", tmp_path / "d.html"],
                    "grad": ["--wrt", first, "--of", model.graph.output[0].name, "-o", tmp_path / "g.onnx"]}
        variants = list(mutants(name, data, rng, 2))
        if name == "scan":
            variants += [v for v in _scan_attribute_flips(data) if v[0].startswith("scan: bit 0 ")]
        for what, variant in variants:
            (tmp_path / "m.onnx").write_bytes(variant)
            for command, args in commands.items():
                if command == "run" and has_loop(variant):     # a damaged condition may loop for good
                    continue
                result = CliRunner().invoke(main, [command, str(tmp_path / "m.onnx"), *map(str, args)])
                if result.exit_code not in (0, 2):
                    internal.append((what, command, result.exit_code, result.output[-300:]))
    assert internal == []


SEALED_PER_FILE = 6     # seeded byte damages per sealed file (each tried by every loader of the file)


def _opened(path):
    with modelfile.opened(path):     # what Trainer(path) and every command read a file with
        pass


def _sealed_files(models, folder: Path) -> dict[str, tuple[Path, dict]]:
    """name -> (a file one of gcompile's writers saved, the loaders a user reads it with): every
    model of the corpus through modelfile.save (the writer of cf.save and gcompile grad), a
    compiled function's cf.save with its weights as external data, a training step's step.save,
    and a gc.from_torch module's save_onnx."""
    plain = {"gc.load_onnx": gc.load_onnx, "gc.load_onnx(bytes)": lambda p: gc.load_onnx(p.read_bytes()),
             "modelfile.opened": _opened}
    files = {}
    for name, data in models.items():
        path = folder / f"{name.replace('/', '_')}.sealed.onnx"
        modelfile.save(onnx.load_from_string(data), path)
        files[name] = (path, plain)
    w = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)
    gc.compile(lambda x: F.tanh(x @ w), gc.spec(("batch", 6)), provider="cpu").save(
        folder / "external.onnx", external_data_threshold=0)
    files["cf.save, external data"] = (folder / "external.onnx", plain)
    params = {"w": np.full((3, 2), 0.5, np.float32), "b": np.zeros(2, np.float32)}
    step = gc.export_train_step(lambda p, x, y: F.mean((x @ p["w"] + p["b"] - y) ** 2), params, gc.optim.Adam(0.01),
                                gc.spec(("batch", 3)), gc.spec(("batch", 2)), provider="cpu")
    step.save(folder / "step.onnx")
    files["step.save"] = (folder / "step.onnx", {**plain, "Trainer(path)": lambda p: gc.runtime.Trainer(p, params)})
    gc.from_torch(Path(DATA) / "bridge_cnn.onnx").save_onnx(folder / "torch.onnx")
    files["TorchModule.save_onnx"] = (folder / "torch.onnx", {**plain, "gc.from_torch": gc.from_torch})
    return files


def test_damaged_copies_of_sealed_files_are_refused_by_every_loader(models, tmp_path):
    """Where a file of another tool may load a damage and compute ONNX Runtime's numbers for it, a
    file gcompile wrote is sealed with the sha256 of its bytes: every flip, cut or replaced byte
    (of the .onnx or of its external data) is refused as damaged, whoever wrote it and whichever
    loader reads it."""
    rng = np.random.default_rng(45)
    missed = []
    for name, (path, loaders) in _sealed_files(models, tmp_path / "sealed").items():
        targets = [path] + sorted(path.parent.glob(f"{path.name}.*.data"))
        for target in targets:
            original = target.read_bytes()
            for what, damaged in damaged_bytes(f"{name} ({target.name})", original, rng, SEALED_PER_FILE):
                target.write_bytes(damaged)
                for loader, load in loaders.items():
                    try:
                        load(path)
                    except GcompileError as err:
                        if "damaged" not in str(err):
                            missed.append(f"{what}, {loader}: {str(err)[:200]}")
                    except Exception as err:   # noqa: BLE001 - any other failure is a miss too
                        missed.append(f"{what}, {loader}: {type(err).__name__}: {str(err)[:200]}")
                    else:
                        missed.append(f"{what}, {loader}: loaded")
            target.write_bytes(original)
    assert missed == [], "\n".join(missed)
