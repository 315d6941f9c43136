"""The package graph points down and no file imports another that imports it back (read with ast, nothing run).

Layers, top to bottom: demo -> dashboards -> ingest -> collector -> sevents; simulator -> sevents.
Every import counts, including lazy ones inside functions and ones under ``if TYPE_CHECKING``: an arrow a reader
sees is an arrow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sevents", "collector", "simulator", "ingest", "dashboards", "demo")

# What each package may import besides itself. Everything not listed is an arrow pointing up or sideways.
ALLOWED: dict[str, set[str]] = {
    "sevents": set(),
    "collector": {"sevents"},
    "simulator": {"sevents"},
    "ingest": {"sevents", "collector"},
    "dashboards": {"sevents", "collector", "ingest"},
    "demo": {"sevents", "collector", "simulator", "ingest", "dashboards"},
}

KNOWN_LOOPS: set[frozenset[str]] = set()  # none: every loop between files is a failure


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _resolve(module: str, level: int, here: str, is_package: bool) -> str:
    if level == 0:
        return module
    base = here.split(".") if is_package else here.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported project module, line) for every import in the file; ``from p import m`` names p.m if m is one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node.module or "", node.level, name, path.name == "__init__.py")
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno
        elif isinstance(node, ast.Call) and _loaded_by_name(node) is not None:
            yield str(_loaded_by_name(node)), node.lineno


def _loaded_by_name(call: ast.Call) -> str | None:
    """The module named in ``importlib.import_module("x")`` / ``__import__("x")``, or None for other calls."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if called not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "<computed>"


def _project(module: str) -> str | None:
    """The project module a dotted name lands in (the longest known prefix), or None for third-party."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in MODULES:
            return candidate
    return None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = {_project(m) for m, _ in _imports(name, path)}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def test_the_checker_sees_every_package() -> None:
    """Sanity: the walk found modules in every package, so an empty result below means something."""
    assert {name.split(".")[0] for name in MODULES} == set(PACKAGES)
    graph = _graph()
    assert "dashboards.report" in graph["demo.cli"] and "dashboards.report_data" in graph["dashboards.report"]


@pytest.mark.parametrize("package", PACKAGES)
def test_arrows_point_down(package: str) -> None:
    """A package imports only the packages below it (sevents imports none)."""
    wrong = []
    for name, path in MODULES.items():
        if name.split(".")[0] != package:
            continue
        for module, line in _imports(name, path):
            target = _project(module)
            if target is not None and target.split(".")[0] not in ALLOWED[package] | {package}:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_file_imports_a_file_that_imports_it_back() -> None:
    """No cycle of any length between files (a package's __init__ counts as a file)."""
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    real = [c for c in cycles if frozenset(c) not in KNOWN_LOOPS]
    assert not real, "\n".join(" -> ".join(c) for c in real)


def test_no_project_module_is_loaded_by_name() -> None:
    """importlib.import_module / __import__ of a project module hides an arrow from readers and this check."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            loaded = _loaded_by_name(node)
            if loaded is None or (loaded != "<computed>" and _project(loaded) is None):
                continue  # not a by-name load, or a third-party module
            if frozenset({name, loaded}) not in KNOWN_LOOPS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} loads {loaded} by name")
    assert not found, "\n".join(found)
