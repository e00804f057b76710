"""One local Ray instance for the whole test session (starting Ray takes seconds), with small
resources: 4 logical CPUs on the 2-core CI machine so that 3 workers fit, a small object store,
no dashboard, no worker logs on the driver and no Ray Data progress bars."""
import faulthandler

import numpy as np
import pytest

import gcompile as gc
from gcompile.distributed import export_split_step

from ..train.mlp import loss_fn, problem


@pytest.fixture(autouse=True)
def bounded():
    """No distributed test may hang CI: after 300 s the process dumps every thread's stack and exits."""
    faulthandler.dump_traceback_later(300, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def ray_session():
    import ray
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, object_store_memory=150 * 1024 ** 2,
             logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def mlp_split(optimizer, dtype=np.float64, n=16, seed=0):
    """(split step, fused step, params, x, y) of the tanh MLP regression of tests/train/mlp.py,
    exported with a symbolic batch dim."""
    params, x, y = problem(dtype, seed=seed, n=n)
    specs = gc.spec(("batch", 3), dtype), gc.spec(("batch", 2), dtype)
    split = export_split_step(loss_fn, params, optimizer, *specs, provider="cpu")
    fused = gc.export_train_step(loss_fn, params, optimizer, *specs, provider="cpu")
    return split, fused, params, x, y
