"""One open chat, without any widget: its row in the history, the engine's
conversation, and the turn in flight (send, stream, save every few seconds,
finish, roll back; regenerate, edit and remove take the last exchange back).

The chat screen shows a ChatSession and forwards the user's actions to it;
the history, the engine's conversation and the turn stay in step here, so
they are tested without Textual (tests/tui/test_chat_session.py).

A failure that stops an operation raises (RacerError; HistoryError is one);
one the chat goes on past (a save while streaming, a rollback's delete) is
handed to `on_history_error`, and the chat goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from racer_core.common.errors import RacerError
from racer_core.common.events import ContextUsage, Conversation, Engine, StepEvent
from racer_core.common.stats import Stats
from racer_tui.chat.attachments import intact_images, stored
from racer_tui.chat.json_mode import reply_grammar
from racer_tui.history import HistoryError, HistoryStore, Run, StoredMessage, title_for

if TYPE_CHECKING:
    from racer_core.common.config import GenerationConfig
    from racer_core.common.events import Source
    from racer_core.engine.chat_image import ChatImage
    from racer_tui.settings import Settings

SAVE_EVERY_S = 2.0  # a streaming reply is written to the history this often, to survive a kill
INTERRUPTED = "interrupted"  # the finish reason a reply has until it finishes (racer-tui closed meanwhile)

EngineMessages = tuple[list[dict[str, str]], dict[int, tuple["ChatImage", ...]]]


def append_run(runs: list[Run], source: Source, text: str) -> None:
    """Add streamed text to a reply's coloured runs, joining a run of the same source."""
    if runs and runs[-1][0] == source:
        runs[-1] = (source, runs[-1][1] + text)
    else:
        runs.append((source, text))


def drop_messages(conv: Conversation, start: int, end: int) -> None:
    """Remove the engine conversation's messages `start` to `end` (excluded)
    in place, with their images; the later messages' images move up with them."""
    del conv.messages[start:end]
    images = conv.images  # keyed by message index
    moved = {i - (end - start) if i >= end else i: v for i, v in images.items() if not start <= i < end}
    images.clear()
    images.update(moved)


def trim_conversation(conv: Conversation, keep: int) -> None:
    """Cut the engine's conversation to its first `keep` messages in place, so
    its cache of the shared prefix stays in use."""
    drop_messages(conv, keep, len(conv.messages))


