"""The benchmark's workloads, one module per family, each workload written once with its shapes
and its gcompile, PyTorch and JAX versions side by side (common.Workload)."""
from __future__ import annotations

import contextlib

from . import attention, conv, dense_prediction, mlp, potentials, recurrent, sparse
from .common import Workload

_ORDER = ["W1", "W2", "W3", "W4", "W5", "W6", "W1f", "W7", "W8", "W9", "W10", "W11", "W12", "W13", "W14",
          "W15", "W16", "W17", "W18", "W19", "W20", "R1", "R2", "R2u", "P1", "P1h"]
_ALL = {w.key: w for module in (mlp, conv, attention, recurrent, potentials, sparse, dense_prediction)
        for w in module.WORKLOADS}
assert sorted(_ALL) == sorted(_ORDER), sorted(set(_ALL) ^ set(_ORDER))
REGISTRY: dict[str, Workload] = {k: _ALL[k] for k in _ORDER}
# The rows of a default run: the loop workloads have their own report (--loops).
DEFAULT = [k for k in _ORDER if k.startswith("W")]
# Each kind of workload again at a second shape that nobody profiled or tuned for: speed that holds
# only at the tuned shapes is not the kind's. Key: (its configuration, the shape it takes instead).
OTHER_SHAPES = {k: (w.config, w.other_shape) for k, w in REGISTRY.items() if w.other_shape is not None}


@contextlib.contextmanager
def other_shape(key: str):
    """Workload `key`'s configuration changed, in place, to its other shape while the block runs:
    the setups and the PyTorch and JAX twins read it when they are called."""
    config, shape = OTHER_SHAPES[key]
    saved = dict(config)
    config.clear()
    config.update(shape)
    try:
        yield
    finally:
        config.clear()
        config.update(saved)


__all__ = ["DEFAULT", "OTHER_SHAPES", "REGISTRY", "Workload", "other_shape"]
