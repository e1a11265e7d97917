"""What a verification step spends outside its forward pass, three ways
(docs/performance.md has the figures):

  share        the share of racer's steps outside the forward passes (drafting and
               updating), summed over built-in questions
  bookkeeping  the Python time of one sequence's cache bookkeeping in a fused step
  recording    what recording each step for the step inspector costs, against the step

    python scripts/step_overhead.py share --question-begin 14 --question-end 20 --max-new-tokens 128
    python scripts/step_overhead.py bookkeeping [--layers 30] [--steps 600 --rounds 5]
    python scripts/step_overhead.py recording [--tiny] [--max-new-tokens 128]

`share` answers built-in questions with `racer` (the shipped defaults unless
--dtype / --forward say otherwise) and sums each verification step's own
timings: draft_s (drafting, the policy's choice, the mask), verify_s (the
forward pass) and update_s (acceptance, tie margins, cache commit, table and
automaton updates, the policy's learning). The prefill is left out, as MAT
leaves it out. Tie margins are asked for, as the benchmark asks (chat and the
API leave them off): the figures stay comparable with those measured before
they became optional.

`bookkeeping` runs TreeCache.open_all / advance_all / commit (what
formats/quant_layer.py calls per sequence and step) against the per-layer calls
it replaced (open_rows and advance on each layer), on one thread, by this
thread's CPU time, in interleaved rounds of --steps steps after 100 untimed
(racer_core/bench/timing.py); no model is loaded. It prints the mean, which
includes the buffers' growth as the cache lengthens (what the script measured
before 4 Dec 2026, as cache_bookkeeping_cost.py, with --rounds 1 --steps 3000),
and the fastest round. A batched pass pays this once per request in it.

`recording` runs the chat engine on a repetitive prompt, timing every call of
the step recorder (StepRecord.of_tree) alongside the steps it belongs to.

`--tiny` (share, recording): a tiny random-weight model instead of the
embedded one (the worst case for recording: its steps are the shortest).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from racer_core.models.load_options import FORWARDS  # noqa: E402

KV_HEADS, HEAD_DIM = 3, 64  # the embedded model's
PROMPT = (
    "Repeat this list exactly three times, one item per line: apples, pears, plums, "
    "cherries, grapes, lemons, limes, figs, dates, melons."
)


def engine_for(args: argparse.Namespace) -> Any:
    """The engine a run measures: the embedded model (with --dtype / --forward), or the tiny random one."""
    if args.tiny:
        from racer_core.testing import tiny_engine

        return tiny_engine()
    from racer_core.engine.engine import load_engine
    from racer_tui.engine_loader import quiet_loading_bars

    quiet_loading_bars()
    return load_engine(dtype=args.dtype, forward=args.forward)


def share(args: argparse.Namespace) -> None:
    from racer_core.bench.suites import load_suite
    from racer_core.common.events import GenerationConfig
    from racer_core.common.stats import is_verification_step

    engine = engine_for(args)
    # tie margins on, as the benchmark asks: the steps docs/performance.md's figures measured
    config = GenerationConfig(method=args.method, max_new_tokens=args.max_new_tokens, tie_margins=True)
    questions = load_suite(args.suite)[args.question_begin : args.question_end]
    draft = verify = update = 0.0
    steps = 0
    print(f"{engine.info.model} ({engine.info.dtype}, {engine.info.forward} forward); load {os.getloadavg()[0]:.2f}")
    for q in questions:
        chat = engine.new_conversation()
        for turn in q.turns:
            for event in chat.send(turn, config):
                if is_verification_step(event):
                    draft += event.draft_s
                    verify += event.verify_s
                    update += event.update_s
                    steps += 1
    total = draft + verify + update
    if not steps:
        raise SystemExit("no verification step was taken: ask for more questions or more new tokens")
    print(f"{len(questions)} questions, {steps} steps, {1000 * total / steps:.1f} ms per step; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"drafting {100 * draft / total:.1f}%, updating {100 * update / total:.1f}%, "
          f"outside the forward passes {100 * (draft + update) / total:.1f}%")


def per_layer(cache: Any, rows: int) -> None:
    """The bookkeeping as it was: each layer asked for its buffers and counted its rows."""
    import numpy as np
    import torch

    length = cache.layers[0].length
    addresses = np.empty((len(cache.layers), 3), dtype=np.int64)
    for index, layer in enumerate(cache.layers):
        if layer.length != length:
            raise ValueError("the cache's layers hold different lengths")
        k, v = layer.open_rows(rows, KV_HEADS, HEAD_DIM, torch.float32)
        addresses[index] = (k.data_ptr(), v.data_ptr(), k.stride(1))
    for layer in cache.layers:
        layer.advance(rows)
    cache.commit(length, [0])


def whole_cache(cache: Any, rows: int) -> None:
    import torch

    length = cache.length
    cache.open_all(rows, KV_HEADS, HEAD_DIM, torch.float32)
    cache.advance_all(rows)
    cache.commit(length, [0])


def bookkeeping(args: argparse.Namespace) -> None:
    import torch

    from racer_core.bench.timing import timed_rounds
    from racer_core.verify.kv_cache import TreeCache

    torch.set_num_threads(1)
    ways = {"per-layer calls": per_layer, "open_all": whole_cache}
    caches = []
    for _ in ways:
        cache = TreeCache(args.layers)
        cache.open_all(200, KV_HEADS, HEAD_DIM, torch.float32)
        cache.advance_all(200)
        caches.append(cache)
    calls = [lambda step=step, cache=cache: [step(cache, 1) for _ in range(args.steps)]
             for step, cache in zip(ways.values(), caches, strict=True)]
    for step, cache in zip(ways.values(), caches, strict=True):
        for _ in range(100):  # untimed, as before the rounds
            step(cache, 1)
    spans = timed_rounds(calls, args.rounds, warmup=0, clock=time.thread_time)
    print(f"us per sequence and step, CPU time: {args.rounds} interleaved rounds of {args.steps} steps; the mean "
          f"includes the buffers' growth as the cache lengthens, the fastest round mostly does not")
    for name, seconds in zip(ways, spans, strict=True):
        print(f"{name:<20} mean {1e6 * sum(seconds) / (args.rounds * args.steps):7.1f}   "
              f"fastest round {1e6 * min(seconds) / args.steps:7.1f}")

def recording(args: argparse.Namespace) -> None:
    from racer_core.common.events import GenerationConfig
    from racer_core.common.step_record import StepRecord

    engine = engine_for(args)
    spent: list[float] = []
    record = StepRecord.of_tree  # the decoder calls it through the class, so patching the class reaches it

    def timed(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        out = record(*a, **k)
        spent.append(time.perf_counter() - start)
        return out

    StepRecord.of_tree = staticmethod(timed)
    config = GenerationConfig(method="racer", max_new_tokens=args.max_new_tokens, tie_margins=True)  # as in share
    chat = engine.new_conversation()
    try:
        list(chat.send(PROMPT, config))  # warm up the policy and the caches
        spent.clear()
        events = list(engine.new_conversation(warm_from=chat).send(PROMPT, config))[1:]  # skip the prefill
    finally:
        StepRecord.of_tree = classmethod(record.__func__)
    if not events or not spent:
        raise SystemExit("no step was recorded: ask for more new tokens")
    step_s = sum(e.draft_s + e.verify_s + e.update_s for e in events) / len(events)
    record_s = sum(spent) / len(spent)
    nodes = sum(e.record.size for e in events) / len(events)
    print(
        f"{engine.info.model} on {engine.info.device}: {len(events)} steps, mean tree {nodes:.1f} nodes, "
        f"step {step_s * 1e3:.2f} ms, recording {record_s * 1e6:.1f} us = {100 * record_s / step_s:.2f}% of a step"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="measure", required=True)
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--tiny", action="store_true", help="a tiny random-weight model instead of the embedded one")
    model.add_argument("--max-new-tokens", type=int, default=128)
    one = sub.add_parser("share", parents=[model], help="drafting and updating as a share of racer's steps")
    one.add_argument("--suite", default="builtin")
    one.add_argument("--question-begin", type=int, default=14)
    one.add_argument("--question-end", type=int, default=20)
    one.add_argument("--dtype", default="auto")
    one.add_argument("--forward", default="auto", choices=FORWARDS)
    one.add_argument("--method", default="racer")
    two = sub.add_parser("bookkeeping", help="the cache bookkeeping of one sequence and step (no model)")
    two.add_argument("--layers", type=int, default=30)
    two.add_argument("--steps", type=int, default=600, help="steps per round")
    two.add_argument("--rounds", type=int, default=5)
    sub.add_parser("recording", parents=[model], help="the step inspector's recording against the step")
    args = parser.parse_args(argv)
    {"share": share, "bookkeeping": bookkeeping, "recording": recording}[args.measure](args)


if __name__ == "__main__":
    main()
