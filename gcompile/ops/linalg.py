"""Matrix products: matmul (batched, broadcasting), linear, bilinear, einsum."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..frontend.tensor import Tensor, apply
from ..ir import dims
from ..ir.graph import tensor_type
from ..ir.registry import defop
from .elementwise import _promote, where, zeros_scalar
from .reduce import sum_to_shape
from .shape import broadcast_to, expand_dims, reshape, squeeze, swapaxes
from .shape_rules import broadcast_shapes, require_float, same_dtype

__all__ = ["bilinear", "dot", "einsum", "linear", "matmul"]


def matmul(a, b) -> Tensor:
    """numpy matmul: 1-D operands are promoted to matrices and the added axis removed after."""
    a, b = _promote(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: operands must have at least one dimension; use * for scalars")
    squeeze_axes = []
    if a.ndim == 1:
        a = expand_dims(a, 0)
        squeeze_axes.append(-2)
    if b.ndim == 1:
        b = expand_dims(b, 1)
        squeeze_axes.append(-1)
    out = apply("matmul", [a, b])
    return squeeze(out, tuple(out.ndim + s for s in squeeze_axes)) if squeeze_axes else out


def _matmul_infer(types):
    a, b = types
    dtype = same_dtype(types)
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"contracting dims differ: {a.shape[-1]!r} vs {b.shape[-2]!r}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return [tensor_type(dtype, batch + (a.shape[-2], b.shape[-1]))]


def _matmul_vjp(g, ins, outs):
    a, b = ins
    if b.ndim == 2 and a.ndim > 2:
        # A matrix shared by a batch (x @ w in every layer): contract the batch inside one matrix
        # product, rather than a product per batch element summed afterwards.
        # (the rows are counted explicitly: with a contraction dim of 0, -1 would not be inferable)
        rows = dims.product(a.shape[:-1])
        gb = matmul(swapaxes(reshape(a, rows, a.shape[-1]), 0, 1), reshape(g[0], rows, g[0].shape[-1]))
    else:
        gb = matmul(swapaxes(a, -1, -2), g[0])
    return [matmul(g[0], swapaxes(b, -1, -2)), gb]


def _swaps_last_two(graph, ref) -> bool:
    """Whether `ref` is a transpose of the last two axes, which ONNX Runtime's MatmulTransposeFusion
    folds into the product that reads it (a FusedMatMul)."""
    node = graph.nodes[ref.node]
    r = graph.type_of(ref).ndim
    return node.op == "transpose" and tuple(node.attrs["perm"]) == (*range(r - 2), r - 1, r - 2)


def _lower_matmul(ctx, names, node):
    """ONNX MatMul, written around ONNX Runtime's (1.31) failures at empty tensors, all of which
    take a product with an empty batch or contraction:
    - a FusedMatMul (a product reading a transpose of the last two axes) leaves its output
      unwritten past the first matrix of a batch when the contraction is empty, and refuses an
      empty batch against an operand without it ("cannot broadcast on dim 0");
    - a MatMul of a matrix by an empty batch of matrices is refused the same way.
    A statically empty output or contraction is zeros, computed without a product; a symbolic
    contraction of such a FusedMatMul selects zeros where it is empty. Where a symbolic batch
    could be empty and one operand is shared by the batch, the batch is folded into the rows of
    one 2-D product: the batched operand's reshape keeps a transpose out of the product, and a
    shared left operand is applied from the right to the transposed batch ((x^T w^T)^T)."""
    (a, b), out = (ctx.graph.type_of(r) for r in node.inputs), node.outputs[0]
    k, batch = a.shape[-1], out.shape[:-2]
    if 0 in out.shape or k == 0:
        return ctx.fill(out.shape, 0, out.dtype)
    last_two = [*range(out.ndim - 2), out.ndim - 1, out.ndim - 2]
    if not dims.is_static(batch) and all(d == 1 for d in b.shape[:-2]) and _swaps_last_two(ctx.graph, node.inputs[0]):
        rows = ctx.emit("Reshape", [names[0], ctx.shape_tensor((dims.product(a.shape[:-1]), k))], allowzero=1)
        y = ctx.emit("MatMul", [rows, ctx.emit("Reshape", [names[1], ctx.shape_tensor(b.shape[-2:])])])
        return ctx.emit("Reshape", [y, ctx.shape_tensor(out.shape)], allowzero=1)
    if not dims.is_static(batch) and all(d == 1 for d in a.shape[:-2]):
        xt = ctx.emit("Transpose", [names[1]], perm=last_two)                    # (..., n, k)
        rows = ctx.emit("Reshape", [xt, ctx.shape_tensor((dims.product(b.shape[:-2] + b.shape[-1:]), k))],
                        allowzero=1)
        wt = ctx.emit("Transpose", [ctx.emit("Reshape", [names[0], ctx.shape_tensor(a.shape[-2:])])], perm=[1, 0])
        y = ctx.emit("Reshape", [ctx.emit("MatMul", [rows, wt]), ctx.shape_tensor(
            batch + (out.shape[-1], out.shape[-2]))], allowzero=1)             # (..., n, m)
        return ctx.emit("Transpose", [y], perm=last_two)
    product = ctx.emit("MatMul", names)
    if isinstance(k, int) or dims.product(batch) == 1 or not any(_swaps_last_two(ctx.graph, r) for r in node.inputs):
        return product
    has_terms = ctx.emit("Greater", [ctx.dim_scalar(k), ctx.const(np.asarray(0, np.int64))])
    return ctx.emit("Where", [has_terms, product, ctx.const(np.zeros((), out.dtype))])


defop("matmul", infer=_matmul_infer, reference=np.matmul, lower=_lower_matmul, vjp=_matmul_vjp)


def dot(a, b) -> Tensor:
    """numpy dot: sums over the last axis of a and the second-to-last of b (the last when b is 1-D);
    a 0-d operand multiplies. The same as matmul when b has at most 2 dims, not beyond."""
    a, b = _promote(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if b.ndim <= 2:
        return matmul(a, b)
    lead_a, lead_b = _LETTERS[:a.ndim - 1], _LETTERS[a.ndim - 1:a.ndim + b.ndim - 3]
    return einsum(f"{lead_a}Z,{lead_b}ZY->{lead_a}{lead_b}Y", a, b)


def linear(x, w, b=None) -> Tensor:
    """x @ w + b, with w of shape (in, out)."""
    y = matmul(x, w)
    return y if b is None else y + b


def bilinear(x1, x2, weight, bias=None) -> Tensor:
    """torch's bilinear: y[..., o] = x1[..., i] weight[o, i, j] x2[..., j] + bias[o], for x1 (..., in1),
    x2 (..., in2) (batch dims broadcast) and weight (out, in1, in2)."""
    x1, x2, weight = _promote(x1, x2, weight)
    if weight.ndim != 3 or x1.ndim < 1 or x2.ndim < 1 or (x1.shape[-1], x2.shape[-1]) != weight.shape[1:]:
        raise ShapeError(f"bilinear: x1 {dims.format_shape(x1.shape)} and x2 {dims.format_shape(x2.shape)} must end "
                         f"in the in1 and in2 of weight (out, in1, in2) {dims.format_shape(weight.shape)}")
    batch = broadcast_shapes(x1.shape[:-1], x2.shape[:-1])
    x1, x2 = broadcast_to(x1, batch + x1.shape[-1:]), broadcast_to(x2, batch + x2.shape[-1:])
    y = einsum("...i,oij,...j->...o", x1, weight, x2)
    return y if bias is None else y + bias


# -- einsum --------------------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _canonical(equation: str, ndims) -> tuple[list[str], str]:
    """Explicit form of an einsum equation: '...' replaced by letters, output written out."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ShapeError(f"einsum: equation {equation!r} names {len(terms)} operands, got {len(ndims)}")
    used = set(equation) - set(".,->")
    free = [c for c in _LETTERS if c not in used]
    n_ell = max([nd - len(t.replace("...", "")) for t, nd in zip(terms, ndims) if "..." in t] or [0])
    ell = "".join(free[:n_ell])
    out_terms = []
    for t, nd in zip(terms, ndims):
        if "..." in t:
            k = nd - len(t.replace("...", ""))
            t = t.replace("...", ell[n_ell - k:] if k else "")
        if len(t) != nd:
            raise ShapeError(f"einsum: term {t!r} does not match an operand of rank {nd}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {c: lhs.count(c) for c in set(lhs) - set(".,")}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    return out_terms, out


def einsum(equation: str, *xs) -> Tensor:
    """Einstein summation (numpy's notation, '...' allowed)."""
    operands = _promote(*xs)
    terms, out = _canonical(equation, [x.ndim for x in operands])
    return apply("einsum", operands, equation=",".join(terms) + "->" + out)


def _einsum_infer(types, equation):
    dtype = same_dtype(types)
    lhs, out = equation.split("->")
    sizes: dict = {}
    for term, t in zip(lhs.split(","), types):
        for c in set(term):
            repeated = {t.shape[k] for k, x in enumerate(term) if x == c}
            if len(repeated) > 1:
                raise ShapeError(f"einsum: the repeated index {c!r} of {term!r} has sizes "
                                 f"{' and '.join(map(repr, sorted(repeated, key=str)))}")
        for c, d in zip(term, t.shape):
            prev = sizes.get(c, 1)
            if prev != 1 and d != 1 and prev != d:
                raise ShapeError(f"einsum: index {c!r} has sizes {prev!r} and {d!r}")
            if d != 1 or c not in sizes:
                sizes[c] = d
    return [tensor_type(dtype, tuple(sizes[c] for c in out))]


def _diagonal_embedding(gd: Tensor, unique: str, term: str, shape: tuple) -> Tensor:
    """The adjoint of reading the diagonal of a term with repeated indices ('iij' read as 'ij'):
    gd (indexed by `unique`) placed where the repeated indices agree, zeros elsewhere."""
    first = {c: term.index(c) for c in unique}
    spread = reshape(gd, tuple(d if first[c] == k else 1 for k, (c, d) in enumerate(zip(term, shape))))
    mask = np.ones((1,) * len(term), bool)
    for c in unique:
        axes = [k for k, t in enumerate(term) if t == c]
        if len(axes) > 1:
            n = shape[axes[0]]
            if not isinstance(n, int):
                raise UnsupportedError(f"einsum gradient: the repeated index {c!r} of {term!r} has the symbolic "
                                       f"size {n!r}; a diagonal needs a static size")
            grid = np.indices((n,) * len(axes))
            on_diagonal = np.all(grid == grid[0], axis=0)
            mask = mask & np.expand_dims(on_diagonal, [k for k in range(len(term)) if k not in axes])
    return where(mask, broadcast_to(spread, shape), zeros_scalar(gd))


def _einsum_vjp(g, ins, outs, equation):
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    grads = []
    for i, (term, x) in enumerate(zip(terms, ins)):
        unique = "".join(dict.fromkeys(term))       # a repeated index reads a diagonal: differentiate that
        ushape = tuple(x.shape[term.index(c)] for c in unique)
        others = [t for j, t in enumerate(terms) if j != i]
        available = set(out).union(*others)
        kept = "".join(c for c in unique if c in available)
        operands = [g[0]] + [y for j, y in enumerate(ins) if j != i]
        gx = apply("einsum", operands, equation=",".join([out] + others) + "->" + kept)
        if kept != unique:   # indices summed only inside this operand: broadcast back over them, after
            # summing over those x has at size 1 (elsewhere gc.grad sums a gradient back to x's shape)
            gx = reshape(gx, tuple(gx.shape[kept.index(c)] if c in kept else 1 for c in unique))
            gx = broadcast_to(sum_to_shape(gx, tuple(d if c in kept else 1 for c, d in zip(unique, ushape))), ushape)
        if tuple(gx.shape) != ushape:    # an index of size 1 here met a larger one elsewhere (broadcast): sum
            # the gradient down where x has 1, and spread it where x is larger than the others' size 1
            gx = broadcast_to(sum_to_shape(gx, tuple(1 if 1 in (u, d) else d for u, d in zip(ushape, gx.shape))),
                              ushape)
        if unique != term:
            gx = _diagonal_embedding(sum_to_shape(gx, ushape), unique, term, x.shape)
        grads.append(gx)
    return grads


def _lower_einsum(ctx, names, node):
    """ONNX Einsum, but zeros (the sum over an empty index, or an empty result) where an operand
    is empty: ONNX Runtime's (1.31, 1.32) Einsum reads a dim of 0 as a broadcast 1 and ends the
    process with a floating-point exception ("mk,nk->mn" with k = 0, "bmk,bnk->bmn" with b = 0).
    Statically empty operands make the zeros alone; where a symbolic dim could be 0, an If picks
    them at run time."""
    out = node.outputs[0]
    shapes = [ctx.graph.type_of(r).shape for r in node.inputs]

    def zeros(c):
        return c.fill(out.shape, 0, out.dtype)

    def product(c):
        return c.emit("Einsum", names, equation=node.attrs["equation"])

    if any(0 in shape for shape in shapes):
        return zeros(ctx)
    if all(dims.is_static(shape) for shape in shapes):
        return product(ctx)
    sizes = [ctx.emit("Size", [name]) for name, shape in zip(names, shapes) if not dims.is_static(shape)]
    empty = ctx.emit("Equal", [ctx.emit("Min", sizes) if len(sizes) > 1 else sizes[0], ctx.const(np.asarray(0))])
    return ctx.emit("If", [empty], then_branch=ctx.branch(lambda c: [zeros(c)], [out]),
                    else_branch=ctx.branch(lambda c: [product(c)], [out]))


defop("einsum", infer=_einsum_infer, reference=lambda *xs, equation: np.einsum(equation, *xs),
      lower=_lower_einsum, vjp=_einsum_vjp)


# -- gemm: a 2-D matmul with optional transposes and bias, made by the fuse_gemm pass ---------------
def _gemm_operands(a, b, trans_a, trans_b):
    return (swapaxes(a, 0, 1) if trans_a else a), (swapaxes(b, 0, 1) if trans_b else b)


def _gemm_infer(types, trans_a, trans_b):
    require_float(types[0], "gemm's operands")     # fuse_gemm makes it of float products only
    a, b = (t.shape[::-1] if flag else t.shape for t, flag in zip(types[:2], (trans_a, trans_b)))
    if a[1] != b[0]:
        raise ShapeError(f"gemm: contracting dims differ: {a[1]!r} vs {b[0]!r}")
    return [tensor_type(same_dtype(types), (a[0], b[1]))]


def _gemm_reference(a, b, *c, trans_a, trans_b):
    y = (a.T if trans_a else a) @ (b.T if trans_b else b)
    return y + c[0] if c else y


def _gemm_vjp(g, ins, outs, trans_a, trans_b):
    a, b = _gemm_operands(ins[0], ins[1], trans_a, trans_b)
    ga, gb = matmul(g[0], swapaxes(b, 0, 1)), matmul(swapaxes(a, 0, 1), g[0])
    grads = [swapaxes(ga, 0, 1) if trans_a else ga, swapaxes(gb, 0, 1) if trans_b else gb]
    return grads + [g[0] for _ in ins[2:]]


defop("gemm", infer=_gemm_infer, reference=_gemm_reference,
      lower=lambda ctx, names, node: ctx.emit("Gemm", names, transA=int(node.attrs["trans_a"]),
                                              transB=int(node.attrs["trans_b"])),
      vjp=_gemm_vjp)
