"""Counter-based random draws: masks that are a pure function of a key, a stream and the position.

ONNX's Dropout and RandomUniformLike draw from a generator that each runtime keeps and seeds in
its own way: the masks differ between ONNX Runtime, onnx's ReferenceEvaluator and OpenVINO, and
a run resumed from a checkpoint starts the generator again, so its masks are not those the
uninterrupted run would have drawn. A keyed draw instead hashes (key, stream, position) with
integer ops in the graph: the key is a vector of int64 words (a training step's counter, the
index of each enclosing loop's step, a vmap example's index), the stream tells the draws of one
step apart (a number per draw in trace order, or the seed the user gives), and the position is
the element's flat index. The same step on any runtime, resumed or not, gives the same masks,
and the numpy reference computes the same bits.

The hash works on 31-bit values held in uint32 (`mix`: xor-shifts and multiplications by odd
constants modulo 2^31, a bijection of the 31-bit values, with a second key xored in between its
rounds for each element). Every runtime computes it alike: uint32
products wrap modulo 2^32 in ONNX Runtime and numpy, OpenVINO's CPU plugin computes uint32 (and
int64) in int32, whose products wrap to the same low bits, and the masks after each product, the
shifts and the final comparison only ever see values below 2^31, where signed and unsigned
agree. (Division, shifts and comparisons of values of 2^31 or more differ on OpenVINO, so
nothing here produces one before them.) Key words and positions count modulo 2^31.

Where a draw takes its key: `F.dropout(..., key=k)` gives it, else the innermost `random_key`
context (gc.export_train_step opens one around the loss function with the step counter), else
the draw is ONNX's own (runtime-seeded: not reproducible across runtimes or resumes). Inside a
loop body traced under a context, the loop front ends (ops/control.py) add the step's index to
the key, so each step draws its own mask; the backward of a loop recomputes the same masks from
the same key instead of saving them (gradients/loops.py sees an ordinary pure op, not a random
one).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from onnx import TensorProto, helper

from ..errors import GcompileError, ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, as_tensor, current_frame
from ..ir.dims import product
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from .basic import cast
from .indexing import concat
from .shape import reshape

__all__: list[str] = []   # gc.random_key is exported by gcompile/__init__.py; F.dropout(key=) draws

M31 = 0x7FFFFFFF
_ROUNDS = ((15, 0x6DD4B597), (14, 0x6025A62F))   # (shift, odd multiplier) of each round of `mix`
_LAST_SHIFT = 13
_START = 0x2545F491               # the key fold's starting value
_SALT = (0x1B873593, 0x5BD1E995)  # tell the stream's two keys apart
_UNIFORM_BITS = 24                # a uniform draw keeps the hash's top 24 bits: exact in float32
_UNIFORM_SHIFT = 31 - _UNIFORM_BITS


def mix(x, key=None) -> np.ndarray:
    """The 31-bit mixing function on numpy values (uint64 holding values below 2^31); `key` (below
    2^31) is xored in after the first round."""
    x = np.asarray(x, np.uint64)
    for i, (shift, multiplier) in enumerate(_ROUNDS):
        x = x ^ (x >> np.uint64(shift))
        x = (x * np.uint64(multiplier)) & np.uint64(M31)
        if i == 0 and key is not None:
            x = x ^ key
    return x ^ (x >> np.uint64(_LAST_SHIFT))


def stream_keys(seed: int, stream: int, named: bool) -> tuple[int, int]:
    """The two 31-bit constants of a draw's stream: the seed of its random_key context, its number
    (the seed the user gave, named=True, or its place in trace order) and which of the two it is."""
    k = mix(_START ^ (seed & M31))
    k = mix(k ^ (stream & M31))
    k = mix(k ^ int(named))
    return int(mix(k ^ _SALT[0])), int(mix(k ^ _SALT[1]))


def threshold(ratio: float) -> int:
    """The hash value below which a position is dropped: P(hash < T) = T / 2^31."""
    return int(round(float(ratio) * 2 ** 31))


# -- the ops ------------------------------------------------------------------------------------------------
def _check_key(op: str, types, batch_dims: int):
    key, like = types
    lead = like.shape[:batch_dims]
    if key.dtype != np.int64 or key.ndim != batch_dims + 1 or tuple(key.shape[:-1]) != tuple(lead) \
            or not isinstance(key.shape[-1], int):
        raise ShapeError(f"{op}: the key must be int64 of shape {(*lead, 'words')} with a static number of "
                         f"words, got {key}")


def _mask_infer(types, *, ratio, seed, stream, named, batch_dims):
    _check_key("dropout_mask", types, batch_dims)
    return [tensor_type(np.bool_, types[1].shape)]


def _uniform_infer(types, *, dtype, seed, stream, named, batch_dims):
    _check_key("keyed_uniform", types, batch_dims)
    return [tensor_type(np.dtype(dtype), types[1].shape)]


def _hashes(key, like, *, seed, stream, named, batch_dims) -> np.ndarray:
    """The 31-bit hash of every position of `like` (uint64), as the lowerings compute it."""
    inner = like.shape[batch_dims:]
    k = np.full(key.shape[:-1], _START, np.uint64)
    for j in range(key.shape[-1]):
        k = mix(k ^ (key[..., j] & M31).astype(np.uint64))
    c1, c2 = stream_keys(seed, stream, named)
    k1 = mix(k ^ np.uint64(c1))
    k2 = mix(k1 ^ np.uint64(c2))
    k1, k2 = (np.reshape(v, k.shape + (1,) * len(inner)) for v in (k1, k2))
    positions = np.arange(int(np.prod(inner, dtype=np.int64)), dtype=np.uint64).reshape(inner) & np.uint64(M31)
    return mix(positions ^ k1, k2)


def _mask_reference(key, like, *, ratio, **stream):
    return _hashes(key, like, **stream) >= np.uint64(threshold(ratio))


def _uniform_reference(key, like, *, dtype, **stream):
    top = _hashes(key, like, **stream) >> np.uint64(_UNIFORM_SHIFT)
    return (top.astype(np.float32) * np.float32(2.0 ** -_UNIFORM_BITS)).astype(dtype)


def _emit_mix(ctx, x: str, key: str | None = None) -> str:
    """`mix` as ONNX nodes on uint32 values (BitShift takes unsigned types only); a value's bit 31
    takes no part (the shifts clear it, the products drop it)."""
    for i, (shift, multiplier) in enumerate(_ROUNDS):
        x = _xor_shift(ctx, x, shift)
        x = _times(ctx, x, multiplier)
        if i == 0 and key is not None:
            x = ctx.emit("BitwiseXor", [x, key])
    return _xor_shift(ctx, x, _LAST_SHIFT)


def _u32(ctx, value: int) -> str:
    return ctx.const(np.asarray(value, np.uint32))


def _xor_shift(ctx, x: str, shift: int) -> str:
    """x ^ (x >> shift), the bits shifted out cleared first: OpenVINO's CPU plugin shifts (and divides)
    integers through float32, which rounds a value of more than 24 significant bits; what is left of
    a value below 2^31 once its low `shift` (>= 7) bits are cleared has at most 24."""
    high = ctx.emit("BitwiseAnd", [x, _u32(ctx, M31 & ~((1 << shift) - 1))])
    return ctx.emit("BitwiseXor", [x, ctx.emit("BitShift", [high, _u32(ctx, shift)], direction="RIGHT")])


def _times(ctx, x: str, multiplier: int) -> str:
    """x · multiplier modulo 2^31."""
    return ctx.emit("BitwiseAnd", [ctx.emit("Mul", [x, _u32(ctx, multiplier)]), _u32(ctx, M31)])


def _emit_hashes(ctx, names, node) -> str:
    """The key's words folded into one 31-bit value per key (a few scalar ops each), the stream's
    two keys from it, then per element: the position xored with the first key, mixed with the
    second key xored in after the first round (17 ops per element)."""
    a = node.attrs
    key, _ = names
    key_type, like_type = (ctx.graph.type_of(r) for r in node.inputs)
    inner = like_type.shape[a["batch_dims"]:]
    k = _u32(ctx, _START)
    for j in range(key_type.shape[-1]):
        word = ctx.emit("Gather", [key, ctx.const(np.asarray(j, np.int64))], axis=-1)
        word = ctx.emit("BitwiseAnd", [word, ctx.const(np.asarray(M31, np.int64))])
        k = _emit_mix(ctx, ctx.emit("BitwiseXor", [k, ctx.emit("Cast", [word], to=TensorProto.UINT32)]))
    c1, c2 = stream_keys(a["seed"], a["stream"], a["named"])
    k1 = _emit_mix(ctx, ctx.emit("BitwiseXor", [k, _u32(ctx, c1)]))
    k2 = _emit_mix(ctx, ctx.emit("BitwiseXor", [k1, _u32(ctx, c2)]))
    if inner and a["batch_dims"]:
        axes = ctx.int64s(list(range(a["batch_dims"], a["batch_dims"] + len(inner))))
        k1, k2 = (ctx.emit("Unsqueeze", [v, axes]) for v in (k1, k2))
    positions = ctx.emit("Reshape", [ctx.index_range(product(inner)), ctx.shape_tensor(inner)], allowzero=1)
    x = ctx.emit("BitwiseXor", [ctx.emit("Cast", [positions], to=TensorProto.UINT32), k1])
    return _emit_mix(ctx, x, k2)


def _lower_mask(ctx, names, node):
    """The hashes compared with the threshold."""
    x = _emit_hashes(ctx, names, node)
    if threshold(node.attrs["ratio"]) > M31:   # ratio 1: nothing kept (OpenVINO's int32 would read 2^31 as negative)
        return ctx.emit("Less", [x, _u32(ctx, 0)])
    return ctx.emit("GreaterOrEqual", [x, _u32(ctx, threshold(node.attrs["ratio"]))])


def _lower_uniform(ctx, names, node):
    """The hashes' top 24 bits (cleared below, then shifted: see _xor_shift) times 2^-24, in float32,
    where every such value is exact, then cast to the draw's dtype."""
    x = ctx.emit("BitwiseAnd", [_emit_hashes(ctx, names, node), _u32(ctx, M31 & ~((1 << _UNIFORM_SHIFT) - 1))])
    x = ctx.emit("BitShift", [x, _u32(ctx, _UNIFORM_SHIFT)], direction="RIGHT")
    u = ctx.emit("Mul", [ctx.emit("Cast", [x], to=TensorProto.FLOAT), ctx.const(np.float32(2.0 ** -_UNIFORM_BITS))])
    dtype = np.dtype(node.attrs["dtype"])
    return u if dtype == np.float32 else ctx.emit("Cast", [u], to=helper.np_dtype_to_tensor_dtype(dtype))


