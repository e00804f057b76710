"""Damaged and hostile models of other tools (no seal) end in a loaded model whose numbers are
ONNX Runtime's for the same file, or a GcompileError naming the file: gc.load_onnx, tracing, a
gradient, lowering and running never raise anything else, never hang and never allocate what a
file declares; every command answers 0 or 2. The mutations are those of model_mutations.py,
seeded; `python -m tests.importer.model_mutations 2000` runs many more by hand."""
import collections

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from gcompile.cli import main

from .helpers import address_space
from .model_mutations import corpus, flip, has_loop, mutants, outcome

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
