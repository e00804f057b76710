"""The model zoo (`python -m tools.bench --zoo`): a training step of real models (tools/bench/zoo_models.py)
in gcompile and in PyTorch eager, timed and measured for memory.

For each model: PyTorch builds it with random weights (1-D parameters and batch-norm statistics
perturbed, the statistics then measured on random batches, so that deep networks keep activations
of order one) and exports it with `torch.onnx.export(dynamo=True, optimize=False)`; gcompile
imports the file with `gc.load_onnx`, takes softmax cross-entropy of the logits against fixed
labels, `gc.grad` of it w.r.t. every parameter (those PyTorch trains: not buffers, not frozen
tables such as Whisper's positions) and `gc.compile`s that step for ONNX Runtime's CPU provider.
PyTorch's step is the same loss and `torch.autograd.grad` w.r.t. the same parameters, eval-mode
norms in both.

Memory: each system runs in a fresh process of its own (this file run as a script, so that
neither imports the other's libraries), which reads VmRSS and VmHWM from /proc/self/status: the
bare interpreter's RSS first, then once its libraries are imported and started (warm_up), when the
system is ready to run (gcompile: compiled; PyTorch: the model built from the saved weights) and
the peak after the steps. Figures are above the bare interpreter. Times: both systems in this
process, alternating in blocks (harness.alternate), quiet and beside a busy neighbour. Gradients:
gcompile's and PyTorch's float32 ones, each against PyTorch in float64, as the norm of the
difference over the norm of the float64 gradient, over all parameters together and for the worst
parameter.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

if __package__:
    from .zoo_models import zoo_entry
else:                         # run as a script: a memory process (see the module's docstring)
    from zoo_models import zoo_entry  # type: ignore[no-redef]

STEPS = 6          # steps of each memory process (gcompile's adaptive session tries a second variant from the 4th)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def status_mb(key: str) -> float:
    """A VmRSS / VmHWM line of /proc/self/status, in MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key + ":"))


def reset_peak() -> None:
    """VmHWM back to the current RSS (Linux: /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


# -- the prepared model and its files -----------------------------------------------------------------------
def prepare(name: str, small: bool):
    """(module in eval mode, {input: tensor}, labels tensor) with the weights described in the
    module's docstring, deterministic for a name and size."""
    import torch
    make, inputs, classes = zoo_entry(name).build(small)
    torch.manual_seed(0)
    module = make()
    gen = torch.Generator().manual_seed(1)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim == 1:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
        if norms:
            for m in norms:
                m.reset_running_stats()
                m.momentum = None          # a cumulative average over the calibration passes
            module.train()
            for _ in range(2):
                module(**{k: torch.randn(v.shape, generator=gen) if v.is_floating_point() else v
                          for k, v in inputs.items()})
    module.eval()
    logits = module(**inputs)
    # parameters the logits do not read (a pooler beside a masked-LM head) are frozen: the exporter
    # leaves them out, and torch.autograd.grad refuses them
    params = [p for p in module.parameters() if p.requires_grad]
    for p, g in zip(params, torch.autograd.grad(logits.sum(), params, allow_unused=True)):
        if g is None:
            p.requires_grad_(False)
    labels = torch.randint(0, classes, logits.shape[:-1], generator=gen)
    return module, inputs, labels


def export(name: str, small: bool, folder: str) -> dict:
    """Export the prepared model into `folder` (model.onnx, inputs.npz with the labels, the
    weights as PyTorch saves them) and return what the other steps need to know of it."""
    import numpy as np
    import onnx
    import torch
    module, inputs, labels = prepare(name, small)
    t0 = time.perf_counter()
    program = torch.onnx.export(module, (), kwargs=inputs, dynamo=True, optimize=False, verbose=False)
    export_s = time.perf_counter() - t0
    proto = program.model_proto
    stored = {t.name for t in proto.graph.initializer}
    onnx.save_model(proto, os.path.join(folder, "model.onnx"), save_as_external_data=proto.ByteSize() > 1 << 30,
                    location="model.onnx.data")
    del program, proto
    np.savez(os.path.join(folder, "inputs.npz"), **{k: v.numpy() for k, v in inputs.items()}, labels=labels.numpy())
    state = module.state_dict()
    transient = {n: b for n, b in module.named_buffers() if n not in state}    # buffers not in state_dict
    torch.save({"state": state, "transient": transient}, os.path.join(folder, "weights.pt"))
    # each parameter by the name its initializer has (a tied one, as GPT-2's embedding and output
    # projection, is stored once under one of its names), in the order of module.parameters()
    aliases: dict = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(n)
    params = [next((a for a in aliases[id(p)] if a in stored), n) for n, p in module.named_parameters()
              if p.requires_grad]
    trained = [p for p in module.parameters() if p.requires_grad]
    meta = {"name": name, "small": small, "inputs": list(inputs), "params": params,
            "frozen": [n for n, p in module.named_parameters() if not p.requires_grad],
            "param_count": sum(p.numel() for p in trained),
            "weights_mb": sum(p.numel() * p.element_size() for p in trained) / 2**20,
            "export_s": export_s}
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)
    return meta


