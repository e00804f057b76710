"""The import rules of ARCHITECTURE.md §2, read from the source: packages import only from the rooms
listed for them, and no two files import each other, directly or around a circle.

Imports inside functions count (a deferred import is still a dependency). Imports under
`if TYPE_CHECKING:` count for circles (a type written against a module that imports this one ties the
two as surely) but not for the rooms (runtime names the Trainer it lends from training for type
checkers only).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "gcompile"

# room -> the rooms it may import from (besides itself and the shared leaves)
LEAVES = {"errors", "version", "logs", "collector", "install_check"}
ALLOWED = {
    "ir": set(),
    "frontend": {"ir"},
    "ops": {"ir", "frontend"},
    "gradients": {"ir", "frontend", "ops"},
    "passes": {"ir", "ops"},
    "lowering": {"ir", "ops"},
    "runtime": {"ir", "frontend", "ops", "gradients", "passes", "lowering"},
    "nn": {"ir", "frontend", "ops", "runtime"},
    "importer": {"ir", "frontend", "ops", "gradients", "passes", "lowering", "runtime", "nn"},
    "training": {"ir", "frontend", "ops", "gradients", "passes", "lowering", "runtime", "nn"},
    "artifacts": {"ir", "frontend", "ops", "gradients", "passes", "lowering", "runtime", "nn", "importer", "training"},
    "distributed": {"ir", "frontend", "ops", "gradients", "passes", "lowering", "runtime", "nn", "importer",
                    "training", "artifacts"},
}
# Kept for compatibility, named here so that nothing else slips in: gc.runtime.Trainer and
# gc.runtime.StepLayout resolve lazily to their home in training/.
EXCEPTIONS = {("gcompile.runtime", "gcompile.training.layout"), ("gcompile.runtime", "gcompile.training.trainer")}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            for statement in node.body:
                skipped |= {id(n) for n in ast.walk(statement)}
    return skipped


def import_graph(type_checking: bool = False) -> nx.DiGraph:
    """File-level imports between gcompile's modules (with type_checking, those made for type checkers
    only as well)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    for module, path in files.items():
        graph.add_node(module)
        tree = ast.parse(path.read_text())
        skipped = set() if type_checking else _type_checking_only(tree)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph.add_edges_from((module, t) for t in targets if t in files and t != module)
    return graph


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "gcompile"
    return "ops" if parts[1] == "functions" else parts[1]   # gcompile.functions is the ops room's public face


def test_no_import_cycles_between_files():
    cycles = list(nx.simple_cycles(import_graph(type_checking=True)))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


def test_rooms_import_only_from_lower_rooms():
    wrong = []
    for a, b in import_graph().edges:
        source, target = room(a), room(b)
        if source not in ALLOWED or target == source or target in LEAVES or (a, b) in EXCEPTIONS:
            continue
        if target not in ALLOWED[source]:
            wrong.append(f"{a} imports {b} ({source} may import {', '.join(sorted(ALLOWED[source])) or 'no room'})")
    assert not wrong, "\n".join(wrong)


def test_leaves_import_no_room():
    graph = import_graph()
    wrong = [f"{a} imports {b}" for a, b in graph.edges if room(a) in LEAVES and room(b) not in LEAVES]
    assert not wrong, "\n".join(wrong)


def test_every_room_is_known():
    rooms = {room(m) for m in import_graph().nodes} - {"gcompile", "cli", "testing", "optim"}
    assert rooms <= set(ALLOWED) | LEAVES, rooms - set(ALLOWED) - LEAVES


def test_the_core_never_imports_the_distributed_room():
    """gcompile.distributed is an optional room on top (its extra brings Ray): only the command line
    may reach it, and `import gcompile` imports neither it nor Ray."""
    graph = import_graph()
    wrong = [f"{a} imports {b}" for a, b in graph.edges
             if room(b) == "distributed" and room(a) not in ("distributed", "cli")]
    assert not wrong, "\n".join(wrong)
    code = ("import sys, gcompile, gcompile.cli, gcompile.distributed; "
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
