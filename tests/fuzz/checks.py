"""What is checked on each generated program, at one input point.

  forward      the reference evaluator (float64) matches the NumPy semantics closely, and the
               compiled model (float32, symbolic batch, no graph passes) on onnxruntime matches
               them within float32 tolerance;
  derivatives  outputs, gradient and double gradient (gc.grad of <grad, v>) compiled together
               (float32, symbolic batch, all passes) on onnxruntime match the reference evaluator
               on the unoptimised float64 trace;
  float64      the same in float64 with static shapes (other lowerings, constant folding) where
               every op has a float64 kernel, to float64 accuracy;
  grad,        gcompile.testing.check_grad / check_double_grad / order 3: float64 central
  double_grad, differences against the reference evaluator and (orders 1 and 2) against the
  triple_grad  float32 models onnxruntime runs, at static shapes and with the symbolic batch
               (not for a program that draws random numbers: ONNX Runtime draws its own; the
               derivatives check runs its model, whose dropout keeps every value).

Inputs are redrawn (a few times) until no kink or jump of the program lies within SAFE of
the point, and until its control flow (each while loop's number of steps, each cond's branch)
is the same at the two points x ± εr check_grad's central difference evaluates as at x; where
none is found, the checks that need it are skipped and the result says so.
"""
from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ir.registry import is_random
from gcompile.lowering.lower import recorded_lowerings
from gcompile.passes import base as passes_base
from gcompile.testing import check_grad, direction

from . import coverage, npsem

# Every graph pass the fuzzer runs is followed by Graph.lint(), under pytest, tools/fuzz.py or a reproducer.
passes_base.LINT = True

SAFE = 1e-3                  # the closest a kink or jump may be to the checked point
RTOL, ATOL = 1e-3, 1e-4      # float32 against float64: |got - want| <= ATOL * max(1, |want|max) + RTOL * |want|
GRAD_TOLERANCES = {"eps": 1e-5, "rtol": 1e-5, "atol": 1e-7}
CHECKS = ("forward", "derivatives", "float64", "grad", "double_grad", "triple_grad")


def specs(program_def) -> list:
    return [gc.spec(i.spec_shape(), i.dtype) for i in program_def.inputs]


def as_float64(arrays) -> list:
    return [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]


def as_float64_specs(input_specs) -> list:
    return [gc.spec(s.shape, np.float64 if s.dtype.kind == "f" else s.dtype) for s in input_specs]


