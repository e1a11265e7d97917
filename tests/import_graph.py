"""The import graph of one of our packages, read from the source with `ast`.

Every import statement counts, wherever it is: at module level, inside a
function (a deferred import is still a dependency, only a later one) and under
`if TYPE_CHECKING:` (the type checker follows it). So a cycle cannot hide
behind a function-level or typing-only import.
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for the package in folder `root`."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
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
            # `from package.screens import chat` imports the submodule chat; the
            # package itself counts only for names that are not submodules (its
            # __init__ runs first for any submodule, so that edge says nothing).
            submodules = {f"{origin}.{alias.name}" for alias in node.names} & known
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(origin)
    return {m for m in found if m in known and m != name}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    files = module_files(root)
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


def layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> tuple[int, str] | None:
    """(layer index, part) of `module`: the part is the longest name of `layers`
    that is the module or a package above it; None for a module no layer names."""
    best: tuple[int, str] | None = None
    for index, parts in enumerate(layers):
        for part in parts:
            if (module == part or module.startswith(part + ".")) and (best is None or len(part) > len(best[1])):
                best = (index, part)
    return best


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import that breaks the layer order, as "importer -> imported".

    `layers` lists the parts of a package from the lowest layer up. A module may
    import its own part and the parts of lower layers, never a higher layer's
    nor another part of its own layer. Modules that no layer names are
    reported too, so a new package has to be placed."""
    found = []
    for name in sorted(graph):
        here = layer_of(name, layers)
        if here is None:
            found.append(f"{name} is in no layer")
            continue
        for dep in sorted(graph[name]):
            there = layer_of(dep, layers)
            if there is None or there[1] == here[1]:
                continue  # an unplaced module is reported as the importer; a part may import itself
            if there[0] >= here[0]:
                found.append(f"{name} -> {dep}")
    return found
