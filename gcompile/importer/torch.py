"""gc.from_torch: a PyTorch module as a gc.nn Module, through ONNX.

    model = gc.from_torch(torch_model, example_x)     # exports with torch.onnx (dynamo), imports it
    model.params                                      # its trainable parameters, by state_dict name
    step = gc.export_train_step(loss_fn, model, gc.optim.SGD(0.1), ...)

The module is exported with torch.onnx.export(dynamo=True), with the exporter's graph
optimisation off, so every parameter and buffer stays an initializer named as in the module's
state_dict (the optimiser would fold eval-mode BatchNorm into the convolution and rename
constants). It is exported twice, in eval mode and in training mode; BatchNorm layers are in
eval mode and nn.Dropout layers in training mode in both, as their other mode is TorchModule's
own (below), and the other dropout layers in eval mode in both. Where the two exports are the
same graph the model holds it once; where they differ (a forward that reads self.training
itself, or updates state in one mode only) the model is an If between them on the bool
initializer "gcompile.training", which TorchModule sets from its
mode. The import (gc.load_onnx) becomes a TorchModule: a gc.nn Module whose parameters and
buffers are exactly the torch module's state_dict entries, in its order (parameters frozen with
requires_grad_(False) become buffers: PyTorch neither differentiates nor trains them); the int64
shape constants the exporter adds stay private constants. Calling it inlines the ONNX graph with
those values, so it differentiates and trains like any gc.nn Module.

State the forward updates in place (`with torch.no_grad(): self.ema.mul_(0.9).add_(...)`, a call
counter) is carried as BatchNorm's running statistics are: the exporter records such updates in
the exported program but leaves them out of the ONNX graph, so a module that makes some is
exported again with a forward that also returns the updated buffers. They are the model's last
outputs (listed in the metadata, non-persistent buffers among them becoming state too), and a
traced copy of the TorchModule (an argument of the traced function, as in a training step) takes
them as its new buffers. A forward that updates a parameter or an input in place is refused.

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

import contextlib
import copy
import dataclasses
import functools
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
from ..runtime.modelfile import metadata_json, save
from .inline import outer_names
from .load import OnnxModel, load_onnx
from .table import TRANSLATORS, Translator

__all__ = ["TorchModule", "from_torch"]

METADATA_KEY = "gcompile.torch"

# The bool initializer whose value selects the training-mode graph of a model whose two modes differ.
TRAINING_FLAG = "gcompile.training"

# The node metadata marking an Identity that was a detach (or ends a no_grad block): no gradient passes.
STOP_GRADIENT = "gcompile.stop_gradient"


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
    try:
        exports = [_export(module, args, dynamic, training) for training in (False, True)]
    finally:
        for m, mode in modes.items():
            m.training = mode
    training = modes[module]
    proto, updates, flag = _one_model(module, *exports)
    return TorchModule(load_onnx(_annotate(proto, module, training, updates, flag)))


def _set_modes(module: Any, training: bool) -> None:
    """The modes of one export: the module's and its submodules' `training`, except BatchNorm
    layers, always exported in eval mode (their training form is TorchModule's translator, which
    updates the running statistics as PyTorch does), and nn.Dropout layers, always exported in
    training mode (as Dropout nodes with their ratio, which TorchModule's translator turns into
    the identity in eval mode); the other dropout layers (Dropout1d/2d/3d, AlphaDropout) are in
    eval mode in both, the identity."""
    torch = _torch()
    module.train(training)
    for m in module.modules():
        if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.dropout._DropoutNd)):
            m.train(type(m) is torch.nn.Dropout)


def _export(module: Any, args: tuple, dynamic: Any, training: bool) -> tuple[onnx.ModelProto, list[str]]:
    """The module exported in one mode (_set_modes), and the buffers its forward updates in that
    mode, whose new values are the model's last outputs, in that order.

    The exporter records in-place updates of state (`self.ema.mul_(0.9)`, `self.calls += 1`) in the
    exported program's signature but leaves them out of the ONNX graph; so the module is exported
    with a forward that also returns every buffer after the call, and the outputs of the buffers
    the signature does not list as updated are dropped again."""
    _set_modes(module, training)
    buffers = [name for name, _ in module.named_buffers()]
    program = _run_exporter(_returning_buffers(module, buffers) if buffers else module, args, dynamic, training)
    updates = _updated_buffers(module, program.exported_program.graph_signature, training)
    proto = program.model_proto
    _mark_stop_gradients(proto.graph)
    if buffers:
        outputs = list(proto.graph.output)
        users = outputs[:len(outputs) - len(buffers)]
        del proto.graph.output[:]
        proto.graph.output.extend(users + [outputs[len(users) + buffers.index(name)] for name in updates])
        _prune(proto.graph)
    return proto, updates


def _prune(graph: onnx.GraphProto) -> None:
    """Remove the nodes no output of `graph` needs (the copies of the buffers left unchanged)."""
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            kept.append(node)
            needed.update(node.input)
            needed.update(outer_names(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))


def _mode(training: bool) -> str:
    return "training" if training else "eval"


def _run_exporter(module: Any, args: tuple, dynamic: Any, training: bool):
    """torch.export's program of `module`, its `torch.no_grad()` and `torch.inference_mode()` blocks'
    results detached, exported to ONNX."""
    torch = _torch()
    try:
        with _inference_mode_as_no_grad():
            program = torch.export.export(module, args, dynamic_shapes=dynamic)
        _detach_no_grad_results(program.graph_module)
        return torch.onnx.export(program, dynamo=True, optimize=False, verbose=False, dynamic_shapes=dynamic)
    except Exception as err:
        raise GcompileError(f"torch.onnx.export failed on {type(module).__name__} (in {_mode(training)} mode): "
                            f"{type(err).__name__}: "
                            f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                            + (" (try dynamic_batch=False)" if dynamic is not None else "")) from None


@contextlib.contextmanager
def _inference_mode_as_no_grad():
    """While exporting, `torch.inference_mode()` blocks (and functions it decorates) enter no_grad.

    torch.export records no_grad blocks but drops inference_mode ones without a trace, so a
    scale computed under inference_mode would pass gradients in the import though none passes
    in PyTorch. The class's own methods are replaced, as decorators made before the export hold
    the class itself rather than the name torch.inference_mode."""
    mode = _torch().autograd.grad_mode.inference_mode
    own = mode.__enter__, mode.__exit__

    def enter(self):
        self._gcompile_context = _torch().no_grad() if self.mode else contextlib.nullcontext()
        self._gcompile_context.__enter__()

    def exit_(self, *details):
        self._gcompile_context.__exit__(*details)
    mode.__enter__, mode.__exit__ = enter, exit_
    try:
        yield
    finally:
        mode.__enter__, mode.__exit__ = own


def _detach_no_grad_results(module: Any) -> None:
    """Make every `with torch.no_grad():` block of an exported program end in aten.detach of its results.

    torch.export records such a block as a wrap_with_set_grad_enabled(False, body, ...) call, and the
    ONNX exporter inlines the body, after which nothing says that its results carry no gradient
    (an EMA update made under no_grad, a scale computed there). A detach is exported as an Identity
    that keeps its aten op in the node's metadata, which _mark_stop_gradients turns into the
    importer's stop_gradient."""
    torch = _torch()
    block = torch.ops.higher_order.wrap_with_set_grad_enabled
    for _, owner in list(module.named_modules()):
        if not isinstance(owner, torch.fx.GraphModule):
            continue
        for node in owner.graph.nodes:
            if node.op == "call_function" and node.target is block and node.args[0] is False:
                body = getattr(owner, node.args[1].target)
                output = next(n for n in body.graph.nodes if n.op == "output")
                results = output.args[0]
                with body.graph.inserting_before(output):
                    detached = [body.graph.call_function(torch.ops.aten.detach.default, (r,))
                                if isinstance(r, torch.fx.Node) and isinstance(r.meta.get("val"), torch.Tensor)
                                else r for r in (results if isinstance(results, (tuple, list)) else [results])]
                for new, old in zip(detached, results if isinstance(results, (tuple, list)) else [results]):
                    if new is not old:
                        new.meta.update(old.meta)
                output.args = (type(results)(detached) if isinstance(results, (tuple, list)) else detached[0],)
                body.recompile()


