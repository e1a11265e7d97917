"""The open chat's steps, kept in memory for the step inspector.

Never written to the history: a record holds a whole draft tree per step,
which is worth keeping only while someone may look at it. The log is bounded
by the nodes it holds; past the bound the oldest replies go first.
"""

from __future__ import annotations

from dataclasses import dataclass

from racer_core.common.events import StepEvent, TokenPiece
from racer_core.common.step_record import StepRecord

MAX_NODES = 50_000  # about 10 MB of records


@dataclass(frozen=True)
class LoggedStep:
    step: int  # 1-based within the reply
    pieces: tuple[TokenPiece, ...]
    tree_size: int  # for the prefill: the prompt tokens it read
    record: StepRecord | None  # None for the prefill (nothing drafted) and for the anchors


class StepLog:
    def __init__(self, max_nodes: int = MAX_NODES) -> None:
        self.max_nodes = max_nodes
        self._replies: dict[int, list[LoggedStep]] = {}
        self._nodes = 0
        self.dropped: set[int] = set()  # replies whose steps were let go to stay in bounds

    def add(self, reply_id: int, event: StepEvent) -> None:
        if not event.pieces and event.finished:
            return  # a closing event with no step of its own
        steps = self._replies.setdefault(reply_id, [])
        steps.append(LoggedStep(event.step, event.pieces, event.tree_size, event.record))
        self._nodes += event.record.size if event.record is not None else 1
        while self._nodes > self.max_nodes and len(self._replies) > 1:
            oldest = next(iter(self._replies))
            self._nodes -= sum(s.record.size if s.record is not None else 1 for s in self._replies.pop(oldest))
            self.dropped.add(oldest)

    def steps(self, reply_id: int) -> list[LoggedStep]:
        return self._replies.get(reply_id, [])

    def forget(self, reply_id: int) -> None:
        for step in self._replies.pop(reply_id, []):
            self._nodes -= step.record.size if step.record is not None else 1

    def clear(self) -> None:
        self._replies.clear()
        self.dropped.clear()
        self._nodes = 0

    @property
    def nodes(self) -> int:
        return self._nodes
