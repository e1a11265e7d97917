"""The server as one object: the engine worker, the routes and uvicorn, started
and stopped together; headless, or in a thread under the live monitor.

The socket is bound here, before uvicorn starts, so port 0 (any free port,
the tests') is known at once and a taken port is one clear error.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from typing import Any, TextIO

import uvicorn

from racer_core.common.errors import RacerError
from racer_core.common.events import Engine, StepEvent
from racer_tui.api.protocol import ApiError
from racer_tui.api.request_guard import RequestGuard
from racer_tui.api.server import ApiServer, Refused, ServerSettings
from racer_tui.api.worker import EngineWorker, Job, Observer, batch_figures
from racer_tui.host_names import LOOPBACK_NAMES, url_name

DEFAULT_QUEUE = 16
DEFAULT_MAX_BATCH = 8
"""Requests decoded at once, their forward passes shared (racer_core/engine/loop.py)."""
DEFAULT_MAX_ROWS = 256
"""Rows per shared pass: a prefill chunk, or many requests' trees."""
LISTEN_BACKLOG = 2048  # uvicorn's default


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or a RacerError in one line. It listens
    from here, before uvicorn takes it: a client told the address (the
    headless line is printed first) waits in the backlog instead of being
    refused while the server starts."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        raise RacerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def engine_routes(engine: Engine, settings: ServerSettings, queue: int = DEFAULT_QUEUE,
                  observers: list[Observer] | None = None, refused: Refused | None = None,
                  max_batch: int = DEFAULT_MAX_BATCH, max_rows: int = DEFAULT_MAX_ROWS) -> tuple[Any, EngineWorker, ApiServer]:
    """The engine loop (None: one request at a time), the engine worker and the routes over `engine`."""
    # An engine with a lean forward batches its requests' passes; others
    # (the stock forward, the tests' scripted engine) serve one at a time.
    batcher = engine.batched(max_rows) if max_batch > 1 else None
    # The engine runs on its loop's thread from here: the OpenMP workers of the
    # thread that loaded it would only slow the loop's (racer_core/engine/openmp_threads.py).
    from racer_core.engine.openmp_threads import release_openmp_workers  # torch is loaded by now

    release_openmp_workers()
    worker = EngineWorker(queue, observers, max_batch, batcher.seat if batcher else None)
    return batcher, worker, ApiServer(engine, worker, settings, refused)


def guarded_app(routes: ApiServer, host: str, refused: Refused | None) -> RequestGuard:
    """The routes' ASGI app behind the request guard (Host names on loopback, web origins)."""
    settings = routes.settings
    served = None if settings.allow_remote else LOOPBACK_NAMES | {url_name(host)}
    return RequestGuard(routes.app(), served, settings.allowed_origins, refused)


class ApiService:
    def __init__(self, engine: Engine, settings: ServerSettings, host: str = "127.0.0.1", port: int = 8000,
                 queue: int = DEFAULT_QUEUE, observers: list[Observer] | None = None,
                 refused: Refused | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 max_rows: int = DEFAULT_MAX_ROWS, sock: socket.socket | None = None) -> None:
        """`sock`: host:port already bound (the command binds it before the model loads)."""
        self.engine = engine
        self.settings = settings
        self.host = host
        self.batcher, self.worker, self.routes = engine_routes(engine, settings, queue, observers, refused,
                                                               max_batch, max_rows)
        self.app = guarded_app(self.routes, host, self._refused)
        self.sock = sock if sock is not None else bind(host, port)
        self.port = int(self.sock.getsockname()[1])
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=3)
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def watch(self, observer: Observer, refused: Refused) -> None:
        """Tell `observer` of every job and `refused` of every refusal (the monitor)."""
        self.worker.observers.append(observer)
        self.routes.refused = refused

    def _refused(self, route: str, client: str, error: ApiError) -> None:
        if self.routes.refused is not None:  # set late by watch()
            self.routes.refused(route, client, error)

    @property
    def url(self) -> str:
        return f"http://{url_name(self.host)}:{self.port}/v1"

    def run(self) -> None:
        """Serve until Ctrl-C (in the main thread: uvicorn handles the signals)."""
        self.worker.start()
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.worker.stop()
            self.sock.close()

    def start(self, timeout: float = 30.0) -> None:
        """Serve from a thread (the monitor's, the tests'); returns once it listens."""
        self.worker.start()
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                        name="racer-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RacerError("the API server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.worker.stop()  # open streams end at their next step
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.sock.close()


def log_line(job: Job) -> str:
    """One line for a finished request (the headless log)."""
    s = job.tally.stats
    parts = [job.client, job.endpoint, job.method, job.outcome, f"{job.prompt_tokens}+{s.tokens} tokens",
             f"{job.seconds:.2f} s"]
    if s.tokens_per_s is not None:
        parts.append(f"{s.tokens_per_s:.1f} tok/s")
    if s.mat is not None:
        parts.append(f"MAT {s.mat:.2f}")
    if job.tally.drafted:
        parts.append(f"accepted {job.tally.accepted}/{job.tally.drafted}")
    rows = batch_figures(job)
    if rows:
        parts.append(rows)
    if job.error:
        parts.append(job.error)
    return "racer-tui api: " + " ".join(parts)


# One line at a time, whatever the stream: the request lines come from the
# engine worker's thread and the refusals from the server's, the loading
# progress goes to stderr, and a terminal (or a 2>&1 log) shows them all.
LINE_LOCK = threading.Lock()


def write_line(line: str, out: TextIO | None = None) -> None:
    """`line` and its newline in one write under LINE_LOCK (stdout unless
    `out`): lines from several threads never run into one another."""
    stream = out or sys.stdout
    with LINE_LOCK:
        stream.write(line + "\n")
        stream.flush()


def headless_log(out: TextIO | None = None) -> tuple[Observer, Refused]:
    """An observer that prints one line per finished request, and one per refused request."""
    def write(line: str) -> None:
        write_line(line, out)

    def observe(kind: str, job: Job, event: StepEvent | None) -> None:
        if kind == "finished":
            write(log_line(job))

    def refused(route: str, client: str, error: ApiError) -> None:
        write(f"racer-tui api: {client} {route} {error.status} {error.message}")

    return observe, refused


