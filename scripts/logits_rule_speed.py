"""Speed of two logits-tree variants, side by side in one run.

Loads the engine once and answers each question with plain greedy decoding
(`ar`), RACER with the paper's rule (the default) and RACER with the older
rule (`variant(Automaton, late_halving=True)`, racer_core.drafting.automaton.variants), interleaved per question so drift on a
shared machine hits all three alike (the two RACER variants swap order every
question). Prints tokens per second as a ratio to `ar`, the mean accepted
tokens per step (MAT), and whether each variant's output equals `ar`'s.

    python scripts/logits_rule_speed.py --question-begin 14 --max-new-tokens 128
    python scripts/logits_rule_speed.py --compare pair_rows ...   # pair rows on (default) vs off

`--compare late_halving` (the default) sets the second variant's automaton to
the older breadth rule; `--compare pair_rows` turns its (previous token,
token) rows off instead. The variant is built here, by handing racer's drafter an
automaton class with the option set; the engine itself always uses the default.
MAT counts verification steps only (the prefill is not one).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import racer_core.drafting.racer as racer_drafter
from racer_core.bench.suites import Question, load_suite
from racer_core.common.events import Engine, GenerationConfig
from racer_core.common.stats import is_verification_step
from racer_core.drafting.automaton import Automaton
from racer_core.drafting.automaton.variants import variant
from racer_core.engine.engine import load_engine

VARIANTS = ("ar", "racer paper", "racer late")
# The second variant's automaton option, per --compare.
ALTERNATIVES = {"late_halving": {"late_halving": True}, "pair_rows": {"pair_rows": False}}
alternative: dict[str, bool] = ALTERNATIVES["late_halving"]
LABELS = {"late_halving": "racer late", "pair_rows": "racer no-pair"}  # how 'racer late' is printed
shown = {v: v for v in VARIANTS}


@dataclass
class Tally:
    tokens: int = 0
    seconds: float = 0.0
    accepts: list[int] = field(default_factory=list)
    same: int = 0


@contextmanager
def logits_rule(late: bool) -> Iterator[None]:
    """Racer's drafter builds its automata with the --compare option inside the block when `late`."""
    original = racer_drafter.Automaton
    racer_drafter.Automaton = functools.partial(variant, Automaton, **alternative) if late else Automaton  # type: ignore[misc]
    try:
        yield
    finally:
        racer_drafter.Automaton = original  # type: ignore[misc]


def answer(engine: Engine, q: Question, config: GenerationConfig) -> tuple[list[tuple[int, ...]], float, list[int]]:
    """Token ids per turn, wall seconds, accept length per step."""
    conv = engine.new_conversation()
    ids: list[tuple[int, ...]] = []
    accepts: list[int] = []
    seconds = 0.0
    for turn in q.turns:
        t0 = time.perf_counter()
        turn_ids: list[int] = []
        for ev in conv.send(turn, config):
            turn_ids.extend(ev.token_ids)
            if is_verification_step(ev):
                accepts.append(ev.accept_length)
        seconds += time.perf_counter() - t0
        ids.append(tuple(turn_ids))
    return ids, seconds, accepts


def run_variant(engine: Engine, q: Question, variant: str, config: GenerationConfig) -> tuple[list[tuple[int, ...]], float, list[int]]:
    if variant == "ar":
        return answer(engine, q, replace(config, method="ar"))
    with logits_rule(late=variant == "racer late"):
        return answer(engine, q, replace(config, method="racer"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--question-begin", type=int, default=0)
    parser.add_argument("--question-end", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-num-draft", default="auto", help='a budget, or "auto" (the tree policy)')
    parser.add_argument("--model", "--model-path", dest="model_path", default=None, help="default: the embedded model")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on CPUs with native bf16), float32, ...")
    parser.add_argument("--compare", choices=sorted(ALTERNATIVES), default="late_halving",
                        help="what 'racer late' changes: the older breadth rule, or no pair rows")
    args = parser.parse_args(argv)
    global alternative
    alternative = ALTERNATIVES[args.compare]
    shown["racer late"] = LABELS[args.compare]

    budget = args.max_num_draft if args.max_num_draft == "auto" else int(args.max_num_draft)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, temperature=0.0, max_num_draft=budget)
    engine = load_engine(args.model_path, dtype=args.dtype)
    questions = load_suite(args.suite)[args.question_begin : args.question_end]
    tallies = {v: Tally() for v in VARIANTS}
    warmup = Question(question_id="warm-up", category="warm-up", turns=("Name three colours of the rainbow.",))
    for v in VARIANTS:  # untimed: first-call costs stay out of the timings
        run_variant(engine, warmup, v, replace(config, max_new_tokens=16))
    print(f"{engine.info.model} on {engine.info.device}: warmed up; {len(questions)} questions", flush=True)
    for n, q in enumerate(questions):
        racers = list(VARIANTS[1:]) if n % 2 == 0 else list(reversed(VARIANTS[1:]))
        reference = None
        for v in ["ar", *racers]:
            ids, seconds, accepts = run_variant(engine, q, v, config)
            t = tallies[v]
            t.tokens += sum(len(x) for x in ids)
            t.seconds += seconds
            t.accepts.extend(accepts)
            if v == "ar":
                reference = ids
            t.same += ids == reference
        report(tallies, n + 1)

    print(f"\n{engine.info.model} on {engine.info.device} ({engine.info.dtype}); {len(questions)} questions, "
          f"{args.max_new_tokens} new tokens, greedy, max_num_draft {args.max_num_draft}")
    report(tallies, len(questions))


def report(tallies: dict[str, Tally], questions: int) -> None:
    """Totals so far (printed after every question, so a cut-short run still says something)."""
    ar_speed = tallies["ar"].tokens / tallies["ar"].seconds
    print(f"after {questions} question(s):")
    print(f"  {'variant':<13} {'tokens':>7} {'seconds':>8} {'tok/s':>7} {'vs ar':>6} {'MAT':>5}  same as ar")
    for v in VARIANTS:
        t = tallies[v]
        speed = t.tokens / t.seconds
        mat = sum(t.accepts) / len(t.accepts)
        print(f"  {shown[v]:<13} {t.tokens:>7} {t.seconds:>8.1f} {speed:>7.2f} {speed / ar_speed:>5.2f}x {mat:>5.2f}  "
              f"{t.same}/{questions}", flush=True)


if __name__ == "__main__":
    main()
