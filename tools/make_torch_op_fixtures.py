"""PyTorch's values and gradients for the ops gcompile follows PyTorch on (spatial, pooling, scatter,
losses, normalisation, attention, solvers), for tests/ops/test_torch_parity.py.

Run by hand where torch is installed (the project's tests never import it):

    .venv/bin/python tools/make_torch_op_fixtures.py [--out tests/data/torch_ops.npz]

Each case calls one gcompile.functions op (named with its keyword arguments, stored as JSON) and
the PyTorch function it follows, on float64 inputs. The file holds, per case <name>:
  <name>/call     JSON: {"op": gcompile function, "names": [the keyword of each input], "kwargs":
                  {...}, "float": [positions of the inputs that get gradients], "pick": the output
                  the loss weighs}
  <name>/in<k>    the inputs
  <name>/out<k>   PyTorch's outputs
  <name>/w        fixed random weights of the scalar L = sum(out<pick> * w)
  <name>/grad<k>  dL/d(input k) for each float input
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as TF

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(20261130)


def rand(*shape):
    return RNG.standard_normal(shape)


def case(op, torch_fn, inputs, grads=(0,), names=("x",), pick=0, **kwargs):
    """`names`: the gcompile keyword each input is passed as; `pick`: the output the loss weighs."""
    return dict(op=op, torch_fn=torch_fn, inputs=inputs, grads=list(grads), names=list(names), pick=pick,
                kwargs=kwargs)


def interpolate_cases():
    out = {}
    specs = [  # name, shape, kwargs
        ("nearest_1d_up", (2, 3, 5), dict(size=9, mode="nearest")),
        ("nearest_2d_scale", (1, 2, 5, 7), dict(scale_factor=(1.7, 0.6), mode="nearest")),
        ("nearest_3d", (1, 1, 3, 4, 5), dict(size=(5, 2, 7), mode="nearest")),
        ("nearest_exact_2d", (1, 2, 5, 7), dict(size=(8, 3), mode="nearest-exact")),
        ("linear_1d_align", (2, 3, 6), dict(size=11, mode="linear", align_corners=True)),
        ("bilinear_up", (1, 2, 4, 5), dict(size=(7, 9), mode="bilinear", align_corners=False)),
        ("bilinear_down_align", (1, 2, 7, 9), dict(size=(3, 4), mode="bilinear", align_corners=True)),
        ("bilinear_scale", (1, 2, 5, 6), dict(scale_factor=(1.7, 2.3), mode="bilinear")),
        ("bilinear_scale_float32_floor", (1, 1, 10, 10), dict(scale_factor=0.7, mode="bilinear")),
        ("bilinear_recompute", (1, 1, 5, 6), dict(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True)),
        ("bicubic_up", (1, 2, 4, 5), dict(size=(9, 8), mode="bicubic", align_corners=False)),
        ("bicubic_align_down", (1, 2, 8, 9), dict(size=(5, 4), mode="bicubic", align_corners=True)),
        ("bicubic_to_one", (1, 1, 4, 5), dict(size=(1, 1), mode="bicubic")),
        ("trilinear", (1, 1, 3, 4, 2), dict(size=(5, 3, 4), mode="trilinear")),
    ]
    for name, shape, kw in specs:
        out[f"interpolate_{name}"] = case("interpolate", lambda x, kw=kw: TF.interpolate(x, **kw), [rand(*shape)], **kw)
    return out


def pooling_cases():
    out = {}
    for nsp, shape, size in [(1, (2, 3, 7), 3), (2, (2, 2, 7, 5), (3, 2)), (3, (1, 2, 5, 4, 6), (2, 3, 4))]:
        x = rand(*shape)
        out[f"adaptive_avg_pool_{nsp}d"] = case(
            "adaptive_avg_pool", lambda x, n=nsp, s=size: getattr(TF, f"adaptive_avg_pool{n}d")(x, s), [x],
            output_size=size)
        out[f"adaptive_max_pool_{nsp}d"] = case(
            "adaptive_max_pool", lambda x, n=nsp, s=size: getattr(TF, f"adaptive_max_pool{n}d")(x, s, True), [x],
            output_size=size, return_indices=True)
    ties = np.round(rand(1, 2, 6, 5))
    out["adaptive_max_pool_ties"] = case("adaptive_max_pool", lambda x: TF.adaptive_max_pool2d(x, (4, 3), True),
                                         [ties], output_size=(4, 3), return_indices=True)
    for name, shape, kw in [
        ("dilated", (1, 2, 9, 8), dict(kernel=3, stride=2, pad=1, dilation=2)),
        ("ceil", (1, 2, 7, 8), dict(kernel=3, stride=2, pad=1, ceil_mode=True)),
        ("dilated_ceil_1d", (2, 2, 10), dict(kernel=2, stride=3, pad=0, dilation=3, ceil_mode=True)),
    ]:
        tkw = dict(kernel_size=kw["kernel"], stride=kw["stride"], padding=kw["pad"], dilation=kw.get("dilation", 1),
                   ceil_mode=kw.get("ceil_mode", False), return_indices=True)
        fn = TF.max_pool1d if len(shape) == 3 else TF.max_pool2d
        out[f"max_pool_{name}"] = case("max_pool", lambda x, fn=fn, t=tkw: fn(x, **t), [np.round(rand(*shape), 1)],
                                       return_indices=True, **kw)
    for name, kw in [("ceil_cip", dict(kernel=3, stride=2, pad=1, ceil_mode=True, count_include_pad=True)),
                     ("ceil_no_cip", dict(kernel=3, stride=2, pad=1, ceil_mode=True, count_include_pad=False)),
                     ("divisor", dict(kernel=2, stride=2, pad=1, divisor_override=3, count_include_pad=True))]:
        tkw = dict(kernel_size=kw["kernel"], stride=kw["stride"], padding=kw["pad"],
                   ceil_mode=kw.get("ceil_mode", False), count_include_pad=kw["count_include_pad"],
                   divisor_override=kw.get("divisor_override"))
        out[f"avg_pool_{name}"] = case("avg_pool", lambda x, t=tkw: TF.avg_pool2d(x, **t), [rand(1, 2, 6, 7)], **kw)
    return out


def sampling_cases():
    out = {}
    x = rand(2, 2, 4, 5)
    grid = RNG.uniform(-1.2, 1.2, (2, 3, 3, 2))
    for mode in ("bilinear", "nearest"):
        for padding in ("zeros", "border"):
            for align in (False, True):
                kw = dict(mode=mode, padding_mode=padding, align_corners=align)
                out[f"grid_sample_{mode}_{padding}_{int(align)}"] = case(
                    "grid_sample", lambda x, g, kw=kw: TF.grid_sample(x, g, **kw), [x, grid], grads=(0, 1),
                    names=("x", "grid"), **kw)
    out["pixel_shuffle"] = case("pixel_shuffle", lambda x: TF.pixel_shuffle(x, 2), [rand(2, 8, 3, 2)],
                                upscale_factor=2)
    out["pixel_unshuffle"] = case("pixel_unshuffle", lambda x: TF.pixel_unshuffle(x, 3), [rand(1, 2, 6, 3)],
                                  downscale_factor=3)
    for name, kw in [("plain", dict(kernel_size=2)),
                     ("strided_dilated_padded", dict(kernel_size=(2, 3), dilation=(2, 1), padding=(1, 0),
                                                     stride=(1, 2)))]:
        x = rand(1, 2, 5, 6)
        out[f"unfold_{name}"] = case("unfold", lambda x, kw=kw: TF.unfold(x, **kw), [x], **kw)
        cols = TF.unfold(torch.tensor(x), **kw).numpy()
        out[f"fold_{name}"] = case("fold", lambda c, kw=kw: TF.fold(c, (5, 6), **kw), [rand(*cols.shape)],
                                   output_size=(5, 6), **kw)
    return out


def scatter_cases():
    out = {}
    x, src = rand(4, 5), rand(3, 5)
    idx = np.array([[1, 3, 0, 3, 1], [2, 2, 0, 0, 3], [1, 0, 0, 1, 3]])
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            out[f"scatter_reduce_{reduce}_{int(include_self)}"] = case(
                "scatter_reduce", lambda x, s, r=reduce, i=include_self: x.scatter_reduce(0, torch.tensor(idx), s, r,
                                                                                          include_self=i),
                [x, src], grads=(0, 1), names=("x", "src"), axis=0, index=idx.tolist(), reduce=reduce,
                include_self=include_self)
    unique = np.array([[1, 3, 0, 2], [2, 0, 3, 1]])        # no duplicates along axis 1: torch defines the gradient
    out["scatter_src"] = case("scatter", lambda x, s: x.scatter(1, torch.tensor(unique), s[:, :4]),
                              [x[:2], src[:2]], grads=(0, 1), names=("x", "src"), axis=1, index=unique.tolist())
    i0, i1 = np.array([0, 2, 3, 2]), np.array([1, 4, 0, 4])
    for acc in (False, True):
        out[f"index_put_{int(acc)}"] = case(
            "index_put", lambda x, v, a=acc: x.index_put((torch.tensor(i0), torch.tensor(i1)), v, accumulate=a),
            [x, rand(4)], grads=(0, 1) if acc else (0,), names=("x", "values"), indices=[i0.tolist(), i1.tolist()],
            accumulate=acc)
    return out


def loss_cases():
    out = {}
    x, y = rand(4, 5), rand(4, 5)
    log_probs = x - np.log(np.exp(x).sum(1, keepdims=True))
    target = np.array([1, 2, 0, 4])
    weight = RNG.random(5) + 0.5
    out["nll_loss_weight_ignore"] = case("nll_loss", lambda a, t, w: TF.nll_loss(a, t, w, ignore_index=2),
                                         [log_probs, target, weight], names=("input", "target", "weight"),
                                         ignore_index=2)
    out["nll_loss_3d_sum"] = case("nll_loss", lambda a, t: TF.nll_loss(a, t, reduction="sum"),
                                  [rand(2, 3, 4), RNG.integers(0, 3, (2, 4))], names=("input", "target"),
                                  reduction="sum")
    p, t = RNG.uniform(0.05, 0.95, (3, 4)), RNG.random((3, 4))
    out["binary_cross_entropy"] = case("binary_cross_entropy", lambda a, b: TF.binary_cross_entropy(a, b), [p, t],
                                       grads=(0, 1), names=("input", "target"))
    out["binary_cross_entropy_with_logits"] = case(
        "binary_cross_entropy_with_logits",
        lambda a, b, w: TF.binary_cross_entropy_with_logits(a, b, reduction="sum", pos_weight=w),
        [3 * rand(3, 4), t, RNG.random(4) + 0.5], grads=(0, 1), names=("input", "target", "pos_weight"),
        reduction="sum")
    for name in ("l1_loss", "smooth_l1_loss", "huber_loss"):
        out[name] = case(name, lambda a, b, n=name: getattr(TF, n)(a, b, reduction="sum"), [x, y], grads=(0, 1),
                         names=("input", "target"), reduction="sum")
    q = np.exp(log_probs[::-1].copy())
    out["kl_div_batchmean"] = case("kl_div", lambda a, b: TF.kl_div(a, b, reduction="batchmean"), [log_probs, q],
                                   grads=(0, 1), names=("input", "target"), reduction="batchmean")
    out["cosine_similarity"] = case("cosine_similarity", lambda a, b: TF.cosine_similarity(a, b, dim=0),
                                    [x, rand(1, 5)], grads=(0, 1), names=("x1", "x2"), axis=0)
    out["margin_ranking_loss"] = case(
        "margin_ranking_loss", lambda a, b, s: TF.margin_ranking_loss(a, b, s, margin=0.3), [x[0], y[0],
                                                                                              np.sign(rand(5))],
        grads=(0, 1), names=("input1", "input2", "target"), margin=0.3)
    out["hinge_embedding_loss"] = case("hinge_embedding_loss", lambda a, s: TF.hinge_embedding_loss(a, s, 0.8),
                                       [x, np.sign(y)], names=("input", "target"), margin=0.8)
    out["triplet_margin_loss_swap"] = case(
        "triplet_margin_loss", lambda a, b, c: TF.triplet_margin_loss(a, b, c, margin=1.5, p=3, swap=True),
        [x, y, rand(4, 5)], grads=(0, 1, 2), names=("anchor", "positive", "negative"), margin=1.5, p=3, swap=True)
    img = rand(2, 6, 3, 2)
    out["group_norm"] = case("group_norm", lambda a, w, b: TF.group_norm(a, 3, w, b), [img, rand(6), rand(6)],
                             grads=(0, 1, 2), names=("x", "weight", "bias"), num_groups=3)
    out["instance_norm"] = case("instance_norm", lambda a, w, b: TF.instance_norm(a, weight=w, bias=b),
                                [img, rand(6), rand(6)], grads=(0, 1, 2), names=("x", "weight", "bias"))
    out["rms_norm"] = case("rms_norm", lambda a, w: TF.rms_norm(a, (3, 2), w), [img, rand(3, 2)], grads=(0, 1),
                           names=("x", "weight"), normalized_shape=[3, 2])
    out["normalize_p3"] = case("normalize", lambda a: TF.normalize(a, p=3.0, dim=1), [x], p=3.0, axis=1)
    qkv = [rand(2, 3, 4, 5), rand(2, 3, 6, 5), rand(2, 3, 6, 7)]
    mask = RNG.random((4, 6)) > 0.4
    mask[1] = False
    out["sdpa_bool_mask"] = case("scaled_dot_product_attention",
                                 lambda a, b, c, m: TF.scaled_dot_product_attention(a, b, c, attn_mask=m),
                                 qkv + [mask], grads=(0, 1, 2), names=("query", "key", "value", "attn_mask"))
    out["sdpa_causal_scale"] = case("scaled_dot_product_attention",
                                    lambda a, b, c: TF.scaled_dot_product_attention(a, b, c, is_causal=True,
                                                                                    scale=0.3),
                                    qkv, grads=(0, 1, 2), names=("query", "key", "value"), is_causal=True, scale=0.3)
    table, ids = rand(10, 3), RNG.integers(0, 10, 9)
    for mode in ("sum", "mean", "max"):
        out[f"embedding_bag_{mode}"] = case(
            "embedding_bag", lambda w, i, m=mode: TF.embedding_bag(i, w, torch.tensor([0, 2, 2, 6]), mode=m,
                                                                   padding_idx=int(ids[3])),
            [table, ids], names=("weight", "input"), offsets=[0, 2, 2, 6], mode=mode, padding_idx=int(ids[3]))
    return out


def linalg_cases():
    out = {}
    a = rand(2, 3, 3) + 3 * np.eye(3)
    spd = a @ np.swapaxes(a, -1, -2)
    out["inv"] = case("inv", torch.linalg.inv, [a], names=("a",))
    out["det"] = case("det", torch.linalg.det, [a], names=("a",))
    out["slogdet"] = case("slogdet", lambda m: tuple(torch.linalg.slogdet(m)), [a], names=("a",), pick=1)
    out["solve"] = case("solve", torch.linalg.solve, [a, rand(2, 3, 2)], grads=(0, 1), names=("a", "b"))
    out["cholesky"] = case("cholesky", torch.linalg.cholesky, [spd], names=("a",))
    out["cdist"] = case("cdist", lambda x, y: torch.cdist(x, y), [rand(2, 4, 3), rand(2, 5, 3)], grads=(0, 1),
                        names=("x1", "x2"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "torch_ops.npz"))
    args = parser.parse_args()
    arrays: dict = {}
    cases = {**interpolate_cases(), **pooling_cases(), **sampling_cases(), **scatter_cases(), **loss_cases(),
             **linalg_cases()}
    for name, c in cases.items():
        tensors = [torch.tensor(a, requires_grad=k in c["grads"]) for k, a in enumerate(c["inputs"])]
        outs = c["torch_fn"](*tensors)
        outs = outs if isinstance(outs, tuple) else (outs,)
        w = RNG.standard_normal(tuple(outs[c["pick"]].shape))
        (outs[c["pick"]] * torch.tensor(w)).sum().backward()
        arrays[f"{name}/call"] = np.array(json.dumps(dict(op=c["op"], names=c["names"], kwargs=c["kwargs"],
                                                          float=c["grads"], pick=c["pick"])))
        arrays[f"{name}/w"] = w
        for k, a in enumerate(c["inputs"]):
            arrays[f"{name}/in{k}"] = a
        for k, o in enumerate(outs):
            arrays[f"{name}/out{k}"] = o.detach().numpy()
        for k in c["grads"]:
            arrays[f"{name}/grad{k}"] = tensors[k].grad.numpy()
    np.savez_compressed(args.out, **arrays)
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
