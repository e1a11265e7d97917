"""The chat's StepInbox: the engine's thread keeps every step and tells the
app's thread only of the step it waits for and of the last one."""

from __future__ import annotations

from racer_core.common.events import Source, StepEvent, TokenPiece
from racer_tui.chat.step_inbox import StepInbox


def _step(n: int, finished: bool = False) -> StepEvent:
    return StepEvent(n, (TokenPiece(n, f"t{n} ", Source.MODEL),), 1, 4, 0.0, 0.0, 0.0, finished,
                     "eos" if finished else None)


def test_only_the_awaited_step_and_the_last_are_told_and_all_are_kept() -> None:
    inbox = StepInbox()
    inbox.open(7)
    told = [inbox.put(7, _step(n)) for n in (1, 2, 3)]
    assert told == [True, False, False]  # the first step after opening, then none until asked
    assert [s.step for s in inbox.take()] == [1, 2, 3] and not inbox.take()
    inbox.arm()  # drawn: the next step is worth a redraw
    assert inbox.put(7, _step(4)) and not inbox.put(7, _step(5))
    assert inbox.put(7, _step(6, finished=True))  # the last: always told
    assert [s.step for s in inbox.take()] == [4, 5, 6]


def test_steps_of_a_reply_no_longer_open_are_dropped() -> None:
    inbox = StepInbox()
    assert not inbox.put(1, _step(1)) and len(inbox) == 0  # nothing open
    inbox.open(1)
    inbox.put(1, _step(1))
    inbox.open(2)  # a new reply: the old one's waiting steps go
    assert len(inbox) == 0
    assert not inbox.put(1, _step(2, finished=True))  # a stopped worker's straggler
    assert inbox.put(2, _step(1)) and [s.step for s in inbox.take()] == [1]
    inbox.open(None)
    assert not inbox.put(2, _step(2)) and len(inbox) == 0
