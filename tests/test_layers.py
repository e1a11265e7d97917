"""The layer order of both packages, as data, checked on the import graph
(every kind of import counts: tests/import_graph.py).

Each tuple is one layer, lowest first. A module imports its own part and the
parts of lower layers only: never a higher layer's, nor another part of its
own layer. docs/design.md (sections 2 and 7) explains the order; changing it
is a decision to write down there, not a test to loosen.
"""

from __future__ import annotations

from pathlib import Path

from import_graph import import_graph, layer_of, layer_violations

import racer_core
import racer_tui

CORE = "racer_core"
CORE_LAYERS: tuple[tuple[str, ...], ...] = (
    (f"{CORE}.common",),  # torch-free: the registry, settings, events, statistics
    (f"{CORE}.budget", f"{CORE}.verify"),  # the cost curve and tree policy; the verifier's pieces
    (f"{CORE}.models",),  # finding, reading and running a model
    (f"{CORE}.drafting",),  # the drafters (eagle3's head is a model)
    (f"{CORE}.structured",),  # a reply's grammar over a drafted tree (masks, pruning, forced drafts)
    (f"{CORE}.engine",),  # load_engine, conversations, the decoder
    (f"{CORE}.bench", f"{CORE}.testing"),  # the benchmark runner; tiny test models
    (CORE,),  # the package's __init__
)

TUI = "racer_tui"
TUI_LAYERS: tuple[tuple[str, ...], ...] = (
    tuple(f"{TUI}.{name}" for name in (
        "colors", "host_names", "redraw_pace", "thread_priority", "layout", "messages", "commands", "settings",
        "history", "engine_loader",
    )),
    (f"{TUI}.history_repair", f"{TUI}.host"),
    (f"{TUI}.chat",),  # the chat without Textual: session, files, attachments, step log
    (f"{TUI}.widgets",),
    (f"{TUI}.screens",),
    (f"{TUI}.app", f"{TUI}.api", f"{TUI}.serve_page"),
    (f"{TUI}.cli",),
    (TUI,),
)


def test_racer_core_keeps_its_layer_order() -> None:
    graph = import_graph(Path(racer_core.__file__).parent)
    assert "racer_core.models.loader" in graph["racer_core.engine.engine"]  # the walk sees real edges
    assert layer_violations(graph, CORE_LAYERS) == []


def test_racer_tui_keeps_its_layer_order() -> None:
    graph = import_graph(Path(racer_tui.__file__).parent)
    assert "racer_tui.screens.chat" in graph["racer_tui.app"]  # the walk sees real edges
    assert layer_violations(graph, TUI_LAYERS) == []


def test_the_checker_reports_each_kind_of_violation() -> None:
    layers = (("p.low",), ("p.mid_a", "p.mid_b"), ("p.high",))
    graph = {
        "p.low.x": {"p.high.y"},  # upward
        "p.mid_a": {"p.mid_b.z", "p.low.x"},  # sideways within a layer; the downward one is fine
        "p.mid_b.z": {"p.mid_b.w"},  # its own part
        "p.mid_b.w": set(),
        "p.high.y": {"p.low.x", "p.mid_a"},
        "p.stray": set(),  # in no layer
    }
    assert layer_violations(graph, layers) == [
        "p.low.x -> p.high.y", "p.mid_a -> p.mid_b.z", "p.stray is in no layer",
    ]
    assert layer_of("p.mid_b.z", layers) == (1, "p.mid_b") and layer_of("p", layers) is None
