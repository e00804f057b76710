"""Convolution and pooling, NCHW, 1-D to 3-D."""
from __future__ import annotations

__all__: list[str] = []
