"""`racer-tui --bench SUITE` / `--bench-name NAME`: run a suite headless, print tables, write answers.

The original RACER's flags work with its meanings (racer_core.bench.eval_flags);
with workers or GPUs to spread over, the questions are sharded over Ray.

Exit status: 0 done, 2 usage error, 1 run-time error (one line on stderr),
130 interrupted by Ctrl-C (answers finished so far stay in their files).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from racer_core.bench.answers import DATA_DIR_ENV, default_answer_dir
from racer_core.bench.eval_flags import (
    add_original_arguments,
    add_suite_arguments,
    questions_of,
    shard_plan,
    str2bool,
)
from racer_core.bench.report import ProgressDisplay, bench_tables, plain_console, print_tables
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import run_benchmark
from racer_core.bench.score import MathScore, references_of, score_answers
from racer_core.bench.shard import ShardPlan, run_sharded
from racer_core.bench.suites import Question
from racer_core.checkpoints import add_load_arguments, load_arguments
from racer_core.config import DEFAULTS, MAX_DRAFT, MAX_TEMPERATURE, ConfigError
from racer_core.errors import RacerError
from racer_core.events import METHODS, Engine, GenerationConfig

EngineLoader = Callable[..., Engine]
DEBUG_ENV = "RACER_TUI_DEBUG"


def _param(name: str) -> Callable[[str], Any]:
    """An argparse type that reads and checks one generation parameter by
    GenerationConfig's own rules (the words the settings screen shows too)."""

    def parse(text: str) -> Any:
        try:
            return GenerationConfig.parse_field(name, text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    return parse


def _top_p(text: str) -> float:
    """--top-p as the original reads it: 0 (its default) means no nucleus filter, like 1."""
    try:
        if float(text) == 0.0:
            return 1.0
    except ValueError:
        pass
    return _param("top_p")(text)


# Parameters this command sets besides the method list.
TUNED = ("max_new_tokens", "temperature", "top_p", "max_num_draft", "ngram", "max_nodes", "max_breadth")


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def _methods(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in METHODS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(bad) or '(none)'}; choose from {', '.join(METHODS)}"
        )
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="racer-tui",
        usage="racer-tui (--bench SUITE | --bench-name NAME) [options]",
        description="Benchmark decoding methods on a question suite, headless.",
        epilog=(
            "Methods answer the same questions interleaved (question 1 with every method, "
            "then question 2, ...), after one untimed warm-up reply each. Answers go to "
            f"ANSWER_DIR/METHOD.jsonl (default under the user data folder, or ${DATA_DIR_ENV}). "
            "Exit status: 0 done, 1 run-time error, 2 usage error, 130 interrupted (Ctrl-C)."
        ),
    )
    add_suite_arguments(p)
    p.add_argument(
        "--methods",
        type=_methods,
        default=["ar", "racer"],
        help=f"comma list from {','.join(METHODS)} (default: ar,racer)",
    )
    p.add_argument(
        "--question-begin",
        type=_at_least(0),
        default=None,
        metavar="N",
        help="first question, 0-based (default: 0)",
    )
    p.add_argument(
        "--question-end",
        type=_at_least(0),
        default=None,
        metavar="N",
        help="stop before this question, 0-based (default: all)",
    )
    d = DEFAULTS
    p.add_argument("--max-new-tokens", type=_param("max_new_tokens"), default=d.max_new_tokens, metavar="N",
                   help=f"per turn (default: {d.max_new_tokens})")
    p.add_argument("--temperature", type=_param("temperature"), default=d.temperature,
                   help=f"0 (default) is greedy, at most {MAX_TEMPERATURE:g}")
    p.add_argument("--top-p", type=_top_p, default=d.top_p,
                   help=f"nucleus sampling mass in (0, 1] (default: {d.top_p:g}); 0, the original's default, "
                   "means no nucleus filter, like 1 (with temperature 0 decoding is greedy and top-p is unused)")
    p.add_argument(
        "--enable-thinking",
        type=str2bool,
        nargs="?",
        const=True,
        default=None,
        metavar="true|false",
        help="passed to the chat template (false turns off a reasoning model's thinking); "
        "left out, the template decides",
    )
    p.add_argument("--model-path", default=None, help="a checkpoint folder or GGUF file (default: embedded)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (default: auto)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16 (default: auto)")
    add_load_arguments(p)
    p.add_argument("--max-num-draft", type=_param("max_num_draft"), default=d.max_num_draft, metavar="N|auto",
                   help=f"draft tree budget, 1 to {MAX_DRAFT} (default: {d.max_num_draft})")
    p.add_argument("--ngram", type=_param("ngram"), default=d.ngram, metavar="N",
                   help=f"automaton n-gram length (default: {d.ngram})")
    p.add_argument("--max-nodes", type=_param("max_nodes"), default=d.max_nodes, metavar="N",
                   help=f"automaton capacity (default: {d.max_nodes})")
    p.add_argument("--max-breadth", type=_param("max_breadth"), default=d.max_breadth, metavar="K",
                   help=f"logits tree breadth (default: {d.max_breadth})")
    p.add_argument("--answer-dir", type=Path, default=None, metavar="DIR", help="where METHOD.jsonl answer files go")
    add_original_arguments(p)
    p.add_argument(
        "--summary-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="write totals per method and category as JSON (speedup_vs_ar and identical_to_ar are null "
        "where they do not apply, identical_to_ar also on the ar row)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip questions already in the answer files (per method)",
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="keep each method's automaton across questions instead of a fresh one",
    )
    return p


def _default_loader(**kwargs: Any) -> Engine:
    try:
        from racer_core.engine import load_engine
    except ImportError as exc:
        raise RacerError(f"the engine cannot be imported ({exc})") from None

    return load_engine(**kwargs)


def main(argv: list[str] | None = None, *, engine_loader: EngineLoader | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.question_end is not None and args.question_end <= (args.question_begin or 0):
        parser.error("--question-end must be greater than --question-begin")
    # Each value was checked alone; the whole config is built (and checked) before any model loads.
    args.config = GenerationConfig(
        method=args.methods[0], enable_thinking=args.enable_thinking, **{n: getattr(args, n) for n in TUNED}
    )
    try:
        return _run(args, engine_loader or _default_loader)
    except RacerError as exc:
        _error(str(exc))
        return 1
    except OSError as exc:  # answer folder or summary file not writable
        _error(f"{exc.filename or 'file'}: {exc.strerror or exc}")
        return 1
    except KeyboardInterrupt:
        _error("interrupted; finished answers are kept (rerun with --resume to continue)")
        return 130
    except Exception as exc:  # an engine bug: one line for users, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        _error(f"{type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)")
        return 1


def _error(message: str) -> None:
    print(f"racer-tui: error: {message}", file=sys.stderr)


def _run(args: argparse.Namespace, loader: EngineLoader) -> int:
    # validate the questions and the worker plan before the slow model load: bad input fails at once
    questions, name = questions_of(args)
    plan = shard_plan(args)
    config = args.config
    system_prompt = args.system_prompt or None
    err = sys.stderr
    run = dict(
        answer_file=args.answer_file,
        resume=args.resume,
        suite=name,
        num_choices=args.num_choices,
        system_prompt=system_prompt,
        model_id=args.model_id,
    )
    if args.answer_file is not None and len(args.methods) != 1:
        raise RacerError("--answer-file holds one method's answers; give --methods with one method, or --answer-dir")
    load = functools.partial(
        loader, model_path=args.model_path, dtype=args.dtype, progress=None, **load_arguments(args)
    )
    if plan is None:
        engine = load(device=args.device)
        answer_dir = _answer_dir(args, name, args.model_id or engine.info.model)
        _announce(args, name, len(questions), f"{engine.info.model} ({engine.info.device}, {engine.info.dtype})", err)
        with ProgressDisplay(args.methods, len(questions), err) as display:
            result = run_benchmark(
                engine, questions, args.methods, config, answer_dir=answer_dir, warm=args.warm,
                on_progress=display, **run,
            )
    else:
        answer_dir = _answer_dir(args, name, args.model_id or _model_name(args.model_path))
        _announce(args, name, len(questions), _workers_text(plan), err)
        device = args.device if args.device != "auto" else ("cuda" if plan.gpus_per_worker else "cpu")
        with ProgressDisplay(args.methods, len(questions), err) as display:
            result = run_sharded(
                functools.partial(load, device=device), questions, args.methods, config, plan,
                answer_dir=answer_dir, on_progress=display, **run,
            )
    print_tables(bench_tables(result), plain_console())
    notes = ["automaton kept across questions (--warm)" if args.warm else "fresh automaton per question"]
    if result.greedy and "ar" in result.records:
        same = all(row.versus.identical is not False for row in result.method_totals().values())
        notes.append(
            "greedy: every method's tokens equal ar's"
            if same
            else "greedy: some outputs differ from ar's (see 'same as ar')"
        )
    if result.skipped_for_images:
        notes.append(f"warning: {result.skipped_for_images} question(s) with images skipped (the model reads text only)")
    print("\n" + "; ".join(notes))
    scores = _scores(result, questions)
    for method, score in scores.items():
        print(f"{method}: {score.summary()}")
    if args.summary_json is not None:
        extra = {"accuracy": {m: s.to_json() for m, s in scores.items()}} if scores else {}
        _write_json(args.summary_json, result.to_summary(**extra))
        print(f"summary: {args.summary_json}")
    print(f"answers: {args.answer_file or answer_dir}")
    return 0


def _answer_dir(args: argparse.Namespace, suite: str, model: str) -> Path | None:
    if args.answer_file is not None:
        return None
    return args.answer_dir or default_answer_dir(suite, model)


def _model_name(model_path: str | None) -> str:
    return Path(model_path).name if model_path else "embedded"


def _workers_text(plan: ShardPlan) -> str:
    kind = f"{plan.gpus_per_worker:g} GPU(s) each" if plan.gpus_per_worker else "CPU"
    where = f"Ray at {plan.address}" if plan.address else "a local Ray cluster"
    return f"{plan.workers} {kind} worker(s) on {where}"


def _announce(args: argparse.Namespace, name: str, count: int, where: str, err: Any) -> None:
    print(
        f"{name}: {count} questions x {', '.join(args.methods)} on {where}; "
        f"{'warm automaton across questions' if args.warm else 'fresh automaton per question'}; "
        "one untimed warm-up reply per method first",
        file=err,
    )


def _scores(result: BenchResult, questions: list[Question]) -> dict[str, MathScore]:
    """Math accuracy per method, when the questions have references: a speed-up that changed answers shows."""
    refs = references_of(questions)
    if not refs:
        return {}
    return {m: score_answers(result.records.get(m, {}), refs) for m in result.methods}


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # never a half-written summary
    except OSError as exc:
        raise RacerError(f"cannot write {path}: {exc.strerror or exc}") from None
