"""Bar charts drawn with block characters and explicit colours.

plotext merges neighbouring bars at small sizes; these draw one column per
step (vertical) or one row per item (horizontal) and stay exact and cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Span, Text
from textual.widget import Widget

from racer_tui.colors import CHART_BLUE, CHART_GREEN

EIGHTHS_UP = " ▁▂▃▄▅▆▇█"
EIGHTHS_RIGHT = " ▏▎▍▌▋▊▉█"
BAR_LABEL_W = 3  # the axis labels left of the step columns


def rgb(color: tuple[int, int, int]) -> str:
    return "rgb({},{},{})".format(*color)


def sparkline(values: Sequence[int], width: int) -> str:
    """The last `width` values as one line of eighth-blocks, scaled like StepBars
    (at least 4 tall, so one accepted token is never a full block)."""
    shown = list(values)[-width:]
    top = max([4, *shown])
    return "".join(EIGHTHS_UP[max(1, round(v / top * 8))] if v > 0 else EIGHTHS_UP[0] for v in shown)


def chart_legend() -> Text:
    """"■ draft ■ bonus", each square in its bars' colour and the words plain
    (Text(style=...) would colour the whole line: its style is the base of all
    text appended to it)."""
    return Text.assemble("  ", ("■", rgb(CHART_GREEN)), " draft ", ("■", rgb(CHART_BLUE)), " bonus")


class StepBars(Widget):
    """Accepted tokens per step: the bonus token in blue, accepted drafts in green above it."""

    DEFAULT_CSS = "StepBars { height: 1fr; }"

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.lengths: list[int] = []
        self.highlight: int | None = None  # a step (0-based) drawn in reverse video

    def shown_range(self) -> tuple[int, int]:
        """The steps (0-based, end exclusive) that fit the width, the latest last."""
        count = min(len(self.lengths), max(0, self.size.width - BAR_LABEL_W))
        return len(self.lengths) - count, len(self.lengths)

    def reset(self, lengths: list[int] | None = None, title: str | None = None) -> None:
        self.lengths = list(lengths or [])
        if title is not None:
            self.title = title
        self.refresh()

    def add(self, length: int) -> None:
        self.lengths.append(length)
        self.refresh()

    def token_style(self, step: int, token: int) -> str:
        """The colour of a step's (0-based) `token`-th accepted token from the
        bottom: the bonus token first, in blue, the drafts above it in green."""
        return rgb(CHART_BLUE) if token == 0 else rgb(CHART_GREEN)

    def render(self) -> Runs:
        return Runs(self.rows())

    def rows(self) -> list[list[tuple[str, str]]]:
        """The chart's lines, each as runs of (text, style): the title, the
        bars' rows top first, the footer."""
        width, height = self.size.width, self.size.height
        header = [(self.title[:width], "bold")]
        legend = chart_legend()
        if len(self.title) + len(legend) <= width:
            header += [(legend.plain[span.start : span.end], str(span.style or "")) for span in _spans(legend)]
        rows = height - 2
        label_w = BAR_LABEL_W
        if rows < 2 or width <= label_w + 1:
            return [header]
        shown = self.lengths[-(width - label_w) :]
        first = len(self.lengths) - len(shown) + 1
        top = max([4, *shown])
        per_token = rows * 8 / top  # eighths of a cell per token
        # eighths of a cell below each token's top: token 0 (the bonus) at the bottom
        edges = [round(k * per_token) for k in range(1, top + 2)]
        # each column's style per token, top included (a row's token is the same in every column)
        styles = [[self.token_style(index, k) for k in range(top + 1)] for index in range(first - 1, len(self.lengths))]
        selected = self.highlight - first + 1 if self.highlight is not None else -1
        if 0 <= selected < len(styles):
            styles[selected] = [f"{style} reverse" for style in styles[selected]]
        lines = [header]
        for r in range(rows - 1, -1, -1):  # top row first
            upper = (r + 1) * 8 / per_token  # token value at the row's top edge
            lower = r * 8 / per_token
            top_row = r == rows - 1
            tick = next((v for v in range(top, -1, -1) if lower <= v < upper or (top_row and v == top)), None)
            line = [(f"{tick:>2}┤" if tick is not None else "  │", "dim")]
            token = next(k for k, edge in enumerate(edges) if r * 8 < edge)
            # One run per stretch of columns in one style, not one per column, and blank cells
            # unstyled (a colour there shows only when the column is selected): the chart is
            # redrawn as a reply streams (docs/design.md, "A streaming reply's redraws").
            run, run_style = "", ""
            for i, (value, column) in enumerate(zip(shown, styles, strict=True)):
                cell = EIGHTHS_UP[max(0, min(8, round(value * per_token) - r * 8))]
                style = column[token] if cell != " " or i == selected else ""
                if style != run_style and run:
                    line.append((run, run_style))
                    run = ""
                run, run_style = run + cell, style
            if run:
                line.append((run, run_style))
            lines.append(line)
        if shown:
            last = first + len(shown) - 1
            mean = sum(self.lengths) / len(self.lengths)
            footer = f"   steps {first}–{last}  mean {mean:.2f}"
        else:
            footer = "   no steps yet"
        lines.append([(footer[:width], "dim")])
        return lines


