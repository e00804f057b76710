"""Symbolic reverse mode: gc.grad and the transforms built on it."""
from . import loops  # registers the scan op with its VJP rule
from .engine import grad

__all__ = ["grad", "loops"]
