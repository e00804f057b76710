"""runtime/subnormals.py: subnormal floats are flushed to zero on every thread that computes a
call (ONNX Runtime's pool, the calling thread, a loop body, another Python thread), the caller's
NumPy keeps them, and GCOMPILE_SUBNORMALS=keep keeps them everywhere."""
import threading

import numpy as np
import pytest

import gcompile as gc
from gcompile.errors import GcompileError
from gcompile.runtime import subnormals

TINY = np.float32(1e-40)      # a float32 subnormal


def _calls(n: int):
    x, w = np.full(n, TINY, np.float32), np.ones(n, np.float32)
    return gc.compile(lambda x, w: x * w, x, w, provider="cpu"), x, w


def _in_thread(fn):
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("y", fn()))
    worker.start()
    worker.join()
    return out["y"]


@pytest.mark.parametrize("n", [4, 1 << 20])    # one thread's work, and a kernel split among the pool's threads
def test_subnormals_are_flushed_on_every_computing_thread(n):
    cf, x, w = _calls(n)
    assert not np.any(cf(x, w))
    assert not np.any(_in_thread(lambda: cf(x, w)))
    assert (np.full(4, TINY) * np.ones(4, np.float32))[0] == TINY        # the caller's arithmetic keeps them


def test_a_loop_body_flushes_them_too():
    def loop(h, w):
        return gc.scan(lambda h, _: (h * w, None), h, length=3)[0]
    x, w = np.full(8, TINY, np.float32), np.ones(8, np.float32)
    assert not np.any(gc.compile(loop, x, w, provider="cpu")(x, w))


def test_keep_keeps_them(monkeypatch):
    monkeypatch.setenv("GCOMPILE_SUBNORMALS", "keep")
    cf, x, w = _calls(1 << 20)
    np.testing.assert_array_equal(cf(x, w), x)
    monkeypatch.setenv("GCOMPILE_SUBNORMALS", "sometimes")
    with pytest.raises(GcompileError, match="GCOMPILE_SUBNORMALS must be 'flush' or 'keep'"):
        subnormals.keep_subnormals()


def test_a_saved_model_run_by_gcompile_run_flushes_them_on_the_calling_thread(tmp_path):
    from gcompile.runtime import modelfile
    cf, x, w = _calls(4)
    cf.save(tmp_path / "f.onnx")
    with modelfile.opened(tmp_path / "f.onnx") as opened:
        session = modelfile.session(opened, "cpu")
        model = opened.model
    feeds = {i.name: v for i, v in zip(model.graph.input, (x, w))}
    outputs = _in_thread(lambda: modelfile.run(session, model, feeds)["outputs"])  # (a thread no session set)
    assert not any(np.any(v) for v in outputs.values())
