"""The op registry: traits are a checked set, and a pass picks up a new op by the traits it declares."""
import numpy as np
import pytest

import gcompile.functions as F
from gcompile.frontend.tensor import apply
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ir.registry import REGISTRY, Trait
from gcompile.passes import eliminate_dead_code, simplify


def test_traits_must_be_trait_members(scratch_op):
    with pytest.raises(TypeError, match="Trait members"):
        scratch_op("test_stringly", traits={"nondiff"})
    with pytest.raises(ValueError, match="vjp rule or the Trait.NONDIFF"):
        scratch_op("test_no_vjp", traits={Trait.CHEAP})
    assert not scratch_op("test_nondiff", traits=[Trait.NONDIFF]).differentiable


def test_every_trait_is_declared_by_some_op():
    declared = set().union(*(op.traits for op in REGISTRY.values()))
    assert declared == set(Trait)


@pytest.mark.parametrize("traits, expands_left", [({Trait.NONDIFF, Trait.BROADCASTS}, 0), ({Trait.NONDIFF}, 1)])
def test_a_new_op_declaring_broadcasts_gets_its_operands_expands_dropped(scratch_op, traits, expands_left):
    name = f"test_max_{len(traits)}"
    scratch_op(name, traits=traits)
    x, b = np.arange(12.0).reshape(3, 4), np.linspace(-1, 20, 4)
    graph = trace(lambda x, b: apply(name, [x, F.broadcast_to(b, (3, 4))]), [x, b]).graph
    assert simplify(graph).changed == (expands_left == 0)
    eliminate_dead_code(graph)
    graph.lint()
    assert [n.op for n in graph.nodes.values()].count("expand") == expands_left
    np.testing.assert_array_equal(evaluate(graph, [x, b])[0], np.maximum(x, b))
