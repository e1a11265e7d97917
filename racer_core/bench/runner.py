"""Run questions through an engine, every method interleaved per question.

Fairness rules: method order is fixed and all methods answer question 1 before
any answers question 2, so slow drift (thermals, other load) hits them alike;
one untimed warm-up reply per method comes first; each question gets a fresh
conversation (empty automaton, suffix cache, recycling matrix) unless `warm`
keeps the previous question's per method. Wall time per turn covers the whole reply, prefill
included, minus the time spent in `on_progress` (a slow front end must not
count against a method). Each question may be answered several times
(`num_choices`, seeds 0, 1, ...), as the original's `--num-choices`. A
question the engine fails on is recorded with its error and the run goes on,
as the original's does.

A question with a JSON Schema (a constrained suite, racer_core/bench/constrained.py)
is answered under `Grammar("json_schema", schema)`; its answer keeps the schema,
so the results can check each reply against it. Such a run's warm-up replies
are in JSON mode, so the grammar engine's first use is not timed either.

MAT counts tree verification steps only: the first event of a turn is the
prefill, which yields one token from the prompt alone, so it is timed but not
counted as a step (as the original counts it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from racer_core.bench.answers import AnswerRecord, AnswerWriter, Choice, answer_path, read_answers
from racer_core.bench.constrained import grammar_for
from racer_core.bench.images import images_of_turn, takes_images, without_image_questions
from racer_core.bench.results import BenchResult, load_results
from racer_core.bench.suites import Question
from racer_core.common.capabilities import check_methods_for
from racer_core.common.config import DRAFTING_METHODS
from racer_core.common.errors import InputError, RacerError
from racer_core.common.events import (
    METHODS,
    Conversation,
    Engine,
    EngineInfo,
    GenerationConfig,
    ShouldStop,
    StepEvent,
)
from racer_core.common.grammar import JSON_OBJECT, Grammar
from racer_core.common.stats import UNSTEPPED_METHODS, count_sources, is_verification_step

__all__ = [
    "BenchProgress",
    "BenchResult",
    "load_results",
    "check_repeats",
    "run_benchmark",
    "run_config",
    "answer_choice",
    "answer_files",
    "DEFAULT_SYSTEM_PROMPT",
    "WARMUP_PROMPT",
]

_clock = time.perf_counter  # a module attribute so tests can drive time by hand

WARMUP_PROMPT = "Name three colours of the rainbow in one short sentence."
WARMUP_TOKENS = 16
SUITE_GRAMMAR = Grammar(JSON_OBJECT)  # a constrained run's warm-up and checks: any JSON object


def check_repeats(value: int | str) -> int:
    """Tries per question, read by the one rule that --repeats, the dashboard's
    field and run_benchmark share: a whole number, at least 1."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InputError(f"repeats must be a whole number, at least 1, not {value.strip()!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"repeats must be at least 1, not {value}")
    return value


@dataclass(frozen=True)
class BenchProgress:
    """What the runner is doing; one per step, plus one at each question's start and end.

    question_index is 0-based within the run's questions. At a question's end
    (question_done=True) `record` holds its answer; a question skipped by
    `resume` reports only an end, with the answer read back from the file.
    With repeats, `repeat` is the 0-based try of `repeats`; the end comes once,
    after the last try, with the kept (median) answer.
    """

    method: str
    question_index: int
    question_count: int
    question_id: str | int
    category: str
    event: StepEvent | None
    question_done: bool
    record: AnswerRecord | None = None
    repeat: int = 0
    repeats: int = 1


OnProgress = Callable[[BenchProgress], None]


DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
"""The original benchmarks' system prompt."""


