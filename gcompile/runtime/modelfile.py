"""Saved ONNX model files: saving them sealed, loading and verifying them, their input/output
signatures, and running them once on checked feeds (what Trainer, `gcompile run` and `build
--check` share).

Everything here works from the ONNX file alone, so it handles any model, not only gcompile's.
A file gcompile wrote is verified against its own seal (lowering/seal.py) and, inside a
build folder, against the build's manifest.json; files of other tools have no seal and load as
they are.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import mmap
import os
import re
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..errors import GcompileError, InputError, UnsupportedError, name_mismatch
from ..ir.dims import astype_hint, bind, format_type
from ..ir.dtypes import is_float
from ..lowering import seal
from ..lowering.lower import file_order
from ..lowering.serialize import EXTERNAL_DATA_THRESHOLD, external_data_versions, serialize
from .files import folder_lock, write_files
from .providers import PROVIDERS, external_data_from_memory, make_session
from .subnormals import flushed

MANIFEST = "manifest.json"
MANIFEST_LIMIT = 16 * 1024 ** 2   # bytes; a build's manifest takes about 1 KiB per artifact
# The files of earlier builds that a build removes once its manifest is in place, {name: sha256}:
# written before that manifest and removed after them, so a build killed in between leaves the
# list for the next build to finish (artifacts/build.py) and for loaders to refuse those files.
REMOVING = ".gcompile-removing.json"
RANDOM_FEED_LIMIT = 1024 ** 3     # bytes of random inputs random_feeds makes (for `build --check`)


class ModelFile(NamedTuple):
    """A model file read once (see `opened`)."""
    path: str
    data: bytes                      # the .onnx file's bytes, verified
    model: Any                       # onnx.ModelProto parsed from `data`; external weights not loaded
    external: dict[str, Any]         # external data location -> its contents (verified; memory-mapped)


def save(model, path, external_data_threshold: int = EXTERNAL_DATA_THRESHOLD) -> None:
    """Write `model` to `path`, sealed (lowering/seal.py), atomically. A model of
    `external_data_threshold` bytes or more keeps its weights beside it in PATH.<hash>.data,
    named by its content (lowering.serialize.external_data_name).

    The .onnx and its data change together: both are written in full before either is renamed
    into place, the data file first (under a new name, so the old .onnx keeps its own data), the
    .onnx last; then the data files of earlier versions of PATH are removed. A failure or kill at
    any point leaves the old pair or the new pair. Saves into one folder take its lock
    (runtime.files.folder_lock) and wait for each other. A GcompileError naming the file when it
    cannot be written (a full disk, no permission); the old file is then still there."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    save_set(folder, {name: model}, external_data_threshold, what=os.fspath(path))


def save_set(folder, models: Mapping[str, Any], external_data_threshold: int = EXTERNAL_DATA_THRESHOLD,
             what: str | None = None) -> None:
    """Write the models {file name: ModelProto} into `folder` as one set, each sealed and with its
    external data as `save` writes one: every file is written in full before any is renamed into
    place, the .onnx files last, so a failure or kill leaves the old set or the new one.
    `what` names the set in errors (by default the files' paths)."""
    folder = os.path.abspath(os.fspath(folder))
    what = what or ", ".join(os.path.join(folder, name) for name in models)
    data_files, onnx_files = [], []
    for name, model in models.items():
        data, weights, location = serialize(model, name, external_data_threshold)
        if weights is not None and location is not None:
            data_files.append((location, weights))
        onnx_files.append((name, data))
    try:
        with folder_lock(folder, wait=True):
            existing = os.listdir(folder)
            kept = {location for location, _ in data_files}
            dropped = [n for name in models for n in external_data_versions(name, existing) if n not in kept]
            write_files(folder, data_files + onnx_files, remove=dropped)
    except OSError as err:
        raise GcompileError(f"cannot save {what}: {err.strerror or err}; the files there, if any, are "
                            "unchanged") from None
    except GcompileError as err:   # the folder cannot be created or locked
        raise GcompileError(f"cannot save {what}: {err}") from None


