"""Batching rules of gc.vmap for the ops that are not elementwise (those batch generically, see
batching.py): each re-emits its op on operands whose batch axis is axis 0, shared operands as they
are, shifting axis attributes by one, merging the batch into a leading axis the op already maps
over, or writing the batched computation with other ops.
"""
from __future__ import annotations

import numpy as np

from .. import functions as F
from ..errors import UnsupportedError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir import dims
from ..ops.conv import kernel_taps, tap_window
from .batching import align, all_batched, batching_rule, broadcast, merge, rank, shifted, split, static


# -- axes -----------------------------------------------------------------------------------------------
def _axis(node) -> int:
    """The node's `axis` attribute, non-negative, as an axis of the batched tensor."""
    return node.attrs["axis"] % node.outputs[0].ndim + 1


@batching_rule("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(node, ins, batched, size):
    return apply_n(node.op, ins, axes=shifted(node.attrs["axes"]), keepdims=node.attrs["keepdims"])


@batching_rule("vector_norm")
def _vector_norm(node, ins, batched, size):
    a = node.attrs
    return apply_n("vector_norm", ins, ord=a["ord"], axes=shifted(a["axes"]), keepdims=a["keepdims"])


@batching_rule("count")
def _count(node, ins, batched, size):   # the per-example count, the same for every example: unbatched
    return apply_n("count", ins, axes=shifted(node.attrs["axes"]))


@batching_rule("softmax", "log_softmax")
def _softmax(node, ins, batched, size):
    return apply_n(node.op, ins, axis=_axis(node))


@batching_rule("cumsum", "cumprod", "topk", "argmax", "argmin")
def _along_axis(node, ins, batched, size):
    """One (batched) operand, scanned, sorted or searched along `axis`: the same op along the shifted axis."""
    return apply_n(node.op, ins, **{**node.attrs, "axis": node.attrs["axis"] % (ins[0].ndim - 1) + 1})


@batching_rule("softmax_cross_entropy")
def _cross_entropy(node, ins, batched, size):
    """Per position of the labels: the batch is one more of them (the class axis shifts by one)."""
    return apply_n("softmax_cross_entropy", all_batched(ins, batched, size), axis=node.attrs["axis"] + 1)


@batching_rule("mask_ranks")
def _mask_ranks(node, ins, batched, size):
    """The ranks of each example's flat mask: a running count along axis 1, minus one."""
    counts = apply("cumsum", [F.cast(ins[0], np.int64)], axis=1, exclusive=False, reverse=False)
    return [counts - np.int64(1)]


@batching_rule("layer_norm")
def _layer_norm(node, ins, batched, size):
    x, gamma, beta = ins
    axis, eps = node.attrs["axis"] % node.outputs[0].ndim, node.attrs["eps"]
    if not batched[0]:
        x = broadcast(x, size)
    if not any(batched[1:]):
        return apply_n("layer_norm", [x, gamma, beta], axis=axis + 1, eps=eps)
    axes = tuple(range(axis + 1, x.ndim))          # batched gamma or beta: written out with broadcasting ops
    xc = x - F.mean(x, axes, keepdims=True)
    y = xc * F.rsqrt(F.mean(xc * xc, axes, keepdims=True) + eps)
    per_example = x.ndim - 1
    gamma, beta = (align(t, per_example) if b else t for t, b in zip((gamma, beta), batched[1:]))
    return [y * gamma + beta]


@batching_rule("batch_norm")
def _batch_norm(node, ins, batched, size):
    """Training-mode batch norm with per-example statistics: the batch axis is one more axis the
    statistics keep, so the op is written out (its closed-form VJP stays with the unbatched op)."""
    x, gamma, beta = all_batched(ins, batched, size)
    channel = node.attrs["axis"] + 1
    axes = tuple(i for i in range(1, x.ndim) if i != channel)
    per_channel = tuple(x.shape[i] if i in (0, channel) else 1 for i in range(x.ndim))
    mu = F.mean(x, axis=axes, keepdims=True)
    xc = x - mu
    var = F.mean(xc * xc, axis=axes, keepdims=True)
    y = xc * F.rsqrt(var + node.attrs["eps"]) * F.reshape(gamma, per_channel) + F.reshape(beta, per_channel)
    stats = (x.shape[0], x.shape[channel])
    return [y, F.reshape(mu, stats), F.reshape(var, stats), xc]


@batching_rule("group_norm")
def _group_norm(node, ins, batched, size):
    """Group norm's statistics are per image, so an example's images are more images: the batch
    merges into N. Batched weights or biases scale and shift the merged op's output per example."""
    x, weight, bias = ins
    x = x if batched[0] else broadcast(x, size)
    n, c, per_channel = x.shape[1], x.shape[2], (1,) * (x.ndim - 3)
    if any(batched[1:]):
        unit = [as_tensor(np.full(c, v, x.dtype)) for v in (1, 0)]
        y, mu, rstd = apply_n("group_norm", [merge(x), *unit], **node.attrs)
        weight, bias = (F.reshape(p, (size, 1, c) + per_channel if b else (c,) + per_channel)
                        for p, b in zip((weight, bias), batched[1:]))
        return [split(y, size, n) * weight + bias, split(mu, size, n), split(rstd, size, n)]
    return [split(t, size, n) for t in apply_n("group_norm", [merge(x), weight, bias], **node.attrs)]


# -- shapes ---------------------------------------------------------------------------------------------
@batching_rule("transpose")
def _transpose(node, ins, batched, size):
    return apply_n("transpose", ins, perm=(0,) + shifted(node.attrs["perm"]))


@batching_rule("reshape")
def _reshape(node, ins, batched, size):
    return [F.reshape(ins[0], (size,) + tuple(node.attrs["shape"]))]


@batching_rule("expand")
def _expand(node, ins, batched, size):
    shape = tuple(node.attrs["shape"])
    return [F.broadcast_to(align(ins[0], len(shape)), (size,) + shape)]


@batching_rule("slice")
def _slice(node, ins, batched, size):
    a = node.attrs
    return apply_n("slice", ins, axes=shifted(a["axes"]), starts=a["starts"], ends=a["ends"], steps=a["steps"])


@batching_rule("slice_scatter")
def _slice_scatter(node, ins, batched, size):
    a = node.attrs
    return apply_n("slice_scatter", ins, shape=(size,) + tuple(a["shape"]), axes=shifted(a["axes"]),
                   starts=a["starts"], ends=a["ends"], steps=a["steps"])


@batching_rule("pad")
def _pad(node, ins, batched, size):
    a = node.attrs
    return apply_n("pad", ins, pads=((0, 0),) + tuple(a["pads"]), mode=a["mode"], value=a["value"])


@batching_rule("concat")
def _concat(node, ins, batched, size):
    return apply_n("concat", all_batched(ins, batched, size), axis=_axis(node))


@batching_rule("after")
def _after(node, ins, batched, size):
    """x with a data dependency on the token: the batched x (the token as it is, batched or not)."""
    x, token = ins
    return apply_n("after", [x if batched[0] else broadcast(x, size), token])


# -- gather and scatter ------------------------------------------------------------------------------------
def _starts(size, n, ndim: int) -> Tensor:
    """b·n for each example b, shaped (B, 1, ...) to add to batched int64 indices of rank `ndim`: where an
    index into a (B·n, ...) merge of the examples starts (an exclusive running sum, so the batch size
    may be symbolic)."""
    if not isinstance(n, int):
        raise UnsupportedError(f"vmap: batched indices into an axis of symbolic size {n!r} are not supported "
                               f"(at {user_location()})")
    starts = F.cumsum(F.full((size,), n, np.int64), exclusive=True)
    return F.reshape(starts, (size,) + (1,) * (ndim - 1))


def _offsets(idx: Tensor, size, n) -> Tensor:
    """Batched indices into axis 0 of a (B·n, ...) merge: example b's index i becomes b·n + i."""
    return F.cast(idx, np.int64) + _starts(size, n, idx.ndim)


def _axis_first(x: Tensor, axis: int) -> Tensor:
    """Batched x with its per-example `axis` moved right after the batch axis."""
    perm = [0, axis + 1] + [i for i in range(1, x.ndim) if i != axis + 1]
    return F.transpose(x, tuple(perm))


@batching_rule("gather")
def _gather(node, ins, batched, size):
    x, idx = ins
    axis = node.attrs["axis"] % rank(x, batched[0])
    if batched[0] and not batched[1]:
        return apply_n("gather", [x, idx], axis=axis + 1)
    if not batched[0]:                          # shared table, batched indices: the batch axis lands at `axis`
        y = apply_n("gather", [x, idx], axis=axis)[0]
        perm = [axis] + [i for i in range(y.ndim) if i != axis]
        return [F.transpose(y, tuple(perm))]
    xs = _axis_first(x, axis)                   # (B, n, ...rest): merge the batch into the gathered axis
    n = xs.shape[1]
    y = apply_n("gather", [merge(xs), _offsets(idx, size, n)], axis=0)[0]   # (B, *idx, ...rest)
    k = idx.ndim - 1                            # put the rest back after the per-example axes before `axis`
    perm = [0] + [1 + k + i for i in range(axis)] + [1 + i for i in range(k)] + \
        [1 + k + axis + i for i in range(y.ndim - 1 - k - axis)]
    return [F.transpose(y, tuple(perm))]


@batching_rule("scatter_add")
def _scatter_add(node, ins, batched, size):
    base, idx, updates = ins
    axis = node.attrs["axis"] % node.outputs[0].ndim
    if not batched[1]:
        base = base if batched[0] else broadcast(base, size)
        updates = updates if batched[2] else broadcast(updates, size)
        return apply_n("scatter_add", [base, idx, updates], axis=axis + 1)
    base = _axis_first(base if batched[0] else broadcast(base, size), axis)
    n, k = base.shape[1], idx.ndim - 1
    upd = updates if batched[2] else broadcast(updates, size)
    # updates (B, *pre, *idx, *rest) -> (B, *idx, *pre, *rest), as base's axis was moved first
    perm = [0] + [1 + axis + i for i in range(k)] + [1 + i for i in range(axis)] + \
        [1 + axis + k + i for i in range(upd.ndim - 1 - axis - k)]
    upd = F.transpose(upd, tuple(perm))
    flat_upd = F.reshape(upd, (dims.product(upd.shape[:1 + k]),) + upd.shape[1 + k:])
    flat_idx = F.reshape(_offsets(idx, size, n), (-1,))
    y = apply_n("scatter_add", [merge(base), flat_idx, flat_upd], axis=0)[0]
    y = split(y, size, n)                        # (B, n, *pre, *rest) -> per-example axis back in place
    back = [0] + [2 + i for i in range(axis)] + [1] + [2 + axis + i for i in range(y.ndim - 2 - axis)]
    return [F.transpose(y, tuple(back))]


@batching_rule("gather_elements", "scatter_add_elements", "scatter_reduce_elements")
def _elements(node, ins, batched, size):
    return apply_n(node.op, all_batched(ins, batched, size), **{**node.attrs, "axis": _axis(node)})


# -- products and solvers ----------------------------------------------------------------------------------
@batching_rule("matmul")
def _matmul(node, ins, batched, size):
    r = max(rank(x, b) for x, b in zip(ins, batched))
    return apply_n("matmul", [align(x, r) if b else x for x, b in zip(ins, batched)])


@batching_rule("gemm")
def _gemm(node, ins, batched, size):
    """gemm is 2-d only: a batched matmul of the (transposed) operands, plus the bias."""
    a, b, *bias = ins
    a = F.swapaxes(a, -1, -2) if node.attrs["trans_a"] else a
    b = F.swapaxes(b, -1, -2) if node.attrs["trans_b"] else b
    y = apply("matmul", [a, b])
    if bias:
        y = y + (align(bias[0], 2) if batched[2] else bias[0])
    return [y]


@batching_rule("einsum")
def _einsum(node, ins, batched, size):
    terms, out = node.attrs["equation"].split("->")
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    letter = next(ch for ch in letters if ch not in node.attrs["equation"])
    terms = [letter + t if b else t for t, b in zip(terms.split(","), batched)]
    return apply_n("einsum", ins, equation=",".join(terms) + "->" + letter + out)


@batching_rule("inv", "det", "slogdet", "cholesky", "solve", "eigh", "svd", "pinv", "matrix_exp")
def _matrices(node, ins, batched, size):
    """The solvers and the decompositions' results take (..., m, n) matrices: the batch axis is one
    more leading dim (solve's operands, a decomposition's matrix and results, share theirs)."""
    return apply_n(node.op, all_batched(ins, batched, size), **node.attrs)


# -- convolution, pooling and resampling ---------------------------------------------------------------------
@batching_rule("conv", "conv_transpose")
def _conv(node, ins, batched, size):
    """Shared weights: the batch merged into the images' axis. Per-example weights: see _grouped."""
    x, w, *bias = ins
    if batched[1]:
        return _grouped(node, ins, batched, size)
    x = x if batched[0] else broadcast(x, size)
    n = x.shape[1]
    y = split(apply_n(node.op, [merge(x), w, *([] if any(batched[2:]) else bias)], **node.attrs)[0], size, n)
    if any(batched[2:]):                             # a per-example bias, added after
        y = y + F.reshape(bias[0], (size, 1, bias[0].shape[1]) + (1,) * (y.ndim - 3))
    return [y]


def _grouped(node, ins, batched, size):
    """Per-example weights: the examples become groups of one grouped convolution, each example's
    channels side by side ((B, N, C, ...) -> (N, B·C, ...)); the weights' leading axis (out channels of
    conv, in channels of conv_transpose) stacks the same way."""
    b = static(size, f"{node.op} with per-example weights")
    x, w, *bias = all_batched(ins, batched, size)
    n, out_channels = x.shape[1], node.outputs[0].shape[1]
    xg = F.reshape(F.swapaxes(x, 0, 1), (n, b * x.shape[2]) + x.shape[3:])
    wg = F.reshape(w, (b * w.shape[1],) + w.shape[2:])
    bg = [F.reshape(bias[0], (b * out_channels,))] if bias else []
    y = apply_n(node.op, [xg, wg, *bg], **{**node.attrs, "groups": node.attrs["groups"] * b})[0]
    return [F.swapaxes(F.reshape(y, (n, b, out_channels) + y.shape[2:]), 0, 1)]


@batching_rule("conv_weight_grad")
def _conv_weight_grad(node, ins, batched, size):
    """Per-example weight gradients: x and g grouped by example along the channels, as in _grouped,
    or, at a symbolic batch size, one product per kernel tap (_weight_grad_by_taps)."""
    x, g = all_batched(ins, batched, size)
    if not isinstance(size, int):
        return [_weight_grad_by_taps(node.attrs, x, g)]
    n = x.shape[1]
    xg = F.reshape(F.swapaxes(x, 0, 1), (n, size * x.shape[2]) + x.shape[3:])
    gg = F.reshape(F.swapaxes(g, 0, 1), (n, size * g.shape[2]) + g.shape[3:])
    y = apply_n("conv_weight_grad", [xg, gg], **{**node.attrs, "groups": node.attrs["groups"] * size})[0]
    return [F.reshape(y, (size, g.shape[2]) + y.shape[1:])]


def _weight_grad_by_taps(attrs: dict, x: Tensor, g: Tensor) -> Tensor:
    """gw[b, o, c, k] = sum over n, i of xpad[b, n, c, i·stride + k·dilation] · g[b, n, o, i]: for each
    kernel tap k its strided window of the padded x, contracted with g per example and group by one
    einsum (the group count of a grouped convolution is an attribute, so a symbolic batch cannot join it)."""
    groups, kernel = attrs["groups"], tuple(attrs["kernel"])
    size, n, c, o, out = x.shape[0], x.shape[1], x.shape[2], g.shape[2], g.shape[3:]
    x = F.pad(x, ((0, 0),) * 3 + tuple(attrs["pad"]))
    xg = F.reshape(x, (size, n, groups, c // groups) + x.shape[3:])
    gg = F.reshape(g, (size, n, groups, o // groups, -1))
    taps = []
    for tap in kernel_taps(kernel):
        window = F.reshape(xg[tap_window(tap, attrs["stride"], attrs["dilation"], out)],
                           (size, n, groups, c // groups, -1))
        taps.append(F.einsum("bngcp,bngop->bgoc", window, gg))
    return F.reshape(F.stack(taps, axis=-1), (size, o, c // groups) + kernel)


@batching_rule("avg_pool", "avg_pool_grad", "resize")
def _images(node, ins, batched, size):
    """Ops on (N, C, *spatial) images, each image alone: on (B·N, C, ...)."""
    x = ins[0]
    return [split(apply_n(node.op, [merge(x)], **node.attrs)[0], size, x.shape[1])]


@batching_rule("max_pool")
def _max_pool(node, ins, batched, size):
    """On (B·N, C, ...) images; the flat indices, which then count in the merged tensor, are made each
    example's own again."""
    x = ins[0]
    y, idx = apply_n("max_pool", [merge(x)], **node.attrs)
    idx = split(idx, size, x.shape[1])
    return [split(y, size, x.shape[1]), idx - _starts(size, dims.product(x.shape[1:]), idx.ndim)]


@batching_rule("pool_scatter")
def _pool_scatter(node, ins, batched, size):
    """Scatter into the (B·N, C, ...) merge of the examples' tensors (an image op again, which its
    MaxUnpool lowering needs) at the indices offset by example."""
    g, idx = all_batched(ins, batched, size)
    shape = tuple(node.attrs["shape"])
    idx = _offsets(idx, size, dims.product(shape))
    merged = (dims.product((size, shape[0])),) + shape[1:]
    y = apply_n("pool_scatter", [merge(g), merge(idx)], **{**node.attrs, "shape": merged})[0]
    return [split(y, size, shape[0])]


@batching_rule("pool_gather")
def _pool_gather(node, ins, batched, size):
    """Read the flat merge of the examples' tensors at the indices offset by example (a shared tensor
    is read as it is: the output has the indices' shape)."""
    h, idx = ins
    if not batched[0]:
        return apply_n("pool_gather", [h, idx], **node.attrs)
    idx = idx if batched[1] else broadcast(idx, size)
    return apply_n("pool_gather", [h, _offsets(idx, size, dims.product(h.shape[1:]))], **node.attrs)


@batching_rule("dropout_mask", "keyed_uniform")
def _keyed_draw(node, ins, batched, size):
    """One more leading axis of keys: a key shared by the examples gets each example's index as one
    more word, so that every example draws its own values (as the values of one batched tensor differ
    from position to position), and a shared `like` (whose values are not read) is repeated."""
    key, like = ins
    if not batched[0]:
        lead = key.shape[:-1]
        index = F.reshape(F.arange(size), (size,) + (1,) * len(lead) + (1,))
        key = F.concat([broadcast(key, size), F.broadcast_to(index, (size, *lead, 1))], axis=-1)
    if not batched[1]:
        like = broadcast(like, size)
    return apply_n(node.op, [key, like], **{**node.attrs, "batch_dims": node.attrs["batch_dims"] + 1})
