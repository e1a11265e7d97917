"""One count of steps and one MAT in the chat: the status line while a reply
runs, the reply's note when it is done, and the step inspector all count
verification steps only (docs/design.md: MAT is tokens emitted per
verification step, bonus included, prefill excluded)."""

from __future__ import annotations

from app_pilot import StartApp
from fake_engine import REPLY, ready_chat, tokenize, wait_for
from textual.widgets import Static

from racer_tui.screens.chat import reply_note
from racer_tui.screens.inspector import InspectorScreen
from racer_tui.widgets.status_line import StatusLine
from racer_tui.widgets.turns import ReplyTurn


def _text(widget: Static) -> str:
    return str(widget.render())


async def test_note_status_line_and_inspector_agree(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await ready_chat(pilot)
    await pilot.press(*"How does RACER draft?", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.pause()
    tokens, steps = len(tokenize(REPLY)), chat.stats.steps
    mat = f"MAT {(tokens - 1) / steps:.2f}"  # the prefill's token is in no step
    assert mat != f"MAT {tokens / steps:.2f}"  # the reply tells the two definitions apart

    status = _text(chat.query_one(StatusLine))
    assert mat in status and f"{steps} steps" in status
    note = str(chat.query_one(ReplyTurn).border_subtitle)
    assert mat in note
    stored = pilot.app.history.messages(chat.chat_id)[-1].stats
    assert mat in reply_note(stored) and stored["steps"] == steps

    await pilot.press("ctrl+o")  # the latest step
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, InspectorScreen))
    title = pilot.app.screen.query_one("#inspector-title", Static)
    assert _text(title) == f"Step {steps} of {steps}"
    await pilot.press("home")  # the prompt's forward pass is logged first, but is not a step
    assert _text(title) == f"The prompt's forward pass, before step 1 of {steps}"
    await pilot.press("right")
    assert _text(title) == f"Step 1 of {steps}"