def load(path):
    """An onnx.ModelProto from `path` (see `opened`); its external weights are not loaded
    (describing and feeding a model needs only their shapes)."""
    with opened(path) as f:
        return f.model


@contextlib.contextmanager
def opened(path) -> Iterator[ModelFile]:
    """The model file at `path` read once: its bytes, the model parsed from those very bytes, and
    its external data files memory-mapped, all verified (`verify`), so what is checked is what
    runs: give `session` the result. The mappings close on exit. A GcompileError for a missing,
    unreadable, corrupt or refused file or a missing external data file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise GcompileError(f"{path}: no such file")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise GcompileError(f"{path} cannot be read ({err.strerror or err})") from None
    model = parse(path, data)
    folder = os.path.dirname(os.path.abspath(path))
    _refuse_stray_external_data(model, path)
    with contextlib.ExitStack() as stack:
        external = {loc: stack.enter_context(_mapped(path, folder, loc)) for loc in sorted(set(external_files(model)))}
        verify(path, data, model, external)
        _check_structure(model, path)
        yield ModelFile(path, data, model, external)


def parse(path, data):
    """The onnx.ModelProto in `data`, the bytes of the file at `path`, after checking them against
    their seal where they have one (check_seal): a GcompileError naming the file for a damaged
    file or bytes that do not parse."""
    import onnx
    sealed = check_seal(path, data)
    try:
        model = onnx.load_from_string(data)
    except Exception as err:
        raise GcompileError(f"{os.fspath(path)} is not a valid ONNX model ({first_line(err)})"
                            + (" although its gcompile seal holds: was it written by another tool?" if sealed else "")
                            ) from None
    _check_text(model, os.fspath(path))
    return model


def _check_text(model, path: str) -> None:
    """Make the free-text fields of `model` (doc_strings, node and graph names, the producer) str
    and refuse any other string field (what names a value, an op, a domain, a metadata entry)
    that is not UTF-8 text, naming where it is, at any depth (loop bodies, functions). ONNX says
    every string is UTF-8; protobuf hands over bytes where one is not, which every command that
    prints or draws the model would trip over. Text that does not decode shows U+FFFD."""
    def text(message, *fields: str) -> None:
        for field in fields:
            value = getattr(message, field)
            if value.__class__ is bytes:
                setattr(message, field, value.decode("utf-8", errors="replace"))

    def names(values, where: str, *index) -> None:   # where.format(*index) names the place, on error only
        if bytes in map(type, values):
            value = next(v for v in values if isinstance(v, bytes))
            raise GcompileError(f"{path}: {where.format(*index)} holds {value[:60]!r}, which is not UTF-8 text as "
                                "ONNX requires of names: the file is damaged or was not written as ONNX")

    def nodes(items, where: str) -> None:
        for i, node in enumerate(items):   # written for speed: models may hold 10^5 nodes
            if node.name.__class__ is bytes or node.doc_string.__class__ is bytes:
                text(node, "name", "doc_string")
            if bytes in map(type, (node.op_type, node.domain, *node.input, *node.output)):
                names((node.op_type, node.domain, *node.input, *node.output), "{}.node[{}]", where, i)
            for attribute in node.attribute:
                text(attribute, "doc_string")
                names((attribute.name, attribute.ref_attr_name), "{}.node[{}].attribute", where, i)
                for j, body in enumerate([attribute.g] if attribute.HasField("g") else attribute.graphs):
                    graph(body, f"{where}.node[{i}].attribute[{attribute.name!r}].graph[{j}]")

    def graph(g, where: str) -> None:
        text(g, "name", "doc_string")
        for field in ("input", "output", "value_info", "initializer"):
            for i, value in enumerate(getattr(g, field)):
                text(value, "doc_string")
                names((value.name, *(x for e in getattr(value, "external_data", ()) for x in (e.key, e.value))),
                      "{}.{}[{}]", where, field, i)
        nodes(g.node, where)

    text(model, "producer_name", "producer_version", "domain", "doc_string")
    names([x for e in model.metadata_props for x in (e.key, e.value)], "a metadata entry")
    names([o.domain for o in model.opset_import], "an opset domain")
    graph(model.graph, "graph")
    for i, function in enumerate(model.functions):
        text(function, "doc_string")
        names((function.name, function.domain, *function.input, *function.output), "functions[{}]", i)
        nodes(function.node, f"functions[{i}]")


@contextlib.contextmanager
def _mapped(path: str, folder: str, location: str) -> Iterator[Any]:
    """The external data file `location` of the model at `path`, memory-mapped read-only; it must
    be a relative path to a file inside the model's folder (external_data_file)."""
    target = external_data_file(folder, location, path)
    if not os.path.isfile(target):
        raise GcompileError(f"{path} keeps its weights in {location}, which is not beside it in {folder}: copy the "
                            "data file(s) along with the .onnx")
    with contextlib.ExitStack() as stack:
        try:
            fh = stack.enter_context(open(target, "rb"))
            size = os.fstat(fh.fileno()).st_size
            mapped = stack.enter_context(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)) if size else b""
        except OSError as err:
            raise GcompileError(f"{path} keeps its weights in {location}, which cannot be read "
                                f"({err.strerror or err})") from None
        yield mapped


