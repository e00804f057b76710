"""Every public object that keeps something between calls, shared by threads: calls made from two
threads at once leave it, and answer, exactly as the same calls made one after the other.

The house rule says anything callable from two threads is safe there or refuses clearly. The
objects: a compiled function (its session), a gc.jit function (its cache of compiled signatures,
filled by both threads at once), a from_torch module run by gc.jit in training mode (buffers it
updates read back on each call), and the Trainers, which carry parameters, optimizer state,
buffers and counters from step to step (of an exported step, of the saved file, of a from_torch
module with buffers). Each object gets the same calls in both runs, with Python switching
threads as often as it can (interleave.py): a function's answer to each call must be the serial
one; a Trainer's identical steps make their order irrelevant, so its state after 2N shared steps
must be bit for bit the serial run's, and its 2N losses the serial run's 2N losses (a step lost
or run twice shows in both). DistributedTrainer, whose workers need Ray, has its own
thread test in tests/distributed/test_trainer.py."""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from .interleave import run_interleaved

DATA = Path(__file__).resolve().parent / "data"
CALLS = 60      # per thread


@dataclass
class Shared:
    """An object (made by `make`), one call of it (`call(obj, k)`: its answer), what it keeps
    between calls (`state(obj)`, arrays by name), and whether an answer depends on the call alone
    (`in_order` False: on the calls before it too, so the answers are compared as a whole)."""
    make: Callable[[], object]
    call: Callable[[object, int], object]
    state: Callable[[object], dict]
    in_order: bool = True


def _mlp_step():
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)).astype(np.float32), "b": np.zeros(4, np.float32)}
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
    step = gc.export_train_step(lambda p, x, y: F.mean((F.tanh(x @ p["w"] + p["b"]) - y) ** 2), params,
                                gc.optim.Adam(0.01), x, y, provider="cpu")
    return step, params, (x, y)


def _trainer_state(trainer) -> dict:
    return {**trainer.state_dict(), **trainer.state, "step": np.asarray(trainer.step_count),
            "skipped": np.asarray(trainer.skipped_steps)}


def _inputs(k: int, n: int = 5) -> np.ndarray:
    return np.random.default_rng(k).standard_normal((1 + k % 3, n)).astype(np.float32)


def _compiled() -> Shared:
    w = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
    return Shared(lambda: gc.compile(lambda x: F.tanh(x @ w), gc.spec(("batch", 5)), provider="cpu"),
                  lambda cf, k: cf(_inputs(k)), lambda cf: {})


def _jitted() -> Shared:
    def answers(x):
        return F.softplus(x) * F.sum(x), gc.grad(F.sum(F.sin(x) ** 2), [x])[0]
    return Shared(lambda: gc.jit(answers), lambda f, k: f(_inputs(k)),
                  lambda f: {"signatures": np.asarray(f.cache_size)})


def _torch_module() -> Shared:
    """bridge_state: a from_torch module that updates an EMA buffer and a call counter in training mode."""
    x = dict(np.load(DATA / "bridge_state.npz"))["x"]

    def run(m, x):
        y = m(x)
        return y, dict(m.named_buffers())
    return Shared(lambda: (gc.from_torch(DATA / "bridge_state.onnx"), gc.jit(run)),
                  lambda made, k: made[1](made[0], x * (1 + k % 3)), lambda made: {})


def _trainer() -> Shared:
    step, _, batch = _mlp_step()
    return Shared(lambda: gc.runtime.Trainer(step), lambda t, k: t.step(*batch), _trainer_state, False)


def _trainer_of_a_file(folder: Path) -> Shared:
    step, params, batch = _mlp_step()
    path = folder / "step.onnx"
    step.save(path)
    return Shared(lambda: gc.runtime.Trainer(path, params), lambda t, k: t.step(*batch), _trainer_state, False)


def _trainer_of_a_torch_module() -> Shared:
    arrays = dict(np.load(DATA / "bridge_state.npz"))
    x, w = arrays["x"], arrays["w"]
    step = gc.export_train_step(lambda m, x: F.sum(m(x) * w), gc.from_torch(DATA / "bridge_state.onnx"),
                                gc.optim.SGD(0.01, momentum=0.9), gc.spec(x.shape), provider="cpu")
    return Shared(lambda: gc.runtime.Trainer(step), lambda t, k: t.step(x),
                  lambda t: {**_trainer_state(t), **{f"buffer {n}": v for n, v in t.buffers.items()}}, False)


CASES = {"compiled function": lambda tmp: _compiled(), "gc.jit": lambda tmp: _jitted(),
         "from_torch module under gc.jit": lambda tmp: _torch_module(), "Trainer": lambda tmp: _trainer(),
         "Trainer of a saved step": _trainer_of_a_file,
         "Trainer of a from_torch module with buffers": lambda tmp: _trainer_of_a_torch_module()}


def _flat(answer) -> list[bytes]:
    leaves = answer if isinstance(answer, (tuple, list)) else [answer]
    out = []
    for leaf in leaves:
        out += _flat(list(leaf.values())) if isinstance(leaf, dict) else [np.asarray(leaf).tobytes()]
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_calls_from_two_threads_equal_the_same_calls_made_in_turn(case, tmp_path_factory):
    shared = CASES[case](tmp_path_factory.mktemp("shared"))
    calls = [(t, k) for t in range(2) for k in range(CALLS)]
    serial_obj = shared.make()
    serial = {(t, k): _flat(shared.call(serial_obj, k)) for t, k in calls}
    obj = shared.make()
    answers: dict = {}
    errors: list = []

    def work(t: int):
        try:
            for k in range(CALLS):
                answers[t, k] = _flat(shared.call(obj, k))
        except Exception as err:   # noqa: BLE001 - reported by the assertion below
            errors.append(f"{type(err).__name__}: {err}")

    run_interleaved([functools.partial(work, t) for t in range(2)])
    assert errors == []
    want, got = shared.state(serial_obj), shared.state(obj)
    assert want.keys() == got.keys()
    assert {n: v for n, v in got.items() if np.asarray(v).tobytes() != np.asarray(want[n]).tobytes()} == {}
    if shared.in_order:
        assert all(answers[c] == serial[c] for c in calls)
    else:
        assert sorted(answers.values()) == sorted(serial.values())
