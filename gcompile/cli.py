"""The `gcompile` command: build, run and inspect ONNX artifacts.

Exit codes: 0 success; 2 a user error (bad model file, spec, input or artifact), printed
as one paragraph without a traceback; 1 an unexpected internal error. `--debug` adds the
traceback to either.

Only click is imported up front: each command imports the library (numpy, onnx, the
compiler) when it runs, so `gcompile --help` and `gcompile CMD --help` answer at once.
"""
from __future__ import annotations

import functools
import io
import logging
import os
import re
import sys
import traceback
import warnings

import click

from . import logs
from .errors import GcompileError
from .version import __version__

_PROVIDER = click.option("--provider", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                         show_default=True, help="onnxruntime execution provider")


def say(text: str = "") -> None:
    """A line of a command's report on stdout; nothing with -q (errors only)."""
    if not logs.quiet():
        click.echo(text)


def _print_traceback(err: BaseException) -> None:
    """The traceback, including the user's original exception that a GcompileError replaced."""
    if err.__suppress_context__ and err.__context__ is not None:
        traceback.print_exception(err.__context__)
    traceback.print_exception(err)


_VERBOSE = click.option("-v", "--verbose", count=True, help="log phase timings to stderr (-vv: also debug messages)")
_QUIET = click.option("-q", "--quiet", is_flag=True, help="errors only: print nothing on success, no progress display")
_DEBUG = click.option("--debug", is_flag=True, help="show the Python traceback of an error")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning raised while a command runs, as the command's other warnings: one line on
    stderr (none with -q)."""
    if not logs.quiet():
        click.echo(f"warning: {message}", err=True)


def _guarded(command):
    """Turn exceptions into the documented exit codes and one-paragraph messages; set the
    log level from -v/-q/--debug, given before the command (`gcompile -v build`) or after it
    (`gcompile build -v`): -v counts add up, -q and --debug hold if given at either place."""
    @_DEBUG
    @_VERBOSE
    @_QUIET
    @functools.wraps(command)
    def wrapper(*args, debug: bool, verbose: int, quiet: bool, **kwargs):
        group = click.get_current_context().find_root().params
        debug = debug or group.get("debug", False)
        quiet = quiet or group.get("quiet", False)
        logs.configure(-1 if quiet else verbose + group.get("verbose", 0))
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return command(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except GcompileError as err:
            if debug:
                _print_traceback(err)
            click.echo(f"error: {err}", err=True)
            raise click.exceptions.Exit(2) from None
        except KeyboardInterrupt:   # Ctrl-C, in gcompile or in the user's code
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(130) from None
        except BrokenPipeError:   # output piped into a reader that stopped early (`| head`)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None
        except Exception as err:
            if debug:
                _print_traceback(err)
            click.echo(f"internal error: {type(err).__name__}: {err} -- this is a gcompile bug; "
                       "rerun with --debug for the traceback and report it", err=True)
            raise click.exceptions.Exit(1) from None
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gcompile")
@_DEBUG
@_VERBOSE
@_QUIET
def main(debug: bool, verbose: int, quiet: bool):
    """gcompile: trace numeric Python, differentiate it to any order, export standard ONNX.

    -v, -q and --debug may be given before the command or after it."""


def _orders(entry: dict) -> str:
    from .artifacts.describe import order_label
    parts = [f"{order_label(int(k))} {v}" for k, v in entry["nodes_by_order"].items()]
    if entry["untagged_nodes"]:
        parts.append(f"glue {entry['untagged_nodes']}")
    inside = f", and {entry['loop_body_nodes']} in loop bodies" if entry.get("loop_body_nodes") else ""
    return f"{entry['nodes']} ({', '.join(parts)}){inside}"


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", default="build", show_default=True, type=click.Path(file_okay=False),
              help="folder for the .onnx files and manifest.json")
@click.option("--opset", type=int, default=None, help="ONNX opset (default: the newest the installed onnxruntime runs)")
@click.option("-O", "--optimize", type=click.IntRange(0, 2), default=2, show_default=True,
              help="graph passes: 0 none, 1 dead code + common subexpressions, 2 also folding and simplification")
@click.option("--check", is_flag=True, help="run each artifact in onnxruntime on random inputs of its specs")
@click.option("--recompute", is_flag=True,
              help="recompute cheap forward nodes in the backward pass instead of keeping them (less memory)")
@click.option("--external-data-threshold", type=click.IntRange(min=0), default=None,
              show_default="2 GiB, the protobuf limit", metavar="BYTES",
              help="an artifact this large keeps its weights in <name>.onnx.<hash>.data beside it")
@click.option("--target", type=click.Choice(["portable", "ort-cpu", "cuda", "web"]), default="portable",
              show_default=True,
              help="the runtime to lower for: portable runs on any ONNX runtime, ort-cpu and cuda are tuned for "
                   "ONNX Runtime's providers; web is portable plus a JavaScript module (gcompile.mjs) and each "
                   "training step's starting values, for onnxruntime-web and onnxruntime-node")
@_PROVIDER
@_guarded
def build(model, out_dir, opset, optimize, check, recompute, external_data_threshold, target, provider):
    """Build every @gc.export function of MODEL (a .py file) into OUT/<name>.onnx and OUT/manifest.json."""
    from .artifacts.build import build as build_artifacts
    from .lowering.serialize import EXTERNAL_DATA_THRESHOLD
    from .runtime import modelfile
    if external_data_threshold is None:
        external_data_threshold = EXTERNAL_DATA_THRESHOLD
    result = build_artifacts(model, out_dir, opset=opset, check=check, provider=provider, optimize=optimize,
                             external_data_threshold=external_data_threshold, recompute=recompute, target=target)
    for entry in result.manifest["artifacts"]:
        size = modelfile.format_size(entry["bytes"])
        if "external_data" in entry:
            size += f" + {modelfile.format_size(entry['external_data']['bytes'])} in {entry['external_data']['file']}"
        timed = result.timings[entry["name"]]
        rows = [("inputs", ", ".join(map(modelfile.format_sig, entry["inputs"]))),
                ("outputs", ", ".join(map(modelfile.format_sig, entry["outputs"]))),
                ("nodes", _orders(entry)),
                # what the model holds (weights it closes over, constants), not the parameters it takes as inputs
                ("consts", f"{entry['parameters']:,} values in {entry['initializers']} initializer(s)"),
                ("size", f"{size}, opset {entry['opset']}, ir_version {entry['ir_version']}, for {entry['target']}"),
                ("time", f"{1e3 * timed.total():.1f} ms: {timed.format()}")]
        if entry["name"] in result.checks:
            c = result.checks[entry["name"]]
            rows.append(("check", f"ok on {c['provider']}: load {c['load_ms']:.1f} ms, run {c['run_ms']:.1f} ms"))
        say(os.path.join(result.out_dir, entry["file"]))
        for key, value in rows:
            say(f"  {key:<8} {value}")
    if "web" in result.manifest:
        inits = [entry["init"] for entry in result.manifest["artifacts"] if "init" in entry]
        say(f"for the web: {', '.join([result.manifest['web']['module'], result.manifest['web']['types'], *inits])}")
    say(f"wrote {len(result.manifest['artifacts'])} artifact(s) and {os.path.join(result.out_dir, 'manifest.json')}")


def _parse_inputs(values, model, option: str = "--input") -> dict:
    """Feeds from NAME=FILE.npy words, and from NAME=FILE.npz (or .safetensors): a state dict whose
    entries feed the inputs NAME.<entry>, as @gc.export(NAME=module) names a module's weights."""
    from .runtime import npz
    feeds: dict = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise GcompileError(f"{option} {item!r}: write it as NAME=path.npy (or NAME=state.npz for a module's "
                                "weights)")
        if not os.path.isfile(path):
            raise GcompileError(f"{option} {name}: file {path!r} not found")
        if path.lower().endswith((".npz", ".safetensors")):
            given = _state_dict_feeds(model, option, name, path)
        else:
            try:
                given = {name: npz.load_npy(path)}
            except (OSError, ValueError, EOFError) as err:
                raise GcompileError(f"{option} {name}: cannot read {path!r} as a .npy array ({err})") from None
        twice = sorted(set(given) & set(feeds))
        if twice:
            raise GcompileError(f"{option} {twice[0]!r} given twice")
        feeds.update(given)
    return feeds


