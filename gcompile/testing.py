"""Numeric checks users can run on their own code (ARCHITECTURE.md §9.3).

check_grad compares a float64 central difference (S(x+εr) − S(x−εr)) / 2ε along one random
unit direction r over all float inputs with ⟨∇S(x), r⟩, where S is the function's outputs
weighted by fixed random cotangents (order 1), or x ↦ ⟨∇S(x), v⟩ for fixed random v (order 2,
and so on). The derivative is taken twice: from the numpy reference evaluator in float64, which
checks the VJP rules, and from the ONNX model that ONNX Runtime runs, in float32, at the inputs'
own shapes and again with an axis symbolic, which checks the lowering of every
gradient graph as it is deployed. A formula can be right while the graph that runs is wrong
(a lowering strategy chosen by size, a symbolic batch taking another path), so both are checked.
check_lowering compares ONNX Runtime's outputs with the reference evaluator's. float64_model widens an
ONNX model written in float32, for the same checks on an imported model.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from .errors import GcompileError
from .frontend import pytree
from .frontend.spec import Spec, spec
from .frontend.tensor import as_tensor
from .frontend.trace import is_output_leaf, trace
from .gradients import grad
from .ir.dtypes import is_float
from .ir.evaluate import evaluate
from .ir.registry import is_random
from .ops.basic import add_n, cast
from .ops.reduce import sum as reduce_sum

# Relative error allowed between ONNX Runtime's float32 derivative and the float64 difference,
# measured against Σ|∂S/∂xᵢ|·|rᵢ| (the size of the terms float32 rounds, whatever cancels).
LOWERED_RTOL = 2e-3


def _float_positions(arrays) -> list[int]:
    return [i for i, a in enumerate(arrays) if is_float(np.asarray(a).dtype)]


def _float_leaves(result) -> list:
    leaves, _ = pytree.flatten(result, is_output_leaf)
    return [t for t in map(as_tensor, leaves) if is_float(t.dtype)]


def _program(fn, n: int, positions: list[int], n_out: int, order: int, *, value_only: bool = False):
    """The checked function as one traced program of flat arguments
    (x₁..xₙ, w₁..w_out, v-vectors of orders 1..order−1, r): it returns
    [S, ⟨∇S, r⟩, ∇S...] where S = Σ⟨w_k, f_k(x)⟩ differentiated order − 1 times along the v's,
    or only S with value_only. Every vector is an input, so one program serves the reference
    evaluator at static shapes and ONNX Runtime at symbolic ones."""
    k = len(positions)

    def program(*args):
        xs, ws = args[:n], args[n:n + n_out]
        rest = args[n + n_out:]
        wrt = [xs[i] for i in positions]
        s = add_n([cast(reduce_sum(y * cast(w, y.dtype)), w.dtype) for y, w in zip(_float_leaves(fn(*xs)), ws)])
        for j in range(order - 1):
            s = add_n([reduce_sum(g * v) for g, v in zip(grad(s, wrt), rest[j * k:(j + 1) * k])])
        if value_only:
            return s
        grads = grad(s, wrt)
        return [s, add_n([reduce_sum(g * r) for g, r in zip(grads, rest[(order - 1) * k:])]), *grads]
    return program


def _symbolic_candidates(arrays: list[np.ndarray], dtype) -> list[list[Spec]]:
    """Specs with one symbolic axis to try in turn: the first input's axis 0 and the same axis of
    every other input where it has the same length, then that axis of the first input alone, then
    likewise its axis 1, 2, ... (a function may need some axes static: glu's split axis)."""
    shaped = [i for i, a in enumerate(arrays) if a.ndim >= 1]
    if not shaped:
        return []
    first = arrays[shaped[0]]

    def specs(axis: int, symbolic: set[int]) -> list[Spec]:
        return [spec(tuple("n" if i in symbolic and k == axis else d for k, d in enumerate(a.shape)),
                     dtype if is_float(a.dtype) else a.dtype) for i, a in enumerate(arrays)]
    candidates = []
    for axis, length in enumerate(first.shape):
        shared = {i for i in shaped if arrays[i].ndim > axis and arrays[i].shape[axis] == length}
        candidates.append(specs(axis, shared))
        if shared != {shaped[0]}:
            candidates.append(specs(axis, {shaped[0]}))
    return candidates


def _output_types(fn, specs) -> list:
    outs = trace(lambda *xs: _float_leaves(fn(*xs)), specs).graph
    return [outs.type_of(r) for r in outs.outputs]


def direction(float_inputs: Sequence[ArrayLike], seed: int = 0) -> list[np.ndarray]:
    """The unit direction r (one array per float input, in order, over all of them together) along
    which check_grad with this `seed` takes its central difference, S(x ± εr). A function whose
    behaviour jumps (a loop's number of steps, a branch taken) has a meaningful difference only
    where it takes the same path at x − εr and x + εr: this is where to look."""
    rng = np.random.default_rng(seed + 1)
    r = [rng.standard_normal(np.shape(a)) for a in float_inputs]
    norm = np.sqrt(sum(float(np.sum(v * v)) for v in r)) or 1.0
    return [v / norm for v in r]


class _Case:
    """One check_grad call's arrays, vectors and traced programs. The output weights w have size 1
    along every axis that is symbolic at `symbolic_specs` (the same weights at every position of
    a batch), so one w serves the static and the symbolic models."""

    def __init__(self, fn, arrays: list[np.ndarray], order: int, seed: int, symbolic_specs: list[Spec] | None):
        self.fn, self.order, self.arrays = fn, order, arrays
        self.positions = _float_positions(arrays)
        if not self.positions:
            raise ValueError("check_grad needs at least one floating-point input")
        out_types = _output_types(fn, arrays)
        if not out_types:
            raise ValueError("check_grad needs a function with at least one floating-point output")
        shapes = [t.shape for t in out_types]
        for k, shape in enumerate(shapes):
            if not all(isinstance(d, int) for d in shape):
                raise ValueError(f"check_grad needs outputs whose size the inputs' shapes decide; output {k} has shape "
                                 f"{shape}, decided by the values (a loop's number of steps)")
        if symbolic_specs is not None:
            shapes = [tuple(d if isinstance(s, int) else 1 for d, s in zip(t.shape, sym.shape))
                      for t, sym in zip(out_types, _output_types(fn, symbolic_specs))]
        rng = np.random.default_rng(seed)
        self.ws = [rng.standard_normal(shape) for shape in shapes]
        float_arrays = [arrays[i] for i in self.positions]
        self.r = direction(float_arrays, seed)
        rng = np.random.default_rng(seed + 2)
        self.vs = [rng.standard_normal(a.shape) for _ in range(order - 1) for a in float_arrays]

    def program(self, value_only: bool = False):
        return _program(self.fn, len(self.arrays), self.positions, len(self.ws), self.order, value_only=value_only)

    def args(self, xs, dtype) -> list[np.ndarray]:
        vectors = self.ws + self.vs + self.r
        return [np.asarray(x, dtype) if is_float(x.dtype) else x for x in xs] + \
            [np.asarray(v, dtype) for v in vectors]

    def vector_specs(self, x_specs: list[Spec], dtype) -> list[Spec]:
        """Specs of the w's (static), and of the v's and r (their inputs')."""
        float_specs = [spec(x_specs[i].shape, dtype) for i in self.positions]
        return [spec(w.shape, dtype) for w in self.ws] + float_specs * self.order


def symbolic_specs(fn: Callable, inputs: Sequence[ArrayLike], symbolic: Any = "auto",
                   dtype: Any = None) -> list[Spec] | None:
    """The specs check_grad's symbolic check traces `fn` at (None for none), float inputs in
    `dtype` (by default what check_grad runs them in): `symbolic` as check_grad takes it. With
    "auto" a function none of whose axes can be symbolic gets none; with True that is an error."""
    if symbolic is False:
        return None
    arrays = [np.asarray(a) for a in inputs]
    dtype = dtype or _lowered_dtype(fn, arrays)
    if symbolic not in (True, "auto"):
        return [s if isinstance(s, Spec) else spec(np.shape(s), dtype) for s in symbolic]
    errors = []
    for specs in _symbolic_candidates(arrays, dtype):
        try:
            _output_types(fn, specs)
        except (GcompileError, TypeError, ValueError, IndexError) as err:   # (Python arithmetic on a symbolic size)
            errors.append(f"{specs}: {err}")
            continue
        return specs
    if symbolic is True and errors:
        raise AssertionError("check_grad could not trace the function with a symbolic axis (" + "; ".join(errors)
                             + "): pass symbolic=[specs...] naming the axes that may be symbolic, or "
                               "symbolic=False for a function that needs static shapes")
    return None


def _report(what: str, where: str, numeric: float, analytic: float, allowed: float, detail: str) -> AssertionError:
    return AssertionError(f"{what} check failed on {where}: central difference {numeric:.10g} vs gradient "
                          f"{analytic:.10g} (difference {abs(numeric - analytic):.3g}, allowed {allowed:.3g}; "
                          f"{detail})")


def _reference_check(case: _Case, eps: float, rtol: float, atol: float, what: str, lowered: bool):
    """The float64 difference and the reference evaluator's derivative; returns (numeric,
    analytic, scale) with scale = Σ|∂S/∂xᵢ|·|rᵢ|."""
    args = case.args(case.arrays, np.float64)
    graph = trace(case.program(), args).graph
    if lowered and any(is_random(n) for n in graph.nodes.values()):
        raise AssertionError("check_grad compares ONNX Runtime's model with the reference evaluator, whose random "
                             "draws differ: for a function that draws random numbers pass lowered=False, or give "
                             "the draws a key (F.dropout(..., key=k), gc.random_key), which draws the same on both")
    values = evaluate(graph, args)
    analytic, grads = float(values[1]), values[2:]
    scale = sum(float(np.sum(np.abs(g) * np.abs(v))) for g, v in zip(grads, case.r))
    value_graph = trace(case.program(value_only=True), args).graph

    def shifted(delta):
        xs = list(args)
        for i, v in zip(case.positions, case.r):
            xs[i] = args[i] + delta * v
        return float(evaluate(value_graph, xs)[0])

    numeric = (shifted(eps) - shifted(-eps)) / (2 * eps)
    allowed = atol + rtol * max(abs(numeric), abs(analytic))
    if not abs(numeric - analytic) <= allowed:
        raise _report(what, "the reference evaluator (float64)", numeric, analytic, allowed, f"eps={eps}")
    return numeric, analytic, scale


def _lowered_check(case: _Case, x_specs: list[Spec], dtype, target: str, numeric: float, scale: float,
                   rtol: float, atol: float, what: str, where: str, value: tuple[float, float] | None) -> None:
    """⟨∇S, r⟩ from the ONNX model ONNX Runtime runs (in `dtype`, lowered for `target`), traced at
    x_specs; the model gives S too, so that the function's own forward is lowered and run, and at
    order 1 S is compared with `value` (the reference's S and Σ|w|·|f(x)|, its rounding scale)."""
    from .runtime import compile
    program = case.program()

    def value_and_derivative(*args):
        return program(*args)[:2]
    args = case.args(case.arrays, dtype)
    cf = compile(value_and_derivative, *x_specs, *case.vector_specs(x_specs, dtype), provider="cpu", target=target)
    got_value, got = (float(v) for v in cf.run_flat(*args))
    allowed = atol + rtol * (scale + abs(numeric))
    if not abs(numeric - got) <= allowed:
        raise _report(what, f"ONNX Runtime's {np.dtype(dtype).name} model for the {target} target {where}",
                      numeric, got, allowed, f"terms of size {scale:.3g}")
    if value is not None and not abs(value[0] - got_value) <= atol + rtol * value[1]:
        raise AssertionError(f"the function's value Σ w·f(x) on ONNX Runtime's {np.dtype(dtype).name} model for the "
                             f"{target} target {where} is {got_value:.10g}, the reference evaluator's {value[0]:.10g} "
                             f"(allowed {atol + rtol * value[1]:.3g})")


def _weighted_value(case: _Case) -> tuple[float, float] | None:
    """(Σ w·f(x), Σ|w|·|f(x)|) on the reference evaluator in float64, None where f(x) is not finite."""
    graph = trace(lambda *xs: _float_leaves(case.fn(*xs)), case.arrays).graph
    outs = [np.asarray(o, np.float64) for o in evaluate(graph, case.arrays)]
    if not all(np.isfinite(o).all() for o in outs):
        return None
    return (sum(float(np.sum(w * o)) for w, o in zip(case.ws, outs)),
            sum(float(np.sum(np.abs(w) * np.abs(o))) for w, o in zip(case.ws, outs)))


def _lowered_dtype(fn, arrays) -> Any:
    """float32, what models run in, unless the function takes float64 only (an imported float64
    model): then float64."""
    try:
        _output_types(fn, [spec(a.shape, np.float32 if is_float(a.dtype) else a.dtype) for a in arrays])
    except GcompileError:
        return np.float64
    return np.float32


def check_grad(fn: Callable, inputs: Sequence[ArrayLike], *, order: int = 1, eps: float = 1e-5,
               rtol: float = 1e-5, atol: float = 1e-7, seed: int = 0, lowered: bool = True,
               symbolic: Any = "auto", targets: Sequence[str] = ("ort-cpu", "portable")) -> tuple[float, float]:
    """Check the order-th derivative of `fn` (any outputs) at `inputs` (arrays; float ones are
    promoted to float64 for the reference) against a float64 central difference.

    order=2 checks the gradient of the gradient (as check_double_grad), order=3 the next one.
    With lowered=True (the default) the same derivative is also taken from the float32 ONNX
    model that ONNX Runtime runs, at the inputs' shapes and again with one axis a symbol: the
    first input's axis 0, with the other inputs' axes of that length, or the next axis where
    that does not trace (symbolic="auto": none where no axis traces; True: then an error).
    symbolic may instead be a list of specs (one per input, e.g. gc.spec(("n", 3))), or False.
    Each model is lowered for every one of `targets` (lowering/targets: the portable plain forms
    and ONNX Runtime's CPU strategies); a function that takes float64 only runs in float64.
    Returns the reference's (numeric, analytic) directional derivatives; raises AssertionError
    naming the evaluator or model that disagrees, with both numbers.
    """
    arrays = [np.asarray(a, np.float64) if is_float(np.asarray(a).dtype) else np.asarray(a) for a in inputs]
    dtype = _lowered_dtype(fn, arrays) if lowered else np.float32
    sym_specs = symbolic_specs(fn, arrays, symbolic if lowered else False, dtype)
    case = _Case(fn, arrays, order, seed, sym_specs)
    what = {1: "gradient", 2: "double-gradient"}.get(order, f"order-{order} gradient")
    numeric, analytic, scale = _reference_check(case, eps, rtol, atol, what, lowered)
    if lowered:
        static = [spec(a.shape, dtype if is_float(a.dtype) else a.dtype) for a in arrays]
        rtol_lowered, atol_lowered = (LOWERED_RTOL, max(atol, 1e-6)) if dtype == np.float32 else (rtol, atol)
        checks = [(static, "at static shapes")]
        value = _weighted_value(case) if order == 1 else None
        if sym_specs is not None and [t.shape for t in sym_specs] != [t.shape for t in static]:
            checks.append((sym_specs, "with symbolic sizes " + ", ".join(map(repr, sym_specs))))
        for target in targets:
            for specs, where in checks:
                _lowered_check(case, specs, dtype, target, numeric, scale, rtol_lowered, atol_lowered, what, where,
                               value)
    return numeric, analytic


def check_double_grad(fn: Callable, inputs: Sequence[ArrayLike], **kwargs: Any) -> tuple[float, float]:
    """check_grad of x ↦ ⟨∇S(x), v⟩ for a fixed random v: checks the double-backward graph."""
    return check_grad(fn, inputs, order=2, **kwargs)


def check_lowering(fn: Callable, inputs: Sequence[ArrayLike], *, rtol: float = 1e-4, atol: float = 1e-5,
                   provider: str = "cpu") -> list[np.ndarray]:
    """Run `fn` through ONNX and onnxruntime and compare with the reference evaluator on the same inputs.

    Also validates the model with onnx.checker (full_check) and that it uses ai.onnx ops only.
    Returns the onnxruntime outputs (flattened).
    """
    import onnx

    from .runtime import compile
    cf = compile(fn, *inputs, provider=provider)
    onnx.checker.check_model(cf.model, full_check=True)
    domains = {n.domain for n in cf.model.graph.node} - {"", "ai.onnx"}
    assert not domains, f"non-standard op domains in the model: {domains}"
    got = cf.run_flat(*inputs)
    expected = evaluate(cf.graph, list(inputs))
    for name, g, e in zip(cf.graph.output_names, got, expected):
        assert g.shape == e.shape, f"output {name}: onnxruntime shape {g.shape} vs reference {e.shape}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {name}")
    return got


