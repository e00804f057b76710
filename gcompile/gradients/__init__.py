"""Symbolic reverse mode: gc.grad (the engine's call and JAX's transform) and the transforms built on it."""
from . import implicit, loops  # noqa: F401  register the VJP rules of the scan, while and root ops
from .transforms import grad

__all__ = ["grad", "loops"]
