"""The package's layers: no module-level import circle (imports inside functions and under
``if TYPE_CHECKING:`` run later or never; importing ``a.b.c`` first runs ``a/__init__`` and
``a/b/__init__``), no two top-level packages importing each other at all (function-level
imports counted), a light store, verbs that are plain functions, and functions a reader holds
in mind. Read with ``ast`` unless a test says it imports."""

from __future__ import annotations

import ast
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import maxcode

SOURCE = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]
    for statement in tree.body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            continue
        for node in ast.walk(statement) if not isinstance(statement, ast.If) else [statement]:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                break
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it runs when imported."""
    modules = {_module_name(path): path for path in SOURCE.joinpath("maxcode").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = set()
        for imported in _top_level_imports(tree, name, path.name == "__init__.py"):
            parts = imported.split(".")
            for end in range(1, len(parts) + 1):  # parents' __init__ run first
                prefix = ".".join(parts[:end])
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    targets.add(prefix)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert "maxcode.search.loop" in graph["maxcode.search.driver"]
    assert cycles(graph) == []


def test_report_and_rtg_import_neither_a_bench_run_nor_the_loop() -> None:
    graph = import_graph()

    def reached(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for target in graph[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    for start in ("maxcode.report", "maxcode.rtg"):
        reach = reached(start)
        assert "maxcode.search.bench.run" not in reach
        assert "maxcode.search.loop" not in reach and "maxcode.search.driver" not in reach


def _top_package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def package_graph() -> dict[str, dict[str, list[str]]]:
    """Top-level package -> the other top-level packages it imports, at any level (inside
    functions too; not under ``TYPE_CHECKING``), each with the files that do."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(SOURCE.joinpath("maxcode").rglob("*.py")):
        source = _top_package(_module_name(path))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(node)
            for statement in ast.walk(tree)
            if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test)
            for node in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("maxcode.") and _top_package(name) != source:
                    files = graph.setdefault(source, {}).setdefault(_top_package(name), [])
                    files.append(str(path.relative_to(SOURCE)))
    return graph


def test_no_two_top_level_packages_import_each_other() -> None:
    graph = package_graph()
    assert "harness" in graph["kinds"] and "kinds" in graph["search"]  # the graph is read
    both_ways = {
        (first, second, tuple(graph[first][second]), tuple(graph[second][first]))
        for first in graph
        for second in graph[first]
        if first < second and first in graph.get(second, {})
    }
    assert both_ways == set()


def test_the_store_loads_without_the_harness_kinds_or_providers() -> None:
    code = (
        "import json, sys, maxcode.store; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('maxcode'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stdout)
    assert "maxcode.store.store" in loaded and len(loaded) <= 15, loaded
    assert not any(m.startswith(("maxcode.kinds", "maxcode.search")) for m in loaded), loaded


def test_the_verbs_are_plain_functions_after_every_module_is_imported() -> None:
    for found in pkgutil.walk_packages(maxcode.__path__, "maxcode."):
        if found.name != "maxcode.__main__" and ".worker" not in found.name:
            __import__(found.name)
    for verb in ("evaluate", "optimize", "bench", "load_task"):
        function = getattr(maxcode, verb)
        assert inspect.isfunction(function), verb
        assert "args" not in inspect.signature(function).parameters, verb
    sources = [path.read_text(encoding="utf-8") for path in SOURCE.rglob("*.py")]
    assert not any(".__class__ =" in text for text in sources)


def test_no_function_is_longer_than_a_reader_holds_in_mind() -> None:
    long = [
        f"{path.relative_to(SOURCE)}:{node.lineno} {node.name} ({lines} lines)"
        for path in sorted(SOURCE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > 100
    ]
    assert long == []
