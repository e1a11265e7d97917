"""The original RACER evaluation's flags, with its meanings, for `racer-tui bench`.

`racer-tui --bench-name gsm8k --model-path PATH --model-id NAME --enable-thinking
False --question-end 20` runs as the original's quick check does. Today's
spellings (`--bench`, `--answer-dir`, ...) keep working beside them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import racer_tui.cli.options as o
from racer_core.bench.runner import DEFAULT_SYSTEM_PROMPT
from racer_core.bench.shard import ShardPlan, check_address, import_ray, plan_workers
from racer_core.bench.suites import Question, load_bench, load_suite, suite_name
from racer_core.common.errors import InputError
from racer_tui.cli.params import at_least


def add_suite_arguments(p: argparse.ArgumentParser) -> None:
    """SUITE, --bench SUITE (the older spelling) or --bench-name NAME (the original's): one of them."""
    p.add_argument(
        "suite",
        nargs="?",
        metavar="SUITE",
        help="'builtin', 'humaneval', 'structured' (JSON schemas), or a question file (Spec-Bench / MT-Bench .jsonl)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--bench", metavar="SUITE", help="the same as SUITE")
    o.BENCH_NAME.add(which)
    o.DATA_ROOT.add(p)


def add_original_arguments(p: argparse.ArgumentParser) -> None:
    """The original's run flags not already in today's set."""
    p.add_argument("--model-id", default=None, metavar="NAME", help="names the run in the answers (default: the model's name)")
    p.add_argument(
        "--answer-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="write one method's answers to exactly this file (instead of ANSWER_DIR/METHOD.jsonl)",
    )
    p.add_argument(
        "--num-choices",
        type=at_least(1),
        default=1,
        metavar="N",
        help="answers per question, choice i sampled with seed i (default: 1)",
    )
    o.SYSTEM_PROMPT.add(p, DEFAULT_SYSTEM_PROMPT)  # the original's benchmarks' own
    g = p.add_argument_group("sharding over Ray (pip install -e '.[ray]')")
    g.add_argument("--ray-address", default=None, metavar="HOST:PORT", help="join this Ray cluster (default: start a local one)")
    g.add_argument("--num-workers", type=at_least(1), default=None, metavar="N", help="N CPU workers, one model each")
    g.add_argument(
        "--num-gpus-per-model", type=at_least(1), default=1, metavar="G", help="GPUs each worker holds (default: 1)"
    )
    g.add_argument(
        "--num-gpus-total", type=at_least(1), default=None, metavar="T", help="T/G GPU workers, as the original"
    )


def check_suite(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Exactly one of SUITE, --bench and --bench-name; afterwards args.bench holds SUITE."""
    given = [x for x in (args.suite, args.bench, args.bench_name) if x is not None]
    if len(given) != 1:
        parser.error("give one suite: racer-tui bench SUITE (or --bench SUITE, or --bench-name NAME)")
    args.bench = args.bench or args.suite


def questions_of(args: argparse.Namespace) -> tuple[list[Question], str]:
    """The selected questions and the suite's short name; raise InputError before any model loads."""
    if args.bench_name is not None:
        questions, name = load_bench(args.bench_name, args.data_root), args.bench_name
    else:
        questions, name = load_suite(args.bench), suite_name(args.bench)
    selected = questions[args.question_begin : args.question_end]
    if not selected:
        raise InputError(f"no questions selected from {name}")
    return selected, name


def shard_plan(args: argparse.Namespace) -> ShardPlan | None:
    plan = plan_workers(
        num_workers=args.num_workers,
        num_gpus_per_model=args.num_gpus_per_model,
        num_gpus_total=args.num_gpus_total,
        address=args.ray_address,
    )
    if plan is None:
        return None
    if args.warm:
        raise InputError("--warm carries each method's drafting state across questions in order; it cannot be sharded over workers")
    if getattr(args, "repeats", 1) > 1:
        raise InputError("--repeats interleaves the tries on one engine; it cannot be sharded over workers")
    import_ray()  # fail now, in one line, not after the questions are announced
    if plan.address is not None:
        check_address(plan.address)
    return plan