def load_inputs(folder: str) -> tuple[list, object]:
    import numpy as np
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    with np.load(os.path.join(folder, "inputs.npz")) as saved:
        return [saved[k] for k in meta["inputs"]], saved["labels"]


# -- the two systems' steps ---------------------------------------------------------------------------------
def training_step(model, names: list[str], count: int, second_order: bool = False):
    """The step of the module's docstring on the imported `model` (gc.load_onnx) as a function of
    (its `count` inputs, the labels, the parameters `names`): the loss and its gradients. With
    `second_order` it also takes a direction per parameter and returns the Hessian-vector product
    along them as well (the gradient of <gradients, directions>)."""
    import gcompile as gc
    import gcompile.functions as F

    def step(*args):
        ps = list(args[count + 1:count + 1 + len(names)])
        logits = model(*args[:count], params=dict(zip(names, ps)))
        loss = F.softmax_cross_entropy(logits, args[count])
        grads = gc.grad(loss, ps)
        if not second_order:
            return loss, grads
        along = F.add_n([F.sum(g * v) for g, v in zip(grads, args[count + 1 + len(names):])])
        return loss, grads, gc.grad(along, ps)
    return step


def gcompile_step(folder: str, directions: list | None = None, **options):
    """(compiled step, its arguments): the step of the module's docstring on the exported model
    (training_step; with `directions`, one array per parameter, its second-order form). The
    arguments hold the model's own parameter arrays (the caller's copy of the weights)."""
    import gcompile as gc
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    model = gc.load_onnx(os.path.join(folder, "model.onnx"))
    params = model.params
    names = [n for n in meta["params"] if n in params]
    missing = sorted(set(meta["params"]) - set(params))
    if missing:
        raise SystemExit(f"{meta['name']}: parameters not stored as initializers by the exporter: {missing[:5]}")
    inputs, labels = load_inputs(folder)
    step = training_step(model, names, len(inputs), second_order=directions is not None)
    args = [*inputs, labels, *(params[n] for n in names), *(directions or ())]
    del params
    return gc.compile(step, *args, provider="cpu", name=meta["name"], **options), args


def torch_loss(module, inputs: dict, labels):
    """PyTorch's loss of the module's docstring: softmax cross-entropy of the logits' last axis."""
    import torch
    return torch.nn.functional.cross_entropy(module(**inputs).flatten(0, -2), labels.flatten())


def torch_step(module, inputs: dict, labels):
    """A call of PyTorch's step: the loss and its gradients w.r.t. the trainable parameters."""
    import torch
    params = [p for p in module.parameters() if p.requires_grad]

    def run():
        loss = torch_loss(module, inputs, labels)
        return loss, torch.autograd.grad(loss, params)
    return run


def widened(module, inputs: dict):
    """A float64 copy of the module and its float inputs in float64 (PyTorch's reference)."""
    import copy
    return copy.deepcopy(module).double(), {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}


def torch_module(folder: str):
    """The saved model rebuilt without a second copy of its weights: constructed on the meta
    device, then given the saved tensors."""
    import torch
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    make, _, _ = zoo_entry(meta["name"]).build(meta["small"])
    try:
        with torch.device("meta"):
            module = make()
    except NotImplementedError:
        # a constructor that computes with tensors (RegNet's widths: .tolist() of a meta tensor)
        # is built on the CPU; its random weights, replaced below, are freed before any step
        module = make()
    saved = torch.load(os.path.join(folder, "weights.pt"), weights_only=True)
    module.load_state_dict(saved["state"], assign=True)
    for name, tensor in saved["transient"].items():     # (rotary frequencies and the like)
        owner, _, attr = name.rpartition(".")
        module.get_submodule(owner).register_buffer(attr, tensor, persistent=False)
    if hasattr(module.model, "tie_weights"):
        module.model.tie_weights()
    for name in meta.get("frozen", ()):
        module.get_parameter(name).requires_grad_(False)
    return module.eval()


