"""Execution provider choice and session creation for onnxruntime.

onnxruntime-gpu lists the CUDA provider even where CUDA cannot load, and then prints a
loud error and runs on CPU; so we probe once, with logging silenced, and report the
provider that really runs (ARCHITECTURE.md §10).
"""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import GcompileError
from ..install_check import onnxruntime  # every first use of onnxruntime is checked (a doubled install)
from .adaptive import ADAPT_MAX_BYTES, ADAPT_MAX_NODES, AdaptiveSession
from .subnormals import keep_subnormals

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_ERRORS, _SILENT = 3, 4   # onnxruntime log severities

# Above this many ONNX nodes a session plans memory without reusing buffers statically: ONNX
# Runtime's planner scans a list of freed buffers for each allocation, and a backward pass frees
# far more forward-shaped buffers than it asks for, so planning grew quadratically (18 s of a
# 19,000-node LSTM gradient's session). The arena and the per-shape memory pattern still reuse
# memory at run time: peak RSS measured the same (docs/notes/performance-history.md).
MEMORY_REUSE_MAX_NODES = 4000
# Above this many, no memory pattern either: with static reuse off, ONNX Runtime plans the first
# run's memory pattern by placing every buffer among the live ones, which grew quadratically too
# (a 98,000-node LSTM gradient's first run took 60 s of CPU; without the pattern 0.2 s). Later
# runs then allocate from the arena as they go: 5-25% slower per run at 30,000 nodes, where the
# pattern's first run still cost 1-1.4 s.
MEMORY_PATTERN_MAX_NODES = 50000


@functools.cache
def cuda_available() -> bool:
    from onnx import TensorProto, helper
    ort = onnxruntime()
    if PROVIDERS["cuda"] not in ort.get_available_providers():
        return False
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in "xy"]
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", io[:1], io[1:]),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.log_severity_level = _SILENT
    try:
        with quiet_onnxruntime():
            session = ort.InferenceSession(model.SerializeToString(), options,
                                           providers=[PROVIDERS["cuda"], PROVIDERS["cpu"]])
        return session.get_providers()[0] == PROVIDERS["cuda"]
    except Exception:
        return False


def resolve_provider(requested: str) -> str:
    """'auto' -> 'cuda' where the CUDA provider really loads, else 'cpu'."""
    requested = (requested or "auto").lower()
    if requested == "auto":
        return "cuda" if cuda_available() else "cpu"
    if requested not in PROVIDERS:
        raise GcompileError(f"unknown provider {requested!r}: use 'auto', 'cpu' or 'cuda'")
    if requested == "cuda" and not cuda_available():
        raise GcompileError("provider 'cuda' was requested but the CUDA execution provider does not load here "
                            "(no GPU, or CUDA/cuDNN libraries missing); use provider='auto' or 'cpu'")
    return requested


@functools.cache
def external_data_from_memory() -> bool:
    """Whether the installed onnxruntime takes a model's external data files from memory (1.29 on)."""
    import onnxruntime as ort
    return hasattr(ort.SessionOptions(), "add_external_initializers_from_files_in_memory")


_QUIET_LOCK = threading.Lock()
_quiet_depth = [0]   # sessions being created in any thread: the logger is one setting for the process


@contextlib.contextmanager
def quiet_onnxruntime() -> Iterator[None]:
    """Silence onnxruntime's default logger (its coloured lines on stderr) while creating a session:
    gcompile reports onnxruntime's errors itself, in one paragraph. Afterwards (once no other thread
    is creating one) it logs errors only."""
    import onnxruntime as ort
    with _QUIET_LOCK:
        _quiet_depth[0] += 1
        ort.set_default_logger_severity(_SILENT)
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _quiet_depth[0] -= 1
            if not _quiet_depth[0]:
                ort.set_default_logger_severity(_ERRORS)


# Pad_Fusion merges a zero Pad into a following MaxPool, whose pads count as -inf: wrong
# wherever a padded zero is a window's maximum. gcompile's own models never match it
# (LowerContext.pad); disabling it keeps `gcompile run` right on other people's models too.
# MatMulScaleFusion folds a scalar Mul into FusedMatMul's alpha, a float32 attribute: a float64
# x @ y * scale then carries float32 rounding (1e-8 relative).
# EliminateDropout, in onnxruntime's inference builds (every pip package), removes any Dropout
# whose mask is unused and whose output is not a graph output, training_mode or not: F.dropout in
# a training step after a matmul silently kept every element. An inference-mode Dropout of someone
# else's model then runs as the copy it is.
# GemmTransposeFusion folds a Transpose into the Gemm that reads it (transA/transB): the ort-cpu
# target's explicit_transpose strategy writes that Transpose on purpose (lowering/targets/ort_cpu/
# linalg.py), and gcompile's own gemm pass folds the others; in other people's models the fusion
# saved a Transpose's pass at most.
DISABLED_OPTIMIZERS = ["Pad_Fusion", "MatMulScaleFusion", "EliminateDropout", "GemmTransposeFusion"]
# Also off for graphs run in their own order (ordered_model): merging equal nodes would merge the
# recompute pass's copies back into their originals (tying them to the forward again); constant
# folding turned fills of static shape into constants held for the session's life (a max pool's
# gradient's zeros: 25 MB of a ResNet-50 step's session), which gcompile's own folding leaves to
# run time on purpose (over 4,096 elements).
ORDERED_DISABLED = ["CommonSubexpressionElimination", "ConstantFolding"]


