"""Neural-network functions: softmax family, losses, normalisation, dropout.

softmax, log_softmax, layer_norm, batch_norm (training and inference mode), softmax_cross_entropy
and dropout are primitive ops so they lower to ONNX's fused kernels and differentiate in closed
form; their VJP rules are written with gcompile ops, so they differentiate again (ARCHITECTURE.md
§9.2: the cross-entropy gradient is (softmax(x) - onehot(t))·dz, the onehot's part one scatter).
The other losses are compositions: their gradients come from the rules of the ops they are built
from, which keeps them stable and differentiable to any order.
"""
from __future__ import annotations

import numpy as np

from ..errors import GcompileError, ShapeError
from ..frontend.source import user_location
from ..frontend.tensor import Tensor, apply, apply_n, as_tensor
from ..ir.dims import format_shape
from ..ir.dtypes import is_float
from ..ir.graph import tensor_type
from ..ir.registry import Trait, defop
from . import random
from .activations import softplus
from .basic import cast
from .elementwise import _promote, equal, exp, greater_equal, less, logical_and, rsqrt, where
from .indexing import scatter_add_along_axis, take_along_axis
from .reduce import count, mean, sum_to_shape
from .reduce import sum as reduce_sum
from .shape import broadcast_to, expand_dims, reshape, squeeze
from .shape_rules import axis_for, binary_broadcast, broadcast_shapes, require_float, same_dtype, unary_float

__all__ = ["batch_norm", "dropout", "layer_norm", "log_softmax", "mse", "one_hot", "sigmoid_cross_entropy",
           "softmax", "softmax_cross_entropy", "softmin"]


def _float(x) -> Tensor:
    x = as_tensor(x)
    return x if is_float(x.dtype) else cast(x, np.float32)


_axis = axis_for


