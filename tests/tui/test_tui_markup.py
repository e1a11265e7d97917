"""Text from users, models, files and the history is never read as markup
(issue 29, bug 1): square brackets, `[/]`, `[@click=...]`, backslashes, emoji,
right-to-left text and NUL pass through every place the app shows them, are
shown as typed, and a history holding them never stops the app from starting."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from app_pilot import SIZE
from fake_engine import FakeEngine, drain, make_app, ready_chat, wait_for
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text
from textual.content import Content
from textual.widgets import Input, Static

from racer_tui.history import title_for
from racer_tui.screens.chat_dialogs import LineScreen
from racer_tui.screens.confirm import ConfirmScreen
from racer_tui.screens.help import HelpScreen
from racer_tui.screens.inspector import InspectorScreen
from racer_tui.screens.settings import SettingsScreen
from racer_tui.widgets.chat_list import ChatList
from racer_tui.widgets.turns import ReplyTurn, UserTurn

# What a markup parser trips over or swallows, and text a terminal must still show.
FRAGMENTS = ["[", "]", "[/]", "[bold", "[bold]", "[@click=app.quit]x[/]", "\\", "\\[", "[/bold]", "[link=x]",
             "🚀", "שלום", "مرحبا", "\x00", "x[/] or [bold]", "$var", "[b u]"]
markup_text = st.lists(st.sampled_from(FRAGMENTS) | st.sampled_from(["a", "b ", " ", "x"]), min_size=1, max_size=6).map(
    "".join).filter(lambda s: s.strip() and not s.strip().startswith("!!"))


def plain(widget: Static) -> str:
    content = widget.content
    return content.plain if isinstance(content, Text) else str(content)


async def exercise(data: Path, text: str) -> None:
    engine = FakeEngine(reply=f"Sure: {text} ok\n")
    app = make_app(data, engine)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready_chat(pilot)
        # a message and its reply
        chat.query_one("#prompt").text = text
        await pilot.press("enter")
        await wait_for(pilot, lambda: chat.reply_id == 1 and not chat.generating)
        await pilot.pause()
        user = chat.query_one(UserTurn)
        assert plain(user.query_one(".user-text", Static)) == text.strip()
        assert text in chat.query_one(ReplyTurn).content
        titles = [chat.query_one(ChatList).get_option_at_index(0).prompt]
        assert titles[0].plain.split("\n")[0] == title_for(text.strip())
        # Markdown on and off: the reply is shown either way
        await pilot.press("ctrl+t")
        await pilot.pause()
        await pilot.press("ctrl+t")
        await pilot.pause()
        # the inspector shows the reply's tokens
        await app.run_action("screen.inspect")
        await wait_for(pilot, lambda: isinstance(app.screen, InspectorScreen))
        await pilot.pause()
        await pilot.press("escape")
        # an unknown command quotes the text in a notice
        chat.query_one("#prompt").text = f"!!{text.strip()}"  # "!! x" is another command than "!!x"
        await pilot.press("enter")
        await pilot.pause()
        assert any(f"!!{text.strip()}".split(" ")[0] in n.message for n in app._notifications)
        assert not any(n.markup for n in app._notifications)
        # rename the chat to the text
        await app.run_action("screen.rename_chat")
        await wait_for(pilot, lambda: isinstance(app.screen, LineScreen) and app.screen.query(Input))
        app.screen.query_one(Input).value = f"T {text}"
        await pilot.press("enter")
        await pilot.pause()
        assert chat.query_one(ChatList).get_option_at_index(0).prompt.plain.split("\n")[0] == title_for(f"T {text}", 80)
        # the delete question quotes the title
        await app.run_action("screen.delete_chat")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query(Static))
        await pilot.pause()
        assert title_for(f"T {text}", 80) in plain(app.screen.query_one(Static))
        await pilot.press("escape")
        await pilot.pause()
        assert app._exception is None
    # the history it left opens again: the app starts and shows the same text
    engine = FakeEngine()
    app = make_app(data, engine)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready_chat(pilot)
        await wait_for(pilot, lambda: chat.chat_id is not None and chat.query(UserTurn))
        await pilot.pause()
        assert plain(chat.query_one(UserTurn).query_one(".user-text", Static)) == text.strip()
        assert chat.query_one(ChatList).get_option_at_index(0).prompt.plain.split("\n")[0] == title_for(f"T {text}", 80)
        assert app._exception is None


# Few examples (each starts the app twice); no shrinking: a failing example is printed as it is.
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
@given(text=markup_text)
def test_markup_in_messages_titles_and_notices_is_shown_as_typed(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(exercise(Path(folder), text))


def test_the_bug_report_s_own_message_survives_a_restart() -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(exercise(Path(folder), "In Python, what does x[/] or [bold] mean? One line."))


def shown(prompt: object, markup: bool = True) -> str:
    """What a widget draws for `prompt`: Textual reads a str as markup (unless told not to)."""
    if isinstance(prompt, Text):
        return prompt.plain
    return Content.from_markup(str(prompt)).plain if markup else str(prompt)


async def test_notices_keep_their_brackets(start_app) -> None:
    pilot = await start_app()
    chat = await ready_chat(pilot)
    chat.query_one("#prompt").text = "!!nope"
    await pilot.press("enter")
    await pilot.pause()
    notice = list(pilot.app._notifications)[-1]
    assert "!!save [PATH]" in shown(notice.message, notice.markup)


async def test_settings_method_list_keeps_extra_peers(start_app) -> None:
    pilot = await start_app()
    await ready_chat(pilot)
    await pilot.press("f4")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SettingsScreen))
    await pilot.pause()
    select = pilot.app.screen.query_one("#method")
    assert "suffix (SuffixDecoding, extra [peers])" in [shown(prompt) for prompt, _ in select._options]


def test_a_category_with_brackets_is_shown_in_the_dashboard_table() -> None:
    from racer_core.bench.report import _table

    table = _table("math [/] [bold]x", ["method", "tokens"])
    table.add_row(Text("racer"), "3")
    console = Console(width=80, record=True)
    console.print(table)
    assert "math [/] [bold]x" in console.export_text()


async def test_help_lists_keys_as_plain_text(start_app) -> None:
    pilot = await start_app()
    await ready_chat(pilot)
    await pilot.press("f1")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
    await pilot.pause()
    assert pilot.app._exception is None


async def test_the_api_monitor_shows_markup_as_typed() -> None:
    """The monitor's address line names the model, and its live panel shows
    the reply: neither is read as markup."""
    import json
    import urllib.request

    from racer_core.common.events import EngineInfo
    from racer_tui.api.monitor import ApiMonitor
    from racer_tui.api.server import ServerSettings
    from racer_tui.api.service import ApiService

    text = "x[/] or [bold] [@click=app.quit]q[/]"
    engine = FakeEngine(info=EngineInfo("model [/] [b]", "cpu", "float32"), reply=f"{text} end", gate_after=2)
    service = ApiService(engine, ServerSettings(), "127.0.0.1", 0)
    app = ApiMonitor(service)
    async with app.run_test(size=(140, 36)) as pilot:
        assert "model [/] [b]" in app.query_one("#address", Static).content.plain

        def ask() -> None:
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
            request = urllib.request.Request(service.url + "/chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=30).read()

        reply = asyncio.create_task(asyncio.to_thread(ask))
        await wait_for(pilot, lambda: engine.paused.is_set() and app.running is not None)
        await drain(pilot, app)  # every step so far handled...
        await wait_for(pilot, lambda: not app.step_redraws.due)  # ...and drawn (at the pace)
        assert app.query_one("#live-text", Static).content.plain.startswith("x[/] or [bold]")
        engine.release()
        await asyncio.wait_for(reply, 30)
        await wait_for(pilot, lambda: app.requests == 1)
        await pilot.pause(0.05)
        assert app._exception is None
        await pilot.press("ctrl+q")
