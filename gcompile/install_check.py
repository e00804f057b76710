"""The installed onnxruntime, checked at first use, with the repair said in one paragraph.

onnxruntime ships as several distributions (onnxruntime, onnxruntime-gpu, ...) that all write
the one module `onnxruntime`. gcompile depends on onnxruntime-gpu on Linux x86-64; an
environment that already has onnxruntime (jax2onnx and others pull it in) ends up with both,
sharing one folder of files. It works until either is uninstalled or upgraded alone: pip then
deletes files the other still needs, and what is left imports as a module without
`InferenceSession` or `get_available_providers`, so every compile would die on an
AttributeError deep inside. Every first use of onnxruntime in gcompile goes through
`onnxruntime()` below, which refuses such a module with a GcompileError that names the
distributions found and gives the exact pip commands, and warns once about a doubled install
that still works.
"""
from __future__ import annotations

import functools
import importlib.metadata
import platform
import shlex
import sys
from types import ModuleType

from .errors import GcompileError
from .logs import logger

# Distributions that install the `onnxruntime` module; gcompile's own choice comes first per platform.
DISTRIBUTIONS = ("onnxruntime-gpu", "onnxruntime", "onnxruntime-directml", "onnxruntime-openvino",
                 "onnxruntime-qnn", "onnxruntime-rocm", "onnxruntime-training")
# What gcompile uses of the module; a half-deleted install lacks them.
REQUIRED = ("InferenceSession", "SessionOptions", "GraphOptimizationLevel", "OrtValue", "get_available_providers",
            "set_default_logger_severity")


def installed_distributions() -> list[str]:
    """The onnxruntime distributions pip has recorded as installed, as 'name version'."""
    found = []
    for name in DISTRIBUTIONS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def chosen_distribution() -> str:
    """The distribution gcompile's dependencies name on this platform (see pyproject.toml)."""
    linux_x86 = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")
    return "onnxruntime-gpu" if linux_x86 else "onnxruntime"


def repair_advice(found: list[str]) -> str:
    """The pip commands that leave exactly one onnxruntime distribution, gcompile's."""
    pip = f"{shlex.quote(sys.executable)} -m pip"
    names = sorted({entry.split()[0] for entry in found} | {"onnxruntime", "onnxruntime-gpu"})
    chosen = chosen_distribution()
    return (f"repair it by removing every onnxruntime distribution and installing one: `{pip} uninstall -y "
            f"{' '.join(names)}` then `{pip} install --force-reinstall {chosen}` ({chosen} also runs on "
            "machines without a GPU; packages that ask for `onnxruntime`, such as jax2onnx, import the same "
            "module from it, though `pip check` will still name them)")


def _describe(found: list[str]) -> str:
    if not found:
        return "no onnxruntime distribution is recorded by pip"
    if len(found) == 1:
        return f"pip records {found[0]}"
    return f"pip records {len(found)} distributions that share that module ({', '.join(found)})"


@functools.cache
def _warn_doubled(found: tuple[str, ...]) -> None:
    logger.warning("%s; they overwrite each other's files, and uninstalling or upgrading one alone breaks the "
                   "other. To avoid that, %s", _describe(list(found)), repair_advice(list(found)))


@functools.cache   # a failure raises, and is not cached: the next use checks again
def onnxruntime() -> ModuleType:
    """The `onnxruntime` module, checked: a GcompileError with the repair where it cannot be imported
    or lacks what gcompile uses (a broken or half-uninstalled install); a warning, once per process,
    where pip records more than one onnxruntime distribution but the module still works."""
    found = installed_distributions()
    try:
        import onnxruntime as ort
    except Exception as err:   # ImportError, or an error raised while importing a half-deleted package
        raise GcompileError(f"onnxruntime cannot be imported ({type(err).__name__}: {err}); {_describe(found)}; "
                            f"{repair_advice(found)}") from None
    missing = [name for name in REQUIRED if not hasattr(ort, name)]
    if missing:
        where = getattr(ort, "__file__", None) or ", ".join(getattr(ort, "__path__", [])) or "?"
        raise GcompileError(f"the installed onnxruntime is broken: its module ({where}) has no "
                            f"{', '.join(missing)}, which happens when two onnxruntime distributions were "
                            f"installed into one environment and one was later removed or upgraded; "
                            f"{_describe(found)}; {repair_advice(found)}")
    if len(found) > 1:
        _warn_doubled(tuple(found))
    return ort
