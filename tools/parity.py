"""Parity with PyTorch: run the sample inputs of PyTorch's op database (OpInfo entries of
torch.testing._internal.common_methods_invocations.op_db) through gcompile and compare, in float64,
values and first- and second-order gradients with torch autograd.

Not part of the test suite (torch stays out of the test install). Run where torch is installed:

    .venv-tools/bin/python tools/parity.py [--ops sum,matmul] [--max-samples 12] [--json out.json] [-v]

tools/parity_map.py's MAP names, for an op entry ("name" or "name.variant"), the gcompile functions
it needs and an adapter that calls them with torch's arguments (dims as axes, keepdim as keepdims,
...). An entry whose gcompile functions do not exist in this checkout counts as "no counterpart", so
ops other branches add join by having their names in `needs`. At most --max-samples samples per
entry, a seeded choice from torch's list (some entries have over a thousand). Per sample:
  value     gcompile's graph on its float64 reference evaluator against torch's result;
  order 1   gc.grad of <output, v> w.r.t. every float input the sample marks requires_grad (others are
            constants), against torch.autograd.grad with v;
  order 2   gc.grad of <that gradient, u> w.r.t. the inputs, against torch's double backward,
where the op supports them in torch (OpInfo.supports_autograd / supports_gradgrad) and its output is
float, and where the map does not say torch's gradient is no derivative for the sample (a max_unpool
whose indices repeat: Entry.derivative). Where a sample says how to process the op's outputs before
they are compared (its output_process_fn_grad: |U| and |Vh| of an SVD, whose signs are arbitrary;
the OpInfo tests use it for their gradients too), both torch's and gcompile's outputs go through
it, gcompile's as traced Tensors seen through the few torch.Tensor members such processing uses
(_TorchView). A sample the adapter cannot express (an unsupported keyword, an error while tracing)
fails.
The summary: entries with a counterpart (and how many are composed of several gcompile functions),
pass rates per order, and the ops with the most failures. An entry whose every sample gcompile
refuses with UnsupportedError (a function that exists only to say what to use instead, like
F.svd) is listed as refused, not as a counterpart, and its samples are counted apart; a refusal
of some samples of an entry (a matrix norm that needs singular values) counts as a failure.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gcompile as gc
import gcompile.functions as F
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

RTOL, ATOL = 1e-6, 1e-8


from parity_map import MAP, Entry, NotComparable, counterpart  # noqa: E402


# -- running the samples ------------------------------------------------------------------------------------------
@dataclass
class Tally:
    samples: int = 0
    refused: int = 0                                       # samples gcompile refused (UnsupportedError)
    underived: int = 0                                     # samples whose torch gradient is no derivative
    value: int = 0
    grad1: list = field(default_factory=lambda: [0, 0])    # passed, checked
    grad2: list = field(default_factory=lambda: [0, 0])
    errors: dict = field(default_factory=dict)


def _leaves(obj, out):
    """Tensors inside a sample's input/args/kwargs (lists and tuples walked), in order."""
    import torch
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _leaves(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _leaves(o, out)
    return out


def _rebuild(obj, swap):
    import torch
    if isinstance(obj, torch.Tensor):
        return swap(obj)
    if isinstance(obj, list):
        return [_rebuild(o, swap) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_rebuild(o, swap) for o in obj)
    if isinstance(obj, dict):
        return {k: _rebuild(v, swap) for k, v in obj.items()}
    return obj


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


class _TorchView:
    """A traced gcompile Tensor seen through the torch.Tensor members OpInfo's output processing
    functions use (abs, mH, indexing, @, shape), so the sample's own function processes gcompile's
    outputs as it does torch's."""

    def __init__(self, t):
        self.t = t

    shape = property(lambda self: tuple(self.t.shape))
    mH = mT = property(lambda self: _TorchView(F.swapaxes(self.t, -1, -2)))

    def abs(self):
        return _TorchView(F.abs(self.t))

    __abs__ = abs

    def __getitem__(self, index):
        return _TorchView(self.t[index])

    def __matmul__(self, other):
        return _TorchView(F.matmul(self.t, other.t))


def _processed(sample, out, traced: bool):
    """out through the sample's output_process_fn_grad (gcompile's Tensors seen as _TorchViews)."""
    if not traced:
        return sample.output_process_fn_grad(out)

    def wrap(o):
        return type(o)(wrap(x) for x in o) if isinstance(o, (tuple, list)) else _TorchView(o)

    def unwrap(o):
        return type(o)(unwrap(x) for x in o) if isinstance(o, (tuple, list)) else o.t if isinstance(
            o, _TorchView) else o
    return unwrap(sample.output_process_fn_grad(wrap(out)))


def _close(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype.kind == "b" or want.dtype.kind in "iu":
        return bool(np.array_equal(got.astype(want.dtype), want))
    return bool(np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True))


def check_sample(opinfo, entry: Entry, sample, tally: Tally, rng) -> None:
    import torch
    leaves = _leaves((sample.input, sample.args, sample.kwargs), [])
    floats = [t for t in leaves if t.is_floating_point() and t.requires_grad]   # the rest are constants
    torch_floats = [t.detach().clone().requires_grad_(True) for t in floats]
    by_id = {id(t): i for i, t in enumerate(floats)}

    def torch_swap(t):
        return torch_floats[by_id[id(t)]] if id(t) in by_id else t

    args = _rebuild((sample.input, sample.args, sample.kwargs), torch_swap)
    want = _outputs(_processed(sample, opinfo.op(args[0], *args[1], **args[2]), traced=False))
    float_out = [i for i, w in enumerate(want) if isinstance(w, torch.Tensor) and w.is_floating_point()]
    arrays = [t.detach().numpy().astype(np.float64) for t in floats]

    def build(*xs):
        it = {id(t): x for t, x in zip(floats, xs)}
        traced = _rebuild((sample.input, sample.args, sample.kwargs),
                          lambda t: it[id(t)] if id(t) in it else t.detach().numpy())
        return _outputs(_processed(sample, entry.fn(traced[0], *traced[1], **traced[2]), traced=True))

    tally.samples += 1
    try:
        got = evaluate(trace(lambda *xs: build(*xs), arrays).graph, arrays)
    except NotComparable:
        raise
    except Exception as err:  # noqa: BLE001 - every failure is tallied by kind
        tally.refused += isinstance(err, gc.UnsupportedError)
        _fail(tally, "value", err)
        return
    try:
        ok = len(got) == len(want) and all(_close(g, w.detach().numpy()) for g, w in zip(got, want)
                                           if isinstance(w, torch.Tensor))
    except Exception as err:  # noqa: BLE001 - every failure is tallied by kind
        _fail(tally, "value", err)
        return
    if not ok:
        _fail(tally, "value", None)
        return
    tally.value += 1
    if not opinfo.supports_autograd or not float_out or not floats:
        return
    if entry.derivative is not None and not entry.derivative(*(a.detach().numpy() if isinstance(a, torch.Tensor)
                                                               else a for a in (sample.input, *sample.args)),
                                                             **sample.kwargs):
        tally.underived += 1
        return
    cotangents = [rng.standard_normal(tuple(want[i].shape)) for i in float_out]
    try:
        grads = torch.autograd.grad([want[i] for i in float_out], torch_floats,
                                    [torch.from_numpy(c) for c in cotangents], allow_unused=True, create_graph=True)
    except RuntimeError:
        return                              # torch has no gradient here (an integer path, a nondifferentiable op)
    tally.grad1[1] += 1

    def first(*xs):
        outs = build(*xs)
        loss = F.add_n([F.sum(outs[i] * c) for i, c in zip(float_out, cotangents)])
        return gc.grad(loss, list(xs))
    if not _agrees(tally, "grad1", first, arrays, grads) or not opinfo.supports_gradgrad:
        return
    directions = [rng.standard_normal(a.shape) for a in arrays]
    used = [g for g in grads if g is not None and g.requires_grad]
    if not used:
        gg = [None] * len(arrays)
    else:
        try:
            total = sum((g * torch.from_numpy(u)).sum() for g, u in zip(grads, directions)
                        if g is not None and g.requires_grad)
            gg = torch.autograd.grad(total, torch_floats, allow_unused=True)
        except RuntimeError:
            return
    tally.grad2[1] += 1

    def second(*xs):
        g1 = first(*xs)
        return gc.grad(F.add_n([F.sum(g * u) for g, u in zip(g1, directions)]), list(xs))
    _agrees(tally, "grad2", second, arrays, gg)


def _agrees(tally, order: str, fn, arrays, torch_grads) -> bool:
    """gcompile's derivatives `fn` on the float64 reference evaluator against torch's (None: zero),
    counted in tally.<order>."""
    try:
        got = evaluate(trace(fn, arrays).graph, arrays)
    except Exception as err:  # noqa: BLE001
        _fail(tally, order, err)
        return False
    want = [np.zeros_like(a) if g is None else g.detach().numpy(force=True) for a, g in zip(arrays, torch_grads)]
    if all(_close(g, w) for g, w in zip(got, want)):
        getattr(tally, order)[0] += 1
        return True
    _fail(tally, order, None)
    return False


def _fail(tally: Tally, stage: str, err) -> None:
    kind = f"{stage}: mismatch" if err is None else f"{stage}: {type(err).__name__}: {str(err).splitlines()[0][:90]}"
    tally.errors[kind] = tally.errors.get(kind, 0) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="", help="comma-separated op entries (default: every mapped one)")
    parser.add_argument("--max-samples", type=int, default=20)
    parser.add_argument("--json", default="", help="write the per-op tallies here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    torch.manual_seed(0)
    entries = {o.name + (f".{o.variant_test_name}" if o.variant_test_name else ""): o for o in op_db}
    wanted = [n for n in (args.ops.split(",") if args.ops else sorted(entries)) if n in entries]
    mapped = [n for n in entries if n in MAP]
    present = [n for n in mapped if counterpart(n)]
    tallies: dict[str, Tally] = {}
    rng = np.random.default_rng(0)
    for name in wanted:
        entry = counterpart(name)
        if entry is None:
            continue
        opinfo, tally = entries[name], Tally()
        try:
            dtype = torch.float64 if torch.float64 in opinfo.supported_dtypes("cpu") else torch.int64
            samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=dtype.is_floating_point))
            if len(samples) > args.max_samples:        # a seeded choice: a stride would repeat one option's value
                picked = np.random.default_rng(len(samples)).choice(len(samples), args.max_samples, replace=False)
                samples = [samples[i] for i in sorted(picked)]
        except Exception as err:  # noqa: BLE001
            print(f"{name}: no float64 samples ({type(err).__name__})", file=sys.stderr)
            continue
        for sample in samples:
            before = copy.deepcopy(tally)
            try:
                check_sample(opinfo, entry, sample, tally, rng)
            except NotComparable:
                tally = before
            except Exception as err:  # noqa: BLE001 - torch refusing its own sample: not counted
                tally = before
                if args.verbose:
                    traceback.print_exception(err)
        tallies[name] = tally
        if args.verbose:
            print(f"{name}: {tally.value}/{tally.samples} values, {tally.grad1[0]}/{tally.grad1[1]} grad1, "
                  f"{tally.grad2[0]}/{tally.grad2[1]} grad2 {tally.errors or ''}", file=sys.stderr)
    report(entries, mapped, present, tallies, args.json)


