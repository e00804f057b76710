"""What gc.load_onnx checks in an ONNX model before it converts or allocates anything from it.

A model file is untrusted input: a few hundred bytes can declare a terabyte-sized tensor, name a
tensor twice or carry a node the ONNX schema forbids. Each check raises a GcompileError naming the
offending initializer, value, node or tensor (load.py puts where the model came from in front):

- every text field (names, attributes' strings) is valid UTF-8 (protobuf hands over bytes otherwise);
- the model has a graph with outputs, each computed by a node or given as an input or initializer;
- no tensor is written twice (by two nodes, or by a node and a graph input or initializer: the
  single-assignment rule, subgraphs included) and no initializer is given twice;
- no declared type (graph inputs, outputs, value_info) and no tensor has a negative dim, or more
  elements than an int64 counts;
- graphs nest at most MAX_NESTING deep (loop bodies and If branches inside each other: a file
  nesting them thousands deep would exhaust the recursion of everything that reads it);
- every node of an op gcompile translates, at any depth, passes onnx.checker's node check (its
  schema: each required attribute present, every attribute of the type the schema declares, so a
  loop's body is a graph and its counts integers; input and output counts; the sizes of tensor
  attributes). A node holding subgraphs (If, Loop, Scan) is checked with its graphs set aside,
  as the checker would otherwise check them without the names they read from outside, and the
  nodes inside are checked in turn; attributes ONNX defines as 0 or 1 (FLAGS) hold 0 or 1;
- every tensor (initializers, and tensor attributes such as a Constant's value when translated)
  stores exactly the bytes its shape and dtype declare, checked before numpy sees it
  (`tensor_array`), so a tensor declaring 10^12 elements backed by 8 bytes is refused, not allocated.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import onnx.checker
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from ..errors import GcompileError
from .table import DOMAINS, PACKED, TRANSLATORS, check_dtype, np_dtype

MAX_NESTING = 16     # graphs inside graphs; real models nest two or three
MAX_ELEMENTS = 2 ** 63 - 1   # in one tensor: sizes are int64 in ONNX and its runtimes
# integer attributes the ONNX operators define as 0 or 1: runtimes read other values differently
# (ONNX Runtime's reductions keep dims only for keepdims == 1, a translator testing truth for any
# nonzero value), so a file holding one computes other numbers on each: it is refused
FLAGS = frozenset({
    "allowzero", "align_corners", "ceil_mode", "center_point_box", "count_include_pad", "detect_negative",
    "detect_positive", "exclusive", "fmod", "input_forget", "interleaved", "is_causal", "keepdims", "largest",
    "new_axis", "noop_with_empty_axes", "onesided", "periodic", "reverse", "select_last_index", "sorted",
    "training_mode", "transA", "transB", "upper"})


def node_name(node) -> str:
    """How messages name an ONNX node: its name, else its first output."""
    return node.name or next((o for o in node.output if o), "(unnamed)")


def node_label(node) -> str:
    return f"node {node_name(node)!r} ({node.op_type})"


def check_model(proto) -> None:
    """Refuse a ModelProto that breaks one of the rules in the module docstring (tensor sizes are
    checked as each tensor is converted, by tensor_array, once external data is read)."""
    if not proto.HasField("graph"):
        raise GcompileError("it has no graph, so it is not an ONNX model")
    _check_nesting(proto.graph)   # first: the checks below recurse into nested graphs
    bad_text = _bad_text(proto)
    if bad_text:
        raise GcompileError(f"{bad_text} is not valid UTF-8 text")
    if not proto.graph.output:
        raise GcompileError("its graph declares no outputs")
    checker = onnx.checker.C.CheckerContext()
    checker.ir_version = proto.ir_version or onnx.IR_VERSION
    checker.opset_imports = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
    _check_graph(proto.graph, {}, checker)


def _subgraphs(node) -> list:
    return [g for a in node.attribute for g in ([a.g] if a.type == AttributeProto.GRAPH else a.graphs)]


def _check_nesting(graph) -> None:
    """Refuse graphs nested more than MAX_NESTING deep (walked without recursion: the file is not
    trusted yet)."""
    stack = [(graph, 0)]
    while stack:
        g, depth = stack.pop()
        for node in g.node:
            inner = _subgraphs(node)
            if inner and depth + 1 > MAX_NESTING:
                raise GcompileError(f"{node_label(node)} holds graphs nested more than {MAX_NESTING} deep (loop "
                                    "bodies and If branches inside each other); gcompile imports at most "
                                    f"{MAX_NESTING} levels")
            stack.extend((sub, depth + 1) for sub in inner)


def _bad_text(message) -> str | None:
    """The first string field of `message` or the messages in it that is not UTF-8 text (named as
    Type.field 'value'), else None. Repeated numeric fields, such as tensor data, are not visited."""
    for field, value in message.ListFields():
        if field.type not in (field.TYPE_STRING, field.TYPE_MESSAGE):
            continue
        single = isinstance(value, (str, bytes)) or hasattr(value, "ListFields")   # else a repeated field
        for item in [value] if single else value:
            if field.type == field.TYPE_MESSAGE:
                bad = _bad_text(item)
                if bad:
                    return bad
            elif not isinstance(item, str):
                return f"{message.DESCRIPTOR.name}.{field.name} {item!r}"
    return None


def _check_graph(graph, outer: dict, checker) -> None:
    written = dict(outer)         # tensor name -> how a second writer's message ends
    for tensor in graph.initializer:
        if tensor.name in written:
            raise GcompileError(f"initializer {tensor.name!r} is given twice")
        written[tensor.name] = "is already an initializer"
        _check_dims(tensor.dims, f"initializer {tensor.name!r}")
    for value in graph.input:
        written.setdefault(value.name, "is already a graph input")   # older exporters list initializers as inputs
    for kind, values in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for value in values:
            if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
                _check_dims([d.dim_value for d in value.type.tensor_type.shape.dim], f"{kind} {value.name!r}")
    for node in graph.node:
        _check_node(node, written, checker)
        for name in filter(None, node.output):
            if name in written:
                raise GcompileError(f"tensor {name!r} is written by {node_label(node)} but {written[name]} (an ONNX "
                                    "graph assigns each tensor once)")
            written[name] = f"already by {node_label(node)}"
    for value in graph.output:
        if value.name not in written:
            raise GcompileError(f"output {value.name!r} of graph {graph.name!r} is computed by no node")


def _check_node(node, written: dict, checker) -> None:
    for graph in _subgraphs(node):
        _check_graph(graph, written, checker)
    if node.domain not in DOMAINS or node.op_type not in (*TRANSLATORS, "If"):
        return                   # other ops are refused when translated, with the supported ones listed
    if node.domain or _subgraphs(node):
        # the checker knows the default domain by its empty name only, and would check a subgraph
        # without the names it reads from outside: each graph is checked here, an empty one there
        node = _copy_setting_graphs_aside(node)
    try:
        onnx.checker.check_node(node, checker)
    except onnx.checker.ValidationError as err:
        raise GcompileError(f"{node_label(node)} is not valid ONNX: {str(err).strip().splitlines()[0]}") from None
    for attr in node.attribute:
        if attr.name in FLAGS and attr.type == AttributeProto.INT and attr.i not in (0, 1):
            raise GcompileError(f"{node_label(node)} is not valid ONNX: its attribute {attr.name!r} is {attr.i}, "
                                "where ONNX allows 0 or 1")


def _copy_setting_graphs_aside(node):
    """A copy of `node` in the default domain's empty name, each graph it holds replaced by an empty one."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.domain = ""
    for attr in copy.attribute:
        if attr.HasField("g"):
            attr.g.CopyFrom(onnx.GraphProto(name=attr.g.name or "body"))
        for g in attr.graphs:
            g.CopyFrom(onnx.GraphProto(name=g.name or "body"))
    return copy


