"""LowerContext: what an op's `lower` rule uses to emit ONNX nodes.

It hands out readable unique names, turns numpy constants into initializers, and builds
int64 shape tensors for shapes with symbolic dims (from Shape slices of the graph inputs
that carry each symbol), so symbolic dims stay symbolic in the exported model.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import helper, numpy_helper

from ..errors import LoweringError
from ..ir import dims
from ..ir.graph import Graph, Node

# onnxruntime's CPU provider has no float64 kernel for these (ARCHITECTURE.md §10).
NO_FLOAT64_CPU_KERNEL = frozenset({"Conv", "ConvTranspose", "AveragePool", "GlobalAveragePool", "Erf", "Tan", "Asin",
                                   "Acos", "Atan"})


class LowerContext:
    def __init__(self, graph: Graph, opset: int, input_names: list[str], reserved: Sequence[str] = ()):
        self.graph, self.opset = graph, opset
        self.nodes: list = []
        self.initializers: list = []
        self.float64_ops: list[str] = []      # "Conv in conv_3 (model.py:12)" where the CPU provider lacks a kernel
        self._const_cache: dict = {}
        self._unnamed = 0                     # unnamed initializers so far: const_0, const_1, ...
        self._shape_cache: dict = {}
        self._used_names: set[str] = set(input_names) | set(reserved)
        self._current: Node | None = None
        self._symbol_sources: dict[str, tuple[str, int]] = {}
        for name, ref in zip(input_names, graph.inputs):
            for axis, d in enumerate(graph.type_of(ref).shape):
                if isinstance(d, str) and "*" not in d:
                    self._symbol_sources.setdefault(d, (name, axis))

    # -- names -------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self._used_names:
            name, k = f"{hint}_{k}", k + 1
        self._used_names.add(name)
        return name

    def begin(self, node: Node | None) -> None:
        self._current = node

    # -- emission ----------------------------------------------------------------------------
    def emit(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs):
        """Add one ai.onnx node; returns its output name (or list of names when n_out > 1)."""
        owner = self._current
        hint = owner.name if owner is not None else op_type.lower()
        outputs = [self.fresh(hint) for _ in range(n_out)]
        doc = ""
        if owner is not None:
            doc = f"{owner.source} order={owner.order}" if owner.source else f"order={owner.order}"
            if op_type in NO_FLOAT64_CPU_KERNEL and self._touches_float64(owner):
                self.float64_ops.append(f"{op_type} in {owner.name}" + (f" ({owner.source})" if owner.source else ""))
        node = helper.make_node(op_type, list(inputs), outputs, name=outputs[0], doc_string=doc or None,
                                **{k: v for k, v in attrs.items() if v is not None})
        self.nodes.append(node)
        return outputs[0] if n_out == 1 else outputs

    def pad(self, x: str, begins: Sequence[int], ends: Sequence[int], fill: str = "", mode: str = "constant") -> str:
        """An ONNX Pad of every axis of x (`begins`/`ends` hold one amount per axis). Its `axes`
        input lists every axis, in order: a partial list is permuted wrongly by onnxruntime's
        transpose optimizer (1.31), and with any `axes` input onnxruntime's Pad_Fusion leaves
        the Pad alone; that rule would merge zero padding into a following MaxPool, whose pads
        count as -inf, or into an AveragePool, which then refuses pads as large as its kernel."""
        rank = len(begins)
        return self.emit("Pad", [x, self.int64s([*begins, *ends]), fill, self.int64s(range(rank))], mode=mode)

    def is_read(self, node: Node, index: int) -> bool:
        """Whether output `index` of `node` is a graph output or another node's operand (ops with
        optional outputs emit them only then)."""
        ref = node.out(index)
        return ref in self.graph.outputs or any(ref in c.inputs for c in self.graph.consumers(node.id))

    def _touches_float64(self, node: Node) -> bool:
        types = [self.graph.type_of(r) for r in node.inputs] + node.outputs
        return any(t.dtype == np.float64 for t in types)

    def const(self, value, dtype=None, name: str | None = None) -> str:
        """An initializer holding `value`, deduplicated by content; a named one (a parameter) is
        its own initializer, called `name` where that is free."""
        arr = np.asarray(value, dtype=dtype)
        arr = np.ascontiguousarray(arr).reshape(arr.shape)   # ascontiguousarray makes 0-d arrays 1-d
        key = (arr.dtype.str, arr.shape, arr.tobytes(), name)   # a copy of a named constant (recompute) shares it
        emitted = self._const_cache.get(key)
        if emitted is None:
            emitted = self.fresh(name if name is not None else f"const_{self._unnamed}")
            self._unnamed += name is None
            self.initializers.append(numpy_helper.from_array(arr, emitted))
            self._const_cache[key] = emitted
        return emitted

    def int64s(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64).reshape(-1))

    def shape_tensor(self, shape) -> str:
        """A 1-D int64 tensor holding `shape`, computed at run time where dims are symbolic."""
        shape = tuple(shape)
        if dims.is_static(shape):
            return self.int64s(shape)
        if shape in self._shape_cache:
            return self._shape_cache[shape]
        saved, self._current = self._current, None
        parts = [self.int64s([d]) if isinstance(d, int) else self._dim_tensor(d) for d in shape]
        name = self.emit("Concat", parts, axis=0) if len(parts) > 1 else parts[0]
        self._current = saved
        self._shape_cache[shape] = name
        return name

    def _dim_tensor(self, dim) -> str:
        key = ("dim", dim)
        if key in self._shape_cache:
            return self._shape_cache[key]
        if "*" not in dim:
            if dim not in self._symbol_sources:
                raise LoweringError(f"symbolic dim {dim!r} does not appear in any graph input's shape")
            source, axis = self._symbol_sources[dim]
            name = self.emit("Shape", [source], start=axis, end=axis + 1)
        else:
            factors = dim.split("*")
            name = self.int64s([int(factors[0])]) if factors[0].isdigit() else self._dim_tensor(factors[0])
            for f in factors[1:]:
                other = self.int64s([int(f)]) if f.isdigit() else self._dim_tensor(f)
                name = self.emit("Mul", [name, other])
        self._shape_cache[key] = name
        return name