def report(entries, mapped, present, tallies, json_path) -> None:
    refused = {n: t for n, t in tallies.items() if t.samples and t.refused == t.samples}
    if refused:
        print(f"refused by design, not counted as counterparts ({len(refused)} entries, "
              f"{sum(t.samples for t in refused.values())} samples): {', '.join(sorted(refused))}")
    everything, present = tallies, [n for n in present if n not in refused]
    tallies = {n: t for n, t in tallies.items() if n not in refused}
    composed = sum(counterpart(n).composed for n in present)
    samples = sum(t.samples for t in tallies.values())
    value = sum(t.value for t in tallies.values())
    g1 = [sum(t.grad1[i] for t in tallies.values()) for i in (0, 1)]
    g2 = [sum(t.grad2[i] for t in tallies.values()) for i in (0, 1)]
    full = [n for n, t in tallies.items() if t.samples and t.value == t.samples and t.grad1[0] == t.grad1[1]
            and t.grad2[0] == t.grad2[1]]
    print(f"torch op_db entries: {len(entries)}; in the map: {len(mapped)}; with a gcompile counterpart in this "
          f"checkout: {len(present)} ({len(present) - composed} one gcompile function, {composed} composed)")
    print(f"samples: {samples}; values agree: {value} ({value / max(samples, 1):.1%}); order 1: {g1[0]}/{g1[1]} "
          f"({g1[0] / max(g1[1], 1):.1%}); order 2: {g2[0]}/{g2[1]} ({g2[0] / max(g2[1], 1):.1%})")
    print(f"entries whose every sample agrees at every order: {len(full)} of {len(tallies)}")
    underived = {n: t.underived for n, t in tallies.items() if t.underived}
    if underived:
        print(f"gradients not compared where torch's is not the derivative (the map's Entry.derivative): "
              f"{sum(underived.values())} samples of {', '.join(sorted(underived))}")
    missing = sorted(n for n in mapped if n not in present and n not in refused)
    print(f"mapped but no counterpart here ({len(missing)}): {', '.join(missing)}")
    worst = sorted(tallies.items(), key=lambda kv: -(kv[1].samples - kv[1].value + kv[1].grad1[1] - kv[1].grad1[0]
                                                     + kv[1].grad2[1] - kv[1].grad2[0]))
    print("most failures (entry: values, order 1, order 2; first reasons):")
    for name, t in worst[:40]:
        lost = t.samples - t.value + t.grad1[1] - t.grad1[0] + t.grad2[1] - t.grad2[0]
        if not lost:
            break
        reasons = "; ".join(f"{k} x{v}" for k, v in sorted(t.errors.items(), key=lambda kv: -kv[1])[:2])
        print(f"  {name}: {t.value}/{t.samples}, {t.grad1[0]}/{t.grad1[1]}, {t.grad2[0]}/{t.grad2[1]}; {reasons}")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({n: {"samples": t.samples, "refused": t.refused, "value": t.value, "grad1": t.grad1,
                           "grad2": t.grad2, "underived": t.underived, "errors": t.errors}
                       for n, t in everything.items()}, fh, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
