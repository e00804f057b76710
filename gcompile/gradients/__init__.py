"""Symbolic reverse mode: gc.grad (the engine's call and JAX's transform) and the transforms built on it."""
from . import loops  # registers the scan op with its VJP rule
from .transforms import grad

__all__ = ["grad", "loops"]
