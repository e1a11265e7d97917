"""Bar charts drawn with block characters and explicit colours.

plotext merges neighbouring bars at small sizes; these draw one column per
step (vertical) or one row per item (horizontal) and stay exact and cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text
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

    def render(self) -> RenderableType:
        width, height = self.size.width, self.size.height
        out = Text(no_wrap=True, overflow="crop")
        out.append(self.title[:width], style="bold")
        legend = chart_legend()
        if len(self.title) + len(legend) <= width:
            out.append_text(legend)
        rows = height - 2
        label_w = BAR_LABEL_W
        if rows < 2 or width <= label_w + 1:
            return out
        shown = self.lengths[-(width - label_w) :]
        first = len(self.lengths) - len(shown) + 1
        top = max([4, *shown])
        per_token = rows * 8 / top  # eighths of a cell per token
        # eighths of a cell below each token's top: token 0 (the bonus) at the bottom
        edges = [round(k * per_token) for k in range(1, top + 2)]
        for r in range(rows - 1, -1, -1):  # top row first
            out.append("\n")
            upper = (r + 1) * 8 / per_token  # token value at the row's top edge
            lower = r * 8 / per_token
            top_row = r == rows - 1
            tick = next((v for v in range(top, -1, -1) if lower <= v < upper or (top_row and v == top)), None)
            out.append(f"{tick:>2}┤" if tick is not None else "  │", style="dim")
            for index, value in enumerate(shown, first - 1):
                fill = max(0, min(8, round(value * per_token) - r * 8))
                style = self.token_style(index, next(k for k, edge in enumerate(edges) if r * 8 < edge))
                out.append(EIGHTHS_UP[fill], style=f"{style} reverse" if index == self.highlight else style)
        out.append("\n")
        if shown:
            last = first + len(shown) - 1
            mean = sum(self.lengths) / len(self.lengths)
            footer = f"   steps {first}–{last}  mean {mean:.2f}"
        else:
            footer = "   no steps yet"
        out.append(footer[:width], style="dim")
        return out


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
