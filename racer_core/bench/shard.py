"""Shard a benchmark's questions over Ray workers, as the original spreads them over GPUs.

Each worker (a Ray actor) loads the model once and answers one (question,
method) at a time; its answer comes back to this process, which alone writes
the answer files, line by line as answers arrive. So resume and crash safety
are the single-process runner's: a line is complete and synced or absent.
Work is handed out one question at a time, so a fast worker takes more. A
worker that dies gives its question back to the others; when none is left the
run stops with an error, the finished answers kept for `--resume`. A question
the engine fails on is recorded with its error, as in the runner.

Ray is an optional extra (`pip install -e ".[ray]"`); it is imported only here.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from racer_core.bench.answers import AnswerRecord, AnswerWriter
from racer_core.bench.images import takes_images, without_image_questions
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import (
    BenchProgress,
    OnProgress,
    _answer_question,
    _Reporter,
    _warm_up,
    check_run,
    start_run,
    with_suite_grammar,
)
from racer_core.bench.suites import Question
from racer_core.common.errors import InputError, RacerError
from racer_core.common.events import Engine, EngineInfo, GenerationConfig

EngineLoader = Callable[[], Engine]
"""Builds the engine inside a worker; must pickle (a module-level function or a functools.partial)."""


@dataclass(frozen=True)
class ShardPlan:
    """How many workers and what each holds."""

    workers: int
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    address: str | None = None  # an existing cluster; None starts a local one


def plan_workers(
    *,
    num_workers: int | None = None,
    num_gpus_per_model: int = 1,
    num_gpus_total: int | None = None,
    address: str | None = None,
) -> ShardPlan | None:
    """The original's rule (num_gpus_total // num_gpus_per_model models) or N CPU workers;
    None when one process does (no Ray needed)."""
    if num_gpus_per_model < 1:
        raise InputError(f"--num-gpus-per-model must be at least 1, not {num_gpus_per_model}")
    if num_gpus_total is not None:
        if num_workers is not None:
            raise InputError("give --num-workers (CPU workers) or --num-gpus-total (GPU workers), not both")
        if num_gpus_total < 1 or num_gpus_total % num_gpus_per_model:
            raise InputError(
                f"--num-gpus-total ({num_gpus_total}) must be a positive multiple of --num-gpus-per-model "
                f"({num_gpus_per_model})"
            )
        workers = num_gpus_total // num_gpus_per_model
        if workers == 1 and address is None:
            return None
        return ShardPlan(workers, gpus_per_worker=float(num_gpus_per_model), cpus_per_worker=1.0, address=address)
    if num_workers is not None and num_workers < 1:
        raise InputError(f"--num-workers must be at least 1, not {num_workers}")
    if (num_workers or 1) == 1 and address is None:
        return None
    return ShardPlan(num_workers or 1, address=address)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError('sharding needs Ray, an optional extra: pip install -e ".[ray]" (or pip install ray)') from None
    return ray


def check_address(address: str, timeout: float = 5.0) -> None:
    """Fail fast, in one line, when HOST:PORT does not answer (Ray itself retries
    for a minute and prints its own warnings meanwhile)."""
    target = address.removeprefix("ray://")
    if target == "auto" or ":" not in target:
        return  # Ray resolves these itself
    host, _, port = target.rpartition(":")
    if not port.isdigit():
        raise InputError(f"--ray-address must be HOST:PORT (or auto), not {address!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise RacerError(f"cannot reach Ray at {address}: {exc.strerror or exc}") from None


def start_ray(plan: ShardPlan) -> Any:
    """Join the cluster at plan.address, or start a local one sized for the plan."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if plan.address is not None:
        check_address(plan.address)
    quiet = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        if plan.address is not None:
            ray.init(address=plan.address, log_to_driver=False, configure_logging=False)
        else:
            cpus = max(1, int(plan.workers * plan.cpus_per_worker))
            ray.init(num_cpus=cpus, **quiet)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = plan.address or "a local cluster"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RacerError(f"cannot reach Ray at {where}: {first}") from None
    return ray


class ShardWorker:
    """One model in one Ray actor: answers questions handed to it."""

    def __init__(
        self,
        loader: EngineLoader,
        methods: list[str],
        config: GenerationConfig,
        system_prompt: str | None,
        warmup: bool,
    ) -> None:
        self.engine = loader()
        if warmup:
            _warm_up(self.engine, methods, config, None, system_prompt)

    def info(self) -> tuple[EngineInfo, bool]:
        """The model's info, and whether it reads images."""
        return self.engine.info, takes_images(self.engine)

    def answer(
        self,
        question: Question,
        method: str,
        config: GenerationConfig,
        num_choices: int,
        system_prompt: str | None,
        model: str,
        run_cfg: dict[str, Any],
    ) -> dict[str, Any]:
        record, _ = _answer_question(
            self.engine, question, replace(config, method=method), num_choices, system_prompt, False, None, None,
            _Reporter(None, 1), 0, model, run_cfg,
        )
        return record.to_json()