def _state_dict_feeds(model, option: str, name: str, path: str) -> dict:
    """The inputs NAME.<entry> of `model`, each fed its entry of the state dict file at `path`
    (gc.nn's Module.save writes one): the entries must be exactly those inputs, of their shapes."""
    import numpy as np

    from .nn import state
    from .runtime import modelfile
    wanted = {e["name"][len(name) + 1:]: e for e in modelfile.signature(modelfile.graph_inputs(model)
                                                                           + modelfile.optional_inputs(model))
              if e["name"].startswith(name + ".")}
    if not wanted:
        takes = ", ".join(modelfile.format_sig(e) for e in modelfile.signature(modelfile.graph_inputs(model)))
        raise GcompileError(f"{option} {name}={path}: a state dict file feeds the inputs {name}.<entry>, and the "
                            f"model has none (it takes {takes}); give one NAME=FILE.npy per input")
    symbolic = sorted(n for n, e in wanted.items() if not all(isinstance(d, int) for d in e["shape"]))
    if symbolic:
        raise GcompileError(f"{option} {name}={path}: input {name}.{symbolic[0]} has a symbolic shape, which a state "
                            "dict entry cannot be checked against; give it as its own .npy file")
    arrays = state.read(path, {n: (np.dtype(e["dtype"]), tuple(e["shape"])) for n, e in wanted.items()})
    return {f"{name}.{n}": np.asarray(arrays[n], dtype=e["dtype"]) for n, e in wanted.items()}


