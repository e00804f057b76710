"""Subnormal floats flushed to zero wherever a session computes, as PyTorch's and JAX's CPU kernels
do by default.

A CPU computes with subnormal operands or results (magnitudes below 1.2e-38 in float32) many
times slower than with normal ones; a gradient that decays through a long loop into that range
made a 10,000-step scan 20-45 times slower than JAX's on an Intel Xeon (docs/performance.md).
Flushing them (results to zero: FTZ; subnormal operands read as zero: DAZ) is a per-thread mode
of the CPU. ONNX Runtime sets it, with the session option `session.set_denormal_as_zero`, on its
pool's threads; but the thread that calls `run` does a share of every parallel kernel and runs
every loop body alone, and ONNX Runtime sets that thread's mode only once per process, for the
thread that creates the process's first session, from that session's options. So the calling
thread is put in that mode for the duration of each run (`flushed`) and restored after it: the
caller's own NumPy arithmetic on that thread keeps subnormals.

GCOMPILE_SUBNORMALS=keep keeps subnormals everywhere (IEEE arithmetic, for code that needs values
that small, such as F.nextafter next to zero), at that speed. The mode is x86-64's MXCSR, set
through the C library's fegetenv/fesetenv where it is glibc's layout (Linux); elsewhere only
ONNX Runtime's own threads flush.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import platform
from collections.abc import Iterator

_FLUSH_BITS = 0x8040          # MXCSR: flush to zero (bit 15) and denormals are zero (bit 6)
_MXCSR_OFFSET = 28            # glibc's x86-64 fenv_t: the x87 environment (28 bytes), then MXCSR


def keep_subnormals() -> bool:
    """Whether GCOMPILE_SUBNORMALS asks to keep subnormals: "keep" does, "flush" or unset do not, anything
    else is an error."""
    value = os.environ.get("GCOMPILE_SUBNORMALS", "").strip().lower()
    if value not in ("", "flush", "keep"):
        from ..errors import GcompileError
        raise GcompileError(f"GCOMPILE_SUBNORMALS must be 'flush' or 'keep', got {value!r}")
    return value == "keep"


@functools.cache
def _fenv():
    """(fegetenv, fesetenv) of the C library where the calling thread's MXCSR can be set that way,
    else None."""
    if platform.machine().lower() not in ("x86_64", "amd64") or platform.system() != "Linux":
        return None
    name = ctypes.util.find_library("m")
    if name is None:
        return None
    try:
        libm = ctypes.CDLL(name)
        get, put = libm.fegetenv, libm.fesetenv
    except (OSError, AttributeError):
        return None
    get.argtypes = put.argtypes = [ctypes.c_void_p]
    get.restype = put.restype = ctypes.c_int
    return get, put


@contextlib.contextmanager
def flushed() -> Iterator[None]:
    """The calling thread flushes subnormals while the block runs (see the module's docstring)."""
    fenv = None if keep_subnormals() else _fenv()
    if fenv is None:
        yield
        return
    get, put = fenv
    saved = ctypes.create_string_buffer(64)       # fenv_t is 32 bytes; room to spare
    if get(saved) != 0:
        yield
        return
    mode = ctypes.create_string_buffer(saved.raw, len(saved.raw))
    mxcsr = ctypes.c_uint32.from_buffer(mode, _MXCSR_OFFSET)
    if mxcsr.value & _FLUSH_BITS == _FLUSH_BITS:   # (already flushing: nothing to set or restore)
        yield
        return
    mxcsr.value |= _FLUSH_BITS
    put(mode)
    try:
        yield
    finally:
        put(saved)
