"""The step inspector: opened from the acceptance chart, from a token of a
reply and by key; arrow keys move between steps; Escape closes."""

from __future__ import annotations

from app_pilot import StartApp
from fake_engine import ready_chat, wait_for
from textual.geometry import Region
from textual.widgets import Static

from racer_tui.chat.step_log import StepLog
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.inspector import InspectorScreen
from racer_tui.widgets.step_chart import StepChart


async def _replied(pilot, text: str = "How does RACER draft tokens?") -> ChatScreen:
    chat = await ready_chat(pilot)
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.pause()
    return chat


def _body(pilot) -> str:
    """The inspector's text as drawn on screen."""
    body = pilot.app.screen.query_one("#inspector-body", Static)
    return "\n".join(strip.text for strip in body.render_lines(Region(0, 0, *body.size)))


async def test_inspector_opens_moves_and_closes(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await _replied(pilot)
    steps = chat.steps.steps(chat.reply_id)
    # the prefill is logged (no tree) but is not a step of the status line's count
    assert len(steps) == chat.stats.steps + 1 and steps[0].record is None
    assert all(s.record is not None for s in steps[1:])
    await pilot.press("ctrl+o")  # nothing selected: the latest step
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, InspectorScreen))
    inspector = pilot.app.screen
    assert inspector.index == len(steps) - 1
    await pilot.press("home")
    assert inspector.index == 0
    assert "before step 1 of" in str(inspector.query_one("#inspector-title", Static).render())
    assert "prompt's forward pass" in _body(pilot)  # the prefill drafts nothing
    await pilot.press("right")
    body = _body(pilot)
    assert "bonus" in body and "automaton ctx" in body and "logits rank" in body
    assert "tree policy verified" in body  # the budget and why
    await pilot.press("right")
    assert inspector.index == 2 and "Step 2 of" in str(inspector.query_one("#inspector-title", Static).render())
    await pilot.press("left")
    assert inspector.index == 1
    await pilot.press("left", "left")  # stays at the first step
    assert inspector.index == 0
    await pilot.press("right", "escape")
    await wait_for(pilot, lambda: pilot.app.screen is chat)
    assert chat.query_one(StepChart).highlight == 0  # the chart keeps the step last shown (its bars skip the prefill)


async def test_chart_click_and_keys_open_a_step(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await _replied(pilot)
    chart = chat.query_one(StepChart)
    await pilot.click(StepChart, offset=(3 + 2, chart.size.height - 2))  # the third bar
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, InspectorScreen))
    assert pilot.app.screen.index == 3  # the prefill is logged first but has no bar
    await pilot.press("escape")
    await wait_for(pilot, lambda: pilot.app.screen is chat)
    chart.focus()
    await pilot.press("left", "left", "enter")  # from the selected third bar to the first
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, InspectorScreen))
    assert pilot.app.screen.index == 1


async def test_a_token_of_the_reply_opens_its_step(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await _replied(pilot)
    await pilot.click(".reply-text", offset=(0, 0))  # "RACER": the first step's first token
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, InspectorScreen))
    assert pilot.app.screen.index == 0
    assert chat.steps.steps(chat.reply_id)[0].pieces[0].text == "RACER "


