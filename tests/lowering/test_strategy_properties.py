"""Every registered strategy against the plain form, over random geometries around its guard.

One test per strategy in the registry (lowering/targets), so a new strategy is drawn for as soon
as it is registered. Its op's sampler (tests/lowering/geometries.py) draws functions holding the
op: for each module constant the guard compares with (the strategy's `thresholds`), geometries
just below it and at or just above it, and free draws over the rest of the guard and the edges
every form must get right (taps wholly in the padding, strides, dilations, groups, 1x1 inputs,
symbolic and empty batches, negative indices, zero steps). For each draw the outputs, the
gradient and the gradient of the gradient (tests/fuzz/checks.derivatives), and the outputs alone
(ONNX Runtime's fusions depend on the graph around an op), are lowered for the strategy's target
and for the portable target (plain forms only), run on ONNX Runtime, and each compared element
by element with the float64 reference evaluator, allowing float32's rounding (measured by
evaluating the same graph in float32). The strategy must be taken in some draws.

Seeded: the same draws every run (the seed is the strategy's name). tests/lowering/
test_strategies.py keeps hand-picked cases whose guard decision is asserted exactly.
"""
from __future__ import annotations

import zlib
from collections import Counter

import numpy as np
import pytest

import gcompile as gc
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ir.registry import REGISTRY
from gcompile.lowering.lower import recorded_lowerings
from gcompile.lowering.reads import node_reads
from gcompile.lowering.targets import TARGETS

from ..fuzz.checks import as_float64, as_float64_specs, assert_close, derivatives
from .geometries import EDGES, SAMPLERS, Draw, Unplaceable, thresholds

STRATEGIES = [s for target in TARGETS.values() for found in target.strategies.values() for s in found]
PER_SIDE = 2        # draws on each side of each threshold
PER_EDGE = 2        # draws of each of the op's edges
FREE = 4            # draws anywhere
MIN_TAKEN = 3       # draws in which the strategy must be taken (more are drawn until it is)
MAX_EXTRA = 40      # candidate draws tried for that
EDGE_TRIES = 6      # candidate draws of an edge the strategy was not taken in, tried to have it taken


def _differentiated(draw: Draw, op: str):
    positions = [i for i, a in enumerate(draw.inputs) if np.asarray(a).dtype.kind == "f"]
    if not REGISTRY[op].differentiable or not positions:
        return draw.fn
    return derivatives(draw.fn, positions)