def run_config(
    config: GenerationConfig,
    info: EngineInfo,
    warm: bool,
    *,
    num_choices: int = 1,
    system_prompt: str | None = None,
    repeats: int = 1,
) -> dict[str, Any]:
    """The settings written into each answer line; resume refuses a mismatch."""
    cfg = asdict(config)
    del cfg["tie_margins"]  # what the runner asks of the engine, no setting: answer lines stay as they were
    cfg.update(warm=warm, device=info.device, dtype=info.dtype)
    # written only when set, so files of earlier runs still resume
    if num_choices != 1:
        cfg["num_choices"] = num_choices
    if system_prompt is not None:
        cfg["system_prompt"] = system_prompt
    if repeats != 1:
        cfg["repeats"] = repeats
    return cfg


def answer_files(
    methods: Sequence[str], answer_dir: str | Path | None, answer_file: str | Path | None = None
) -> dict[str, Path]:
    """Where each method's answers go: `answer_file` (one method only) or ANSWER_DIR/METHOD.jsonl."""
    if answer_file is not None:
        if len(methods) != 1:
            raise InputError("an answer file holds one method's answers; give one method or use an answer folder")
        return {methods[0]: Path(answer_file)}
    if answer_dir is None:
        return {}
    return {m: answer_path(answer_dir, m) for m in methods}


def choice_config(config: GenerationConfig, index: int) -> GenerationConfig:
    """Choice i samples with seed base + i (base 0 unless set), as the original seeds choice i with i."""
    return replace(config, seed=(config.seed or 0) + index)


def check_run(
    methods: Sequence[str],
    num_choices: int,
    answer_dir: str | Path | None,
    answer_file: str | Path | None,
    resume: bool,
) -> tuple[list[str], dict[str, Path]]:
    """The methods (deduplicated) and answer paths of a run; raise InputError before anything starts."""
    methods = list(dict.fromkeys(methods))
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise InputError(f"unknown method(s): {', '.join(unknown) or '(none)'}")
    if num_choices < 1:
        raise InputError(f"num_choices must be at least 1, not {num_choices}")
    paths = answer_files(methods, answer_dir, answer_file)
    if resume and not paths:
        raise InputError("resume needs an answer folder")
    return methods, paths


@dataclass
class RunStart:
    """A run's empty result, the config written into its lines, and the answers resume found."""

    result: BenchResult
    configs: dict[str, dict[str, Any]]
    done: dict[str, set[str]]


def start_run(
    info: EngineInfo,
    questions: Sequence[Question],
    methods: list[str],
    paths: dict[str, Path],
    config: GenerationConfig,
    *,
    answer_dir: str | Path | None,
    warm: bool,
    resume: bool,
    suite: str | None,
    num_choices: int,
    system_prompt: str | None,
    model_id: str | None,
    repeats: int = 1,
) -> RunStart:
    result = BenchResult(
        methods=list(methods),
        records={m: {} for m in methods},
        question_order=[str(q.question_id) for q in questions],
        greedy=config.greedy,
        suite=suite,
        model=model_id or info.model,
        device=info.device,
        dtype=info.dtype,
        cpu=info.cpu or None,
        forward=info.forward,
        warm=warm,
        question_count=len(questions),
        answer_dir=None if answer_dir is None else Path(answer_dir),
        completed=False,
    )
    configs = {
        m: run_config(
            replace(config, method=m), info, warm, num_choices=num_choices, system_prompt=system_prompt, repeats=repeats
        )
        for m in methods
    }
    done = _resume(result, paths, configs) if resume else {m: set() for m in methods}
    return RunStart(result, configs, done)


class _Stopped(Exception):
    """should_stop fired mid-question: the run ends, the question is not kept."""


