"""One line of reply statistics under the conversation."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from racer_core.common.events import ContextUsage, EngineInfo
from racer_core.common.stats import Stats, busy_notice
from racer_tui.colors import CHART_GREEN
from racer_tui.widgets.bars import rgb, sparkline

TREND_STEPS = 16  # the last steps shown in the status line's sparkline


SEPARATOR = " │ "
# Parts left out, in this order, when the line is wider than the terminal: the
# speed, MAT, method, device and dtype stay. The model's name is cut to
# MODEL_KEPT characters before the context goes, and further only after;
# while a typed message is counted (ctx USED+PENDING/MAX), whether it fits
# outranks the name, which is cut as far as it takes first.
DROP_ORDER = ("steps", "budget", "context")
MODEL_KEPT = 12


def token_count(n: int) -> str:
    """A token count the way context lengths are said: 512, 1.2k, 8k, 128k, 1M (k = 1024)."""
    for unit, size in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= size:
            value = n / size
            text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
            return text.removesuffix(".0") + unit
    return str(n)


def context_text(usage: ContextUsage, pending: int = 0) -> str:
    """The context part: the chat's tokens of the model's maximum ("ctx 1.2k/8k"),
    and those the typed, unsent message would add ("ctx 619+1.2k/8k")."""
    more = f"+{token_count(pending)}" if pending else ""
    return f"ctx {token_count(usage.used)}{more}/{token_count(usage.limit)}"


def status_parts(stats: Stats | None, budget: int | str | None, method: str,
                 info: EngineInfo | None, context: ContextUsage | None = None,
                 pending: int = 0, constraint: str | None = None) -> list[tuple[str, str]]:
    """The status line's parts as (name, text), in the order shown; `context`
    None when the engine cannot say (or no model is loaded); `pending`: the
    typed message's tokens; `constraint`: what the reply was held to ("JSON"), after the method."""
    parts: list[tuple[str, str]] = []
    if stats is not None and stats.steps:
        # far below the cost curve's speed, the speed part says why (racer_core.common.stats.busy_notice)
        parts += [
            ("speed", busy_notice(stats) or f"{stats.tokens_per_s or 0.0:.1f} tok/s"),
            ("mat", f"MAT {stats.mat or 0.0:.2f}"),
            ("steps", f"{stats.steps} steps"),
        ]
    else:
        parts += [("speed", "– tok/s"), ("mat", "MAT –"), ("steps", "0 steps")]
    if context is not None:
        parts.append(("context", context_text(context, pending)))
    parts.append(("budget", f"budget {budget if budget is not None else '–'}"))
    parts.append(("method", method))
    if constraint:
        parts.append(("constraint", constraint))
    if info is not None:
        parts += [("model", info.model), ("device", f"{info.device} {info.dtype}")]
    else:
        parts.append(("model", "no model"))
    return parts


def fit_parts(parts: list[tuple[str, str]], width: int, context_first: bool = False) -> str:
    """The parts joined, leaving out those of DROP_ORDER and shortening the
    model's name until the line fits `width` (the device and dtype stay);
    `context_first`: the name is cut to one character before the context goes."""
    parts = list(parts)
    for name in DROP_ORDER:
        trial = _cut_model(parts, width, 1 if context_first else MODEL_KEPT) if name == "context" else parts
        if len(SEPARATOR.join(t for _, t in trial)) <= width:
            parts = trial
            break
        parts = [p for p in parts if p[0] != name]
    return SEPARATOR.join(t for _, t in _cut_model(parts, width, 1))


def _cut_model(parts: list[tuple[str, str]], width: int, kept: int) -> list[tuple[str, str]]:
    """The model's name cut (to no fewer than `kept` characters, "…" included) toward `width`."""
    over = len(SEPARATOR.join(t for _, t in parts)) - width
    if over <= 0:
        return parts
    return [(n, t[: max(kept - 1, len(t) - over - 1)] + "…" if n == "model" and len(t) > kept else t)
            for n, t in parts]


def format_status(stats: Stats | None, budget: int | str | None, method: str, info: EngineInfo | None,
                  context: ContextUsage | None = None) -> str:
    return SEPARATOR.join(t for _, t in status_parts(stats, budget, method, info, context))


class StatusLine(Static):
    def show(
        self,
        stats: Stats | None,
        budget: int | str | None,
        method: str,
        info: EngineInfo | None,
        trend: Sequence[int] | None = None,
        context: ContextUsage | None = None,
        pending: int = 0,
        constraint: str | None = None,
    ) -> None:
        """`trend`: accepted tokens per step, drawn as a sparkline in front (the
        one-line chart when the acceptance panel is folded away)."""
        line = Text(no_wrap=True, overflow="ellipsis")
        if trend is not None:
            line.append(sparkline(trend, TREND_STEPS) or "no steps", style=rgb(CHART_GREEN))
            line.append(SEPARATOR)
        width = self.app.size.width - 2  # the line spans the terminal, less its padding (also mid-resize)
        parts = status_parts(stats, budget, method, info, context, pending, constraint)
        line.append(fit_parts(parts, max(20, width - len(line)), context_first=pending > 0))
        # one line, cut to fit (app.tcss: height 1): a new one never moves anything else, so no
        # layout of the whole screen (the status changes at every redraw of a streaming reply)
        self.update(line, layout=False)