def _agree(got, want, want32, what: str, float64: bool) -> None:
    """got (ONNX Runtime) against want (float64 reference): non-finite values where want has them,
    the others within float32's rounding (or float64's) of it."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    odd = ~np.isfinite(want)
    if odd.any():
        np.testing.assert_array_equal(got[odd], want[odd], err_msg=f"{what}: the values that are not finite")
        got, want, want32 = got[~odd], want[~odd], np.asarray(want32, np.float64)[~odd]
    if float64:
        assert_close(got, want, what, rtol=1e-7, atol=1e-9)
        return
    diff = np.abs(np.asarray(want32, np.float64) - want)
    assert_close(got, want, what, noise=float(diff[np.isfinite(diff)].max(initial=0)))


def _compiled(fn, specs, target: str):
    """The function compiled for `target` and the lowerings it took; None where ONNX Runtime's CPU
    provider has no float64 kernel for it."""
    with recorded_lowerings() as seen:
        try:
            cf = gc.compile(fn, *specs, provider="cpu", target=target)
        except gc.GcompileError as err:
            if "no float64 kernel" not in str(err):
                raise
            return None, seen
    return cf, seen


def check_draw(draw: Draw, strategy, only_if_taken: bool = False) -> bool | None:
    """Whether the strategy was taken for the draw (None: not run, as float64 has no kernel there, or
    not taken with only_if_taken); raises AssertionError where a model disagrees with the reference."""
    fn = _differentiated(draw, strategy.op)
    specs = draw.specs or [gc.spec(np.shape(a), np.asarray(a).dtype) for a in draw.inputs]
    tuned, seen = _compiled(fn, specs, strategy.target)
    taken = (strategy.op, strategy.name) in seen
    if tuned is None or only_if_taken and not taken:
        return None
    float64 = any(np.asarray(a).dtype == np.float64 for a in draw.inputs)
    want = evaluate(trace(fn, as_float64_specs(specs)).graph, as_float64(draw.inputs))
    want32 = want if float64 else evaluate(trace(fn, specs).graph, draw.inputs)
    models = [(strategy.target, tuned), ("portable", _compiled(fn, specs, "portable")[0])]
    if fn is not draw.fn:       # the forward alone too: ONNX Runtime's fusions depend on the graph around
        models += [(f"{target} forward-only", _compiled(draw.fn, specs, target)[0])
                   for target in (strategy.target, "portable")]
    warmup = _warmup(draw.inputs, specs)
    for target, cf in models:
        if cf is None:
            continue
        assert_every_node_read(cf.model, f"{draw.what}: {target} model")
        if warmup is not None:
            cf.run_flat(*warmup)
        got = cf.run_flat(*draw.inputs)
        assert len(got) == len(want) or "forward" in target
        for name, g, w, w32 in zip(cf.graph.output_names, got, want, want32):
            _agree(g, w, w32, f"{draw.what}: {target} model's {name} on ONNX Runtime", float64)
    return taken


def assert_every_node_read(model, what: str) -> None:
    """ONNX Runtime runs every node, read or not: a lowering leaves none whose outputs go unread
    (a strategy's branch that makes its own operand once left the outer one made on every run)."""
    read = {o.name for o in model.graph.output} | {name for node in model.graph.node for name in node_reads(node)}
    unread = [node.name or node.op_type for node in model.graph.node if not read & set(node.output)]
    assert not unread, f"{what}: nodes whose outputs nothing reads: {unread[:5]}"


def _warmup(inputs: list, specs: list) -> list | None:
    """Inputs of two along each symbolic axis 0 (float ones not zeros), for a run before the
    draw's own: ONNX Runtime's arena then holds that run's values, which a kernel that writes
    nothing for an empty batch leaves in its output. None where no axis is symbolic."""
    symbolic = [bool(s.shape) and isinstance(s.shape[0], str) for s in specs]
    if not any(symbolic):
        return None
    return [np.resize(a, (2, *a.shape[1:])) if sym and a.size
            else np.full((2, *a.shape[1:]), 0.5 if a.dtype.kind == "f" else 0, a.dtype) if sym else a
            for a, sym in zip(inputs, symbolic)]


def _plan(strategy) -> list:
    return [(name, side, value) for name, value in thresholds(strategy)
            for side in ("below", "at") for _ in range(PER_SIDE)] \
        + [(edge, "edge", None) for edge in EDGES.get(strategy.op, ()) for _ in range(PER_EDGE)] + [None] * FREE


@pytest.mark.parametrize("strategy", STRATEGIES, ids=[f"{s.target}-{s.op}-{s.name}" for s in STRATEGIES])
def test_a_strategy_agrees_with_the_plain_form_around_its_guard(strategy):
    sampler = SAMPLERS.get(strategy.op)
    assert sampler is not None, f"no geometry sampler for the op {strategy.op}: add one to tests/lowering/geometries.py"
    rng = np.random.default_rng(zlib.crc32(f"{strategy.target}/{strategy.op}/{strategy.name}".encode()))
    taken, sides, plan, hits = 0, Counter(), _plan(strategy), []
    for near in plan:
        try:
            draw = sampler(rng, near)
        except Unplaceable:
            pytest.fail(f"the {strategy.op} sampler (tests/lowering/geometries.py) cannot place a geometry around "
                        f"{near[0]}, a threshold of {strategy.target}'s {strategy.name} (or one of its EDGES)")
        result = check_draw(draw, strategy)
        taken += bool(result)
        sides.update((name, side) for name, side in draw.sides.items() if result is not None)
        if result:
            hits.append(near)
            if near and near[1] == "edge":
                sides[near[0], "taken"] += 1
    # more draws, run where the strategy is taken: of each edge it was not taken in (a few tries),
    # then like those it was taken in (or the whole plan) until it was taken MIN_TAKEN times
    for edge in EDGES.get(strategy.op, ()):
        for _ in range(EDGE_TRIES if not sides[edge, "taken"] else 0):
            if check_draw(sampler(rng, (edge, "edge", None)), strategy, only_if_taken=True):
                taken += 1
                break
    for extra in range(MAX_EXTRA):
        if taken >= MIN_TAKEN:
            break
        again = hits or plan
        taken += bool(check_draw(sampler(rng, again[extra % len(again)]), strategy, only_if_taken=True))
    assert taken >= MIN_TAKEN, f"{strategy.name} was taken in {taken} draws: its op's sampler rarely meets its guard"
    for name in strategy.thresholds:
        assert sides[name, "below"] and sides[name, "at"], f"{name}: draws on each side {dict(sides)}"
