"""What a keyed dropout mask (gcompile/ops/random.py: a hash of key, stream and position in the
graph) costs on ONNX Runtime's CPU provider, against the runtime's own draws.

    python tools/dropout_cost.py                        # the op alone at three sizes, and a training step
    python tools/dropout_cost.py --threads 2 --runs 60
    python tools/dropout_cost.py --cpu-time --runs 20       # CPU seconds of one thread, on a busy machine

Op rows: y = dropout(x, 0.1) on a float32 (rows, 1024) input, as ONNX Dropout (training mode), as
RandomUniformLike + GreaterOrEqual + Cast + Mul (the mask from a uniform draw, written out), and as
gcompile's keyed mask (F.dropout with key=). Step rows: a whole training step (MLP
784-1024-1024-10, batch 256, dropout 0.1 after each hidden layer, softmax cross-entropy, Adam) whose
two dropouts are ONNX Dropout or keyed masks (gc.export_train_step's default), and the benchmark's
W12 (a causal language-model step whose attention weights, 8 × 8 × 256 × 256, go through dropout
0.1) as it is and under gc.random_key (tools/bench/workloads/attention.py). Every variant runs
in one session of `--threads` intra-op threads with spinning off, alternating variant by variant
over `--runs` rounds, and the table shows each one's median and fastest time: on a machine shared
with other work only the fastest are comparable. docs/performance.md holds the figures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.workloads.attention import w12_setup  # noqa: E402

import gcompile as gc  # noqa: E402
import gcompile.functions as F  # noqa: E402
from gcompile.frontend.tensor import apply_n  # noqa: E402

RATIO = 0.1


def _model(nodes, inits) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 1024])
    graph = helper.make_graph(nodes, "dropout", [x], [y], [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model.SerializeToString()


def onnx_dropout() -> bytes:
    return _model([helper.make_node("Dropout", ["x", "ratio", "training"], ["y"], seed=1)],
                  {"ratio": np.array(RATIO, np.float32), "training": np.array(True)})


def uniform_mask() -> bytes:
    return _model([helper.make_node("RandomUniformLike", ["x"], ["u"], seed=1.0),
                   helper.make_node("GreaterOrEqual", ["u", "ratio"], ["keep"]),
                   helper.make_node("Cast", ["keep"], ["kept"], to=TensorProto.FLOAT),
                   helper.make_node("Mul", ["kept", "scale"], ["m"]), helper.make_node("Mul", ["x", "m"], ["y"])],
                  {"ratio": np.array(RATIO, np.float32), "scale": np.array(1 / (1 - RATIO), np.float32)})


def keyed_mask() -> bytes:
    cf = gc.compile(lambda x: F.dropout(x, RATIO, training=True, key=7), gc.spec(("rows", 1024)), provider="cpu")
    return cf.model.SerializeToString()


def _mlp_step(keyed: bool) -> bytes:
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((784, 1024)).astype(np.float32) * 0.03, "b1": np.zeros(1024, np.float32),
              "w2": rng.standard_normal((1024, 1024)).astype(np.float32) * 0.03, "b2": np.zeros(1024, np.float32),
              "w3": rng.standard_normal((1024, 10)).astype(np.float32) * 0.03, "b3": np.zeros(10, np.float32)}

    def drop(h):
        if keyed:
            return F.dropout(h, RATIO, training=True)   # the step's random_key context gives the key
        return apply_n("dropout", [h], ratio=RATIO, seed=None)[0]

    def loss(p, x, labels):
        h = drop(F.relu(x @ p["w1"] + p["b1"]))
        h = drop(F.relu(h @ p["w2"] + p["b2"]))
        return F.softmax_cross_entropy(h @ p["w3"] + p["b3"], labels)

    step = gc.export_train_step(loss, params, gc.optim.Adam(1e-3), gc.spec((256, 784)), gc.spec((256,), "int64"),
                                provider="cpu")
    ops = [n.op_type for n in step.model.graph.node]
    assert ("Dropout" in ops) != keyed, "the step draws as asked"
    return step.model.SerializeToString()


def _w12(keyed: bool) -> tuple[bytes, list]:
    """W12's model and inputs: its dropout the runtime's, or keyed by a step input."""
    step, _, args = w12_setup()
    if not keyed:
        return gc.compile(step, *args, provider="cpu").model.SerializeToString(), args

    def keyed_step(count, *args):
        with gc.random_key(count):
            return step(*args)
    args = [np.array(3, np.int64), *args]
    return gc.compile(keyed_step, *args, provider="cpu").model.SerializeToString(), args


def _session(model: bytes, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _feeds(model: bytes) -> dict:
    """Inputs for the training step: small random values, labels in range, step 3."""
    parsed = onnx.load_from_string(model)
    rng = np.random.default_rng(1)
    feeds = {}
    for value in parsed.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if value.name == "labels":
            feeds[value.name] = rng.integers(0, 10, shape).astype(dtype)
        elif value.name == "step":
            feeds[value.name] = np.array(3, dtype)
        else:
            feeds[value.name] = (rng.standard_normal(shape) * 0.05).astype(dtype)
    return feeds


def time_variants(variants: dict, runs: int, clock=time.perf_counter) -> dict[str, list[float]]:
    """Each variant's run times (seconds of `clock`), the variants alternating within every round."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for session, feeds in variants.values():
        for _ in range(3):
            session.run(None, feeds)
    for _ in range(runs):
        for name, (session, feeds) in variants.items():
            start = clock()
            session.run(None, feeds)
            times[name].append(clock() - start)
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the process's CPU seconds, not the wall clock (one thread: what a busy "
                             "neighbour changes least)")
    args = parser.parse_args(argv)
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time measures one thread's work: use it with --threads 1")
    clock = time.process_time if args.cpu_time else time.perf_counter
    print("| case | variant | median ms | fastest ms | fastest / ONNX Dropout |\n|---|---|---|---|---|")
    forms = {"ONNX Dropout": onnx_dropout(), "RandomUniformLike mask": uniform_mask(), "keyed mask": keyed_mask()}
    for rows in (64, 1024, 4096):
        x = np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32)
        variants = {}
        for name, model in forms.items():
            session = _session(model, args.threads)
            variants[name] = (session, {session.get_inputs()[0].name: x})
        _report(f"dropout ({rows}, 1024)", time_variants(variants, args.runs, clock))
    steps = {}
    for name, keyed in (("ONNX Dropout", False), ("keyed mask", True)):
        model = _mlp_step(keyed)
        steps[name] = (_session(model, args.threads), _feeds(model))
    _report("MLP training step", time_variants(steps, max(args.runs // 2, 5), clock))
    w12 = {}
    for name, keyed in (("ONNX Dropout", False), ("keyed mask", True)):
        model, inputs = _w12(keyed)
        session = _session(model, args.threads)
        w12[name] = (session, dict(zip([i.name for i in session.get_inputs()], inputs)))
    _report("W12 causal LM step", time_variants(w12, max(args.runs // 2, 5), clock))


def _report(case: str, times: dict[str, list[float]]) -> None:
    base = min(times["ONNX Dropout"])
    for name, ts in times.items():
        print(f"| {case} | {name} | {statistics.median(ts) * 1e3:.3f} | {min(ts) * 1e3:.3f} | {min(ts) / base:.2f} |")


if __name__ == "__main__":
    main()
