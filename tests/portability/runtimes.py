"""The runtimes the portability cases run on.

- `onnxruntime-python`: Python's ONNX Runtime (CPU), default session options: it computes the
  reference outputs, so its column checks them against the model's declared output types.
- `onnx-reference`: onnx's own `onnx.reference.ReferenceEvaluator`, in this process: the ONNX
  specification's operators written in numpy, with no graph optimizer.
- `onnxruntime-node`: ONNX Runtime for Node.js (npm `onnxruntime-node`, its CPU provider), one
  `node` process for all cases (js/run_node.mjs).
- `onnxruntime-web`: ONNX Runtime for the web (npm `onnxruntime-web`), its WebAssembly backend on
  one thread, in headless Chromium: a page served from 127.0.0.1 runs every case and posts the
  results back to the server (js/web/).
- `openvino`: OpenVINO's runtime (PyPI `openvino`), which reads the ONNX file with its own ONNX
  front end and runs it on its CPU plugin, with float32 inference precision asked for (on CPUs
  with AMX it runs bfloat16 otherwise, 5-9% off). ONNX Runtime's OpenVINO plugin execution
  provider (PyPI `onnxruntime-ep-openvino`) wraps this same front end and plugin, but its factory
  offers devices of Intel's vendor id only, so on other CPUs it has nothing to run on.

Each runtime's `missing()` says what is not installed, or None; `run_all(cases, folder)` returns,
per case name, the outputs by name or the error the runtime raised (its first lines). The npm
packages are looked for in GCOMPILE_PORTABILITY_NODE_MODULES, else in tests/portability/js/
node_modules (`npm ci --ignore-scripts` in tests/portability/js).
"""
from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Sequence

import numpy as np

from .harness import Case, write_cases

JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
WEB_MODULE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "gcompile", "artifacts", "js")   # gcompile.mjs, which `gcompile build --target web` ships
NODE_MODULES_ENV = "GCOMPILE_PORTABILITY_NODE_MODULES"
TIMEOUT_S = 300   # for a whole runtime's run over the corpus; it takes seconds

Outcome = dict[str, np.ndarray] | str   # outputs by name, or the runtime's error


def _first_lines(text: str, n: int = 3) -> str:
    return "\n".join(line for line in str(text).strip().splitlines()[:n])


def node_modules() -> str:
    return os.environ.get(NODE_MODULES_ENV) or os.path.join(JS, "node_modules")


def _npm_missing(package: str) -> str | None:
    if not os.path.isfile(os.path.join(node_modules(), package, "package.json")):
        return (f"npm package {package} is not in {node_modules()} (cd tests/portability/js && npm ci "
                f"--ignore-scripts, or point {NODE_MODULES_ENV} at a node_modules folder that has it)")
    return None


def _decode(outputs: Sequence[dict]) -> dict[str, np.ndarray]:
    """Outputs as the JavaScript runners report them: name, dtype, shape and base64 little-endian bytes."""
    return {o["name"]: np.frombuffer(base64.b64decode(o["data"]), dtype=np.dtype(o["dtype"]).newbyteorder("<"))
            .astype(o["dtype"]).reshape(o["shape"]) for o in outputs}


def _outcomes(results: Sequence[dict]) -> dict[str, Outcome]:
    return {r["name"]: _first_lines(r["error"]) if "error" in r else _decode(r["outputs"]) for r in results}


class Runtime:
    name = ""

    def missing(self) -> str | None:
        raise NotImplementedError

    def run_all(self, cases: Sequence[Case], folder: str) -> dict[str, Outcome]:
        raise NotImplementedError


class OnnxRuntimePython(Runtime):
    """The reference itself: its outputs are checked against the model's declared types only."""
    name = "onnxruntime-python"

    def missing(self) -> str | None:
        return None   # gcompile's own runtime

    def run_all(self, cases, folder):
        return {case.name: case.expected for case in cases}


class ReferenceEvaluator(Runtime):
    name = "onnx-reference"

    def missing(self) -> str | None:
        return None   # onnx is a dependency of gcompile

    def run_all(self, cases, folder):
        from onnx.reference import ReferenceEvaluator as Evaluator
        outcomes: dict[str, Outcome] = {}
        for case in cases:
            try:
                with np.errstate(all="ignore"):   # its overflows show in the outputs, which are compared
                    values = Evaluator(case.model).run(case.output_names, case.feeds)
            except Exception as err:   # the evaluator's refusal is the result being recorded
                outcomes[case.name] = f"{type(err).__name__}: {_first_lines(err)}"
                continue
            outcomes[case.name] = dict(zip(case.output_names, values))
        return outcomes


class Node(Runtime):
    name = "onnxruntime-node"

    def missing(self) -> str | None:
        if shutil.which("node") is None:
            return "Node.js (`node`) is not on PATH"
        return _npm_missing("onnxruntime-node")

    def run_all(self, cases, folder):
        index = write_cases(cases, folder)
        out = os.path.join(folder, "node-results.json")
        done = subprocess.run(["node", os.path.join(JS, "run_node.mjs"), node_modules(), index, out],
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"node run_node.mjs exited with {done.returncode}: {done.stderr[-2000:]}")
        with open(out) as fh:
            return _outcomes(json.load(fh)["results"])


class Web(Runtime):
    name = "onnxruntime-web"

    def missing(self) -> str | None:
        if self.browser() is None:
            return "headless Chromium is not installed (Debian: apt-get install -y chromium)"
        return _npm_missing("onnxruntime-web")

    @staticmethod
    def browser() -> str | None:
        return shutil.which("chromium") or shutil.which("chromium-browser")

    def run_all(self, cases, folder):
        write_cases(cases, folder)
        roots = {"/ort/": os.path.join(node_modules(), "onnxruntime-web", "dist"), "/cases/": folder, "/": JS,
                 "/gcompile/artifacts/js/": WEB_MODULE}   # cases.mjs's import of gcompile.mjs (its types table)
        server = run_page(roots, "web/index.html", os.path.join(folder, "chromium.log"))
        return _outcomes(server.results)