def fit_context(engine: Engine, conv: Conversation, text: str, images: list[ChatImage], max_new: int) -> int:
    """Drop the oldest exchanges (never the system prompt) from the engine's
    conversation until it, with the message `text` and its `images`, leaves
    room in the model's context for a reply of `max_new` tokens (at most a
    quarter of the context: a long reply stops at the context's end anyway);
    the number of messages dropped (0 when it fits or the engine cannot say;
    a message too long alone is left to the engine to refuse)."""
    first = 1 if conv.messages and conv.messages[0]["role"] == "system" else 0
    dropped = 0
    while len(conv.messages) > first:
        pictures = dict(conv.images)
        if images:
            pictures[len(conv.messages)] = tuple(images)
        usage = engine.context_usage([*conv.messages, {"role": "user", "content": text}], pictures or None)
        if usage is None or usage.used + min(max_new, usage.limit // 4) <= usage.limit:
            break
        end = first + 1  # the oldest exchange: its user message and what answered it
        while end < len(conv.messages) and conv.messages[end]["role"] != "user":
            end += 1
        drop_messages(conv, first, end)
        dropped += end - first
    return dropped


@dataclass
class Turn:
    """The exchange in flight: what was sent, its two history rows, the reply
    so far, and what the prompt gets back should the reply fail."""

    reply_id: int
    text: str
    images: list[ChatImage]
    config: GenerationConfig
    conv: Conversation
    user_row: int
    reply_row: int
    typed: str  # the prompt's text as typed (inline image tags included)
    attached: list[ChatImage]  # the attachment bar's images
    made_chat: int | None = None  # the chat this turn's message made (a first message): gone if it fails
    stats: Stats = field(default_factory=Stats)
    runs: list[Run] = field(default_factory=list)
    next_save: float = 0.0  # the clock's time of the next save while streaming
    dropped: int = 0  # the oldest messages left out for this turn to fit the model's context (fit_context)

    @property
    def content(self) -> str:
        return "".join(t for _, t in self.runs)

    def record(self, finish_reason: str | None) -> dict:
        """The reply's statistics as the history keeps them."""
        stats, temperature = self.stats, self.config.temperature
        return {
            "tokens": stats.tokens,
            "steps": stats.steps,
            "seconds": stats.seconds,
            "accept_lengths": stats.accept_lengths,
            "method": self.config.method,
            "finish_reason": finish_reason,
            **({"temperature": temperature} if temperature else {}),
            **({"grammar": self.config.grammar.kind} if self.config.grammar is not None else {}),
        }


@dataclass(frozen=True)
class TakenBack:
    """The last exchange, taken back: its user message and the messages before it."""

    message: StoredMessage
    kept: list[StoredMessage]
    reply_stats: dict = field(default_factory=dict)  # the reply's stored statistics (its grammar: regenerate keeps it)


class ChatSession:
    """The open chat (`chat_id` None: a new one, made by its first message)."""

    def __init__(
        self,
        history: HistoryStore,
        settings: Callable[[], Settings],
        *,
        on_history_error: Callable[[HistoryError], None],
        on_notice: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        save_every: float | None = None,
    ) -> None:
        self.history = history
        self._settings = settings  # read when used: the user may change them meanwhile
        self._history_error = on_history_error
        self._notice = on_notice  # what a new engine conversation has to say (a damaged corpus)
        self._clock = clock
        self.save_every = SAVE_EVERY_S if save_every is None else save_every
        self.chat_id: int | None = None
        self.conv: Conversation | None = None
        self._conv_engine: Engine | None = None
        self.turn: Turn | None = None  # the turn in flight
        self._latest: Turn | None = None  # the latest turn, in flight or finished
        self.reply_id = 0  # the latest turn's; each turn gets the next

    # -- which chat ------------------------------------------------------------

    def open(self, chat_id: int | None) -> None:
        """Show another chat (None: a new one); the engine's conversation is rebuilt from it."""
        self.chat_id = chat_id
        self.conv = None

    def forget_conversation(self) -> None:
        """The engine or the system prompt changed: the conversation is rebuilt on the next message."""
        self.conv = None

    def system_prompt(self) -> str:
        """The open chat's system prompt; a new chat's (or an unreadable one's) is the settings'."""
        if self.chat_id is not None:
            try:
                return self.history.system_prompt(self.chat_id)
            except HistoryError as exc:
                self._history_error(exc)
        return self._settings().system_prompt

    def set_system_prompt(self, text: str) -> None:
        if self.chat_id is not None:
            try:
                self.history.set_system_prompt(self.chat_id, text)
            except HistoryError as exc:
                self._history_error(exc)
        self.conv = None  # rebuilt with the new system prompt

    # -- the engine's view of the chat --------------------------------------------

    def engine_messages(self, history: list[StoredMessage], with_system: bool = True,
                        start: int = 0) -> EngineMessages:
        """Stored turns as an engine reads them: the messages (after the system
        prompt, `with_system`) and their images by message index (from `start`),
        those whose files are still the ones sent."""
        system = self.system_prompt() if with_system else ""
        messages = [{"role": "system", "content": system}] if system else []
        images: dict[int, tuple[ChatImage, ...]] = {}
        for message in history:
            messages.append({"role": message.role, "content": message.content})
            if message.images:
                images[start + len(messages) - 1] = tuple(intact_images(message.images))
        return messages, images

    def context_usage(self, engine: Engine | None, pending: str = "") -> ContextUsage | None:
        """The open chat's tokens of the model's maximum, as the model would read
        it next (with `pending`, a message not sent yet, as if it were); None
        without an engine, or when it cannot say."""
        if engine is None:
            return None
        extra = [{"role": "user", "content": pending}] if pending else []
        try:
            if self.conv is not None and self._conv_engine is engine:
                return engine.context_usage([*self.conv.messages, *extra], self.conv.images)
            history = [] if self.chat_id is None else self.history.messages(self.chat_id)
            messages, images = self.engine_messages(history)
            return engine.context_usage([*messages, *extra], images)
        except RacerError:  # an unreadable chat (it says so in its place): nothing to count
            return None

    def _conversation(self, engine: Engine, history: list[StoredMessage]) -> Conversation:
        if self.conv is None or self._conv_engine is not engine:
            system = self.system_prompt() or None
            conv = engine.new_conversation(system_prompt=system, learn=self._settings().learn_from_chats)
            if conv.notice:
                self._notice(conv.notice)
            # Earlier turns of a reopened chat: the engine templates them into the prompt,
            # with the images whose files are still the ones sent.
            messages, earlier_images = self.engine_messages(history, with_system=False, start=len(conv.messages))
            conv.messages.extend(messages)
            conv.images.update(earlier_images)
            self.conv, self._conv_engine = conv, engine
        return self.conv

    # -- a turn ------------------------------------------------------------------

    def begin(self, engine: Engine, text: str, images: list[ChatImage] | None = None, *,
              typed: str | None = None, attached: list[ChatImage] | None = None,
              temperature: float | None = None, as_json: bool = False) -> Turn:
        """Start a reply to `text` with its `images`: the chat (made by its first
        message) gets the question and the reply's row; the caller runs
        `turn.conv.send`. RacerError (HistoryError included) when nothing was
        sent. Should the reply fail, `roll_back` gives back `typed` (default:
        `text`) and `attached` (default: `images`). `temperature`: this reply's
        instead of the settings' (a sampled regeneration). `as_json`: this reply is
        one JSON object (`!!json`), as every reply is with the json_mode setting."""
        images = list(images or [])
        settings = self._settings()
        config = settings.generation
        if temperature is not None:
            config = config.replace(temperature=temperature)
        if (grammar := reply_grammar(as_json, settings.json_mode)) is not None:
            config = config.replace(grammar=grammar)
        made_chat = None
        if self.chat_id is None:
            self.chat_id = made_chat = self.history.create_chat(title_for(text), settings.system_prompt)
        try:
            conv = self._conversation(engine, [] if made_chat is not None else self.history.messages(self.chat_id))
            dropped = fit_context(engine, conv, text, images, config.max_new_tokens)
            message = StoredMessage("user", text, images=[stored(i) for i in images])
            # The reply's row is written with the question, marked interrupted, and
            # rewritten as it streams and when it ends: an app killed meanwhile
            # leaves the chat saying so, with what had come.
            reply = StoredMessage("assistant", "", stats={"method": config.method, "finish_reason": INTERRUPTED})
            user_row, reply_row = self.history.add_messages(self.chat_id, [message, reply])
        except RacerError:
            if made_chat is not None:
                self._drop_made_chat(made_chat)
            raise
        conv.learn = conv.learn and settings.learn_from_chats  # turned off: stops at once
        self.reply_id += 1
        self.turn = Turn(
            self.reply_id, text, images, config, conv, user_row, reply_row,
            typed=text if typed is None else typed, attached=list(images if attached is None else attached),
            made_chat=made_chat, next_save=self._clock() + self.save_every, dropped=dropped,
        )
        self._latest = self.turn
        return self.turn

    def current(self, reply_id: int) -> Turn | None:
        """The turn in flight when it is `reply_id`'s (a late message of an older one is ignored)."""
        return self.turn if self.turn is not None and self.turn.reply_id == reply_id else None

    def add_step(self, event: StepEvent) -> bool:
        """One streamed step of the turn in flight; the reply so far is saved
        every `save_every` seconds. True when the step counts in the statistics
        (a closing event may carry no step)."""
        turn = self.turn
        assert turn is not None
        for piece in event.pieces:
            append_run(turn.runs, piece.source, piece.text)
        counted = bool(event.pieces) or not event.finished
        if counted:
            turn.stats.add_step(event)
        if not event.finished and self._clock() >= turn.next_save:
            turn.next_save = self._clock() + self.save_every
            if not self._save(turn, turn.record(INTERRUPTED)):
                turn.next_save = float("inf")  # said once; the finished reply tries again
        return counted

    def finish(self, finish_reason: str | None) -> dict:
        """The turn ended: its reply saved with its statistics (returned)."""
        turn = self.turn
        assert turn is not None
        stats = turn.record(finish_reason)
        self._save(turn, stats)
        self.turn = None
        return stats

    def roll_back(self) -> Turn:
        """The latest turn failed (even after its last step): its rows leave the
        history and the engine's conversation is rebuilt from it next time, so
        they agree; the turn (what was typed and attached) is returned for the prompt."""
        turn = self._latest
        assert turn is not None
        if turn.made_chat is not None:  # its first message: no empty chat stays behind
            self._drop_made_chat(turn.made_chat)
        else:
            try:
                for row in (turn.reply_row, turn.user_row):
                    self.history.delete_message(row)
            except HistoryError as exc:
                self._history_error(exc)
        self.conv = None
        self.turn = None
        return turn

    def _drop_made_chat(self, chat_id: int) -> None:
        """A first message failed: the chat it made leaves the history (its
        rows with it), and the next message makes a new one."""
        try:
            self.history.delete_chat(chat_id)
        except HistoryError as exc:
            self._history_error(exc)
        if self.chat_id == chat_id:
            self.chat_id = None
        self.conv = None

    def _save(self, turn: Turn, stats: dict) -> bool:
        """Write the reply so far to its row; False (and a report) when that failed."""
        # The engine's own record of the reply (its final detokenization) is what
        # it sees again next turn; the runs keep the colours.
        content = turn.content
        if self.conv is not None and self.conv.messages and self.conv.messages[-1]["role"] == "assistant":
            content = self.conv.messages[-1]["content"]
        try:
            self.history.update_message(turn.reply_row, StoredMessage("assistant", content, list(turn.runs), stats))
        except HistoryError as exc:  # the reply stays on screen and in the engine's conversation
            self._history_error(exc)
            return False
        return True

    # -- the last exchange: regenerate, edit and remove -------------------------------

    def take_back_last(self) -> TakenBack | None:
        """Remove the last user message and the reply after it, from the history
        and the engine's conversation; None when there is none. Regenerate
        sends the message again, edit sends new words with its images, remove
        stops here. HistoryError when the history could not be changed."""
        if self.chat_id is None:
            return None
        messages = self.history.messages(self.chat_id)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
        if last_user is None:
            return None
        self.history.drop_last_messages(self.chat_id, len(messages) - last_user)
        kept = messages[:last_user]
        if self.conv is not None:  # from its end: its oldest turns may be cut to the context (fit_context)
            system = sum(1 for m in self.conv.messages if m["role"] == "system")
            trim_conversation(self.conv, max(system, len(self.conv.messages) - (len(messages) - last_user)))
        reply = next((m for m in messages[last_user + 1:] if m.role == "assistant"), None)
        return TakenBack(messages[last_user], kept, dict(reply.stats or {}) if reply is not None else {})
