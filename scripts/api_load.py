"""Load `racer-tui api` with N concurrent clients for M rounds, racer against
ar, the batched server against the sequential one.

For each client count N (`--clients 1,2,4,8,16`) each round sends N streamed
requests at once per (server, method), the order of the pairs rotating from
round to round so all meet the same machine load; prompts are the builtin
suite's first turns. A round waits for its slowest request; with `--each K`
each client sends K requests back to back in a round (the next as soon as
its last ended), as clients that keep a server busy do, so that a round's
tail weighs less. Reported per server and method: total tokens/s over all
clients, requests/s (requests over the wall time of its rounds), time to
first token (median and 95th percentile), and per request tokens/s (whole
request, and after the first token), with RACER's mean accepted tokens from
each answer's statistics; then the ratios batched/sequential and racer/ar.

    python scripts/api_load.py --clients 1,4,8 --requests 2 --max-tokens 128 --dtype float32
    python scripts/api_load.py --servers batched --clients 4      # the batched server only
    python scripts/api_load.py --servers batched --clients 4,8 --requests 2 --each 4   # clients that keep it busy
    python scripts/api_load.py --url http://127.0.0.1:8000/v1 --api-key KEY   # a server already running

Without --url, `racer-tui api --headless` serves the model (the embedded one
unless --model) on a free loopback port for the run, in its own process: one
process per server kind (`--max-batch` for the batched one, `--sequential`),
both started before the first round. They run with their thread count fixed
(RACER_FOLLOW_FREE_CORES=0, unless set otherwise): the servers take turns, and
otherwise each would count the other's last round as another process's load and
start its next round on one thread (racer_core/budget/free_cores.py reads the
other processes' use since its last step, which for an idle server is the
other's whole round). Needs the `api` and `test` extras (the openai client).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class Sample:
    server: str
    clients: int
    method: str
    round: int
    ttft: float  # seconds from sending to the first streamed text
    seconds: float  # sending to the last chunk
    tokens: int
    mat: float | None
    error: str | None = None


def one_request(api: Any, server: str, clients: int, method: str, prompt: str, max_tokens: int,
                round_: int) -> Sample:
    start = time.perf_counter()
    first = None
    usage = None
    try:
        stream = api.chat.completions.create(
            model="served", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
            stream=True, stream_options={"include_usage": True}, extra_body={"racer": {"method": method}})
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
            if chunk.usage is not None:
                usage = chunk.usage
    except Exception as exc:  # noqa: BLE001 - counted and shown, the run goes on
        return Sample(server, clients, method, round_, 0.0, time.perf_counter() - start, 0, None,
                      f"{type(exc).__name__}: {exc}")
    end = time.perf_counter()
    racer = (usage.model_extra or {}).get("racer", {}) if usage is not None else {}
    return Sample(server, clients, method, round_, (first or end) - start, end - start,
                  usage.completion_tokens if usage else 0, racer.get("mean_accepted_tokens"))


def run_round(api: Any, server: str, method: str, prompts: list[list[str]], max_tokens: int,
              round_: int) -> tuple[list[Sample], float]:
    """One round: each client (one list of prompts each) sends its requests
    one after another, every client at once; the round ends with the last."""
    samples: list[Sample] = []
    lock = threading.Lock()

    def client(mine: list[str]) -> None:
        for prompt in mine:
            sample = one_request(api, server, len(prompts), method, prompt, max_tokens, round_)
            with lock:
                samples.append(sample)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, time.perf_counter() - start


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def p95(values: list[float]) -> float | None:
    """The 95th percentile (nearest rank)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-95 * len(ordered) // 100) - 1))]


