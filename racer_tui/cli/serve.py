"""`racer-tui serve` (or `--serve`): the chat in a browser through textual-serve.

textual-serve starts one app process per browser tab with the command built
here; the command must not carry `serve` again or it would serve recursively.
The app has no login: whoever reaches the port gets the user's chats, can load
any model path on this machine and start long benchmarks. So only loopback
addresses are served unless --allow-remote says otherwise.
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from racer_tui.cli import chat
from racer_tui.cli.errors import print_warning

HELP = "serve the chat in a browser (textual-serve)"
DESCRIPTION = "Serve the chat in a web browser: one app process per browser tab."
EPILOG = (
    "Only loopback addresses (127.0.0.1, ::1, localhost) are served unless --allow-remote is given: "
    "the app has no login, so anyone who reaches it sees your chat history, can load any model path "
    "on this machine and can start heavy benchmarks. Other web pages cannot drive it: a WebSocket whose "
    "Origin is not the served page's is refused, and so is a request whose Host is not the loopback "
    "address and port served (DNS rebinding). --allow-remote keeps the Origin check but accepts any Host "
    "(the machine is reached by its own names), so it does not stop DNS rebinding: use it on trusted "
    "networks only."
)
REACHABLE = "your chat history, any model path on this machine, and heavy benchmarks anyone can start"


def configure(p: argparse.ArgumentParser) -> None:
    chat.configure(p)
    g = p.add_argument_group("serving")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    g.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    g.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (the app has no login; read the note below)",
    )


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def build_serve_command(app_args: Sequence[str], python: str | None = None) -> str:
    """The shell command textual-serve runs for each browser session."""
    return shlex.join([python or sys.executable, "-m", "racer_tui.cli", *app_args])


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, **hooks: Any) -> int:
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    if not is_loopback(args.host):
        if not args.allow_remote:
            parser.error(
                f"--host {args.host} is reachable from other machines; the app has no login and would expose "
                f"{REACHABLE}. Add --allow-remote to serve it anyway."
            )
        print_warning(f"serving on {args.host} without a login: whoever reaches port {args.port} gets {REACHABLE}.")
    from racer_tui.serve_page import PageServer, page_url

    command = build_serve_command(chat.app_args(args))
    print(f"racer-tui: serving on {page_url(args.host, args.port)} (ctrl+c stops)", flush=True)
    PageServer(command, args.host, args.port, allow_remote=args.allow_remote).serve()
    return 0