def run_sharded(
    loader: EngineLoader,
    questions: Sequence[Question],
    methods: Sequence[str],
    config: GenerationConfig,
    plan: ShardPlan,
    *,
    answer_dir: str | Path | None = None,
    answer_file: str | Path | None = None,
    resume: bool = False,
    on_progress: OnProgress | None = None,
    warmup: bool = True,
    suite: str | None = None,
    num_choices: int = 1,
    system_prompt: str | None = None,
    model_id: str | None = None,
) -> BenchResult:
    """run_benchmark's result and answer files, with the questions answered by plan.workers Ray workers.

    Answer lines are written in the order answers arrive (the original's
    files are in that order too); readers match them by question id.
    """
    methods, paths = check_run(methods, num_choices, answer_dir, answer_file, resume)
    ray = start_ray(plan)
    remote = ray.remote(num_cpus=plan.cpus_per_worker, num_gpus=plan.gpus_per_worker, max_restarts=0)(ShardWorker)
    warm_config = with_suite_grammar(config, questions)  # a constrained suite warms the grammar engine up too
    actors = [remote.remote(loader, methods, warm_config, system_prompt, warmup) for _ in range(plan.workers)]
    try:
        info, reads_images = _first_info(ray, actors)
        questions, skipped = without_image_questions(questions, reads_images)
        start = start_run(
            info, questions, methods, paths, config, answer_dir=answer_dir, warm=False, resume=resume,
            suite=suite, num_choices=num_choices, system_prompt=system_prompt, model_id=model_id,
        )
        result, configs, done = start.result, start.configs, start.done
        result.skipped_for_images = skipped
        model = result.model or info.model
        index_of = {str(q.question_id): i for i, q in enumerate(questions)}
        for i, q in enumerate(questions):
            for m in methods:
                if str(q.question_id) in done[m] and on_progress is not None:
                    on_progress(BenchProgress(m, i, len(questions), q.question_id, q.category, None, True,
                                              result.records[m][str(q.question_id)]))
        todo = deque((q, m) for q in questions for m in methods if str(q.question_id) not in done[m])
        writers = {m: AnswerWriter(p, append=resume) for m, p in paths.items()}
        try:
            _dispatch(ray, actors, todo, configs, config, num_choices, system_prompt, model, writers, result,
                      on_progress, index_of, len(questions))
        finally:
            for w in writers.values():
                w.close()
        result.completed = True
        return result
    finally:
        for actor in actors:
            ray.kill(actor)


def _first_info(ray: Any, actors: list[Any]) -> tuple[EngineInfo, bool]:
    """The model's info (and whether it reads images) from the first worker
    that loads it (all load the same)."""
    pending = {actor.info.remote(): actor for actor in actors}
    errors = []
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        ref = ready[0]
        pending.pop(ref)
        try:
            return ray.get(ref)
        except Exception as exc:  # a worker that failed to load: try the next
            errors.append(_cause(exc))
    raise RacerError(f"no worker could load the model: {errors[0] if errors else 'unknown error'}")


def _cause(exc: BaseException) -> str:
    """The worker-side error in one line (Ray wraps it with a traceback)."""
    inner = getattr(exc, "cause", None) or exc
    text = str(inner).strip().splitlines()
    return f"{type(inner).__name__}: {text[-1] if text else ''}".rstrip(": ")


def _dispatch(
    ray: Any,
    actors: list[Any],
    todo: deque[tuple[Question, str]],
    configs: dict[str, dict[str, Any]],
    config: GenerationConfig,
    num_choices: int,
    system_prompt: str | None,
    model: str,
    writers: dict[str, AnswerWriter],
    result: BenchResult,
    on_progress: OnProgress | None,
    index_of: dict[str, int],
    count: int,
) -> None:
    """Keep every live worker busy with one question; write each answer as it arrives."""
    idle = list(actors)
    running: dict[Any, tuple[Any, Question, str]] = {}
    lost: list[str] = []
    while todo or running:
        while idle and todo:
            actor = idle.pop()
            q, m = todo.popleft()
            ref = actor.answer.remote(q, m, config, num_choices, system_prompt, model, configs[m])
            running[ref] = (actor, q, m)
        if not running:
            break
        ready, _ = ray.wait(list(running), num_returns=1)
        actor, q, m = running.pop(ready[0])
        try:
            obj = ray.get(ready[0])
        except ray.exceptions.RayActorError as exc:  # the worker died: its question goes back
            lost.append(_cause(exc))
            todo.appendleft((q, m))
            continue
        except ray.exceptions.RayTaskError as exc:  # the engine failed on this question
            raise RacerError(f"question {q.question_id} ({m}): {_cause(exc)}") from None
        record = AnswerRecord.from_json(obj)
        if m in writers:
            writers[m].write(record)
        result.add(m, record)
        idle.append(actor)
        if on_progress is not None:
            i = index_of[str(q.question_id)]
            on_progress(BenchProgress(m, i, count, q.question_id, q.category, None, True, record))
    if todo:
        raise RacerError(
            f"every worker died ({lost[-1] if lost else 'unknown cause'}); finished answers are kept, "
            "rerun with --resume to complete them"
        )
