"""Shared test set-up: graph passes lint the graph after every run, and `scratch_op` defines ops
that live in the registry for one test only."""
import numpy as np
import pytest

from gcompile.ir.registry import REGISTRY, defop
from gcompile.ops.shape_rules import binary_broadcast
from gcompile.passes import base as passes_base


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
    """Every graph pass run in the tests is followed by Graph.lint()."""
    passes_base.LINT = True
