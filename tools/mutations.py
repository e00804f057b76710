"""Put bugs this project fixed back, one at a time, and check that a generic check catches each.

Each MUTATION is a small patch of the current source that makes one past bug happen again (the
commit of its fix named), with the node ids of that bug's own regression tests. For each: the
tree (the files git tracks and the untracked ones it does not ignore) is copied to a temporary
folder and patched there; the bug's own tests must fail there (else the patch does not put the
bug back); then the generic checks run without those tests, and at least one of them must fail.
The generic checks are the fixed subset GENERIC (the strategy tests, the fuzzer's programs and its
coverage, the op checks, the gradient and batching checks, the translators' derivatives at edge
points, the damaged-model fuzzer, skipped training steps, stateful objects shared by threads), or
the whole suite with --suite. A patch of gc.from_torch's export (`torch`) is checked by
GENERIC_TORCH instead, run by an interpreter with PyTorch (--torch-python). Before the mutations,
the generic checks run once on the unpatched copy and must pass.

    python tools/mutations.py                          # every mutation; exits 1 if one survives
    python tools/mutations.py --list                   # the mutations, their fixes and own tests
    python tools/mutations.py conv_flat_move_mask pow_zero_base --jobs 2 --suite
    python tools/mutations.py --checks tests/lowering,tests/fuzz --no-baseline     # a quick look
    python tools/mutations.py torch_buffer_updates --torch-python ../torch-venv/bin/python

Exits 0 when every mutation is caught, 1 when one survives (a generic check must be
strengthened until it fails there), a patch no longer applies or no longer reproduces its bug
(update the patch to the current code) or a torch mutation found no interpreter with PyTorch,
2 when the unpatched tree already fails.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The generic checks, fastest and most likely to catch first (pytest -x stops at the first failure).
GENERIC = ("tests/test_shared_objects.py", "tests/train/test_skipped_steps.py",
           "tests/importer/test_translator_derivatives.py", "tests/importer/test_model_fuzz.py", "tests/lowering",
           "tests/fuzz/test_coverage.py", "tests/fuzz/test_fuzz.py", "tests/ops", "tests/gradients")
# Those of a patch in gc.from_torch's export, run by an interpreter with PyTorch and onnxscript (as
# .ci/run runs that file in its second environment), GCOMPILE_REQUIRE_TORCH set so none is skipped.
GENERIC_TORCH = ("tests/importer/test_torch_bridge.py",)


@dataclass(frozen=True)
class Mutation:
    name: str
    fix: str                                    # the commit that fixed the bug
    bug: str                                    # what went wrong, in a sentence
    edits: tuple[tuple[str, str, str], ...]     # (file, text, its replacement): each text once in its file
    own_tests: tuple[str, ...]                  # the bug's regression tests (node ids or their prefixes)
    torch: bool = False                         # the patch is in gc.from_torch's export: run where PyTorch is


MUTATIONS = [
    Mutation(
        "conv_flat_move_mask", "19d2ecf",
        "a convolution weight gradient's tap whose window lies wholly in the padding kept x's values "
        "(its moves cancel in joined positions, and the mask was skipped): wrong weight gradients of "
        "a 3x3 on a 1x1 input (issue #43 section 5)",
        (("gcompile/lowering/targets/ort_cpu/conv.py", "    if not (any(crop) or begin or end or inner):\n",
          "    if not (any(crop) or begin or end):\n"),),
        ("tests/ops/test_conv.py::test_weight_gradients_of_taps_wholly_in_the_padding",)),
    Mutation(
        "phase_pieces_shared", "086fc26",
        "simplify kept one piece per phase of a sum of strided slice_scatters, so where two pieces "
        "placed the same phase (Swin's patch merging as chained one-axis slices) half the input "
        "gradient was lost (issue #43 section 1)",
        (("gcompile/passes/simplify.py", '        phases.setdefault(a["starts"][0], []).append(scatter.inputs[0])\n',
          '        phases[a["starts"][0]] = [scatter.inputs[0]]\n'),),
        ("tests/passes/test_passes.py::test_a_phase_placed_by_several_pieces_keeps_every_piece",
         "tests/importer/test_model_fixtures.py::test_model_matches_pytorch_at_two_batch_sizes")),
    Mutation(
        "mean_of_nothing", "8c20203",
        "a mean over an empty axis was ONNX Runtime's ReduceMean, 0, where numpy and torch give NaN",
        (("gcompile/ops/reduce.py",
          '    if n == 0:\n        return ctx.emit("Expand", [ctx.const(np.asarray(np.nan, out.dtype)), '
          'ctx.shape_tensor(out.shape)])\n    if isinstance(n, int):\n',
          "    if True:\n"),),
        ("tests/ops/test_reduce.py::test_reductions_over_an_empty_axis",)),
    Mutation(
        "empty_batch_weight_grad", "9731a1b",
        "the per-tap convolution weight gradient of an empty batch returned what ONNX Runtime's arena "
        "held (its FusedMatMul writes nothing for an empty contraction), 1e19 after a full batch",
        (("gcompile/lowering/targets/ort_cpu/conv.py",
          "    elif not nonempty:\n"
          "        # onnxruntime's FusedMatMul leaves its output unwritten for an empty contraction (an empty\n"
          "        # batch gave the arena's leftovers, 1e19), where the sum is zeros\n"
          '        has_images = ctx.emit("Greater", [ctx.shape_tensor((batch,)), ctx.int64s([0])])\n'
          '        gw = ctx.emit("Where", [has_images, gw, ctx.const(np.zeros((), x_type.dtype))])\n', ""),),
        ("tests/ops/test_conv.py::test_conv_weight_grad_in_chunks_of_images",
         "tests/ops/test_conv.py::test_weight_gradients_of_an_empty_batch_on_onnxruntime")),
    Mutation(
        "vmap_in_axes_swap", "3e7d66a",
        "gc.vmap's in_axes=k swapped axis k with axis 0 instead of moving it first, reordering each "
        "example's other axes on arguments of rank 3 or more",
        (("gcompile/gradients/vmap.py",
          "                t = F.transpose(t, (axis,) + tuple(i for i in range(t.ndim) if i != axis)) if axis else t\n",
          "                t = F.swapaxes(t, 0, axis) if axis else t\n"),),
        ("tests/gradients/test_vmap.py::test_in_axes_moves_the_batch_axis_first_keeping_the_others_in_order",)),
    Mutation(
        "eliminate_dropout", "272c312",
        "ONNX Runtime's EliminateDropout removed a training-mode Dropout whose output fed further ops, "
        "so dropout inside a training step kept every element",
        (("gcompile/runtime/providers.py",
          'DISABLED_OPTIMIZERS = ["Pad_Fusion", "MatMulScaleFusion", "EliminateDropout", "GemmTransposeFusion"]\n',
          'DISABLED_OPTIMIZERS = ["Pad_Fusion", "MatMulScaleFusion", "GemmTransposeFusion"]\n'),),
        ("tests/ops/test_nn.py::test_dropout_inside_a_graph_is_kept_by_onnxruntime",
         "tests/importer/test_torch_bridge.py::test_dropout_layers_draw_a_mask_while_training_and_vanish_in_eval")),
    Mutation(
        "pad_fusion", "15cd63b",
        "ONNX Runtime's Pad_Fusion merged a zero Pad into the following MaxPool, whose pads count as "
        "-inf: a wrong maximum wherever a padded zero won",
        (("gcompile/runtime/providers.py",
          'DISABLED_OPTIMIZERS = ["Pad_Fusion", "MatMulScaleFusion", "EliminateDropout", "GemmTransposeFusion"]\n',
          'DISABLED_OPTIMIZERS = ["MatMulScaleFusion", "EliminateDropout", "GemmTransposeFusion"]\n'),
         ("gcompile/lowering/context.py",
          '        return self.emit("Pad", [x, self.int64s([*begins, *ends]), fill, self.int64s(range(rank))], '
          'mode=mode)\n',
          '        return self.emit("Pad", [x, self.int64s([*begins, *ends]), fill], mode=mode)\n')),
        ("tests/fuzz/test_regressions.py::test_zero_padding_before_pooling_is_not_merged_into_the_pool",
         "tests/test_runtime.py::test_sessions_keep_zero_padding_before_a_max_pool_of_a_foreign_model")),
    Mutation(
        "pow_zero_base", "393b518",
        "pow's VJP took y·x^(y-1) at a zero base where y is 0 too, 0·inf: NaN derivatives of x**2 at an "
        "exact 0 from the third order (a relu's zeros squared)",
        (("gcompile/ops/elementwise.py", "    gx = g[0] * y * power(where(equal(y, 0), 1, x), y - 1)\n",
          "    gx = g[0] * y * power(x, y - 1)\n"),),
        ("tests/fuzz/test_regressions.py::test_integer_power_of_an_exact_zero_has_finite_derivatives",)),
    Mutation(
        "trainer_lock", "fe4c61c",
        "Trainer.step swapped its live and spare buffers without a lock: two threads of 500 steps lost "
        "steps (step_count 992-996) and left parameters up to 1e-3 off the serial run (issue #43 section 1)",
        (("gcompile/training/trainer.py",
          "        self._lock = threading.RLock()   # re-entrant: a schedule called inside step may read the trainer\n",
          "        self._lock = contextlib.nullcontext()\n"),),
        ("tests/train/test_threads.py::test_two_threads_stepping_one_trainer_equal_a_serial_run",
         "tests/train/test_threads.py::test_saves_and_reads_during_steps_see_whole_steps",
         "tests/train/test_threads.py::test_hyperparameters_set_from_another_thread_apply_to_whole_steps")),
    Mutation(
        "torch_buffer_updates", "42e4f8d",
        "gc.from_torch dropped the in-place updates of buffers other than BatchNorm's (an EMA under "
        "no_grad, a call counter): the buffers never changed in training (issue #43 section 1)",
        (("gcompile/importer/torch.py", "    mutated = set(signature.buffers_to_mutate.values())\n",
          "    mutated: set = set()\n"),),
        ("tests/importer/test_torch_bridge.py::test_state_updates_mode_branches_and_stop_gradients_match_torch",),
        torch=True),
    Mutation(
        "celu_relu_sum", "e622e28",
        "an imported Celu was relu(x) + alpha*expm1(min(x, 0)/alpha): minimum's tie rule made its "
        "derivative 0.5 at x = 0, where it is 1 (issue #43 section 1)",
        (("gcompile/importer/translators/elementwise.py",
          '    return F.celu(require_float(n, x), n.attr("alpha", 1.0))     # at 0, 1: as F.celu\n',
          '    alpha, x = n.attr("alpha", 1.0), require_float(n, x)\n'
          "    return F.relu(x) + F.expm1(F.minimum(x / alpha, scalar_like(0, x))) * alpha\n"),),
        ("tests/importer/test_activation_kinks.py::test_imported_activation_at_its_kinks",)),
    Mutation(
        "seal_unchecked", "d6b4f87",
        "saved model files carried no integrity check: flipped or cut copies written by cf.save or "
        "step.save loaded and computed other numbers (here: the loaders take every file as unsealed)",
        (("gcompile/runtime/modelfile.py", "    if expected is None:\n        return False\n",
          "    if True:\n        return False\n"),),
        ("tests/test_seal.py::test_every_flip_and_cut_of_a_saved_model_is_refused",
         "tests/test_seal.py::test_every_flip_and_cut_of_a_saved_models_bytes_is_refused",
         "tests/test_seal.py::test_every_flip_and_cut_of_a_saved_split_step_is_refused",
         "tests/test_seal.py::test_every_flip_and_cut_of_a_saved_training_step_is_refused_by_the_trainer",
         "tests/test_seal.py::test_every_flip_and_cut_of_external_data_is_refused",
         "tests/test_seal.py::test_the_cli_refuses_a_damaged_file_with_exit_2_naming_it",
         "tests/test_seal.py::test_build_and_grad_outputs_are_sealed_and_keep_protecting_themselves_when_copied",
         "tests/importer/test_torch_bridge.py::test_a_saved_model_is_sealed_and_a_damaged_copy_refused")),
    Mutation(
        "nonfinite_gradients", "fe4c61c",
        "the non-finite step guard looked at the loss only: an infinite gradient of a finite loss "
        "was applied, and every parameter became NaN (issue #43 section 1)",
        (("gcompile/training/step.py",
          "    probes = [F.cast(F.sum(v * 0), np.float32) for v in (loss, *grads)]\n",
          "    probes = [F.cast(F.sum(v * 0), np.float32) for v in (loss,)]\n"),),
        ("tests/train/test_nonfinite.py::test_an_infinite_gradient_of_a_finite_loss_is_skipped_before_clipping",
         "tests/train/test_nonfinite.py::test_a_nan_batch_is_skipped_and_training_goes_on_as_if_it_never_came",
         "tests/train/test_nonfinite.py::test_buffers_are_kept_too",
         "tests/train/test_nonfinite.py::test_the_saved_file_guards_itself_on_a_plain_runtime")),
    Mutation(
        "flag_attributes", "951b3a3",
        "an integer attribute ONNX defines as 0 or 1 held another value (ReduceSum's keepdims=2): "
        "the importer kept the reduced dims where ONNX Runtime drops them, another shape from one file",
        (("gcompile/importer/validate.py",
          "        if attr.name in FLAGS and attr.type == AttributeProto.INT and attr.i not in (0, 1):\n",
          "        if False:\n"),),
        ("tests/importer/test_hostile_models.py::test_a_flag_attribute_other_than_0_or_1_is_refused",)),
    Mutation(
        "inference_mode_export", "778c167",
        "gc.from_torch let gradients through torch.inference_mode() blocks and methods it decorates "
        "(torch.export drops the mode without a trace), where PyTorch passes none",
        (("gcompile/importer/torch.py", "        with _inference_mode_as_no_grad():\n",
          "        with contextlib.nullcontext():\n"),),
        ("tests/importer/test_torch_bridge.py::test_state_updates_mode_branches_and_stop_gradients_match_torch",),
        torch=True),
]


class PatchError(Exception):
    """A mutation's text is not (or not once) in its file: the code has moved on."""


