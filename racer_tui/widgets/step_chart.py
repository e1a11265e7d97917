"""The chat's acceptance chart, selectable: click a step's column, or focus
the chart and move with the arrow keys, to open that step in the inspector."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message

from racer_core.common.events import Source
from racer_tui.colors import CHART_BLUE, CHART_GREEN, SOURCE_STYLE
from racer_tui.widgets.bars import BAR_LABEL_W, StepBars, rgb


class StepChart(StepBars):
    can_focus = True
    BINDINGS = [
        Binding("left", "select(-1)", "Previous step", show=False),
        Binding("right", "select(1)", "Next step", show=False),
        Binding("enter", "open", "Inspect step"),
    ]
    DEFAULT_CSS = "StepChart:focus { background: $boost; }"

    class Open(Message):
        """Open the inspector at `index` (0-based) of the chart's steps."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(title, id=id)
        self.sources: list[tuple[Source, ...] | None] = []  # per step, when known

    def reset(self, lengths: list[int] | None = None, title: str | None = None) -> None:
        self.highlight = None
        self.sources = [None] * len(lengths or [])
        super().reset(lengths, title)

    def add(self, length: int, sources: tuple[Source, ...] | None = None) -> None:
        """One step; `sources`, its tokens' own sources (drafts, then the
        bonus), colour each accepted draft as the reply's text does."""
        self.sources.append(sources)
        super().add(length)

    def token_style(self, step: int, token: int) -> str:
        sources = self.sources[step] if step < len(self.sources) else None
        if not sources:  # a stored reply: its steps' sources were not kept
            return super().token_style(step, token)
        stacked = (sources[-1], *sources[:-1])  # the bonus at the bottom, the drafts above it in order
        source = stacked[min(token, len(stacked) - 1)]
        return rgb(CHART_BLUE) if source == Source.MODEL else SOURCE_STYLE.get(source) or rgb(CHART_GREEN)

    def select(self, index: int | None) -> None:
        self.highlight = None if index is None or not self.lengths else max(0, min(index, len(self.lengths) - 1))
        self.refresh()

    def action_select(self, delta: int) -> None:
        if not self.lengths:
            return
        start = self.highlight if self.highlight is not None else len(self.lengths)
        self.select(start + delta)

    def action_open(self) -> None:
        if self.lengths:
            self.post_message(self.Open(self.highlight if self.highlight is not None else len(self.lengths) - 1))

    def on_click(self, event: events.Click) -> None:
        first, end = self.shown_range()
        index = first + event.x - BAR_LABEL_W
        if event.x >= BAR_LABEL_W and first <= index < end:
            self.select(index)
            self.post_message(self.Open(index))
