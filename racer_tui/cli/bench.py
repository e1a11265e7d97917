"""`racer-tui bench SUITE` (or `--bench SUITE` / `--bench-name NAME`): run a
suite headless, print tables, write answers.

The original RACER's flags work with its meanings (eval_flags.py); with
workers or GPUs to spread over, the questions are sharded over Ray.

Exit status: 0 done, 2 usage error, 1 run-time error (one line on stderr) or
a question that failed (the run goes on past it; its answer line says why),
128 + the signal's number when stopped by Ctrl-C (130), SIGTERM (143) or
SIGHUP (129); answers finished so far stay in their files either way.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import racer_tui.cli.options as o
from racer_core.bench.answers import DATA_DIR_ENV, default_answer_dir
from racer_core.bench.constrained import structured_refusal
from racer_core.bench.report import ProgressDisplay, bench_tables, plain_console, print_tables
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import check_repeats, run_benchmark
from racer_core.bench.score import MathScore, references_of, score_answers
from racer_core.bench.shard import ShardPlan, run_sharded
from racer_core.bench.suites import Question
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa
from racer_core.common.counts import counted
from racer_core.common.errors import RacerError
from racer_core.common.events import METHODS, Engine, GenerationConfig
from racer_tui.cli.errors import DEBUG_ENV, print_error
from racer_tui.cli.eval_flags import add_original_arguments, add_suite_arguments, check_suite, questions_of, shard_plan
from racer_tui.cli.params import at_least, methods, rule
from racer_tui.engine_loader import quiet_loading_bars

EngineLoader = Callable[..., Engine]
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # end a run like Ctrl-C does

USAGE = "racer-tui bench SUITE [options]\n       racer-tui (--bench SUITE | --bench-name NAME) [options]"
HELP = "benchmark decoding methods on a question suite, headless"
DESCRIPTION = "Benchmark decoding methods on a question suite, headless."
EPILOG = (
    "Methods answer the same questions interleaved (question 1 with every method, "
    "then question 2, ...), after one untimed warm-up reply each. Answers go to "
    f"ANSWER_DIR/METHOD.jsonl (default under the user data folder, or ${DATA_DIR_ENV}). "
    "A question the engine fails on is recorded with its error and the run goes on. "
    "A question with a JSON schema (the `structured` suite) is answered under it and the tables add MAT "
    "split into the grammar's forced tokens and the rest, and the replies that parse and validate; such a "
    "suite needs the [structured] extra. "
    "Exit status: 0 done, 1 run-time error or a failed question, 2 usage error or a missing extra, 128 + the signal's number when "
    "stopped by Ctrl-C (130), SIGTERM (143) or SIGHUP (129); finished answers are kept "
    "(rerun with --resume to continue)."
)

DEFAULT_METHODS = ("ar", "racer")
# Parameters this command sets besides the method list.
TUNED = tuple(option.dest for option in o.TUNING)


def configure(p: argparse.ArgumentParser) -> None:
    add_suite_arguments(p)
    p.add_argument(
        "--methods",
        type=methods,
        default=None,
        help=f"comma list from {','.join(METHODS)} (default: ar,racer; racer alone with --answer-file, "
        "as the original's inference_racer)",
    )
    for flag, what in (("--question-begin", "first question, 0-based (default: 0)"),
                       ("--question-end", "stop before this question, 0-based (default: all)")):
        p.add_argument(flag, type=at_least(0), default=None, metavar="N", help=what)
    for option in o.TUNING:
        if option is o.ENABLE_THINKING:  # left out, the chat template decides, as in the original's benchmarks
            option.add(p, None, shown="the chat template decides")
        else:
            option.add(p)
    o.add_all(p, (o.MODEL, o.DEVICE, o.DTYPE))
    o.add_loading(p)
    p.add_argument("--isa", choices=ISA_CHOICES, default="native",
                   help="the CPU class to measure: avx2 limits torch's libraries to AVX2 (most laptops) on an "
                   "AVX-512 machine, avxvnni the same with racer's 4-bit kernel on AVX-VNNI (Intel from Alder "
                   "Lake on); the command starts again with them limited (default: native)")
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
        help="keep each method's drafting state across questions (racer's automaton and table, suffix's cache, "
        "recycling's matrix) instead of a fresh one",
    )
    p.add_argument(
        "--repeats",
        type=rule(check_repeats, "repeats"),
        default=1,
        metavar="N",
        help="answer each question N times (every method once per round) and keep the try of median time; "
        "the tables show the spread of per-question speedups and warn when it is wide (default: 1)",
    )


def _default_loader(**kwargs: Any) -> Engine:
    try:
        from racer_core.engine.engine import load_engine
    except ImportError as exc:
        raise RacerError(f"the engine cannot be imported ({exc})") from None

    return load_engine(**kwargs)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: handled like Ctrl-C (a KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """While a run is going, SIGTERM and SIGHUP raise Stopped in the main thread,
    so the answer writer finishes its line and closes its file as on Ctrl-C."""

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        yield
        return
    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, *, engine_loader: EngineLoader | None = None) -> int:
    check_suite(args, parser)
    if engine_loader is None:
        reexec_with_isa(args.isa)  # before torch loads: the libraries read their limits once
    if args.methods is None:  # an answer file holds one method's answers: the original's racer run
        args.methods = ["racer"] if args.answer_file is not None else list(DEFAULT_METHODS)
    if args.question_end is not None and args.question_end <= (args.question_begin or 0):
        parser.error("--question-end must be greater than --question-begin")
    # Each value was checked alone; the whole config is built (and checked) before any model loads.
    args.config = GenerationConfig(
        method=args.methods[0], **{n: getattr(args, n) for n in TUNED}
    )
    refusal = o.method_refusal(args.methods, args, args.config)
    if refusal is not None:  # a missing library or draft head, penalties an anchor does not apply
        print_error(refusal)
        return 2
    try:
        with _stop_on_signals():
            return _run(args, engine_loader or _default_loader)
    except RacerError as exc:
        print_error(str(exc))
        return 1
    except OSError as exc:  # answer folder or summary file not writable
        print_error(f"{exc.filename or 'file'}: {exc.strerror or exc}")
        return 1
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        cause = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        print_error(f"{cause}; finished answers are kept (rerun with --resume to continue)")
        return 128 + signum
    except Exception as exc:  # an engine bug: one line for users, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        print_error(f"{type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)")
        return 1


def _run(args: argparse.Namespace, loader: EngineLoader) -> int:
    # validate the questions and the worker plan before the slow model load: bad input fails at once
    questions, name = questions_of(args)
    if (refusal := structured_refusal(questions, name, args.methods)) is not None:  # a schema per question needs llguidance
        print_error(refusal)
        return 2
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
    quiet_loading_bars()  # our progress display, not transformers' bars
    load = functools.partial(
        loader, model_path=args.model_path, dtype=args.dtype, progress=None, **o.load_arguments(args)
    )
    if plan is None:
        engine = load(device=args.device)
        answer_dir = _answer_dir(args, name, args.model_id or engine.info.model)
        info = engine.info
        on = f" on {info.cpu}" if info.cpu else ""  # which CPU and class the figures are for
        _announce(args, name, len(questions), f"{info.model} ({info.device}, {info.dtype}, {info.forward} forward){on}",
                  err)
        with ProgressDisplay(args.methods, len(questions), err) as display:
            result = run_benchmark(
                engine, questions, args.methods, config, answer_dir=answer_dir, warm=args.warm,
                on_progress=display, repeats=args.repeats, **run,
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
    notes = ["drafting state (automaton, suffix cache, recycling matrix) kept across questions (--warm)"
             if args.warm else "fresh drafting state per question (automaton, suffix cache, recycling matrix)"]
    if result.greedy and "ar" in result.records:
        rows = result.method_totals().values()
        same = all(row.versus.identical is not False for row in rows)
        other = any(row.versus.other_questions for row in rows)
        notes.append(
            "greedy: every method's tokens equal ar's"
            if same
            else "greedy: some outputs differ from ar's, each first at a near-tie (rounding, not a bug)"
            if not other
            else "greedy: some outputs differ from ar's NOT at a near-tie (see the warning)"
        )
    if result.skipped_for_images:
        notes.append(f"warning: {counted(result.skipped_for_images, 'question')} with images skipped (the model reads "
                     "text only)")
    print("\n" + "; ".join(notes))
    scores = _scores(result, questions)
    for method, score in scores.items():
        print(f"{method}: {score.summary()}")
    if args.summary_json is not None:
        extra = {"accuracy": {m: s.to_json() for m, s in scores.items()}} if scores else {}
        _write_json(args.summary_json, result.to_summary(**extra))
        print(f"summary: {args.summary_json}")
    print(f"answers: {args.answer_file or answer_dir}")
    if failed := result.failure_count():  # the run went on past them; the exit status still tells
        print_error(
            f"{counted(failed, 'question')} failed (see the error field of the answer lines; "
            "--resume answers them again)"
        )
        return 1
    return 0


def _answer_dir(args: argparse.Namespace, suite: str, model: str) -> Path | None:
    if args.answer_file is not None:
        return None
    return args.answer_dir or default_answer_dir(suite, model)


def _model_name(model_path: str | None) -> str:
    return Path(model_path).name if model_path else "embedded"


def _workers_text(plan: ShardPlan) -> str:
    where = f"Ray at {plan.address}" if plan.address else "a local Ray cluster"
    if not plan.gpus_per_worker:
        return f"{counted(plan.workers, 'CPU worker')} on {where}"
    gpus = f"{plan.gpus_per_worker:g} GPU{'' if plan.gpus_per_worker <= 1 else 's'}"
    return f"{counted(plan.workers, 'worker')} of {gpus} each on {where}"


def _announce(args: argparse.Namespace, name: str, count: int, where: str, err: Any) -> None:
    print(
        f"{name}: {counted(count, 'question')} x {', '.join(args.methods)} on {where}; "
        f"{'warm drafting state across questions' if args.warm else 'fresh drafting state per question'}; "
        + (f"{args.repeats} tries per question, the median kept; " if args.repeats > 1 else "")
        + "one untimed warm-up reply per method first",
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
