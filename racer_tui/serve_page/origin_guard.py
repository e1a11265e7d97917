"""Which requests `racer-tui serve` answers: no other web page may drive the app.

The app has no login, so two things a browser does for any page the user
visits are refused:

- a WebSocket whose Origin is not the page's own (any site's script can open
  `ws://127.0.0.1:PORT/ws`; browsers always send its Origin, so a connection
  without one comes from a program, not a page);
- on a loopback address, a request whose Host is not that address and port:
  a name that the attacker's DNS points at 127.0.0.1 makes the attacker's page
  same-origin with the server (DNS rebinding), but the browser still sends the
  attacker's name as the Host.

With --allow-remote the server is reached by whatever name the machine has,
so the Host is not checked (nor, then, DNS rebinding refused); the Origin
check stays.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

from racer_tui.host_names import split_host

WEBSOCKET_PATH = "/ws"


def refusal(request: web.Request, served_names: frozenset[str], check_host: bool) -> str | None:
    """Why `request` is refused (None: it is answered)."""
    host = request.headers.get("Host", "")
    if check_host:
        name, port = split_host(host)
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        listening = int(sock[1]) if sock else None
        if name not in served_names or (port or 80) != listening:
            return f"Host {host!r} is not the address served (a loopback address and port {listening})"
    if request.path == WEBSOCKET_PATH and "Origin" in request.headers:
        origin = request.headers["Origin"]
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.strip().lower():
            return f"a WebSocket from {origin!r}: only the page this server gave may connect"
    return None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def guard(served_names: frozenset[str], check_host: bool) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The middleware that answers a refused request 403 with the reason."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        why = refusal(request, served_names, check_host)
        if why is not None:
            return web.Response(status=403, text=f"racer-tui serve refused this request: {why}\n")
        return await handler(request)

    return middleware