def session_options(nodes: int | None = None, threads: int | None = None, spin: bool = False,
                    in_order: bool = False):
    """The onnxruntime SessionOptions gcompile's sessions use, for a model of `nodes` nodes when
    known (memory planning by size: MEMORY_REUSE_MAX_NODES, MEMORY_PATTERN_MAX_NODES;
    tools/kernel_profile.py starts from them too): `threads` intra-op threads (default: one per core).
    Idle workers sleep, unless `spin`: then they spin while a run lasts and stop when it returns
    (runtime/adaptive.py says when each is used, and why).

    `in_order`: the model is one ONNX Runtime has optimized already, its nodes in the order they
    are to run (ordered_model): the session runs them in that order (ONNX Runtime's priority
    order, first ready node in the file first), optimizes nothing again, plans neither a memory
    pattern nor static buffer reuse, and allocates each value from the process's shared arena
    (shared_arena) when it is made, giving it back after its last reader: the lifetimes
    ir/memory.py plans. A pattern is one block per run for every value, planned from the first
    run, and that run's blocks stay in the arena beside it: on such graphs it doubled the step's
    peak. Static reuse hands a value the buffer of an earlier value of the same size that is no
    longer read, and that buffer is then held from the earlier value's last reader until the
    later value's: in a training step, a buffer of the forward's temporaries waits idle through
    the forward for a gradient of the same shape (docs/performance.md measures both)."""
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL if in_order \
        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if in_order:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
        options.enable_mem_pattern = False
        options.enable_mem_reuse = False
        shared_arena()
        options.add_session_config_entry("session.use_env_allocators", "1")
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if spin:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    if nodes is not None and nodes > MEMORY_REUSE_MAX_NODES:
        options.enable_mem_reuse = False
    if nodes is not None and nodes > MEMORY_PATTERN_MAX_NODES:
        options.enable_mem_pattern = False
    # subnormal floats flushed to zero on the pool's threads (runtime/subnormals.py: the calling thread too)
    options.add_session_config_entry("session.set_denormal_as_zero", "0" if keep_subnormals() else "1")
    options.log_severity_level = _SILENT      # also at run time: errors reach the caller as exceptions
    return options


_ARENA_LOCK = threading.Lock()
ARENA_MAX_DEAD_BYTES = 1 << 20
_arena_registered = [False]


def shared_arena() -> None:
    """Register one CPU memory arena for the process (ONNX Runtime's environment allocator), from
    which the sessions of large graphs allocate: an arena keeps what a run took for the next
    run, so sessions with arenas of their own (an adaptive session's variants, a training step
    and its evaluation) each kept a whole step's memory, and a process running them in turn held
    the sum where it needs the largest. Registered once, at the first such session.

    A request takes a free block of the arena whole, unsplit, where the block is less than twice
    its size and what it leaves unused is below the arena's dead-bytes limit: 128 MiB by default,
    so a step's 30 MiB value held a freed 49 MiB block whole, and the next large value needed new
    memory. With ARENA_MAX_DEAD_BYTES the rest of any block beyond 1 MiB stays free for others
    (docs/performance.md: the peaks by model)."""
    ort = onnxruntime()
    with _ARENA_LOCK:
        if not _arena_registered[0]:
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, ARENA_MAX_DEAD_BYTES))
            _arena_registered[0] = True


def ordered_model(model: bytes, order: Sequence, nodes: int | None = None):
    """`model` as ONNX Runtime's CPU provider optimizes it (its fusions, folding and layouts), the
    nodes in the order of `order`, the NodeProtos of `model` in the order they should run
    (lowering/order.py, follow_order); None where ONNX Runtime cannot write or read that model
    back (then the caller runs `model` itself). An onnx ModelProto; the optimizing session is made
    and dropped."""
    import onnx

    from ..lowering.order import follow_order
    ort = onnxruntime()
    with tempfile.TemporaryDirectory(prefix="gcompile-") as folder:
        path = os.path.join(folder, "optimized.onnx")
        options = session_options(nodes, 1)
        options.optimized_model_filepath = path
        shared_arena()     # (what optimizing allocates is then reused by the runs, not left in the process's heap)
        options.add_session_config_entry("session.use_env_allocators", "1")
        try:
            with quiet_onnxruntime():
                ort.InferenceSession(model, options, providers=[PROVIDERS["cpu"]],
                                     disabled_optimizers=DISABLED_OPTIMIZERS + ORDERED_DISABLED)
            optimized = onnx.load(path)
        except Exception:
            return None
    nodes_in_order = follow_order(list(optimized.graph.node), list(order), value_sizes(model))
    del optimized.graph.node[:]
    optimized.graph.node.extend(nodes_in_order)
    return optimized