def _summary(value) -> str:
    import numpy as np
    if value.size == 0:
        return "empty"
    if value.size <= 6:
        return np.array2string(value.reshape(-1), precision=4, separator=", ")
    if value.dtype.kind in "biuf":
        v = value.astype(np.float64)
        return f"min {v.min():.4g}, max {v.max():.4g}, mean {v.mean():.4g}"
    return ""


class _NamedFiles(click.Command):
    """A command whose -i/--input takes NAME=FILE.npy in one word: `-i x x.npy` (the file as a word
    of its own) is answered with the form to write, not click's 'unexpected extra argument'."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)   # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as err:
            split = next((i for i, a in enumerate(given[:-2]) if a in ("-i", "--input") and "=" not in given[i + 1]
                          and not given[i + 2].startswith("-")), None)
            if split is None:
                raise
            option, name, path = given[split:split + 3]
            raise click.UsageError(f"{option} takes NAME=FILE.npy as one word: write {option} {name}={path} "
                                   f"({err.format_message()})", ctx) from None


@main.command(cls=_NamedFiles)
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("-i", "--input", "inputs", multiple=True, metavar="NAME=FILE.npy",
              help="one per model input; NAME=FILE.npz (or .safetensors, a state dict such as gc.nn's Module.save "
                   "writes) feeds the inputs NAME.<entry>, the weights of @gc.export(NAME=module)")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write each output to OUT/<name>.npy (names made safe file names)")
@_PROVIDER
@_guarded
def run(artifact, inputs, out_dir, provider):
    """Run ARTIFACT (.onnx) on .npy inputs with onnxruntime and print its outputs."""
    from .ir.dims import format_type
    from .runtime import modelfile
    from .runtime.providers import resolve_provider
    with modelfile.opened(artifact) as opened:
        model = opened.model
        modelfile.check_runnable(model, artifact)
        feeds = _parse_inputs(inputs, model)
        used = resolve_provider(provider)
        logs.logger.debug("running %s on %s with %s", artifact, used,
                          ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in feeds.items()) or "no inputs")
        try:
            session = modelfile.session(opened, used)
        except Exception as err:
            raise GcompileError(f"onnxruntime cannot load {artifact} on {used}: {modelfile.first_line(err)}") from None
    try:
        result = modelfile.run(session, model, feeds)
    except Exception as err:   # onnxruntime failing on the model and these inputs: their error, not gcompile's
        failure = modelfile.onnxruntime_failure(err)
        if failure is None:
            raise
        raise GcompileError(f"onnxruntime failed running {artifact}{failure}") from None
    say(f"ran {artifact} on {result['provider']} in {result['run_ms']:.1f} ms")
    for name, value in result["outputs"].items():
        say(f"  {modelfile.printable(name)}: {format_type(value.dtype, value.shape)}  {_summary(value)}")
    if out_dir:
        _write_outputs(out_dir, result["outputs"])


def output_file_names(names: list[str]) -> list[str]:
    """A safe file name NAME.npy for each output name, deterministically: characters other than
    letters, digits, '_', '.' and '-' become '_'; a name starting with '.' (hidden, '.', '..') or
    reserved on Windows gets a leading '_'; long names are cut. Where two outputs would share a
    file (case-insensitively), a name that needed no change keeps it and the others, in output
    order, get a suffix _2, _3, ..."""
    stems = []
    for name in names:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:190] or "_"
        stems.append("_" + stem if stem.startswith(".") or stem.split(".")[0].upper() in _RESERVED else stem)
    kept: dict[str, int] = {}   # lower-case stem -> the first output whose name needed no change
    for i, (name, stem) in enumerate(zip(names, stems)):
        if stem == name:
            kept.setdefault(stem.lower(), i)
    files, used = [], set()
    for i, stem in enumerate(stems):
        candidate, k = stem, 2
        while candidate.lower() in used or kept.get(candidate.lower(), i) != i:
            candidate, k = f"{stem}_{k}", k + 1
        used.add(candidate.lower())
        files.append(f"{candidate}.npy")
    return files


_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


def _write_outputs(out_dir: str, outputs: dict) -> None:
    """Every output to OUT_DIR/<safe name>.npy, as one set (runtime.files.write_files); print the files."""

    import numpy as np

    from .runtime.files import write_files
    files = output_file_names(list(outputs))
    blobs = []
    for value in outputs.values():
        buffer = io.BytesIO()
        np.save(buffer, value, allow_pickle=False)
        blobs.append(buffer.getvalue())
    try:
        write_files(out_dir, list(zip(files, blobs)))
    except OSError as err:
        listed = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise GcompileError(f"cannot write {listed} to {out_dir!r}: {err.strerror or err}") from None
    say(f"wrote {len(files)} output(s) to {out_dir}:")
    for name, file in zip(outputs, files):
        say(f"  {file}" + (f"  (output {name!r})" if file != f"{name}.npy" else ""))


@main.command()
@click.argument("artifact", type=click.Path(dir_okay=False))
@_guarded
def inspect(artifact):
    """Show ARTIFACT's inputs, outputs, opset, op histogram and node counts per gradient order."""
    from .artifacts.describe import describe, op_histogram
    from .lowering import seal
    from .runtime import modelfile
    with modelfile.opened(artifact) as opened:
        model, sealed = opened.model, seal.read(opened.data) is not None
    try:
        modelfile.check_runnable(model, artifact)
    except GcompileError as err:   # still worth inspecting: say why it will not run, then describe it
        if not logs.quiet():
            click.echo(f"warning: {err}", err=True)
    info = describe(model)
    producer = " ".join(modelfile.printable(t) for t in (model.producer_name or "?", model.producer_version) if t)
    say(f"{artifact}: graph {model.graph.name!r}, producer {producer}, ir_version {info['ir_version']}, "
        f"opset {info['opset']}")
    for key in ("inputs", "optional_inputs", "outputs"):
        if key in info:
            say("optional inputs (default: the initializer of the same name):" if key == "optional_inputs"
                       else f"{key}:")
        for entry in info.get(key, []):
            say(f"  {modelfile.format_sig(entry)}")
    external = sorted(set(modelfile.external_files(model)))
    say(f"initializers: {len(model.graph.initializer)} ({info['parameters']} values)"
               + (f", external data in {', '.join(external)}" if external else ""))
    say(f"nodes: {_orders(info)}")
    say("integrity: sealed by gcompile, its sha256 checked" if sealed else
        "integrity: no gcompile seal (written by another tool, or saved again by one)")
    say("op histogram:")
    for op, count in op_histogram(model):
        say(f"  {modelfile.printable(op):<24} {count}")


