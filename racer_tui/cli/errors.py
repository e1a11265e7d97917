"""How every racer-tui command reports: one line on stderr, no traceback."""

from __future__ import annotations

import sys

DEBUG_ENV = "RACER_TUI_DEBUG"  # set to 1 to see the traceback of an unexpected error


def print_error(message: str) -> None:
    print(f"racer-tui: error: {message}", file=sys.stderr)


def print_warning(message: str) -> None:
    print(f"racer-tui: warning: {message}", file=sys.stderr, flush=True)
