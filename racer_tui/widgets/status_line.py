"""One line of reply statistics under the conversation."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from racer_core.common.events import EngineInfo
from racer_core.common.stats import Stats
from racer_tui.colors import CHART_GREEN
from racer_tui.widgets.bars import rgb, sparkline

TREND_STEPS = 16  # the last steps shown in the status line's sparkline


SEPARATOR = " │ "
# Parts left out, in this order, when the line is wider than the terminal: the
# speed, MAT, method, device and dtype stay (the model's name is cut last).
DROP_ORDER = ("steps", "budget")


def status_parts(stats: Stats | None, budget: int | str | None, method: str,
                 info: EngineInfo | None) -> list[tuple[str, str]]:
    """The status line's parts as (name, text), in the order shown."""
    parts: list[tuple[str, str]] = []
    if stats is not None and stats.steps:
        parts += [
            ("speed", f"{stats.tokens_per_s or 0.0:.1f} tok/s"),
            ("mat", f"MAT {stats.mat or 0.0:.2f}"),
            ("steps", f"{stats.steps} steps"),
        ]
    else:
        parts += [("speed", "– tok/s"), ("mat", "MAT –"), ("steps", "0 steps")]
    parts.append(("budget", f"budget {budget if budget is not None else '–'}"))
    parts.append(("method", method))
    if info is not None:
        parts += [("model", info.model), ("device", f"{info.device} {info.dtype}")]
    else:
        parts.append(("model", "no model"))
    return parts


def fit_parts(parts: list[tuple[str, str]], width: int) -> str:
    """The parts joined, leaving out those of DROP_ORDER and then shortening
    the model's name until the line fits `width` (the device and dtype stay)."""
    parts = list(parts)
    for name in DROP_ORDER:
        if len(SEPARATOR.join(t for _, t in parts)) <= width:
            break
        parts = [p for p in parts if p[0] != name]
    over = len(SEPARATOR.join(t for _, t in parts)) - width
    if over > 0:
        parts = [(n, t[: max(1, len(t) - over - 1)] + "…" if n == "model" else t) for n, t in parts]
    return SEPARATOR.join(t for _, t in parts)


def format_status(stats: Stats | None, budget: int | str | None, method: str, info: EngineInfo | None) -> str:
    return SEPARATOR.join(t for _, t in status_parts(stats, budget, method, info))


class StatusLine(Static):
    def show(
        self,
        stats: Stats | None,
        budget: int | str | None,
        method: str,
        info: EngineInfo | None,
        trend: Sequence[int] | None = None,
    ) -> None:
        """`trend`: accepted tokens per step, drawn as a sparkline in front (the
        one-line chart when the acceptance panel is folded away)."""
        line = Text(no_wrap=True, overflow="ellipsis")
        if trend is not None:
            line.append(sparkline(trend, TREND_STEPS) or "no steps", style=rgb(CHART_GREEN))
            line.append(SEPARATOR)
        width = self.app.size.width - 2  # the line spans the terminal, less its padding (also mid-resize)
        line.append(fit_parts(status_parts(stats, budget, method, info), max(20, width - len(line))))
        self.update(line)