@main.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="the drawing: .svg, .html (a page with one section per graph) or .dot (Graphviz text)")
@click.option("-O", "--optimize", type=click.IntRange(0, 2), default=2, show_default=True,
              help="graph passes before drawing a model.py (as for build)")
@_guarded
def viz(source, out_path, optimize):
    """Draw SOURCE (an .onnx file, or a model.py: each @gc.export function) with forward, backward and
    double-backward nodes in different colours, each box showing the type it computes."""
    from .artifacts import viz as viz_module
    from .artifacts.build import lower_all
    from .runtime import modelfile
    with logs.progress(1, "viz", count_phases=True):   # 1: the drawing
        if source.endswith(".py"):
            _, built = lower_all(source, optimize=optimize, value_types=True)   # gcompile's own dims on every value
            sections = [(info.name, model) for info, model, *_ in built]
        else:
            model = modelfile.load(source)
            sections = [(model.graph.name or os.path.basename(source), model)]
        with logs.phase("draw"):
            viz_module.write(out_path, sections, title=os.path.basename(source))
    say(f"wrote {out_path} ({sum(len(m.graph.node) for _, m in sections)} nodes in {len(sections)} graph(s))")


@main.command("grad")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--wrt", required=True, metavar="params|NAME,...",
              help="what to differentiate with respect to: 'params' (every float initializer) and/or model "
                   "input or initializer names, comma-separated; differentiated initializers become inputs")
