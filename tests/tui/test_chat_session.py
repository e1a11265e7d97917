"""The chat without Textual: a ChatSession keeps the history, the engine's
conversation and the turn in flight in step, as the chat screen relies on
(send, stream, save every few seconds, finish, roll back; regenerate, edit and
remove take the last exchange back). Time is a fake clock: no test waits."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_engine import REPLY, FakeConversation, FakeEngine, tokenize

from racer_core.common.events import StepEvent
from racer_tui.chat.session import INTERRUPTED, ChatSession, Turn, drop_messages, trim_conversation
from racer_tui.history import HistoryError, HistoryStore
from racer_tui.settings import Settings


class Clock:
    """The session's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Chat:
    """A session on its own history file, with what it reported."""

    def __init__(self, tmp_path: Path, settings: Settings | None = None) -> None:
        self.history = HistoryStore(tmp_path / "history.sqlite3")
        self.settings = settings or Settings()
        self.errors: list[HistoryError] = []
        self.notices: list[str] = []
        self.clock = Clock()
        self.session = ChatSession(self.history, lambda: self.settings, on_history_error=self.errors.append,
                                   on_notice=self.notices.append, clock=self.clock, save_every=2.0)
        self.engine = FakeEngine()

    def rows(self) -> list[tuple[str, str]]:
        assert self.session.chat_id is not None
        return [(m.role, m.content) for m in self.history.messages(self.session.chat_id)]

    def conversation(self) -> list[tuple[str, str]]:
        assert self.session.conv is not None
        return [(m["role"], m["content"]) for m in self.session.conv.messages]


def stream(turn: Turn) -> list[StepEvent]:
    """The engine's whole reply to the turn, as the screen's worker runs it
    (ahead of the screen, which takes the events afterwards)."""
    return list(turn.conv.send(turn.text, turn.config, images=turn.images))


def reply(chat: Chat, text: str, **kwargs) -> dict:
    """One turn, sent, streamed and finished; its stored statistics."""
    events = stream(chat.session.begin(chat.engine, text, **kwargs))
    for event in events:
        chat.session.add_step(event)
    return chat.session.finish(events[-1].finish_reason)


@pytest.fixture
def chat(tmp_path: Path) -> Chat:
    return Chat(tmp_path)


def test_a_turn_makes_the_chat_and_its_finished_reply_is_saved(chat: Chat) -> None:
    session = chat.session
    turn = session.begin(chat.engine, "How does RACER draft?")
    assert session.chat_id is not None and session.turn is turn and turn.reply_id == session.reply_id == 1
    # Written with the question at once, marked interrupted until it ends (a killed app leaves it so).
    question, pending = chat.history.messages(session.chat_id)
    assert (question.role, question.content) == ("user", "How does RACER draft?")
    assert (pending.content, pending.stats["finish_reason"]) == ("", INTERRUPTED)

    events = stream(turn)
    counted = [session.add_step(event) for event in events]
    stats = session.finish(events[-1].finish_reason)

    assert all(counted) and session.turn is None
    stored = chat.history.messages(session.chat_id)[-1]
    assert stored.content == REPLY and "".join(text for _, text in stored.runs) == REPLY
    assert len({source for source, _ in stored.runs}) > 1  # the runs keep each token's source
    assert stored.stats == stats
    assert stats["finish_reason"] == "eos" and stats["tokens"] == len(tokenize(REPLY))
    assert stats["steps"] == len(events) - 1 == len(stats["accept_lengths"])  # the prefill is not a step
    assert chat.conversation() == [("user", "How does RACER draft?"), ("assistant", REPLY)]
    assert chat.errors == []


def test_a_streaming_reply_is_saved_every_few_seconds_of_the_clock(chat: Chat) -> None:
    session = chat.session
    turn = session.begin(chat.engine, "How does RACER draft?")
    events = turn.conv.send(turn.text, turn.config)  # step by step: the engine has not finished

    def step(at: float) -> tuple[str, str | None]:
        """One more step at `at` seconds after the send; the reply's row after it."""
        chat.clock.now = 100.0 + at
        session.add_step(next(events))
        row = chat.history.messages(session.chat_id)[-1]
        return row.content, row.stats["finish_reason"]

    assert step(0.0) == ("", INTERRUPTED)
    assert step(1.9) == ("", INTERRUPTED)  # not yet: every 2 s
    so_far = turn.content
    assert step(2.0) == (turn.content, INTERRUPTED) and len(turn.content) > len(so_far)  # saved, still marked
    saved = turn.content
    assert step(3.5) == (saved, INTERRUPTED)  # the next save is 2 s after that one
    assert step(4.0) == (turn.content, INTERRUPTED) and turn.content != saved