def value_sizes(model: bytes) -> dict[str, int] | None:
    """The bytes of each value of `model` whose shape ONNX's shape inference finds static, by name;
    None where inference fails. Without onnx's data propagation: a lowered model's shapes follow
    from its inputs' types, and data propagation keeps a dimension record for every element of
    each 1-D value it passes through a Concat, Slice or elementwise op, which grew with the
    values' sizes (a large 1-D value's compile took gigabytes)."""
    import math

    import onnx
    from onnx import helper
    try:
        inferred = onnx.shape_inference.infer_shapes(onnx.load_from_string(model))
    except Exception:
        return None
    sizes = {}
    for info in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tensor = info.type.tensor_type
        if tensor.HasField("shape") and tensor.elem_type and all(d.HasField("dim_value") for d in tensor.shape.dim):
            count: int = math.prod([int(d.dim_value) for d in tensor.shape.dim])
            sizes[info.name] = count * helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
    return sizes


def make_session(model: bytes | str, provider: str, external: Mapping[str, Any] | None = None,
                 nodes: int | None = None, threads: int | None = None, fixed_threads: bool = False,
                 order: Sequence | None = None):
    """A session for serialised model bytes or a model path (a path lets onnxruntime find external data).

    `external` maps the external data locations a model given as bytes refers to onto their
    contents (see external_data_from_memory); `nodes` is the model's node count, when known
    (see MEMORY_REUSE_MAX_NODES). `threads`: onnxruntime's intra-op threads, for a process that
    shares the machine by design (a distributed worker passes its share); the environment
    variable GCOMPILE_THREADS sets it for every session. Otherwise, on the CPU of a machine with
    several cores, for model bytes of at most adaptive.ADAPT_MAX_NODES nodes and ADAPT_MAX_BYTES,
    the session picks its thread count by timing itself (runtime/adaptive.py), unless
    `fixed_threads`: then it only picks whether idle workers spin, so that its numbers never
    depend on timing (ONNX Runtime's matrix products round differently with another thread
    count; a training run must give the same steps whenever it runs).

    `order`: model bytes' nodes in the order they should run (lowering/order.py keeps the trace
    order of graphs of large planned peaks); on the CPU without external data the session runs
    them in that order, through ordered_model."""
    ort = onnxruntime()
    threads = threads or configured_threads()
    in_order, ran = False, None
    if order is not None and provider == "cpu" and isinstance(model, bytes) and not external:
        optimized = ordered_model(model, order, nodes)
        if optimized is not None:
            import onnx
            ran = onnx.GraphProto(node=optimized.graph.node)    # the nodes alone, for run_order
            model, in_order = optimized.SerializeToString(), True

    def make(threads: int | None = None, spin: bool = False):
        options = session_options(nodes, threads, spin, in_order)
        if external:
            names = list(external)
            options.add_external_initializers_from_files_in_memory(names, [external[n] for n in names],
                                                                   [len(external[n]) for n in names])
        providers = [PROVIDERS[provider]] + ([PROVIDERS["cpu"]] if provider != "cpu" else [])
        with quiet_onnxruntime():
            return ort.InferenceSession(model, options, providers=providers, disabled_optimizers=DISABLED_OPTIMIZERS)
    cores = os.cpu_count() or 1
    # A model read from a path may sit in a scratch folder gone before the second session is made.
    size = len(model) + sum(len(v) for v in (external or {}).values()) if isinstance(model, bytes) else None
    if threads is None and provider == "cpu" and cores > 1 and nodes is not None and nodes <= ADAPT_MAX_NODES \
            and size is not None and size <= ADAPT_MAX_BYTES:
        session: Any = AdaptiveSession(make, cores, thread_counts=not fixed_threads)
    else:
        session = make(threads)
    session._gcompile_run = ran
    return session


def run_order(session) -> list | None:
    """The onnx NodeProtos a session of make_session runs, in the order it runs them (a model
    run in its own order: ordered_model); None where ONNX Runtime chooses the order."""
    ran = getattr(session, "_gcompile_run", None)
    return None if ran is None else list(ran.node)


def configured_threads() -> int | None:
    """GCOMPILE_THREADS as a positive thread count, or None when unset (a clear error otherwise)."""
    value = os.environ.get("GCOMPILE_THREADS", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise GcompileError(f"GCOMPILE_THREADS must be a positive whole number of threads, got {value!r}")
    return int(value)

