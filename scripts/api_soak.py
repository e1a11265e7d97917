"""A bounded soak of `racer-tui api`: C clients for S seconds (or R requests),
mixed lengths, streamed and whole, racer and ar, a few clients that leave
mid-stream and a few bad requests.

Every request ends in one of: answered (a reply came), refused (4xx/429, with
the server's reason), disconnected (this client left on purpose), lost
(anything else: a connection error, a 5xx, a reply with no text). The run
passes when none is lost, the server logged no failed request, and its
resident memory at the end is within 10% of what it was after the first
minute (after the first sixth of a shorter run).

    python scripts/api_soak.py --seconds 600 --clients 8 --dtype float32
    python scripts/api_soak.py --url http://127.0.0.1:8000/v1 --requests 200   # a server already running

Without --url, `racer-tui api --headless` serves the model (the embedded one
unless --model) on a free loopback port in its own process. The tests run
`soak` itself against a tiny model (tests/api/test_api_soak.py).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

if __package__:  # imported as scripts.api_soak (the tests)
    from scripts.api_load import launch_api
else:  # run as `python scripts/api_soak.py`: its folder is on the path
    from api_load import launch_api

PROMPTS = [
    "Name three fruits.", "Write a haiku about the sea.", "What is 17 times 23?",
    "Explain what a hash table is in two sentences.", "List the planets of the solar system.",
    "Translate 'good morning' into French and Spanish.", "Write a short Python function that reverses a string.",
]
BAD_BODIES = ['{"messages": [{"role": "user", "content": "hi"}', '{"messages": [], "max_tokens": 8}',
              '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}']


@dataclass
class Report:
    outcomes: Counter[str] = field(default_factory=Counter)  # answered, refused, disconnected, lost
    reasons: Counter[str] = field(default_factory=Counter)  # refusals by status and lost by error
    tokens: int = 0
    seconds: float = 0.0
    rss_first_mib: float | None = None
    rss_end_mib: float | None = None
    failed_in_log: int = 0

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    @property
    def memory_ok(self) -> bool:
        if self.rss_first_mib is None or self.rss_end_mib is None:
            return True
        return self.rss_end_mib <= 1.1 * self.rss_first_mib

    @property
    def passed(self) -> bool:
        return self.outcomes["lost"] == 0 and self.failed_in_log == 0 and self.memory_ok

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "outcomes": dict(self.outcomes), "reasons": dict(self.reasons),
                "tokens": self.tokens, "seconds": round(self.seconds, 1), "rss_first_mib": self.rss_first_mib,
                "rss_end_mib": self.rss_end_mib, "failed_in_log": self.failed_in_log, "passed": self.passed}


def _post(url: str, key: str, body: str) -> tuple[int, str]:
    request = urllib.request.Request(url.removesuffix("/v1") + "/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def one(api: Any, url: str, key: str, rng: random.Random, max_tokens: int) -> tuple[str, str, int]:
    """One request of a random kind: (outcome, reason, tokens)."""
    import openai

    kind = rng.random()
    if kind < 0.08:  # a bad request: answered 400 with its reason
        status, text = _post(url, key, rng.choice(BAD_BODIES))
        if 400 <= status < 500:
            return "refused", str(status), 0
        return "lost", f"bad request answered {status}: {text[:80]}", 0
    method = rng.choice(["racer", "ar"])
    messages = [{"role": "user", "content": rng.choice(PROMPTS)}]
    tokens = rng.randint(4, max_tokens)
    extra = {"extra_body": {"racer": {"method": method}}}
    try:
        if kind < 0.16:  # a client that leaves after the first chunk
            stream = api.chat.completions.create(model="served", messages=messages, max_tokens=tokens,
                                                 temperature=0, stream=True, **extra)
            next(iter(stream))
            stream.close()
            return "disconnected", "", 0
        if kind < 0.58:
            stream = api.chat.completions.create(model="served", messages=messages, max_tokens=tokens,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}, **extra)
            text, usage = "", None
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    text += chunk.choices[0].delta.content
                usage = chunk.usage or usage
            count = usage.completion_tokens if usage is not None else 0
        else:
            answer = api.chat.completions.create(model="served", messages=messages, max_tokens=tokens,
                                                 temperature=rng.choice([0, 0.8]), **extra)
            text, count = answer.choices[0].message.content or "", answer.usage.completion_tokens
    except openai.RateLimitError:
        return "refused", "429", 0
    except openai.APIStatusError as exc:
        if 400 <= exc.status_code < 500:
            return "refused", str(exc.status_code), 0
        return "lost", f"{exc.status_code}: {exc.message[:80]}", 0
    except Exception as exc:  # noqa: BLE001 - counted as lost
        return "lost", f"{type(exc).__name__}: {str(exc)[:80]}", 0
    if count < 1:
        return "lost", "a reply without tokens", 0
    return "answered", "", count


def soak(url: str, key: str = "none", clients: int = 8, seconds: float | None = None, requests: int | None = None,
         max_tokens: int = 96, seed: int = 0, rss: Callable[[], float | None] | None = None) -> Report:
    """Run the clients until `seconds` pass or `requests` are sent (one of them)."""
    from openai import OpenAI

    if (seconds is None) == (requests is None):
        raise ValueError("give seconds or requests")
    report = Report()
    lock = threading.Lock()
    start = time.monotonic()
    first_mark = start + (min(60.0, seconds / 6) if seconds is not None else 0.0)

    def client(index: int) -> None:
        # Each client's share of `requests` and its own random kinds: the mix does not depend on timing.
        quota = None if requests is None else requests // clients + (index < requests % clients)
        rng = random.Random(seed * 1000 + index)
        api = OpenAI(base_url=url, api_key=key, max_retries=0, timeout=300)
        sent = 0
        while quota is None or sent < quota:
            if seconds is not None and time.monotonic() - start > seconds:
                return
            sent += 1
            outcome, reason, tokens = one(api, url, key, rng, max_tokens)
            with lock:
                report.outcomes[outcome] += 1
                if reason:
                    report.reasons[f"{outcome} {reason}"] += 1
                report.tokens += tokens
                if rss is not None and report.rss_first_mib is None and time.monotonic() >= first_mark:
                    report.rss_first_mib = rss()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report.seconds = time.monotonic() - start
    if rss is not None:
        report.rss_end_mib = rss()
    return report


def process_rss(pid: int) -> Callable[[], float | None]:
    def read() -> float | None:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    return read


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="a running server's base URL (default: start one here)")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=None, help="how long (default: 600 unless --requests)")
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--json", default=None, help="write the report here")
    args = p.parse_args(argv)
    if args.seconds is None and args.requests is None:
        args.seconds = 600.0
    server, failed, rss = None, [0], None
    url = args.url
    if url is None:
        def count_failed(line: str) -> None:
            if " failed " in line:  # a request the server failed (not a client's fault)
                failed[0] += 1
                print(line.rstrip(), file=sys.stderr)

        options = ["--device", args.device, "--dtype", args.dtype, "--max-batch", str(args.max_batch), "--queue", "16"]
        server, url, _ = launch_api(options, args.model, on_line=count_failed)
        rss = process_rss(server.pid)
    try:
        report = soak(url, args.api_key, args.clients, args.seconds, args.requests, args.max_tokens, rss=rss)
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            server.wait(60)
    report.failed_in_log = failed[0]
    out = json.dumps(report.as_dict(), indent=1)
    print(out)
    if args.json:
        with open(args.json, "w") as f:
            f.write(out)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
