"""The engine loop's OpenMP threads (racer_core/engine/openmp_threads.py):
`release_openmp_workers` ends the calling thread's pool of workers (the
process's threads read from /proc; Linux, GNU OpenMP)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from racer_core.engine.openmp_threads import _libgomp, most_threads, release_openmp_workers

TASKS = Path("/proc/self/task")
pytestmark = pytest.mark.skipif(_libgomp() is None or not TASKS.is_dir() or torch.get_num_threads() < 2,
                                reason="GNU OpenMP on Linux with 2 threads or more")


def threads() -> int:
    return len(list(TASKS.iterdir()))


def parallel_work() -> None:
    torch.ones(1 << 22).exp_()  # large enough that torch splits it over its OpenMP threads


def in_a_thread(work) -> object:  # noqa: ANN001
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(work()))
    worker.start()
    worker.join()
    return out[0]


def _no_loop_threads() -> None:
    """Earlier tests' engine loops end after IDLE_EXIT_S, and their passes may
    have followed a busy machine down to one thread: the thread counts below
    are this test's own, at the count torch started with."""
    done = threading.Event()
    for _ in range(2000):
        if not any(t.name == "racer-loop" for t in threading.enumerate()):
            break
        done.wait(0.01)
    torch.set_num_threads(most_threads())


def test_release_ends_the_calling_threads_pool() -> None:
    _no_loop_threads()
    def work() -> tuple[int, int]:
        started = threads()
        parallel_work()  # this thread's pool: its workers stay, asleep, after the work
        with_pool = threads()
        assert release_openmp_workers()
        return with_pool - started, threads() - started

    tries = [in_a_thread(work) for _ in range(3)]  # as above: one clean try of three
    assert any(grown >= 1 and left == 0 for grown, left in tries), tries


def test_submitting_to_the_loop_ends_the_callers_pool() -> None:
    """A thread that did parallel work (loaded the model, measured the curve)
    and then hands its replies to the engine loop keeps no idle workers: beside
    the loop's own pool they would stop every worker's spinning (the module's
    docstring; the benchmark's steps took twice as long)."""
    from racer_core.common.events import GenerationConfig
    from racer_core.testing import tiny_engine

    _no_loop_threads()
    engine = tiny_engine()

    def work() -> tuple[int, int]:
        before = set(TASKS.iterdir())
        parallel_work()
        pool = set(TASKS.iterdir()) - before  # this thread's idle workers
        list(engine.new_conversation().send("hello", GenerationConfig(method="ar", max_new_tokens=2)))
        return len(pool), len(pool & set(TASKS.iterdir()))

    tries = [in_a_thread(work) for _ in range(3)]  # one clean try of three, as above
    assert any(grown >= 1 and left == 0 for grown, left in tries), tries


def test_loading_an_engine_ends_the_loading_threads_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass runs on the engine loop's thread; workers left on the thread
    that loaded the model keep the loop's from spinning, and a program that
    loaded on one thread and sent from others decoded at a third of the
    speed. So load_engine ends its own thread's pool, last."""
    from racer_core.engine import engine as engine_module
    from racer_core.testing import tiny_model, tiny_tokenizer

    tiny_model("llama").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    ended: list[int] = []
    real = engine_module.release_openmp_workers
    monkeypatch.setattr(engine_module, "release_openmp_workers", lambda: ended.append(threading.get_ident()) or real())
    measured = engine_module.RacerEngine.cost_curve
    monkeypatch.setattr(engine_module.RacerEngine, "cost_curve",
                        lambda self, *a, **k: (ended.append(-1), measured(self, *a, **k))[1])
    engine_module.load_engine(tmp_path, device="cpu", dtype="float32")
    assert ended == [-1, threading.get_ident()]  # after the curve's passes, on the loading thread