def assert_close(got, want, what: str, rtol=RTOL, atol=ATOL, noise: float = 0.0) -> None:
    """`noise`: an error the same computation makes anyway at the lower precision, allowed 4 times
    over (float32 cancellation leaves values that are exactly 0 in float64 at 1e-4)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if not np.isfinite(want).all():
        raise AssertionError(f"{what}: the expected values are not finite: {want}")
    bound = atol * max(1.0, float(np.abs(want).max(initial=0))) + rtol * np.abs(want) + 4 * noise
    err = np.abs(got.astype(np.float64) - want)
    if not (err <= bound).all():
        worst = np.unravel_index(np.argmax(err - bound), err.shape)
        raise AssertionError(f"{what}: {int((err > bound).sum())} of {err.size} values differ; worst at {worst}: "
                             f"got {got[worst]!r}, expected {want[worst]!r}")


# -- the checks (each raises AssertionError) ---------------------------------------------------------
def check_forward(program, reference, input_specs, arrays) -> None:
    want = reference(*as_float64(arrays))
    ref = evaluate(trace(program, as_float64_specs(input_specs)).graph, as_float64(arrays))
    assert len(ref) == len(want), f"{len(ref)} outputs, expected {len(want)}"
    for k, (r, w) in enumerate(zip(ref, want)):
        assert_close(r, w, f"reference evaluator, output {k}", rtol=1e-9, atol=1e-9)
    got = gc.compile(program, *input_specs, provider="cpu", optimize=0).run_flat(*arrays)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.float32, f"output {k}: dtype {g.dtype}"
        assert_close(g, w, f"onnxruntime, output {k}")


def derivatives(program, positions):
    """x ↦ (outputs, ∇L, ∇⟨∇L, v⟩) with L = Σ⟨w_k, output_k⟩; w and v fixed random, size 1 on
    symbolic dims (broadcast). The program returns a tuple or list of outputs, or one."""
    def fn(*xs):
        outs = program(*xs)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        rng = np.random.default_rng(0)

        def weight(t):
            return rng.standard_normal([d if isinstance(d, int) else 1 for d in t.shape]).astype(t.dtype)

        floats = [xs[i] for i in positions]
        grads = gc.grad(F.add_n([F.sum(o * weight(o)) for o in outs]), floats)
        double = gc.grad(F.add_n([F.sum(g * weight(g)) for g in grads]), floats)
        return list(outs), grads, double
    return fn


def check_derivatives(program, reference, input_specs, arrays) -> None:
    positions = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    fn = derivatives(program, positions)
    graph = trace(fn, as_float64_specs(input_specs)).graph
    want = evaluate(graph, as_float64(arrays))
    # The same graph evaluated by NumPy in float32 measures each output's rounding noise, so a
    # cancellation that float32 cannot resolve is not mistaken for a wrong lowering.
    want32 = evaluate(trace(fn, input_specs).graph, arrays)
    compiled = gc.compile(fn, *input_specs, provider="cpu")
    got = compiled.run_flat(*arrays)
    for name, g, w, w32 in zip(compiled.graph.output_names, got, want, want32):
        diff = np.abs(np.asarray(w32, np.float64) - w)
        noise = float(diff.max(initial=0)) if np.isfinite(diff).all() else 0.0
        assert_close(g, w, f"onnxruntime, {name}", noise=noise)
    return {node.op for node in graph.nodes.values()} | {node.op for node in compiled.graph.nodes.values()}


class NotApplicable(Exception):
    """The check does not apply to this program (e.g. an op without a float64 kernel)."""


def check_float64(program, reference, input_specs, arrays) -> None:
    """Outputs, gradient and double gradient compiled in float64 (its own lowerings of several
    activations) for the inputs' static shapes on onnxruntime against the reference evaluator,
    to float64 accuracy."""
    positions = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    fn = derivatives(program, positions)
    arrays64 = as_float64(arrays)
    want = evaluate(trace(fn, arrays64).graph, arrays64)
    try:
        compiled = gc.compile(fn, *arrays64, provider="cpu", optimize=1)
    except gc.GcompileError as err:
        if "no float64 kernel" in str(err):
            raise NotApplicable(str(err)) from None
        raise
    got = compiled.run_flat(*arrays64)
    for name, g, w in zip(compiled.graph.output_names, got, want):
        assert g.dtype == np.float64, f"{name}: dtype {g.dtype}"
        assert_close(g, w, f"onnxruntime float64, {name}", rtol=1e-6, atol=1e-7)


def draws_random(program, arrays) -> bool:
    """Whether the program draws random numbers (dropout in training, seeded): ONNX Runtime's draws
    are not the reference evaluator's, so check_grad compares no ONNX model of it (it refuses)."""
    return any(is_random(n) for n in trace(program, as_float64(arrays)).graph.nodes.values())


def check_gradients(order: int):
    """check_grad of `order`: on the reference evaluator, and up to second order also on ONNX
    Runtime's float32 models at static shapes and at the program's specs (its symbolic batch),
    unless the program draws random numbers."""
    def check(program, reference, input_specs, arrays) -> None:
        lowered = order <= 2 and not draws_random(program, arrays)
        check_grad(program, as_float64(arrays), order=order, lowered=lowered, symbolic=input_specs,
                   **GRAD_TOLERANCES)
    return check


