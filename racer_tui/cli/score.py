"""`racer-tui score`: math accuracy of answer files.

racer-tui score ANSWERS... [--questions FILE | --bench-name NAME [--data-root DIR]] [--json FILE]

References come from the question file when one is given, else from the
answer lines themselves (racer-tui writes each question's reference there).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import racer_tui.cli.options as o
from racer_core.bench.answers import AnswerRecord, read_answers
from racer_core.bench.score import MathScore, references_of, score_answers
from racer_core.bench.suites import bench_question_file, load_question_file
from racer_core.common.errors import RacerError
from racer_tui.cli.errors import print_error

HELP = "math accuracy of answer files (accuracy, pass@k, mean@k)"
DESCRIPTION = "Math accuracy of answer files: the last \\boxed{} answer of each reply against the reference."
EPILOG = (
    "One choice per question gives accuracy; k choices give pass@k, mean@k and the standard deviation of "
    "the k per-choice accuracies. Answers agree when equal after removing $, commas, spaces and \\text{}, "
    "or when math-verify finds them symbolically equal. Exit status: 0 done, 1 unreadable or unusable "
    "files, 2 usage error."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("answers", type=Path, nargs="+", metavar="ANSWERS", help="answer files (.jsonl)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--questions", type=Path, default=None, metavar="FILE", help="question file with references")
    o.BENCH_NAME.add(source)
    o.DATA_ROOT.add(p)
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the scores as JSON")


def _references(args: argparse.Namespace, records: list[AnswerRecord]) -> dict[str, tuple[str, ...]]:
    if args.questions is not None:
        return references_of(load_question_file(args.questions))
    if args.bench_name is not None:
        return references_of(load_question_file(bench_question_file(args.bench_name, args.data_root)))
    return references_of(records)


def score_file(path: Path, args: argparse.Namespace) -> MathScore:
    records = read_answers(path, turns_only=True)  # a scorer reads the replies only, as the original's
    refs = _references(args, records)
    if not refs:
        where = args.questions or args.bench_name or path
        raise RacerError(f"no references in {where}; give --questions FILE or --bench-name NAME")
    return score_answers({r.key: r for r in records}, refs)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, **hooks: Any) -> int:
    scores: dict[str, MathScore] = {}
    try:
        for path in args.answers:
            scores[str(path)] = score_file(path, args)
    except RacerError as exc:
        print_error(str(exc))
        return 1
    for name, score in scores.items():
        print(f"{name}: {score.summary()}" if len(scores) > 1 else score.summary())
    if args.json is not None:
        try:
            args.json.write_text(json.dumps({k: v.to_json() for k, v in scores.items()}, indent=2) + "\n")
        except OSError as exc:
            print_error(f"cannot write {args.json}: {exc.strerror or exc}")
            return 1
    return 0