async def test_stored_replies_have_no_trees_and_say_so(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await _replied(pilot)
    chat_id = chat.chat_id
    await pilot.press("ctrl+n")
    await pilot.pause()
    await chat.open_chat(chat_id)
    await pilot.pause()
    await pilot.press("ctrl+o")
    await pilot.pause()
    assert pilot.app.screen is chat
    assert any("kept only for replies" in n.message for n in pilot.app._notifications)


def test_step_log_is_bounded_oldest_reply_first() -> None:
    from racer_core.common.events import StepEvent, TokenPiece
    from racer_core.common.step_record import StepRecord

    record = StepRecord.build([1, 2, 3], [-1, 0, 1], [0, 1, 2], [0, 1, 1], [0, 3, 4], [-1, -1, -1], [0, 1], 9, 3, 3,
                              "fixed")
    log = StepLog(max_nodes=10)
    event = StepEvent(2, (TokenPiece(2, "a", 1),), 3, 3, 0.0, 0.0, 0.0, record=record)
    for reply in (1, 2):
        log.add(reply, event)
        log.add(reply, event)
    assert log.nodes == 12 - 6 and log.steps(1) == [] and 1 in log.dropped
    assert len(log.steps(2)) == 2
    log.add(3, StepEvent(1, (), 0, 0, 0.0, 0.0, 0.0, True, "cancelled"))  # a closing event with no step
    assert log.steps(3) == []


def test_a_paused_step_shows_the_gate_decision() -> None:
    from rich.console import Console

    from racer_core.common.events import Source, TokenPiece
    from racer_core.common.step_record import BudgetOption, StepRecord
    from racer_tui.chat.step_log import LoggedStep
    from racer_tui.widgets.step_tree import step_view

    why = "drafting paused, the root verified alone: the last 16 trees chosen made 14.2 tokens/s by the cost curve, plain decoding 18.5"
    record = StepRecord.build([5], [-1], [0], [0], [0], [-1], [0], 9, 1, 40, "auto", [1.0],
                              (BudgetOption(1, 1, 1.0, 0.054), BudgetOption(8, 8, 1.9, 0.093)), 0, why, True)
    console = Console(width=200, record=True)
    console.print(step_view(LoggedStep(3, (TokenPiece(9, "x", Source.MODEL),), 1, record), lambda t: f"t{t}"))
    text = console.export_text()
    assert "drafting paused: plain decoding" in text and "14.2 tokens/s" in text and "1 rows fed" in text


def test_a_step_cut_at_an_end_of_turn_draft_shows_no_bonus() -> None:
    """Issue 29, bug 7: the reply ended at an accepted end-of-turn draft: the
    count says so, and the tree does not show the bonus as emitted."""
    from rich.console import Console

    from racer_core.common.events import Source, TokenPiece
    from racer_core.common.step_record import StepRecord
    from racer_tui.chat.step_log import LoggedStep
    from racer_tui.widgets.step_tree import step_view

    # root 5, drafts 7 (<|im_end|>) then 8, both accepted; the model's bonus after them is 9
    record = StepRecord.build([5, 7, 8], [-1, 0, 1], [0, 1, 2], [0, Source.RETRIEVAL, Source.RETRIEVAL], [0, 3, 4],
                              [-1, -1, -1], [0, 1, 2], 9, 2, 3, "auto")
    names = {5: "x", 7: "<|im_end|>", 8: "y", 9: "z"}
    entry = LoggedStep(4, (TokenPiece(7, "", Source.RETRIEVAL),), 3, record)
    console = Console(width=200, record=True)
    console.print(step_view(entry, names.__getitem__))
    text = console.export_text()
    assert "1 token (1 accepted draft; the reply ended there, no bonus)" in text
    assert "bonus not emitted" in text and "bonus: the model's own" not in text
    assert "'y'  automaton" in text and "accepted, not emitted" in text
    # the whole path emitted: drafts and the bonus, as before
    whole = LoggedStep(4, (TokenPiece(7, "a", Source.RETRIEVAL), TokenPiece(8, "b", Source.RETRIEVAL),
                           TokenPiece(9, "c", Source.MODEL)), 3, record)
    console = Console(width=200, record=True)
    console.print(step_view(whole, names.__getitem__))
    text = console.export_text()
    assert "3 tokens (2 accepted drafts + the bonus)" in text and "bonus: the model's own" in text
    assert "not emitted" not in text


async def test_the_chart_colours_each_draft_by_its_own_source(start_app: StartApp) -> None:
    """Issue 29, bug 6: a step whose drafts came from the logits table shows
    them in the logits colour in the chart, as the reply's text does."""
    from rich.color import Color

    from racer_core.common.events import Source
    from racer_tui.colors import SOURCE_STYLE

    pilot = await start_app()
    chat = await _replied(pilot)
    chart = chat.query_one(StepChart)
    steps = [s for s in chat.steps.steps(chat.reply_id) if s.record is not None]
    mixed = next(i for i, s in enumerate(steps) if Source.LOGITS in {p.source for p in s.pieces[:-1]})
    drafts = [p.source for p in steps[mixed].pieces[:-1]]
    drawn = chart.render().to_text()
    column = 3 + mixed  # the axis labels, then one column per step
    lines = drawn.split("\n")
    colours = []
    for line in reversed(lines[1:-1]):  # the bars, bottom row first
        spans = [span for span in line.spans if span.start <= column < span.end]
        if line.plain[column] != " " and spans:
            colours.append(Color.parse(str(spans[-1].style).split()[0]).triplet)
    expected = {Color.parse(SOURCE_STYLE[s]).triplet for s in drafts}
    assert expected <= set(colours[1:])  # the bottom cell is the bonus
    assert Color.parse(SOURCE_STYLE[Source.LOGITS]).triplet in colours