def copy_tree(dest: Path) -> None:
    """The files git tracks (as they are in the working tree) and the untracked ones it does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)


def apply(mutation: Mutation, tree: Path) -> None:
    for rel, old, new in mutation.edits:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise PatchError(f"{mutation.name}: the text to replace is {text.count(old)} times in {rel}, not once")
        path.write_text(text.replace(old, new))


@dataclass
class Run:
    code: int
    failed: list[str]          # node ids of the tests that failed or errored
    tail: str                  # the end of pytest's output
    seconds: float


def pytest(tree: Path, args: list[str], stop_first: bool = True, torch: str | None = None) -> Run:
    """pytest in `tree` (its own code first on the path) with `args`; by the interpreter `torch`
    where given (one process: that environment need not have pytest-xdist), torch tests required."""
    report = tree / ".mutation-report.xml"
    command = [torch or sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
               "-W", "ignore::RuntimeWarning", *(["-o", "addopts=", "-p", "no:xdist"] if torch else []),
               *(["-x"] if stop_first else []), *args]
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",
           **({"GCOMPILE_REQUIRE_TORCH": "1"} if torch else {})}
    start = time.monotonic()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    failed = []
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                module = case.get("classname", "").replace(".", "/")
                failed.append(f"{module}.py::{case.get('name')}")
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    return Run(done.returncode, failed, tail, time.monotonic() - start)


@dataclass
class Verdict:
    mutation: Mutation
    outcome: str               # "caught", "survived", "not applied", "not reproduced", "not run", "error"
    detail: str


def check(mutation: Mutation, generic: list[str], keep: bool, torch: str | None = None) -> Verdict:
    """`torch`: the interpreter with PyTorch that runs a torch mutation's tests (None: none found)."""
    if mutation.torch and torch is None:
        return Verdict(mutation, "not run", "it needs an interpreter with torch and onnxscript: --torch-python")
    torch = torch if mutation.torch else None
    tree = Path(tempfile.mkdtemp(prefix=f"gcompile-mutation-{mutation.name}-"))
    try:
        copy_tree(tree)
        try:
            apply(mutation, tree)
        except PatchError as err:
            return Verdict(mutation, "not applied", str(err))
        own = pytest(tree, list(mutation.own_tests), stop_first=False, torch=torch)
        if not own.failed:
            return Verdict(mutation, "not reproduced",
                           f"its own tests pass with the patch (exit {own.code}):\n{own.tail}")
        deselect = [arg for test in mutation.own_tests for arg in ("--deselect", test)]
        run = pytest(tree, [*generic, *deselect], torch=torch)
        if run.failed:
            return Verdict(mutation, "caught", f"by {run.failed[0]} ({run.seconds:.0f} s; own tests failing: "
                                               f"{len(own.failed)})")
        if run.code in (0, 1):
            return Verdict(mutation, "survived", f"every generic check passed ({run.seconds:.0f} s):\n{run.tail}")
        return Verdict(mutation, "error", f"pytest exited {run.code}:\n{run.tail}")
    finally:
        if keep:
            print(f"  ({mutation.name}: tree kept at {tree})", flush=True)
        else:
            shutil.rmtree(tree, ignore_errors=True)


