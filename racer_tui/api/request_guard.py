"""Which requests `racer-tui api` answers: no web page the user visits may use it.

Without a key the server runs anyone's requests, and a browser lets any page
the user visits send some: a POST with a `text/plain` body needs no CORS
preflight. So, as `racer-tui serve` does (serve_page/origin_guard.py):

- on loopback (unless --allow-remote), a request whose Host is not a loopback
  name with the served port is refused: a name the attacker's DNS points at
  127.0.0.1 makes the attacker's page same-origin with the server (DNS
  rebinding), but the browser still sends the attacker's name as the Host;
- a request with an `Origin` header is refused unless that origin was allowed
  (--allow-origin): browsers send it on cross-origin requests, programs (the
  openai client, curl) do not, so those pass. An allowed origin gets CORS
  headers on its answers and its preflights (OPTIONS) answered.

Pure ASGI, so streamed answers pass through untouched.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from racer_tui.api.protocol import ApiError
from racer_tui.api.server import Refused, error_response
from racer_tui.host_names import normal_origin, split_host

ALLOWED_METHODS = "GET, POST"
PREFLIGHT_MAX_AGE = 600  # seconds a browser may keep a preflight's answer


class RequestGuard:
    """The middleware: refused requests answer 403 in OpenAI's error shape.

    `served_names`: the Host names accepted on the served port (None: any Host,
    --allow-remote); `allowed_origins`: origins (normal_origin) whose pages may
    call the API; `refused`: told of each refusal, as the routes tell theirs."""

    def __init__(self, app: ASGIApp, served_names: frozenset[str] | None, allowed_origins: Iterable[str] = (),
                 refused: Refused | None = None) -> None:
        self.app = app
        self.served_names = served_names
        self.allowed_origins = frozenset(allowed_origins)
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        error = self.refusal(scope, headers)
        if error is not None:
            if self.refused is not None:
                client = scope.get("client")
                where = f"{client[0]}:{client[1]}" if client else "?"
                self.refused(f"{scope['method']} {scope['path']}", where, error)
            await error_response(error)(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await Response(status_code=204, headers=preflight_headers(origin, headers))(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = MutableHeaders(scope=message)
                answer["Access-Control-Allow-Origin"] = origin
                answer["Access-Control-Expose-Headers"] = "Retry-After"
                answer.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def refusal(self, scope: Scope, headers: Headers) -> ApiError | None:
        """Why this request is refused (None: it is answered)."""
        if self.served_names is not None:
            host = headers.get("host", "")
            name, port = split_host(host)
            server = scope.get("server")
            listening = int(server[1]) if server and server[1] is not None else None
            if name not in self.served_names or (port or 80) != listening:
                return ApiError(403, f"the Host {host!r} is not the address served (a loopback name and port "
                                     f"{listening}); use --allow-remote to serve other names",
                                code="host_not_allowed")
        origin = headers.get("origin")
        if origin is not None and normal_origin(origin) not in self.allowed_origins:
            return ApiError(403, f"requests from the web page at {origin!r} are refused: start the server with "
                                 f"--allow-origin {origin} to let that page use it", code="origin_not_allowed")
        return None


def preflight_headers(origin: str, request: Headers) -> dict[str, str]:
    """The answer to an allowed origin's preflight: its method and the headers it asked for."""
    headers = {"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Methods": ALLOWED_METHODS,
               "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE), "Vary": "Origin"}
    asked = request.get("access-control-request-headers")
    if asked:
        headers["Access-Control-Allow-Headers"] = asked
    return headers