def external_data_file(folder: str, location: str, what: str) -> str:
    """The real path of the file that an external data `location`, read from a model in `folder`,
    names. Model files may be hostile, so the location must be a relative path to a file inside
    the folder: a GcompileError naming `what` (the model or the tensor) for one that is empty,
    holds a control character (a NUL byte ends the name the system sees), is absolute (POSIX,
    Windows drive or UNC), climbs out with '..' or leads out through a link. Whether the file
    exists is the caller's to check."""
    root = os.path.realpath(folder)
    if not location:
        reason = "an empty location"
    elif any(ord(c) < 32 or ord(c) == 127 for c in location):
        reason = "a location holding a control character" + (" (a NUL byte)" if "\0" in location else "")
    elif location.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", location):
        reason = "an absolute path"
    elif ".." in location.replace("\\", "/").split("/"):
        reason = "a path climbing out of the folder with '..'"
    else:
        target = os.path.realpath(os.path.join(root, location))
        if os.path.commonpath([root, target]) == root:
            return target
        reason = "a link leading out of the folder"
    raise GcompileError(f"{what} keeps data in {location!r}, {reason}: refused (external data must be a relative "
                        f"path to a file inside the model's folder {folder})")


def _refuse_stray_external_data(model, path: str) -> None:
    """External data is read for the main graph's initializers only. A tensor anywhere else (a node
    attribute such as a Constant's value, a subgraph, a sparse tensor) keeping its data in a file
    would be read by onnxruntime relative to the working directory, not the model's folder, and
    unverified by the manifest: refused, naming where it sits."""
    import onnx
    for where, tensor in _tensor_protos(model.graph, "graph"):
        if tensor.data_location == onnx.TensorProto.EXTERNAL and not where.startswith("graph.initializer["):
            raise GcompileError(f"{path}: the tensor at {where} keeps its data in an external file; gcompile reads "
                                "external data for the graph's initializers only (save the model with that tensor "
                                "inline, or make it an initializer)")


def _tensor_protos(message, where: str) -> Iterator[tuple[str, Any]]:
    """Every TensorProto inside a protobuf message, at any depth, with its field path from `where`
    ('graph.node[3].attribute[0].t')."""
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        items = [(None, value)] if hasattr(value, "ListFields") else enumerate(value)   # else a repeated field
        for i, item in items:
            at = f"{where}.{field.name}" + ("" if i is None else f"[{i}]")
            if field.message_type.full_name == "onnx.TensorProto":
                yield at, item
            else:
                yield from _tensor_protos(item, at)


