"""Issue 29: the chat's status line shows the context the chat takes of the
model's maximum, after each reply and when a chat opens."""

from __future__ import annotations

from pathlib import Path

from app_pilot import SIZE, SMALL, StartApp
from fake_engine import REPLY, FakeEngine, make_app, ready_chat, tokenize, wait_for

from racer_core.common.events import ContextUsage, EngineInfo
from racer_tui.widgets.status_line import StatusLine, context_text, fit_parts, status_parts, token_count


def status_text(chat) -> str:
    status = chat.query_one(StatusLine)
    return "".join(s.text for s in status.render_lines(status.region.reset_offset))


def fake_used(*texts: str) -> int:
    """FakeEngine.context_usage's count of a chat of these messages."""
    return sum(len(tokenize(t)) + 4 for t in texts) + 3 if texts else 0


# -- formatting ----------------------------------------------------------------


def test_token_counts_read_as_context_lengths_are_said() -> None:
    assert [token_count(n) for n in (0, 512, 1023, 1024, 1234, 8192, 10_000, 32_768, 131_072, 1 << 20)] == [
        "0", "512", "1023", "1k", "1.2k", "8k", "9.8k", "32k", "128k", "1M"]
    assert context_text(ContextUsage(1234, 8192)) == "ctx 1.2k/8k"


def test_the_context_is_dropped_after_steps_and_budget_and_before_device_and_dtype() -> None:
    info = EngineInfo("SmolLM2-135M-Instruct (Q4_1, embedded)", "cpu", "float32")
    parts = status_parts(None, "auto", "racer", info, ContextUsage(1234, 8192))
    assert fit_parts(parts, 200) == ("– tok/s │ MAT – │ 0 steps │ ctx 1.2k/8k │ budget auto │ racer │ "
                                     "SmolLM2-135M-Instruct (Q4_1, embedded) │ cpu float32")
    wide = fit_parts(parts, 92)  # steps and budget go first
    assert "ctx 1.2k/8k" in wide and "steps" not in wide and "budget" not in wide and wide.endswith("embedded) │ cpu float32")
    cut = fit_parts(parts, 66)  # then the model's name is cut, down to a few characters, for it
    assert len(cut) <= 66 and "ctx 1.2k/8k" in cut and "SmolLM2-135…" in cut and cut.endswith("cpu float32")
    narrow = fit_parts(parts, 59)  # then it goes; the device and dtype stay
    assert len(narrow) <= 59 and "ctx" not in narrow and narrow.endswith("cpu float32") and "racer" in narrow
    assert "ctx" not in fit_parts(status_parts(None, "auto", "racer", info), 200)  # an engine that cannot say


# -- the chat screen -----------------------------------------------------------------


async def test_the_status_line_shows_the_context_after_a_reply_and_when_the_chat_opens(tmp_path: Path) -> None:
    async with make_app(tmp_path, FakeEngine()).run_test(size=SIZE) as pilot:
        chat = await ready_chat(pilot)
        # A new chat uses nothing yet (counted once the model is loaded).
        await wait_for(pilot, lambda: chat.context == ContextUsage(fake_used(), 8192))
        await pilot.press(*"hello there", "enter")
        after = ContextUsage(fake_used("hello there", REPLY), 8192)
        await wait_for(pilot, lambda: chat.context == after and not chat.generating)
        await pilot.pause()
        assert context_text(after) in status_text(chat) and f"/{token_count(8192)}" in status_text(chat)

    # A restart opens the latest chat: its context is counted from the history.
    async with make_app(tmp_path, FakeEngine()).run_test(size=SIZE) as pilot:
        chat = await ready_chat(pilot)
        await wait_for(pilot, lambda: chat.chat_id is not None and chat.context == after)
        await pilot.pause()
        assert context_text(after) in status_text(chat)
        await pilot.press("ctrl+n")  # a new chat starts empty again
        await wait_for(pilot, lambda: chat.context == ContextUsage(fake_used(), 8192))


