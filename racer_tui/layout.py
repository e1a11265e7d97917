"""Panels that fold away on narrow terminals, and that a key shows or hides.

Each panel is shown by default from a minimum terminal width up. A key flips
it whatever the width (the user's choice then holds until flipped back);
below its width a panel that `floats` comes back over the content instead of
taking its own column. A screen turns the state into CSS classes on itself:
`-NAME-hidden` and `-NAME-floating`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Panel:
    name: str
    min_width: int  # shown by default at this terminal width or more
    floats: bool = False  # shown below min_width: over the content, not beside it
    choice: bool | None = None  # the user's toggle; None: decided by the width

    def shown(self, width: int) -> bool:
        return self.choice if self.choice is not None else width >= self.min_width

    def floating(self, width: int) -> bool:
        return self.floats and width < self.min_width and self.shown(width)


class Folding:
    def __init__(self, *panels: Panel) -> None:
        self.panels = {p.name: p for p in panels}

    def shown(self, name: str, width: int) -> bool:
        return self.panels[name].shown(width)

    def toggle(self, name: str, width: int) -> bool:
        """Flip a panel; returns whether it is shown now."""
        panel = self.panels[name]
        panel.choice = not panel.shown(width)
        return panel.choice

    def reset(self, name: str) -> None:
        """Back to the width's default (a floating panel closes after use)."""
        self.panels[name].choice = None

    def classes(self, width: int) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for p in self.panels.values():
            out[f"-{p.name}-hidden"] = not p.shown(width)
            out[f"-{p.name}-floating"] = p.floating(width)
        return out
