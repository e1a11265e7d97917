"""Load `racer-tui api` with N concurrent clients for M rounds, racer against ar.

Each round sends N streamed requests at once with one method, then N with the
other (the order alternating from round to round, so both meet the same
machine load); prompts are the builtin suite's first turns. Reported per
method: requests/s (requests over the wall time of its rounds), time to first
token, and per request tokens/s (whole request, and after the first token),
with RACER's mean accepted tokens from each answer's statistics.

    python scripts/api_load.py --clients 4 --requests 3 --max-tokens 128 --dtype float32
    python scripts/api_load.py --url http://127.0.0.1:8000/v1 --api-key KEY   # a server already running

Without --url, `racer-tui api --headless` serves the model (the embedded one
unless --model) on a free loopback port for the run, in its own process. Needs
the `api` and `test` extras (the openai client).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class Sample:
    method: str
    round: int
    ttft: float  # seconds from sending to the first streamed text
    seconds: float  # sending to the last chunk
    tokens: int
    mat: float | None
    error: str | None = None


def one_request(api: Any, method: str, prompt: str, max_tokens: int, round_: int) -> Sample:
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
        return Sample(method, round_, 0.0, time.perf_counter() - start, 0, None, f"{type(exc).__name__}: {exc}")
    end = time.perf_counter()
    racer = (usage.model_extra or {}).get("racer", {}) if usage is not None else {}
    return Sample(method, round_, (first or end) - start, end - start, usage.completion_tokens if usage else 0,
                  racer.get("mean_accepted_tokens"))


def run_round(api: Any, method: str, prompts: list[str], max_tokens: int, round_: int) -> tuple[list[Sample], float]:
    samples: list[Sample] = []
    lock = threading.Lock()

    def client(prompt: str) -> None:
        sample = one_request(api, method, prompt, max_tokens, round_)
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


def summary(samples: list[Sample], wall: float) -> dict[str, Any]:
    ok = [s for s in samples if s.error is None]
    mats = [s.mat for s in ok if s.mat is not None]
    return {
        "requests": len(samples),
        "failed": len(samples) - len(ok),
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "ttft_median_s": median([s.ttft for s in ok]),
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


def print_table(results: dict[str, dict[str, Any]], methods: list[str]) -> None:
    rows = [("requests/s", "requests_per_s", ".3f"), ("TTFT median s", "ttft_median_s", ".3f"),
            ("TTFT mean s", "ttft_mean_s", ".3f"), ("tok/s per request (median)", "tokens_per_s_median", ".1f"),
            ("tok/s after first token (median)", "decode_tokens_per_s_median", ".1f"),
            ("tok/s all clients", "aggregate_tokens_per_s", ".1f"), ("MAT (mean)", "mat_mean", ".2f"),
            ("tokens", "tokens", "d"), ("failed", "failed", "d")]
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  " + "  ".join(f"{m:>10}" for m in methods) + ("  racer/ar" if len(methods) == 2 else ""))
    for label, key, fmt in rows:
        values = [results[m][key] for m in methods]
        line = f"{label:{width}}  " + "  ".join(f"{show(v, fmt):>10}" for v in values)
        if len(methods) == 2 and all(isinstance(v, float) and v for v in values) and key != "mat_mean":
            line += f"  {values[0] / values[1]:8.2f}x"
        print(line)


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    """`racer-tui api --headless` on a free loopback port, in its own process (the
    clients' threads here must not share the engine's interpreter lock); its URL."""
    words = [sys.executable, "-m", "racer_tui.cli", "api", "--headless", "--port", "0", "--device", args.device,
             "--dtype", args.dtype, "--queue", str(max(16, args.clients))]
    if args.model:
        words += ["--model", args.model]
    server = subprocess.Popen(words, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    for line in server.stdout:
        if " on http://" in line:
            print(line.strip(), file=sys.stderr)
            url = line.split(" on ")[-1].split()[0]
            threading.Thread(target=server.stdout.read, daemon=True).start()  # keep its log flowing
            return server, url
    raise SystemExit(f"the server did not start (exit status {server.wait()})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="a running server's base URL (default: start one here)")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default=None, help="without --url: the model to serve (default: embedded)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--clients", type=int, default=4, help="concurrent clients (N)")
    p.add_argument("--requests", type=int, default=3, help="requests per client and method (M rounds)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--methods", default="racer,ar")
    p.add_argument("--json", type=Path, default=None, help="write every sample and the summaries here")
    args = p.parse_args()
    from openai import OpenAI

    from racer_core.bench.suites import load_builtin

    prompts = [q.turns[0] for q in load_builtin()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    server, url = (None, args.url) if args.url else start_server(args)
    api = OpenAI(base_url=url, api_key=args.api_key, max_retries=0, timeout=600)
    samples: dict[str, list[Sample]] = {m: [] for m in methods}
    walls = dict.fromkeys(methods, 0.0)
    try:
        one_request(api, methods[0], prompts[0], 8, -1)  # warm-up, not counted
        for r in range(args.requests):
            batch = [prompts[(r * args.clients + i) % len(prompts)] for i in range(args.clients)]
            for method in methods if r % 2 == 0 else methods[::-1]:
                got, wall = run_round(api, method, batch, args.max_tokens, r)
                samples[method] += got
                walls[method] += wall
                print(f"round {r + 1}/{args.requests} {method}: {wall:.1f} s", file=sys.stderr)
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            server.wait(60)
    results = {m: summary(samples[m], walls[m]) for m in methods}
    print(f"{args.clients} clients x {args.requests} requests per method, max_tokens {args.max_tokens}, greedy, "
          f"interleaved rounds")
    print_table(results, methods)
    if args.json:
        args.json.write_text(json.dumps({"summary": results, "samples": [asdict(s) for m in methods
                                                                          for s in samples[m]]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
