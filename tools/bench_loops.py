"""Loop workloads for tools/bench.py: a long LSTM training step as one scan against PyTorch's nn.LSTM,
the same step at 32 steps as a scan and unrolled, and a PINN-style ODE time-stepper (gradient and
Hessian-vector product through 100 explicit steps). `python tools/bench.py --loops` prints the
figures docs/performance.md records: build phases, session load, node counts, step times (timed
alternating, as the rest of the benchmark), and the stepper against its unrolled twin.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np
import onnx

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.lowering import to_onnx
from gcompile.ops import recurrent
from gcompile.passes import optimize
from gcompile.runtime.providers import make_session

BATCH, FEATURES, HIDDEN = 32, 32, 128


@contextlib.contextmanager
def _loops(scan: bool):
    """Trace F.lstm as a scan (scan=True) or unrolled, whatever the sequence length."""
    saved = recurrent.SCAN_FROM_STEPS
    recurrent.SCAN_FROM_STEPS = 1 if scan else 10 ** 9
    try:
        yield
    finally:
        recurrent.SCAN_FROM_STEPS = saved


def unrolled_lstm():
    """F.lstm unrolled whatever the sequence length (tools/bench.py's large graphs)."""
    return _loops(scan=False)


def lstm_setup(steps: int, scan: bool = True, seed: int = 0, forward: bool = False):
    """One LSTM layer (PyTorch's layout) over `steps` steps, loss mean(ys²), gradients w.r.t. its weights
    (forward=True: the outputs only)."""
    rng = np.random.default_rng(seed)
    scale = 1 / np.sqrt(HIDDEN)
    weights = [rng.uniform(-scale, scale, shape).astype(np.float32)
               for shape in [(4 * HIDDEN, FEATURES), (4 * HIDDEN, HIDDEN), (4 * HIDDEN,), (4 * HIDDEN,)]]
    xs = rng.standard_normal((steps, BATCH, FEATURES)).astype(np.float32)
    h0 = np.zeros((1, BATCH, HIDDEN), np.float32)

    def step(xs, h0, *ws):
        with _loops(scan):
            ys, _, _ = F.lstm(xs, h0, h0, [ws])
        if forward:
            return ys
        loss = F.mean(ys * ys)
        return loss, gc.grad(loss, list(ws))
    return step, None, [xs, h0, *weights]


def torch_lstm(args):
    import torch
    xs, h0, w_ih, w_hh, b_ih, b_hh = (torch.tensor(a) for a in args)
    lstm = torch.nn.LSTM(FEATURES, HIDDEN)
    with torch.no_grad():
        for p, w in zip((lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0),
                        (w_ih, w_hh, b_ih, b_hh)):
            p.copy_(w)
    params = list(lstm.parameters())

    def run():
        ys, _ = lstm(xs, (h0, h0))
        return torch.autograd.grad((ys * ys).mean(), params)
    return run


# -- a PINN-style time-stepper: u' = MLP(u; θ), 100 explicit Euler steps ------------------------------------
ODE_STEPS, ODE_DIM, ODE_WIDTH, ODE_BATCH, DT = 100, 8, 64, 64, 0.01


def ode_setup(hvp: bool = False, loop: str = "scan", seed: int = 1, forward: bool = False):
    """The gradient (or, hvp=True, a Hessian-vector product) of ⟨u_T, target⟩ w.r.t. the MLP's
    parameters. loop: "scan" (gc.fori_loop, whose unused index is pruned: a Scan over a placeholder),
    "indexed" (the index read by the step at no cost: a Scan over the index) or "unrolled"."""
    rng = np.random.default_rng(seed)
    sizes = [ODE_DIM, ODE_WIDTH, ODE_WIDTH, ODE_DIM]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32)]
    u0 = rng.standard_normal((ODE_BATCH, ODE_DIM)).astype(np.float32)
    target = rng.standard_normal((ODE_BATCH, ODE_DIM)).astype(np.float32)
    vs = [rng.standard_normal(p.shape).astype(np.float32) for p in params]

    def final_state(u0, ps):
        def rhs(u):
            h = u
            for i in range(0, len(ps), 2):
                h = h @ ps[i] + ps[i + 1]
                h = F.tanh(h) if i + 2 < len(ps) else h
            return h

        def step(i, u):
            u = u + DT * rhs(u)
            return u + F.cast(i, u.dtype) * 0.0 if loop == "indexed" else u
        return gc.fori_loop(0, ODE_STEPS, step, u0, unroll=True if loop == "unrolled" else 1)

    if forward:
        return (lambda u0, target, *ps: F.sum(final_state(u0, ps) * target)), None, [u0, target, *params]

    def grad_fn(u0, target, *ps):
        value = F.sum(final_state(u0, ps) * target)
        return value, gc.grad(value, list(ps))

    def hvp_fn(u0, target, *rest):
        ps, v = list(rest[:len(params)]), list(rest[len(params):])
        return gc.hvp(lambda *p: F.sum(final_state(u0, p) * target), ps, v)
    return (hvp_fn, None, [u0, target, *params, *vs]) if hvp else (grad_fn, None, [u0, target, *params])


LOOP_WORKLOADS = {
    "R1": ("lstm-1000-step", lambda: lstm_setup(1000)),
    "R2": ("lstm-32-scan", lambda: lstm_setup(32)),
    "R2u": ("lstm-32-unrolled", lambda: lstm_setup(32, scan=False)),
    "P1": ("ode-100-grad", lambda: ode_setup()),
    "P1h": ("ode-100-hvp", lambda: ode_setup(hvp=True)),
}


def torch_loop_workloads() -> dict:
    try:
        import torch  # noqa: F401
    except ImportError:
        return {}
    return {"R1": torch_lstm, "R2": torch_lstm, "R2u": torch_lstm}


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
    """The loop figures of docs/performance.md; median_ms is bench._median_ms."""
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
    torch_ref = torch_loop_workloads().get("R1")
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
