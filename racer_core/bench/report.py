"""Plain-terminal output: live progress per method and the result tables.

No Textual here. On a TTY the progress is one line per method, redrawn in place
with ANSI cursor moves (throttled); otherwise one line per finished question.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TextIO

from racer_core.bench.results import UNSTEPPED_METHODS, BenchResult, Totals
from racer_core.bench.runner import BenchProgress

BAR_WIDTH = 20
REDRAW_S = 0.1


@dataclass
class _MethodProgress:
    done: int = 0
    tokens: int = 0  # finished questions
    seconds: float = 0.0
    steps: int = 0
    accepted: int = 0
    flight_tokens: int = 0  # the question in flight
    flight_steps: int = 0
    flight_start: float | None = None

    def tokens_per_s(self, now: float) -> float | None:
        seconds = self.seconds + (now - self.flight_start if self.flight_start else 0.0)
        tokens = self.tokens + self.flight_tokens
        return tokens / seconds if seconds > 0 and tokens else None

    def mat(self) -> float | None:
        steps = self.steps + self.flight_steps
        return (self.accepted + self.flight_tokens) / steps if steps else None


class ProgressDisplay:
    """An `on_progress` callback that draws to `stream` (stderr)."""

    def __init__(self, methods: list[str], count: int, stream: TextIO, *, tty: bool | None = None):
        self.methods = methods
        self.count = count
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.state = {m: _MethodProgress() for m in methods}
        self._drawn = False
        self._last_draw = 0.0
        self._width = max(len(m) for m in methods)

    def __call__(self, p: BenchProgress) -> None:
        s = self.state[p.method]
        now = time.perf_counter()
        if p.event is not None:
            s.flight_tokens += p.event.accept_length
            s.flight_steps += 1 if p.event.pieces else 0
        elif not p.question_done:
            s.flight_start, s.flight_tokens, s.flight_steps = now, 0, 0
        else:
            s.done += 1
            s.flight_start, s.flight_tokens, s.flight_steps = None, 0, 0
            if p.record is not None:
                s.tokens += p.record.tokens
                s.seconds += p.record.seconds
                s.steps += len(p.record.accept_lengths)
                s.accepted += sum(p.record.accept_lengths)
        if self.tty:
            if p.event is None or now - self._last_draw >= REDRAW_S:
                self._redraw(now)
        elif p.question_done:
            self._line(p, s)

    def line_for(self, method: str, now: float) -> str:
        s = self.state[method]
        filled = BAR_WIDTH * s.done // self.count if self.count else BAR_WIDTH
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        return (
            f"{method:<{self._width}} [{bar}] {s.done}/{self.count}"
            f"  {_fmt(s.tokens_per_s(now), '.1f')} tok/s  MAT {_fmt(self._mat(method, s.mat()), '.2f')}"
        )

    @staticmethod
    def _mat(method: str, mat: float | None) -> float | None:
        # hf/pld report a whole reply as one event: their MAT means nothing
        return None if method in UNSTEPPED_METHODS else mat

    def _redraw(self, now: float) -> None:
        out = []
        if self._drawn:
            out.append(f"\x1b[{len(self.methods)}F")  # back to the first method's line
        for m in self.methods:
            out.append("\x1b[2K" + self.line_for(m, now) + "\n")
        self.stream.write("".join(out))
        self.stream.flush()
        self._drawn = True
        self._last_draw = now

    def _line(self, p: BenchProgress, s: _MethodProgress) -> None:
        rec = p.record
        detail = ""
        if rec is not None:
            tps = rec.tokens / rec.seconds if rec.seconds > 0 else None
            steps = len(rec.accept_lengths)
            mat = self._mat(p.method, sum(rec.accept_lengths) / steps if steps else None)
            detail = f": {rec.tokens} tokens, {_fmt(tps, '.1f')} tok/s, MAT {_fmt(mat, '.2f')}"
        self.stream.write(f"[{p.method}] {s.done}/{self.count} question {p.question_id} ({p.category}){detail}\n")
        self.stream.flush()


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _yes_no(t: Totals) -> str:
    if t.identical is None:
        return "-"
    if t.identical:
        return "yes"
    return f"no ({t.identical_questions}/{t.compared_questions})"


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned first column, right-aligned numbers."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        parts = [cells[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def bench_tables(result: BenchResult) -> str:
    """One table per category, then all questions: tok/s, MAT, speedup, equality."""
    base = result.baseline if result.baseline in result.records else None
    headers = ["method", "questions", "tokens", "tok/s", "MAT", f"vs {base or 'ar'}", "same as ar"]
    sections = []
    groups = list(result.category_totals().items()) + [("all questions", result.method_totals())]
    for name, rows in groups:
        body = [
            [
                label,
                str(t.questions),
                str(t.tokens),
                _fmt(t.tokens_per_s, ".1f"),
                _fmt(t.mat, ".2f"),
                "-" if t.speedup is None else f"{t.speedup:.2f}x",
                _yes_no(t),
            ]
            for label, t in rows.items()
        ]
        sections.append(f"{name}\n{format_table(headers, body)}")
    return "\n\n".join(sections)


def speed_tables(result: BenchResult) -> str:
    """Per category: ms/token, MAT and speedup over the base."""
    base = result.baseline if result.baseline in result.records else None
    headers = ["method", "questions", "tokens", "ms/token", "MAT"]
    if base is not None:
        headers.append(f"vs {base}")
    sections = []
    groups = list(result.category_totals().items()) + [("all questions", result.method_totals())]
    for name, rows in groups:
        body = []
        for label, t in rows.items():
            row = [
                label,
                str(t.questions),
                str(t.tokens),
                _fmt(t.ms_per_token, ".2f"),
                _fmt(t.mat, ".2f"),
            ]
            if base is not None:
                row.append("-" if t.speedup is None else f"{t.speedup:.2f}x")
            body.append(row)
        sections.append(f"{name}\n{format_table(headers, body)}")
    return "\n\n".join(sections)
