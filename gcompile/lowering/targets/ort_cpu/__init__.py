"""Strategies for ONNX Runtime's CPU provider (the `ort-cpu` target): one module per op family,
each registering its lowerings with `targets.base.strategy` when imported here. What each buys is
measured in docs/strategies.md; tests/lowering/test_strategies.py compares each with the plain
form on both sides of its thresholds."""
from . import conv, indexing, linalg, loops, nn, reduce  # noqa: F401  (each registers its strategies)
