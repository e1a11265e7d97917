"""What recording each step for the step inspector costs, against the step.

    python scripts/record_cost.py [--tiny] [--max-new-tokens 128]

Runs the chat engine (the embedded model, or a tiny random one with --tiny,
the worst case: its steps are the shortest) on a repetitive prompt, timing
every call of the step recorder (StepRecord.of_tree) alongside the steps it
belongs to.
"""

from __future__ import annotations

import argparse
import time

PROMPT = (
    "Repeat this list exactly three times, one item per line: apples, pears, plums, "
    "cherries, grapes, lemons, limes, figs, dates, melons."
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny random-weight model instead of the embedded one")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)

    from racer_core.common.events import GenerationConfig
    from racer_core.common.step_record import StepRecord

    if args.tiny:
        from racer_core.testing import tiny_engine

        engine = tiny_engine()
    else:
        from racer_core.engine.engine import load_engine

        engine = load_engine()
    spent: list[float] = []
    record = StepRecord.of_tree  # the decoder calls it through the class, so patching the class reaches it

    def timed(*a, **k):
        start = time.perf_counter()
        out = record(*a, **k)
        spent.append(time.perf_counter() - start)
        return out

    StepRecord.of_tree = staticmethod(timed)
    config = GenerationConfig(method="racer", max_new_tokens=args.max_new_tokens)
    chat = engine.new_conversation()
    try:
        list(chat.send(PROMPT, config))  # warm up the policy and the caches
        spent.clear()
        events = list(engine.new_conversation(warm_from=chat).send(PROMPT, config))[1:]  # skip the prefill
    finally:
        StepRecord.of_tree = classmethod(record.__func__)
    step_s = sum(e.draft_s + e.verify_s + e.update_s for e in events) / len(events)
    record_s = sum(spent) / len(spent)
    nodes = sum(e.record.size for e in events) / len(events)
    print(
        f"{engine.info.model} on {engine.info.device}: {len(events)} steps, mean tree {nodes:.1f} nodes, "
        f"step {step_s * 1e3:.2f} ms, recording {record_s * 1e6:.1f} us = {100 * record_s / step_s:.2f}% of a step"
    )


if __name__ == "__main__":
    main()
