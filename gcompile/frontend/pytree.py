"""Nested outputs (tuples, lists, dicts of Tensors) flattened to a list and rebuilt."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def flatten(obj, is_leaf: Callable[[Any], bool]) -> tuple[list, Any]:
    """(leaves, treedef) for nested tuples/lists/dicts; `is_leaf` decides what a leaf is."""
    leaves: list = []

    def walk(o):
        if isinstance(o, (tuple, list)):
            return (type(o), [walk(c) for c in o])
        if isinstance(o, dict):
            return (dict, list(o.keys()), [walk(o[k]) for k in o])
        if not is_leaf(o):
            raise TypeError(f"unsupported output of type {type(o).__name__}")
        leaves.append(o)
        return None

    return leaves, walk(obj)


def unflatten(treedef, leaves) -> Any:
    return _build(treedef, iter(leaves))


def _build(d, it):
    # A module-level recursion on purpose: a nested closure that calls itself is a reference
    # cycle, which would keep every call's output arrays alive until the cyclic collector runs.
    if d is None:
        return next(it)
    if d[0] is dict:
        return {k: _build(c, it) for k, c in zip(d[1], d[2])}
    return d[0](_build(c, it) for c in d[1])


def leaf_paths(treedef, prefix: str = "output") -> list[str]:
    """Readable names for the leaves: 'output', 'output_0', 'output_1_2', dict keys."""
    names: list[str] = []

    def walk(d, path):
        if d is None:
            names.append(path)
        elif d[0] is dict:
            for k, c in zip(d[1], d[2]):
                walk(c, str(k) if path == prefix else f"{path}_{k}")
        else:
            for i, c in enumerate(d[1]):
                walk(c, f"{path}_{i}")

    walk(treedef, prefix)
    return names