def _mark_stop_gradients(graph: onnx.GraphProto) -> None:
    """Mark the exported detaches (Identity nodes whose metadata names aten.detach) with STOP_GRADIENT,
    which TorchModule imports as stop_gradient; the mark, unlike the exporter's metadata, is gcompile's."""
    for node in graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        if node.op_type == "Identity" and meta.get("namespace", "").endswith("aten.detach.default"):
            node.metadata_props.add(key=STOP_GRADIENT, value="true")
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _mark_stop_gradients(sub)


def _updated_buffers(module: Any, signature: Any, training: bool) -> list[str]:
    """The buffers the exported forward updates in place, in the module's order; updates of
    parameters or of the inputs are refused (an imported model cannot make them)."""
    where = f"{type(module).__name__}'s forward (in {_mode(training)} mode)"
    parameters = sorted(set(getattr(signature, "parameters_to_mutate", {}).values()))
    if parameters:
        raise GcompileError(f"{where} updates its parameters {parameters} in place; gc.from_torch carries updated "
                            "buffers as state, never parameters (those change by the optimizer's step): register "
                            "them as buffers, or make the update outside forward")
    inputs = sorted(set(signature.user_inputs_to_mutate.values()))
    if inputs:
        raise GcompileError(f"{where} updates its inputs {inputs} in place, which an imported model cannot do to "
                            "the arrays it is given: compute on a copy (x = x.clone())")
    mutated = set(signature.buffers_to_mutate.values())
    return [name for name, _ in module.named_buffers() if name in mutated]


