"""The documentation's code runs: every Python block of README.md and of the site's pages (docs/,
with the files they include, ARCHITECTURE.md and CHANGELOG.md) runs as written, page by page in
order, each page in one namespace (as a reader pasting them into one session would), in a scratch
folder that sees the bundled examples. A block that is not Python to run (a shell command, a
diagram, an excerpt of the source) says so in a `<!-- not-run: why -->` line right above it, and
such blocks stay few.

Also checked here: the README stays short and starts with its two set-up commands, the site's
navigation lists every page, and the API reference names every public name of the modules it
covers."""
from __future__ import annotations

import importlib
import inspect
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 250
# docs/notes (dated measurements, outside the site) is not a page. Pages another package owns and
# generates; their blocks are commands that take minutes
# (tools/bench), so they are not run here and carry no markers of ours.
GENERATED = {"docs/performance.md"}
FENCE = re.compile(r"(?:^<!-- not-run: (?P<why>[^\n]*?) -->\n)?^```(?P<info>[^\n]*)\n(?P<body>.*?)^```$",
                   re.S | re.M)
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)
# (the JavaScript and shell blocks of docs/web.md are the example that tests/test_web.py runs in
# Node and Chromium)
MAX_NOT_RUN = 18
# module -> its reference page
REFERENCE = {"gcompile": "gcompile.md", "gcompile.functions": "functions.md", "gcompile.nn": "nn.md",
             "gcompile.optim": "optim.md", "gcompile.runtime": "runtime.md"}


def _text(rel: str) -> str:
    """The page as the site shows it: included files (pymdownx.snippets) expanded."""
    return INCLUDE.sub(lambda m: (ROOT / m.group(1)).read_text(), (ROOT / rel).read_text())


def _pages() -> list[str]:
    docs = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if "notes" not in p.relative_to(DOCS).parts)
    return ["README.md", *[p for p in docs if p not in GENERATED]]


def _blocks(rel: str) -> list[re.Match]:
    return list(FENCE.finditer(_text(rel)))


def _runnable(rel: str) -> list[str]:
    return [m["body"] for m in _blocks(rel) if m["info"].strip() == "python" and m["why"] is None]


def test_every_block_runs_or_says_why():
    bad = [f"{rel}: ```{m['info']}" for rel in _pages() for m in _blocks(rel)
           if m["why"] is None and m["info"].strip() != "python"]
    assert not bad, f"blocks neither Python to run nor marked <!-- not-run: why -->: {bad}"
    vague = [f"{rel}: {m['why']!r}" for rel in _pages() for m in _blocks(rel)
             if m["why"] is not None and len(m["why"].split()) < 3]
    assert not vague, f"a not-run marker says why in a few words: {vague}"


def test_few_blocks_are_not_run():
    marked = [rel for rel in _pages() for m in _blocks(rel) if m["why"] is not None]
    total = sum(len(_blocks(rel)) for rel in _pages())
    assert len(marked) <= MAX_NOT_RUN and len(marked) * 2 < total, (len(marked), total, marked)


@pytest.mark.parametrize("rel", [p for p in _pages() if _runnable(p)])
def test_python_blocks_run(rel, tmp_path, monkeypatch):
    os.symlink(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for block in _runnable(rel):
        exec(compile(block, rel, "exec"), namespace)   # noqa: S102 - our own documentation


def test_readme_is_short_and_starts_with_the_setup_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    first, second = [m["body"].strip() for m in _blocks("README.md")[:2]]
    assert first == ("python3 -m venv .venv && .venv/bin/pip install -e . && "
                     ".venv/bin/gcompile build examples/mlp.py -o build --check")
    assert second == ("python3 -m venv .venv && .venv/bin/pip install -e '.[test,distributed]' && "
                      ".venv/bin/python -m pytest")


def test_nav_lists_every_page():
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "notes" not in p.relative_to(DOCS).parts}
    assert nav == pages


@pytest.mark.parametrize("module", sorted(REFERENCE))
def test_reference_names_every_public_name(module):
    """Each name of the module's __all__ appears on its reference page: as a `::: path` directive
    whose object is the very one the module exports, or as a table row `| `name` |` (functions a
    factory makes have no docstring of their own; modules and re-exports link to their page)."""
    mod = importlib.import_module(module)
    text = (DOCS / "reference" / REFERENCE[module]).read_text()
    documented = set()
    for path in re.findall(r"^::: ([\w.]+)$", text, flags=re.M):
        owner, _, attr = path.rpartition(".")
        try:
            obj = importlib.import_module(path)
        except ImportError:
            obj = getattr(importlib.import_module(owner), attr)
        documented |= {n for n in mod.__all__ if getattr(mod, n) is obj}
    rows = set(re.findall(r"^\| `(?:[\w.]+\.)?(\w+)` \|", text, flags=re.M))
    missing = sorted(set(mod.__all__) - documented - rows)
    assert not missing, f"{module}: not in docs/reference/{REFERENCE[module]}: {missing}"


@pytest.mark.parametrize("module", sorted(REFERENCE))
def test_every_hand_written_public_function_has_a_docstring(module):
    """A public function written with its own `def` carries the docstring its reference entry
    shows (functions a factory makes share the factory's and are table rows instead)."""
    mod = importlib.import_module(module)
    bare = [n for n in mod.__all__ if inspect.isfunction(getattr(mod, n))
            and getattr(mod, n).__code__.co_name == n and not (getattr(mod, n).__doc__ or "").strip()]
    assert not bare, f"{module}: no docstring: {bare}"
