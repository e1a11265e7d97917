"""The web page `racer-tui serve` gives a browser, on top of textual-serve.

textual-serve's own page has no title, answers /favicon.ico with 404 and loads
its font from Google's font service (so offline the text falls back), and
writes its addresses as http://HOST:PORT, which is not an address for an IPv6
host. This server keeps textual-serve's app sessions and swaps in our page
(app_index.html beside this file), an icon drawn from the chat's palette, and
bracketed IPv6 addresses; and it refuses what other web pages could do with
the app (origin_guard.py).
"""

from __future__ import annotations

import io
import ipaddress
from functools import lru_cache
from pathlib import Path

from aiohttp import web
from textual_serve.server import Server

from racer_tui.colors import LOGITS_GREEN, RETRIEVAL_GREEN
from racer_tui.host_names import LOOPBACK_NAMES
from racer_tui.serve_page.origin_guard import guard

TITLE = "racer-tui"
PAGE_BACKGROUND = "#0c181f"  # the page behind the terminal, as textual-serve has it
PAGE_DIR = Path(__file__).resolve().parent


def bind_host(host: str) -> str:
    """The address to listen on: `[::1]` is written for URLs, `::1` is bound."""
    return host.strip().removeprefix("[").removesuffix("]")


def url_host(host: str) -> str:
    """A host as it goes into a URL: IPv6 addresses in brackets (RFC 3986)."""
    bare = bind_host(host)
    try:
        is_v6 = ipaddress.ip_address(bare.split("%", 1)[0]).version == 6
    except ValueError:  # a host name
        return bare
    return f"[{bare}]" if is_v6 else bare


def page_url(host: str, port: int) -> str:
    return f"http://{url_host(host)}:{port}"


@lru_cache(maxsize=1)
def favicon_ico() -> bytes:
    """The tab's icon: a dark tile with a row of token bars in the two draft
    greens and plain white, as a reply is coloured in the chat."""
    from PIL import Image, ImageDraw  # only when a browser asks for it

    size = 48
    image = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((0, 0, size - 1, size - 1), radius=9, fill=PAGE_BACKGROUND)
    bars = [(RETRIEVAL_GREEN, 30), (LOGITS_GREEN, 20), (RETRIEVAL_GREEN, 36), ("#e0e0e0", 14)]
    for i, (colour, height) in enumerate(bars):
        left = 6 + i * 9
        draw.rectangle((left, size - 7 - height, left + 6, size - 8), fill=colour)
    out = io.BytesIO()
    image.save(out, format="ICO", sizes=[(16, 16), (32, 32), (48, 48)])
    return out.getvalue()


class PageServer(Server):
    """textual-serve's server with racer-tui's page and icon; a WebSocket from
    another origin is refused, and unless `allow_remote` so is a Host other than
    the loopback address served."""

    def __init__(self, command: str, host: str, port: int, allow_remote: bool = False) -> None:
        super().__init__(
            command,
            host=bind_host(host),
            port=port,
            title=TITLE,
            public_url=page_url(host, port),
            templates_path=PAGE_DIR,
        )
        self.allow_remote = allow_remote
        self.served_names = LOOPBACK_NAMES | {url_host(host).lower()}

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(guard(self.served_names, check_host=not self.allow_remote))
        app.router.add_get("/favicon.ico", self.handle_favicon)
        return app

    async def handle_favicon(self, request: web.Request) -> web.Response:
        return web.Response(body=favicon_ico(), content_type="image/x-icon",
                            headers={"Cache-Control": "max-age=86400"})
