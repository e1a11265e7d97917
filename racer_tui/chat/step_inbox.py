"""A streaming reply's steps, handed from the engine's thread to the app's.

The engine makes 20 to 100 steps a second. Posted to the app one message
each, every step woke the app's thread: Textual dispatched the message and
the screen kept the step, a fraction of a millisecond each, and on a 2-core
CPU each wake-up takes a core from the model's two OpenMP threads, whose
step then waits for the one preempted (docs/design.md, "A streaming reply's
redraws"). So the engine's thread puts each step here, and tells the app's
thread only when it asked to be told (`arm`: once the screen has drawn what
it has, the next step is worth a redraw) or when the reply ends; the app's
thread takes all the waiting steps at once when it redraws.
"""

from __future__ import annotations

import threading

from racer_core.common.events import StepEvent


class StepInbox:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reply_id: int | None = None  # whose steps are taken (None: none)
        self._steps: list[StepEvent] = []
        self._armed = False

    def open(self, reply_id: int | None) -> None:
        """Take the steps of `reply_id` from now on (None: of no reply), the
        next one told at once; any steps waiting are dropped."""
        with self._lock:
            self._reply_id, self._steps, self._armed = reply_id, [], True

    def put(self, reply_id: int, step: StepEvent) -> bool:
        """(The engine's thread.) Keep `step`; True when the app's thread is to
        be told: it asked to be (`arm`), or the reply ends. A step of a reply
        no longer open is dropped (False)."""
        with self._lock:
            if reply_id != self._reply_id:
                return False
            self._steps.append(step)
            tell = self._armed or step.finished
            self._armed = False
            return tell

    def __len__(self) -> int:
        """The steps waiting."""
        with self._lock:
            return len(self._steps)

    def take(self) -> list[StepEvent]:
        """(The app's thread.) The steps waiting, oldest first; none left."""
        with self._lock:
            steps, self._steps = self._steps, []
            return steps

    def arm(self) -> None:
        """Tell the app's thread of the next step."""
        with self._lock:
            self._armed = True
