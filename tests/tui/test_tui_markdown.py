"""Replies as Markdown (Ctrl+T), issue 41 item 10: long code lines, a code
block while it streams, the view across toggles."""

from __future__ import annotations

import pytest
from app_pilot import SMALL, StartApp
from fake_engine import FakeEngine, ready_chat, wait_for
from textual.widgets import Label
from textual.widgets._markdown import MarkdownParagraph  # not exported by textual.widgets.markdown
from textual.widgets.markdown import MarkdownFence

from racer_tui.widgets.reply_markdown import ReplyMarkdown, close_open_fences, code_blocks
from racer_tui.widgets.turns import ReplyTurn

LONG_LINE = "print('" + "a" * 150 + " END')"
CODE_REPLY = "Look:\n\n```python\n" + "x = 1\n" * 12 + "```\n\nDone.\n"


@pytest.mark.parametrize(("text", "shown"), [
    ("a\n```python\nprint(1)", "a\n```python\nprint(1)\n```\n"),
    ("a\n```python\nprint(1)\n", "a\n```python\nprint(1)\n```\n"),
    ("a\n```python\nprint(1)\n``", "a\n```python\nprint(1)\n```\n"),  # the closer, cut short
    ("a\n~~~~\n```\n", "a\n~~~~\n```\n~~~~\n"),  # another fence's marks are code
    ("- item\n  ```sh\n  ls", "- item\n  ```sh\n  ls\n  ```\n"),  # closed inside the list item
    ("1. ```\n   x", "1. ```\n   x\n   ```\n"),
    ("> ```\n> x", "> ```\n> x\n> ```\n"),
    ("a\n```python\nprint(1)\n```\n", "a\n```python\nprint(1)\n```\n"),  # closed: as it was
    ("x ```y``` z\n", "x ```y``` z\n"),  # inline code, no fence
    ("plain text", "plain text"),
])
def test_an_open_code_block_is_closed_for_drawing(text: str, shown: str) -> None:
    assert close_open_fences(text) == shown


async def _markdown_settled(pilot, turn: ReplyTurn) -> ReplyMarkdown:
    markdown = turn.query_one(ReplyMarkdown)
    await wait_for(pilot, lambda: markdown.settled)
    await pilot.pause()
    return markdown


async def test_long_code_lines_wrap_inside_the_block(start_app: StartApp) -> None:
    engine = FakeEngine(reply=f"Code:\n\n```python\n{LONG_LINE}\n```\n")
    pilot = await start_app(engine, size=SMALL)
    chat = await ready_chat(pilot)
    await pilot.press("ctrl+t", *"go", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await _markdown_settled(pilot, chat.query_one(ReplyTurn))
    fence = chat.query_one(MarkdownFence)
    label = fence.query_one(Label)
    assert label.region.right <= fence.region.right  # no column of it cut off
    assert label.size.height >= 3  # 160 characters on about 70 columns
    lines = [strip.text.strip() for strip in label.render_lines(label.outer_size.region)]
    assert "".join(lines).replace(" ", "") == LONG_LINE.replace(" ", "")


async def test_a_streaming_code_block_is_drawn_as_one(start_app: StartApp) -> None:
    engine = FakeEngine(reply=CODE_REPLY, gate_after=4)  # 9 tokens: inside the code block
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press("ctrl+t", *"go", "enter")
    await wait_for(pilot, engine.paused.is_set)
    await pilot.pause()
    chat.redraws.draw_now()
    turn = chat.query_one(ReplyTurn)
    assert "```python" in turn.content and turn.content.count("```") == 1
    markdown = await _markdown_settled(pilot, turn)
    assert markdown.display and not turn.query_one(".reply-text").display
    fence = markdown.query_one(MarkdownFence)
    assert fence.code.startswith("x = 1\nx = ")
    assert not any("```" in str(p._content) for p in markdown.query(MarkdownParagraph))
    engine.release()
    await wait_for(pilot, lambda: not chat.generating)
    markdown = await _markdown_settled(pilot, turn)
    assert markdown.query_one(MarkdownFence).code == ("x = 1\n" * 12).rstrip()
    assert markdown.source == CODE_REPLY


async def test_toggling_markdown_twice_keeps_the_view(start_app: StartApp) -> None:
    engine = FakeEngine(reply=CODE_REPLY)
    pilot = await start_app(engine, size=SMALL)
    chat = await ready_chat(pilot)
    for sent, text in enumerate(("one", "two", "three"), 1):
        await pilot.press(*text, "enter")
        await wait_for(pilot, lambda: len(engine.configs) == sent and not chat.generating)  # noqa: B023
    view = chat.conversation_view
    await wait_for(pilot, lambda: view.max_scroll_y > 40)
    turns = list(view.children)
    view.scroll_to(y=turns[3].virtual_region.y + 2, animate=False, immediate=True)  # into the second reply
    await pilot.pause()
    start = view.scroll_y
    assert 0 < start < view.max_scroll_y
    await pilot.press("ctrl+t")
    for turn in chat.query(ReplyTurn):
        await _markdown_settled(pilot, turn)
    await pilot.pause()
    assert turns[3].virtual_region.y <= view.scroll_y < turns[3].virtual_region.bottom  # the same reply on top
    await pilot.press("ctrl+t")
    await pilot.pause()
    await pilot.pause()
    assert view.scroll_y == start


def test_code_blocks_are_found_in_order() -> None:
    text = "a\n\n```python\nx = 1\n```\n\n    indented\n\n- ```sh\n  ls -l\n  ```\n"
    assert code_blocks(text) == ["x = 1", "indented", "ls -l"]
    assert code_blocks("no code, only `inline`") == []


async def test_f11_and_a_click_copy_a_code_block(start_app: StartApp) -> None:
    engine = FakeEngine(reply="First:\n\n```sh\nls -l\n```\n\nThen:\n\n```python\nprint('two')\n```\n")
    pilot = await start_app(engine)
    app = pilot.app
    chat = await ready_chat(pilot)
    await pilot.press("f11")
    await pilot.pause()
    assert any("no code block" in n.message for n in app._notifications)
    await pilot.press(*"go", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.press("f11")  # with the prompt focused, as after sending
    await pilot.pause()
    assert app.clipboard == "print('two')"
    chat.query_one("#prompt").text = "!!copy code"
    app.copy_to_clipboard("")
    await pilot.press("enter")
    await pilot.pause()
    assert app.clipboard == "print('two')" and not chat.query_one("#prompt").text
    await pilot.press("ctrl+t")
    markdown = await _markdown_settled(pilot, chat.query_one(ReplyTurn))
    first = markdown.query(MarkdownFence).first()
    await pilot.click(first)
    assert app.clipboard == "ls -l"


async def test_a_view_at_its_end_stays_there_across_a_toggle(start_app: StartApp) -> None:
    engine = FakeEngine(reply=CODE_REPLY)
    pilot = await start_app(engine, size=SMALL)
    chat = await ready_chat(pilot)
    for sent, text in enumerate(("one", "two"), 1):
        await pilot.press(*text, "enter")
        await wait_for(pilot, lambda: len(engine.configs) == sent and not chat.generating)  # noqa: B023
    view = chat.conversation_view
    await wait_for(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y)
    await pilot.press("ctrl+t")
    for turn in chat.query(ReplyTurn):
        await _markdown_settled(pilot, turn)
    await wait_for(pilot, lambda: view.scroll_y == view.max_scroll_y)
    await pilot.press("ctrl+t")
    await pilot.pause()
    await wait_for(pilot, lambda: view.scroll_y == view.max_scroll_y)
