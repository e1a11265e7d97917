"""Keep a scrolled view on the same content while what is above it changes height.

Toggling Markdown redraws every reply: each gets another height, so the same
scroll offset shows other turns. An anchor is the turn at the top of the view
and how many lines into it the view starts; restored, that turn is at the top
again. A view at its end stays at its end.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.containers import ScrollableContainer
from textual.widget import Widget


@dataclass
class ScrollAnchor:
    widget: Widget | None  # None: the view was at its end
    offset: int = 0  # lines of `widget` above the view's top
    shown_y: float | None = None  # the scroll offset the last restore set

    @classmethod
    def keep(cls, view: ScrollableContainer, widgets: list[Widget], last: ScrollAnchor | None = None) -> ScrollAnchor:
        """The anchor of `view` now (`widgets`: its children that may be at the
        top). `last`, when the view has not moved since it was restored: a
        second toggle then goes back exactly where the first started, even
        where the first had to cut the offset into a shorter turn."""
        if last is not None and last.shown_y == view.scroll_y and (last.widget is None or last.widget.is_attached):
            return last
        if view.scroll_y >= view.max_scroll_y:
            return cls(None)
        for widget in widgets:
            region = widget.virtual_region
            if region.bottom > view.scroll_y:
                return cls(widget, max(0, round(view.scroll_y) - region.y))
        return cls(None)

    def restore(self, view: ScrollableContainer) -> None:
        """Scroll `view` back to the anchor (call once the layout is done)."""
        if self.widget is None:
            view.scroll_end(animate=False, immediate=True)
        elif self.widget.is_attached:
            region = self.widget.virtual_region
            view.scroll_to(y=region.y + min(self.offset, max(region.height - 1, 0)), animate=False, immediate=True)
        self.shown_y = view.scroll_y
