"""Tracing, differentiating, optimising and lowering from several threads at once: each thread has
its own trace frames, and the results are the models a sequential build gives, byte for byte."""
import functools
import gc
import subprocess
import sys
import threading

import numpy as np
import pytest

import gcompile as gc_
import gcompile.functions as F
from gcompile.errors import TraceError

from .interleave import run_interleaved


def _function(k: int):
    """A different function per k: an MLP with k-dependent depth and activation (its layers a loop for
    odd k: loop bodies are traced in their thread's frames too), its loss and gradients."""
    acts = [F.tanh, F.sigmoid, F.relu, F.softplus]

    def fn(x, w, b):
        h = x
        for i in range(12 + k % 5):
            h = acts[(k + i) % len(acts)](h @ w + b * (i + 1))
        if k % 2:
            h, _ = gc_.scan(lambda h, _: (acts[k % len(acts)](h @ w + b), None), h, length=3 + k)
        loss = F.mean(h * h) + k
        return loss, gc_.grad(loss, [w, b])
    fn.__name__ = f"fn{k}"
    return fn


def _args(k: int):
    rng = np.random.default_rng(k)
    return [rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 6)).astype(np.float32),
            rng.standard_normal(6).astype(np.float32)]


def test_sixteen_compiles_from_eight_threads_equal_sequential_builds():
    sequential = {k: gc_.compile(_function(k), *_args(k), provider="cpu") for k in range(16)}
    results: dict = {}
    errors: list = []
    barrier = threading.Barrier(8)

    def work(t: int):
        try:
            barrier.wait()
            for k in (t, t + 8):
                results[k] = gc_.compile(_function(k), *_args(k), provider="cpu")
        except Exception as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(f"{type(err).__name__}: {err}")

    run_interleaved([functools.partial(work, t) for t in range(8)], interval=1e-5)   # traces interleave
    assert not errors, errors
    assert sorted(results) == list(range(16))
    for k, cf in results.items():
        assert cf.model.SerializeToString() == sequential[k].model.SerializeToString(), k
        for got, want in zip(cf.run_flat(*_args(k)), sequential[k].run_flat(*_args(k))):
            np.testing.assert_array_equal(got, want)
    assert gc.isenabled()   # the collector pause nests across threads and ends with the last build


def test_a_tensor_of_another_threads_trace_is_refused():
    leaked = []
    started, finish = threading.Event(), threading.Event()

    def other(x):
        leaked.append(x * 2)
        started.set()
        finish.wait(10)
        return x

    thread = threading.Thread(target=lambda: gc_.compile(other, np.ones(3, np.float32), provider="cpu"))
    thread.start()
    try:
        assert started.wait(10)
        with pytest.raises(TraceError, match="belongs to another traced function"):
            gc_.compile(lambda y: y + leaked[0], np.ones(3, np.float32), provider="cpu")
    finally:
        finish.set()
        thread.join()


_FIRST_USE_FROM_THREADS = """
import sys, threading
import numpy as np
import gcompile as gc
sys.setswitchinterval(1e-5)
barrier, errors, done = threading.Barrier(16), [], []

def work(k):
    try:
        barrier.wait()
        cf = gc.compile(lambda x: x * (k + 1), gc.spec((2,), "float32"), provider="cpu")
        assert float(cf(np.ones(2, np.float32))[0]) == k + 1
        done.append(k)
    except Exception as err:
        errors.append(f"{type(err).__name__}: {err}")

threads = [threading.Thread(target=work, args=(k,)) for k in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(done), errors[:3])
"""


@pytest.mark.parametrize("attempt", range(3))
def test_the_first_use_of_the_package_from_many_threads_waits_for_one_load(attempt):
    """`import gcompile` loads the library on the first attribute asked: sixteen threads asking for
    gc.compile at once in a fresh interpreter all get it (they used to find it unbound while one
    thread was still loading it, and raise AttributeError)."""
    result = subprocess.run([sys.executable, "-c", _FIRST_USE_FROM_THREADS], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "16 []", result.stdout