async def test_an_engine_that_cannot_say_shows_no_context(start_app: StartApp) -> None:
    engine = FakeEngine(context_limit=None)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.pause()
    assert chat.context is None and "ctx" not in status_text(chat) and "cpu float32" in status_text(chat)


async def test_at_80_columns_the_status_line_keeps_device_and_dtype_with_the_context(start_app: StartApp) -> None:
    engine = FakeEngine(info=EngineInfo("SmolLM2-135M-Instruct (Q4_1, embedded)", "cpu", "float32"))
    pilot = await start_app(engine, size=SMALL)
    chat = await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating and chat.context.used > fake_used())
    await pilot.pause()
    text = status_text(chat).rstrip()
    assert text.endswith("cpu float32") and "MAT" in text and len(text) <= SMALL[0]


async def test_removing_the_last_exchange_counts_the_context_again(start_app: StartApp) -> None:
    """Issue 41 (7): after !!remove the counter kept the removed exchange's tokens."""
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    for text in ("first question", "second one"):
        await pilot.press(*text, "enter")
        await wait_for(pilot, lambda: not chat.generating and chat.stats.steps)
    both = ContextUsage(fake_used("first question", REPLY, "second one", REPLY), 8192)
    await wait_for(pilot, lambda: chat.context == both)
    await pilot.press(*"!!remove", "enter")
    kept = ContextUsage(fake_used("first question", REPLY), 8192)
    await wait_for(pilot, lambda: len(chat.host.history.messages(chat.chat_id)) == 2)
    await pilot.pause()
    assert chat.context == kept and context_text(kept) in status_text(chat)


async def test_the_typed_message_shows_what_it_would_add_before_it_is_sent(start_app: StartApp) -> None:
    """Issue 41 (8): a long paste's size shows in the counter before Enter (ctx USED+PENDING/MAX)."""
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    await pilot.press(*"hello there", "enter")
    await wait_for(pilot, lambda: not chat.generating and chat.stats.steps)
    used = fake_used("hello there", REPLY)
    await wait_for(pilot, lambda: chat.context == ContextUsage(used, 8192))
    paste = "word " * 1500
    chat.query_one("#prompt").text = paste  # as a paste lands: one change
    pending = fake_used("hello there", REPLY, paste.strip()) - used
    await wait_for(pilot, lambda: chat.pending_tokens == pending)
    await pilot.pause()
    assert context_text(chat.context, pending) in status_text(chat)
    assert context_text(chat.context, pending) == f"ctx {used}+{token_count(pending)}/8k"
    await pilot.press("enter")  # sent: it is part of the chat now, nothing is pending
    await wait_for(pilot, lambda: not chat.generating and chat.context.used > used)
    await pilot.pause()
    assert chat.pending_tokens == 0 and "+" not in context_text(chat.context, chat.pending_tokens)
    assert f"{context_text(chat.context)} │" in status_text(chat)


def test_the_pending_count_reads_as_more_of_the_same_context() -> None:
    assert context_text(ContextUsage(619, 8192), 1234) == "ctx 619+1.2k/8k"
    assert context_text(ContextUsage(619, 8192), 0) == "ctx 619/8k"


def test_at_80_columns_a_typed_message_keeps_the_context_before_the_models_name() -> None:
    """The embedded model's status at 80x24 had no room for the counter once a
    message was typed: while one is, the name is cut further first."""
    info = EngineInfo("SmolLM2-135M-Instruct (Q4_1, embedded)", "cpu", "gguf Q4_1+Q8_0")
    width = SMALL[0] - 2 - len("no steps │ ")  # the line's width beside the folded chart's sparkline
    typed = fit_parts(status_parts(None, "auto", "racer", info, ContextUsage(619, 8192), 10_030), width,
                      context_first=True)
    assert "ctx 619+9.8k/8k" in typed and typed.endswith("cpu gguf Q4_1+Q8_0") and len(typed) <= width
    plain = fit_parts(status_parts(None, "auto", "racer", info, ContextUsage(619, 8192)), width)
    assert "ctx" not in plain and "SmolLM2-135M-Instru…" in plain  # as before with nothing typed
