"""The tracing core: Tensor proxies and `apply`, which records one op into the current graph.

While a function is traced, its arguments are Tensors; every operation on them goes
through `apply`, which checks shapes with the op's rule and adds a node. Nothing is
computed: a Tensor has a type, never a value.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GcompileError, ShapeError, TraceError, UnsupportedError
from ..ir import dtypes
from ..ir.dims import format_shape, product
from ..ir.graph import Graph, Node, TensorType, ValueRef, tensor_type
from ..ir.registry import get_op
from .source import user_location


@dataclass
class _Frame:
    graph: Graph
    order: int = 0                      # gradient order of the nodes being recorded
    constants: dict = field(default_factory=dict)   # id(array) -> (array, Tensor): one node per closed-over array
    parent: _Frame | None = None        # for a loop body: the trace it is nested in, whose Tensors it captures
    captures: dict = field(default_factory=dict)    # parent's ValueRef -> (parent's Tensor, this graph's input)

    def capture(self, outer: Tensor) -> Tensor:
        """`outer`, a Tensor of the parent trace, as an input of this body graph (one per value)."""
        hit = self.captures.get(outer.ref)
        if hit is None:
            node = self.graph.add_node("input", [], {"name": f"captured_{len(self.captures)}", "type": outer.type},
                                       [outer.type])
            hit = self.captures[outer.ref] = (outer, Tensor(self.graph, node.out(0), outer.type))
        return hit[1]

    def forget_nodes(self, removed: list[Node]) -> None:
        """Drop the cached constants whose node was removed from the graph."""
        gone = {node.id for node in removed if node.op == "constant"}
        if not gone:   # the common case: don't walk the cache at every VJP rule
            return
        for key in [k for k, (_, t) in self.constants.items() if t.ref.node in gone]:
            del self.constants[key]


class _Stacks(threading.local):
    """Each thread's own stack of trace frames, so threads can trace different functions at once."""
    def __init__(self) -> None:
        self.frames: list[_Frame] = []


_STACKS = _Stacks()


def current_frame() -> _Frame:
    frames = _STACKS.frames
    if not frames:
        raise TraceError("gcompile ops can only be used on Tensors inside a function being traced "
                         "(gc.compile, gc.export or gcompile build)")
    return frames[-1]


@contextlib.contextmanager
def tracing(graph: Graph):
    frames = _STACKS.frames
    frames.append(_Frame(graph, 0, {}))
    try:
        yield graph
    finally:
        frames.pop()


@contextlib.contextmanager
def tracing_body(graph: Graph):
    """Record into `graph`, a loop body nested in the current trace: Tensors of the enclosing traces
    used inside become inputs of `graph` (see _Frame.capture), listed in the frame's `captures`."""
    frames = _STACKS.frames
    parent = current_frame()
    frame = _Frame(graph, parent.order, {}, parent)
    frames.append(frame)
    try:
        yield frame
    finally:
        frames.pop()


@contextlib.contextmanager
def recording_order(order: int):
    """Nodes recorded inside are tagged with this gradient order."""
    frame = current_frame()
    previous, frame.order = frame.order, order
    try:
        yield
    finally:
        frame.order = previous


