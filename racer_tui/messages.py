"""Messages that worker threads post to the UI (post_message is thread-safe)."""

from __future__ import annotations

from textual.message import Message

from racer_core.common.events import Engine, StepEvent


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


class ReplyStep(Message):
    """One decoding step of the reply `reply_id`."""

    def __init__(self, reply_id: int, event: StepEvent) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.event = event


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
