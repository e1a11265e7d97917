"""The status line says so when the measured speed is far below what the cost
curve expects (racer_core.common.stats.busy_notice): scripted step timings
against the scripted cost curve, nothing timed."""

from __future__ import annotations

import pytest
from app_pilot import StartApp
from fake_engine import STEP_TIMES, FakeEngine, ready_chat, wait_for
from scripted_curve import SCRIPTED_CURVE

from racer_core.common.events import StepEvent, TokenPiece
from racer_core.common.stats import BUSY_AFTER_STEPS, Stats, busy_notice
from racer_tui.widgets.status_line import StatusLine


def plain_step(step: int, seconds: float, curve_s: float | None) -> StepEvent:
    return StepEvent(step, (TokenPiece(step, "x", 0),), 1, 1, 0.0, seconds, 0.0, curve_s=curve_s)


def stats_of(seconds: float, curve_s: float | None, steps: int = 12) -> Stats:
    stats = Stats()
    stats.add_step(plain_step(1, 0.5, None))  # the prefill: no step, not priced
    for step in range(2, steps + 2):
        stats.add_step(plain_step(step, seconds, curve_s))
    return stats


def test_far_below_the_curve_the_machine_is_said_busy() -> None:
    assert busy_notice(stats_of(0.25, 0.01)) == "the machine is busy: 4.0 tok/s against 100 expected"


def test_near_the_curve_nothing_is_said() -> None:
    assert busy_notice(stats_of(0.016, 0.01)) is None  # drafting and updates cost a little beyond the curve


def test_nothing_is_said_without_a_measured_curve_or_before_a_few_steps() -> None:
    assert busy_notice(stats_of(0.25, None)) is None  # the safe curve a first start begins on prices nothing
    assert busy_notice(stats_of(0.25, 0.01, steps=BUSY_AFTER_STEPS - 1)) is None
    assert busy_notice(None) is None


def _status(chat) -> str:  # noqa: ANN001
    return str(chat.query_one(StatusLine).render())


@pytest.mark.parametrize("slowdown", (1.0, 10.0))
async def test_the_status_line_says_the_machine_is_busy(start_app: StartApp, slowdown: float) -> None:
    engine = FakeEngine(curve=SCRIPTED_CURVE, slowdown=slowdown)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press(*"Count to twenty.", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.pause()
    c = chat.stats.against_curve
    measured, expected = c.tokens / (c.steps * sum(STEP_TIMES) * slowdown), c.tokens / c.curve_s
    assert c.steps == chat.stats.steps  # every verification step was priced
    notice = f"the machine is busy: {measured:.1f} tok/s against {expected:.0f} expected"
    if slowdown > 1:
        assert notice in _status(chat)
    else:
        assert "busy" not in _status(chat) and f"{chat.stats.tokens_per_s:.1f} tok/s" in _status(chat)