class Tensor:
    """A traced value: its graph, the producing node's output, and its type (dtype, shape)."""
    __slots__ = ("graph", "ref", "type")
    __array_priority__ = 1000

    def __init__(self, graph: Graph, ref: ValueRef, type_: TensorType):
        self.graph, self.ref, self.type = graph, ref, type_

    # Operators, methods and numpy's hooks (__array_ufunc__, __array_function__) are installed at import
    # time from ops/methods.py's table, so this module needs no op library.
    if TYPE_CHECKING:   # declared for type checkers
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __pos__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __eq__(self, other: Any) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, other: Any) -> Tensor: ...  # type: ignore[override]
        def __and__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __getitem__(self, index: Any) -> Tensor: ...
        def reshape(self, *shape: Any) -> Tensor: ...
        def transpose(self, *axes: Any) -> Tensor: ...
        def flatten(self, start_axis: int = 1) -> Tensor: ...
        def squeeze(self, axis: Any = None) -> Tensor: ...
        def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def max(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def min(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def prod(self, axis: Any = None, keepdims: bool = False) -> Tensor: ...
        def astype(self, dtype: Any) -> Tensor: ...
        def exp(self) -> Tensor: ...
        def log(self) -> Tensor: ...
        def sqrt(self) -> Tensor: ...
        def tanh(self) -> Tensor: ...

        @property
        def T(self) -> Tensor: ...

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    @property
    def size(self):
        return product(self.shape)

    @property
    def node(self):
        return self.graph.nodes[self.ref.node]

    def __repr__(self) -> str:
        return f"Tensor({self.node.name}, {self.type})"

    __hash__ = object.__hash__

    def __bool__(self):
        raise TraceError(f"data-dependent control flow is not traceable: the truth value of {self!r} "
                         f"is only known at run time (at {user_location()}): for if/else, compute both and "
                         "pick with F.where(cond, a, b); for a while loop, gc.while_loop(cond_fn, body_fn, init) "
                         "(gc.fori_loop or gc.scan where the count is known)")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d Tensor")
        if not isinstance(self.shape[0], int):
            raise TraceError(f"len() of a Tensor whose first dim is symbolic ({self.shape[0]!r})")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __index__(self):
        raise TraceError(f"a traced Tensor cannot be used as a Python index (at {user_location()})")

    def __float__(self):
        raise TraceError(f"{self!r} has no value while tracing: float() and int() of a Tensor are only known "
                         f"at run time (at {user_location()}); keep computing with Tensors")

    __int__ = __float__

    def __array__(self, *args, **kwargs):
        raise TraceError(f"{self!r} has no value while tracing: it cannot be converted to a numpy array "
                         f"(at {user_location()}); use gcompile.functions instead of numpy on Tensors")


def _lift_array(value, dtype=None) -> Tensor:
    """A numpy array or Python scalar as a constant node (one node per distinct array object)."""
    frame = current_frame()
    if isinstance(value, np.ndarray) and dtype is None:
        hit = frame.constants.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
    arr = np.asarray(value, dtype=dtype)
    if arr.dtype not in dtypes.TRACED:
        raise TraceError(f"cannot use a value of type {type(value).__name__} (dtype {arr.dtype}) "
                         f"as a tensor (at {user_location()})")
    node = frame.graph.add_node("constant", [], {"value": arr}, [tensor_type(arr.dtype, arr.shape)],
                                order=frame.order, source=user_location())
    tensor = Tensor(frame.graph, node.out(0), node.outputs[0])
    if isinstance(value, np.ndarray) and dtype is None:
        frame.constants[id(value)] = (value, tensor)
    return tensor


def lift_named(value: np.ndarray, name: str) -> Tensor:
    """`value` as a constant node carrying `name` (a parameter's: its ONNX initializer keeps that
    name), cached like any lifted array; an array this trace already lifted keeps its node."""
    frame = current_frame()
    hit = frame.constants.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    node = frame.graph.add_node("constant", [], {"value": value, "name": name}, [tensor_type(value.dtype, value.shape)],
                                order=frame.order, source=user_location())
    tensor = Tensor(frame.graph, node.out(0), node.outputs[0])
    frame.constants[id(value)] = (value, tensor)
    return tensor


def as_tensor(value, dtype=None) -> Tensor:
    """A Tensor from a Tensor (unchanged), numpy array or Python scalar (a constant)."""
    if isinstance(value, Tensor):
        frame = current_frame()
        return value if value.graph is frame.graph else _captured(frame, value)
    return _lift_array(value, dtype)


def _captured(frame: _Frame, value: Tensor) -> Tensor:
    """A Tensor of an enclosing trace, captured by each loop body between that trace and `frame`."""
    bodies = []
    enclosing: _Frame | None = frame
    while enclosing is not None and enclosing.graph is not value.graph:
        bodies.append(enclosing)
        enclosing = enclosing.parent
    if enclosing is None:
        raise TraceError(f"{value!r} belongs to another traced function; Tensors cannot cross traces")
    for body in reversed(bodies):
        value = body.capture(value)
    return value


def apply_n(op_name: str, inputs: Sequence[Any], **attrs) -> list[Tensor]:
    """Record one application of a registered op; returns its outputs as Tensors. On a dtype ONNX
    Runtime has no kernel for (ir/dtypes.py), the op is recorded in the compute dtype between casts."""
    tensors = [as_tensor(x) for x in inputs]
    types = [t.type for t in tensors]
    try:
        how = dtypes.route(op_name, [t.dtype for t in types])
    except UnsupportedError as err:
        raise UnsupportedError(f"{err} (at {user_location()})") from None
    if how is not None:
        return _routed(op_name, tensors, attrs, *how)
    frame = current_frame()
    op = get_op(op_name)
    try:
        out_types = op.infer(types, **attrs)
    except ShapeError as err:
        shapes = ", ".join(f"{t.dtype.name}{format_shape(t.shape)}" for t in tensors)
        raise ShapeError(f"{op_name}: {err} (operands {shapes}; at {user_location()})") from None
    except GcompileError:
        raise
    node = frame.graph.add_node(op_name, [t.ref for t in tensors], attrs, out_types,
                                order=frame.order, source=user_location())
    return [Tensor(frame.graph, node.out(i), t) for i, t in enumerate(out_types)]


def _routed(op_name: str, tensors: list[Tensor], attrs: dict, narrow, wide, mode: str) -> list[Tensor]:
    """op_name recorded on the operands of dtype `narrow` cast to `wide` (dtypes.to_compute), its
    results cast back; the casts and the op itself are recorded by apply_n, which has kernels for them."""
    def cast(x, dtype):
        return x if x.dtype == dtype else apply_n("cast", [x], dtype=dtype)[0]

    def add(x, c):
        return apply_n("add", [x, as_tensor(c)])[0]
    widened = [dtypes.to_compute(t, mode, wide, cast, add) if t.dtype == narrow else t for t in tensors]
    outs = apply_n(op_name, widened, **attrs)
    index = dtypes.INDEX_OUTPUTS.get(op_name, set())
    return [dtypes.from_compute(y, narrow, mode, cast, add) if y.dtype == wide and i not in index else y
            for i, y in enumerate(outs)]


def apply(op_name: str, inputs: Sequence[Any], **attrs) -> Tensor:
    """Record a single-output op; returns its output Tensor."""
    outs = apply_n(op_name, inputs, **attrs)
    assert len(outs) == 1, op_name
    return outs[0]