@click.option("--of", "of", default=None, help="the output to differentiate (default: the model's only output)")
@click.option("--loss", type=click.Choice(["mse", "cross_entropy", "sum"]), default=None,
              help="differentiate a loss of the output instead (cross_entropy: integer labels, classes on the "
                   "last axis); without it the output's sum is differentiated")
@click.option("--target", default=None, help="name of the loss target input (default: target)")
@click.option("--order", type=click.IntRange(1, 2), default=1, show_default=True,
              help="2 adds Hessian-vector products hvp_<name> for direction inputs v_<name>")
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False), help="the .onnx to write")
@click.option("--opset", type=int, default=None, help="ONNX opset (default: the newest the installed onnxruntime runs)")
@_guarded
def grad_command(model, wrt, of, loss, target, order, out_path, opset):
    """Write a standard-ONNX model returning MODEL's outputs and their gradients (grad_<name>)."""
    from .importer.grad import gradient_model
    from .runtime import modelfile
    proto = gradient_model(model, wrt, of=of, loss=loss, target=target, order=order, opset=opset)
    modelfile.save(proto, out_path)
    for key, values in (("inputs", modelfile.graph_inputs(proto)), ("outputs", proto.graph.output)):
        say(f"  {key:<8} " + ", ".join(map(modelfile.format_sig, modelfile.signature(values))))
    defaults = [v.name for v in modelfile.optional_inputs(proto)]
    if defaults:
        say(f"  defaults {', '.join(map(modelfile.printable, defaults))} (the model's own values; feed them to "
            "override)")
    say(f"wrote {out_path}")


@main.command("map")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.argument("data", nargs=-1, required=True)
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="the folder to write the output shards to")
@click.option("-c", "--const", "constants", multiple=True, metavar="NAME=FILE.npy",
              help="a model input fed unchanged to every call (parameters, a direction); NAME=FILE.npz feeds "
                   "the inputs NAME.<entry> from a state dict, as --input does for run")
@click.option("--format", "fmt", type=click.Choice(["parquet", "npy"]), default="parquet", show_default=True,
              help="OUT/part-NNNNNN.parquet, or OUT/<output>/part-NNNNNN.npy")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Ray actors, one session each")
@click.option("--batch-size", type=click.IntRange(min=1), default=1024, show_default=True, help="rows per call")
@click.option("--address", default=None, help="a Ray cluster's address, HOST:PORT (default: a local Ray)")
@click.option("--provider", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="onnxruntime execution provider on the workers")
@_guarded
def map_command(artifact, data, out_dir, constants, fmt, workers, batch_size, address, provider):
    """Evaluate ARTIFACT (.onnx) over every row of DATA with Ray Data (pip install 'gcompile[distributed]').

    DATA is a Parquet file or folder whose columns are named after the model's inputs, or one
    NAME=PATH per input for .npy files (a file, a folder or a glob; rows along the first axis):
    gcompile map grad.onnx x=xs.npy -c w=w.npy -o grads."""
    from .distributed.cluster import ray_log_level
    from .distributed.dataset import map_model
    # Ray Data logs to the terminal at its own level, read from the environment as it runs: gcompile's (-q, -v)
    os.environ.setdefault("RAY_DATA_LOG_LEVEL", logging.getLevelName(ray_log_level()))
    named = [d.partition("=") for d in data]
    if len(data) == 1 and not named[0][1]:
        source: object = data[0]
    elif all(sep and name and path for name, sep, path in named):
        source = {name: path for name, _, path in named}
    else:
        raise GcompileError("DATA is one Parquet file or folder, or NAME=PATH for each .npy input (e.g. x=xs.npy)")
    from .runtime import modelfile
    fixed = _parse_inputs(constants, modelfile.load(artifact), "--const")
    result = map_model(artifact, source, out_dir, constants=fixed, format=fmt, batch_size=batch_size,
                       workers=workers, provider=provider, address=address,
                       progress=logs.logger.isEnabledFor(logging.WARNING) and sys.stderr.isatty())
    mode = "in batches" if result["batched"] else "row by row"
    say(f"mapped {artifact} over {result['rows']} rows ({mode}) in {result['seconds']:.1f} s; wrote {fmt} shards to "
        f"{out_dir}")


if __name__ == "__main__":
    main()