def _check_structure(model, path: str) -> None:
    """onnx's checker on the parsed model. Initializers kept in external data are checked as graph
    inputs (the checker would look for their files relative to the working directory); a model
    newer than the installed onnx knows is left to check_runnable, so `inspect` still describes it."""
    import onnx
    if model.ir_version > onnx.IR_VERSION or (opset_of(model) or 0) > onnx.defs.onnx_opset_version():
        return
    external = {t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    if external:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        declared = {v.name for v in copy.graph.input}
        kept = [t for t in copy.graph.initializer if t.name not in external]
        for t in copy.graph.initializer:
            if t.name in external and t.name not in declared:
                copy.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        del copy.graph.initializer[:]
        copy.graph.initializer.extend(kept)
        model = copy
    try:
        onnx.checker.check_model(model)
    except Exception as err:
        raise GcompileError(f"{path} is not a valid ONNX model ({first_line(err)})") from None


def session(f: ModelFile, provider: str, fixed_threads: bool = False):
    """An onnxruntime session for an opened model file: from its verified bytes, with its external
    data handed over from the verified mappings. (An onnxruntime older than 1.29 cannot take those:
    it reads the model and its data again from beside the model's path.) fixed_threads: see
    providers.make_session. A model lowered to run in its file order (lowering/order.py) runs so."""
    if f.external and not external_data_from_memory():
        return make_session(os.path.abspath(f.path), provider, nodes=len(f.model.graph.node),
                            fixed_threads=fixed_threads)
    return make_session(f.data, provider, f.external, nodes=len(f.model.graph.node), fixed_threads=fixed_threads,
                        order=file_order(f.model))


def verify(path, data, model, external: Mapping[str, Any] | None = None) -> None:
    """Refuse a model file that is not what gcompile wrote: checked against the manifest.json
    beside it (check_manifest), and, for a sealed file (whose bytes `parse` checked), its external
    data against the sha256 the sealed bytes record. `data` are the bytes the caller read (and
    will use), `model` the model parsed from them, `external` maps its external data locations to
    the contents the caller will use (None: those beside the file, read here). Every loader
    (modelfile.opened, so Trainer(path) and the CLI, and gc.load_onnx) calls this after `parse`."""
    check_manifest(path, data, external)
    locations = sorted(set(external_files(model)))
    if not locations or seal.read(data) is None:
        return
    path = os.fspath(path)
    recorded = metadata_json(model, seal.EXTERNAL_KEY, path)
    if not isinstance(recorded, dict) or sorted(recorded) != locations:
        raise GcompileError(f"{path} is sealed by gcompile but does not record the sha256 of its external data "
                            f"{', '.join(locations)} ({seal.EXTERNAL_KEY!r}): the file was not written by gcompile")
    with contextlib.ExitStack() as stack:
        if external is None:
            folder = os.path.dirname(os.path.abspath(path))
            external = {loc: stack.enter_context(_mapped(path, folder, loc)) for loc in locations}
        for location in locations:
            if hashlib.sha256(external[location]).hexdigest() != recorded[location]:
                raise GcompileError(f"{path}: its external data file {location} is damaged: its sha256 differs from "
                                    f"the one the sealed model records; the data file was truncated or changed after "
                                    "it was written: restore it or save the model again")


def check_seal(path, data) -> bool:
    """Whether the bytes `data` of the file at `path` are sealed (lowering/seal.py); a
    GcompileError naming the file where they differ from what they were sealed with."""
    path = os.fspath(path)
    try:
        expected = seal.read(data)
    except ValueError as err:
        raise GcompileError(f"{path} is damaged: its gcompile seal ({seal.KEY!r}, the sha256 it was written "
                            f"with) is broken ({err}); the file was truncated or changed after it was written: "
                            "restore it or save it again") from None
    if expected is None:
        return False
    if hashlib.sha256(memoryview(data)[seal.SIZE:]).hexdigest() != expected:
        raise GcompileError(f"{path} is damaged: its content does not match the sha256 gcompile sealed it "
                            f"with ({seal.KEY!r}); the file was truncated or changed after it was written: restore "
                            "it or save it again")
    return True


def check_manifest(path, data: bytes, external: Mapping[str, Any] | None = None) -> None:
    """Refuse a model file (or its external data) that is not the file `gcompile build` wrote,
    when the manifest.json beside it lists it: a modified or swapped artifact is never loaded.

    `data` are the bytes of the .onnx the caller read (and will use); `external` maps external
    data locations to the contents the caller will use (others listed are hashed from disk). A
    manifest that cannot be read, or is not a gcompile manifest, refuses every file beside it."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    manifest_path = os.path.join(folder, MANIFEST)
    try:
        manifest = _read_manifest(manifest_path)
    except ValueError as err:
        raise GcompileError(f"{manifest_path}: the manifest beside {path} cannot be read ({err}); the manifest "
                            "refused the file: repair or remove the manifest") from None
    if manifest is None:
        return
    entries = [e for e in manifest["artifacts"] if e.get("file") == name]
    if len(entries) > 1:
        raise GcompileError(f"{manifest_path} lists {name} {len(entries)} times; the manifest refused {path}")
    if not entries:
        _check_unlisted(path, data, manifest_path)
        return
    _check_sha256(path, hashlib.sha256(data).hexdigest(), entries[0].get("sha256"), manifest_path)
    listed = entries[0].get("external_data")
    if listed is None:
        return
    location = listed.get("file") if isinstance(listed, dict) else None
    if not isinstance(location, str):
        raise GcompileError(f"{manifest_path}: the external_data of {name} is not {{\"file\": ..., \"sha256\": ...}}; "
                            f"the manifest refused {path}")
    target = os.path.join(folder, location)
    if location in ("", ".", "..") or os.path.basename(location) != location or not os.path.isfile(target):
        raise GcompileError(f"{path}: its external data file {location!r}, listed in {manifest_path}, is not a file "
                            f"in {folder}; the manifest refused it")
    digest = hashlib.sha256()
    if external is not None and location in external:
        digest.update(external[location])
    else:
        with open(target, "rb") as fh:   # in blocks: external data is the part too large to hold twice
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    _check_sha256(target, digest.hexdigest(), listed.get("sha256"), manifest_path)


def _check_unlisted(path: str, data, manifest_path: str) -> None:
    """A file beside a build's manifest that the manifest does not list is no artifact of that
    build: refused where the build dropped it but was stopped before removing it (REMOVING lists
    it), with a warning where nothing checks it (no seal), loaded where its seal does."""
    folder, name = os.path.split(os.path.abspath(path))
    if name in read_removing(folder):
        raise GcompileError(f"{path} was dropped from the build in {folder} ({manifest_path} no longer lists it), "
                            "but that build was stopped before removing it: the next build into the folder removes "
                            "it; rebuild, or load an artifact the manifest lists")
    if seal.read(data) is None:
        warnings.warn(f"{path} is in the build folder {folder} but {manifest_path} does not list it: it is not an "
                      "artifact of that build, and nothing checks it", stacklevel=4)


def read_removing(folder) -> dict[str, str]:
    """{file name: sha256} of the files a build into `folder` removes once its manifest is in place
    (REMOVING); empty where there is none, or where it cannot be read (it names files to delete:
    only plain names with a valid sha256 count)."""
    try:
        raw = _read_limited(os.path.join(os.fspath(folder), REMOVING))
        listed = _parse_json(raw) if raw is not None else None
    except ValueError:
        return {}
    if not isinstance(listed, dict):
        return {}
    return {n: h for n, h in listed.items() if isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h)
            and n == os.path.basename(n) and n not in ("", ".", "..")}


def _check_sha256(path: str, actual: str, expected: Any, manifest_path: str) -> None:
    if not isinstance(expected, str) or not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise GcompileError(f"{manifest_path} records no valid sha256 for {os.path.basename(path)} (got "
                            f"{str(expected)[:80]!r}); the manifest refused {path}")
    if actual != expected:
        raise GcompileError(f"{path}: its sha256 is {actual}, but {manifest_path} records {expected}; the manifest "
                            "refused it: the file changed after the build (rebuild it or restore the original)")


def read_manifest(folder) -> dict | None:
    """The manifest.json in `folder`, or None where there is none; a GcompileError for one that
    cannot be read, is larger than MANIFEST_LIMIT or is not a gcompile manifest."""
    path = os.path.join(os.fspath(folder), MANIFEST)
    try:
        return _read_manifest(path)
    except ValueError as err:
        raise GcompileError(f"{path} cannot be read ({err})") from None


def _read_manifest(path: str) -> dict | None:
    """The manifest at `path` (None if there is none); ValueError saying what is wrong with it."""
    raw = _read_limited(path)
    if raw is None:
        return None
    manifest = _parse_json(raw)
    artifacts = manifest.get("artifacts") if isinstance(manifest, dict) else None
    if not isinstance(artifacts, list) or not all(isinstance(e, dict) for e in artifacts):
        raise ValueError('not a gcompile manifest: expected an object whose "artifacts" is a list of objects')
    return manifest


def _read_limited(path: str) -> bytes | None:
    """The bytes of the file at `path` (None if there is none), at most MANIFEST_LIMIT of them; a
    ValueError saying what is wrong."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MANIFEST_LIMIT + 1)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ValueError(err.strerror or str(err)) from None
    if len(raw) > MANIFEST_LIMIT:
        raise ValueError(f"larger than {MANIFEST_LIMIT} bytes")
    return raw


def _parse_json(raw: str | bytes) -> Any:
    """JSON text read from a file (a manifest, a model's metadata), which may be hand-edited or
    hostile; a ValueError saying what is wrong with it."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as err:
        raise ValueError(f"not valid JSON: {first_line(err)}") from None


def metadata_json(model, key: str, where: str) -> Any:
    """The JSON value a model keeps in its metadata_props under `key`, None where it has none; a
    GcompileError naming `where` (the model) and the key for text that is not JSON. The caller
    checks the value's structure."""
    raw = {p.key: p.value for p in model.metadata_props}.get(key)
    if raw is None:
        return None
    try:
        return _parse_json(raw)
    except ValueError as err:
        raise GcompileError(f"{where}: its {key!r} metadata cannot be read ({err}); was the file edited?") from None


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (onnx and onnxruntime errors run on for pages)."""
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def onnxruntime_failure(err: BaseException) -> str | None:
    """For an error onnxruntime raised running a model: ' at node NAME (OP): what went wrong' (or
    ': what went wrong' where it names no node); None for any other exception."""
    if not type(err).__module__.startswith("onnxruntime"):
        return None
    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", first_line(err))
    node = re.search(r"while running (\w+) node\. Name:'([^']*)' Status Message: (.*)", message)
    return f" at node {node.group(2)!r} ({node.group(1)}): {node.group(3)}" if node else f": {message}"


def external_files(model) -> list[str]:
    """The external data locations the model's initializers name (relative to its folder)."""
    from onnx import TensorProto
    return [entry.value for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL
            for entry in t.external_data if entry.key == "location"]


def opset_of(model) -> int | None:
    """The model's default-domain (ai.onnx) opset."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None)


def check_runnable(model, path) -> None:
    """A clear error for a model newer than the installed onnxruntime (opset or IR version),
    instead of onnxruntime's own message at session creation."""
    from ..lowering.versions import runtime_limits
    max_ir, max_opset = runtime_limits()
    opset = opset_of(model)
    if opset is not None and opset > max_opset:
        raise GcompileError(f"{path} uses ONNX opset {opset}, newer than the installed onnxruntime supports "
                            f"(opset {max_opset} at most): re-export it with opset <= {max_opset} "
                            "or upgrade onnxruntime")
    if model.ir_version > max_ir:
        raise GcompileError(f"{path} has ONNX IR version {model.ir_version}, newer than the installed "
                            f"onnxruntime reads ({max_ir} at most): re-export it or upgrade onnxruntime")


def _dims(value_info) -> tuple:
    dims = value_info.type.tensor_type.shape.dim
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


def _dtype(value_info) -> np.dtype:
    """The numpy dtype of a graph input or output: str for ONNX's strings (numpy's text, which
    onnxruntime takes; it hands strings back as object arrays). A GcompileError for a value that
    is no tensor of a known element type (a sequence or map, or a hand-made file's typeless value)."""
    from onnx import TensorProto, helper
    kind = value_info.type.WhichOneof("value")
    elem = value_info.type.tensor_type.elem_type if kind == "tensor_type" else TensorProto.UNDEFINED
    if elem == TensorProto.STRING:
        return np.dtype(str)
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    except (KeyError, TypeError):
        what = f"a {kind.removesuffix('_type')}" if kind and kind != "tensor_type" else \
            "of no tensor element type gcompile knows"
        raise UnsupportedError(f"{value_info.name!r} is {what}, not a tensor: gcompile describes and runs models "
                               "whose inputs and outputs are tensors") from None


def signature(values) -> list[dict]:
    """[{name, shape, dtype}] for ONNX graph inputs or outputs (symbolic dims as strings; the
    dtype's numpy name, which np.dtype reads back)."""
    return [{"name": v.name, "shape": list(_dims(v)), "dtype": _dtype(v).name} for v in values]


def format_sig(entry: dict) -> str:
    """'name: dtype[shape]' for one signature() entry (the name quoted where it is not plain text)."""
    return f"{printable(entry['name'])}: {format_type(np.dtype(entry['dtype']), tuple(entry['shape']))}"


def printable(text: str) -> str:
    """`text` as a terminal shows it safely: as it is where every character is printable, else
    quoted with the others escaped (a name in a file may hold escape sequences or line breaks)."""
    return text if text.isprintable() and text else repr(text)


def graph_inputs(model) -> list:
    """Inputs a caller must feed (an input with an initializer of its name is optional: below)."""
    init = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in init]


