"""The chat's acceptance chart, selectable: click a step's column, or focus
the chart and move with the arrow keys, to open that step in the inspector."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message

from racer_tui.widgets.bars import BAR_LABEL_W, StepBars


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

    def reset(self, lengths: list[int] | None = None, title: str | None = None) -> None:
        self.highlight = None
        super().reset(lengths, title)

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