RUNNERS = {"forward": check_forward, "derivatives": check_derivatives, "float64": check_float64,
           "grad": check_gradients(1), "double_grad": check_gradients(2), "triple_grad": check_gradients(3)}


def run_check(name: str, program, reference, input_specs, arrays):
    """One named check (what a reproducer file calls); the derivatives check returns the
    gcompile ops of its graph."""
    return RUNNERS[name](program, reference, input_specs, arrays)


# -- a program's run ---------------------------------------------------------------------------------------
@dataclass
class Failure:
    check: str
    message: str
    arrays: list


@dataclass
class Result:
    failures: list = field(default_factory=list)
    skipped: list = field(default_factory=list)     # checks not run: no safe point found
    ops: set = field(default_factory=set)           # gcompile ops in the derivatives graph
    decisions: list = field(default_factory=list)   # the control flow's at the point checked (npsem)
    lowerings: Counter = field(default_factory=Counter)   # (op, strategy or "plain") -> nodes lowered so
    rewrites: Counter = field(default_factory=Counter)    # graph-pass rewrite -> times it fired (coverage.py)


def _decisions(reference, arrays) -> list:
    with npsem.recording() as margins:
        reference(*arrays)
    return [d for kind, d in margins if kind == "decision"]


def same_path(reference, arrays, decisions) -> bool:
    """Whether the float64 reference takes the same path (`decisions`, at `arrays`) at both points
    x ± εr where the numeric gradient checks evaluate the program (gcompile.testing.direction)."""
    if not decisions:
        return True
    arrays = as_float64(arrays)
    floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    r = direction([arrays[i] for i in floats])
    for sign in (1, -1):
        shifted = list(arrays)
        for i, v in zip(floats, r):
            shifted[i] = arrays[i] + sign * GRAD_TOLERANCES["eps"] * v
        if _decisions(reference, shifted) != decisions:
            return False
    return True


def safe_point(program_def, reference, seed: int, batch: int, tries: int = 4):
    """Inputs (float32 / int64), which checks their point is safe for, and the control flow's
    decisions there."""
    best = None
    for attempt in range(tries):
        arrays = [i.sample(seed + 7919 * attempt, batch) for i in program_def.inputs]
        with npsem.recording() as margins:
            reference(*as_float64(arrays))
        jump = min([d for kind, d in margins if kind == "jump"], default=np.inf)
        kink = min([d for kind, d in margins if kind == "kink"], default=np.inf)
        decisions = [d for kind, d in margins if kind == "decision"]
        ok = {"forward": jump >= SAFE}
        ok.update(dict.fromkeys(CHECKS[1:], ok["forward"] and kink >= SAFE))
        if ok["grad"] and not same_path(reference, arrays, decisions):
            ok.update(dict.fromkeys(("grad", "double_grad", "triple_grad"), False))
        if best is None or sum(ok.values()) > sum(best[1].values()):
            best = arrays, ok, decisions
        if all(ok.values()):
            break
    return best


def run_program(program_def, seed: int, checks=CHECKS) -> Result:
    """All `checks` of a generated program at a safe point drawn from `seed` (batch 2 or 3)."""
    result = Result()
    program, reference = program_def.functions()
    arrays, ok, result.decisions = safe_point(program_def, reference, seed, batch=2 + seed % 2)
    coverage.install()
    fired = Counter(coverage.FIRED)
    with recorded_lowerings() as result.lowerings:
        for name in checks:
            if not ok[name]:
                result.skipped.append(name)
                continue
            try:
                result.ops |= run_check(name, program, reference, specs(program_def), arrays) or set()
            except NotApplicable:
                result.skipped.append(name)
            except Exception as err:  # noqa: BLE001 - every failure is reported with its traceback
                text = f"{type(err).__name__}: {err}"
                if not isinstance(err, AssertionError):
                    text += "\n" + "".join(traceback.format_tb(err.__traceback__)[-3:])
                result.failures.append(Failure(name, text, arrays))
    result.rewrites = coverage.FIRED - fired
    return result
