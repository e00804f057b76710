"""gc.from_torch: a PyTorch module as a gc.nn Module, through ONNX.

    model = gc.from_torch(torch_model, example_x)     # exports with torch.onnx (dynamo), imports it
    model.params                                      # its trainable parameters, by state_dict name
    step = gc.export_train_step(loss_fn, model, gc.optim.SGD(0.1), ...)

The module is exported with torch.onnx.export(dynamo=True) in eval mode and with the exporter's
graph optimisation off, so every parameter and buffer stays an initializer named as in the
module's state_dict (the optimiser would fold eval-mode BatchNorm into the convolution and
rename constants). The import (gc.load_onnx) becomes a TorchModule: a gc.nn Module whose
parameters and buffers are exactly the torch module's state_dict entries, in its order; the
int64 shape constants the exporter adds stay private constants. Calling it inlines the ONNX
graph with those values, so it differentiates and trains like any gc.nn Module.

Dropout (torch.nn.Dropout layers) follows the module's training mode too: exported as Dropout
nodes with their ratio, it draws a random mask while the module trains (F.dropout, a new mask
each call) and is the identity in eval mode. Dropout1d/2d/3d and AlphaDropout export in eval mode,
as the identity.

BatchNorm follows the module's training mode (the torch module's at export, then train()/eval()):
in training mode each BatchNormalization of a torch BatchNorm layer normalises with the batch's
statistics and, in a traced copy (an argument of the traced function, as in a training step),
updates running_mean, running_var (unbiased, with the layer's momentum) and num_batches_tracked,
as PyTorch does. What the exporter needs from torch is recorded in the model's metadata
("gcompile.torch"), so `save_onnx` writes a file that gc.from_torch(path) loads without PyTorch.

PyTorch is an optional dependency, imported only here and only when a torch module is given.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .. import functions as F
from ..errors import GcompileError
from ..frontend.spec import Spec
from ..frontend.tensor import Tensor
from ..nn.module import Module
from ..ops.reduce import count
from ..runtime.files import atomic_write
from ..runtime.modelfile import metadata_json
from .load import OnnxModel, load_onnx
from .table import TRANSLATORS, Translator

__all__ = ["TorchModule", "from_torch"]

METADATA_KEY = "gcompile.torch"


def _torch():
    try:
        import torch
    except ImportError:
        raise GcompileError("gc.from_torch(module) needs PyTorch (pip install torch); a model exported "
                            "earlier with TorchModule.save_onnx loads without it: gc.from_torch(path)") from None
    return torch


def from_torch(module: Any, example_inputs: Any = None, dynamic_batch: bool = True) -> TorchModule:
    """A torch.nn.Module as a TorchModule (see the module doc), or a file written by
    TorchModule.save_onnx (a path, bytes or ModelProto) loaded again.

    example_inputs: a tensor or array, or a tuple of them, as the module's forward takes them.
    dynamic_batch: export the first axis of every input as a symbolic dim "batch" (the examples
    must then have a batch of at least 2); False fixes the examples' shapes.
    """
    if isinstance(module, (str, os.PathLike, bytes, bytearray, onnx.ModelProto)):
        return TorchModule(load_onnx(module))
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise GcompileError(f"gc.from_torch takes a torch.nn.Module or the path of a file written by "
                            f"TorchModule.save_onnx, got {type(module).__name__}")
    if example_inputs is None:
        raise GcompileError("gc.from_torch(module, example_inputs): give example inputs to export the module with")
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    args = tuple(a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a)) for a in args)
    dynamic = tuple({0: torch.export.Dim("batch")} if a.ndim else None for a in args) if dynamic_batch else None
    modes = {m: m.training for m in module.modules()}
    module.eval()
    for m in module.modules():     # each Dropout layer exports as a Dropout node (eval mode drops it)
        if type(m) is torch.nn.Dropout:
            m.train()
    try:
        program = torch.onnx.export(module, args, dynamo=True, optimize=False, verbose=False,
                                    dynamic_shapes=dynamic)
    except Exception as err:
        raise GcompileError(f"torch.onnx.export failed on {type(module).__name__}: {type(err).__name__}: "
                            f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                            + (" (try dynamic_batch=False)" if dynamic_batch else "")) from None
    finally:
        for m, mode in modes.items():
            m.training = mode
    training = modes[module]
    return TorchModule(load_onnx(_annotate(program.model_proto, module, training)))


def _annotate(proto: onnx.ModelProto, module: Any, training: bool) -> onnx.ModelProto:
    """Add the state_dict entries the graph does not read as initializers (the file then holds the
    whole state) and record names, buffers and the BatchNorm layers in the metadata."""
    torch = _torch()
    state = {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}
    present = {t.name for t in proto.graph.initializer}
    for name, value in state.items():
        if name not in present:
            proto.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value).reshape(value.shape),
                                                                   name))
    params = [n for n, _ in module.named_parameters()]
    batchnorm = {name: {"momentum": m.momentum, "eps": m.eps, "track": m.track_running_stats}
                 for name, m in module.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}
    entry = proto.metadata_props.add()
    entry.key = METADATA_KEY
    entry.value = json.dumps({"state": list(state), "params": params, "batchnorm": batchnorm,
                              "training": bool(training), "module": type(module).__name__})
    return proto


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


# What TorchModule reads of the metadata from_torch writes, each field's check.
_METADATA_FIELDS = {
    "state": _is_names, "params": _is_names, "training": lambda v: isinstance(v, bool),
    "module": lambda v: isinstance(v, str),
    "batchnorm": lambda v: isinstance(v, dict) and all(
        isinstance(layer, dict) and isinstance(layer.get("track"), bool)
        and (layer.get("momentum") is None or _is_number(layer["momentum"])) for layer in v.values()),
}


def _metadata(model: OnnxModel) -> dict:
    """The metadata from_torch recorded in a model, its structure checked: a saved file may be
    hand-edited or hostile, and a GcompileError naming the field beats a KeyError later."""
    meta = metadata_json(model.proto, METADATA_KEY, model.source)
    if meta is None:
        raise GcompileError(f"{model.source}: not exported by gc.from_torch (no {METADATA_KEY!r} metadata); "
                            "use gc.load_onnx for other ONNX models")
    bad = [k for k, fits in _METADATA_FIELDS.items() if not isinstance(meta, dict) or not fits(meta.get(k))]
    if bad:
        raise GcompileError(f"{model.source}: its {METADATA_KEY!r} metadata is not what gc.from_torch writes (its "
                            f"{bad[0]!r} field); was the file edited?")
    return meta


class TorchModule(Module):
    """A PyTorch module imported through ONNX (gc.from_torch): a gc.nn Module whose parameters and
    buffers are the torch module's state_dict entries, by their names ("conv.weight")."""

    def __init__(self, model: OnnxModel) -> None:
        meta = _metadata(model)
        values = model.params
        missing = [n for n in meta["state"] if n not in values]
        if missing:
            raise GcompileError(f"{model.source}: the state_dict entries {missing} are not initializers of the model")
        self._onnx, self._batchnorm, self._name = model, meta["batchnorm"], meta["module"]
        trainable = set(meta["params"])
        for name in meta["state"]:
            if name in trainable:
                setattr(self, name, values[name])
            else:
                self.register_buffer(name, values[name])
        self.train(meta["training"])

    @property
    def params(self) -> dict[str, Any]:
        """The trainable parameters by state_dict name."""
        return dict(self.named_parameters())

    def input_specs(self) -> list[Spec]:
        """One gc.spec per input of the exported model (the batch axis symbolic, "batch")."""
        return self._onnx.input_specs()

    def save_onnx(self, path: str | os.PathLike) -> None:
        """Write the exported model with the current parameters and buffers; gc.from_torch(path) loads it."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self._onnx.proto)
        state = self.state_dict()
        for tensor in proto.graph.initializer:
            if tensor.name in state:
                value = np.asarray(state[tensor.name])
                tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value).reshape(value.shape), tensor.name))
        entry = next(p for p in proto.metadata_props if p.key == METADATA_KEY)
        meta = json.loads(entry.value)
        meta["training"] = self.training
        entry.value = json.dumps(meta)
        atomic_write(path, proto.SerializeToString())

    def __repr__(self) -> str:
        return f"TorchModule({self._name}, {len(self.params)} parameters, training={self.training})"

    def forward(self, *inputs: Any) -> Any:
        updates: dict[str, tuple] = {}
        overrides = {"Dropout": Translator(self._dropout)}
        if self.training:
            overrides["BatchNormalization"] = Translator(self._batch_norm(updates))
        out = self._onnx(*inputs, params=self.state_dict(), overrides=overrides)
        for prefix, (mean, var) in updates.items():
            if isinstance(getattr(self, f"{prefix}.running_mean"), Tensor):
                setattr(self, f"{prefix}.running_mean", mean)
                setattr(self, f"{prefix}.running_var", var)
                counter = f"{prefix}.num_batches_tracked"
                if counter in self.__dict__:
                    setattr(self, counter, getattr(self, counter) + 1)
        return out

    def _dropout(self, n, x, ratio=None, training=None):
        """The translator of torch's Dropout layers (exported in training mode, with their ratio):
        a random mask while this module trains, the identity in eval mode, as in PyTorch."""
        p = float(n.known(ratio, "ratio").reshape(-1)[0]) if ratio is not None else 0.5
        dropping = self.training and p > 0
        if dropping and n.wants(1):
            raise n.unsupported("Dropout's mask output in training mode is not supported")
        return F.dropout(x, p, training=dropping), (F.full(x.shape, 1, np.bool_) if n.wants(1) else None)

    def _batch_norm(self, updates: dict):
        """The translator of BatchNormalization in training mode: batch statistics, and the running
        statistics' update PyTorch makes, kept in `updates` by layer."""
        standard = TRANSLATORS["BatchNormalization"].fn

        def translate(n, x, scale, bias, mean, var):
            name = n.proto.input[3] if len(n.proto.input) > 3 else ""
            prefix = name[:-len(".running_mean")] if name.endswith(".running_mean") else None
            info = self._batchnorm.get(prefix) if prefix is not None else None
            if info is None or n.attr("training_mode", 0):
                return standard(n, x, scale, bias, mean, var)
            eps = n.attr("epsilon", 1e-5)
            y, batch_mean, batch_var = F.batch_norm(x, scale, bias, axis=1, eps=eps, training=True, return_stats=True)
            if info["track"]:
                size = count(x, tuple(a for a in range(x.ndim) if a != 1))
                counter = self.__dict__.get(f"{prefix}.num_batches_tracked")
                momentum = info["momentum"] if info["momentum"] is not None else \
                    1 / F.cast(counter + 1, batch_mean.dtype)
                unbiased = batch_var * (size / F.maximum(size - 1, 1))
                updates[prefix] = (mean + momentum * (F.cast(batch_mean, mean.dtype) - mean),
                                   var + momentum * (F.cast(unbiased, var.dtype) - var))
            return y
        return translate
