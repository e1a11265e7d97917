"""The app's plain-Python parts: settings, history, model paths, the dashboard
board, and the no-torch rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from racer_core.common.events import EngineInfo, Source, StepEvent, TokenPiece
from racer_core.common.stats import Stats
from racer_tui.history import HistoryStore, StoredMessage, title_for
from racer_tui.widgets.status_line import format_status

# -- history -----------------------------------------------------------------


def test_history_store(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite3"
    store = HistoryStore(db)
    a = store.create_chat("first", "be brief")
    b = store.create_chat("second")
    store.add_message(a, StoredMessage("user", "hi"))
    runs = [(Source.RETRIEVAL, "Hello "), (Source.MODEL, "there")]
    store.add_message(a, StoredMessage("assistant", "Hello there", runs, {"tokens": 2, "steps": 1}))
    store.close()

    store = HistoryStore(db)  # a restart
    assert [c.id for c in store.list_chats()] == [a, b]  # most recently updated first
    msgs = store.messages(a)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].runs == runs and msgs[1].stats == {"tokens": 2, "steps": 1}
    md = store.export_markdown(a)
    assert md.startswith("# first") and "be brief" in md and "**You:**" in md and "Hello there" in md
    store.delete_chat(a)
    assert [c.id for c in store.list_chats()] == [b]
    assert store.messages(a) == []


def test_title_for() -> None:
    assert title_for("  what\nis  this ") == "what is this"
    assert len(title_for("x" * 100)) == 40


# -- status line -------------------------------------------------------------


def test_format_status() -> None:
    info = EngineInfo("m", "cpu", "float32")
    stats = Stats()
    stats.add_step(StepEvent(1, (TokenPiece(0, "<", Source.MODEL),), 1, 8, 0.0, 0.0, 0.0))  # the prefill
    stats.add_step(
        StepEvent(2, (TokenPiece(1, "a", Source.RETRIEVAL), TokenPiece(2, "b", Source.MODEL)), 5, 8, 0.1, 0.2, 0.1)
    )
    line = format_status(stats, 8, "racer", info)
    assert line == "7.5 tok/s │ MAT 2.00 │ 1 steps │ budget 8 │ racer │ m │ cpu float32"
    assert "no model" in format_status(None, "auto", "ar", None)


def test_the_app_offers_every_member_of_the_screens_host_interface(tmp_path: Path) -> None:
    from racer_tui.app import RacerApp
    from racer_tui.host import Host

    app = RacerApp(data_dir=tmp_path / "data", config_dir=tmp_path / "config")
    members = [m for m in vars(Host) if not m.startswith("_")]
    assert "claim_engine" in members and "settings" in members
    assert [m for m in members if not hasattr(app, m)] == []
    app.history.close()


def test_app_never_imports_torch() -> None:
    code = (
        "import sys, racer_tui.app, racer_tui.cli; racer_tui.cli.build_parser();"  # every command's options
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"racer_tui.app imported {proc.stdout.strip()}: {proc.stderr[-500:]}"



def test_the_chat_start_imports_no_screen_it_does_not_show() -> None:
    """`racer-tui`'s imports on the way to the chat (its command line, the app, the loader) take neither
    the benchmark dashboard (its charts and tables) nor numpy (which the engine's worker imports with
    torch, and textual-image's terminal query when the app is made): the parse alone took 0.26 s of CPU
    with them on the 2-core machine, 0.15 s without."""
    code = (
        "import sys, racer_tui.cli; racer_tui.cli.build_parser().parse_args([]);"
        "from racer_tui.app import RacerApp; from racer_tui.engine_loader import default_engine_factory;"
        "print(','.join(m for m in ('numpy', 'racer_tui.screens.bench', 'racer_tui.widgets.bench_charts')"
        " if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert proc.stdout.strip() == ""

# -- layout --------------------------------------------------------------------


def test_panels_fold_by_width_and_the_users_choice_holds() -> None:
    from racer_tui.layout import Folding, Panel

    folding = Folding(Panel("sidebar", 110, floats=True), Panel("chart", 90))
    assert folding.classes(120) == {
        "-sidebar-hidden": False,
        "-sidebar-floating": False,
        "-chart-hidden": False,
        "-chart-floating": False,
    }
    assert folding.classes(100)["-sidebar-hidden"] and not folding.classes(100)["-chart-hidden"]
    assert folding.classes(80)["-chart-hidden"]
    assert folding.toggle("sidebar", 80) is True  # shown below its width: it floats
    assert folding.classes(80)["-sidebar-floating"] and not folding.classes(130)["-sidebar-floating"]
    folding.reset("sidebar")
    assert folding.classes(80)["-sidebar-hidden"]
    assert folding.toggle("chart", 120) is False and folding.classes(200)["-chart-hidden"]


def test_sparkline_scales_like_the_chart() -> None:
    from racer_tui.widgets.bars import sparkline

    assert sparkline([1, 2, 4], 10) == "▂▄█"
    assert sparkline([8, 1], 10) == "█▁"
    assert sparkline(list(range(1, 30)), 5) == sparkline(list(range(25, 30)), 5)
    assert sparkline([], 5) == ""


def test_the_chat_list_shows_each_chats_date() -> None:
    """Chats that start alike share a title: the sidebar tells them apart by date."""
    import time

    from racer_tui.history import ChatSummary
    from racer_tui.widgets.chat_list import chat_date, chat_label

    now = time.mktime((2026, 12, 1, 15, 30, 0, 0, 0, -1))
    assert chat_date(now - 3600, now) == "today 14:30"
    assert chat_date(time.mktime((2026, 3, 5, 9, 7, 0, 0, 0, -1)), now) == "Mar 05 09:07"
    assert chat_date(time.mktime((2025, 12, 1, 9, 7, 0, 0, 0, -1)), now) == "2025-12-01"
    label = chat_label(ChatSummary(1, "Hi [notes]", time.time()))
    assert label.plain.startswith("Hi [notes]\ntoday ")