# -- a memory process ---------------------------------------------------------------------------------------
def warm_up(system: str) -> None:
    """Each system's start-up, once per process and whatever the model, done on a tiny gradient so
    that the figure read after it ("imported") counts it with the libraries: gcompile's compiler
    modules load lazily, and ONNX Runtime makes its environment (kernel registries, thread pools)
    with its first session. What compiling a model keeps is then that model's alone
    (docs/performance.md, "What compiling keeps")."""
    if system == "torch":
        import torch
        w = torch.ones(3, requires_grad=True)
        torch.autograd.grad((w * w).sum(), [w])
        return
    import numpy as np

    import gcompile as gc
    import gcompile.functions as F
    gc.compile(gc.grad(lambda w: F.sum(w * w)), np.ones(3, np.float32))(np.ones(3, np.float32))


def memory_run(system: str, folder: str, options: dict) -> dict:
    """One system's memory in this (fresh) process: the figures of the module's docstring."""
    bare = status_mb("VmRSS")
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    if system == "torch":
        import torch
        zoo_entry(meta["name"]).build(True)   # imports torchvision or transformers
    warm_up(system)
    imported = status_mb("VmRSS")
    t0 = time.perf_counter()
    if system == "torch":
        torch.set_num_threads(os.cpu_count() or 1)
        inputs, labels = load_inputs(folder)
        module = torch_module(folder)
        run = torch_step(module, {k: torch.from_numpy(v) for k, v in zip(meta["inputs"], inputs)},
                         torch.from_numpy(labels))
    else:
        cf, args = gcompile_step(folder, **options)

        def run():
            return cf(*args)
    ready_s = time.perf_counter() - t0
    ready, setup_peak = status_mb("VmRSS"), status_mb("VmHWM")
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    figures = {"system": system, "bare_mb": bare, "imported_mb": imported - bare, "ready_mb": ready - bare,
               "setup_peak_mb": setup_peak - bare, "peak_mb": status_mb("VmHWM") - bare, "ready_s": ready_s,
               "step_s": times}
    if system != "torch":
        figures["onnx_nodes"] = len(cf.model.graph.node)
        # the caller's batch and labels (args' first arrays, before the parameters)
        figures["inputs_mb"] = sum(a.nbytes for a in args[:len(meta["inputs"]) + 1]) / 2**20
    return figures


def measure_memory(system: str, folder: str, options: dict | None = None) -> dict:
    """memory_run in a fresh process (this file run as a script)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "memory", system, folder,
                          json.dumps(options or {})], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the {system} memory process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- gradients against float64 ----------------------------------------------------------------------------
def relative_errors(grads: list, reference: list) -> dict:
    """The norm of the difference over the norm of the reference: over all parameters together
    ("all") and for the parameter where it is largest ("worst"; parameters whose reference
    gradient is zero are left out of it)."""
    import numpy as np
    diff = sum(float(np.sum((np.asarray(g, np.float64) - r) ** 2)) for g, r in zip(grads, reference))
    norm = sum(float(np.sum(r ** 2)) for r in reference)
    worst = max((float(np.linalg.norm(np.asarray(g, np.float64) - r) / np.linalg.norm(r))
                 for g, r in zip(grads, reference) if np.any(r)), default=0.0)
    return {"all": (diff / norm) ** 0.5 if norm else 0.0, "worst": worst}


def gradient_check(module, inputs: dict, labels, gcompile_grads: list) -> dict:
    """gcompile's and PyTorch's float32 gradients, each against PyTorch's in float64."""
    torch32 = [g.numpy() for g in torch_step(module, inputs, labels)()[1]]
    wide, wide_inputs = widened(module, inputs)
    reference = [g.numpy() for g in torch_step(wide, wide_inputs, labels)()[1]]
    del wide
    return {"gcompile": relative_errors(gcompile_grads, reference), "torch": relative_errors(torch32, reference)}


