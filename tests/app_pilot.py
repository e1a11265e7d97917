"""The async Pilot fixture's type and the terminal sizes of the app tests.

The fixture itself (`start_app`) lives in tests/tui/conftest.py; tests import
these names to annotate it.
"""

from __future__ import annotations

from typing import Any, Protocol

from textual.pilot import Pilot

SIZE = (120, 36)  # the default test terminal: every panel shown
SMALL = (80, 24)  # the smallest terminal the layout is designed for


class StartApp(Protocol):
    async def __call__(self, engine_or_factory: Any = None, *, size: tuple[int, int] = SIZE, **kwargs: Any) -> Pilot:
        """Run the real app on a scripted engine (a FakeEngine when None); stopped after the test."""
        ...