def optional_inputs(model) -> list:
    """Inputs that have an initializer of the same name: the initializer is the default and a
    caller may feed the input to override it (ONNX IR version 4 on). `gcompile grad` writes the
    differentiated weights this way; older exporters listed every initializer as an input."""
    init = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name in init]


def random_feeds(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs fitting the model's declared inputs; symbols are bound to 2, 3, 4, ...
    in order of first appearance; integers are 0 or 1 (valid labels and indices), bools random.
    Inputs taking more than RANDOM_FEED_LIMIT bytes together are refused before any is made."""
    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    planned = []
    for v in graph_inputs(model):
        shape = tuple(d if isinstance(d, int) else sizes.setdefault(d, 2 + len(sizes)) for d in _dims(v))
        planned.append((v.name, shape, _dtype(v)))
    nbytes = {name: math.prod(shape) * dtype.itemsize for name, shape, dtype in planned}
    if sum(nbytes.values()) > RANDOM_FEED_LIMIT:
        largest = sorted(planned, key=lambda p: -nbytes[p[0]])[:3]
        raise GcompileError(f"random inputs would take {format_size(sum(nbytes.values()))}, more than the "
                            f"{format_size(RANDOM_FEED_LIMIT)} allowed: " + ", ".join(
                                f"input {name!r}: {format_type(dtype, shape)}, {format_size(nbytes[name])}"
                                for name, shape, dtype in largest) + "; give smaller specs to check")
    feeds = {}
    for name, shape, dtype in planned:
        if is_float(dtype):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.random(shape) < 0.5
        else:
            feeds[name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feeds


def format_size(n: int) -> str:
    """A byte count as people read it: 512 B, 1.5 KiB, 3.6 TiB."""
    if n < 1024:
        return f"{n} B"
    power = min(4, int(math.log(n, 1024)))
    return f"{n / 1024 ** power:.1f} {('KiB', 'MiB', 'GiB', 'TiB')[power - 1]}"


def check_feeds(model, feeds: dict) -> dict[str, np.ndarray]:
    """Feeds checked against the model's inputs: names, dtypes, ranks, fixed dims, and one
    size per symbol across all inputs. Optional inputs (optional_inputs) may be fed to override
    their defaults and are then checked the same way. Errors name the input and both shapes."""
    inputs, optional = graph_inputs(model), optional_inputs(model)
    names = [v.name for v in inputs]
    missing = [n for n in names if n not in feeds]
    extra = [n for n in feeds if n not in names and n not in {v.name for v in optional}]
    parts = name_mismatch(missing, extra)
    if parts:
        takes = ", ".join(format_sig(e) for e in signature(inputs)) or "no required inputs"
        if optional:
            takes += "; optional: " + ", ".join(format_sig(e) for e in signature(optional))
        groups = [n for n in extra if any(m.startswith(n + ".") for m in missing)]
        hint = f"; {groups[0]!r} names a group of inputs ({groups[0]}.<name>: a module's weights, a dict's " \
               f"entries): feed them from one state dict file (gcompile run: -i {groups[0]}=weights.npz, as " \
               "Module.save writes)" if groups else ""
        raise InputError(f"inputs do not match the model: {'; '.join(parts)} (the model takes {takes}){hint}")
    bound: dict[str, tuple[int, str]] = {}
    return {v.name: check_value(f"input {v.name!r}", feeds[v.name], _dtype(v), _dims(v), bound)
            for v in inputs + [v for v in optional if v.name in feeds]}


def check_value(label: str, value: Any, dtype: np.dtype, want: tuple, bound: dict[str, tuple[int, str]]) -> np.ndarray:
    """`value` as a C-contiguous array, after checking it against a model input of `dtype` and
    shape `want` (int dims fixed, symbols taking one size across the values checked with the same
    `bound`, which records where each was bound). `label` names the value in errors ("input 'x'",
    "batch input 'x'"): one phrasing for every caller that feeds a model, `gcompile run` and the
    Trainer alike."""
    arr = np.asarray(value)
    expected, got = format_type(dtype, want), format_type(arr.dtype, arr.shape)
    text = dtype.kind == "U" and arr.dtype.kind in "UO"   # onnxruntime takes text of any width, or str objects
    if (arr.dtype != dtype and not text) or arr.ndim != len(want) or any(
            isinstance(d, int) and d != n for d, n in zip(want, arr.shape)):
        raise InputError(f"{label}: expected {expected}, got {got}{astype_hint(dtype, arr.dtype)}")
    conflict = bind(bound, want, arr.shape, label)
    if conflict:
        symbol, n, first_n, first_label = conflict
        raise InputError(f"symbolic dim {symbol!r} is {first_n} in {first_label} but {n} in {label} "
                         f"(expected {expected}, got {got})")
    return np.require(arr, requirements="C")   # not ascontiguousarray, which makes a 0-d array 1-d


def run(session, model, feeds: dict) -> dict:
    """Run a model's onnxruntime session once; returns outputs (name -> array), the provider
    that ran and the run time in ms."""
    names = [o.name for o in model.graph.output]
    checked = check_feeds(model, feeds)
    start = time.perf_counter()
    with flushed():
        values = session.run(names, checked)
    elapsed = time.perf_counter() - start
    values = [v.astype(str) if v.dtype == object else v for v in values]   # onnxruntime's strings, as numpy text
    used = {v: k for k, v in PROVIDERS.items()}.get(session.get_providers()[0], session.get_providers()[0])
    return {"outputs": dict(zip(names, values)), "provider": used, "run_ms": 1e3 * elapsed}