def _returning_buffers(module: Any, names: list[str]) -> Any:
    """A shallow copy of `module` (the same parameters, buffers and submodules, hence the same
    names in the export) whose forward also returns the buffers `names` as they are after the call."""
    inner = module.forward

    @functools.wraps(inner)
    def forward(*args, **kwargs):
        out = inner(*args, **kwargs)
        return out, *(module.get_buffer(name).clone() for name in names)
    copied = copy.copy(module)
    copied.forward = forward
    return copied


def _one_model(module: Any, evaluation: tuple, training: tuple) -> tuple[onnx.ModelProto, list[str], str | None]:
    """The model TorchModule runs, the buffers it updates (its last outputs) and the name of the
    flag that selects the training-mode graph (None when both modes export the same graph):
    one graph when both modes exported the same, else an If on TRAINING_FLAG between the two."""
    (eval_proto, eval_updates), (train_proto, train_updates) = evaluation, training
    if eval_updates == train_updates and _same_graph(eval_proto.graph, train_proto.graph):
        return eval_proto, eval_updates, None
    updates = eval_updates + [n for n in train_updates if n not in eval_updates]
    users = [len(p.graph.output) - len(u) for p, u in ((eval_proto, eval_updates), (train_proto, train_updates))]
    if users[0] != users[1]:
        raise GcompileError(f"{type(module).__name__}'s forward returns {users[0]} tensors in eval mode and "
                            f"{users[1]} in training mode; gc.from_torch needs the same outputs in both")
    initializers = {t.name: t for t in eval_proto.graph.initializer}
    renamed = {}
    for tensor in train_proto.graph.initializer:
        known = initializers.get(tensor.name)
        if known is not None and known.SerializeToString() != tensor.SerializeToString():
            renamed[tensor.name] = f"training/{tensor.name}"    # an exporter constant of the same name
        if known is None or tensor.name in renamed:
            copied = onnx.TensorProto()
            copied.CopyFrom(tensor)
            copied.name = renamed.get(tensor.name, tensor.name)
            initializers[copied.name] = copied
    then_branch = _branch(train_proto.graph, train_updates, updates, "training/", renamed)
    else_branch = _branch(eval_proto.graph, eval_updates, updates, "eval/", {})
    outputs = [onnx.ValueInfoProto() for _ in then_branch.output]
    for value, inner, name in zip(outputs, else_branch.output, _outer_names(eval_proto.graph, users[0], updates)):
        value.CopyFrom(inner)
        value.name = name
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("If", [TRAINING_FLAG], [v.name for v in outputs], name="gcompile.torch_mode",
                               then_branch=then_branch, else_branch=else_branch)],
        eval_proto.graph.name, list(eval_proto.graph.input), outputs,
        [*initializers.values(), numpy_helper.from_array(np.array(True), TRAINING_FLAG)])
    proto = onnx.ModelProto()
    proto.CopyFrom(eval_proto)
    proto.graph.CopyFrom(graph)
    known_functions = {(f.domain, f.name) for f in proto.functions}
    proto.functions.extend(f for f in train_proto.functions if (f.domain, f.name) not in known_functions)
    return proto, updates, TRAINING_FLAG


