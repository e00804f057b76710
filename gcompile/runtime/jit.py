"""gc.compile and gc.jit. gc.compile(fn, *specs) traces and compiles at once; gc.jit (and gc.compile
used as a bare decorator) compiles on the first call, per signature.

    @gc.jit
    def predict(params, x): ...
    predict(params, x)          # traces and compiles for these shapes and dtypes, then runs
    predict(params, x2)         # same shapes: the cached model runs; new ones: traced again

The arguments' structure (pytrees), every array leaf's shape and dtype, and the static values
form the cache key. Static values are the arguments named by static_argnums/static_argnames
and every leaf that is a Python scalar, string or None (they are baked into the trace, as a
Python constant in the function would be, so a new value traces again); arrays, NumPy scalars
and other array-likes (torch, JAX arrays) become graph inputs of their exact shape. Use
gc.compile with gc.spec for symbolic dims instead. Called on Tensors while another function
is traced, a jitted function is simply inlined into that trace.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ..errors import GcompileError
from ..frontend import pytree
from ..frontend.spec import spec
from ..frontend.tensor import Tensor
from ..frontend.trace import trace
from .compiled import CompiledFunction, compile_traced

__all__ = ["Jitted", "compile", "jit"]

_STATIC_LEAVES = (bool, int, float, complex, str, bytes, type(None))
RETRACE_WARNING = 8   # warn once when one function has been compiled for this many signatures


def _is_static_leaf(value: Any) -> bool:
    return isinstance(value, _STATIC_LEAVES)


def _hashable(value: Any, what: str) -> Hashable:
    try:
        hash(value)
    except TypeError:
        raise GcompileError(f"{what} is static (part of gc.jit's cache key) and must be hashable, "
                            f"got {type(value).__name__}") from None
    return value


class Jitted:
    """A function compiled on demand, one CompiledFunction per signature (see the module doc).

    Call it like the function. `.compiled(*args)` returns the CompiledFunction those arguments
    use (to save its model, or inspect it), `.cache_size` counts the signatures compiled."""

    def __init__(self, fn: Callable, static_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = (), **options: Any) -> None:
        functools.update_wrapper(self, fn)
        self.fn, self.options = fn, options
        self.static_argnums = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums)
        self.static_argnames = {static_argnames} if isinstance(static_argnames, str) else set(static_argnames)
        try:
            self._signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        self._cache: dict = {}
        self._warned = False

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def __repr__(self) -> str:
        return f"<gc.jit of {getattr(self.fn, '__name__', self.fn)!r}, {self.cache_size} signature(s) compiled>"

    def _arguments(self, args: tuple, kwargs: dict) -> tuple[list[tuple[str, Any, bool]], Any]:
        """[(name, value, static)] in call order, and how to call fn with them again."""
        if self._signature is None:
            if kwargs:
                raise GcompileError(f"gc.jit: {self.fn!r} has no signature to bind keyword arguments to")
            return [(f"arg{i}", a, i in self.static_argnums) for i, a in enumerate(args)], None
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as err:
            raise GcompileError(f"{getattr(self.fn, '__name__', 'function')}: {err}") from None
        positions = {p.name: i for i, p in enumerate(self._signature.parameters.values())}
        entries = [(name, value, positions[name] in self.static_argnums or name in self.static_argnames)
                   for name, value in bound.arguments.items()]
        return entries, bound

    def _lookup(self, args: tuple, kwargs: dict) -> tuple[CompiledFunction | None, list]:
        """(the CompiledFunction for these arguments, their array leaves), or (None, []) for Tensor
        arguments (a call while another function is traced)."""
        entries, bound = self._arguments(args, kwargs)
        key: list = []
        dynamic: list = []        # the array leaves, in input order
        layout: list = []         # per argument: None (static) or (treedef, per-leaf static value or marker)
        for name, value, static in entries:
            if static:
                key.append(("static", name, _hashable(value, f"argument {name!r}")))
                layout.append(None)
                continue
            leaves, tree = pytree.flatten(value)
            signature: list[tuple] = []
            for leaf in leaves:
                if _is_static_leaf(leaf):
                    signature.append(("value", leaf))
                elif isinstance(leaf, Tensor):
                    return None, []      # called while tracing another function
                else:
                    arr = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
                    signature.append(("array", arr.shape, arr.dtype.str))
                    dynamic.append(leaf)
            key.append((name, tree, tuple(signature)))
            layout.append((tree, [s[1] if s[0] == "value" else _DYNAMIC for s in signature]))
        cache_key = tuple(key)
        compiled = self._cache.get(cache_key)
        if compiled is None:
            compiled = self._compile(entries, layout, bound, dynamic)
            self._cache[cache_key] = compiled
            if len(self._cache) >= RETRACE_WARNING and not self._warned:
                self._warned = True
                warnings.warn(f"gc.jit: {getattr(self.fn, '__name__', 'function')} has been compiled for "
                              f"{len(self._cache)} different signatures (shapes, dtypes or static values change "
                              "between calls); give symbolic dims with gc.compile(fn, gc.spec(...)) instead",
                              stacklevel=3)
        return compiled, dynamic

    def _compile(self, entries, layout, bound, dynamic: list) -> CompiledFunction:
        names = [name for name, _, _ in entries]
        input_names = [path for (name, _, _), lay in zip(entries, layout) if lay is not None
                       for path, marker in zip(pytree.paths(lay[0], name), lay[1]) if marker is _DYNAMIC]
        specs = [spec(np.shape(a), np.asarray(a).dtype) if not isinstance(a, np.ndarray) else spec(a.shape, a.dtype)
                 for a in dynamic]

        def flat_fn(*tensors):
            it = iter(tensors)
            values = []
            for (_, value, _), lay in zip(entries, layout):
                if lay is None:
                    values.append(value)
                else:
                    tree, markers = lay
                    values.append(pytree.unflatten(tree, [next(it) if m is _DYNAMIC else m for m in markers]))
            if bound is None:
                return self.fn(*values)
            arguments = dict(zip(names, values))
            call = bound.signature.bind_partial()
            call.arguments.update(arguments)
            return self.fn(*call.args, **call.kwargs)

        options = dict(self.options)
        name = options.pop("name", None) or getattr(self.fn, "__name__", "function")
        traced = trace(flat_fn, specs, name=name, input_names=input_names)
        if all(lay is not None and all(m is _DYNAMIC for m in lay[1]) for lay in layout):
            # every argument is arrays only: the compiled function takes the same pytrees as fn
            traced.in_trees, traced.arg_names = [lay[0] for lay in layout], names
        return compile_traced(traced, **options)

    def compiled(self, *args: Any, **kwargs: Any) -> CompiledFunction:
        """The CompiledFunction these arguments run on (compiled now if their signature is new). Where
        every argument is an array or a pytree of arrays it takes the same arguments as the function;
        with static values it takes the array leaves alone, in order (its `input_names`)."""
        compiled = self._lookup(args, kwargs)[0]
        if compiled is None:
            raise GcompileError("Jitted.compiled takes arrays, not Tensors")
        return compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        compiled, dynamic = self._lookup(args, kwargs)
        if compiled is None:
            return self.fn(*args, **kwargs)   # called while tracing another function: inline it
        return pytree.unflatten(compiled.traced.out_tree, compiled.run_flat(*dynamic))


class _Dynamic:
    def __repr__(self) -> str:
        return "<array leaf>"


_DYNAMIC = _Dynamic()


def jit(fn: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), provider: str = "auto", opset: int | None = None,
        optimize: int = 2, name: str | None = None, check_numerics: bool = False,
        recompute: bool = False, memory_budget: int | None = None) -> Any:
    """Compile `fn` on its first call and again for each new signature (see the module doc).
    Usable as @gc.jit or @gc.jit(static_argnums=1, provider="cpu"); the options are gc.compile's."""
    options = dict(provider=provider, opset=opset, optimize=optimize, name=name, check_numerics=check_numerics,
                   recompute=recompute, memory_budget=memory_budget)

    def wrap(f: Callable) -> Jitted:
        return Jitted(f, static_argnums, static_argnames, **options)
    return wrap if fn is None else wrap(fn)


