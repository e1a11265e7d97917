"""`racer-tui speed`: per-category ms/token, MAT and speedup from answer files.

racer-tui speed ANSWER_FILE [--base BASE_FILE]
racer-tui speed FOLDER [--base BASE_FILE]   (base defaults to FOLDER/ar.jsonl)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from racer_core.bench.report import plain_console, print_tables, speed_tables
from racer_core.bench.results import load_results
from racer_core.bench.speed_lines import ranking_lines, run_lines
from racer_core.common.counts import counted
from racer_core.common.errors import RacerError
from racer_tui.cli.errors import print_error

HELP = "speed tables from answer files (ms/token, MAT, speed-up per category)"
DESCRIPTION = "Per-category ms/token, mean accepted tokens and speedup from answer files."
EPILOG = (
    "Speedup is tokens/s over the base's on the questions both answered. "
    "Lines that are not answers are skipped with a warning. Exit status: 0 done, 1 unreadable files (or none with a usable line), 2 usage error."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "answers",
        type=Path,
        metavar="ANSWER_FILE|FOLDER",
        help="an answer file, or a folder of them (*.jsonl)",
    )
    p.add_argument(
        "--base",
        "--base-path",  # the original's batch analysis spelling
        dest="base",
        type=Path,
        default=None,
        metavar="BASE_FILE",
        help="the answer file to compare with (default: ar.jsonl in a folder)",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, **hooks: Any) -> int:
    try:
        if not args.answers.exists():
            raise RacerError(f"no such file or folder: {args.answers}")
        if args.base is not None and not args.base.is_file():
            raise RacerError(f"no such base file: {args.base}")
        result = load_results(args.answers, base=args.base, skip_bad=True)
        if not result.question_order:
            raise RacerError(f"no answers in {args.answers}")
    except RacerError as exc:
        print_error(str(exc))
        return 1
    if result.unreadable:  # the original's speed script goes on past such lines too
        n = len(result.unreadable)
        print(f"warning: skipped {counted(n, 'unreadable answer line')} "
              f"(the first: {result.unreadable[0]})", file=sys.stderr)
    head = f"model {result.model}" if result.model else "answers"
    if result.device:
        head += f" ({result.device}, {result.dtype})"
    console = plain_console()
    console.print(f"{head}; {counted(len(result.question_order), 'question')}\n", markup=False, highlight=False)
    print_tables(speed_tables(result), console)
    for label in result.methods:  # the original's per-run summary, then its ranking
        print(f"\n== {label} ==")
        print("\n".join(run_lines(result, label)))
    if len(result.methods) > 1:
        print("\n" + "\n".join(ranking_lines(result)))
    return 0
