"""racer_tui's modules import each other without a cycle (every kind of
import counts; tests/import_graph.py reads them)."""

from __future__ import annotations

from pathlib import Path

from import_graph import find_cycle, import_graph, imported_modules

import racer_tui

ROOT = Path(racer_tui.__file__).parent


def test_racer_tui_has_no_import_cycle() -> None:
    graph = import_graph(ROOT)
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