def test_a_save_that_fails_is_reported_once_and_the_reply_goes_on(chat: Chat) -> None:
    session = chat.session
    turn = session.begin(chat.engine, "How does RACER draft?")
    events = stream(turn)
    chat.history.close()  # the history cannot be written any more
    for at, event in enumerate(events):
        chat.clock.now = 100.0 + 2.0 * at
        session.add_step(event)
    assert len(chat.errors) == 1  # said once, not at every step
    session.finish(events[-1].finish_reason)  # the finished reply tries again
    assert len(chat.errors) == 2 and session.turn is None
    assert turn.content == REPLY


def test_a_failed_turn_is_rolled_back_and_the_next_one_sees_the_chat_as_stored(chat: Chat) -> None:
    reply(chat, "first")
    session = chat.session
    chat.engine.fail_with = RuntimeError("the engine broke")
    turn = session.begin(chat.engine, "second", typed="second as typed", attached=[])
    with pytest.raises(RuntimeError):
        stream(turn)
    assert session.roll_back() is turn and turn.typed == "second as typed"  # what the prompt gets back
    assert session.turn is None and session.conv is None
    assert chat.rows() == [("user", "first"), ("assistant", REPLY)]

    chat.engine.fail_with = None
    reply(chat, "third")
    # the engine's conversation was rebuilt from the history: the failed message is not in it
    assert [(m["role"], m["content"]) for m in chat.engine.prompts[-1][1]] == [
        ("user", "first"), ("assistant", REPLY), ("user", "third")]
    assert chat.rows() == chat.conversation()


def test_a_failed_first_turn_leaves_no_empty_chat(chat: Chat) -> None:
    """Issue 41 (8): the chat made by a first message that failed stayed, with 0 messages."""
    session = chat.session
    chat.engine.fail_with = RuntimeError("the prompt is longer than the model's context")
    turn = session.begin(chat.engine, "a long paste")
    with pytest.raises(RuntimeError):
        stream(turn)
    session.roll_back()
    assert session.chat_id is None and session.conv is None and chat.history.list_chats() == []
    chat.engine.fail_with = None
    reply(chat, "shorter")  # the next message makes the chat
    assert [c.id for c in chat.history.list_chats()] == [session.chat_id] and len(chat.rows()) == 2


def test_a_first_turn_the_history_refuses_leaves_no_empty_chat(chat: Chat, monkeypatch) -> None:
    def refuse(*_args):
        raise HistoryError("cannot save the message: disk full")

    monkeypatch.setattr(chat.history, "add_messages", refuse)
    with pytest.raises(HistoryError):
        chat.session.begin(chat.engine, "hello")
    assert chat.session.chat_id is None and chat.history.list_chats() == []


def test_regenerate_takes_the_last_exchange_back_and_sends_its_message_again(chat: Chat) -> None:
    reply(chat, "first")
    reply(chat, "second")
    session = chat.session
    conv = session.conv
    taken = session.take_back_last()
    assert taken is not None and taken.message.content == "second"
    assert [m.content for m in taken.kept] == ["first", REPLY]
    assert chat.rows() == [("user", "first"), ("assistant", REPLY)]
    assert session.conv is conv and chat.conversation() == chat.rows()  # trimmed in place: its cache stays

    stats = reply(chat, taken.message.content, temperature=0.8)
    assert chat.rows() == [("user", "first"), ("assistant", REPLY), ("user", "second"), ("assistant", REPLY)]
    assert stats["temperature"] == 0.8 and chat.engine.configs[-1].temperature == 0.8
    assert [m["content"] for m in chat.engine.prompts[-1][1]] == ["first", REPLY, "second"]
    assert chat.history.messages(session.chat_id)[-1].stats["temperature"] == 0.8


def test_edit_replaces_the_last_message_and_remove_drops_exchanges_until_none(tmp_path: Path) -> None:
    chat = Chat(tmp_path, Settings(system_prompt="Be brief."))
    session = chat.session
    assert session.take_back_last() is None  # a new chat has nothing to take back
    reply(chat, "first")
    reply(chat, "secnod")
    taken = session.take_back_last()
    assert taken is not None
    reply(chat, "second")
    assert chat.rows() == [("user", "first"), ("assistant", REPLY), ("user", "second"), ("assistant", REPLY)]
    assert chat.conversation() == [("system", "Be brief."), *chat.rows()]  # the system prompt stays

    assert session.take_back_last() is not None  # remove
    assert chat.rows() == [("user", "first"), ("assistant", REPLY)]
    assert chat.conversation() == [("system", "Be brief."), ("user", "first"), ("assistant", REPLY)]
    assert session.take_back_last() is not None
    assert chat.rows() == [] and chat.conversation() == [("system", "Be brief.")]
    assert session.take_back_last() is None