def run_benchmark(
    engine: Engine,
    questions: Sequence[Question],
    methods: Sequence[str],
    config: GenerationConfig,
    *,
    answer_dir: str | Path | None = None,
    warm: bool = False,
    resume: bool = False,
    should_stop: ShouldStop | None = None,
    on_progress: OnProgress | None = None,
    warmup: bool = True,
    suite: str | None = None,
    answer_file: str | Path | None = None,
    num_choices: int = 1,
    system_prompt: str | None = None,
    model_id: str | None = None,
    repeats: int = 1,
) -> BenchResult:
    """Answer `questions` with every method; write answer files when `answer_dir`
    (ANSWER_DIR/METHOD.jsonl) or `answer_file` (one method) is set.

    `model_id` names the run in the answer lines (default: the engine's model
    name); each question gets `num_choices` replies; every conversation starts
    with `system_prompt` when it is given.

    With `repeats` N each question is answered N times, every method once
    per round (interleaved as questions are), and the try of median time is
    kept (for an even N the faster of the two middle ones); the result keeps
    every try's tokens/s for the spread.

    Without `resume` an existing answer file of a method in the run is
    replaced. With it, questions already in the file are skipped (and count in
    the result). Returns early, with `completed=False`, when `should_stop`
    returns True; the question in flight is then dropped.
    """
    methods, paths = check_run(methods, num_choices, answer_dir, answer_file, resume)
    # a missing library or head, penalties an anchor cannot apply; a grammar (a constrained suite) it cannot follow
    check_methods_for(engine, with_suite_grammar(config, questions), methods)
    repeats = check_repeats(repeats)
    questions, skipped = without_image_questions(questions, takes_images(engine))
    start = start_run(
        engine.info, questions, methods, paths, config, answer_dir=answer_dir, warm=warm, resume=resume,
        suite=suite, num_choices=num_choices, system_prompt=system_prompt, model_id=model_id, repeats=repeats,
    )
    result, configs, done = start.result, start.configs, start.done
    result.repeats = repeats
    result.skipped_for_images = skipped
    model = result.model or engine.info.model

    writers: dict[str, AnswerWriter] = {}
    try:
        if warmup:
            _warm_up(engine, methods, with_suite_grammar(config, questions), should_stop, system_prompt)
        # opened after the warm-up: a run that fails that early keeps the old answers
        for m, path in paths.items():
            writers[m] = AnswerWriter(path, append=resume)
        progress = _Reporter(on_progress, len(questions), repeats)
        previous: dict[str, Conversation | None] = {m: None for m in methods}
        for index, q in enumerate(questions):
            key = str(q.question_id)
            tries: dict[str, list[tuple[AnswerRecord, Conversation | None]]] = {m: [] for m in methods}
            for repeat in range(repeats):
                last = repeat == repeats - 1
                progress.repeat = repeat
                for m in methods:
                    if key in done[m]:
                        if last:
                            progress(m, index, q, None, True, result.records[m][key])
                        continue
                    failed = [t for t in tries[m] if t[0].error is not None]
                    if not failed:  # a failed try ends the question for this method
                        tries[m].append(
                            _answer_question(engine, q, replace(config, method=m), num_choices, system_prompt,
                                             warm, previous[m], should_stop, progress, index, model, configs[m])
                        )
                    if not last:
                        continue
                    failed = [t for t in tries[m] if t[0].error is not None]
                    # the median try by time is kept (or the failure); a warm run goes on from its conversation
                    record, conv = failed[0] if failed else sorted(tries[m], key=lambda t: t[0].seconds)[(repeats - 1) // 2]
                    previous[m] = conv
                    if repeats > 1 and not failed:
                        result.repeat_speeds.setdefault(m, {})[key] = [_speed(r) for r, _ in tries[m]]
                    if m in writers:
                        writers[m].write(record)
                    result.add(m, record)
                    progress(m, index, q, None, True, record)
        result.completed = True
    except _Stopped:
        pass
    finally:
        for w in writers.values():
            w.close()
    return result


def _answer_question(
    engine: Engine,
    q: Question,
    config: GenerationConfig,
    num_choices: int,
    system_prompt: str | None,
    warm: bool,
    previous: Conversation | None,
    should_stop: ShouldStop | None,
    progress: _Reporter,
    index: int,
    model: str,
    run_config: dict[str, Any],
) -> tuple[AnswerRecord, Conversation | None]:
    """One try at a question by one method: its record and its last conversation
    (what a warm run goes on from, starting from `previous`; None when not warm).

    When the engine fails on the question, the record says why in `error` and
    keeps the choices finished before; the run goes on with the next question."""
    choices = []
    warm_from = previous if warm else None
    error = None
    if q.schema is not None:  # the question's own constraint; the run's config has none (run_config stays per run)
        config = replace(config, grammar=grammar_for(q.schema))
    for i in range(num_choices):
        # seeded even alone: sampled, every method then answers the same text (the
        # verifier's one draw per emitted token), so their speeds are compared on it
        cfg = choice_config(config, i)
        try:
            conv = engine.new_conversation(system_prompt=system_prompt, warm_from=warm_from)
            choices.append(answer_choice(conv, q, cfg, i, should_stop, progress, index))
        except _Stopped:
            raise
        except Exception as exc:  # one question's failure (out of memory, a bad input) must not end a long run
            error = str(exc) if isinstance(exc, RacerError) else f"{type(exc).__name__}: {exc}"
            break
        if warm:
            warm_from = conv
    record = AnswerRecord(
        q.question_id, q.category, model, config.method, tuple(choices), time.time(), run_config,
        reference=q.reference, error=error, schema=q.schema,
    )
    return record, warm_from


def _speed(record: AnswerRecord) -> float:
    return record.tokens / record.seconds if record.seconds > 0 else 0.0


def _resume(
    result: BenchResult,
    paths: dict[str, Path],
    configs: dict[str, dict[str, Any]],
) -> dict[str, set[str]]:
    """Load earlier answers of the selected questions; refuse ones made differently."""
    wanted = set(result.question_order)
    done: dict[str, set[str]] = {}
    for m, path in paths.items():
        done[m] = set()
        if not path.exists():
            continue
        for rec in read_answers(path):
            if rec.key not in wanted or rec.error is not None:  # a failed question is answered again
                continue
            if rec.model_id != result.model or (rec.config is not None and rec.config != configs[m]):
                diff = _first_difference(rec, configs[m], result.model or "")
                raise InputError(
                    f"{path} holds answers made with other settings ({diff}); "
                    "run without --resume or use another --answer-dir"
                )
            result.add(m, rec)
            done[m].add(rec.key)
    return done


def _first_difference(rec: AnswerRecord, config: dict[str, Any], model: str) -> str:
    if rec.model_id != model:
        return f"model {rec.model_id!r}, now {model!r}"
    old = rec.config or {}
    for k in sorted(set(old) | set(config)):
        if old.get(k) != config.get(k):
            return f"{k} {old.get(k)!r}, now {config.get(k)!r}"
    return "unknown"


class _Reporter:
    """Calls on_progress and keeps the time it took, so timing can leave it out."""

    def __init__(self, on_progress: OnProgress | None, count: int, repeats: int = 1) -> None:
        self.on_progress = on_progress
        self.count = count
        self.repeats = repeats
        self.repeat = 0  # the try in progress, set by the run's loop
        self.spent = 0.0

    def __call__(
        self,
        method: str,
        index: int,
        q: Question,
        event: StepEvent | None,
        done: bool,
        record: AnswerRecord | None = None,
    ) -> None:
        if self.on_progress is None:
            return
        t0 = _clock()
        self.on_progress(BenchProgress(
            method, index, self.count, q.question_id, q.category, event, done, record, self.repeat, self.repeats
        ))
        self.spent += _clock() - t0


def answer_choice(
    conv: Conversation,
    q: Question,
    cfg: GenerationConfig,
    index: int,
    should_stop: ShouldStop | None,
    progress: _Reporter,
    question_index: int,
) -> Choice:
    """Answer every turn of `q` in one conversation, timing each turn."""
    progress(cfg.method, question_index, q, None, False)
    cfg = replace(cfg, tie_margins=True)  # greedy replies' near-tie verdicts (racer_core.bench.results) need them
    stepped = cfg.method not in UNSTEPPED_METHODS
    texts, counts, walls, accept, steps, ids, margins = [], [], [], [], [], [], []
    by_source: dict[str, int] = {}
    for turn_index, turn in enumerate(q.turns):
        spent0 = progress.spent
        # only a question with images passes them: text-only engines' send takes none
        images = {"images": images_of_turn(q.images, turn_index)} if q.images else {}
        t0 = _clock()
        text: list[str] = []
        turn_ids: list[int] = []
        turn_margins: list[float] = []
        last: StepEvent | None = None
        turn_steps = 0
        for ev in conv.send(turn, cfg, should_stop, **images):
            last = ev
            text.append(ev.text)
            turn_ids.extend(ev.token_ids)
            turn_margins.extend(ev.margins)
            # the anchors' events are batches of steps, each counted; the decoders' follow Stats' rule
            if is_verification_step(ev) or (not stepped and ev.pieces):
                accept.append(ev.accept_length)
                turn_steps += 1
                count_sources(ev, by_source)
            progress(cfg.method, question_index, q, ev, False)
        wall = _clock() - t0 - (progress.spent - spent0)
        if last is None or not last.finished:
            raise RacerError(f"the engine ended question {q.question_id} ({cfg.method}) without a final event")
        if last.finish_reason == "cancelled":
            raise _Stopped
        if last.finish_reason == "error":
            raise RacerError(f"the engine failed on question {q.question_id} ({cfg.method})")
        # the engine's own reply text has the final detokenization (held-back bytes flushed)
        reply = conv.messages[-1] if conv.messages else {}
        texts.append(reply["content"] if reply.get("role") == "assistant" else "".join(text))
        counts.append(len(turn_ids))
        walls.append(wall)
        steps.append(turn_steps)
        ids.append(tuple(turn_ids))
        margins.append(tuple(turn_margins) if len(turn_margins) == len(turn_ids) else None)
    return Choice(
        index=index,
        turns=tuple(texts),
        new_tokens=tuple(counts),
        wall_time=tuple(walls),
        accept_lengths=tuple(accept),
        decoding_steps=tuple(steps),
        token_ids=tuple(ids),
        # kept only when every token has one (greedy, an engine that reports them)
        tie_margins=tuple(margins) if margins and None not in margins else None,  # type: ignore[arg-type]
        accepted_by_source=by_source if stepped else None,
    )


def with_suite_grammar(config: GenerationConfig, questions: Sequence[Question]) -> GenerationConfig:
    """`config` in JSON mode when any question is constrained: what the methods are checked
    against before the run (an anchor follows no grammar), and the warm-up's, so the grammar
    engine's first-use costs (its view of the vocabulary) stay out of the first timed reply."""
    return replace(config, grammar=SUITE_GRAMMAR) if any(q.schema is not None for q in questions) else config


def _warm_up(
    engine: Engine,
    methods: list[str],
    config: GenerationConfig,
    should_stop: ShouldStop | None,
    system_prompt: str | None = None,
) -> None:
    """One short untimed reply per method: first-call costs stay out of the timings.

    The engine's cost curve is measured again first (where it can be), so a
    curve stored from a busy moment does not shape this run's trees."""
    if any(m in DRAFTING_METHODS for m in methods):
        engine.refresh_cost_curve()
    for m in methods:
        cfg = replace(config, method=m, max_new_tokens=min(WARMUP_TOKENS, config.max_new_tokens))
        conv = engine.new_conversation(system_prompt=system_prompt)
        for ev in conv.send(WARMUP_PROMPT, cfg, should_stop):
            if ev.finished and ev.finish_reason == "cancelled":
                raise _Stopped
