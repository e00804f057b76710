"""Symbolic reverse mode: gc.grad (the engine's call and JAX's transform) and the transforms built on it."""
from .transforms import grad

__all__ = ["grad"]
