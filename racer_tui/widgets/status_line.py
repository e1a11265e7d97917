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


def format_status(stats: Stats | None, budget: int | str | None, method: str, info: EngineInfo | None) -> str:
    parts = []
    if stats is not None and stats.steps:
        parts += [
            f"{stats.tokens_per_s or 0.0:.1f} tok/s",
            f"MAT {stats.mat or 0.0:.2f}",
            f"{stats.steps} steps",
        ]
    else:
        parts += ["– tok/s", "MAT –", "0 steps"]
    parts.append(f"budget {budget if budget is not None else '–'}")
    parts.append(method)
    if info is not None:
        parts += [info.model, f"{info.device} {info.dtype}"]
    else:
        parts.append("no model")
    return " │ ".join(parts)


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
            line.append(" │ ")
        line.append(format_status(stats, budget, method, info))
        self.update(line)
