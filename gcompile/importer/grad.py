"""`gcompile grad`: an ONNX model in, a standard-ONNX model of its outputs and gradients out.

The written model's inputs are, in order: the model's inputs; the differentiated initializers
(graph inputs, so callers can feed updated weights, each keeping its original value as an
initializer of the same name: ONNX's default for an input, IR version 4 on, so the model runs
with only its data inputs; the others stay constants); the loss target
(with --loss mse or cross_entropy); and for --order 2 one direction `v_<name>` per differentiated
tensor. Its outputs: the model's outputs, `loss` (with --loss), `grad_<name>` for each
differentiated tensor, and for --order 2 `hvp_<name>`, the Hessian-vector product H·v of the
differentiated scalar w.r.t. all of them jointly.

A generated name never replaces or hides one the model already uses: when the target (`target`
or --target), `v_<name>`, `loss`, `grad_<name>` or `hvp_<name>` is already a model input or
output, or two generated names are one, the model is refused with an error naming both (a
suffixed `grad_x_1` beside the model's own output `grad_x` reads as the gradient it is not).

The model is read with gc.load_onnx, so a hostile or broken file is refused as load.py says,
with a GcompileError naming the file and the offending piece.

Without --loss the output named by --of is differentiated as the sum of its entries (a scalar
output as itself): for a classifier's logits that is the saliency of the summed scores.
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .. import functions as F
from ..errors import GcompileError
from ..frontend.spec import spec
from ..frontend.trace import trace
from ..gradients import grad
from ..ir.dtypes import is_float
from ..lowering import to_onnx
from ..passes import optimize
from .load import load_onnx

LOSSES = ("mse", "cross_entropy", "sum")


def _wrt_names(f, wrt: str) -> list[str]:
    names: list[str] = []
    for item in (s.strip() for s in wrt.split(",")):
        if item == "params":
            found = [n for n, v in f.params.items() if is_float(v.dtype)]
            if not found:
                raise GcompileError("--wrt params: the model has no float initializers")
        elif item in f.input_names or item in f.params:
            found = [item]
        else:
            raise GcompileError(f"--wrt {item!r} is neither 'params' nor a model input or initializer (inputs: "
                                f"{', '.join(f.input_names)}; initializers: {', '.join(f.params) or 'none'})")
        names += [n for n in found if n not in names]
    return names


def _check_names(model_names: dict[str, str], generated: list[tuple[str | None, str]]) -> None:
    """Refuse a generated input or output name (with what it holds) that the model already uses
    (`model_names`: name -> what it is in the model) or that another generated name took."""
    seen = dict(model_names)
    for name, role in generated:
        if name is None:
            continue
        if name in seen:
            fix = ("choose another name with --target" if "--target" in role + seen[name] else
                   f"rename {seen[name]} in the model (gcompile grad names what it adds target, v_<name>, loss, "
                   "grad_<name> and hvp_<name>)")
            raise GcompileError(f"{role} would be named {name!r}, a name already used for {seen[name]}; {fix}")
        seen[name] = role


def _output_types(f, specs) -> dict:
    traced = trace(lambda *xs: f(*xs), specs, input_names=f.input_names)
    return {name: traced.graph.type_of(ref) for name, ref in zip(f.output_names, traced.graph.outputs)}


def gradient_model(model, wrt: str, of: str | None = None, loss: str | None = None, target: str | None = None,
                   order: int = 1, opset: int | None = None):
    """The ModelProto `gcompile grad` writes (see the module docstring); GcompileError on bad options."""
    f = load_onnx(model)
    names = _wrt_names(f, wrt)
    specs = dict(zip(f.input_names, f.input_specs()))
    out_types = _output_types(f, list(specs.values()))
    if of is None:
        if len(f.output_names) != 1:
            raise GcompileError(f"the model has {len(f.output_names)} outputs ({', '.join(f.output_names)}): "
                                "choose the one to differentiate with --of")
        of = f.output_names[0]
    if of not in out_types:
        raise GcompileError(f"--of {of!r} is not an output of the model (outputs: {', '.join(f.output_names)})")
    if loss not in (None, *LOSSES):
        raise GcompileError(f"--loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    needs_target = loss in ("mse", "cross_entropy")
    if target is not None and not needs_target:
        raise GcompileError("--target names the loss target input: use it with --loss mse or cross_entropy")
    y_type = out_types[of]
    if not is_float(y_type.dtype):
        raise GcompileError(f"output {of!r} is {y_type.dtype.name}: only float outputs can be differentiated")
    if loss == "cross_entropy" and y_type.ndim < 1:
        raise GcompileError(f"--loss cross_entropy needs logits with a class axis (last); {of!r} is a scalar")

    for n in names:
        s = specs[n] if n in specs else spec(f.params[n].shape, f.params[n].dtype)
        if not is_float(s.dtype):
            raise GcompileError(f"--wrt {n!r}: it is {s.dtype.name}; only float tensors can be differentiated")
        specs.setdefault(n, s)
    diff_params = [n for n in names if n in f.params]
    extra = {n: specs[n] for n in diff_params}
    if needs_target:
        target = target or "target"
        extra[target] = (spec(y_type.shape, y_type.dtype) if loss == "mse" else spec(y_type.shape[:-1], np.int64))
    v_names = {n: f"v_{n}" for n in names} if order == 2 else {}
    extra.update({v_names[n]: specs[n] for n in v_names})
    loss_name = "loss" if loss else None
    grad_names = {n: f"grad_{n}" for n in names}
    hvp_names = {n: f"hvp_{n}" for n in v_names}
    _check_names({**{n: f"output {n!r}" for n in f.output_names}, **{n: f"input {n!r}" for n in f.input_names},
                  **{n: f"initializer {n!r} (an input once differentiated)" for n in diff_params}},
                 [(target, "the loss target (--target)"),
                  *((v_names[n], f"the direction input for {n!r} (v_<name>)") for n in v_names),
                  (loss_name, "the loss output"), *((grad_names[n], f"the gradient of {n!r}") for n in names),
                  *((hvp_names[n], f"the Hessian-vector product for {n!r} (hvp_<name>)") for n in hvp_names)])
    input_names = f.input_names + list(extra)

    def fn(*args):
        by_name = dict(zip(input_names, args))
        outs = f(*args[:len(f.input_names)], params={n: by_name[n] for n in diff_params})
        result = dict(zip(f.output_names, outs if isinstance(outs, tuple) else (outs,)))
        y = result[of]
        if loss == "mse":
            scalar = F.mse(y, by_name[target])
        elif loss == "cross_entropy":
            scalar = F.softmax_cross_entropy(y, by_name[target])
        elif loss == "sum" or y.shape:   # without --loss an output is summed (a scalar one is itself)
            scalar = F.sum(y)
        else:
            scalar = y
        if loss_name:
            result[loss_name] = scalar
        wrt_tensors = [by_name[n] for n in names]
        grads = grad(scalar, wrt_tensors)
        result.update({grad_names[n]: g for n, g in zip(names, grads)})
        if order == 2:
            inner = F.add_n([F.sum(g * by_name[v_names[n]]) for n, g in zip(names, grads)])
            result.update({hvp_names[n]: h for n, h in zip(names, grad(inner, wrt_tensors))})
        return result

    all_specs = {**specs, **extra}
    traced = trace(fn, [all_specs[n] for n in input_names], name="gradients",
                   input_names=input_names)
    optimize(traced.graph, 2)
    proto, _ = to_onnx(traced.graph, input_names, opset, name=f"{f.proto.graph.name or 'model'}_gradients")
    proto.graph.initializer.extend(numpy_helper.from_array(f.params[n], n) for n in diff_params)   # the defaults
    return proto
