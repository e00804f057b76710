"""Damaged and hostile ONNX models for the importer's fuzz test (test_model_fuzz.py) and its larger
run by hand (`python -m tests.importer.model_mutations N`).

A corpus of unsealed models (files of other tools: nothing checks their bytes before the importer
reads them) is mutated with a seeded generator: bytes (a bit flipped, a cut, a byte replaced) and
protobuf fields (an attribute's type changed or its name damaged, an input dropped or renamed, a dim
set to -1 or 2**40, an op type or opset swapped, an integer attribute set to an extreme, graphs
nested deeply). `outcome` runs what a user of such a file would run: gc.load_onnx, tracing its
input specs and a gradient of its first float output, lowering that to ONNX, and running its
forward, whose numbers must be ONNX Runtime's for the same damaged file; it names the result:
checked, loaded (not run), refused (a GcompileError naming the file) or anything else, a bug.
"""
from __future__ import annotations

import math
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import onnx
from onnx import AttributeProto, helper

import gcompile as gc
import gcompile.functions as F
from gcompile.importer.validate import MAX_NESTING

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
# small files of other tools (PyTorch's exporters): loops, convolutions, attention, recurrences
DATA_FILES = ("torch_mlp.onnx", "torch_cnn.onnx", "rnn/rnn.onnx", "models/vision_legacy.onnx")
HUGE = 2 ** 40
EXTREMES = (-1, 0, HUGE, -HUGE, 2 ** 62, -(2 ** 63))


def built_models() -> dict[str, onnx.ModelProto]:
    """Models gcompile builds (as ModelProtos, so unsealed): a scan, a while loop, a convolution
    and an attention block, each with a float input to differentiate."""
    rng = np.random.default_rng(0)

    def scanned(x):
        def body(c, xi):
            c = F.tanh(c + xi)
            return c, c * 2.0
        return F.sum(gc.scan(body, x[0], x)[1])

    def looped(x):      # |y| grows by half each step from any start: a few steps
        def body(v):
            i, y = v
            return i + 1, F.abs(y) * 1.5 + 1.0
        return F.sum(gc.while_loop(lambda v: F.sum(v[1]) < 40.0, body, (np.int64(0), x))[1])

    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)

    def convolved(x):
        return F.sum(F.relu(F.conv(x, w, pad=1)) ** 2)

    wq = rng.standard_normal((8, 8)).astype(np.float32)

    def attended(x):
        q = x @ wq
        return F.sum(F.scaled_dot_product_attention(q, x, x))

    specs = {"scan": (scanned, gc.spec((4, 3))), "while": (looped, gc.spec((3,))),
             "conv": (convolved, gc.spec((1, 2, 5, 5))), "attention": (attended, gc.spec(("batch", 5, 8)))}
    return {name: gc.compile(fn, spec, provider="cpu").model_for("portable") for name, (fn, spec) in specs.items()}


def corpus() -> dict[str, bytes]:
    """name -> the bytes of an unsealed model."""
    models = {name: m.SerializeToString() for name, m in built_models().items()}
    for name in DATA_FILES:
        with open(os.path.join(DATA, name), "rb") as fh:
            models[name] = fh.read()
    return models


