"""The dashboard's text panels: progress per method and the speedup table."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from racer_core.bench.results import BenchResult, Totals
from racer_tui.bench_board import BenchBoard
from racer_tui.colors import method_color

BAR = 20


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def progress_table(board: BenchBoard) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    for name in ("method", "bar", "count", "speed", "mat"):
        table.add_column(name, no_wrap=True, justify="left" if name in ("method", "bar") else "right")
    count = board.question_count
    for method in board.methods:
        mb = board.per_method[method]
        filled = BAR * mb.done // count if count else 0
        r, g, b = method_color(method)
        bar = Text("█" * filled, style=f"rgb({r},{g},{b})")
        bar.append("░" * (BAR - filled), style="grey37")
        table.add_row(
            Text(method, style=f"bold rgb({r},{g},{b})"),
            bar,
            f"{mb.done}/{count or '?'}",
            f"{_fmt(mb.tokens_per_s, '.1f')} tok/s",
            f"MAT {_fmt(mb.mat, '.2f')}",
        )
    return table


def _same(t: Totals) -> str:
    if t.identical is None:
        return "–"
    return "yes" if t.identical else f"no ({t.identical_questions}/{t.compared_questions})"


def speedup_table(result: BenchResult) -> Table:
    base = result.baseline if result.baseline in result.records else None
    title = "all questions" if result.completed else "all questions (stopped early)"
    table = Table(title=title, title_justify="left", expand=True, padding=(0, 1))
    table.add_column("method")
    for name in ("questions", "tokens", "tok/s", "MAT", f"vs {base or 'ar'}", "same as ar"):
        table.add_column(name, justify="right")
    for label, t in result.method_totals().items():
        r, g, b = method_color(label)
        table.add_row(
            Text(label, style=f"bold rgb({r},{g},{b})"),
            str(t.questions),
            str(t.tokens),
            _fmt(t.tokens_per_s, ".1f"),
            _fmt(t.mat, ".2f"),
            "–" if t.speedup is None else f"{t.speedup:.2f}x",
            _same(t),
        )
    return table
