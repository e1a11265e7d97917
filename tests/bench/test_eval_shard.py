"""Sharding over Ray: a local cluster of 2 CPU workers on a tiny model.

The sharded answer file must equal a single-process greedy run's, question by
question; a worker killed mid-run must lose nothing, and --resume completes a
run whose workers all died. Skipped when Ray is not installed.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from time_limit import time_limit

from racer_core.bench.answers import read_answers
from racer_core.bench.runner import run_benchmark
from racer_core.bench.shard import ShardPlan, check_address, import_ray, plan_workers, run_sharded
from racer_core.bench.suites import Question
from racer_core.common.errors import InputError, RacerError
from racer_core.common.events import GenerationConfig
from racer_core.testing import tiny_engine

QUESTIONS = [
    Question(1, "qa", ("The quick brown fox",)),
    Question(2, "writing", ("Once upon a time", "Go on.")),
    Question(3, "reasoning", ("Numbers: 1 2 3",), reference=("4",)),
    Question(4, "coding", ("def add(a, b):",)),
    Question(5, "qa", ("The cat sat on the mat",)),
    Question(6, "qa", ("A tiny model repeats",)),
]
POISON = 4  # the question a dying worker dies on
# a fixed draft budget: no learned tree policy, so drafts (and accept lengths) do not depend on question order
CONFIG = GenerationConfig(method="racer", max_new_tokens=20, max_num_draft=8)
START_LIMIT_S = 180  # the cluster's start: seconds even on a loaded 2-core machine
TEST_LIMIT_S = 420  # one test: two worker processes load torch and a model, maybe twice


def _dying_engine(marker: str, every_time: bool):
    """A tiny engine whose process exits on the poison question: once (the first
    worker to see it, claimed through `marker`), or every time."""
    engine = tiny_engine()
    real = engine.new_conversation

    def new_conversation(*args, **kwargs):
        conv = real(*args, **kwargs)
        send = conv.send

        def dying_send(text, config, should_stop=None, images=(), prefill=""):
            if text == QUESTIONS[POISON - 1].turns[0]:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                    first = True
                except FileExistsError:
                    first = False
                if first or every_time:
                    os._exit(1)
            return send(text, config, should_stop, images, prefill)

        conv.send = dying_send
        return conv

    engine.new_conversation = new_conversation
    return engine


def _by_question(path: Path) -> dict[str, tuple]:
    return {
        r.key: (r.turns, r.token_ids, r.new_tokens, r.accept_lengths, r.choices[0].decoding_steps, r.reference)
        for r in read_answers(path)
    }


@pytest.fixture(scope="module")
def ray_cluster():
    """A local 2-CPU cluster for this module. Its start is bounded: a start
    that fails or hangs errors the tests that need it, and the run goes on."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install -e '.[ray]')")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules
    # The cluster's session folder (logs, sockets) goes in a short folder of our
    # own, removed after: Ray would leave it in the temp directory for good.
    session = tempfile.mkdtemp(prefix="ray-")
    try:
        with time_limit(START_LIMIT_S, "starting the local Ray cluster"):
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                     _temp_dir=session)
        yield ray
    finally:
        ray.shutdown()  # also what a failed start left running
        shutil.rmtree(session, ignore_errors=True)


@pytest.fixture
def bounded():
    """Each Ray test is bounded on its own (its cluster's start is not counted);
    a hang stops with the stacks of every thread printed, then fails that test."""
    faulthandler.dump_traceback_later(TEST_LIMIT_S - 5)  # where it hung, before the bound fails it
    try:
        with time_limit(TEST_LIMIT_S, "this Ray test"):
            yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("single")
    run_benchmark(tiny_engine(), QUESTIONS, ["racer"], CONFIG, answer_dir=folder, warmup=False)
    return _by_question(folder / "racer.jsonl")


def test_two_workers_write_what_one_process_writes_even_when_one_dies(ray_cluster, single_run, bounded, tmp_path):
    # one Ray run covers both claims (each run starts two model processes: slow on a 2-core CI)
    loader = functools.partial(_dying_engine, str(tmp_path / "claimed"), False)
    seen = []
    result = run_sharded(
        loader, QUESTIONS, ["racer"], CONFIG, ShardPlan(2), answer_dir=tmp_path, warmup=False,
        on_progress=lambda p: seen.append(p.question_id),
    )
    assert (tmp_path / "claimed").exists()  # a worker did die on the poison question
    assert result.completed and sorted(seen) == [q.question_id for q in QUESTIONS]
    assert _by_question(tmp_path / "racer.jsonl") == single_run
    assert result.totals("racer").stats.replies == len(QUESTIONS)


def test_resume_completes_a_run_whose_workers_all_died(ray_cluster, single_run, bounded, tmp_path):
    loader = functools.partial(_dying_engine, str(tmp_path / "claimed"), True)
    with pytest.raises(RacerError, match="every worker died.*rerun with --resume"):
        run_sharded(loader, QUESTIONS, ["racer"], CONFIG, ShardPlan(2), answer_dir=tmp_path, warmup=False)
    kept = _by_question(tmp_path / "racer.jsonl")
    assert str(POISON) not in kept
    assert all(single_run[k] == v for k, v in kept.items())  # every line kept is whole and right
    # a question with a picture: the text-only workers' model skips it, counted, as a single process does
    pictured = Question(7, "qa", ("What is in the picture?",), ((str(tmp_path / "never-read.png"),),))
    result = run_sharded(tiny_engine, [*QUESTIONS, pictured], ["racer"], CONFIG, ShardPlan(2), answer_dir=tmp_path,
                         warmup=False, resume=True)
    assert result.skipped_for_images == 1
    assert _by_question(tmp_path / "racer.jsonl") == single_run
    assert len(read_answers(tmp_path / "racer.jsonl")) == len(QUESTIONS)  # nothing answered twice


def test_plans_follow_the_original_rule():
    assert plan_workers() is None
    assert plan_workers(num_workers=1) is None
    assert plan_workers(num_workers=3) == ShardPlan(3)
    assert plan_workers(num_gpus_total=4, num_gpus_per_model=2) == ShardPlan(2, gpus_per_worker=2.0)
    assert plan_workers(num_gpus_total=1) is None
    assert plan_workers(num_workers=1, address="10.0.0.1:6379") == ShardPlan(1, address="10.0.0.1:6379")
    with pytest.raises(InputError, match="positive multiple"):
        plan_workers(num_gpus_total=3, num_gpus_per_model=2)
    with pytest.raises(InputError, match="at least 1"):
        plan_workers(num_workers=0)


def test_missing_ray_and_unreachable_cluster_say_so_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(InputError, match=r'needs Ray, an optional extra: pip install -e "\.\[ray\]"'):
        import_ray()
    with pytest.raises(RacerError, match="cannot reach Ray at 127.0.0.1:1: ") as exc:
        check_address("127.0.0.1:1")
    assert "\n" not in str(exc.value)
    with pytest.raises(InputError, match="HOST:PORT"):
        check_address("localhost:abc")