def _spans(text: Text) -> list[Span]:
    """`text` as spans that cover it all, the unstyled stretches as spans of no style."""
    spans, pos = [], 0
    for span in sorted(text.spans, key=lambda s: s.start):
        if span.start > pos:
            spans.append(Span(pos, span.start, ""))
        spans.append(span)
        pos = span.end
    if pos < len(text):
        spans.append(Span(pos, len(text), ""))
    return spans


class Runs:
    """Lines of styled runs, drawn straight as segments. A chart drawn as a
    rich Text with hundreds of spans costs Textual tens of milliseconds to
    convert and lay out at every redraw; these lines are never wrapped (a
    chart fits its width), so they skip that."""

    def __init__(self, lines: list[list[tuple[str, str]]]) -> None:
        self.lines = lines

    def to_text(self) -> Text:
        """The same lines as a Text (for reading them)."""
        text = Text()
        for i, line in enumerate(self.lines):
            if i:
                text.append("\n")
            for run, style in line:
                text.append(run, style=style or None)
        return text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        new_line = Segment.line()
        for i, line in enumerate(self.lines):
            if i:
                yield new_line
            for run, style in line:
                yield Segment(run, console.get_style(style) if style else None)


@dataclass(frozen=True)
class HBar:
    label: str
    value: float
    color: tuple[int, int, int]
    text: str  # shown after the bar


class HBars(Widget):
    """Labelled horizontal bars, scaled to the largest value."""

    DEFAULT_CSS = "HBars { height: 1fr; }"

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.bars: list[HBar] = []
        self.empty_text = "no data yet"

    def show(self, bars: list[HBar], title: str | None = None) -> None:
        self.bars = bars
        if title is not None:
            self.title = title
        self.refresh()

    def render(self) -> RenderableType:
        width = self.size.width
        out = Text(no_wrap=True, overflow="crop")
        out.append(self.title[:width], style="bold")
        if not self.bars:
            out.append("\n" + self.empty_text, style="dim")
            return out
        label_w = min(16, max(len(b.label) for b in self.bars))
        text_w = max(len(b.text) for b in self.bars)
        bar_w = max(1, width - label_w - text_w - 3)
        top = max(b.value for b in self.bars) or 1.0
        for bar in self.bars[: max(0, self.size.height - 1)]:
            eighths = round(bar.value / top * bar_w * 8)
            full, part = divmod(eighths, 8)
            body = "█" * full + (EIGHTHS_RIGHT[part] if part else "")
            out.append("\n" + bar.label[:label_w].ljust(label_w) + " ")
            out.append(body, style=rgb(bar.color))
            out.append(" " * (bar_w - len(body)) + " " + bar.text.rjust(text_w))
        return out
