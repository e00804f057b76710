"""Symbolic reverse mode: gc.grad and the transforms built on it."""
from .engine import grad

__all__ = ["grad"]
