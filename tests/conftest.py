"""Shared test set-up: graph passes lint the graph after every run, `scratch_op` defines ops
that live in the registry for one test only, the run fails when an op's gradient or a lowering
was never checked (tests/op_coverage.py), a module's shared random generator restarts for each
test, and under pytest-xdist (the suite's default, two workers) the tests that share a Ray
cluster run on one worker."""
import zlib

import numpy as np
import pytest

from gcompile.ir.registry import REGISTRY, defop
from gcompile.lowering import context as lowering_context
from gcompile.ops.shape_rules import binary_broadcast
from gcompile.passes import base as passes_base

from . import op_coverage


@pytest.fixture(autouse=True)
def _shared_generator_restarted(request):
    """A test module's shared generator (a module-level RNG) restarts from a seed of the test's own
    id: its draws are then the same whichever of the module's tests ran before it in the process.
    pytest-xdist splits a module among its workers by load, so with one generator for the module
    a test's inputs changed with the tests around it (logdet's matrix once drew a negative
    determinant, and its gradient check failed, after other tests were added elsewhere)."""
    module = getattr(request, "module", None)
    for name in ("RNG", "rng"):
        if isinstance(getattr(module, name, None), np.random.Generator):
            setattr(module, name, np.random.default_rng(zlib.crc32(request.node.nodeid.encode())))


@pytest.fixture
def own_folder(tmp_path, monkeypatch):
    """The test runs in its own folder: a build without -o writes ./build, which tests running side
    by side (pytest-xdist) would otherwise share, and one would find the other's lock."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def scratch_op():
    """defop(name, **rules) for a binary broadcasting op computing np.maximum (ONNX Max) unless the
    rules say otherwise; every op defined is removed from the registry after the test."""
    names = []

    def define(name, **rules):
        names.append(name)
        rules = {"infer": binary_broadcast, "reference": np.maximum,
                 "lower": lambda ctx, names, node: ctx.emit("Max", names), **rules}
        return defop(name, **rules)
    yield define
    for name in names:
        REGISTRY.pop(name, None)


def pytest_configure(config):
    """Every graph pass run in the tests is followed by Graph.lint(), and every lowering of a float64
    node checks that no float attribute it emits rounds to float32."""
    passes_base.LINT = True
    lowering_context.CHECK_FLOAT64_ATTRIBUTES = True


def pytest_collection_modifyitems(config, items):
    """Ray's tests (tests/distributed and the Ray guide's blocks) share one local cluster per process
    and start Ray worker processes: with --dist loadgroup they run on one xdist worker, in turn."""
    for item in items:
        if "distributed" in item.path.parts or "ray.md" in item.name:
            item.add_marker(pytest.mark.xdist_group("ray"))
    op_coverage.collected(config, items)


def pytest_runtest_setup(item):
    op_coverage.ran(item)


def pytest_sessionfinish(session, exitstatus):
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:          # an xdist worker: the controller judges
        worker["op_coverage"] = op_coverage.records()
        return
    op_coverage.judge(session, exitstatus)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: a worker finished; add its op checks to the judged records."""
    op_coverage.merge(getattr(node, "workeroutput", {}).get("op_coverage"))