# -- one model's row ----------------------------------------------------------------------------------------
# The plan a memory budget is held against leaves out the runtime's own overhead: the budget asked
# for a target peak is this share of what the target leaves once gcompile is ready.
BUDGET_SHARE = 0.7


def zoo_model(name: str, small: bool, runs: int, repeat: int, busy: int, check: bool, log=print,
              budget: float | None = None, timed: bool = True) -> dict:
    """One model through both systems: exported, each system's memory in a fresh process, then
    `repeat` passes of alternating timing, quiet and beside `busy` neighbours, and the gradient
    check. With `budget` (a fraction of PyTorch's peak), gcompile again with a memory budget aimed
    at that peak ("gcompile:budget"): BUDGET_SHARE of what the target leaves above gcompile's
    memory once ready. Without `timed`, the memory processes only (no timing, no gradient check:
    this process then never compiles). The row holds every figure and the model's facts."""
    import tempfile

    import torch

    from .harness import BusyNeighbour, median_ms
    model = zoo_entry(name)
    with tempfile.TemporaryDirectory(prefix="gcompile-zoo-") as folder:
        meta = export(name, small, folder)
        log(f"{name}: {meta['param_count']:,} parameters, exported in {meta['export_s']:.1f} s")
        memory = {system: measure_memory(system, folder) for system in ("torch", "gcompile")}
        budget_bytes = None
        if budget is not None:
            room = budget * memory["torch"]["peak_mb"] - memory["gcompile"]["ready_mb"]
            budget_bytes = int(max(room * BUDGET_SHARE, 16) * 2**20)
            memory["gcompile:budget"] = measure_memory("gcompile", folder, {"memory_budget": budget_bytes})
        for system, m in memory.items():
            log(f"{name}: {system:15s} peak {m['peak_mb']:7.0f} MB, ready {m['ready_mb']:7.0f} MB "
                f"(imports {m['imported_mb']:.0f} MB)")
        facts = {"label": model.label, "size": "small" if small else model.size, "params": meta["param_count"],
                 "weights_mb": meta["weights_mb"], "export_s": meta["export_s"], "memory": memory,
                 "onnx_nodes": memory["gcompile"]["onnx_nodes"],
                 "budget_mb": budget_bytes / 2**20 if budget_bytes else None}
        if not timed:
            return {**facts, "build_s": None, "passes": {}, "grad_error": None}
        torch.set_num_threads(os.cpu_count() or 1)
        module = torch_module(folder)
        arrays, labels = load_inputs(folder)
        inputs = {k: torch.from_numpy(v) for k, v in zip(meta["inputs"], arrays)}
        labels = torch.from_numpy(labels)
        t0 = time.perf_counter()
        cf, args = gcompile_step(folder)
        build_s = time.perf_counter() - t0
        calls = {"gcompile": lambda: cf(*args), "torch": torch_step(module, inputs, labels)}
        if budget_bytes is not None:
            budgeted, budget_args = gcompile_step(folder, memory_budget=budget_bytes)
            calls["gcompile:budget"] = lambda: budgeted(*budget_args)
        conditions = ["quiet"] + (["busy"] if busy else [])
        passes: dict = {c: [] for c in conditions}
        for _ in range(repeat):
            for condition in conditions:
                with BusyNeighbour(busy if condition == "busy" else 0):
                    passes[condition].append(median_ms(calls, runs, block=min(5, runs)))
                last = passes[condition][-1]
                log(f"{name}: {condition:5s} gcompile {last['gcompile']:.0f} ms, torch {last['torch']:.0f} ms, "
                    f"x{last['gcompile'] / last['torch']:.2f}")
        errors = gradient_check(module, inputs, labels, cf(*args)[1]) if check else None
        if errors:
            log(f"{name}: gradient error against float64, all parameters: gcompile {errors['gcompile']['all']:.1e}, "
                f"PyTorch float32 {errors['torch']['all']:.1e}")
    return {**facts, "build_s": build_s, "passes": passes, "grad_error": errors}


def zoo_bench(names: list[str], small: bool, runs: int, repeat: int, busy: int, check: bool = True,
              log=print, budget: float | None = None, timed: bool = True) -> dict:
    """zoo_model for each name, the rows keyed by name."""
    for name in names:
        zoo_entry(name)               # an unknown name stops the run before any model is exported
    return {name: zoo_model(name, small, runs, repeat, busy, check, log, budget, timed) for name in names}


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "memory":
    print(json.dumps(memory_run(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))))
