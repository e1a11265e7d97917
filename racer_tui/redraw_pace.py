"""How often a screen fed by an engine's steps redraws what the steps change.

A redraw costs the app's thread tens of milliseconds on a slow CPU (the chat
lays the whole screen out again as its reply grows). Drawn at every step of
a fast model, that took over half a core and the interpreter from the
model's own threads, which then ran at about a third of their speed alone
(docs/design.md, "A streaming reply's redraws"). So a screen keeps each step
as it comes (the chat: in a StepInbox, racer_tui/chat/step_inbox.py) and asks
its RedrawPace for a redraw: drawn now if the last one
is old enough, else once it is. The pace adapts: slower while drawing took
more than `share` of the app thread's time since the last redraw (measured
with time.thread_time()), faster again once it is well under.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

FASTEST_S = 0.1
"""Least time between two redraws while drawing is cheap."""
SLOWEST_S = 1.0
"""...and while it is not."""
SHARE = 0.1
"""The share of the app thread's time drawing may take before the pace slows."""


class RedrawPace:
    """Runs `draw` at the pace (see the module doc); `set_timer` is the
    screen's (Textual's set_timer: seconds and a callback, giving a timer
    with stop())."""

    def __init__(self, draw: Callable[[], None], set_timer: Callable[[float, Callable[[], None]], Any],
                 fastest: float = FASTEST_S, slowest: float = SLOWEST_S, share: float = SHARE) -> None:
        self._draw = draw
        self._set_timer = set_timer
        self.fastest, self.slowest, self.share = fastest, slowest, share
        self.every = fastest  # the pace now: least seconds between redraws
        self._timer: Any = None  # the next redraw's, when one is due
        self._drawn_at = 0.0  # time.monotonic() of the last redraw (0: none yet)
        self._drawn_cpu = 0.0  # and the app thread's time.thread_time() then

    @property
    def due(self) -> bool:
        """A redraw is waiting for its time."""
        return self._timer is not None

    def request(self) -> None:
        """Something changed: redraw now, or once the pace allows."""
        if self._timer is not None:
            return  # one is due already
        wait = self._drawn_at + self.every - time.monotonic()
        if wait <= 0 or not self._drawn_at:  # the first: at once (however soon after boot the clock starts)
            self.draw_now()
        else:
            self._timer = self._set_timer(wait, self.draw_now)

    def draw_now(self) -> None:
        """Redraw at once (the end of a reply, say), whatever the pace."""
        self.cancel()
        self._adapt()
        self._draw()

    def cancel(self) -> None:
        """Drop a redraw that is due (what it would draw is gone)."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def _adapt(self) -> None:
        now, cpu = time.monotonic(), time.thread_time()
        if self._drawn_at:
            busy = (cpu - self._drawn_cpu) / max(now - self._drawn_at, 1e-3)
            if busy > self.share:
                self.every = min(2 * self.every, self.slowest)
            elif busy < self.share / 3:
                self.every = max(self.every / 2, self.fastest)
        self._drawn_at, self._drawn_cpu = now, cpu