# -- softmax and log_softmax -------------------------------------------------------------------------
def softmax(x, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along one axis (ONNX Softmax)."""
    x = _float(x)
    return apply("softmax", [x], axis=_axis(axis, x.ndim, "softmax"))


def softmin(x, axis: int = -1) -> Tensor:
    """softmax(-x) along `axis`."""
    return softmax(-_float(x), axis)


def log_softmax(x, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along one axis (ONNX LogSoftmax): stable where log(softmax(x)) underflows."""
    x = _float(x)
    return apply("log_softmax", [x], axis=_axis(axis, x.ndim, "log_softmax"))


def _shifted(x, axis):
    """x less its max along axis (an empty axis has nothing to shift: numpy's max refuses it)."""
    return x - x.max(axis, keepdims=True) if x.shape[axis] else x


def _softmax_reference(x, axis):
    e = np.exp(_shifted(x, axis))
    return e / e.sum(axis, keepdims=True)


def _log_softmax_reference(x, axis):
    s = _shifted(x, axis)
    return s - np.log(np.exp(s).sum(axis, keepdims=True))


def _softmax_vjp(g, ins, outs, axis):
    y = outs[0]
    return [y * (g[0] - reduce_sum(g[0] * y, axis, keepdims=True))]


def _log_softmax_vjp(g, ins, outs, axis):
    return [g[0] - exp(outs[0]) * reduce_sum(g[0], axis, keepdims=True)]


def softmax_formula(ctx, op_type: str, x: str, axis: int) -> str:
    """Softmax or LogSoftmax of x along `axis` written out: the shift by the max, the exponential
    and its sum, then a division, or x - max - log Σ exp(x - max)."""
    shifted = ctx.emit("Sub", [x, ctx.emit("ReduceMax", [x, ctx.int64s([axis])], keepdims=1)])
    e = ctx.emit("Exp", [shifted])
    total = ctx.emit("ReduceSum", [e, ctx.int64s([axis])], keepdims=1)
    if op_type == "LogSoftmax":
        return ctx.emit("Sub", [shifted, ctx.emit("Log", [total])])
    return ctx.emit("Div", [e, total])


def _lower_softmax(ctx, names, node):
    return ctx.emit("Softmax", names, axis=node.attrs["axis"])


def _lower_log_softmax(ctx, names, node):
    """Written out (softmax_formula): onnx's reference evaluator (1.23) computes LogSoftmax as
    log(Softmax), -inf once the logits spread further than float's exponent reaches."""
    return softmax_formula(ctx, "LogSoftmax", names[0], node.attrs["axis"])


defop("softmax", infer=unary_float, reference=_softmax_reference, lower=_lower_softmax, vjp=_softmax_vjp)
defop("log_softmax", infer=unary_float, reference=_log_softmax_reference, lower=_lower_log_softmax,
      vjp=_log_softmax_vjp)


# -- losses ------------------------------------------------------------------------------------------
_REDUCTIONS = {"mean": mean, "sum": reduce_sum, "none": lambda loss: loss}


def _reduce(loss: Tensor, reduce: str) -> Tensor:
    if reduce not in _REDUCTIONS:
        raise GcompileError(f"reduce must be 'mean', 'sum' or 'none', got {reduce!r} (at {user_location()})")
    return _REDUCTIONS[reduce](loss)


def one_hot(labels, n: int, axis: int = -1, dtype="float32") -> Tensor:
    """1 where the index along the new axis `axis` equals the label, else 0 (labels outside [0, n) give 0s).

    Built as a comparison with a constant arange, so it is free of gradients and of data-dependent shapes.
    """
    labels = as_tensor(labels)
    if labels.dtype.kind not in "iu":
        raise ShapeError(f"one_hot: labels must be integer class indices, got {labels.dtype.name} "
                         f"(at {user_location()})")
    ax = _axis(axis, labels.ndim + 1, "one_hot")
    classes = np.arange(int(n), dtype=labels.dtype).reshape((int(n),) + (1,) * (labels.ndim - ax))
    return cast(equal(expand_dims(labels, ax), classes), dtype)


def label_index(labels: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """(whether each integer label lies in [0, n), the label or 0 where not): an index always valid."""
    inside = logical_and(greater_equal(labels, 0), less(labels, n))
    return inside, where(inside, labels, np.zeros((), labels.dtype))


def picked(x: Tensor, labels: Tensor, axis: int) -> Tensor:
    """x's entries at the integer `labels` along `axis` (labels: x's shape without that axis), 0 where
    a label lies outside [0, n). A gather, not a product with a one-hot: 0·(-inf) at a masked class
    made the loss NaN, and the one-hot's comparison, cast and product were three passes over the
    logits (at an LM head, each as large as its output), its gradient one more."""
    inside, index = label_index(labels, x.shape[axis])
    return where(inside, squeeze(take_along_axis(x, expand_dims(index, axis), axis), axis), np.zeros((), x.dtype))


def softmax_cross_entropy(logits, labels, axis: int = -1, reduce: str = "mean") -> Tensor:
    """-log softmax(logits)[label] with integer `labels` (class indices along `axis` of the logits).

    `labels` has the logits' shape without `axis`. reduce="mean" averages over all those
    positions (a symbolic batch is counted at run time), "sum" adds them, "none" keeps them.
    Computed as -log_softmax(logits) at the label (labels outside [0, n) count 0), so
    d/dlogits is (softmax - onehot)·dz exactly.
    """
    logits, labels = _float(logits), as_tensor(labels)
    ax = _axis(axis, logits.ndim, "softmax_cross_entropy")
    n = logits.shape[ax]
    expected = logits.shape[:ax] + logits.shape[ax + 1:]
    if labels.shape != expected:
        raise ShapeError(f"softmax_cross_entropy: labels of shape {format_shape(labels.shape)} do not fit logits "
                         f"{format_shape(logits.shape)} with classes on axis {ax}: expected {format_shape(expected)} "
                         f"(at {user_location()})")
    if not isinstance(n, int):
        raise ShapeError(f"softmax_cross_entropy: the class axis {ax} must have a static size, got {n!r} "
                         f"(at {user_location()})")
    if labels.dtype.kind not in "iu":
        raise ShapeError(f"softmax_cross_entropy: labels must be integer class indices, got {labels.dtype.name} "
                         f"(at {user_location()})")
    zero = np.zeros((), logits.dtype)
    if n == 0:                                        # no class: every label lies outside
        return _reduce(broadcast_to(zero, labels.shape), reduce)
    inside, index = label_index(labels, n)
    return _reduce(where(inside, apply("softmax_cross_entropy", [logits, index], axis=ax), zero), reduce)


# The softmax_cross_entropy op: -log_softmax(logits) at `index` (valid class indices, one per
# position). Its VJP is (softmax - onehot)·g with the onehot's part scattered onto the dense part:
# three passes over the logits (softmax, product, scatter), where log_softmax's own VJP of a
# gathered entry (a scatter into zeros, its sum, exp, product, difference) makes five.
def _cross_entropy_infer(types, axis):
    x, index = types
    require_float(x)
    expected = x.shape[:axis] + x.shape[axis + 1:]
    if index.dtype.kind not in "iu" or index.shape != expected:
        raise ShapeError(f"softmax_cross_entropy: integer labels of shape {format_shape(expected)}, got "
                         f"{index.dtype.name}{format_shape(index.shape)}")
    return [tensor_type(x.dtype, index.shape)]


def _cross_entropy_reference(x, index, axis):
    picked = np.take_along_axis(_log_softmax_reference(x, axis), np.expand_dims(index, axis), axis)
    return -np.squeeze(picked, axis)


def lower_cross_entropy(ctx, names, node, log_softmax: str = "formula"):
    """-log_softmax(x) at the labels: the log-probabilities (written out, or ONNX's LogSoftmax op
    with log_softmax="op") gathered at each label."""
    x, index = names
    axis = node.attrs["axis"]
    logp = ctx.emit("LogSoftmax", [x], axis=axis) if log_softmax == "op" else softmax_formula(ctx, "LogSoftmax", x,
                                                                                               axis)
    picked = ctx.emit("GatherElements", [logp, ctx.emit("Unsqueeze", [index, ctx.int64s([axis])])], axis=axis)
    return ctx.emit("Neg", [ctx.emit("Squeeze", [picked, ctx.int64s([axis])])])


def _cross_entropy_vjp(g, ins, outs, axis):
    x, index = ins
    u = expand_dims(g[0], axis)
    return [scatter_add_along_axis(softmax(x, axis) * u, expand_dims(index, axis), -u, axis), None]


defop("softmax_cross_entropy", infer=_cross_entropy_infer, reference=_cross_entropy_reference,
      lower=lower_cross_entropy, vjp=_cross_entropy_vjp)


def sigmoid_cross_entropy(x, t, reduce: str = "mean") -> Tensor:
    """Binary cross-entropy of logits x against float targets t in [0, 1], computed stably.

    softplus(x) - x·t: softplus is computed without overflow and its gradient is sigmoid(x),
    exact at x = 0 too (where relu(x) + log1p(exp(-|x|)) has two kinks whose conventional gradients
    give 0).
    """
    x, t = _promote(_float(x), t)
    return _reduce(softplus(x) - x * t, reduce)


def mse(a, b, reduce: str = "mean") -> Tensor:
    """Squared error (a - b)², averaged by default (broadcasting a against b)."""
    a, b = _promote(_float(a), b)
    d = a - b
    return _reduce(d * d, reduce)


# -- normalisation -----------------------------------------------------------------------------------
def _centred(x: Tensor, axes: tuple):
    """Mean over `axes`, x minus it, and the biased variance (both statistics keep x's rank)."""
    mu = mean(x, axes, keepdims=True)
    xc = x - mu
    return mu, xc, mean(xc * xc, axes, keepdims=True)


def layer_norm(x, gamma, beta, axis: int = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) · gamma + beta over the axes from `axis` to the last.

    gamma and beta have the normalised shape x.shape[axis:] (ONNX LayerNormalization).
    """
    x, gamma, beta = _promote(_float(x), gamma, beta)
    return apply("layer_norm", [x, gamma, beta], axis=_axis(axis, x.ndim, "layer_norm"), eps=float(eps))


def _layer_norm_infer(types, axis, eps):
    x = types[0]
    require_float(x)
    same_dtype(types)
    normalised = x.shape[axis:]
    for name, t in zip(("gamma", "beta"), types[1:]):
        if t.shape != normalised:
            raise ShapeError(f"{name} must have the normalised shape {format_shape(normalised)} "
                             f"(axes {axis}..{x.ndim - 1}), got {format_shape(t.shape)}")
    return [x]


def _layer_norm_reference(x, gamma, beta, axis, eps):
    axes = tuple(range(axis, x.ndim))
    xc = x - x.mean(axes, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(axes, keepdims=True) + eps) * gamma + beta


def _layer_norm_vjp(g, ins, outs, axis, eps):
    x, gamma, beta = ins
    axes = tuple(range(axis, x.ndim))
    _, xc, var = _centred(x, axes)
    r = rsqrt(var + eps)
    xhat = xc * r
    gh = g[0] * gamma
    gx = r * (gh - mean(gh, axes, keepdims=True) - xhat * mean(gh * xhat, axes, keepdims=True))
    return [gx, g[0] * xhat, g[0]]


def _lower_layer_norm(ctx, names, node):
    """ONNX LayerNormalization where its epsilon attribute fits the dtype (_epsilon_attribute_fits),
    else written out: the centred x over the mean of its square plus eps, scaled and shifted. An
    empty x is its own result (ONNX Runtime refuses an empty normalised shape)."""
    t = node.outputs[0]
    if 0 in t.shape:
        return ctx.emit("Identity", [names[0]])
    if _epsilon_attribute_fits(t.dtype):
        return ctx.emit("LayerNormalization", names, axis=node.attrs["axis"], epsilon=node.attrs["eps"])
    x, gamma, beta = names
    axes = ctx.int64s(list(range(node.attrs["axis"], len(t.shape))))
    xc = ctx.emit("Sub", [x, ctx.emit("ReduceMean", [x, axes], keepdims=1)])
    var = ctx.emit("ReduceMean", [ctx.emit("Mul", [xc, xc]), axes], keepdims=1)
    std = ctx.emit("Sqrt", [ctx.emit("Add", [var, ctx.const(np.asarray(node.attrs["eps"], t.dtype))])])
    return ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Div", [xc, std]), gamma]), beta])


defop("layer_norm", infer=_layer_norm_infer, reference=_layer_norm_reference, lower=_lower_layer_norm,
      vjp=_layer_norm_vjp)


def batch_norm(x, gamma, beta, running_mean=None, running_var=None, axis: int = 1, eps: float = 1e-5,
               training: bool = True, return_stats: bool = False):
    """Normalise each channel (index along `axis`) by its statistics, then scale and shift.

    training=True uses the batch's mean and biased variance over every axis but `axis`
    (gradients flow through the statistics, in closed form); running_mean/running_var are
    ignored then. training=False uses running_mean and running_var (required). The
    running statistics are the caller's to update: return_stats=True also returns the
    (mean, variance) used, each of shape (C,).
    """
    x = _float(x)
    ax = _axis(axis, x.ndim, "batch_norm")
    c = x.shape[ax]
    if not training and (running_mean is None or running_var is None):
        raise GcompileError(f"batch_norm(training=False) needs running_mean and running_var (at {user_location()})")
    params = _promote(x, gamma, beta, *(() if training else (running_mean, running_var)))[1:]
    for name, p in zip(("gamma", "beta", "running_mean", "running_var"), params):
        if p.shape != (c,):
            raise ShapeError(f"batch_norm: {name} must have shape ({c},) (the size of axis {ax} of x "
                             f"{format_shape(x.shape)}), got {format_shape(p.shape)} (at {user_location()})")
    if training:
        y, mu, var, _ = apply_n("batch_norm", [x, *params], axis=ax, eps=float(eps))
        return (y, mu, var) if return_stats else y
    per_channel = tuple(c if i == ax else 1 for i in range(x.ndim))
    y = apply("batch_norm_inference", [x, *(reshape(p, per_channel) for p in params)], eps=float(eps))
    return (y, params[2], params[3]) if return_stats else y


# Training-mode batch norm: y = (x - mean) / sqrt(var + eps) * gamma + beta with the batch's
# mean and biased variance per channel, returned as outputs 1 and 2; output 3 is the centred
# x - mean, which the forward computes anyway and the backward reads (one tensor kept, not x).
def _channel_shape(x, axis) -> tuple:
    return tuple(d if i == axis else 1 for i, d in enumerate(x.shape))


def _other_axes(ndim: int, axis: int) -> tuple:
    return tuple(i for i in range(ndim) if i != axis)


def _batch_norm_infer(types, axis, eps):
    x = types[0]
    require_float(x)
    same_dtype(types)
    stat = tensor_type(x.dtype, (x.shape[axis],))
    return [x, stat, stat, x]


def _batch_norm_reference(x, gamma, beta, axis, eps):
    axes, shape = _other_axes(x.ndim, axis), _channel_shape(x, axis)
    mu, var = x.mean(axes), x.var(axes)
    xc = x - mu.reshape(shape)
    return xc / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape), mu, var, xc


def _epsilon_attribute_fits(dtype) -> bool:
    """Whether ONNX's normalisations (BatchNormalization, LayerNormalization) compute one of `dtype`
    as written: their epsilon is a float32 attribute, off by a relative 1e-8 for a wider float (in
    float64, a channel of small variance then moved by 5e-6, relative; a layer norm by 5e-7), so
    float64 takes the written-out form."""
    return np.dtype(dtype).itemsize <= 4


def _lower_batch_norm(ctx, names, node):
    """ReduceMean, the centred x, the mean of its square (the centred form: E[x²] - E[x]² loses
    the variance to cancellation), then ONNX's own BatchNormalization with those statistics (one
    pass) where the channel axis is 1 and its epsilon attribute fits the dtype."""
    x, gamma, beta = names
    a, t = node.attrs, node.outputs[0]
    axes, shape = _other_axes(len(t.shape), a["axis"]), _channel_shape(t, a["axis"])
    mu = ctx.emit("Reshape", [ctx.emit("ReduceMean", [x, ctx.int64s(axes)], keepdims=0), ctx.int64s([-1])],
                  allowzero=1)
    xc = ctx.emit("Sub", [x, ctx.emit("Reshape", [mu, ctx.shape_tensor(shape)], allowzero=1)])
    var = ctx.emit("ReduceMean", [ctx.emit("Mul", [xc, xc]), ctx.int64s(axes)], keepdims=0)
    if a["axis"] == 1 and _epsilon_attribute_fits(t.dtype):
        y = ctx.emit("BatchNormalization", [x, gamma, beta, mu, var], epsilon=a["eps"])
    else:
        eps = ctx.const(np.asarray(a["eps"], t.dtype))
        scale = ctx.emit("Div", [gamma, ctx.emit("Sqrt", [ctx.emit("Add", [var, eps])])])
        y = ctx.emit("Add", [ctx.emit("Mul", [xc, ctx.emit("Reshape", [scale, ctx.shape_tensor(shape)])]),
                             ctx.emit("Reshape", [beta, ctx.shape_tensor(shape)])])
    return [y, mu, var, xc]


def _batch_norm_vjp(g, ins, outs, axis, eps):
    """With xc = x - mean, r = 1/sqrt(var + eps), a = gamma·r and n elements per channel:
    dbeta = Σ gy, dgamma = r·Σ gy·xc, and dx = a·gy - a·Σgy/n - xc·a·r²·Σ(gy·xc)/n — two
    reductions and one fused expression, not the backward of every op of the definition.
    Cotangents of the returned statistics add gmean/n and 2·gvar·xc/n, and one of the centred
    x (from a higher-order backward, which reads it) gxc - mean(gxc)."""
    x, gamma, _ = ins
    _, _, var, xc = outs
    gy, gmu, gvar, gxc = g
    axes, shape = _other_axes(x.ndim, axis), _channel_shape(x, axis)
    r = rsqrt(reshape(var, shape) + eps)
    n = count(x, axes)
    gx = g_gamma = g_beta = None
    if gy is not None:
        sum_g = reduce_sum(gy, axes, keepdims=True)
        sum_gxc = reduce_sum(gy * xc, axes, keepdims=True)
        a = reshape(gamma, shape) * r
        gx = a * gy + (xc * (-(a * r * r * sum_gxc) / n) - a * sum_g / n)
        g_gamma, g_beta = reshape(sum_gxc * r, gamma.shape), reshape(sum_g, gamma.shape)
    if gmu is not None:
        gx = _plus(gx, broadcast_to(reshape(gmu, shape) / n, x.shape))
    if gvar is not None:
        gx = _plus(gx, xc * (reshape(gvar, shape) * (2 / n)))
    if gxc is not None:
        gx = _plus(gx, gxc - mean(gxc, axes, keepdims=True))
    return [gx, g_gamma, g_beta]


def _plus(a, b):
    return b if a is None else a + b


defop("batch_norm", infer=_batch_norm_infer, reference=_batch_norm_reference, lower=_lower_batch_norm,
      vjp=_batch_norm_vjp)


# Inference-mode batch norm: y = (x - mean)·r·gamma + beta with r = 1/sqrt(var + eps) and the
# given (running) statistics, every operand broadcast to y's shape by numpy's rules (the
# statistics and parameters shaped (1, C, 1, ...) by batch_norm). One op, not its four
# broadcasting ops: ONNX's BatchNormalization reads x and writes y once (the composition took
# four passes over x's size and, in a training step, a saved or recomputed intermediate for
# gamma's gradient), and the backward reads x alone. Elementwise and cheap: a training step
# keeps x and recomputes y and the activation after it (passes/recompute.py).
def _batch_norm_inference_infer(types, eps):
    require_float(types[0])
    return binary_broadcast(types)


def _batch_norm_inference_reference(x, gamma, beta, mean, var, eps):
    return ((x - mean) * (gamma / np.sqrt(var + np.asarray(eps, x.dtype))) + beta).astype(x.dtype)


def _channel_operands(node, types) -> bool:
    """Whether the operands have BatchNormalization's layout: x of rank 2 or more and of the
    output's shape, the others of shape (1, C, 1, ...) with C x's axis 1."""
    x, out = types[0], node.outputs[0]
    per_channel = tuple(d if i == 1 else 1 for i, d in enumerate(out.shape))
    return out.ndim >= 2 and x.shape == out.shape and all(t.shape == per_channel for t in types[1:])


def _lower_batch_norm_inference(ctx, names, node):
    """ONNX BatchNormalization, its per-channel operands reshaped to (C,), where they have its
    layout and its epsilon attribute fits the dtype (_epsilon_attribute_fits); else
    (x - mean)·scale + beta, scale = gamma/sqrt(var + eps)."""
    x, gamma, beta, mu, var = names
    t = node.outputs[0]
    if _channel_operands(node, [ctx.graph.type_of(r) for r in node.inputs]) and _epsilon_attribute_fits(t.dtype):
        flat = [ctx.emit("Reshape", [n, ctx.int64s([-1])]) for n in (gamma, beta, mu, var)]
        return [ctx.emit("BatchNormalization", [x, *flat], epsilon=node.attrs["eps"])]
    eps = ctx.const(np.asarray(node.attrs["eps"], t.dtype))
    scale = ctx.emit("Div", [gamma, ctx.emit("Sqrt", [ctx.emit("Add", [var, eps])])])
    return [ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Sub", [x, mu]), scale]), beta])]


def _batch_norm_inference_vjp(g, ins, outs, eps):
    """With r = 1/sqrt(var + eps), the sums over the axes the parameters broadcast along taken
    before the products with them (gamma's gradient Σ gy·(x - mean), centred first as PyTorch's
    backward, so a mean far from zero cancels nothing): dx = gy·gamma·r, dgamma = r·Σ gy·(x - mean),
    dbeta = Σ gy, dmean = -gamma·r·Σ gy, dvar = -gamma·r³/2·Σ gy·(x - mean)."""
    x, gamma, beta, mu, var = ins
    gy = g[0]
    if gy is None:
        return [None] * 5
    params = broadcast_shapes(gamma.shape, beta.shape, mu.shape, var.shape)
    r = rsqrt(var + eps)
    scale = gamma * r
    sum_g = sum_to_shape(gy, params)
    s = sum_to_shape(gy * (x - mu), params)
    return [sum_to_shape(gy * scale, x.shape), sum_to_shape(s * r, gamma.shape), sum_to_shape(sum_g, beta.shape),
            sum_to_shape(-(sum_g * scale), mu.shape), sum_to_shape(s * gamma * (r * r * r) * -0.5, var.shape)]


defop("batch_norm_inference", infer=_batch_norm_inference_infer, reference=_batch_norm_inference_reference,
      lower=_lower_batch_norm_inference, vjp=_batch_norm_inference_vjp, traits={Trait.CHEAP, Trait.ELEMENTWISE})


# -- dropout -----------------------------------------------------------------------------------------
def dropout(x, ratio: float = 0.5, training: bool = False, seed: int | None = None, key=None) -> Tensor:
    """Zero each element with probability `ratio` and scale the rest by 1/(1 - ratio) (training only).

    training=False returns x. In training the mask is drawn from a key where there is one: `key`
    (an int64 scalar or vector Tensor, or an int; the mask is then a pure function of key, `seed`
    (default 0) and the position), else the innermost gc.random_key context, which
    gc.export_train_step opens with its step counter (each draw of a step then has its own
    stream: `seed` names it, else its place in the trace). Such a mask is the same on every
    runtime and on the numpy reference evaluator, and a resumed training run draws the masks
    the uninterrupted run would have. Without a key the mask is ONNX Dropout's, drawn by the
    runtime (`seed` fixes its generator; the reference evaluator draws its own mask from it, a
    different stream from onnxruntime's). ratio=1 drops everything: x * 0 (zeros, NaN where x is
    infinite or NaN, as PyTorch), with a zero gradient; ratio=0 with a key returns x.
    """
    x = _float(x)
    if not 0 <= ratio <= 1:
        raise GcompileError(f"dropout ratio must be in [0, 1], got {ratio!r} (at {user_location()})")
    if not training:
        return x
    if ratio == 1:
        return x * 0
    if key is not None or random.active():
        if ratio == 0:
            return x
        keep = random.keyed_mask(x, ratio, seed, key)
        return x * (cast(keep, x.dtype) * np.asarray(1 / (1 - ratio), x.dtype))
    return apply_n("dropout", [x], ratio=float(ratio), seed=None if seed is None else int(seed))[0]


def _dropout_reference(x, ratio, seed):
    mask = np.random.default_rng(seed).random(x.shape) >= ratio
    return x * mask / (1 - ratio), mask


def _lower_dropout(ctx, names, node):
    ratio = ctx.const(np.asarray(node.attrs["ratio"], node.outputs[0].dtype))
    return ctx.emit("Dropout", [names[0], ratio, ctx.const(np.asarray(True))], n_out=2, seed=node.attrs["seed"])


def _dropout_vjp(g, ins, outs, ratio, seed):
    if g[0] is None:
        return [None]
    return [g[0] * cast(outs[1], ins[0].dtype) * (1 / (1 - ratio))]


def _dropout_infer(types, ratio, seed):
    require_float(types[0], "dropout's x")
    return [types[0], tensor_type(np.bool_, types[0].shape)]


defop("dropout", infer=_dropout_infer,
      reference=_dropout_reference, lower=_lower_dropout, vjp=_dropout_vjp, traits={Trait.RANDOM, Trait.ELEMENTWISE},
      n_outputs=2)
