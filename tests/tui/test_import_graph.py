"""racer_tui's modules import each other without a cycle.

Every import statement counts, wherever it is: at module level, inside a
function (a deferred import is still a dependency, only a later one) and under
`if TYPE_CHECKING:` (the type checker follows it). So a cycle cannot hide
behind a function-level or typing-only import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import racer_tui

PACKAGE = "racer_tui"
ROOT = Path(racer_tui.__file__).parent


def module_files() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported_modules(name: str, source: str, known: set[str], *, is_package: bool = False) -> set[str]:
    """The modules in `known` that module `name` imports anywhere in `source`."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            # `from racer_tui.screens import chat` imports the submodule chat
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {
        name: imported_modules(
            name, path.read_text(encoding="utf-8"), set(files), is_package=path.name == "__init__.py"
        )
        for name, path in files.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_racer_tui_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "racer_tui.app" in graph and "racer_tui.screens.chat" in graph
    assert "racer_tui.screens.chat" in graph["racer_tui.app"]  # the walk sees real edges
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_checker_sees_cycles_and_every_kind_of_import() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from racer_tui.app import RacerApp\n"
        "def f():\n    from racer_tui import history\n"
        "from . import confirm\n"
        "import textual\n"
    )
    known = {"racer_tui.app", "racer_tui.history", "racer_tui.screens.confirm", "racer_tui.screens.probe"}
    found = imported_modules("racer_tui.screens.probe", source, known)
    assert found == {"racer_tui.app", "racer_tui.history", "racer_tui.screens.confirm"}