def _same_graph(a: onnx.GraphProto, b: onnx.GraphProto) -> bool:
    """Whether two exports are the same computation: the same nodes (their source lines aside),
    outputs and initializers."""
    def computation(node: onnx.NodeProto) -> bytes:
        bare = onnx.NodeProto()
        bare.CopyFrom(node)
        bare.ClearField("metadata_props")
        bare.ClearField("doc_string")
        return bare.SerializeToString()
    parts = lambda g: ([computation(n) for n in g.node], [o.SerializeToString() for o in g.output],  # noqa: E731
                       sorted(t.SerializeToString() for t in g.initializer))
    return parts(a) == parts(b)


def _outer_names(graph: onnx.GraphProto, users: int, updates: list[str]) -> list[str]:
    """The If's output names: the eval export's output names, then one per updated buffer."""
    return [o.name for o in graph.output[:users]] + [f"{name}.updated" for name in updates]


def _branch(graph: onnx.GraphProto, own: list[str], updates: list[str], prefix: str,
            renamed: dict[str, str]) -> onnx.GraphProto:
    """One export's graph as a branch of the If: the values it computes renamed with `prefix` (a
    branch may not reuse a name of the enclosing graph or the other branch), its outputs those of
    the forward, then each buffer of `updates` (unchanged where this mode does not update it)."""
    users = len(graph.output) - len(own)
    mapping = dict(renamed)
    mapping.update({out: prefix + out for node in graph.node for out in node.output if out})
    branch = onnx.GraphProto()
    branch.name = prefix.rstrip("/")
    for node in graph.node:
        copied = branch.node.add()
        copied.CopyFrom(node)
        copied.name = prefix + node.name if node.name else ""
    _rename(branch, mapping)
    for info in graph.value_info:
        if info.name in mapping:
            copied = branch.value_info.add()
            copied.CopyFrom(info)
            copied.name = mapping[info.name]
    results = [(o, mapping.get(o.name, o.name)) for o in graph.output[:users]]
    types = {t.name: t for t in graph.initializer}
    for name in updates:
        if name in own:
            value = graph.output[users + own.index(name)]
            results.append((value, mapping.get(value.name, value.name)))
        else:
            results.append((onnx.helper.make_tensor_value_info(name, types[name].data_type, types[name].dims), name))
    for k, (info, name) in enumerate(results):
        if name not in mapping.values():      # an outer value (an input, an unchanged buffer) passed on
            same = f"{prefix}output_{k}"
            branch.node.add().CopyFrom(onnx.helper.make_node("Identity", [name], [same], name=same))
            name = same
        output = branch.output.add()
        output.CopyFrom(info)
        output.name = name
    return branch


def _rename(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    """Rename the values of `mapping` wherever `graph`'s nodes read or write them, in subgraphs too
    (which may read them from outside; names are unique across a model, so nothing is shadowed)."""
    for node in graph.node:
        node.input[:] = [mapping.get(n, n) for n in node.input]
        node.output[:] = [mapping.get(n, n) for n in node.output]
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _rename(sub, mapping)
                for output in sub.output:
                    output.name = mapping.get(output.name, output.name)


def _annotate(proto: onnx.ModelProto, module: Any, training: bool, updates: list[str],
              flag: str | None) -> onnx.ModelProto:
    """Add the state_dict entries the graph does not read as initializers (the file then holds the
    whole state) and record names, buffers, the BatchNorm layers, the buffers the forward updates
    and the flag of the training-mode graph in the metadata. A non-persistent buffer that the
    forward updates is state too (it is carried from call to call)."""
    torch = _torch()
    state = {k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}
    buffers = dict(module.named_buffers())
    state.update({name: buffers[name].detach().cpu().numpy() for name in updates if name not in state})
    present = {t.name for t in proto.graph.initializer}
    for name, value in state.items():
        if name not in present:
            proto.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value).reshape(value.shape),
                                                                   name))
    if flag is not None:
        _set_flag(proto, flag, training)
    params = [n for n, p in module.named_parameters() if p.requires_grad]    # frozen ones load as buffers
    batchnorm = {name: {"momentum": m.momentum, "eps": m.eps, "track": m.track_running_stats}
                 for name, m in module.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}
    entry = proto.metadata_props.add()
    entry.key = METADATA_KEY
    entry.value = json.dumps({"state": list(state), "params": params, "batchnorm": batchnorm,
                              "training": bool(training), "module": type(module).__name__,
                              "updates": updates, "training_flag": flag})
    return proto