def float64_model(proto):
    """A copy of the ONNX model `proto` computing in float64 where it computed in float32: its float32
    inputs, outputs, initializers, Constants (ConstantOfShape's default 0.0 too) and Cast targets
    (subgraphs included). For gradient checks of imported models written in float32: gcompile's
    float64 run of it (gc.load_onnx) tells a wrong translation from float32 rounding."""
    copy = type(proto)()
    copy.CopyFrom(proto)
    _graph_to_float64(copy.graph)
    return copy


def _tensor_to_float64(t) -> None:
    if t.data_type == TensorProto.FLOAT:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))


def _type_to_float64(type_proto) -> None:
    """A float32 tensor type, or the float32 tensors a sequence or optional type holds, as float64."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type" and type_proto.tensor_type.elem_type == TensorProto.FLOAT:
        type_proto.tensor_type.elem_type = TensorProto.DOUBLE
    elif kind == "sequence_type":
        _type_to_float64(type_proto.sequence_type.elem_type)
    elif kind == "optional_type":
        _type_to_float64(type_proto.optional_type.elem_type)


def _graph_to_float64(graph) -> None:
    for value in [*graph.input, *graph.output, *graph.value_info]:
        _type_to_float64(value.type)
    for t in graph.initializer:
        _tensor_to_float64(t)
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1))))  # its 0.0f
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                _tensor_to_float64(attr.t)
            elif attr.type == AttributeProto.TYPE_PROTO:       # Optional's type
                _type_to_float64(attr.tp)
            elif attr.type == AttributeProto.GRAPH:
                _graph_to_float64(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _graph_to_float64(g)
            elif attr.type == AttributeProto.INT and attr.name in ("to", "dtype", "output_datatype") \
                    and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.DOUBLE
            elif node.op_type == "Constant" and attr.name in ("value_float", "value_floats"):
                value = np.asarray(helper.get_attribute_value(attr), np.float64)
                attr.CopyFrom(helper.make_attribute("value", numpy_helper.from_array(value)))