def run_page(roots: dict[str, str], page: str, log_path: str, timeout_s: float = TIMEOUT_S,
             flags: Sequence[str] = ("--disable-gpu",)) -> _PageServer:
    """Open `page` (a URL path with its query, under `roots`, as _PageServer serves them) in headless
    Chromium and wait until it POSTs /done; returns the server holding what the page posted. A
    RuntimeError with Chromium's last words where it never does, or where it posts {"error"}.
    `flags` go to Chromium (default: no GPU; WebGPU wants others)."""
    browser_path = Web.browser()
    if browser_path is None:
        raise RuntimeError(Web().missing())
    # (the profile's removal must not fail the run: a helper Chromium left behind may still write)
    with _PageServer(roots) as server, tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile, \
            open(log_path, "w+") as log:
        browser = subprocess.Popen(
            [browser_path, "--headless", "--no-sandbox", *flags, "--no-first-run",
             f"--user-data-dir={profile}", f"{server.url}/{page}"],
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        try:   # until the page is done, Chromium exits (it failed to start) or time is up
            while not server.done.wait(0.2) and browser.poll() is None and time.monotonic() < deadline:
                pass
            exited = browser.poll() is not None
        finally:
            _stop_browser(browser)
        if not server.done.is_set():
            log.seek(0)
            raise RuntimeError(f"the page did not finish: Chromium {'exited' if exited else f'ran {timeout_s} s'}; "
                               f"it said: {log.read()[-2000:]}")
        if "error" in server.finish:
            raise RuntimeError(f"the page failed: {server.finish['error']}")
    return server


def _stop_browser(browser: subprocess.Popen) -> None:
    """Stop Chromium and the helper processes it started (its own process group): a renderer or
    crash handler outliving the browser kept writing into the profile while it was removed
    ("Directory not empty: 'Default'", on a loaded machine)."""
    def signal_all(sig) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(browser.pid, sig)
    if hasattr(os, "killpg"):
        signal_all(signal.SIGTERM)
    else:
        browser.terminate()
    try:
        browser.wait(timeout=30)
    except subprocess.TimeoutExpired:
        browser.kill()
        browser.wait()
    if hasattr(os, "killpg"):
        signal_all(signal.SIGKILL)     # what is left of the group


class _PageServer:
    """A static file server on 127.0.0.1 (a free port), for as long as the `with` block lasts:
    GET maps URL prefixes to folders (longest first; nothing outside them is served); the page
    POSTs JSON to /result (one per case) and /done (last)."""
    TYPES = {".html": "text/html", ".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
             ".json": "application/json"}

    def __init__(self, roots: dict[str, str]):
        self.roots = sorted(roots.items(), key=lambda item: -len(item[0]))
        self.results: list[dict] = []
        self.finish: dict = {}
        self.done = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                path = owner.resolve(urllib.parse.urlparse(self.path).path)
                if path is None or not os.path.isfile(path):
                    self.send_error(404)
                    return
                with open(path, "rb") as fh:
                    body = fh.read()
                self.send_response(200)
                self.send_header("Content-Type", owner.TYPES.get(os.path.splitext(path)[1], "application/octet-stream"))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/result":
                    owner.results.append(body)
                elif self.path == "/done":
                    owner.finish = body
                    owner.done.set()
                self.send_response(204)
                self.end_headers()

            def log_message(self, format, *args):   # quiet: the test reports what matters
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def resolve(self, url_path: str) -> str | None:
        for prefix, folder in self.roots:
            if url_path.startswith(prefix):
                root = os.path.realpath(folder)
                path = os.path.realpath(os.path.join(root, urllib.parse.unquote(url_path[len(prefix):])))
                return path if os.path.commonpath([root, path]) == root else None
        return None

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class OpenVINO(Runtime):
    name = "openvino"

    def missing(self) -> str | None:
        try:
            import openvino  # noqa: F401
        except ImportError:
            return "the openvino package is not installed (pip install -e '.[portability]')"
        return None

    def run_all(self, cases, folder):
        import openvino as ov
        core = ov.Core()
        outcomes: dict[str, Outcome] = {}
        for number, case in enumerate(cases):
            path = os.path.join(folder, f"case{number}.onnx")
            with open(path, "wb") as fh:
                fh.write(case.data)
            try:
                compiled = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
                result = compiled.create_infer_request().infer(case.feeds)
                outcomes[case.name] = {name: np.asarray(result[compiled.output(name)]) for name in case.output_names}
            except Exception as err:   # the converter's or plugin's refusal is the result being recorded
                outcomes[case.name] = _openvino_error(str(err))
        return outcomes


# Lines of OpenVINO's conversion errors that say where in its sources a check failed, not what failed.
_OPENVINO_BOILERPLATE = ("Exception from ", "Check '", "FrontEnd API failed", "While validating", "Model wasn't fully",
                         "Summary:")


def _openvino_error(text: str) -> str:
    """An OpenVINO error without its source locations: the failing operators and their messages."""
    lines = [line.strip() for line in text.splitlines()]
    return "; ".join(line for line in lines if line and not line.startswith(_OPENVINO_BOILERPLATE))


RUNTIMES: list[Runtime] = [OnnxRuntimePython(), ReferenceEvaluator(), Node(), Web(), OpenVINO()]