def _set_flag(proto: onnx.ModelProto, flag: str, training: bool) -> None:
    """Set the initializer that selects the training-mode graph (the default of a plain ONNX run)."""
    for tensor in proto.graph.initializer:
        if tensor.name == flag:
            tensor.CopyFrom(numpy_helper.from_array(np.array(bool(training)), flag))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


# What TorchModule reads of the metadata from_torch writes, each field's check ("updates" and
# "training_flag" are absent from files written before they existed).
_METADATA_FIELDS = {
    "state": _is_names, "params": _is_names, "training": lambda v: isinstance(v, bool),
    "module": lambda v: isinstance(v, str), "updates": lambda v: v is None or _is_names(v),
    "training_flag": lambda v: v is None or isinstance(v, str),
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
        self._updates: list[str] = meta.get("updates") or []
        self._flag: str | None = meta.get("training_flag")
        if any(n not in meta["state"] for n in self._updates) or (self._flag is not None and self._flag not in values):
            raise GcompileError(f"{model.source}: its {METADATA_KEY!r} metadata names updated buffers or a mode flag "
                                "that the model does not hold; was the file edited?")
        outputs = len(model.output_names)
        if len(self._updates) >= outputs:
            raise GcompileError(f"{model.source}: its {METADATA_KEY!r} metadata names {len(self._updates)} updated "
                                f"buffers, but the model has {outputs} outputs; was the file edited?")
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
        """Write the exported model with the current parameters and buffers, sealed with its sha256
        (runtime.modelfile.save); gc.from_torch(path) loads it and verifies the seal."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self._onnx.proto)
        state = self.state_dict()
        del proto.graph.initializer[:]     # (a model load_onnx read keeps them as params only)
        for name, value in self._onnx.params.items():
            value = np.asarray(state.get(name, value))
            proto.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value).reshape(value.shape),
                                                                   name))
        if self._flag is not None:
            _set_flag(proto, self._flag, self.training)
        entry = next(p for p in proto.metadata_props if p.key == METADATA_KEY)
        meta = json.loads(entry.value)
        meta["training"] = self.training
        entry.value = json.dumps(meta)
        save(proto, path)

    def __repr__(self) -> str:
        return f"TorchModule({self._name}, {len(self.params)} parameters, training={self.training})"

    def forward(self, *inputs: Any) -> Any:
        updates: dict[str, tuple] = {}
        overrides = {"Dropout": Translator(self._dropout),
                     "Identity": dataclasses.replace(TRANSLATORS["Identity"], fn=_identity)}
        if self.training:
            overrides["BatchNormalization"] = Translator(self._batch_norm(updates))
        params = self.state_dict()
        if self._flag is not None:
            params[self._flag] = np.array(self.training)
        out = self._onnx(*inputs, params=params, overrides=overrides)
        if self._updates:
            outs = list(out)
            kept = outs[:len(outs) - len(self._updates)]
            for name, value in zip(self._updates, outs[len(kept):]):
                if isinstance(getattr(self, name), Tensor):     # a traced copy: its new state is read back
                    setattr(self, name, value)
            out = kept[0] if len(kept) == 1 else tuple(kept)
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


def _identity(n, x):
    """The translator of Identity in an exported torch module: a detach (marked STOP_GRADIENT) passes no
    gradient, as in PyTorch."""
    marked = any(p.key == STOP_GRADIENT for p in n.proto.metadata_props)
    if marked and isinstance(x, Tensor):
        return F.stop_gradient(x)
    return TRANSLATORS["Identity"].fn(n, x)
