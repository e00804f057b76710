"""Pytrees: nested containers of arrays or Tensors, flattened to a list of leaves and rebuilt.

gc.compile, gc.jit, the gradient transforms and export_train_step take and return pytrees, as
JAX does: parameters as nested dicts, lists of layers, NamedTuples, registered dataclasses or
gc.nn Modules. The nodes are tuple, list, dict, None (a node without leaves), NamedTuples, and
the classes registered with `register_pytree_node` or `register_dataclass`; anything else is a
leaf. Dicts keep their insertion order (a model's inputs follow it).

A TreeDef records the structure; it is hashable and compares by value, so gc.jit keys its cache
with it. `paths` names the leaves by their keys joined with "." ("params.fc1.weight"; list
items by index, "layers.0.w"), which is how a pytree argument's leaves are named as ONNX inputs
and how torch's state_dict names parameters. A registered node may declare some children as
*buffers* (state such as BatchNorm's running statistics, which training carries but does not
differentiate); `buffer_mask` says which leaves lie under one.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import GcompileError


@dataclass(frozen=True)
class NodeType:
    """How a registered class flattens: `flatten(obj) -> ([(key, child), ...], aux)` with hashable
    `aux`, `unflatten(aux, children) -> obj`, and `buffers(obj) -> keys of children that are state`."""
    flatten: Callable[[Any], tuple[Sequence[tuple[str, Any]], Hashable]]
    unflatten: Callable[[Hashable, list], Any]
    buffers: Callable[[Any], Iterable[str]] | None = None


_REGISTRY: dict[type, NodeType] = {}


def register_pytree_node(cls: type, flatten: Callable, unflatten: Callable,
                         buffers: Callable[[Any], Iterable[str]] | None = None) -> type:
    """Make instances of `cls` pytree nodes. flatten(obj) returns ([(name, child), ...], aux) with a
    hashable `aux` (what is not a child: configuration); unflatten(aux, children) rebuilds one.
    `buffers(obj)`, if given, names the children that are state rather than parameters."""
    _REGISTRY[cls] = NodeType(flatten, unflatten, buffers)
    return cls


def register_dataclass(cls: type | None = None, *, static: Sequence[str] = ()) -> Any:
    """Register a dataclass as a pytree node: its fields are children, except those named in
    `static`, which are configuration (hashable, compared by value). Usable as a decorator, with
    or without arguments."""
    def register(klass: type) -> type:
        if not dataclasses.is_dataclass(klass):
            raise GcompileError(f"register_dataclass: {klass.__name__} is not a dataclass")
        names = [f.name for f in dataclasses.fields(klass)]
        unknown = sorted(set(static) - set(names))
        if unknown:
            raise GcompileError(f"register_dataclass: {klass.__name__} has no field(s) {unknown}")
        data = [n for n in names if n not in static]

        def flatten(obj):
            return [(n, getattr(obj, n)) for n in data], tuple(getattr(obj, n) for n in static)

        def unflatten(aux, children):
            return klass(**dict(zip(data, children)), **dict(zip(static, aux)))
        return register_pytree_node(klass, flatten, unflatten)
    return register if cls is None else register(cls)


@dataclass(frozen=True)
class TreeDef:
    """The structure of a pytree. `kind` is None for a leaf; `aux` holds what rebuilding needs
    besides the children (dict keys, a registered node's configuration)."""
    kind: type | None
    aux: Any = None         # hashable
    keys: tuple[str, ...] = ()
    children: tuple[TreeDef, ...] = ()
    buffers: frozenset[str] = frozenset()

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind is None else sum(c.num_leaves for c in self.children)

    @property
    def is_leaf(self) -> bool:
        return self.kind is None

    def describe(self) -> str:
        if self.kind is None:
            return "a leaf"
        if self.kind is dict:
            return f"a dict with keys {list(self.aux)}"
        if self.kind is type(None):
            return "None"
        return f"a {self.kind.__name__} of {len(self.children)}"


LEAF = TreeDef(None)


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def children_of(obj) -> tuple[type, Any, list[str], list, frozenset[str]] | None:
    """(kind, aux, keys, children, buffer keys) for a pytree node, None for a leaf."""
    kind = type(obj)
    if obj is None:
        return kind, None, [], [], frozenset()
    if kind in (tuple, list):
        return kind, None, [str(i) for i in range(len(obj))], list(obj), frozenset()
    if kind is dict:
        return dict, tuple(obj), [str(k) for k in obj], list(obj.values()), frozenset()
    if _is_namedtuple(obj):
        return kind, None, list(kind._fields), list(obj), frozenset()
    for klass in kind.__mro__:
        node = _REGISTRY.get(klass)
        if node is not None:
            pairs, aux = node.flatten(obj)
            buffers = frozenset(node.buffers(obj)) if node.buffers else frozenset()
            return kind, (klass, aux), [str(k) for k, _ in pairs], [c for _, c in pairs], buffers
    return None


def flatten(obj, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list, TreeDef]:
    """(leaves, treedef). With `is_leaf`, a leaf it refuses is a TypeError naming its type."""
    leaves: list = []

    def walk(o) -> TreeDef:
        node = children_of(o)
        if node is None:
            if is_leaf is not None and not is_leaf(o):
                raise TypeError(f"unsupported output of type {type(o).__name__}")
            leaves.append(o)
            return LEAF
        kind, aux, keys, children, buffers = node
        return TreeDef(kind, aux, tuple(keys), tuple(walk(c) for c in children), buffers)

    return leaves, walk(obj)


def leaves(obj) -> list:
    return flatten(obj)[0]


def unflatten(treedef: TreeDef, leaves: Iterable) -> Any:
    return _build(treedef, iter(leaves))


def _build(d: TreeDef, it):
    # A module-level recursion on purpose: a nested closure that calls itself is a reference
    # cycle, which would keep every call's output arrays alive until the cyclic collector runs.
    kind = d.kind
    if kind is None:
        return next(it)
    if kind is type(None):
        return None
    children = [_build(c, it) for c in d.children]
    if kind is dict:
        return dict(zip(d.aux, children))
    if kind in (tuple, list):
        return kind(children)
    if isinstance(d.aux, tuple) and len(d.aux) == 2 and d.aux[0] in _REGISTRY:
        klass, aux = d.aux
        return _REGISTRY[klass].unflatten(aux, children)
    return kind(*children)   # a NamedTuple


def flatten_like(treedef: TreeDef, value, what: str) -> list:
    """The leaves of `value`, which must have `treedef`'s structure (any value fills a leaf);
    a mismatch is a GcompileError naming the path, e.g. "params.fc1: missing key 'bias'"."""
    out: list = []
    _match(treedef, value, what, out)
    return out


def _match(d: TreeDef, value, path: str, out: list) -> None:
    if d.kind is None:
        out.append(value)
        return
    node = children_of(value)
    if node is None or (node[0] is not d.kind and not (d.kind in (tuple, list) and node[0] in (tuple, list))):
        raise GcompileError(f"{path}: expected {d.describe()}, got {type(value).__name__}")
    kind, aux, keys, children, _ = node
    if kind is dict:
        by_key = dict(zip(aux, children))
        missing = [k for k in d.aux if k not in by_key]
        extra = [k for k in by_key if k not in d.aux]
        if missing or extra:
            raise GcompileError(f"{path}: " + "; ".join(
                ([f"missing key(s) {missing}"] if missing else []) + ([f"unexpected key(s) {extra}"] if extra else [])))
        children = [by_key[k] for k in d.aux]
    elif tuple(keys) != d.keys:
        raise GcompileError(f"{path}: expected {d.describe()} with children {list(d.keys)}, got {keys}")
    for key, child_def, child in zip(d.keys, d.children, children):
        _match(child_def, child, f"{path}.{key}", out)


def paths(treedef: TreeDef, prefix: str = "") -> list[str]:
    """One name per leaf: `prefix` and the keys leading to it, joined with "."."""
    names: list[str] = []

    def walk(d: TreeDef, path: str) -> None:
        if d.kind is None:
            names.append(path)
        for key, child in zip(d.keys, d.children):
            walk(child, f"{path}.{key}" if path else key)

    walk(treedef, prefix)
    return names


def buffer_mask(treedef: TreeDef) -> list[bool]:
    """Per leaf: whether it lies under a child some node declared a buffer."""
    mask: list[bool] = []

    def walk(d: TreeDef, inside: bool) -> None:
        if d.kind is None:
            mask.append(inside)
        for key, child in zip(d.keys, d.children):
            walk(child, inside or key in d.buffers)

    walk(treedef, False)
    return mask


def output_names(treedef: TreeDef) -> list[str]:
    """Names for a traced function's outputs: 'output' for a single one, 'output_0', 'output_1'
    for a tuple or list, the keys for a dict; deeper levels join their keys with "."."""
    if treedef.kind is None:
        return ["output"]
    if treedef.kind in (tuple, list):
        return [name for i, child in enumerate(treedef.children) for name in paths(child, f"output_{i}")]
    return paths(treedef)


def tree_map(fn: Callable, tree, *rest) -> Any:
    """fn applied to every leaf of `tree` (and the matching leaves of `rest`), same structure."""
    leaves_, treedef = flatten(tree)
    others = [flatten_like(treedef, r, "tree_map argument") for r in rest]
    return unflatten(treedef, [fn(*xs) for xs in zip(leaves_, *others)])
