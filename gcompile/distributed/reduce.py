"""The arithmetic of the gradient allreduce, apart from any transport: flattening named gradients
into one buffer per dtype, cutting the buffers into one chunk per worker, and the weighted sum
of a chunk over the workers in a fixed order.

The reduction is a reduce-scatter followed by an allgather, both through Ray's object store
(distributed/worker.py): worker j sums chunk j of every worker's gradient, then every worker
gathers the N summed chunks. Each worker sends and receives 2(N-1)/N of the gradient's bytes
per step, as in a ring allreduce, and no process ever holds N gradients. Because chunk j is
summed by one worker in worker order 0, 1, ..., N-1, every worker receives the very same bits,
so the update model (the same ONNX model on the same inputs) keeps the parameters
bit-identical on every worker.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import GcompileError

Chunk = tuple   # one 1-d array per dtype group


class FlatPlan:
    """Where each named gradient lies in the per-dtype flat buffers (groups in order of first
    appearance, names in the order given)."""

    def __init__(self, entries: Sequence[tuple[str, np.dtype, tuple[int, ...]]]) -> None:
        self.dtypes: list[np.dtype] = []
        self.sizes: list[int] = []
        self.slots: dict[str, tuple[int, int, int, tuple[int, ...]]] = {}   # name -> (group, offset, size, shape)
        for name, dtype, shape in entries:
            dtype = np.dtype(dtype)
            if dtype not in self.dtypes:
                self.dtypes.append(dtype)
                self.sizes.append(0)
            group = self.dtypes.index(dtype)
            size = int(np.prod(shape, dtype=np.int64))
            self.slots[name] = (group, self.sizes[group], size, tuple(shape))
            self.sizes[group] += size

    @property
    def nbytes(self) -> int:
        return sum(size * dtype.itemsize for size, dtype in zip(self.sizes, self.dtypes))

    def flatten(self, arrays: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """One contiguous 1-d buffer per dtype group."""
        flat = [np.empty(size, dtype) for size, dtype in zip(self.sizes, self.dtypes)]
        for name, (group, offset, size, _) in self.slots.items():
            flat[group][offset:offset + size] = np.asarray(arrays[name], self.dtypes[group]).reshape(-1)
        return flat

    def unflatten(self, flat: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """name -> a view of its part of the buffers, in its shape."""
        return {name: flat[group][offset:offset + size].reshape(shape)
                for name, (group, offset, size, shape) in self.slots.items()}

    def split(self, flat: Sequence[np.ndarray], n: int) -> list[Chunk]:
        """The buffers cut into `n` chunks of near-equal size (chunk j: part j of every group)."""
        parts = [np.array_split(buffer, n) for buffer in flat]
        return [tuple(p[j] for p in parts) for j in range(n)]

    def join(self, chunks: Sequence[Chunk]) -> list[np.ndarray]:
        """The inverse of `split`: whole buffers from the chunks in order."""
        joined = [np.concatenate([c[g] for c in chunks]) for g in range(len(self.dtypes))]
        for buffer, size in zip(joined, self.sizes):
            if buffer.size != size:
                raise GcompileError(f"gathered gradient chunks hold {buffer.size} values where the model has {size}: "
                                    "the workers run different models")
        return joined


def weighted_sum(chunks: Sequence[Chunk], weights: Sequence[float]) -> Chunk:
    """sum_i weights[i] * chunks[i], accumulated in index order in each group's dtype: a
    deterministic result for given inputs. Chunks of different layouts (workers running
    different models) are a GcompileError naming the worker."""
    first = chunks[0]
    for i, chunk in enumerate(chunks[1:], 1):
        if len(chunk) != len(first) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(chunk, first)):
            raise GcompileError(f"gradient chunks of worker 0 and worker {i} differ ({_layout(first)} vs "
                                f"{_layout(chunk)}): the workers run different models")
    out = []
    for g, part in enumerate(first):
        acc = np.multiply(part, part.dtype.type(weights[0]))
        scratch = np.empty_like(acc)
        for chunk, w in zip(chunks[1:], weights[1:]):
            np.multiply(chunk[g], part.dtype.type(w), out=scratch)
            acc += scratch
        out.append(acc)
    return tuple(out)


def _layout(chunk: Chunk) -> str:
    return ", ".join(f"{a.dtype.name}[{a.size}]" for a in chunk)
