"""`racer-tui api --ray-address ADDR --replicas N`: the same ASGI app as N Ray
Serve replicas, behind Serve's HTTP proxy on --host/--port.

Each replica is a Ray actor (a process of its own) that loads its own engine
and runs its own engine worker and batch, so --max-batch, --queue and
--max-rows apply per replica. Serve's router sends a replica at most
--max-batch + --queue requests at once and holds up to --queue more (then it
answers 429). Answers are the single server's, statistics per request; each
names its replica in the `X-Racer-Replica` header, and each replica logs one
line per request (Ray forwards them to this terminal when it started Ray).

Ray Serve is an optional extra (`pip install -e ".[serve]"`), imported only here.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from racer_core.common.counts import counted
from racer_core.common.errors import InputError, RacerError
from racer_core.common.events import Engine
from racer_tui.api.server import ServerSettings
from racer_tui.api.service import engine_routes, guarded_app, headless_log, write_line
from racer_tui.engine_loader import quiet_loading_bars
from racer_tui.host_names import url_name

APP_NAME = "racer-tui-api"
REPLICA_HEADER = "X-Racer-Replica"
LOCAL = "local"


@dataclass(frozen=True)
class ReplicaSpec:
    """What every replica builds; pickled to the replicas."""

    loader: Callable[[], Engine]  # builds the engine in the replica (a module-level function or a partial)
    settings: ServerSettings
    host: str  # the address served (the request guard checks the Host against it)
    queue: int
    max_batch: int
    max_rows: int


def import_serve() -> Any:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # every replica's request lines, not "[repeated 2x]"
    try:
        return importlib.import_module("ray.serve")
    except ImportError:
        raise InputError('--ray-address / --replicas need Ray Serve, an optional extra: pip install -e ".[serve]"'
                         ) from None


_REPLICA_APP: list[Any] = []
"""This process's replica's app (each replica is a process of its own)."""


class _Forward:
    """The ASGI app handed to serve.ingress. Serve pickles it before any replica
    exists, so it forwards to the app its process's replica built."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await _REPLICA_APP[0](scope, receive, send)


class _NameReplica:
    """Adds the replica's id to every answer's headers."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.lower().encode(), replica.encode())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def named(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, named if scope["type"] == "http" else send)


class ApiReplica:
    """One replica: its engine, worker and routes, built in its own process."""

    def __init__(self, spec: ReplicaSpec) -> None:
        serve = import_serve()
        self.replica = str(serve.get_replica_context().replica_id.unique_id)
        quiet_loading_bars()  # on a joined cluster the replica has not this process's environment
        observe, refused = headless_log()
        engine = spec.loader()
        _, self.worker, routes = engine_routes(engine, spec.settings, spec.queue, [observe], refused,
                                               spec.max_batch, spec.max_rows)
        self.worker.start()
        _REPLICA_APP[:] = [_NameReplica(guarded_app(routes, spec.host, refused), self.replica)]

    def __del__(self) -> None:  # Serve's graceful shutdown of the replica
        worker = getattr(self, "worker", None)
        if worker is not None:
            worker.stop()


def cpus_per_replica(replicas: int, given: int | None) -> int:
    """--replica-cpus, else this machine's cores shared among the replicas."""
    return given if given is not None else max(1, (os.cpu_count() or 1) // replicas)


def start(spec: ReplicaSpec, address: str, replicas: int, port: int, cpus: int, gpus: float = 0.0) -> None:
    """Connect to Ray (or start it here: address `local`), then run the replicas behind
    Serve's proxy on spec.host:port; returns once every replica serves."""
    serve = import_serve()
    ray = importlib.import_module("ray")
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # Serve's INFO lines on this terminal
    if not ray.is_initialized():
        _init_ray(ray, address, replicas * cpus)
    deployment = serve.deployment(
        serve.ingress(_Forward())(ApiReplica), name="api", num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus, "num_gpus": gpus},
        # Serve's router holds what the replicas have no room for, up to --queue, then answers 429 as a full
        # queue does (Serve's own text, without Retry-After)
        max_ongoing_requests=spec.max_batch + spec.queue, max_queued_requests=spec.queue,
        backpressure_config={"status_code": 429},
        max_constructor_retry_count=1,  # a replica that cannot load its model fails the start, once
        logging_config={"log_level": "WARNING", "enable_access_log": False},
    )
    try:
        start_serve(serve, ray, spec.host, port)
        serve.run(deployment.bind(spec), name=APP_NAME, route_prefix="/")
    except RuntimeError as exc:
        raise RacerError(f"the replicas did not start: {_why_failed(serve) or _first_line(exc)}") from None


SERVE_START_ATTEMPTS = 3


def start_serve(serve: Any, ray: Any, host: str, port: int, attempts: int = SERVE_START_ATTEMPTS) -> None:
    """Start Serve's controller and HTTP proxy. On a busy machine Serve's controller
    can kill a proxy that is slow to start (or its 60 s wait runs out) and
    serve.start fails though the next proxy comes up: try again, then say so in one line."""
    for attempt in range(1, attempts + 1):
        try:
            serve.start(http_options={"host": host, "port": port},
                        logging_config={"log_level": "WARNING", "enable_access_log": False})
            return
        except (ray.exceptions.ActorDiedError, TimeoutError) as exc:
            if attempt == attempts:
                raise RacerError(f"Serve's HTTP proxy did not start ({attempts} tries; a busy machine?): "
                                 f"{_first_line(exc)}") from None
            logging.getLogger(__name__).warning("Serve's HTTP proxy did not start (%s); trying again", _first_line(exc))


def _why_failed(serve: Any) -> str:
    """The last line of a failed replica's traceback (the cause), from Serve's status."""
    try:
        app = serve.status().applications.get(APP_NAME)
        message = app.deployments["api"].message if app is not None else ""
    except Exception:  # noqa: BLE001 - the status is only a better message
        return ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _init_ray(ray: Any, address: str, cpus: int) -> None:
    from racer_core.bench.shard import check_address

    try:
        if address == LOCAL:
            ray.init(num_cpus=max(cpus, os.cpu_count() or 1), include_dashboard=False, configure_logging=False)
        else:
            check_address(address)
            ray.init(address=address, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = "start Ray here" if address == LOCAL else f"reach Ray at {address}"
        raise RacerError(f"cannot {where}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def stop(address: str) -> None:
    """Tear the app down; a Ray started here goes with it."""
    serve = import_serve()
    ray = importlib.import_module("ray")
    if not ray.is_initialized():  # it never started
        return
    if address == LOCAL:
        serve.shutdown()
    else:  # other apps may share the cluster's Serve
        serve.delete(APP_NAME)
    ray.shutdown()  # a joined cluster goes on


def url(host: str, port: int) -> str:
    return f"http://{url_name(host)}:{port}/v1"


def serve_until_interrupted(spec: ReplicaSpec, address: str, replicas: int, port: int, cpus: int,
                            gpus: float, model: str) -> None:
    """`racer-tui api` with replicas: start them, serve until Ctrl-C (KeyboardInterrupt), tear down."""
    try:
        start(spec, address, replicas, port, cpus, gpus)
        write_line(f"racer-tui api: serving {model} on {url(spec.host, port)} from "
                   f"{counted(replicas, 'Ray Serve replica')} (ctrl+c stops)")
        while True:
            time.sleep(3600)
    finally:
        stop(address)
