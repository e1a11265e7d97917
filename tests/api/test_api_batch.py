"""The batched server's limits and fairness (racer_tui/api/worker.py): at most
--max-batch jobs run at once, the rest start first come first served, a full
queue refuses, a cancelled job leaves; and on a tiny model, concurrent
requests get their own replies with their passes shared and the headless line
shows the rows per pass. Outcomes are waited for, never timed."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from racer_tui.api.service import ApiService, headless_log
from racer_tui.api.worker import EngineWorker, Job, QueueFull


def wait_until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {condition}")
        time.sleep(0.005)


class _Loop:
    """Enough of an event loop for Job.post: items are put at once."""

    def call_soon_threadsafe(self, fn: Any, *args: Any) -> None:
        fn(*args)


class _Seat:
    passes = 0


class _Seats:
    """A batching engine's seat factory, counting who is seated."""

    def __init__(self) -> None:
        self.seated = 0
        self.most = 0
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self) -> Iterator[_Seat]:
        with self.lock:
            self.seated += 1
            self.most = max(self.most, self.seated)
        try:
            yield _Seat()
        finally:
            with self.lock:
                self.seated -= 1


def _job(name: str, gate: threading.Event, started: list[str]) -> Job:
    def work(job: Job) -> None:
        started.append(name)
        while not gate.wait(0.01):
            if job.should_stop():
                return

    return Job(name, "chat", "racer", "test", work, _Loop())  # type: ignore[arg-type]


def test_at_most_max_batch_jobs_run_the_rest_start_in_order_and_a_full_queue_refuses() -> None:
    seats = _Seats()
    worker = EngineWorker(capacity=2, max_batch=2, seats=seats)
    worker.start()
    gates = {n: threading.Event() for n in "abcde"}
    started: list[str] = []
    jobs = {n: _job(n, gates[n], started) for n in "abcde"}
    try:
        for n in "ab":
            worker.submit(jobs[n])
        wait_until(lambda: len(worker.active) == 2)
        for n in "cd":
            worker.submit(jobs[n])
        with pytest.raises(QueueFull):
            worker.submit(jobs["e"])
        assert worker.waiting == 2 and sorted(started) == ["a", "b"]
        gates["b"].set()  # b ends: c, the first in the queue, takes its place
        wait_until(lambda: "c" in started)
        assert jobs["d"].outcome == "queued" and len(worker.active) == 2
        jobs["d"].cancel()  # left while waiting: skipped
        gates["a"].set()
        gates["c"].set()
        wait_until(lambda: worker.served == 4)
        assert started == ["a", "b", "c"] or started == ["b", "a", "c"]
        assert jobs["d"].outcome == "cancelled" and seats.most == 2
        assert [jobs[n].outcome for n in "abc"] == ["done"] * 3
    finally:
        for gate in gates.values():
            gate.set()
        worker.stop()
    assert not worker.alive


def test_a_running_job_cancelled_leaves_and_frees_its_place() -> None:
    worker = EngineWorker(capacity=4, max_batch=2, seats=_Seats())
    worker.start()
    never = threading.Event()
    started: list[str] = []
    first, second, third = (_job(n, never, started) for n in ("first", "second", "third"))
    try:
        for job in (first, second, third):
            worker.submit(job)
        wait_until(lambda: len(started) == 2)
        first.cancel()
        wait_until(lambda: "third" in started)
        assert first.outcome == "cancelled" and second.outcome == "running"
    finally:
        worker.stop()
    assert second.outcome == "cancelled" and third.outcome == "cancelled"


def test_without_seats_the_worker_runs_one_job_at_a_time() -> None:
    assert EngineWorker(capacity=4, max_batch=8).max_batch == 1


# -- on a tiny model ---------------------------------------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("starlette")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def engine() -> Any:
    from engine_helpers import make_markov

    from racer_core.budget.cost_curve import CostCurve
    from racer_core.engine.engine import RacerEngine
    from racer_core.testing import tiny_model, tiny_tokenizer

    engine = RacerEngine(make_markov(tiny_model("qwen3", 0)), tiny_tokenizer(), "tiny-qwen3")
    engine._curve = CostCurve([1, 64], [1.0, 1.5])  # scripted
    return engine


def test_concurrent_requests_share_passes_and_the_log_shows_rows_per_pass(engine: Any) -> None:
    from api_helpers import client

    from racer_core.common.events import GenerationConfig
    from racer_tui.api.server import ServerSettings

    prompts = [f"The cat sat on the mat {i}, the dog sat on the log {i}." for i in range(4)]

    def alone(text: str, tokens: int) -> str:
        conv = engine.new_conversation()
        list(conv.send(text, GenerationConfig(method="racer", temperature=0.0, max_new_tokens=tokens)))
        return conv.messages[-1]["content"]

    expected = {p: alone(p, 20 + 10 * i) for i, p in enumerate(prompts)}
    out = io.StringIO()
    observe, refused = headless_log(out)
    service = ApiService(engine, ServerSettings(), "127.0.0.1", 0, 8, [observe], refused, max_batch=4)
    assert service.batcher is not None and service.worker.max_batch == 4
    got: dict[str, str] = {}
    errors: list[BaseException] = []

    def ask(i: int, text: str) -> None:
        try:
            answer = client(service).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": text}], max_tokens=20 + 10 * i, temperature=0)
            got[text] = answer.choices[0].message.content
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    service.start()
    try:
        threads = [threading.Thread(target=ask, args=(i, p)) for i, p in enumerate(prompts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        service.stop()
    assert not errors and got == expected
    lines = [line for line in out.getvalue().splitlines() if " done " in line]
    assert len(lines) == 4 and all("rows/pass" in line for line in lines)
