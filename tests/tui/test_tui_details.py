"""What a user sees in passing: the dashboard's own fields,
the chart legends and their colours, chat search results, and a reply cut
off by closing the app."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from app_pilot import SMALL, StartApp
from fake_engine import REPLY, FakeEngine, drain, open_dashboard, ready_chat, wait_for
from rich.console import Console
from rich.text import Text
from textual.widgets import Input, OptionList

from racer_core.common.events import Source
from racer_tui.chat import session as chat_session
from racer_tui.colors import CHART_BLUE, CHART_GREEN, LOGITS_GREEN, RETRIEVAL_GREEN, SOURCE_STYLE, rgb_of
from racer_tui.history import HistoryStore, StoredMessage
from racer_tui.screens.bench import BENCH_MAX_NEW_TOKENS
from racer_tui.screens.chat import legend
from racer_tui.screens.chat_dialogs import SearchScreen
from racer_tui.settings import SettingsStore
from racer_tui.widgets.bars import Runs, StepBars, chart_legend
from racer_tui.widgets.bench_charts import SpeedChart, SpeedLegend
from racer_tui.widgets.turns import ReplyTurn, UserTurn

# -- the dashboard's fields ------------------------------------------------------


async def test_the_dashboards_max_new_tokens_belongs_to_the_run_not_to_the_chat(start_app: StartApp) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    app = pilot.app
    await ready_chat(pilot)
    app.update_settings(max_new_tokens=40)  # as Settings (f4) saves it
    bench = await open_dashboard(pilot)
    field = bench.query_one("#max-new-tokens", Input)
    assert field.value == str(BENCH_MAX_NEW_TOKENS) != "40"  # bench's default, as `racer-tui bench`
    field.value = "7"
    bench.query_one("#q-end", Input).value = "1"
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    assert engine.configs and {c.max_new_tokens for c in engine.configs} == {7}
    # the chat's setting is untouched, in the app and in settings.json
    assert app.settings.generation.max_new_tokens == 40
    assert SettingsStore(app.settings_store.path).load().generation.max_new_tokens == 40
    await pilot.press("f2")
    chat = await ready_chat(pilot)
    runs = len(engine.configs)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, lambda: len(engine.configs) > runs and not chat.generating)
    assert engine.configs[-1].max_new_tokens == 40
    await pilot.press("f3")
    await wait_for(pilot, lambda: app.screen is bench)
    assert field.value == "7"  # the run's field keeps what was typed


async def test_the_empty_question_range_is_not_marked_invalid(start_app: StartApp) -> None:
    pilot = await start_app(size=SMALL)
    bench = await open_dashboard(pilot)
    await pilot.press("ctrl+b")  # the setup column floats in at 80 columns
    begin, end = bench.query_one("#q-begin", Input), bench.query_one("#q-end", Input)
    begin.focus()
    await pilot.pause()
    await pilot.press("tab", "tab")  # past "from 0" and "to end", both left empty
    await pilot.pause()
    assert begin.value == end.value == ""
    assert not begin.has_class("-invalid") and not end.has_class("-invalid")
    end.value = "-"  # not a number: still marked
    await pilot.pause()
    assert end.has_class("-invalid")


# -- colours and legends ---------------------------------------------------------


def _lightness(hex_colour: str) -> float:
    """CIE L* (0 black to 100 white) of an sRGB colour."""

    def linear(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb_of(hex_colour))
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return 116 * y ** (1 / 3) - 16 if y > 216 / 24389 else y * 24389 / 27


def _colours(text: Text, word: str) -> set[str | None]:
    """The foreground colours `word` is drawn in, once rendered."""
    console = Console(color_system="truecolor")
    start = text.plain.index(word)
    colours = set()
    for offset in range(start, start + len(word)):
        colour = text.get_style_at_offset(console, offset).color
        colours.add(None if colour is None else colour.triplet.hex)
    return colours


def test_the_two_draft_greens_differ_clearly_in_lightness() -> None:
    # xterm 71 and 114 (the old pair as a 256-colour terminal showed it) differ by about 16
    assert _lightness(LOGITS_GREEN) - _lightness(RETRIEVAL_GREEN) >= 25


def test_legends_use_the_texts_colours_and_colour_only_their_squares() -> None:
    # the chart header: "draft" and "bonus" are words, not drawn in the bars' colours
    header = chart_legend()
    assert _colours(header, "draft") == _colours(header, "bonus") == {None}
    squares = [i for i, ch in enumerate(header.plain) if ch == "■"]
    console = Console(color_system="truecolor")
    drawn = [header.get_style_at_offset(console, i).color.triplet for i in squares]
    assert [tuple(c) for c in drawn] == [CHART_GREEN, CHART_BLUE]
    # the bars' draft green is the automaton's text green (one palette)
    assert CHART_GREEN == rgb_of(SOURCE_STYLE[Source.RETRIEVAL])
    # the chat's legend: each square in the colour its source's tokens are drawn in
    chat = legend()
    squares = [i for i, ch in enumerate(chat.plain) if ch == "■"]
    drawn = [chat.get_style_at_offset(console, i).color.triplet.hex for i in squares]
    assert drawn == [SOURCE_STYLE[s] for s in Source if s != Source.MODEL]
    assert _colours(chat, "draft from the automaton") == {None}


async def test_the_chat_charts_header_prints_bonus_plainly(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.pause()
    drawn = chat.query_one(StepBars).render()
    assert isinstance(drawn, Runs)  # drawn straight as segments (cheap to redraw)
    rendered = drawn.to_text()
    assert "draft ■ bonus" in rendered.plain.splitlines()[0]  # the header line
    assert _colours(rendered, "bonus") == _colours(rendered, "draft") == {None}
    assert _colours(rendered, "■") == {RETRIEVAL_GREEN}  # the automaton text's green


async def test_the_speed_legend_stays_off_the_plot_at_80x24(start_app: StartApp) -> None:
    pilot = await start_app(size=SMALL)
    bench = await open_dashboard(pilot)
    bench.query_one("#q-end", Input).value = "3"
    bench.query_one("#methods").select("retrieval")
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    await drain(pilot, bench)
    plot = str(bench.query_one(SpeedChart).render())
    methods = ("ar", "racer", "retrieval")
    # plotext drew its legend inside the plot, over the lines
    assert not any(m in line.split() for line in plot.splitlines() for m in methods)
    legend_widget = bench.query_one(SpeedLegend)
    shown = str(legend_widget.render())
    assert shown.startswith("tokens/s per question") and all(f"■ {m}" in shown for m in methods)
    assert legend_widget.region.bottom <= bench.query_one(SpeedChart).region.y
    assert "⣀" in plot or "⠤" in plot or any("\u2800" < ch <= "\u28ff" for ch in plot)  # the lines are drawn


# -- chat search -----------------------------------------------------------------


async def test_search_results_show_the_date_and_where_the_words_are(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await ready_chat(pilot)
    history = pilot.app.history
    opening = "Tell me about the history of Rome"
    replies = ["Rome was founded, the story goes, by Romulus.", "Rome's first emperor was Augustus."]
    days = [time.mktime((2026, 3, 2, 9, 30, 0, 0, 0, -1)), time.mktime((2026, 5, 17, 18, 5, 0, 0, 0, -1))]
    for reply, day in zip(replies, days, strict=True):
        chat_id = history.create_chat(opening)
        history.add_messages(chat_id, [StoredMessage("user", opening), StoredMessage("assistant", reply)])
        history._db.execute("UPDATE chats SET updated = ? WHERE id = ?", (day, chat_id))
    history._db.commit()
    await pilot.press("ctrl+f")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SearchScreen))
    results = pilot.app.screen.query_one(OptionList)
    await pilot.press(*"rome")
    await pilot.pause()
    lines = [str(option.prompt) for option in results.options]
    assert len(lines) == 2 and lines[0] != lines[1]
    assert lines[0].startswith(opening) and "2026-05-17 18:05" in lines[0] and "first emperor was Augustus" in lines[0]
    assert "2026-03-02 09:30" in lines[1] and "by Romulus" in lines[1]
    # the words found are highlighted in the snippet
    snippet = results.options[0].prompt
    assert isinstance(snippet, Text)
    at = snippet.plain.index("Rome's")
    assert any(span.start <= at < span.end and "reverse" in str(span.style) for span in snippet.spans)
    await pilot.press(*" ", *"emperor")  # "rome emperor" is in neither
    await pilot.pause()
    assert [str(o.prompt) for o in results.options] == ["no chat matches"]
    await pilot.press("escape")
    assert chat.chat_id is None or chat.chat_id > 0


# -- a reply cut off by closing the app ------------------------------------------


async def test_a_reply_cut_off_by_closing_the_app_is_marked_interrupted(
    start_app: StartApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history holds, at every moment, what a killed app leaves: the reply
    so far, marked interrupted until it ends. A second app on the same files
    (the next start) shows it so, and goes on from it."""
    monkeypatch.setattr(chat_session, "SAVE_EVERY_S", 0.0)  # save at every step (default: every 2 s)
    held = FakeEngine(gate_after=3)
    first = await start_app(held)
    chat = await ready_chat(first)
    await first.press(*"How does RACER draft?", "enter")
    await wait_for(first, held.paused.is_set)
    await drain(first, chat)
    so_far = chat.query_one(ReplyTurn).content
    assert so_far and REPLY.startswith(so_far)

    stored = HistoryStore(tmp_path / "data" / "history.sqlite3")  # as the next start reads it
    question, reply = stored.messages(chat.chat_id)
    stored.close()
    assert (question.role, question.content) == ("user", "How does RACER draft?")
    assert reply.role == "assistant" and reply.stats["finish_reason"] == "interrupted"
    assert reply.content == so_far

    engine = FakeEngine()
    second = await start_app(engine)
    reopened = await ready_chat(second)
    await wait_for(second, lambda: reopened.query(ReplyTurn))
    await second.pause()
    turn = reopened.query_one(ReplyTurn)
    assert turn.content == so_far and turn.complete
    assert "interrupted: the app closed mid-reply" in str(turn.border_subtitle)
    assert [t.message for t in reopened.query(UserTurn)] == ["How does RACER draft?"]
    # the chat goes on: the model sees the question and the part-reply before the next message
    await second.press(*"go on", "enter")
    await wait_for(second, lambda: engine.prompts and not reopened.generating)
    assert [m["role"] for m in engine.prompts[-1][1]] == ["user", "assistant", "user"]

    held.release()  # the first app's reply ends: its row becomes the finished reply, not a second one
    await wait_for(first, lambda: not chat.generating)
    stored = HistoryStore(tmp_path / "data" / "history.sqlite3")
    rows = stored.messages(chat.chat_id)
    stored.close()
    assert rows[1].stats["finish_reason"] == "eos" and rows[1].content == REPLY
