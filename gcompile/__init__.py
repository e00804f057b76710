"""gcompile: trace numeric Python, differentiate it symbolically to any order, export standard ONNX.

The library loads on first use: `import gcompile` itself imports only the version and the error
classes, and the first attribute asked of the package (gc.compile, gc.spec, ...) imports the rest
(numpy, networkx, onnx, the op library and every room), about 0.5 s. So `gcompile --help` and
other commands that need none of it start at once. Importing a submodule directly
(`import gcompile.functions as F`) works as always: it imports what it needs itself.
"""
import importlib
import importlib.util
import threading

from .version import __version__  # noqa: F401
from .errors import GcompileError, InputError, LoweringError, ShapeError, TraceError, UnsupportedError  # noqa: F401

_loading = False
# Held while the library loads: a thread asking for gc.compile while another loads it waits for
# the load to finish instead of finding the package half bound. Reentrant, because the loading
# thread's own imports may ask the package for a name again (`_loading` answers those).
_load_lock = threading.RLock()


def _load() -> None:
    """Load the library once, whichever thread asks first; the others wait for it."""
    if "compile" in globals():
        return
    with _load_lock:
        if "compile" not in globals() and not _loading:
            _bind_public_names()


def _bind_public_names() -> None:
    """Import the whole library and bind its public names onto the package (what `import gcompile`
    did eagerly before); the op library registers every op and Tensor's operators on import."""
    global _loading
    _loading = True
    try:
        from . import functions, nn, optim, runtime
        from .artifacts.marks import export, export_train
        from .frontend import pytree as tree_util
        from .frontend.pytree import register_dataclass, register_pytree_node
        from .frontend.spec import Spec, spec
        from .frontend.tensor import Tensor
        from .gradients import checkpoint as _checkpoint
        from .gradients import grad
        from .gradients import implicit as _implicit
        from .gradients import transforms as _transforms
        from .gradients.vmap import vmap
        from .importer import load as _load_module
        from .importer.torch import from_torch
        from .ops.control import cond, fori_loop, scan, while_loop
        from .ops.random import random_key
        from .runtime import CompiledFunction, Jitted, compile, jit
        from .training.step import TrainStep, export_train_step
        public = {"functions": functions, "optim": optim, "runtime": runtime, "nn": nn, "export": export,
                  "export_train": export_train, "Spec": Spec, "spec": spec, "Tensor": Tensor, "grad": grad,
                  "CompiledFunction": CompiledFunction, "Jitted": Jitted, "jit": jit, "TrainStep": TrainStep,
                  "export_train_step": export_train_step, "tree_util": tree_util,
                  "register_pytree_node": register_pytree_node, "register_dataclass": register_dataclass,
                  "vmap": vmap, "from_torch": from_torch, "scan": scan, "fori_loop": fori_loop,
                  "while_loop": while_loop, "cond": cond, "random_key": random_key}
        for module in (_transforms, _checkpoint, _load_module, _implicit):
            public.update({name: getattr(module, name) for name in module.__all__})
        globals().update(public)
        globals()["__all__"] = ["functions", "spec", "Spec", "Tensor", "grad", "compile", "jit", "Jitted",
                                "CompiledFunction", "GcompileError", "InputError", "LoweringError", "ShapeError",
                                "TraceError", "UnsupportedError", "__version__", "optim", "runtime", "nn", "export",
                                *_transforms.__all__, *_checkpoint.__all__, *_load_module.__all__,
                                *_implicit.__all__, "TrainStep",
                                "export_train", "export_train_step", "tree_util", "register_pytree_node",
                                "register_dataclass", "vmap", "from_torch", "scan", "fori_loop", "while_loop", "cond",
                                "random_key"]
        globals()["compile"] = compile   # last: its presence marks the library as loaded
    finally:
        _loading = False


def __getattr__(name: str):
    if name.startswith("__") and name != "__all__":   # dunders asked by tools (__path__ lookups, __wrapped__, ...)
        raise AttributeError(f"module 'gcompile' has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:   # a submodule (`from . import logs`): only it
        return importlib.import_module(f"{__name__}.{name}")
    _load()
    try:
        return globals()[name]
    except KeyError:
        raise AttributeError(f"module 'gcompile' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    _load()
    return sorted(globals())