# dropout_mask(key, like): True with probability 1 - ratio at each position of `like` (whose values are
# not read), a pure function of the key (int64 words, one row per position of like's first batch_dims
# axes), the stream (seed, stream, named) and the position within like's other axes. Not Trait.RANDOM:
# two nodes with the same operands and stream hold the same mask, and recomputing one gives it again.
defop("dropout_mask", infer=_mask_infer, reference=_mask_reference, lower=_lower_mask, traits={Trait.NONDIFF})
# keyed_uniform(key, like): a float of `dtype` in [0, 1) at each position of `like`, a multiple of 2^-24
# (the top 24 bits of dropout_mask's hashes). Not Trait.RANDOM, as dropout_mask.
defop("keyed_uniform", infer=_uniform_infer, reference=_uniform_reference, lower=_lower_uniform,
      traits={Trait.NONDIFF})


def dropout_mask(key: Tensor, like: Tensor, ratio: float, seed: int, stream: int, named: bool,
                 batch_dims: int = 0) -> Tensor:
    """Record a dropout_mask node (see the defop above): the keep mask of a draw of `stream`."""
    return apply("dropout_mask", [key, like], ratio=float(ratio), seed=int(seed), stream=int(stream),
                 named=bool(named), batch_dims=int(batch_dims))


