"""`racer-tui --serve`: the same app in a browser through textual-serve.

textual-serve starts one app process per browser tab with the command built
here; the command must not carry --serve again or it would serve recursively.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence


def build_serve_command(app_args: Sequence[str], python: str | None = None) -> str:
    """The shell command textual-serve runs for each browser session."""
    parts = [python or sys.executable, "-m", "racer_tui.cli", *app_args]
    return shlex.join(parts)


def serve(app_args: Sequence[str], host: str, port: int) -> int:
    from textual_serve.server import Server

    command = build_serve_command(app_args)
    print(f"racer-tui: serving on http://{host}:{port} (ctrl+c stops)", flush=True)
    Server(command, host=host, port=port, title="racer-tui").serve()
    return 0
