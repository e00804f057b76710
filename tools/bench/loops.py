"""The loop figures (--loops): build phases, session load and node counts of the loop workloads,
scan against unrolled step times (timed alternating, as the rest of the benchmark), ONNX Loop
against Scan, and the 1,000-step LSTM beside PyTorch's nn.LSTM."""
from __future__ import annotations

import contextlib
import time

import numpy as np
import onnx

import gcompile as gc
from gcompile.frontend.trace import trace
from gcompile.lowering import to_onnx
from gcompile.passes import optimize
from gcompile.runtime.providers import make_session

from .workloads.recurrent import lstm_setup, lstm_torch, ode_setup


def as_loop(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose forward Scans over a placeholder (gcompile's lowering of a loop without
    xs) are ONNX Loops with a trip count instead: the same body, to time the two constructs."""
    from onnx import TensorProto, helper, numpy_helper
    model = onnx.ModelProto.FromString(model.SerializeToString())
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for k, node in enumerate(model.graph.node):
        attrs = {a.name: a for a in node.attribute}
        placeholder = node.input[-1] if node.op_type == "Scan" else None
        if (placeholder not in consts or consts[placeholder].dtype != bool
                or list(attrs["scan_input_directions"].ints) != [0]):
            continue
        body = attrs["body"].g
        del body.input[-1]
        body.input.insert(0, helper.make_tensor_value_info(f"{node.name}_it", TensorProto.INT64, []))
        body.input.insert(1, helper.make_tensor_value_info(f"{node.name}_go", TensorProto.BOOL, []))
        body.node.append(helper.make_node("Identity", [f"{node.name}_go"], [f"{node.name}_go_out"]))
        body.output.insert(0, helper.make_tensor_value_info(f"{node.name}_go_out", TensorProto.BOOL, []))
        trips = f"{node.name}_trips"
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(len(consts[placeholder]), np.int64), trips))
        loop = helper.make_node("Loop", [trips, "", *node.input[:-1]], list(node.output), name=node.name, body=body)
        model.graph.node.remove(node)
        model.graph.node.insert(k, loop)
    return model


# -- the report -------------------------------------------------------------------------------------------------
def onnx_nodes(graph) -> int:
    return sum(1 + sum(onnx_nodes(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
               for n in graph.node)


def build_phases(fn, args) -> dict:
    """Seconds to trace (differentiation included), optimise, lower, and create the session; node counts."""
    t0 = time.perf_counter()
    traced = trace(fn, args)
    t1 = time.perf_counter()
    optimize(traced.graph, 2)
    t2 = time.perf_counter()
    model, _ = to_onnx(traced.graph, traced.input_names)
    t3 = time.perf_counter()
    make_session(model.SerializeToString(), "cpu")
    t4 = time.perf_counter()
    return {"trace_s": t1 - t0, "passes_s": t2 - t1, "lower_s": t3 - t2, "build_s": t3 - t0, "load_s": t4 - t3,
            "onnx_nodes": len(model.graph.node), "onnx_nodes_with_bodies": onnx_nodes(model.graph)}


def loop_report(median_ms, runs: int) -> dict:
    """The loop figures of docs/performance.md; median_ms is harness.median_ms."""
    results: dict = {"builds": {}}
    for name, (fn, _, args) in [("lstm T=32 scan", lstm_setup(32)), ("lstm T=32 unrolled", lstm_setup(32, False)),
                                ("lstm T=100 scan", lstm_setup(100)), ("lstm T=1000 scan", lstm_setup(1000)),
                                ("ode grad scan", ode_setup()), ("ode grad unrolled", ode_setup(loop="unrolled")),
                                ("ode hvp scan", ode_setup(True)), ("ode hvp unrolled", ode_setup(True, "unrolled"))]:
        row = build_phases(fn, args)
        results["builds"][name] = row
        print(f"{name:20s} build {row['build_s']:6.2f} s (trace+grad {row['trace_s']:.2f}, "
              f"passes {row['passes_s']:.2f}, lower {row['lower_s']:.2f})  session load {row['load_s']:6.2f} s  "
              f"ONNX nodes {row['onnx_nodes']:5d} ({row['onnx_nodes_with_bodies']} with loop bodies)", flush=True)

    def compiled(setup):
        fn, _, args = setup
        cf = gc.compile(fn, *args, provider="cpu")
        return cf, args

    pairs = {f"lstm T={t}{' forward' if fwd else ''}: scan / unrolled": (lstm_setup(t, forward=fwd),
                                                                          lstm_setup(t, False, forward=fwd))
             for t in (4, 8, 16) for fwd in (True, False)}
    pairs |= {"lstm T=32: scan / unrolled": (lstm_setup(32), lstm_setup(32, False)),
             "ode grad: scan (Loop) / unrolled": (ode_setup(), ode_setup(loop="unrolled")),
             "ode grad: placeholder Scan / index Scan": (ode_setup(), ode_setup(loop="indexed")),
             "ode hvp: scan / unrolled": (ode_setup(True), ode_setup(True, "unrolled"))}
    results["ratios"] = {}
    for label, (a, b) in pairs.items():
        (cf_a, args_a), (cf_b, args_b) = compiled(a), compiled(b)
        diffs = [float(np.max(np.abs(x - y) / (1e-6 + np.abs(y)))) for x, y in zip(cf_a.run_flat(*args_a),
                                                                                      cf_b.run_flat(*args_b))]
        ms = median_ms({"a": lambda cf=cf_a, args=args_a: cf.run_flat(*args),
                        "b": lambda cf=cf_b, args=args_b: cf.run_flat(*args)}, runs)
        results["ratios"][label] = {"ms": ms, "ratio": ms["a"] / ms["b"], "max_rel_diff": max(diffs)}
        print(f"{label:38s} {ms['a']:8.2f} / {ms['b']:8.2f} ms = {ms['a'] / ms['b']:.2f}   "
              f"outputs differ by at most {max(diffs):.1e} (relative)", flush=True)
    fn, _, args = ode_setup(forward=True)
    cf = gc.compile(fn, *args, provider="cpu")
    feeds = dict(zip(cf.input_names, args))
    sessions = {"scan": make_session(cf.model.SerializeToString(), "cpu"),
                "loop": make_session(as_loop(cf.model).SerializeToString(), "cpu")}
    ms = median_ms({k: lambda s=s: s.run(None, feeds) for k, s in sessions.items()}, runs)
    same = np.allclose(sessions["scan"].run(None, feeds)[0], sessions["loop"].run(None, feeds)[0])
    results["ode forward: Loop / Scan"] = {"ms": ms, "ratio": ms["loop"] / ms["scan"], "same": bool(same)}
    print(f"{'ode forward: Loop / Scan':38s} {ms['loop']:8.2f} / {ms['scan']:8.2f} ms = {ms['loop'] / ms['scan']:.2f}"
          f"   same outputs: {same}", flush=True)
    cf, args = compiled(lstm_setup(1000))
    torch_ref = _torch_lstm()
    for threads in (None, 1):   # the benchmark's sessions (a thread per core), then one thread for both systems
        fns = {"gcompile": lambda: cf.run_flat(*args)}
        if threads:
            single_threaded = _single_thread(cf.model)
            feeds = dict(zip(cf.input_names, args))
            fns = {"gcompile": lambda s=single_threaded, feeds=feeds: s.run(None, feeds)}
        with _torch_threads(threads):
            if torch_ref is not None:
                fns["torch"] = torch_ref(args)
            ms = median_ms(fns, max(5, runs // 4))
        label = f"lstm T=1000 step ({'1 thread' if threads else 'a thread per core'})"
        results[label] = ms
        print(f"{label}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items())
              + (f", ratio {ms['gcompile'] / ms['torch']:.2f}" if "torch" in ms else ""), flush=True)
    return results


def _single_thread(model):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def _torch_threads(threads):
    try:
        import torch
    except ImportError:
        yield
        return
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _torch_lstm():
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    return lstm_torch
