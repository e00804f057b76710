"""The portability cases: every artifact of the corpus and of examples/, built as `gcompile build`
builds it, with fixed inputs and the outputs Python's ONNX Runtime (CPU) computes from the same
file; and the comparison every other runtime's outputs go through.

A case is one artifact: its `.onnx` bytes (`lower_all` and `serialize`, the two steps of
`gcompile build` per artifact, for the default target, `portable`), the inputs of `gcompile build
--check` (seeded random values; a training step's initial parameters and optimizer state), and
the reference outputs. `write_cases` lays them out for runtimes in other processes (Node.js, a
browser): `cases.json` lists each case's model file, its inputs as raw little-endian `.bin`
files with dtype and shape, and its output names.

Outputs are compared with the model's declared output types (dtype, and shape with the inputs'
symbolic dims bound) and with the reference values: float32 rounding differs between runtimes
(summation order, fused kernels), so floats agree within `RTOL`·|expected| plus `ATOL` times the
output's largest magnitude (at least 1); integers and booleans exactly.
"""
from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np
import onnx

from gcompile.artifacts.build import lower_all
from gcompile.install_check import onnxruntime
from gcompile.lowering.serialize import serialize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "portability", "corpus.py")
DTYPES_CORPUS = os.path.join(ROOT, "tests", "portability", "dtypes_corpus.py")
EXAMPLES = os.path.join(ROOT, "examples")

RTOL, ATOL = 1e-4, 1e-5

# Every artifact, corpus first, then examples/ in file order (test_the_corpus_is_what_is_listed
# checks this against what is built, so a new example joins the matrix by being listed here).
CASES = ["gradient_penalty", "lstm_grad", "scan_rnn_hvp", "euler_flow", "cnn_bn_adam", "dropout_train",
         "transformer_grad", "conv_penalty", "imported_grad", "force_matching", "grouped_conv_grad",
         "depthwise_saliency", "scans_and_pools_grad", "sampling_and_spectra_grad", "spectral_grad",
         "cnn.predict", "cnn.loss_and_grads",
         "ctc_lstm.ctc_train_step", "finetune_onnx.finetune", "hvp.hvp", "mlp.predict", "mlp.loss_and_grads",
         "neural_ode.loss_and_grads", "nn_cnn.predict", "nn_cnn.train_step", "pinn.pinn_loss_and_grads",
         "wgan_gp.wgan_gp_penalty"]

# Outputs that differ between runtimes by design, each with the absolute bound it is held to.
# cnn_bn_adam's conv1 bias feeds batch norm, which subtracts the batch mean: its gradient is zero
# in exact arithmetic and rounding noise in float32, and Adam's first step, lr·m/(√v + eps), turns
# that noise into a step of up to lr (1e-2) in either direction; its moments are the noise itself.
LOOSE = {"cnn_bn_adam": {"conv1.bias.new": 2e-2, "conv1.bias.m": 1e-5, "conv1.bias.v": 1e-9}}


@dataclass
class Case:
    """One artifact: `name` is the function's for the corpus, "<example>.<function>" for examples/."""
    name: str
    source: str                        # the model file it was built from, relative to the repository
    data: bytes                        # the .onnx file's bytes
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]    # Python ONNX Runtime on the CPU, from `data`
    declared: dict[str, tuple[np.dtype, tuple]] = field(default_factory=dict)   # output -> dtype, shape
    loose: dict[str, float] = field(default_factory=dict)

    @property
    def model(self) -> onnx.ModelProto:
        return onnx.load_from_string(self.data)

    @property
    def output_names(self) -> list[str]:
        return list(self.expected)


def sources() -> list[str]:
    """The model files of the corpus: tests/portability/corpus.py, then every program in examples/."""
    return [CORPUS, *sorted(glob.glob(os.path.join(EXAMPLES, "*.py")))]


def build_cases(paths: list[str] | None = None) -> list[Case]:
    """Every artifact of every source (or of `paths`), built for the portable target, with its inputs and
    reference outputs."""
    ort = onnxruntime()
    cases = []
    for path in paths or sources():
        stem = os.path.splitext(os.path.basename(path))[0]
        _, built = lower_all(path)
        for info, model, _float64_ops, _times in built:
            name = info.name if path in (CORPUS, DTYPES_CORPUS) else f"{stem}.{info.name}"
            data = serialize(model, f"{info.name}.onnx")[0]
            feeds = info.check_feeds(model)
            session = ort.InferenceSession(data, _quiet_options(ort), providers=["CPUExecutionProvider"])
            names = [o.name for o in session.get_outputs()]
            expected = dict(zip(names, session.run(names, feeds)))
            cases.append(Case(name, os.path.relpath(path, ROOT), data, feeds, expected,
                              declared_outputs(model, feeds), LOOSE.get(name, {})))
    return cases


