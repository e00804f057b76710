"""What the fuzzer reached: the targets' strategies (counted by lowering.recorded_lowerings) and the
graph passes' rewrites, counted here.

A rewrite is a pass, or a function of a pass module that decides or applies one rewrite (REWRITES);
it is reached when a call of it changed the graph or found its pattern. install() wraps those
functions in their modules to count into FIRED (a run's counts are the difference of FIRED
before and after it); the passes themselves are counted where `passes.base.run_pass` runs them.
tests/fuzz/test_coverage.py checks that every name here exists, so a renamed rewrite is not
silently left uncounted.
"""
from __future__ import annotations

import functools
import importlib
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from gcompile.lowering.targets import TARGETS
from gcompile.passes.base import PassResult


def _found(result: Any) -> bool:
    """A rewrite function's result says it rewrote or matched: True, a PassResult that changed, or
    anything but None and False."""
    if isinstance(result, PassResult):
        return result.changed
    return result is not None and result is not False


# module -> {function: how its result says it fired (default: _found)}
REWRITES: dict[str, dict[str, Callable[[Any], bool] | None]] = {
    "gcompile.passes.simplify": dict.fromkeys((
        "_passthrough", "_fuse_with_producer", "_tiling_pieces", "_interleave_phases", "_drop_broadcast_expands",
        "_sink_expands", "_square_as_product", "_mask_before_pool_scatter", "_scatter_into_sum", "_rejoined",
        "_merge_scatters", "_transposes_joined", "_transposes_before_scatters")),
    "gcompile.passes.gemm": {"_to_gemm": None, "_absorb_bias": None, "_absorb_output_transpose": None,
                             "_product_terms": bool, "_reduction_terms": lambda r: bool(r[0])},
    "gcompile.passes.loops": dict.fromkeys(("_prune", "_hoist_one")),
}
# the passes counted as a whole (each run that changed the graph), beside the functions above
PASSES = ("fold_constants", "eliminate_common_subexpressions", "eliminate_dead_code", "recompute")

FIRED: Counter = Counter()     # rewrite -> how often it fired since install(): take differences
_lock = threading.Lock()
_installed: list[bool] = []


def _counting(name: str, fn: Callable, fired: Callable[[Any], bool]) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        if fired(result):
            FIRED[name] += 1
        return result
    return wrapper


def install() -> None:
    """Wrap the rewrite functions of REWRITES in their modules, and passes.base.run_pass, so that
    they count into FIRED (once per process; the wrappers change nothing else)."""
    with _lock:
        if _installed:
            return
        for module_name, functions in REWRITES.items():
            module = importlib.import_module(module_name)
            short = module_name.rsplit(".", 1)[1]
            for name, fired in functions.items():
                setattr(module, name, _counting(f"{short}.{name}", getattr(module, name), fired or _found))
        base, passes = importlib.import_module("gcompile.passes.base"), importlib.import_module("gcompile.passes")
        run_pass = base.run_pass

        def counted_run_pass(graph, p):
            result = run_pass(graph, p)
            name = getattr(getattr(p, "func", p), "__name__", "")
            if name in PASSES and result.changed:
                FIRED[name] += 1
            return result
        base.run_pass = passes.run_pass = counted_run_pass
        _installed.append(True)


def all_rewrites() -> list[str]:
    return sorted([f"{m.rsplit('.', 1)[1]}.{f}" for m, fs in REWRITES.items() for f in fs] + list(PASSES))


def all_strategies() -> list[tuple[str, str]]:
    """(op, strategy name) of every target's strategies, as recorded_lowerings counts them."""
    return sorted({(s.op, s.name) for target in TARGETS.values() for found in target.strategies.values()
                   for s in found})