def baseline(generic: list[str], torch: str | None = None) -> Run:
    tree = Path(tempfile.mkdtemp(prefix="gcompile-mutation-baseline-"))
    try:
        copy_tree(tree)
        return pytest(tree, generic, torch=torch)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def with_torch(python: str | None) -> str | None:
    """`python` (else this interpreter) where it imports torch and onnxscript, else None."""
    python = python or sys.executable
    found = subprocess.run([python, "-c", "import torch, onnxscript"], capture_output=True)
    return python if found.returncode == 0 else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to check (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--suite", action="store_true", help="run the whole suite, not the generic subset")
    parser.add_argument("--checks", metavar="PATHS", help="comma-separated tests to run as the generic checks instead")
    parser.add_argument("--jobs", type=int, default=1, help="mutations checked at once")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run of the unpatched tree")
    parser.add_argument("--keep", action="store_true", help="keep each patched tree (its path is printed)")
    parser.add_argument("--torch-python", metavar="PYTHON", default=os.environ.get("GCOMPILE_TORCH_PYTHON"),
                        help="an interpreter with torch and onnxscript (and gcompile's dependencies) for the "
                             "mutations of gc.from_torch's export (default: $GCOMPILE_TORCH_PYTHON, else this one)")
    args = parser.parse_args(argv)

    known = {m.name: m for m in MUTATIONS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"no mutation {', '.join(unknown)}; there are: {', '.join(known)}")
    chosen = [known[n] for n in args.names] or MUTATIONS
    if args.list:
        for m in chosen:
            print(f"{m.name} (fixed in {m.fix}): {m.bug}\n    own tests: {', '.join(m.own_tests)}")
        return 0
    generic = args.checks.split(",") if args.checks else ["tests"] if args.suite else list(GENERIC)
    torch = with_torch(args.torch_python) if any(m.torch for m in chosen) else None
    checks = {False: generic, True: args.checks.split(",") if args.checks else list(GENERIC_TORCH)}
    if not args.no_baseline:
        for needs_torch in sorted({m.torch for m in chosen if torch or not m.torch}):
            base = baseline(checks[needs_torch], torch if needs_torch else None)
            if base.failed or base.code != 0:
                print(f"the generic checks fail without any mutation (exit {base.code}; {', '.join(base.failed)}):\n"
                      f"{base.tail}")
                return 2
            print(f"baseline: the generic checks{' with torch' * needs_torch} pass unpatched ({base.seconds:.0f} s)",
                  flush=True)
    verdicts = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for verdict in pool.map(lambda m: check(m, checks[m.torch], args.keep, torch), chosen):
            print(f"{verdict.mutation.name} (fixed in {verdict.mutation.fix}): {verdict.outcome} {verdict.detail}",
                  flush=True)
            verdicts.append(verdict)
    bad = [v for v in verdicts if v.outcome != "caught"]
    print(f"\n{len(verdicts) - len(bad)} of {len(verdicts)} mutations caught by a generic check"
          + "".join(f"\n  {v.mutation.name}: {v.outcome}" for v in bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