def test_trimming_a_conversation_drops_the_images_of_the_messages_cut(chat: Chat) -> None:
    conv = FakeConversation(chat.engine, messages=[{"role": "user", "content": str(i)} for i in range(4)],
                            images={0: ("a",), 2: ("b",), 3: ("c",)})
    trim_conversation(conv, 2)
    assert [m["content"] for m in conv.messages] == ["0", "1"] and conv.images == {0: ("a",)}


def test_dropping_messages_moves_the_later_images_up(chat: Chat) -> None:
    conv = FakeConversation(chat.engine, messages=[{"role": "user", "content": str(i)} for i in range(5)],
                            images={0: ("a",), 1: ("b",), 3: ("c",)})
    drop_messages(conv, 1, 3)
    assert [m["content"] for m in conv.messages] == ["0", "3", "4"] and conv.images == {0: ("a",), 1: ("c",)}


def _words(text: str) -> int:
    return len(tokenize(text))


def test_a_chat_longer_than_the_context_leaves_out_its_oldest_exchanges(tmp_path: Path) -> None:
    """Issue 41: the model reads the system prompt and the newest exchanges
    that fit with room for the reply, instead of failing; the history keeps all."""
    chat = Chat(tmp_path, Settings(system_prompt="Be brief."))
    exchange = _words("q1") + 4 + _words(REPLY) + 4  # the fake engine's count (fake_engine.py)
    system = _words("Be brief.") + 4
    # room for the system prompt, one exchange and the next question (+3 for the reply's
    # start), with a quarter of the context left for the reply; not for two exchanges
    chat.engine.context_limit = limit = (system + exchange + 5 + 3) * 4 // 3 + 4
    assert chat.settings.generation.max_new_tokens >= limit // 4
    for text in ("q1", "q2"):
        reply(chat, text)
        assert chat.session._latest is not None and chat.session._latest.dropped == 0
    reply(chat, "q3")
    assert chat.session._latest is not None and chat.session._latest.dropped == 2
    assert [m["content"] for m in chat.engine.prompts[-1][1]] == ["Be brief.", "q2", REPLY, "q3"]
    assert [c for _, c in chat.rows()] == ["q1", REPLY, "q2", REPLY, "q3", REPLY]  # the history keeps all
    # taking back the last exchange takes it from the end of what the model reads
    assert chat.session.take_back_last() is not None
    assert chat.conversation() == [("system", "Be brief."), ("user", "q2"), ("assistant", REPLY)]
    # reopened, the chat is cut again as it is sent
    chat.session.open(chat.session.chat_id)
    reply(chat, "q3 again")
    assert [m["content"] for m in chat.engine.prompts[-1][1]] == ["Be brief.", "q2", REPLY, "q3 again"]


def test_another_chat_or_engine_gets_a_new_conversation(chat: Chat) -> None:
    reply(chat, "first")
    session = chat.session
    first = session.chat_id
    session.open(None)
    assert session.chat_id is None and session.conv is None
    reply(chat, "elsewhere")
    assert session.chat_id != first and chat.rows() == [("user", "elsewhere"), ("assistant", REPLY)]

    session.open(first)
    reply(chat, "again")
    assert [m["content"] for m in chat.engine.prompts[-1][1]] == ["first", REPLY, "again"]
    old = session.conv
    chat.engine = FakeEngine()  # a model loaded meanwhile: its own conversation, from the history
    reply(chat, "more")
    assert session.conv is not old
    assert [m["content"] for m in chat.engine.prompts[-1][1]] == ["first", REPLY, "again", REPLY, "more"]


def test_a_turn_that_fails_after_its_last_step_is_rolled_back_too(chat: Chat) -> None:
    """The engine may fail after its last step (it learns from the reply then):
    the finished turn goes, as a failed one does, so history and engine agree."""
    reply(chat, "first")
    reply(chat, "second")
    assert chat.session.turn is None
    assert chat.session.roll_back().text == "second"
    assert chat.rows() == [("user", "first"), ("assistant", REPLY)] and chat.session.conv is None


def test_a_reply_cut_inside_its_last_character_is_stored_without_a_replacement_character(tmp_path: Path) -> None:
    # issue 41: the TUI stored "...🌍\ufffd" for a reply max_tokens cut inside its last character
    from engine_helpers import CUT_REPLY, cut_reply_engine

    chat = Chat(tmp_path, Settings(learn_from_chats=False))  # the scripted decoder has no cache to learn from
    chat.engine = cut_reply_engine()
    reply(chat, "Repeat exactly: 日本語 🙂 🚀")
    assert chat.rows()[-1] == ("assistant", CUT_REPLY)
    assert chat.conversation()[-1] == ("assistant", CUT_REPLY)
