"""`racer-tui api`: the loaded model behind an OpenAI-compatible HTTP API.

From a terminal it shows the live monitor; with --headless (or with its output
redirected) it logs one line per request. Safety as `serve`: only loopback
unless --allow-remote, and then only with a key.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
from importlib.util import find_spec
from typing import Any

from racer_core.common.config import DEFAULTS, METHODS
from racer_core.common.errors import RacerError
from racer_tui.cli import options as o
from racer_tui.cli.errors import print_error, print_warning
from racer_tui.cli.params import at_least, param
from racer_tui.cli.serve import is_loopback
from racer_tui.host_names import normal_origin

HELP = "serve the model over an OpenAI-compatible HTTP API"
DESCRIPTION = (
    "Serve one model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/responses, "
    "/v1/models, /health), decoding with RACER unless a request asks otherwise; each answer carries the speculative "
    "statistics. From a terminal a live monitor shows the requests."
)
EPILOG = (
    "Only loopback addresses (127.0.0.1, ::1, localhost) are served unless --allow-remote is given, and "
    "then only with --api-key (or $RACER_TUI_API_KEY): clients send it as 'Authorization: Bearer KEY'. "
    "Web pages the browser shows cannot use the server: a request with an Origin header (browsers send one, "
    "programs such as the openai client and curl do not) is refused unless --allow-origin names that origin, "
    "and on loopback a request naming another Host (DNS rebinding) is refused. Request bodies must be sent as "
    "'Content-Type: application/json'. "
    "Up to --max-batch requests are decoded at once, their verification passes shared (continuous batching); "
    "the rest queue and start in order; a full queue answers 429. "
    "Exit status: 0, 1 run-time error, 2 usage error, 130 stopped by Ctrl-C."
)
KEY_ENV = "RACER_TUI_API_KEY"
EXTRA_MODULES = ("starlette", "uvicorn", "sse_starlette", "pydantic")


def configure(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the model")
    o.add_all(g, (o.MODEL, o.DEVICE, o.DTYPE))
    o.add_loading(g)
    g = p.add_argument_group("serving")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    g.add_argument("--port", type=int, default=8000, help="port, 0 for any free one (default: 8000)")
    g.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (needs --api-key); any Host name is then answered")
    g.add_argument("--allow-origin", action="append", type=_origin, default=[], metavar="ORIGIN",
                   help="a web page's origin (as http://localhost:3000) that may call the API, with CORS "
                        "(repeatable; default: none, requests from web pages are refused)")
    g.add_argument("--api-key", default=None, metavar="KEY",
                   help=f"the key clients must send as a Bearer token (default: ${KEY_ENV}, else none)")
    g.add_argument("--method", type=param("method"), default=DEFAULTS.method,
                   help=f"for requests that name none: one of {', '.join(METHODS)} (default: {DEFAULTS.method})")
    g.add_argument("--max-tokens", type=param("max_new_tokens"), default=None, metavar="N",
                   help="for requests that name none (default: up to the model's context)")
    g.add_argument("--queue", type=at_least(1), default=16, metavar="N",
                   help="requests that may wait for the engine; more are answered 429 (default: 16)")
    g.add_argument("--max-batch", type=at_least(1), default=8, metavar="N",
                   help="requests decoded at once, every step's trees verified in one shared forward pass "
                        "(default: 8; 1 serves one request at a time)")
    g.add_argument("--sequential", action="store_true", help="serve one request at a time (--max-batch 1)")
    g.add_argument("--max-rows", type=at_least(1), default=256, metavar="N",
                   help="rows (tree tokens and prompt chunks) per shared pass; the oldest part always goes "
                        "(default: 256)")
    g.add_argument("--max-body", type=at_least(1024), default=8 * 2**20, metavar="BYTES",
                   help="largest request body (default: 8 MiB)")
    g.add_argument("--headless", action="store_true",
                   help="no monitor: one log line per request (the default when output is not a terminal)")
    g = p.add_argument_group("replicas on Ray Serve (pip install -e '.[serve]')")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="serve from Ray Serve replicas, each with its own engine and batch, behind Serve's proxy on "
                        "--host/--port: ADDR is a cluster's HOST:PORT, auto (the one running on this machine) or "
                        "local (start Ray here); always headless")
    g.add_argument("--replicas", type=at_least(1), default=None, metavar="N",
                   help="replicas to serve from (default: 1; without --ray-address Ray is started here)")
    g.add_argument("--replica-cpus", type=at_least(1), default=None, metavar="N",
                   help="CPUs each replica reserves (default: this machine's cores shared among the replicas); "
                        "--device cuda gives each replica one GPU")


def _origin(text: str) -> str:
    origin = normal_origin(text)
    if origin is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a web origin: write SCHEME://HOST[:PORT], "
                                         "as http://localhost:3000")
    return origin


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, **hooks: Any) -> int:
    if not 0 <= args.port < 65536:
        parser.error("--port must be between 0 and 65535")
    if args.port == 0 and (args.ray_address is not None or args.replicas is not None):
        parser.error("replicas need a fixed --port, not 0: Serve's proxy is started on the port given")
    key = args.api_key if args.api_key is not None else os.environ.get(KEY_ENV) or None
    if not is_loopback(args.host):
        if not args.allow_remote:
            parser.error(f"--host {args.host} is reachable from other machines; add --allow-remote (with --api-key) "
                         "to serve it")
        if not key:
            parser.error("--allow-remote needs --api-key (or $RACER_TUI_API_KEY): a remote server without a key "
                         "would run anyone's requests")
    refusal = o.method_refusal([args.method], args)
    if refusal is not None:  # the default method for requests that name none
        print_error(refusal)
        return 2
    missing = [m for m in EXTRA_MODULES if find_spec(m) is None]
    if missing:
        print_error(f"racer-tui api needs the api extra: pip install 'racer-tui[api]' (missing: {', '.join(missing)})")
        return 1
    try:
        if args.ray_address is not None or args.replicas is not None:
            return _serve_replicas(args, key, hooks)
        return _serve(args, key, hooks)
    except RacerError as exc:
        print_error(str(exc))
        return 1


def _settings(args: argparse.Namespace, key: str | None) -> Any:
    from racer_tui.api.server import ServerSettings

    if not is_loopback(args.host):
        print_warning(f"serving on {args.host}: anyone who has the key can run requests on this machine")
    return ServerSettings(api_key=key, max_body=args.max_body, default_method=args.method,
                          max_tokens=args.max_tokens, allow_remote=args.allow_remote,
                          allowed_origins=tuple(args.allow_origin))


def _factory(args: argparse.Namespace, hooks: dict[str, Any]) -> Any:
    from racer_tui.engine_loader import default_engine_factory, quiet_loading_bars

    quiet_loading_bars()
    return hooks.get("engine_factory") or functools.partial(default_engine_factory, **o.load_arguments(args))


def progress(message: str, fraction: float | None) -> None:
    from racer_tui.api.service import write_line

    write_line(f"racer-tui api: {message}", sys.stderr)


def _serve_replicas(args: argparse.Namespace, key: str | None, hooks: dict[str, Any]) -> int:
    from racer_tui.api import ray_replicas
    from racer_tui.api.service import bind, write_line
    from racer_tui.engine_loader import describe

    ray_replicas.import_serve()  # refused in one line before anything starts
    if (args.ray_address or ray_replicas.LOCAL) == ray_replicas.LOCAL:
        bind(args.host, args.port).close()  # Serve's proxy listens here: a port in use is refused at once
    if not args.headless and sys.stdout.isatty():
        write_line("racer-tui api: replicas run headless (the monitor watches one engine in this process)",
                   sys.stderr)
    replicas = args.replicas or 1
    loader = functools.partial(_factory(args, hooks), args.model_path, device=args.device, dtype=args.dtype,
                               progress=progress)
    spec = ray_replicas.ReplicaSpec(loader, _settings(args, key), args.host, args.queue,
                                    1 if args.sequential else args.max_batch, args.max_rows)
    try:
        ray_replicas.serve_until_interrupted(
            spec, args.ray_address or ray_replicas.LOCAL, replicas, args.port,
            ray_replicas.cpus_per_replica(replicas, args.replica_cpus),
            1.0 if args.device.startswith("cuda") else 0.0, describe(args.model_path))
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return 0


def _serve(args: argparse.Namespace, key: str | None, hooks: dict[str, Any]) -> int:
    from racer_tui.api.service import bind

    # The address first: a port in use is refused at once, not after the model has loaded.
    sock = bind(args.host, args.port)
    try:
        return _serve_on(sock, args, key, hooks)
    finally:
        sock.close()


def _serve_on(sock: Any, args: argparse.Namespace, key: str | None, hooks: dict[str, Any]) -> int:
    from racer_tui.api.service import ApiService, headless_log, write_line

    headless = args.headless or not sys.stdout.isatty()
    factory = _factory(args, hooks)
    engine = factory(args.model_path, device=args.device, dtype=args.dtype, progress=progress)
    settings = _settings(args, key)
    max_batch = 1 if args.sequential else args.max_batch
    if headless:
        observe, refused = headless_log()
        service = ApiService(engine, settings, args.host, args.port, args.queue, [observe], refused, max_batch,
                             args.max_rows, sock)
        write_line(f"racer-tui api: serving {engine.info.model} on {service.url} as model "
                   f"{service.routes.model!r} (ctrl+c stops)")
        try:
            service.run()
        except KeyboardInterrupt:  # uvicorn shut down cleanly, then handed Ctrl-C on
            return 128 + signal.SIGINT
        return 0
    from racer_tui.api.monitor import ApiMonitor

    monitor = ApiMonitor(ApiService(engine, settings, args.host, args.port, args.queue, max_batch=max_batch,
                                    max_rows=args.max_rows, sock=sock))
    monitor.run()
    return int(monitor.return_code or 0)
