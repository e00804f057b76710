"""Peak memory of training with an optimizer: gc.runtime.Trainer against PyTorch, on the model zoo.

    PYTHONPATH=. python tools/trainer_memory.py [--models vit_b_16,gpt2,resnet50] [--optimizer adamw]
        [--steps 3] [--json out.json]

The zoo's training step (tools/bench/zoo.py: the exported model, softmax cross-entropy, eval-mode
norms) with an optimizer applied, as users train: in gcompile, `gc.load_onnx`, `export_train_step`
of that loss with gc.optim.AdamW (or SGD with momentum) and a `gc.runtime.Trainer`; in PyTorch,
`loss.backward()`, `torch.optim.AdamW.step()` and `zero_grad(set_to_none=True)`. Each system runs
`--steps` steps in a fresh process of its own (this file run as a script); the figures are VmRSS
and VmHWM above the bare interpreter, as the zoo reads them: once the libraries are started, once
ready to step (gcompile: the Trainer made; PyTorch: the model built), and the peak after the steps.
gcompile's process holds what a user's does: the imported model's own weights (`model.params`,
which the step refers to) beside the Trainer's. The first steps' losses of both are printed, a
check that both systems train the same model (Adam's first steps move near-zero gradients by the
full learning rate in the direction their rounding gives, so later losses may part).
Needs the `bench` extra (torch, torchvision, transformers). Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.bench import zoo  # noqa: E402


def run(system: str, folder: str, optimizer: str, steps: int) -> dict:
    """One system's figures in this (fresh) process."""
    bare = zoo.status_mb("VmRSS")
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    if system == "torch":
        zoo.zoo_entry(meta["name"]).build(True)     # imports torchvision or transformers
    zoo.warm_up(system)
    imported = zoo.status_mb("VmRSS")
    inputs, labels = zoo.load_inputs(folder)
    if system == "torch":
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
        module = zoo.torch_module(folder)
        params = [p for p in module.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4) if optimizer == "adamw" else \
            torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        feeds = {k: torch.from_numpy(v) for k, v in zip(meta["inputs"], inputs)}
        target = torch.from_numpy(labels)

        def step():
            loss = zoo.torch_loss(module, feeds, target)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return float(loss)
        in_place = None
    else:
        import gcompile as gc
        import gcompile.functions as F
        model = gc.load_onnx(os.path.join(folder, "model.onnx"))
        count = len(inputs)

        def loss_fn(params, *batch):
            return F.softmax_cross_entropy(model(*batch[:count], params=params), batch[count])
        initial = {n: model.params[n] for n in meta["params"]}
        gc_opt = gc.optim.AdamW(lr=1e-4) if optimizer == "adamw" else gc.optim.SGD(lr=1e-3, momentum=0.9)
        specs = [gc.spec(a.shape, str(a.dtype)) for a in (*inputs, labels)]
        trainer = gc.runtime.Trainer(gc.export_train_step(loss_fn, initial, gc_opt, *specs, provider="cpu"))
        in_place = f"{len(trainer.in_place)} of {len(trainer.layout.carried)}"

        def step():
            return trainer.step(*inputs, labels)
    ready, setup_peak = zoo.status_mb("VmRSS"), zoo.status_mb("VmHWM")
    times, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    return {"system": system, "imported_mb": imported - bare, "ready_mb": ready - bare,
            "setup_peak_mb": setup_peak - bare, "peak_mb": zoo.status_mb("VmHWM") - bare, "step_s": times,
            "losses": losses, "in_place": in_place}


def measure(system: str, folder: str, optimizer: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (zoo.ROOT, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--process", system, folder, optimizer,
                          str(steps)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the {system} process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--process":
        print(json.dumps(run(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vit_b_16,gpt2,resnet50")
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = {}
    print("| model | PyTorch peak MB | gcompile peak MB | × PyTorch | gcompile ready MB | in place | "
          "first losses, PyTorch / gcompile |\n|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="gcompile-trainer-memory-") as folder:
            zoo.export(name, False, folder)
            torch_row, ours = (measure(s, folder, args.optimizer, args.steps) for s in ("torch", "gcompile"))
        rows[name] = {"torch": torch_row, "gcompile": ours}
        print(f"| {name} | {torch_row['peak_mb']:,.0f} | {ours['peak_mb']:,.0f} | "
              f"{ours['peak_mb'] / torch_row['peak_mb']:.2f} | {ours['ready_mb']:,.0f} | {ours['in_place']} | "
              f"{torch_row['losses'][0]:.5f} / {ours['losses'][0]:.5f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"optimizer": args.optimizer, "steps": args.steps, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
