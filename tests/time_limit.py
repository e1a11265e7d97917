"""A wall-clock bound that fails the code under it, not the test process.

SIGALRM raises in the main thread (where pytest runs tests) at the next
bytecode or interrupted system call, so a hung cluster start or a stuck test
fails with TimeoutError and the run goes on. Unix only, main thread only.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    def expired(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"{what} took longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
