"""racer_core's modules import each other without a cycle, and the library
never imports its test helpers (racer_core.testing): every kind of import
counts, deferred and typing-only ones too (tests/import_graph.py)."""

from __future__ import annotations

from pathlib import Path

from import_graph import find_cycle, import_graph

import racer_core

ROOT = Path(racer_core.__file__).parent
TESTING = "racer_core.testing"


def test_racer_core_has_no_import_cycle() -> None:
    graph = import_graph(ROOT)
    assert "racer_core.models.loader" in graph["racer_core.engine.engine"]  # the walk sees real edges
    assert "racer_core.models.reader" in graph["racer_core.models.loader"]  # deferred ones too
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def library_users_of_testing(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Library modules (outside racer_core.testing) that import racer_core.testing or its modules."""
    def is_testing(name: str) -> bool:
        return name == TESTING or name.startswith(TESTING + ".")

    return {name: {m for m in deps if is_testing(m)} for name, deps in graph.items()
            if not is_testing(name) and any(is_testing(m) for m in deps)}


def test_the_library_never_imports_its_test_helpers() -> None:
    graph = import_graph(ROOT)
    assert "racer_core.testing.tiny_vl" in graph and TESTING in graph["racer_core.testing.tiny_vl"]
    assert library_users_of_testing(graph) == {}


def test_the_checker_sees_a_library_module_importing_the_helpers() -> None:
    graph = {"racer_core.models.vl_processor": {"racer_core.testing.tiny_vl"}, "racer_core.testing.tiny_vl": set(),
             "racer_core.testing": set(), "racer_core.engine.engine": set()}
    assert library_users_of_testing(graph) == {"racer_core.models.vl_processor": {"racer_core.testing.tiny_vl"}}
