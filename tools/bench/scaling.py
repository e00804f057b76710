"""How build time grows with the graph (--scaling, --build-scaling)."""
from __future__ import annotations

import time

import numpy as np

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.logs import Progress
from gcompile.passes import optimize

from .workloads.common import RNG, param
from .workloads.recurrent import lstm_layer


def compile_scaling(sizes):
    """Trace + grad + passes + lowering of a deep narrow tanh MLP with about N nodes."""
    from gcompile.lowering import to_onnx
    rows = []
    bar = Progress(len(sizes), "scaling")
    for n in sizes:
        bar.step(f"{n} nodes")
        depth = max(1, n // 9)   # ~9 nodes per layer counting forward and backward
        ws = [param(8, 8) for _ in range(depth)]

        def fn(x, ws=ws):
            h = x
            for w in ws:
                h = F.tanh(h @ w)
            return gc.grad(F.sum(h), [x])[0]
        timings = []
        for _ in range(max(1, 5000 // n)):   # the small graphs compile in tens of ms: median of several
            t0 = time.perf_counter()
            traced = trace(fn, [gc.spec(("batch", 8))])
            nodes = len(traced.graph)
            optimize(traced.graph, 2)
            to_onnx(traced.graph, traced.input_names)
            timings.append(time.perf_counter() - t0)
        seconds = float(np.median(timings))
        rows.append({"nodes": nodes, "seconds": seconds, "nodes_per_s": nodes / seconds})
        bar.echo(f"compile scaling: {nodes:7d} nodes  {seconds:7.2f} s  {nodes / seconds:9.0f} nodes/s")
        bar.advance()
    bar.clear()
    return rows


def scaling_graph(kind: str, n: int):
    """(fn, args) of a gradient graph of about n ONNX nodes: 'mlp', a deep narrow tanh MLP's
    gradient with respect to every layer's weight (an input and an output per layer), or
    'lstm', an LSTM's weight gradients over a long sequence, unrolled (four inputs and outputs; as
    a scan its graph would not grow with the sequence: see --loops)."""
    if kind == "mlp":
        ws = [param(8, 8) for _ in range(max(1, n // 8))]   # ~8 ONNX nodes per layer, both passes

        def mlp(x, *ws):
            h = x
            for w in ws:
                h = F.tanh(h @ w)
            return gc.grad(F.sum(h * h), list(ws))
        return mlp, [RNG.standard_normal((4, 8)).astype(np.float32), *ws]
    steps = max(1, n // 45)                                 # ~45 ONNX nodes per step, both passes
    ws = [param(32, 8, scale=0.3), param(32, 8, scale=0.3), np.zeros(32, np.float32)]
    zero = np.zeros((1, 4, 8), np.float32)

    def lstm(xs, w_ih, w_hh, b):
        out = lstm_layer(xs, zero, (w_ih, w_hh, b, None), scan=False)
        return gc.grad(F.sum(out * out), [w_ih, w_hh, b])
    return lstm, [RNG.standard_normal((steps, 4, 8)).astype(np.float32), *ws]


def build_scaling(sizes, kinds=("mlp", "lstm")):
    """Build to first result of gradient graphs of about N ONNX nodes (see scaling_graph): trace +
    grad + passes + lowering, then ONNX Runtime's session, then the first call. Linear growth
    means the per-node cost stays flat."""
    from gcompile.lowering import order, to_onnx
    from gcompile.runtime.providers import make_session
    rows = []
    for kind, n in ((k, n) for k in kinds for n in sizes):
        fn, args = scaling_graph(kind, n)
        clock = [(time.perf_counter(), time.process_time())]
        traced = trace(fn, args)
        optimize(traced.graph, 2)
        model, _ = to_onnx(traced.graph, traced.input_names)
        data = model.SerializeToString()
        clock.append((time.perf_counter(), time.process_time()))
        session = make_session(data, "cpu", nodes=len(model.graph.node))
        clock.append((time.perf_counter(), time.process_time()))
        session.run(None, dict(zip(traced.input_names, args)))
        clock.append((time.perf_counter(), time.process_time()))
        nodes = len(model.graph.node)
        row: dict = {"kind": kind, "onnx_nodes": nodes, "outputs": len(model.graph.output),
                     "loader_waits": order.loader_waits(model.graph.node)}
        for clock_kind, k in (("wall", 0), ("cpu", 1)):   # CPU time: what a quiet machine would take
            for phase, i in (("build", 0), ("session", 1), ("first_run", 2), ("total", None)):
                a, b = (clock[0], clock[-1]) if i is None else (clock[i], clock[i + 1])
                row[f"{phase}_{clock_kind}_s"] = b[k] - a[k]
        rows.append(row)
        print(f"build to first result, {kind}: {nodes:7d} ONNX nodes, {row['outputs']} outputs; seconds wall (CPU): "
              + "  ".join(f"{p} {row[p + '_wall_s']:.2f} ({row[p + '_cpu_s']:.2f})"
                          for p in ("build", "session", "first_run", "total"))
              + f"  {1e6 * row['total_cpu_s'] / nodes:.0f} us CPU per node; loader waits "
              f"{row['loader_waits'] / nodes:.1f} per node", flush=True)
    return rows
