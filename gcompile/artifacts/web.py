"""`gcompile build --target web`: the portable models, plus what JavaScript needs to train and run
them with ONNX Runtime for the web or for Node.js (docs/web.md).

Beside the .onnx files and manifest.json the build writes
- gcompile.mjs, an ES module with no dependencies and no build step (it is given the onnxruntime-web
  or onnxruntime-node module it runs on), and gcompile.d.ts, its types: copied from
  gcompile/artifacts/js/, byte for byte;
- <name>.init.npz for every training step: the parameters and buffers it starts from, by their
  state-dict names (a gc.nn module's `load_state_dict` reads it, so does `Trainer(path, params=...)`).

The manifest records them: "web": {"module", "types"} at the top, "init" in a training step's entry.
State crosses between JavaScript and Python as .npz files in the two formats Python already reads
and writes: a state dict (`Module.save`/`load_state_dict`) and a Trainer checkpoint
(`Trainer.save`/`load`: params/<name>, buffers/<name>, state/<name>, step).
"""
from __future__ import annotations

import os
import re

from ..runtime import npz

MODULE, TYPES = "gcompile.mjs", "gcompile.d.ts"
LOWERED_FOR = "portable"   # what the web target's models are: the portable target's, unchanged
INIT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.init\.npz")   # <name>.init.npz, as init_file names it
_JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")


def init_file(name: str) -> str:
    return f"{name}.init.npz"


def assets() -> list[tuple[str, bytes]]:
    """The JavaScript module and its types, as shipped in the package."""
    found = []
    for name in (MODULE, TYPES):
        with open(os.path.join(_JS, name), "rb") as fh:
            found.append((name, fh.read()))
    return found


def init_bytes(values) -> bytes:
    """A training step's starting parameters and buffers as a state-dict .npz (deterministic bytes)."""
    return npz.to_bytes(values)


def is_own_file(name: str) -> bool:
    """Whether `name` is the name of a file a web build writes (the module, its types, an init file)."""
    return name in (MODULE, TYPES) or bool(INIT.fullmatch(name))


def own_files(manifest: dict) -> list[str]:
    """The web files a previous build's manifest lists (for build to remove when no longer written)."""
    web = manifest.get("web")
    listed = [web.get(k) for k in ("module", "types")] if isinstance(web, dict) else []
    names = [n for n in listed if n in (MODULE, TYPES)]
    for entry in manifest.get("artifacts", []):
        init = entry.get("init") if isinstance(entry, dict) else None
        if isinstance(init, str) and INIT.fullmatch(init):
            names.append(init)
    return names
