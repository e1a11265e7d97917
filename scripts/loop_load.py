"""Load the engine loop in-process: N conversations sent at once per round,
the methods taking turns round by round (their order rotating), every pass timed.

What `scripts/api_load.py` measures through the server, without HTTP, the
server's threads or a client process; a shared machine still moves a round
by 5-10%, so read the ratios over many rounds. Each round's conversations
answer the next N prompts (the built-in suite's first turns, or with
`--prompts repeat` a request to copy a code sample, a text the drafts
predict), the same prompts for every method of the round.

Per method: tokens/s over its rounds (tokens over the rounds' wall time), MAT
(tokens per step), its ratio to the first method (overall and per round),
and where the time went: the passes' forward seconds per token, and the
loop's time outside its passes (the sequences' prepare and complete, the
readers, the round's start and end) per pass. Then its passes by sequences
and extra rows (tree rows beyond one per sequence; passes with a prompt chunk
apart): count and median milliseconds.

    python scripts/loop_load.py --clients 4 --rounds 8
    python scripts/loop_load.py --clients 4 --rounds 6 --prompts repeat
    python scripts/loop_load.py --clients 8 --methods ar,racer,suffix --isa avx2
    python scripts/loop_load.py --clients 8 --each 4 --question-begin 0 --question-end 14

Rounds of one conversation per client end with the slowest reply, and the
passes before that end hold fewer and fewer sequences; where a method
speeds some replies more than others (racer's trees) that tail hides its
gain, where a server kept busy would fill the places. `--each K` has every
client send K conversations back to back, so the tail is a K-th of a round;
each method's line also gives its tokens/s over the rounds' busy windows
(from the start until the first client has its last reply), the tail left out.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402

CODE = '''def tree_value(pass_seconds, tokens, load=(0, 0), drafting_s=0.0):
    others = load[0]
    return (others + tokens) / (pass_seconds + (drafting_s if others else 0.0))


def rows_of(parts):
    return sum(part.rows for part in parts)


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
'''
REPEAT = "Copy this code exactly, then add a docstring to each function:\n\n" + CODE


def prompts_of(kind: str, count: int) -> list[str]:
    if kind == "repeat":  # each a little different, so no two are one prompt
        return [REPEAT + ("" if i == 0 else f"\n# copy {i}") for i in range(count)]
    from racer_core.bench.suites import load_builtin

    return [q.turns[0] for q in load_builtin()]


class Passes:
    """The loop's passes as its observer hears them, kept per method."""

    def __init__(self) -> None:
        self.method = ""
        self.seen: dict[str, list[tuple[int, int, bool, float]]] = defaultdict(list)  # parts, extra, prompt, s

    def __call__(self, requests: list[Any], seconds: float) -> None:
        rows = [r.rows for r in requests]
        prompt = any(r.prompt_left for r in requests)
        self.seen[self.method].append((len(rows), sum(rows) - len(rows), prompt, seconds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4, help="conversations sent at once each round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per method")
    parser.add_argument("--methods", default="ar,racer", help="the first is the one the others are compared to")
    parser.add_argument("--each", type=int, default=1,
                        help="conversations each client sends back to back in a round (a round then ends with "
                             "one slow reply per client, not per conversation, as on a server kept busy)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--prompts", choices=("builtin", "repeat"), default="builtin")
    parser.add_argument("--question-begin", type=int, default=None,
                        help="the first built-in question (0-based), as racer-tui bench takes it: tune on 0-14")
    parser.add_argument("--question-end", type=int, default=None, help="one past the last built-in question")
    parser.add_argument("--model", default=None, help="a model or GGUF file (default: the embedded model)")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native",
                        help="avx2 or avxvnni: that class on a newer CPU (racer_core/budget/cpu_class.py)")
    args = parser.parse_args(argv)
    reexec_with_isa(args.isa)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.clients < 1 or args.rounds < 1 or args.max_tokens < 1 or args.each < 1 or not methods:
        raise SystemExit("--clients, --rounds, --each and --max-tokens must be at least 1, and --methods name one")
    texts = prompts_of(args.prompts, args.clients * args.each)[args.question_begin:args.question_end]
    if not texts:  # before the model loads, as the methods below
        raise SystemExit("loop_load: --question-begin and --question-end leave no prompt")
    from racer_core.common.config import GenerationConfig
    from racer_core.common.errors import RacerError
    from racer_core.engine.engine import chat_prompt_ids, load_engine

    try:  # the methods checked first: a misspelt one fails before the model loads
        configs = {m: GenerationConfig(method=m, max_new_tokens=args.max_tokens, temperature=0.0) for m in methods}
        engine = load_engine(args.model)
    except (RacerError, ValueError) as exc:
        raise SystemExit(f"loop_load: {exc}") from None
    loop = engine.batched()
    if loop is None:
        raise SystemExit(f"loop_load: {engine.info.model} has no lean forward, so its conversations are not batched")
    prompts = [chat_prompt_ids(engine, [{"role": "user", "content": t}], {}) for t in texts]
    passes = Passes()
    loop.observer = passes
    # per method, per round: (tokens, steps, wall seconds, forward seconds, and the busy window's tokens and seconds)
    rounds: dict[str, list[Round]] = defaultdict(list)
    each = f", {args.each} back to back per client" if args.each > 1 else ""
    print(f"{args.clients} conversations at once{each}, {args.rounds} rounds per method, {args.max_tokens} tokens, "
          f"greedy, prompts: {args.prompts}; {engine.info.model}", flush=True)
    try:
        for r in range(args.rounds):
            turn = methods[r % len(methods):] + methods[: r % len(methods)]
            per_round = args.clients * args.each
            mine = [[prompts[(r * per_round + k * args.each + j) % len(prompts)] for j in range(args.each)]
                    for k in range(args.clients)]
            for method in turn:
                rounds[method].append(one_round(engine, loop, passes, method, configs[method], mine))
    except RacerError as exc:
        raise SystemExit(f"loop_load: {exc}") from None
    finally:
        loop.observer = None
    report(methods, rounds, passes)
    return 0


