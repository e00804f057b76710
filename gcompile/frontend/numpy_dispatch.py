"""numpy functions called on Tensors (np.exp(x), np.sum(x, axis=1)) map to gcompile.functions;
anything else is a clear error that names the function and the closest supported one."""
from __future__ import annotations

import difflib

from ..errors import TraceError
from .source import user_location

# numpy name -> gcompile.functions name, where they differ
_RENAMES = {"absolute": "abs", "true_divide": "divide", "amax": "max", "amin": "min", "concatenate": "concat",
            "negative": "negative", "dot": "matmul"}


def _lookup(name: str):
    from .. import functions as F
    target = _RENAMES.get(name, name)
    fn = getattr(F, target, None)
    if fn is None or target.startswith("_") or target not in F.__all__:
        close = difflib.get_close_matches(target, F.__all__, n=1)
        hint = f"; the closest supported function is gcompile.functions.{close[0]}" if close else ""
        raise TraceError(f"numpy.{name} is not supported on traced Tensors (at {user_location()}){hint}")
    return fn


def dispatch_ufunc(ufunc, method, inputs, kwargs):
    if method != "__call__" or kwargs.get("out") is not None:
        raise TraceError(f"numpy.{ufunc.__name__}.{method} is not supported on traced Tensors (at {user_location()})")
    return _lookup(ufunc.__name__)(*inputs)


def dispatch_function(func, args, kwargs):
    return _lookup(func.__name__)(*args, **kwargs)
