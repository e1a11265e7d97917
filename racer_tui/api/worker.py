"""The engine's request threads and one queue: requests start in the order they came.

A request becomes a Job. Up to `max_batch` jobs run at once, each on a
request thread of its own that renders its prompt, reads its reply's steps
and posts them; no request thread runs model code: with a batching engine
all the jobs' sequences are decoded by the engine loop's one thread
(racer_core/engine/loop.py), their passes shared, each job's figures in its
Seat (`seat`). With `max_batch` 1 (or an engine that cannot batch) jobs run
one at a time, as a sequential server. Each job's results go back to the
request's event loop through its item queue, and every engine step is told
to the observers (the live monitor, the headless log). The queue is bounded:
a full one refuses new jobs with a retry hint. Cancelling a job (its client
went away) stops its generation before its next step, or skips it if it has
not started.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from racer_core.common.events import StepEvent
from racer_tui.api.reply import Tally


@dataclass
class Job:
    """One request on its way through the engine."""

    id: str
    endpoint: str  # "chat" or "completion"
    method: str
    client: str
    work: Callable[[Job], None]  # runs on a request thread, posts items
    loop: asyncio.AbstractEventLoop
    items: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    queued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    finished_at: float | None = None
    prompt_tokens: int = 0
    tally: Tally = field(default_factory=Tally)  # all choices so far
    last_pieces: tuple[Any, ...] = ()  # the newest step's tokens (the monitor colours them)
    outcome: str = "queued"  # queued, running, done, cancelled, failed
    error: str | None = None
    batch: Any = None  # its Seat in the batch while batched (rows_per_pass, parts_per_pass)

    def post(self, item: Any) -> None:
        """Hand an item to the request (thread-safe)."""
        self.loop.call_soon_threadsafe(self.items.put_nowait, item)

    def cancel(self) -> None:
        self.cancelled.set()

    def should_stop(self) -> bool:
        return self.cancelled.is_set()

    @property
    def seconds(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.finished_at or time.monotonic()) - self.started_at


def batch_figures(job: Job) -> str:
    """Its shared passes' mean rows and requests ("" when it was not batched)."""
    seat = job.batch
    if seat is None or not seat.passes:
        return ""
    return f"{seat.rows_per_pass:.1f} rows/pass ({seat.parts_per_pass:.1f} requests)"


class Finished:
    """The last item of every job."""


FINISHED = Finished()


class QueueFull(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


Observer = Callable[[str, Job, StepEvent | None], None]
"""Told (from a request thread or the server's) of "queued", "started", "step" and "finished"."""

Seats = Callable[[], AbstractContextManager[Any]]
"""A batching engine loop's `seat`: the figures of the passes of a job's sequences."""


class EngineWorker:
    """The request threads and their bounded, in-order queue."""

    def __init__(self, capacity: int, observers: list[Observer] | None = None, max_batch: int = 1,
                 seats: Seats | None = None) -> None:
        self.capacity = capacity
        self.observers: list[Observer] = list(observers or [])
        self.max_batch = max_batch if seats is not None else 1  # no batching: one job at a time
        self.active: list[Job] = []  # running jobs, oldest first
        self.served = 0  # finished jobs, whatever their outcome
        self._seats = seats
        self._waiting: deque[Job] = deque()
        self._cond = threading.Condition()
        self._durations: deque[float] = deque(maxlen=20)  # recent jobs' seconds: the retry hint
        self._stopping = False
        self._threads = [threading.Thread(target=self._serve, name=f"racer-request-{i}", daemon=True)
                         for i in range(self.max_batch)]

    @property
    def running(self) -> Job | None:
        """The oldest running job (None: the engine is idle)."""
        with self._cond:
            return self.active[0] if self.active else None

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    @property
    def alive(self) -> bool:
        """Whether any request thread still runs."""
        return any(thread.is_alive() for thread in self._threads)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel what is queued and running, and end the threads."""
        with self._cond:
            self._stopping = True
            for job in [*self._waiting, *self.active]:
                job.cancel()
            self._cond.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)

    def submit(self, job: Job) -> None:
        """Queue `job`, or raise QueueFull when `capacity` jobs already wait."""
        with self._cond:
            if len(self._waiting) >= self.capacity or self._stopping:
                raise QueueFull(self._retry_after())
            self._waiting.append(job)
            self._cond.notify()
        self._tell("queued", job)

    def _retry_after(self) -> int:
        """Seconds until a place is likely free: the recent mean job time per waiting job
        (max_batch of them run at once)."""
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, math.ceil(mean * len(self._waiting) / self.max_batch))

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._waiting:
                    return
                job = self._waiting.popleft()
                self.active.append(job)
            try:
                self._run(job)
            finally:
                with self._cond:
                    self.active.remove(job)

    def _run(self, job: Job) -> None:
        job.started_at = time.monotonic()
        if job.should_stop():  # its client left while it waited
            job.outcome = "cancelled"
        else:
            job.outcome = "running"
            self._tell("started", job)
            try:
                with self._seats() if self._seats is not None else contextlib.nullcontext() as seat:
                    job.batch = seat
                    job.work(job)
                job.outcome = "cancelled" if job.should_stop() else ("failed" if job.error else "done")
            except BaseException as exc:  # noqa: BLE001 - one failed request never stops the server
                job.outcome = "failed"
                job.error = job.error or f"{type(exc).__name__}: {exc}"
                job.post(exc)
        job.finished_at = time.monotonic()
        self._durations.append(job.seconds)
        with self._cond:  # several request threads finish jobs
            self.served += 1
        self._tell("finished", job)  # before the request's last item: its client then finds it told
        job.post(FINISHED)

    def step(self, job: Job, event: StepEvent) -> None:
        """Count one engine step of `job` (called from its work) and tell the observers."""
        job.tally.add(event)
        if event.pieces:
            job.last_pieces = event.pieces
        self._tell("step", job, event)

    def _tell(self, kind: str, job: Job, event: StepEvent | None = None) -> None:
        for observer in self.observers:
            try:
                observer(kind, job, event)
            except Exception:  # noqa: BLE001 - a broken display must not stop the engine
                pass