# -- mutations ---------------------------------------------------------------------------------------
def flip(data: bytes, offset: int, bit: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 1 << bit
    return bytes(out)


def _graphs(graph) -> list:
    """`graph` and every graph nested in it."""
    found = [graph]
    for node in graph.node:
        for attr in node.attribute:
            for g in [attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs:
                found += _graphs(g)
    return found


def _nodes(model) -> list:
    return [n for g in _graphs(model.graph) for n in g.node]


def _retyped(rng, attr) -> str:
    """attr's type changed (its value fields left as they are, or cleared)."""
    types = [t for t in AttributeProto.AttributeType.values() if t != attr.type]
    attr.type = int(rng.choice(types))
    if rng.random() < 0.5:
        for field in ("f", "i", "s", "t", "g", "floats", "ints", "strings", "tensors", "graphs"):
            attr.ClearField(field)
    return f"type {AttributeProto.AttributeType.Name(attr.type)}"


def _mutate_proto(model, rng) -> str:
    """Change one field of `model` in place; returns what was done."""
    nodes = _nodes(model)
    kind = str(rng.choice(["attr_type", "attr_name", "attr_drop", "attr_int", "input_drop", "input_rename",
                           "output_drop", "dim", "op_type", "opset", "elem_type", "init_dims", "graph_io"]))
    node = nodes[int(rng.integers(len(nodes)))] if nodes else None
    if kind.startswith("attr") and node is not None and node.attribute:
        attr = node.attribute[int(rng.integers(len(node.attribute)))]
        where = f"{node.op_type} {node.name!r} attribute {attr.name!r}"
        if kind == "attr_type":
            return f"{where}: {_retyped(rng, attr)}"
        if kind == "attr_name":
            attr.name = attr.name[1:] + "x" if attr.name else "x"
            return f"{where}: renamed {attr.name!r}"
        if kind == "attr_drop":
            node.attribute.remove(attr)
            return f"{where}: dropped"
        value = int(rng.choice(EXTREMES))
        if attr.type == AttributeProto.INTS and attr.ints:
            attr.ints[int(rng.integers(len(attr.ints)))] = value
        else:
            attr.type, attr.i = AttributeProto.INT, value
        return f"{where}: set to {value}"
    if kind.startswith("input") and node is not None and node.input:
        i = int(rng.integers(len(node.input)))
        if kind == "input_drop":
            del node.input[i]
            return f"{node.op_type} {node.name!r}: input {i} dropped"
        other = rng.choice([n for m in nodes for n in [*m.input, *m.output] if n] or ["zz"])
        node.input[i] = str(other)
        return f"{node.op_type} {node.name!r}: input {i} reads {other!r}"
    if kind == "output_drop" and node is not None and node.output:
        del node.output[int(rng.integers(len(node.output)))]
        return f"{node.op_type} {node.name!r}: an output dropped"
    if kind == "op_type" and node is not None:
        from gcompile.importer.table import TRANSLATORS
        old, node.op_type = node.op_type, str(rng.choice(sorted(TRANSLATORS)))
        return f"{old} {node.name!r} became {node.op_type}"
    if kind == "opset":
        version = int(rng.choice([1, 6, 9, 11, 13, 17, 30, 10 ** 6]))
        for o in model.opset_import:
            o.version = version
        return f"opset {version}"
    values = [v for g in _graphs(model.graph) for v in [*g.input, *g.output, *g.value_info]]
    if kind in ("dim", "elem_type") and values:
        value = values[int(rng.integers(len(values)))]
        tensor = value.type.tensor_type
        if kind == "elem_type":
            tensor.elem_type = int(rng.integers(0, 30))
            return f"{value.name!r}: element type {tensor.elem_type}"
        if tensor.shape.dim:
            dim = tensor.shape.dim[int(rng.integers(len(tensor.shape.dim)))]
            dim.dim_value = int(rng.choice([-1, HUGE, 0]))
            return f"{value.name!r}: a dim set to {dim.dim_value}"
    inits = [t for g in _graphs(model.graph) for t in g.initializer]
    if kind == "init_dims" and inits:
        t = inits[int(rng.integers(len(inits)))]
        if t.dims:
            t.dims[int(rng.integers(len(t.dims)))] = int(rng.choice([-1, HUGE, 0, 1]))
        else:
            t.dims.append(HUGE)
        return f"initializer {t.name!r}: dims {list(t.dims)}"
    if kind == "graph_io":
        graph = _graphs(model.graph)[int(rng.integers(len(_graphs(model.graph))))]
        field = graph.input if rng.random() < 0.5 and graph.input else graph.output
        if field:
            del field[int(rng.integers(len(field)))]
            return f"graph {graph.name!r}: an input or output dropped"
    return "unchanged"


def nested(model: onnx.ModelProto, depth: int) -> onnx.ModelProto:
    """`model` with its nodes wrapped in `depth` If nodes whose condition is computed at run time
    from its first input: the then branch holds the level below, the else branch the model's nodes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    first, names = graph.input[0].name, [o.name for o in graph.output]
    plain = helper.make_graph(list(graph.node), "plain", [], list(graph.output))
    body = plain
    for level in range(depth):
        cond = f"cond_{level}"
        nodes = [helper.make_node("ReduceMax", [first], [f"m_{level}"], keepdims=0),
                 helper.make_node("Cast", [f"m_{level}"], [f"c_{level}"], to=onnx.TensorProto.FLOAT),
                 helper.make_node("Greater", [f"c_{level}", "zero_if"], [cond]),
                 _if(cond, names, body, plain)]
        body = onnx.GraphProto(name=f"level_{level}")
        for node in nodes:
            body.node.add().CopyFrom(node)
        for value in graph.output:
            body.output.add().CopyFrom(value)
    del graph.node[:]
    for node in body.node:
        graph.node.add().CopyFrom(node)
    graph.initializer.append(helper.make_tensor("zero_if", onnx.TensorProto.FLOAT, [], [0.0]))
    return out


def _if(cond: str, outputs: list[str], then_branch, else_branch) -> onnx.NodeProto:
    """An If node built field by field (onnx.helper re-parses its graphs, which protobuf refuses
    beyond about 30 levels of nesting)."""
    node = onnx.NodeProto(op_type="If", input=[cond], output=outputs)
    for name, graph in (("then_branch", then_branch), ("else_branch", else_branch)):
        attr = node.attribute.add(name=name, type=AttributeProto.GRAPH)
        attr.g.CopyFrom(graph)
    return node


def mutants(name: str, data: bytes, rng: np.random.Generator, count: int,
            depths: tuple[int, ...] = (3, MAX_NESTING + 1, 40)) -> Iterator[tuple[str, bytes]]:
    """`count` damaged copies of the model `name` (its bytes `data`), described; `depths`: how deep
    the model is nested in If nodes where it is (MAX_NESTING itself, allowed, copies the model's
    nodes into each level: seconds of passes for a model of a few hundred nodes)."""
    for _ in range(count):
        kind = rng.random()
        if kind < 0.5:
            yield _damaged_bytes(name, data, rng, kind)
        elif kind < 0.53:
            depth = int(rng.choice(depths))
            yield f"{name}: nested in {depth} If nodes", nested(onnx.load_from_string(data), depth).SerializeToString()
        else:
            model = onnx.load_from_string(data)
            done = [_mutate_proto(model, rng) for _ in range(int(rng.integers(1, 3)))]
            yield f"{name}: {'; '.join(done)}", model.SerializeToString()


def damaged_bytes(name: str, data: bytes, rng: np.random.Generator, count: int) -> Iterator[tuple[str, bytes]]:
    """`count` copies of `data` damaged in their bytes only (a bit flipped, a cut, bytes replaced),
    described; copies equal to `data` (a byte replaced by itself) are left out."""
    for _ in range(count):
        what, damaged = _damaged_bytes(name, data, rng, rng.random() * 0.5)
        if damaged != data:
            yield what, damaged


def _damaged_bytes(name: str, data: bytes, rng: np.random.Generator, kind: float) -> tuple[str, bytes]:
    """One copy of `data` damaged in its bytes: kind < 0.3 a bit flipped, < 0.4 a cut, else bytes replaced."""
    if kind < 0.3:
        at, bit = int(rng.integers(len(data))), int(rng.integers(8))
        return f"{name}: bit {bit} of byte {at} flipped", flip(data, at, bit)
    if kind < 0.4:
        at = int(rng.integers(1, len(data)))
        return f"{name}: cut at {at}", data[:at]
    out = np.frombuffer(data, np.uint8).copy()
    at = rng.integers(0, len(data), int(rng.integers(1, 4)))
    out[at] = rng.integers(0, 256, len(at))
    return f"{name}: bytes {sorted(at.tolist())} replaced", out.tobytes()


# -- running one -------------------------------------------------------------------------------------
class Hung(BaseException):
    """A case that ran past its time bound (a BaseException: no `except Exception` swallows it)."""


@contextmanager
def bounded(seconds: float):
    """Raise Hung in the block after `seconds` (main thread, POSIX)."""
    def expire(*_):
        raise Hung(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def outcome(data: bytes, folder: str, seconds: float = 20.0) -> tuple[str, str]:
    """('loaded' | 'checked' | 'refused' | 'bug', detail) for what a user does with the model in
    `data`, written to FOLDER/model.onnx: load it, trace a gradient of its first float output
    w.r.t. its float inputs and initializers and lower that, then (`checked`) run its forward on
    random inputs and compare the numbers with ONNX Runtime's run of the same bytes, where that
    runs. A refusal must be a GcompileError naming the file; anything else is a bug."""
    from gcompile.errors import GcompileError
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as fh:
        fh.write(data)
    try:
        with bounded(seconds):
            f = gc.load_onnx(path)
            _differentiate(f)
            detail = _compare_with_runtime(f, data)
    except GcompileError as err:
        if path not in str(err):
            return "bug", f"a refusal that does not name the file: {type(err).__name__}: {str(err)[:300]}"
        return "refused", f"{type(err).__name__}: {str(err)[:300]}"
    except Hung as err:
        return "bug", f"hang: {err}"
    except BaseException as err:      # noqa: BLE001 - anything else is what the test looks for
        if isinstance(err, KeyboardInterrupt):
            raise
        return "bug", f"{type(err).__module__}.{type(err).__name__}: {str(err)[:300]}"
    if detail.startswith("differs"):
        return "bug", detail
    return ("checked" if detail == "same" else "loaded"), detail


def _differentiate(f) -> None:
    from gcompile.frontend.trace import trace
    from gcompile.gradients import grad
    from gcompile.lowering import to_onnx
    from gcompile.passes import optimize

    specs = f.input_specs()
    floats = [i for i, s in enumerate(specs) if s.dtype.kind == "f"]
    params = {n: v for n, v in f.params.items() if v.dtype.kind == "f"}

    def fn(*args):
        outs = f(*args[:len(specs)], params=dict(zip(params, args[len(specs):])))
        outs = outs if isinstance(outs, tuple) else (outs,)
        y = next((o for o in outs if o.dtype.kind == "f"), None)
        if y is None:
            return outs
        wrt = [args[i] for i in floats] + list(args[len(specs):])
        return (*outs, *(grad(F.sum(y), wrt) if wrt else ()))

    traced = trace(fn, [*specs, *(gc.spec(v.shape, v.dtype) for v in params.values())],
                   input_names=[*f.input_names, *params])
    optimize(traced.graph, 2)
    to_onnx(traced.graph, [*f.input_names, *params])


def has_loop(data: bytes) -> bool:
    """Whether the model in `data` holds a Loop at any depth (False for bytes that do not parse)."""
    try:
        model = onnx.load_from_string(data)
    except Exception:      # noqa: BLE001 - protobuf's DecodeError, or a RecursionError for deep nesting
        return False
    return any(n.op_type == "Loop" for n in _nodes(model))


RUN_LIMIT = 1 << 16      # elements of random inputs a comparison makes


def _compare_with_runtime(f, data: bytes) -> str:
    """'same', 'differs: ...' or why the forward was not compared: the loaded model `f` compiled and
    run on random inputs, against ONNX Runtime's session of `data` on the same inputs. Models with
    a Loop are not run (a damaged condition may loop forever, in either), nor models whose inputs
    declare more than RUN_LIMIT elements."""
    import onnxruntime as ort

    from gcompile.runtime.modelfile import random_feeds
    if has_loop(data):
        return "not run: a Loop"
    model = onnx.load_from_string(data)
    sizes = [math.prod(d.dim_value for d in v.type.tensor_type.shape.dim) for v in model.graph.input]
    if sum(sizes) > RUN_LIMIT:
        return "not run: large inputs"
    feeds = random_feeds(model)
    args = [feeds[name] for name in f.input_names]
    got = gc.compile(lambda *a: f(*a), *args, provider="cpu")(*args)
    got = got if isinstance(got, tuple) else (got,)
    try:
        capped = onnx.ModelProto()
        capped.CopyFrom(model)
        capped.ir_version = min(capped.ir_version, 10)
        session = ort.InferenceSession(capped.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = session.run(None, feeds)
    except Exception as err:      # noqa: BLE001 - the runtime refusing a damaged model is no finding
        return f"not compared: ONNX Runtime: {str(err)[:120]}"
    for i, (a, b) in enumerate(zip(got, expected)):
        b = np.asarray(b)
        same = a.dtype == b.dtype and a.shape == b.shape
        if not (same and np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)):
            return f"differs: output {i}: {a.ravel()[:4]} {a.shape}, ONNX Runtime {b.ravel()[:4]} {b.shape}"
    return "same"


if __name__ == "__main__":      # a longer run by hand: python -m tests.importer.model_mutations [COUNT [SEED]]
    import collections
    import sys
    import tempfile
    count, seed = (int(a) for a in [*sys.argv[1:], 200, 0][:2])
    generator, seen = np.random.default_rng(seed), collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for model_name, model_bytes in corpus().items():
            for description, variant in mutants(model_name, model_bytes, generator, count):
                status, why = outcome(variant, tmp)
                seen[status] += 1
                if status == "bug":
                    print(f"{description}: {why}", flush=True)
    print(dict(seen))
