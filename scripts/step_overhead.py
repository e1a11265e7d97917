"""Time outside the forward passes, as a share of racer's verification steps
(drafting and updating; docs/performance.md has the figures).

    python scripts/step_overhead.py --question-begin 14 --question-end 20 --max-new-tokens 128

Answers built-in questions with `racer` (the shipped defaults unless --dtype /
--forward say otherwise) and sums each verification step's own timings:
draft_s (drafting, the policy's choice, the mask), verify_s (the forward pass)
and update_s (acceptance, tie margins, cache commit, table and automaton
updates, the policy's learning). The prefill is left out, as MAT leaves it out.
"""

from __future__ import annotations

import argparse
import os

from racer_core.models.load_options import FORWARDS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--question-begin", type=int, default=14)
    parser.add_argument("--question-end", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--forward", default="auto", choices=FORWARDS)
    parser.add_argument("--method", default="racer")
    args = parser.parse_args()

    from racer_core.bench.suites import load_suite
    from racer_core.common.events import GenerationConfig
    from racer_core.common.stats import is_verification_step
    from racer_core.engine.engine import load_engine
    from racer_tui.engine_loader import quiet_loading_bars

    quiet_loading_bars()
    engine = load_engine(dtype=args.dtype, forward=args.forward)
    config = GenerationConfig(method=args.method, max_new_tokens=args.max_new_tokens)
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
    print(f"{len(questions)} questions, {steps} steps, {1000 * total / max(steps, 1):.1f} ms per step; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"drafting {100 * draft / total:.1f}%, updating {100 * update / total:.1f}%, "
          f"outside the forward passes {100 * (draft + update) / total:.1f}%")


if __name__ == "__main__":
    main()