Round = tuple[int, int, float, float, int, float]


def one_round(engine: Any, loop: Any, passes: Passes, method: str, config: Any,
              prompts: list[list[list[int]]]) -> Round:
    """One round: a client per entry of `prompts`, sending its prompts one after another.
    Its busy window runs from the start to the first client's last token: every client
    still sending, so no pass is short of sequences for want of requests."""
    counts = [[0, 0] for _ in prompts]
    arrivals: list[list[tuple[float, int]]] = [[] for _ in prompts]  # (when read, tokens) per step
    errors: list[BaseException] = []

    def read(i: int) -> None:
        try:
            for prompt in prompts[i]:
                for step in loop.submit(engine.decoder().steps(prompt, config, None)):
                    counts[i][0] += len(step.tokens)
                    counts[i][1] += 1
                    arrivals[i].append((time.perf_counter(), len(step.tokens)))
        except BaseException as exc:  # noqa: BLE001 - raised below, on the main thread
            errors.append(exc)

    passes.method = method
    before = len(passes.seen[method])
    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(prompts))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    forward = sum(p[3] for p in passes.seen[method][before:])
    busy_end = min(a[-1][0] for a in arrivals if a) if all(arrivals) else start
    busy = sum(n for a in arrivals for when, n in a if when <= busy_end)
    return sum(c[0] for c in counts), sum(c[1] for c in counts), wall, forward, busy, busy_end - start


def report(methods: list[str], rounds: dict[str, list[Round]], passes: Passes) -> None:
    first = methods[0]
    for method in methods:
        done = rounds[method]
        tokens, steps = sum(x[0] for x in done), sum(x[1] for x in done)
        wall, forward = sum(x[2] for x in done), sum(x[3] for x in done)
        seen = passes.seen[method]
        line = (f"{method:>8}: {tokens / wall:7.1f} tok/s, MAT {tokens / max(steps, 1):.2f}, forward "
                f"{1000 * forward / tokens:.2f} ms/token, outside the passes {1000 * (wall - forward) / max(len(seen), 1):.2f} "
                f"ms/pass ({len(seen)} passes)")
        busy = _rate(done, 4, 5)
        line += f"; while every client sends {busy:.1f} tok/s"
        if method != first:
            base = rounds[first]
            ratio = (tokens / wall) / _rate(base, 0, 2)
            each = [(a[0] / a[2]) / (b[0] / b[2]) for a, b in zip(done, base, strict=True)]
            line += (f"; /{first} {ratio:.3f}x (rounds {min(each):.2f}-{max(each):.2f}x), "
                     f"while every client sends {busy / _rate(base, 4, 5):.3f}x")
        print(line, flush=True)
    for method in methods:
        groups: dict[tuple[int, str], list[float]] = defaultdict(list)
        for parts, extra, prompt, seconds in passes.seen[method]:
            groups[(parts, "prompt" if prompt else _extra(extra))].append(seconds)
        shown = ", ".join(f"{parts}x{kind} {len(v)} at {1000 * statistics.median(v):.2f} ms"
                          for (parts, kind), v in sorted(groups.items()))
        print(f"{method:>8} passes (sequences x extra rows, count, median): {shown}", flush=True)


def _rate(done: list[Round], tokens: int, seconds: int) -> float:
    return sum(x[tokens] for x in done) / max(sum(x[seconds] for x in done), 1e-9)


def _extra(extra: int) -> str:
    return "0" if extra == 0 else "1-2" if extra <= 2 else "3-6" if extra <= 6 else "7+"


if __name__ == "__main__":
    sys.exit(main())