def _takes_arguments(fn: Callable) -> bool:
    try:
        return bool(inspect.signature(fn).parameters)
    except (TypeError, ValueError):   # no signature to read: keep the decorator's reading
        return True


def compile(fn: Callable | None = None, *args: Any, provider: str = "auto", opset: int | None = None,
            optimize: int = 2, name: str | None = None, check_numerics: bool = False,
            recompute: bool = False, target: str | None = None, memory_budget: int | None = None) -> Any:
    """Trace `fn` with one graph input per argument (gc.spec or example array, or a pytree of
    them, one input per leaf) and compile it.

    optimize: 0 runs no graph pass, 1 dead code and common subexpressions, 2 (default) also
    constant folding and algebraic simplification. check_numerics: see CompiledFunction.
    recompute: also recompute cheap forward nodes in the backward instead of keeping them alive
    (regions marked with gc.checkpoint are recomputed either way); see passes/recompute.py.
    target: the runtime the model is lowered for ("portable", "ort-cpu", "cuda"; by default the
    provider's own: "ort-cpu" on the CPU), docs/targets.md.
    memory_budget: bytes the values a call computes may take at once (its activations, gradients
    and outputs, as planned from their static sizes in the order the call runs, not its inputs):
    forward values are recomputed in the backward, those freeing the most per operation first,
    until the plan fits, within one forward pass's operations (a warning says when it does not);
    the runtime's own overhead comes on top (docs/guide/passes.md).

    Without argument specs, as a bare decorator (@gc.compile, or @gc.compile(provider="cpu")),
    it is gc.jit: specs are taken from each call's arrays (runtime/jit.py). A function that takes
    no argument at all has nothing to wait for and is compiled at once.
    """
    if fn is None or (not args and _takes_arguments(fn)):
        return jit(fn, provider=provider, opset=opset, optimize=optimize, name=name,
                   check_numerics=check_numerics, recompute=recompute, memory_budget=memory_budget)
    traced = trace(fn, args, name=name)
    return compile_traced(traced, provider=provider, opset=opset, optimize=optimize,
                          check_numerics=check_numerics, recompute=recompute, target=target,
                          memory_budget=memory_budget)
