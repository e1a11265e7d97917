"""Host and Origin headers, shared by the servers' guards (serve's page, the
API): the loopback names a browser may use, a Host header split into name and
port, and origins written as browsers send them."""

from __future__ import annotations

from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


def split_host(host: str) -> tuple[str, int | None]:
    """A Host header as (name, port): 'localhost:8000', '[::1]:8000', '127.0.0.1' (no port: None)."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name += "]"
        port = rest.removeprefix(":")
    else:
        name, _, port = host.partition(":")
    return name, int(port) if port.isdigit() else None


def url_name(host: str) -> str:
    """A listening address as a Host header names it: IPv6 addresses in brackets, lower case."""
    bare = host.strip().removeprefix("[").removesuffix("]").lower()
    return f"[{bare}]" if ":" in bare else bare


def normal_origin(text: str) -> str | None:
    """An origin as browsers send it ('http://localhost:3000'), lower case; None if `text` is not one."""
    parts = urlsplit(text.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") \
            or parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()