def _check_dims(dims, what: str) -> None:
    if any(d < 0 for d in dims):
        raise GcompileError(f"{what} declares a negative dim in its shape {tuple(dims)}")
    if math.prod(dims) > MAX_ELEMENTS:
        raise GcompileError(f"{what} declares shape {tuple(dims)}: {math.prod(dims)} elements, more than any "
                            f"runtime counts (2**63 - 1)")


@functools.cache
def takes_sequence(op_type: str, opset: int, index: int) -> bool:
    """Whether input `index` of an ai.onnx op at `opset` may be a sequence of tensors (its schema's
    type constraint allows seq(...)); False where onnx knows no such op or input."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    formal = schema.inputs[min(index, len(schema.inputs) - 1)] if schema.inputs else None
    if formal is None or index >= len(schema.inputs) and formal.option != formal.option.Variadic:
        return False
    allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == formal.type_str),
                   [formal.type_str])
    return any("seq(" in t for t in allowed)


def declared_bytes(tensor, what: str) -> tuple[int, np.dtype]:
    """The bytes a tensor's shape and dtype declare (Python ints: never overflows), and its dtype."""
    _check_dims(tensor.dims, what)
    dtype = np_dtype(tensor.data_type, what)
    if dtype in PACKED:          # two 4-bit values a byte
        return (math.prod(tensor.dims) + 1) // 2, dtype
    return math.prod(tensor.dims) * dtype.itemsize, dtype


def size_mismatch(tensor, what: str, nbytes: int, dtype: np.dtype, stored: str) -> GcompileError:
    return GcompileError(f"{what} declares shape {tuple(tensor.dims)} {dtype.name} ({nbytes} bytes) but {stored}")


def tensor_array(tensor, what: str) -> np.ndarray:
    """A TensorProto (initializer or tensor attribute, external data already read) as a numpy array,
    once it is known to store exactly the bytes its shape and dtype declare."""
    nbytes, dtype = declared_bytes(tensor, what)
    if tensor.data_location == TensorProto.EXTERNAL:
        raise GcompileError(f"{what} keeps its data in an external file, which was not read")
    if tensor.HasField("raw_data"):
        stored = len(tensor.raw_data)
    else:
        field = getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type))
        stored = len(field) * (1 if dtype in PACKED else dtype.itemsize)
    if stored != nbytes:
        raise size_mismatch(tensor, what, nbytes, dtype, f"stores {stored} bytes")
    return check_dtype(numpy_helper.to_array(tensor), what)
