"""Benchmark output on rich: the live progress and every results table.

The same Table objects are printed headless and shown by the dashboard. No
Textual here. On a terminal the progress is a rich.progress bar per method;
otherwise one plain line per finished question (readable in logs, diffable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from racer_core.bench.board import BenchBoard
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import BenchProgress
from racer_core.bench.score import MathScore, score_methods
from racer_core.common.counts import counted
from racer_core.common.stats import Row, Stats

LabelStyle = Callable[[str], str]  # method -> rich style (the dashboard colours methods)
DASH = "–"


def fmt(x: float | None, spec: str) -> str:
    return DASH if x is None else format(x, spec)


def speed_text(stats: Stats) -> tuple[str, str]:
    """tokens/s and MAT as shown next to a progress bar."""
    return f"{fmt(stats.tokens_per_s, '.1f')} tok/s", f"MAT {fmt(stats.mat, '.2f')}"


def _table(title: str, headers: list[str]) -> Table:
    # a category is data, not markup: its brackets are shown as they are
    table = Table(title=escape(title), title_justify="left", padding=(0, 1))
    table.add_column(headers[0])
    for name in headers[1:]:
        table.add_column(name, justify="right")
    return table


def _label(label: str, style: LabelStyle | None) -> str | Text:
    return Text(label) if style is None else Text(label, style=style(label))


def _groups(result: BenchResult, categories: bool) -> list[tuple[str, dict[str, Row]]]:
    everything = "all questions" if result.completed else "all questions (stopped early)"
    per_category = list(result.category_totals().items()) if categories else []
    return [*per_category, (everything, result.method_totals())]


def bench_tables(result: BenchResult, *, categories: bool = True, style: LabelStyle | None = None) -> list[Table]:
    """One table per category, then all questions: tok/s, MAT, speedup and its
    spread over questions, equality with ar; when the answers carry references
    (math suites), the all-questions table adds each method's accuracy; when
    they carry schemas (a constrained suite), a last table splits each
    method's MAT into the grammar's forced tokens per step and the rest, and
    counts the replies that parse and validate (constrained_table)."""
    base = result.baseline if result.baseline in result.records else None
    headers = ["method", "questions", "tokens", "tok/s", "MAT", f"vs {base or 'ar'}", "per question", "same as ar"]
    scores = score_methods(result.records)  # math suites: a speed-up that changed answers must show
    failures = result.failure_count() > 0
    if failures:
        headers.insert(2, "failed")
    tables = []
    groups = _groups(result, categories)
    for i, (name, rows) in enumerate(groups):
        scored = bool(scores) and i == len(groups) - 1
        category = name if i < len(groups) - 1 else None
        table = _table(name, headers + ["accuracy"] if scored else headers)
        for label, row in rows.items():
            s, v = row.stats, row.versus
            table.add_row(
                _label(label, style),
                str(s.replies),
                *([str(result.failed(label, category))] if failures else []),
                str(s.tokens),
                fmt(s.tokens_per_s, ".1f"),
                fmt(s.mat, ".2f"),
                fmt(v.speedup, ".2f") + ("x" if v.speedup is not None else ""),
                v.spread_text,
                v.same_text,
                *([_accuracy(scores.get(label))] if scored else []),
            )
        tables.append(table)
    warnings = result.warnings()
    if warnings:  # under the last table: the one the dashboard shows too
        tables[-1].caption = Text("\n".join(f"WARNING {w}" for w in warnings), style="bold red")
        tables[-1].caption_justify = "left"
    if result.constrained:
        tables.append(constrained_table(result, style))
    return tables


def constrained_table(result: BenchResult, style: LabelStyle | None = None) -> Table:
    """A constrained suite's own figures per method, over all questions: MAT,
    its grammar-forced part and the rest (tokens per verification step), and
    how many replies parse as JSON and validate against their schema."""
    headers = ["method", "replies", "MAT", "MAT grammar", "MAT other", "valid", "invalid", "not JSON"]
    table = _table("constrained replies (a JSON schema each)", headers)
    for label, row in result.method_totals().items():
        s, valid = row.stats, result.validity(label)
        table.add_row(
            _label(label, style), str(valid.total), fmt(s.mat, ".2f"), fmt(s.mat_grammar, ".2f"),
            fmt(s.mat_without_grammar, ".2f"), valid.text, str(valid.invalid), str(valid.unparsable),
        )
    return table


def _accuracy(score: MathScore | None) -> str:
    """Share of correct choices over the questions answered (accuracy with one choice, mean@k with k)."""
    if score is None or not score.questions:
        return DASH
    return f"{100 * score.mean_at_k:.1f}%"


def speed_tables(result: BenchResult) -> list[Table]:
    """`racer-tui speed`: per category, ms/token, MAT and speedup over the base."""
    base = result.baseline if result.baseline in result.records else None
    failures = result.failure_count() > 0
    headers = ["method", "questions", *(["failed"] if failures else []), "tokens", "ms/token", "MAT"]
    headers += [f"vs {base}"] if base else []
    tables = []
    groups = _groups(result, True)
    for i, (name, rows) in enumerate(groups):
        category = name if i < len(groups) - 1 else None
        table = _table(name, headers)
        for label, row in rows.items():
            s, v = row.stats, row.versus
            failed = [str(result.failed(label, category))] if failures else []
            cells = [label, str(s.replies), *failed, str(s.tokens), fmt(s.ms_per_token, ".2f"), fmt(s.mat, ".2f")]
            if base:
                cells.append(fmt(v.speedup, ".2f") + ("x" if v.speedup is not None else ""))
            table.add_row(*cells)
        tables.append(table)
    return tables


def plain_console(file: TextIO | None = None) -> Console:
    """A console for headless output: no guessing colours for numbers in cells."""
    return Console(file=file, highlight=False)


def print_tables(tables: list[Table], console: Console) -> None:
    for i, table in enumerate(tables):
        if i:
            console.print()
        console.print(table)


class ProgressDisplay:
    """An `on_progress` callback that shows the run on `stream` (stderr).

    Use it as a context manager around the run: on a terminal it starts and
    stops the rich live display.
    """

    def __init__(self, methods: list[str], count: int, stream: TextIO, *, tty: bool | None = None) -> None:
        self.board = BenchBoard(methods=list(methods), question_count=count)
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        if self.tty:
            width = max(len(m) for m in methods)
            self.progress = Progress(
                TextColumn(f"{{task.description:<{width}}}"),
                BarColumn(bar_width=20),
                MofNCompleteColumn(),
                TextColumn("{task.fields[speed]:>12}  {task.fields[mat]}"),
                console=Console(file=stream, force_terminal=True, highlight=False),
                refresh_per_second=10,
            )
            for m in methods:
                speed, mat = speed_text(Stats())
                self.tasks[m] = self.progress.add_task(m, total=count, speed=speed, mat=mat)

    def __enter__(self) -> ProgressDisplay:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def __call__(self, p: BenchProgress) -> None:
        self.board.update(p)
        if self.progress is not None:
            speed, mat = speed_text(self.board.live(p.method))
            done = self.board.finished(p.method)
            self.progress.update(self.tasks[p.method], completed=done, speed=speed, mat=mat)
        elif p.question_done:
            self._line(p)

    def _line(self, p: BenchProgress) -> None:
        done = self.board.finished(p.method)
        detail = ""
        if p.record is not None and p.record.error is not None:
            detail = f": failed ({p.record.error})"
        elif p.record is not None:
            one = Stats()
            one.add_reply(p.record.tokens, p.record.seconds, p.record.accept_lengths, p.method)
            speed, mat = speed_text(one)
            detail = f": {counted(p.record.tokens, 'token')}, {speed}, {mat}"
        count = self.board.question_count
        self.stream.write(f"[{p.method}] {done}/{count} question {p.question_id} ({p.category}){detail}\n")
        self.stream.flush()