def summary(samples: list[Sample], wall: float) -> dict[str, Any]:
    ok = [s for s in samples if s.error is None]
    mats = [s.mat for s in ok if s.mat is not None]
    return {
        "requests": len(samples),
        "failed": len(samples) - len(ok),
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "ttft_median_s": median([s.ttft for s in ok]),
        "ttft_p95_s": p95([s.ttft for s in ok]),
        "ttft_mean_s": statistics.fmean([s.ttft for s in ok]) if ok else None,
        "tokens_per_s_median": median([s.tokens / s.seconds for s in ok if s.seconds > 0]),
        "decode_tokens_per_s_median": median([(s.tokens - 1) / (s.seconds - s.ttft) for s in ok
                                              if s.tokens > 1 and s.seconds > s.ttft]),
        "aggregate_tokens_per_s": sum(s.tokens for s in ok) / wall if wall > 0 else None,
        "mat_mean": statistics.fmean(mats) if mats else None,
        "tokens": sum(s.tokens for s in ok),
        "wall_s": wall,
    }


def show(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


ROWS = [("tok/s all clients", "aggregate_tokens_per_s", ".1f"), ("requests/s", "requests_per_s", ".3f"),
        ("TTFT median s", "ttft_median_s", ".2f"), ("TTFT p95 s", "ttft_p95_s", ".2f"),
        ("tok/s per request (median)", "tokens_per_s_median", ".1f"),
        ("tok/s after first token (median)", "decode_tokens_per_s_median", ".1f"), ("MAT (mean)", "mat_mean", ".2f"),
        ("tokens", "tokens", "d"), ("failed", "failed", "d")]
RATIOS = ("aggregate_tokens_per_s", "requests_per_s", "tokens_per_s_median")


def print_table(results: dict[tuple[str, str], dict[str, Any]]) -> None:
    """One column per (server, method), then the ratios of the throughputs."""
    columns = list(results)
    width = max(len(r[0]) for r in ROWS)
    print(f"{'':{width}}  " + "  ".join(f"{s[:5] + ' ' + m:>12}" for s, m in columns))
    for label, key, fmt in ROWS:
        print(f"{label:{width}}  " + "  ".join(f"{show(results[c][key], fmt):>12}" for c in columns))
    servers = sorted({s for s, _ in columns})
    methods = sorted({m for _, m in columns}, reverse=True)  # racer before ar
    pairs = [(f"batched/sequential {m}", ("batched", m), ("sequential", m)) for m in methods]
    pairs += [(f"racer/ar {s}", (s, "racer"), (s, "ar")) for s in servers]
    for label, top, bottom in pairs:
        if top in results and bottom in results:
            ratios = []
            for key in RATIOS:
                a, b = results[top][key], results[bottom][key]
                ratios.append(f"{a / b:.2f}x" if a and b else "-")
            print(f"  {label}: total tok/s {ratios[0]}, requests/s {ratios[1]}, per-request tok/s {ratios[2]}")


def launch_api(options: list[str], model: str | None, what: str = "the server",
               on_line: Callable[[str], None] | None = None,
               fixed_threads: bool = False) -> tuple[subprocess.Popen[str], str, str]:
    """`racer-tui api --headless OPTIONS` on a free loopback port, in its own process (the
    clients' threads must not share the engine's interpreter lock): (the process, its base
    URL, the line that named it). The rest of its log goes to `on_line`, or is read and
    dropped, so a full pipe never stalls the server. `fixed_threads`: the thread count does not
    follow the other processes' load (RACER_FOLLOW_FREE_CORES=0 unless set otherwise)."""
    words = [sys.executable, "-m", "racer_tui.cli", "api", "--headless", "--port", "0", *options]
    if model:
        words += ["--model", model]
    env = dict(os.environ)
    if fixed_threads:
        env.setdefault("RACER_FOLLOW_FREE_CORES", "0")
    server = subprocess.Popen(words, stdout=subprocess.PIPE, text=True, env=env)
    assert server.stdout is not None
    for line in server.stdout:
        if " on http://" in line:
            url = line.split(" on ")[-1].split()[0]

            def follow(stream: Any = server.stdout) -> None:
                for rest in stream:
                    if on_line is not None:
                        on_line(rest)

            threading.Thread(target=follow, daemon=True).start()
            return server, url, line.strip()
    raise SystemExit(f"{what} did not start (exit status {server.wait()})")


def start_server(args: argparse.Namespace, kind: str) -> tuple[subprocess.Popen[str], str]:
    """The batched or the sequential server (launch_api); its URL."""
    most = max(args.clients)
    options = ["--device", args.device, "--dtype", args.dtype, "--queue", str(max(16, most))]
    options += ["--sequential"] if kind == "sequential" else ["--max-batch", str(args.max_batch or most)]
    # The servers take turns: neither is another process's load for the other (the module's docstring).
    server, url, line = launch_api(options, args.model, f"the {kind} server", fixed_threads=True)
    print(f"{kind}: {line}", file=sys.stderr)
    return server, url


def counts(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of client counts: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("client counts must be at least 1")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="a running server's base URL (default: start them here)")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default=None, help="without --url: the model to serve (default: embedded)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--clients", type=counts, default=[4], help="concurrent clients, one count or several: 1,2,4,8,16")
    p.add_argument("--requests", type=int, default=3, help="rounds (M) per client count, server and method")
    p.add_argument("--each", type=int, default=1, metavar="K",
                   help="requests each client sends back to back in a round, the next as soon as the last ended "
                        "(1: a round's requests start together and the round waits for the slowest; more: "
                        "clients that keep the server busy, as users do); M rounds of K")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--methods", default="racer,ar")
    p.add_argument("--servers", default="batched,sequential", help="without --url: batched, sequential or both")
    p.add_argument("--max-batch", type=int, default=None, help="the batched server's (default: the most clients)")
    p.add_argument("--json", type=Path, default=None, help="write every sample and the summaries here")
    args = p.parse_args(argv)
    if args.requests < 1 or args.each < 1:
        p.error("--requests and --each must be at least 1")
    from openai import OpenAI

    from racer_core.bench.suites import load_builtin

    prompts = [q.turns[0] for q in load_builtin()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    kinds = ["given"] if args.url else [k.strip() for k in args.servers.split(",") if k.strip()]
    if not set(kinds) <= {"given", "batched", "sequential"}:
        p.error("--servers takes batched, sequential or both")
    servers: dict[str, subprocess.Popen[str]] = {}
    apis: dict[str, Any] = {}
    samples: dict[tuple[int, str, str], list[Sample]] = {}
    walls: dict[tuple[int, str, str], float] = {}
    try:
        for kind in kinds:
            url = args.url
            if url is None:
                servers[kind], url = start_server(args, kind)
            apis[kind] = OpenAI(base_url=url, api_key=args.api_key, max_retries=0, timeout=600)
            one_request(apis[kind], kind, 1, methods[0], prompts[0], 8, -1)  # warm-up, not counted
        pairs = [(k, m) for k in kinds for m in methods]
        for n in args.clients:
            for r in range(args.requests):
                batch = [[prompts[((r * n + i) * args.each + j) % len(prompts)] for j in range(args.each)]
                         for i in range(n)]
                shift = r % len(pairs)
                for kind, method in pairs[shift:] + pairs[:shift]:
                    got, wall = run_round(apis[kind], kind, method, batch, args.max_tokens, r)
                    samples.setdefault((n, kind, method), []).extend(got)
                    walls[n, kind, method] = walls.get((n, kind, method), 0.0) + wall
                    print(f"{n} clients, round {r + 1}/{args.requests}, {kind} {method}: {wall:.1f} s",
                          file=sys.stderr)
    finally:
        for server in servers.values():
            server.send_signal(signal.SIGINT)
        for server in servers.values():
            server.wait(60)
    summaries = {}
    for n in args.clients:
        results = {(k, m): summary(samples[n, k, m], walls[n, k, m]) for k in kinds for m in methods}
        summaries[n] = results
        each = f" of {args.each} back to back" if args.each > 1 else ""
        print(f"\n{n} clients x {args.requests} rounds{each} per server and method, max_tokens {args.max_tokens}, "
              f"greedy, interleaved rounds")
        print_table(results)
    if args.json:
        args.json.write_text(json.dumps({
            "summary": {str(n): {f"{k} {m}": v for (k, m), v in r.items()} for n, r in summaries.items()},
            "samples": [asdict(s) for got in samples.values() for s in got]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
