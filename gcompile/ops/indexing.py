"""Indexing and data movement: getitem, slice, take/gather, scatter-add, concat, stack, split, pad, tile, embedding."""
from __future__ import annotations

__all__: list[str] = []
