"""Messages that worker threads post to the UI (post_message is thread-safe)."""

from __future__ import annotations

from textual.message import Message

from racer_core.common.events import Engine


class LoadProgress(Message):
    def __init__(self, text: str, fraction: float | None) -> None:
        super().__init__()
        self.text = text
        self.fraction = fraction


class EngineReady(Message):
    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine


class EngineFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ReplySteps(Message):
    """Steps of the reply `reply_id` wait in the chat's StepInbox."""

    def __init__(self, reply_id: int) -> None:
        super().__init__()
        self.reply_id = reply_id


class ReplyEnded(Message):
    """The reply `reply_id`'s stream is over: the conversation holds all of it."""

    def __init__(self, reply_id: int) -> None:
        super().__init__()
        self.reply_id = reply_id


class ReplyFailed(Message):
    def __init__(self, reply_id: int, error: str) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.error = error
