"""The dashboard's text panels: progress per method and the results table.

The results table is the headless one (racer_core.bench.report), with the
method names in their chart colours.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from racer_core.bench.board import BenchBoard
from racer_core.bench.report import bench_tables, speed_text
from racer_core.bench.results import BenchResult
from racer_tui.colors import method_color

BAR = 20


def _style(method: str) -> str:
    r, g, b = method_color(method)
    return f"bold rgb({r},{g},{b})"


def progress_table(board: BenchBoard) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    for name in ("method", "bar", "count", "speed", "mat"):
        table.add_column(name, no_wrap=True, justify="left" if name in ("method", "bar") else "right")
    count = board.question_count
    for method in board.methods:
        stats, done, failed = board.per_method[method], board.finished(method), board.failed.get(method, 0)
        filled = BAR * done // count if count else 0
        r, g, b = method_color(method)
        bar = Text("█" * filled, style=f"rgb({r},{g},{b})")
        bar.append("░" * (BAR - filled), style="grey37")
        tally = f"{done}/{count or '?'}" + (f" ({failed} failed)" if failed else "")
        table.add_row(Text(method, style=_style(method)), bar, tally, *speed_text(stats))
    return table


def speedup_table(result: BenchResult) -> Table:
    """All questions: tok/s, MAT, speedup and equality with ar (the panel's width)."""
    table = bench_tables(result, categories=False, style=_style)[-1]
    table.expand = True
    return table
