"""gc.load_onnx: an existing ONNX model as a traceable, differentiable callable.

    f = gc.load_onnx("model.onnx")
    def loss(x, w):
        y = f(x, params={"fc.weight": w})     # inlines the model's graph into this trace
        return F.sum(y * y)

Calling the model while tracing translates each ONNX node into gcompile ops (see inline.py and
the translators/ package), so gc.grad differentiates it to any order, w.r.t. its inputs, its
weights (passed through `params`) or both. Initializers not replaced stay constants.

A model is untrusted input. Before converting anything, load_onnx refuses (with a GcompileError
whose message starts with the model's path, "the given bytes" or "the given ModelProto" and
names the offending piece) an empty file, bytes that do not parse, a model breaking the rules
validate.py lists (single assignment, negative dims, onnx.checker's node check, each tensor
storing exactly the bytes it declares), and external data that leaves the model's folder, has
a NUL byte in its location or holds other than the bytes its initializer declares (checked
before it is read). Errors found while the graph is translated carry the same prefix, and the
values computed at import time are bounded (inline.py): a few hundred bytes declaring 10^10
elements import as ops the runtime computes.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto
from onnx.external_data_helper import load_external_data_for_model, uses_external_data

from ..errors import GcompileError, InputError, UnsupportedError
from ..frontend.spec import Spec, spec
from ..frontend.tensor import Tensor, current_frame
from ..ir.dims import astype_hint, dtype_name, format_shape
from ..runtime.modelfile import check_seal, external_data_file, parse, verify
from .inline import Inliner
from .table import OptionalValue, TensorSequence, np_dtype
from .validate import check_model, declared_bytes, size_mismatch, tensor_array

__all__ = ["load_onnx"]


def load_onnx(model: str | os.PathLike | bytes | bytearray | onnx.ModelProto) -> OnnxModel:
    """An ONNX model (a path, serialized bytes or an onnx.ModelProto) as a callable that inlines
    its graph into the function being traced.

    Initializers stored as external data are read from files beside the model (give its path);
    a location outside the model's folder (absolute, `..`, or a symlink out) is refused. Where
    a gcompile build's manifest.json beside the model lists it, the file and its external data
    must have the sha256 the manifest records; a file gcompile saved, or its bytes, must match its
    own seal.
    """
    folder = None                # where external data is read from: beside a model given by its path
    if isinstance(model, onnx.ModelProto):
        source, proto = "the given ModelProto", model
    elif isinstance(model, (bytes, bytearray)):
        source = "the given bytes"
        if not model:
            raise GcompileError(f"{source}: empty, not an ONNX model")
        check_seal(source, model)       # bytes a gcompile file held carry its seal: checked as the file's would be
        proto = _parse(lambda: onnx.load_from_string(bytes(model)), source)
    elif isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
        if not os.path.isfile(source):
            raise GcompileError(f"{source}: no such ONNX file")
        with open(source, "rb") as fh:
            data = fh.read()
        if not data:
            raise GcompileError(f"{source}: the file is empty (0 bytes), not an ONNX model")
        proto = parse(source, data)
        verify(source, data, proto)
        del data     # the file's bytes: gone before the initializers become arrays (one copy fewer at once)
        folder = os.path.dirname(os.path.abspath(source))
    else:
        raise GcompileError(f"load_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    with naming(source):
        check_model(proto)
        if folder is not None:
            _load_external_data(proto, folder)
        if any(uses_external_data(t) for t in _tensors(proto.graph)):
            raise GcompileError("this model keeps initializers in external data files: pass its path to "
                                "gc.load_onnx so they are read from the model's folder")
        return OnnxModel(proto, source, owned=not isinstance(model, onnx.ModelProto))


@contextlib.contextmanager
def naming(source: str):
    """Put `source` (where the model came from) in front of the GcompileErrors raised in the block."""
    try:
        yield
    except GcompileError as err:
        raise type(err)(f"{source}: {err}") from None


def _parse(load, what: str):
    try:
        return load()
    except Exception as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GcompileError(f"{what} is not a valid ONNX model ({reason})") from None


def _tensors(graph):
    """Every TensorProto of a graph: initializers and tensor attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == AttributeProto.GRAPH:
                yield from _tensors(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _tensors(g)


def _load_external_data(proto, folder: str) -> None:
    """Read external initializers, refusing a location that is not a relative path inside the
    model's folder (external_data_file) and, before reading it, a file part whose size differs
    from what its initializer declares."""
    external = [t for t in _tensors(proto.graph) if uses_external_data(t)]
    for tensor in external:
        what = f"initializer {tensor.name!r}"
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = external_data_file(folder, location, what)
        if not os.path.isfile(target):
            raise GcompileError(f"the external data file {location!r} of {what} is missing from {folder}")
        nbytes, dtype = declared_bytes(tensor, what)
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        except ValueError:
            raise GcompileError(f"{what}: the offset or length of its external data is not an integer") from None
        held = max(os.path.getsize(target) - offset, 0) if offset >= 0 else -1
        held = min(held, length) if "length" in info else held
        if held != nbytes:
            raise size_mismatch(tensor, what, nbytes, dtype, f"its external data {location!r} holds {held} bytes")
    if external:
        try:
            load_external_data_for_model(proto, folder)
        except Exception as err:
            raise GcompileError(f"cannot read its external data ({err})") from None


def _symbol(name: str) -> str:
    """A dim_param (or a made-up name) as a gcompile symbol: a Python identifier."""
    name = re.sub(r"\W", "_", name)
    return name if name and not name[0].isdigit() else f"d_{name}"


_KINDS = {"sequence_type": "a sequence", "map_type": "a map", "optional_type": "an optional",
          "sparse_tensor_type": "a sparse tensor"}


def _tensor_type(what: str, type_proto):
    """The tensor type of a graph input; an UnsupportedError naming what it is for any other kind."""
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedError(f"{what} is {_KINDS.get(kind, 'of no declared type')}, not a tensor: gcompile's "
                               "model inputs are tensors, sequences of tensors and optionals")
    return type_proto.tensor_type


class OnnxModel:
    """A loaded ONNX model; call it on Tensors while tracing (see load_onnx).

    `params`: name -> numpy array of its initializers. `input_names`, `output_names`: the
    graph's (initializers listed as inputs by older exporters count as params).
    `input_specs()`: gc.Specs from the declared inputs, dim_params as symbolic dims. `proto`: the
    ModelProto; for one this object `owned` (read from a path or bytes) without its graph's
    initializers, whose values `params` holds: the weights are kept once, not also as the
    protobuf's bytes (a ModelProto's memory is freed only with the whole message).
    """

    def __init__(self, proto: onnx.ModelProto, source: str = "the given ModelProto", owned: bool = False) -> None:
        graph = proto.graph
        if graph.sparse_initializer:
            raise UnsupportedError("sparse initializers are not supported")
        self.source = source
        self.opsets = {o.domain: o.version for o in proto.opset_import}
        self._params = {t.name: tensor_array(t, f"initializer {t.name!r}") for t in graph.initializer}
        if owned:    # (a part of a message, such as an input's ValueInfoProto, keeps the whole message's memory)
            del graph.initializer[:]
            proto = onnx.load_from_string(proto.SerializeToString())
        self.proto = proto
        self._inputs = [v for v in proto.graph.input if v.name not in self._params]
        self.input_names = [v.name for v in self._inputs]
        self.output_names = [v.name for v in proto.graph.output]

    def __repr__(self) -> str:
        return (f"<OnnxModel {self.proto.graph.name!r}: inputs {self.input_names}, outputs {self.output_names}, "
                f"{len(self._params)} params>")

    @property
    def params(self) -> dict[str, np.ndarray]:
        return dict(self._params)

    def input_specs(self) -> list[Spec]:
        """One gc.spec per model input from its declared type (symbolic dims from dim_param;
        a dim with neither value nor name gets a made-up symbol)."""
        with naming(self.source):
            return [self._spec(v) for v in self._inputs]

    def _spec(self, value_info) -> Spec:
        kind = value_info.type.WhichOneof("value")
        if kind in ("sequence_type", "optional_type"):
            raise UnsupportedError(f"input {value_info.name!r} is {_KINDS[kind]}, not a tensor: it has no gc.spec; "
                                   "call the model inside a traced function with a list of tensors for a sequence, "
                                   "a tensor or None for an optional")
        tt = _tensor_type(f"input {value_info.name!r}", value_info.type)
        dtype = np_dtype(tt.elem_type, f"input {value_info.name!r}")
        if not tt.HasField("shape"):
            raise GcompileError(f"input {value_info.name!r} declares no shape; give a gc.spec for it instead")
        shape = tuple(d.dim_value if d.HasField("dim_value") else
                      _symbol(d.dim_param or f"{value_info.name}_{axis}") for axis, d in enumerate(tt.shape.dim))
        return spec(shape, dtype)

    def __call__(self, *inputs: Any, params: dict[str, Any] | None = None,
                 overrides: dict | None = None) -> Tensor | tuple[Tensor, ...]:
        """Inline the model on `inputs`; `params` replaces initializers by name, `overrides` maps ONNX op
        types to translators (importer.table.Translator) used instead of the registered ones."""
        current_frame()    # a clear error when called outside a traced function
        with naming(self.source):
            return self._inline(inputs, dict(params or {}), overrides)

    def _inline(self, inputs, params: dict, overrides: dict | None = None):
        if len(inputs) != len(self.input_names):
            raise InputError(f"the ONNX model takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                             f"got {len(inputs)}")
        unknown = sorted(set(params) - set(self._params))
        if unknown:
            raise InputError(f"params {unknown} are not initializers of the model (it has: "
                             f"{', '.join(self._params) or 'none'})")
        env = {name: self._checked(f"param {name!r}", params[name], value.dtype, value.shape, exact=True)
               if name in params else value for name, value in self._params.items()}
        for value_info, value in zip(self._inputs, inputs):
            env[value_info.name] = self._input(f"input {value_info.name!r}", value_info.type, value)
        inliner = Inliner(self.opsets, overrides)
        for value in env.values():
            for leaf in value.items if isinstance(value, TensorSequence) else [value]:
                inliner.note_dims(leaf)
        inliner.run(self.proto.graph, env)
        outs = [self._output(inliner, name, env[name]) for name in self.output_names]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _input(self, what: str, type_proto, value):
        """The value of a graph input: a tensor; a sequence (a list or tuple of tensors, as exporters write
        a list argument); an optional (None when absent)."""
        kind = type_proto.WhichOneof("value")
        if kind == "optional_type":
            inner = type_proto.optional_type.elem_type
            held = "sequence" if inner.WhichOneof("value") == "sequence_type" else "tensor"
            return OptionalValue(None if value is None else self._input(what, inner, value), held)
        if kind == "sequence_type":
            if not isinstance(value, (list, tuple)):
                raise InputError(f"{what} is a sequence of tensors: pass a list of them, got {type(value).__name__}")
            element = type_proto.sequence_type.elem_type
            return TensorSequence(self._input(f"{what}[{i}]", element, v) for i, v in enumerate(value))
        tensor_type = _tensor_type(what, type_proto)
        shape = tuple(d.dim_value if d.HasField("dim_value") else "?" for d in tensor_type.shape.dim) \
            if tensor_type.HasField("shape") else None
        return self._checked(what, value, np_dtype(tensor_type.elem_type, what), shape, exact=False)

    @staticmethod
    def _output(inliner: Inliner, name: str, value):
        """A graph output as the call returns it: a Tensor, or a list of them for a sequence."""
        if isinstance(value, OptionalValue):
            if value.element is None:
                raise UnsupportedError(f"output {name!r} is an empty optional: a traced function returns tensors")
            value = value.element
        if isinstance(value, TensorSequence):
            return [inliner.materialize(v) for v in value.items]
        return inliner.materialize(value)

    @staticmethod
    def _checked(what: str, value, dtype, shape, exact: bool):
        """A Tensor or numpy array of `dtype` whose shape fits `shape` (symbolic dims match any size)."""
        if not isinstance(value, Tensor):
            value = np.asarray(value, dtype=dtype if not isinstance(value, np.ndarray) else None)
        if np.dtype(value.dtype) != dtype:
            got = np.dtype(value.dtype)
            raise InputError(f"{what}: expected dtype {dtype.name}, got {dtype_name(got)}{astype_hint(dtype, got)}")
        if shape is None:
            return value
        fits = len(value.shape) == len(shape) and all(
            a == b or (not exact and (isinstance(a, str) or isinstance(b, str))) for a, b in zip(value.shape, shape))
        if not fits:
            raise InputError(f"{what}: expected shape {format_shape(shape)}, got {format_shape(tuple(value.shape))}")
        return value

