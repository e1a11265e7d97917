"""Issue 41 (b): a chat longer than the model's context is cut to it, said on screen."""

from __future__ import annotations

from app_pilot import StartApp
from fake_engine import FakeEngine, ready_chat, wait_for

from racer_tui.widgets.turns import ReplyTurn, UserTurn


async def test_a_long_chat_leaves_out_its_oldest_messages_and_says_so(start_app: StartApp) -> None:
    engine = FakeEngine(context_limit=120)  # the third question and two exchanges leave no quarter for a reply
    pilot = await start_app(engine)
    app = pilot.app
    chat = await ready_chat(pilot)
    for sent, text in enumerate(("one", "two", "three"), 1):
        await pilot.press(*text, "enter")
        await wait_for(pilot, lambda: len(engine.configs) == sent and not chat.generating)  # noqa: B023
    user_texts = [m["content"] for m in engine.prompts[-1][1] if m["role"] == "user"]
    assert user_texts[-1] == "three" and "one" not in user_texts
    notices = [n.message for n in app._notifications if n.title == "Context"]
    assert len(notices) == 1 and "left out" in notices[0]
    assert [t.message for t in chat.query(UserTurn)] == ["one", "two", "three"]  # the chat shows them all
    assert len(chat.query(ReplyTurn)) == 3