# -- where a draw takes its key ------------------------------------------------------------------------------
class NeedsIndex(Exception):
    """A draw asked for its key inside a loop body traced without its step's index (with_step_index
    then traces the loop again with one)."""


@dataclass
class _Context:
    words: list                          # the key: int64 vectors and scalars, outermost first; None: a
    seed: int                            # loop step's index not traced yet
    drawn: list[int] = field(default_factory=lambda: [0])   # draws and loops numbered so far

    def key(self) -> Tensor:
        """The words as one int64 vector in the trace being recorded (captured into loop bodies)."""
        if any(w is None for w in self.words):
            raise NeedsIndex
        parts = [reshape(cast(as_tensor(w), np.int64), (-1,)) for w in self.words]
        return concat(parts, axis=0)


class _Stack(threading.local):
    def __init__(self) -> None:
        self.contexts: list[_Context] = []


_STACK = _Stack()


@contextlib.contextmanager
def random_key(key=None, seed: int = 0) -> Iterator[None]:
    """Inside a traced function: the random draws recorded in this block (F.dropout in training, the
    layers and models built on it) are a pure function of (`seed`, `key`, the draw's place in the
    block, the element's position) instead of ONNX Runtime's generator. `key` is an int64 scalar
    or vector Tensor (or int): typically a step counter input, so that each step draws new masks
    and a run resumed at step t draws exactly the masks the uninterrupted run drew at step t, on
    any ONNX runtime. gc.export_train_step opens one with its step counter; inside it (in a loss
    function) `gc.random_key(seed=s)` keeps that key and draws other masks for another seed. Loops
    inside the block add their step's index to the key; gc.vmap adds each example's index (every
    example draws its own mask)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise GcompileError(f"random_key: seed must be an int, got {seed!r} (at {user_location()})")
    if key is None:
        if not _STACK.contexts:
            raise GcompileError(f"random_key: give a key (an int64 step counter, say); only inside another "
                                f"random_key block (a training step's loss function) does it keep that one's "
                                f"(at {user_location()})")
        words = list(_STACK.contexts[-1].words)
    else:
        key = as_tensor(key)
        if key.dtype.kind not in "iu" or key.ndim > 1 or (key.ndim == 1 and not isinstance(key.shape[0], int)):
            raise GcompileError(f"random_key: the key must be an integer scalar or vector of static length, got "
                                f"{key.type} (at {user_location()})")
        words = [key]
    _STACK.contexts.append(_Context(words, int(seed)))
    try:
        yield
    finally:
        _STACK.contexts.pop()


def active() -> bool:
    """Whether draws recorded now take their key from a random_key context."""
    return bool(_STACK.contexts)


def new_loop() -> int | None:
    """A number for a loop about to be traced under a random_key context (None outside one): with the
    step's index, one more pair of words of the key of its body's draws, so that two loops' steps
    of the same index draw different masks."""
    if not _STACK.contexts:
        return None
    context = _STACK.contexts[-1]
    context.drawn[0] += 1
    return context.drawn[0] - 1


@contextlib.contextmanager
def iteration(loop: int | None, index: Tensor | None) -> Iterator[None]:
    """Inside the body of loop number `loop` (new_loop) traced under a random_key context: draws
    take (loop, the step's `index`) as two more words of their key, and are numbered from 0 again,
    so a step's draws are the same however the loop is built (one body, unrolled, in blocks).
    index None: the loop is traced without an index, and a draw raises NeedsIndex. Nothing where
    no context is open."""
    if loop is None or not _STACK.contexts:
        yield
        return
    outer = _STACK.contexts[-1]
    _STACK.contexts.append(_Context([*outer.words, np.int64(loop), index], outer.seed))
    try:
        yield
    finally:
        _STACK.contexts.pop()


T = TypeVar("T")


def with_step_index(build: Callable[[bool], T]) -> T:
    """A loop front end's `build(indexed)`: without a step index first (most loops draw nothing, and
    need none); traced again with one when a draw in it asks for its key under a random_key
    context. What the first attempt recorded is removed, but for the inputs it made (Tensors of
    enclosing traces captured by the body being traced, which its frame keeps)."""
    if not _STACK.contexts:
        return build(False)
    frame = current_frame()
    mark = frame.graph.mark()
    try:
        return build(False)
    except NeedsIndex:
        captured = [node.out(0) for node in frame.graph.nodes_since(mark) if node.op == "input"]
        frame.forget_nodes(frame.graph.prune_since(mark, captured))
        return build(True)


def _draw_stream(seed: int | None, key, what: str):
    """(key words, the context's seed, stream, named) of a draw keyed by `key` (stream: `seed`, default
    0) or by the innermost random_key context (stream: `seed`, else the next number in trace order);
    None where neither gives a key."""
    if key is not None:
        key = as_tensor(key)
        if key.dtype.kind not in "iu" or key.ndim > 1 or (key.ndim == 1 and not isinstance(key.shape[0], int)):
            raise GcompileError(f"{what}: key must be an integer scalar or vector of static length, got {key.type} "
                                f"(at {user_location()})")
        return reshape(cast(key, np.int64), (-1,)), 0, 0 if seed is None else int(seed), True
    if not _STACK.contexts:
        return None
    context = _STACK.contexts[-1]
    words = context.key()
    if seed is None:
        stream, named = context.drawn[0], False
        context.drawn[0] += 1
    else:
        stream, named = int(seed), True
    return words, context.seed, stream, named


def keyed_mask(x: Tensor, ratio: float, seed: int | None, key) -> Tensor | None:
    """dropout's keep mask for x drawn from `key` or the innermost random_key context (_draw_stream);
    None where neither gives a key (the draw is then the runtime's)."""
    drawn = _draw_stream(seed, key, "dropout")
    return None if drawn is None else dropout_mask(drawn[0], x, ratio, *drawn[1:])


def keyed_uniform(like: Tensor, dtype, seed: int | None = None, key=None) -> Tensor | None:
    """Floats of `dtype` uniform in [0, 1), one per position of `like`, drawn from `key` or the
    innermost random_key context (_draw_stream); None where neither gives a key."""
    drawn = _draw_stream(seed, key, "a random draw")
    if drawn is None:
        return None
    words, context_seed, stream, named = drawn
    return apply("keyed_uniform", [words, as_tensor(like)], dtype=np.dtype(dtype).name, seed=int(context_seed),
                 stream=int(stream), named=bool(named), batch_dims=0)
