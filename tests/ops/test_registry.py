"""The op registry: traits are a checked set, a pass picks up a new op by the traits it declares, and
Trait.ELEMENTWISE holds where declared."""
import numpy as np
import pytest

import gcompile.functions as F
from gcompile.frontend.tensor import apply
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate
from gcompile.ir.graph import tensor_type
from gcompile.ir.registry import REGISTRY, Trait
from gcompile.passes import eliminate_dead_code, simplify

from ..elementwise_samples import ATTRS, arity, elementwise_ops, operands
from ..elementwise_samples import shapes as sample_shapes


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


@pytest.mark.parametrize("op", elementwise_ops())
def test_an_elementwise_op_keeps_its_promise(op):
    """Trait.ELEMENTWISE, checked: the output has the operands' broadcast shape, and moving the positions
    of the (broadcast) operands around moves the output's the same way (each element depends on its own
    position only)."""
    rng = np.random.default_rng(0)
    n = arity(op)
    shapes = sample_shapes(n)
    arrays = operands(op, shapes, rng)
    attrs = ATTRS.get(op, {})
    definition = REGISTRY[op]
    types = [tensor_type(a.dtype, a.shape) for a in arrays]
    order = rng.permutation(6)
    try:
        out_types = definition.infer(types, **attrs)
        with np.errstate(all="ignore"):
            outs = definition.reference(*arrays, **attrs)
            moved = definition.reference(*[np.broadcast_to(a, (2, 3)).reshape(-1)[order] for a in arrays], **attrs)
    except TypeError as err:
        pytest.fail(f"{op}: give its sample operands or attributes in tests/elementwise_samples.py ({err})")
    outs = outs if isinstance(outs, tuple) else (outs,)
    assert [t.shape for t in out_types] == [(2, 3)] * len(outs), op
    moved = moved if isinstance(moved, tuple) else (moved,)
    for out, m in zip(outs, moved):
        assert np.shape(out) == (2, 3), op
        np.testing.assert_array_equal(np.asarray(out).reshape(-1)[order], m, err_msg=op)
