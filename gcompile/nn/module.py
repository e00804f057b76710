"""gc.nn.Module: named, nested parameters that are also a pytree.

A Module holds its parameters as numpy arrays in attributes, as torch.nn.Module does, and is a
pytree node, as an Equinox module is: its array attributes, its submodules and lists or dicts
of them are its children; everything else (sizes, flags, the training mode) is configuration.
So a module can be

  - called inside a traced function, closed over: its arrays become constants whose ONNX
    initializers carry the parameters' names ("fc1.weight");
  - passed to gc.compile, gc.jit, gc.grad or export_train_step as an argument: it is flattened
    into one input per array, named by path ("model.fc1.weight"), and rebuilt around the traced
    Tensors, so `model(x)` inside the function computes with the inputs.

Float arrays are parameters; `register_buffer` declares state that is carried but not trained
(BatchNorm's running statistics; non-float arrays are always buffers). Names follow
torch.nn.Module.state_dict, so state dicts move between the two. A module called on a traced copy
may update its buffers in place (BatchNorm in training mode does); gc.export_train_step reads the
updated buffers back as the step's new state.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import GcompileError, InputError, TraceError, name_mismatch
from ..frontend import pytree
from ..frontend.tensor import Tensor, current_frame, lift_named
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from . import state

__all__ = ["Module", "ModuleList", "Sequential"]

_INTERNAL = ("_children", "_buffers")


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, Tensor))


def _holds_children(value: Any) -> bool:
    """Whether an attribute value is a child: a Module, an array, or a container holding one."""
    if isinstance(value, Module) or _is_array(value):
        return True
    return any(_is_array(v) or isinstance(v, Module) for v in _walk_values(value))


def _walk_values(value: Any) -> Iterator[Any]:
    node = pytree.children_of(value)
    if node is None or isinstance(value, Module):
        return
    for child in node[3]:
        yield child
        yield from _walk_values(child)


class _Static:
    """A configuration value inside a TreeDef: compared by value when hashable, else by identity."""
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def _key(self) -> Any:
        try:
            hash(self.value)
            return (True, self.value)
        except TypeError:
            return (False, id(self.value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and type(self.value) is type(other.value) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _flatten_module(m: Module):
    d = m.__dict__
    children = d.get("_children", {})
    static = tuple((k, _Static(v)) for k, v in d.items() if k not in children and k not in _INTERNAL)
    return [(k, d[k]) for k in children], (tuple(children), frozenset(d.get("_buffers", ())), static)


def _unflatten_module(cls: type, aux, children: list) -> Module:
    names, buffers, static = aux
    m: Module = object.__new__(cls)
    d = m.__dict__
    d.update({k: s.value for k, s in static})
    d["_children"] = dict.fromkeys(names)
    d["_buffers"] = set(buffers)
    d.update(zip(names, children))
    return m


def _name_parameters(module: Module) -> None:
    """While tracing, lift the module's numpy arrays as constants named by their paths, unless this
    trace lifted them already (an enclosing module named them with longer paths)."""
    try:
        current_frame()
    except TraceError:
        return
    leaves, treedef = pytree.flatten(module)
    for name, leaf in zip(pytree.paths(treedef), leaves):
        if isinstance(leaf, np.ndarray):
            lift_named(leaf, name)


def _naming(call: Callable) -> Callable:
    @functools.wraps(call)
    def wrapped(self, *args, **kwargs):
        _name_parameters(self)
        return call(self, *args, **kwargs)
    wrapped.__gcompile_naming__ = True   # type: ignore[attr-defined]
    return wrapped


class Module:
    """Base class of layers and models. Subclasses set arrays and submodules as attributes in
    __init__ (no super().__init__() needed) and define `forward` (PyTorch style) or `__call__`.

    Attributes: `training` (True after construction; `train()`/`eval()` switch the whole tree).
    """
    training: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        pytree.register_pytree_node(cls, _flatten_module, functools.partial(_unflatten_module, cls),
                                    buffers=lambda m: m.__dict__.get("_buffers", ()))
        call = cls.__dict__.get("__call__")
        if call is not None and not getattr(call, "__gcompile_naming__", False):
            cls.__call__ = _naming(call)   # type: ignore[method-assign]

    # -- attributes ----------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        children = d.setdefault("_children", {})
        d.setdefault("_buffers", set())
        if name not in _INTERNAL and (name in children or _holds_children(value)):
            children[name] = None
        d[name] = value

    def __delattr__(self, name: str) -> None:
        self.__dict__.get("_children", {}).pop(name, None)
        self.__dict__.get("_buffers", set()).discard(name)
        object.__delattr__(self, name)

    def register_buffer(self, name: str, value: Any) -> None:
        """Set `name` to an array that is state, not a parameter: carried through training steps
        and saved in the state dict, but never given a gradient or an optimizer update."""
        if not _is_array(value):
            value = np.asarray(value)
        setattr(self, name, value)
        self.__dict__["_buffers"].add(name)

    # -- calling ---------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines neither forward nor __call__")

    @_naming
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def followed_by(self, after: Module, x: Any) -> Any:
        """after(self(x)) computed at once where this module knows a shorter way to it, else None:
        a Sequential asks each layer about the next (a convolution and the inference batch norm
        after it become one convolution), as nothing but the next layer reads a layer's output there."""
        return None

    # -- walking ---------------------------------------------------------------------------------
    def _leaves(self) -> tuple[list[str], list[Any], list[bool]]:
        leaves, treedef = pytree.flatten(self)
        return pytree.paths(treedef), leaves, pytree.buffer_mask(treedef)

    def named_parameters(self) -> Iterator[tuple[str, Any]]:
        """(name, array) for every parameter (float arrays not registered as buffers)."""
        for name, leaf, is_buffer in zip(*self._leaves()):
            if not is_buffer and _is_float(leaf):
                yield name, leaf

    def parameters(self) -> list[Any]:
        return [p for _, p in self.named_parameters()]

    def named_buffers(self) -> Iterator[tuple[str, Any]]:
        for name, leaf, is_buffer in zip(*self._leaves()):
            if is_buffer or not _is_float(leaf):
                yield name, leaf

    def modules(self) -> Iterator[Module]:
        """This module and every submodule, depth first."""
        yield self
        for name in self.__dict__.get("_children", {}):
            value = getattr(self, name)
            for v in [value, *_walk_values(value)]:
                if isinstance(v, Module):
                    yield from v.modules()

    def train(self, mode: bool = True) -> Module:
        """Set the training mode of this module and every submodule (BatchNorm, Dropout read it)."""
        for m in self.modules():
            m.__dict__["training"] = bool(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def num_parameters(self) -> int:
        return int(sum(int(np.prod(np.shape(p))) for p in self.parameters()))

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Parameters and buffers by name ("fc1.weight", "bn.running_mean"), in definition order."""
        names, leaves, _ = self._leaves()
        return dict(zip(names, leaves))

    def load_state_dict(self, source: Mapping[str, Any] | str | os.PathLike, strict: bool = True) -> Module:
        """Replace parameters and buffers, in place, from a {name: array} mapping (a torch state_dict
        converted to numpy fits) or a .npz or .safetensors file. Each array must have its entry's
        shape and is cast to its dtype. strict=True refuses missing and unexpected names."""
        names, leaves, _ = self._leaves()
        if isinstance(source, (str, os.PathLike)):
            values = state.read(source, {n: (np.asarray(v).dtype, np.shape(v)) for n, v in zip(names, leaves)},
                                strict=strict)
        else:
            values = dict(source)
        missing = [n for n in names if n not in values]
        unexpected = [n for n in values if n not in names]
        if strict and (missing or unexpected):
            raise InputError(f"load_state_dict into {type(self).__name__}: "
                             + "; ".join(name_mismatch(missing, unexpected)))
        new = []
        for name, old in zip(names, leaves):
            if name not in values:
                new.append(old)
                continue
            value = np.asarray(values[name])
            if value.shape != np.shape(old):
                raise InputError(f"load_state_dict: {name!r} has shape {format_shape(np.shape(old))} in "
                                 f"{type(self).__name__}, got {format_shape(value.shape)}")
            new.append(np.array(value, dtype=np.asarray(old).dtype))
        _refill(self, iter(new))
        return self

    def save(self, path: str | os.PathLike) -> None:
        """Write the state dict to `path`, a .npz or .safetensors file (by its suffix), atomically."""
        state.write(path, {n: np.asarray(v) for n, v in self.state_dict().items()})

    def replace(self, values: Mapping[str, Any]) -> Module:
        """A copy of this module whose parameters/buffers named in `values` are replaced (by arrays or
        Tensors); the others are shared. In a traced function, `model.replace(params)(x)` computes
        with traced parameters, as torch.func.functional_call does."""
        names, leaves, _ = self._leaves()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise GcompileError(f"{type(self).__name__} has no parameter or buffer named {unknown[0]!r} "
                                f"(it has: {', '.join(names)})")
        _, treedef = pytree.flatten(self)
        return pytree.unflatten(treedef, [values.get(n, leaf) for n, leaf in zip(names, leaves)])

    def apply(self, values: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        """self.replace(values)(*args, **kwargs): call with the given parameters (Flax's apply)."""
        return self.replace(values)(*args, **kwargs)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for name in self.__dict__.get("_children", {}):
            value = getattr(self, name)
            if isinstance(value, Module):
                inner = repr(value).replace("\n", "\n  ")
                lines.append(f"  ({name}): {inner}")
            elif _is_array(value):
                lines.append(f"  {name}: {np.dtype(value.dtype).name}{format_shape(tuple(value.shape))}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


def _is_float(value: Any) -> bool:
    return is_float(np.dtype(value.dtype)) if hasattr(value, "dtype") else False


def _refill(obj: Any, it: Iterator) -> Any:
    """`obj` with its leaves taken from `it`: modules are updated in place (their identity kept),
    other containers are rebuilt."""
    if isinstance(obj, Module):
        d = obj.__dict__
        for name in d.get("_children", {}):
            d[name] = _refill(d[name], it)
        return obj
    node = pytree.children_of(obj)
    if node is None:
        return next(it)
    kind, aux, keys, children, buffers = node
    new = [_refill(c, it) for c in children]
    return pytree.unflatten(pytree.TreeDef(kind, aux, tuple(keys), (pytree.LEAF,) * len(new), buffers), new)


class Sequential(Module):
    """Modules applied in order, named "0", "1", ... as in torch.nn.Sequential. Nothing but the next
    layer reads a layer's output here, so each layer may compute the next one's result at once
    (Module.followed_by): a convolution and the eval-mode batch norm after it are one convolution."""

    def __init__(self, *layers: Module) -> None:
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)

    def __len__(self) -> int:
        return len(self.__dict__["_children"])

    def __getitem__(self, index: int) -> Module:
        return getattr(self, list(self.__dict__["_children"])[index])

    def __iter__(self) -> Iterator[Module]:
        return (getattr(self, n) for n in self.__dict__["_children"])

    def forward(self, x: Any) -> Any:
        layers, i = list(self), 0
        while i < len(layers):
            fused = layers[i].followed_by(layers[i + 1], x) if i + 1 < len(layers) else None
            x, i = (fused, i + 2) if fused is not None else (layers[i](x), i + 1)
        return x


class ModuleList(Sequential):
    """A list of modules named "0", "1", ... (torch.nn.ModuleList); iterate it in forward."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__(*modules)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise GcompileError("a ModuleList is not callable; iterate over it")

    def append(self, layer: Module) -> ModuleList:
        setattr(self, str(len(self)), layer)
        return self