def _quiet_options(ort):
    """Default session options (what a user of the file gets), without ONNX Runtime's warnings on stderr."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return options


def _elem_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def declared_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[np.dtype, tuple]]:
    """Each graph output's dtype and shape, its symbolic dims ("batch", "batch*3") evaluated at the
    sizes `feeds` give them; a dim that cannot be evaluated stays None."""
    sizes: dict[str, int] = {}
    for value in model.graph.input:
        if value.name in feeds:
            for dim, size in zip(value.type.tensor_type.shape.dim, feeds[value.name].shape):
                if dim.HasField("dim_param"):
                    sizes.setdefault(dim.dim_param, size)

    def evaluate(dim) -> int | None:
        if dim.HasField("dim_value"):
            return dim.dim_value
        factors = [int(f) if f.isdigit() else sizes.get(f) for f in dim.dim_param.split("*")]
        return None if any(f is None for f in factors) else math.prod(f for f in factors if f is not None)

    return {v.name: (_elem_dtype(v.type.tensor_type.elem_type),
                     tuple(evaluate(d) for d in v.type.tensor_type.shape.dim)) for v in model.graph.output}


def problems(case: Case, outputs: dict[str, np.ndarray]) -> list[str]:
    """What is wrong with a runtime's `outputs` for `case` (empty when they agree): missing outputs,
    dtypes or shapes other than declared, values off the reference."""
    found = []
    for name in case.output_names:
        if name not in outputs:
            found.append(f"{name}: missing")
            continue
        got, want = np.asarray(outputs[name]), case.expected[name]
        dtype, shape = case.declared[name]
        if got.dtype != dtype:
            found.append(f"{name}: dtype {got.dtype}, declared {dtype}")
            continue
        if len(got.shape) != len(shape) or any(d is not None and d != g for d, g in zip(shape, got.shape)):
            found.append(f"{name}: shape {got.shape}, declared {shape}")
            continue
        if want.shape != got.shape:   # the reference's own shape may be the wrong one (test_reference_types)
            if want.size != got.size:
                found.append(f"{name}: shape {got.shape}, reference {want.shape}")
                continue
            want = want.reshape(got.shape)
        if (error := value_error(got, want, case.loose.get(name))) is not None:
            found.append(f"{name}: {error}")
    return found


def value_error(got: np.ndarray, want: np.ndarray, loose: float | None = None) -> str | None:
    """None where `got` matches `want` (same NaNs; floats within tolerance, or within `loose` absolutely),
    else where and by how much it does not."""
    if got.dtype.kind != "f":
        bad = got != want
        return None if not bad.any() else f"{int(bad.sum())} of {got.size} values differ (first at " \
                                          f"{np.unravel_index(np.argmax(bad), got.shape)})"
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(g) != np.isnan(w)
    if nan.any():
        return f"NaN at {int(nan.sum())} of {got.size} positions where the reference has none or the reverse"
    finite = np.isfinite(w)
    if (np.isinf(g) != np.isinf(w)).any() or (g[~finite & ~np.isnan(w)] != w[~finite & ~np.isnan(w)]).any():
        return "infinities differ"
    g, w = g[finite], w[finite]
    if not w.size:
        return None
    bound = np.full(w.shape, loose) if loose is not None else \
        RTOL * np.abs(w) + ATOL * max(1.0, float(np.max(np.abs(w))))
    excess = np.abs(g - w) - bound
    if (excess <= 0).all():
        return None
    worst = int(np.argmax(excess))
    return (f"{int((excess > 0).sum())} of {w.size} values off, worst {g[worst]:.7g} against {w[worst]:.7g} "
            f"(bound {bound[worst]:.3g})")


# -- files for runtimes in other processes ------------------------------------------------------------------------
def write_cases(cases: list[Case], folder: str) -> str:
    """Write each case's model and inputs under `folder` and the index, cases.json; returns its path."""
    index = []
    for number, case in enumerate(cases):
        sub = os.path.join(folder, f"case{number}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, "model.onnx"), "wb") as fh:
            fh.write(case.data)
        inputs = []
        for k, (name, value) in enumerate(case.feeds.items()):
            file = f"case{number}/in{k}.bin"
            write_array(os.path.join(folder, file), value)
            inputs.append({"name": name, "dtype": value.dtype.name, "shape": list(value.shape), "file": file})
        index.append({"name": case.name, "model": f"case{number}/model.onnx", "inputs": inputs,
                      "outputs": case.output_names})
    path = os.path.join(folder, "cases.json")
    with open(path, "w") as fh:
        json.dump(index, fh, indent=1)
    return path


def write_array(path: str, value: np.ndarray) -> None:
    """The array's elements, C order, little-endian; booleans one byte each (as typed arrays read them)."""
    np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False).tofile(path)

