"""numpy functions called on Tensors (np.exp(x), np.sum(x, axis=1)) map to gcompile.functions;
anything else is a clear error that names the function and the closest supported one."""
from __future__ import annotations

import difflib
from types import ModuleType

from ..errors import TraceError
from ..frontend.source import user_location

_library: list[ModuleType] = []   # gcompile.functions, handed over by methods.install (importing it would be a cycle)


def use(library: ModuleType) -> None:
    """The op library numpy calls map onto (gcompile.functions)."""
    _library[:] = [library]

# numpy name -> gcompile.functions name, where they differ
_RENAMES = {"absolute": "abs", "true_divide": "divide", "amax": "max", "amin": "min", "concatenate": "concat",
            "repeat": "repeat_interleave"}
# numpy keyword -> gcompile.functions keyword, per function, where they differ
_KEYWORDS = {"pad": {"constant_values": "value"}}


def _numpy_spread(fn):
    """numpy's var/std: ddof (default 0) is gcompile's correction (default 1, as PyTorch)."""
    return lambda a, axis=None, dtype=None, out=None, ddof=0, keepdims=False: fn(a, axis, ddof, keepdims)


# numpy functions whose defaults differ from the gcompile.functions of the same name
_ADAPTED = {"var": lambda F: _numpy_spread(F.var), "std": lambda F: _numpy_spread(F.std)}
# numpy functions whose meaning differs: refused rather than silently computed otherwise
_DIFFERENT = {"median": "numpy.median averages the two middle values of an even-sized slice, "
                        "gcompile.functions.median is PyTorch's lower median: call it directly",
              "nanmedian": "numpy.nanmedian averages the two middle numbers of an even count, "
                           "gcompile.functions.nanmedian is PyTorch's lower median: call it directly"}


def _lookup(name: str, module: str = "numpy"):
    F = _library[0]
    if module == "numpy" and name in _DIFFERENT:
        raise TraceError(f"numpy.{name} on traced Tensors is not supported (at {user_location()}): "
                         f"{_DIFFERENT[name]}")
    if module == "numpy" and name in _ADAPTED:
        return _ADAPTED[name](F)
    target = _RENAMES.get(name, name)
    if target in F.__all__:
        return getattr(F, target)
    # Only top-level numpy names are matched by spelling: np.linalg.inv is not "sin".
    close = difflib.get_close_matches(target, F.__all__, n=1) if module == "numpy" else []
    hint = f"; the closest supported function is gcompile.functions.{close[0]}" if close else \
        "; see gcompile.functions for the supported ops"
    raise TraceError(f"{module}.{name} is not supported on traced Tensors (at {user_location()}){hint}")


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """Tensor.__array_ufunc__: np.exp(x), x + np.float32(1), ..."""
    if method != "__call__" or kwargs.get("out") is not None:
        raise TraceError(f"numpy.{ufunc.__name__}.{method} is not supported on traced Tensors (at {user_location()})")
    return _lookup(ufunc.__name__)(*inputs)


def array_function(self, func, types, args, kwargs):
    """Tensor.__array_function__: np.sum(x, axis=1), np.concatenate([x, y]), ..."""
    keywords = _KEYWORDS.get(func.__name__, {})
    kwargs = {keywords.get(k, k): v for k, v in kwargs.items()}
    return _lookup(func.__name__, getattr(func, "__module__", None) or "numpy")(*args, **kwargs)
