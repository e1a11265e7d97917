"""One engine, one thread, one queue: requests are answered in the order they came.

A request becomes a Job. The engine thread runs jobs one at a time; each job's
results go back to the request's event loop through its item queue, and every
engine step is told to the observers (the live monitor, the headless log).
The queue is bounded: a full one refuses new jobs with a retry hint.
Cancelling a job (its client went away) stops its generation before the next
step, or skips it if it has not started.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
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
    work: Callable[[Job], None]  # runs on the engine thread, posts items
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


class Finished:
    """The last item of every job."""


FINISHED = Finished()


class QueueFull(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


Observer = Callable[[str, Job, StepEvent | None], None]
"""Told (from the engine thread or a request's) of "queued", "started", "step" and "finished"."""


class EngineWorker:
    """The engine's thread and its bounded, in-order queue."""

    def __init__(self, capacity: int, observers: list[Observer] | None = None) -> None:
        self.capacity = capacity
        self.observers: list[Observer] = list(observers or [])
        self.running: Job | None = None
        self.served = 0  # finished jobs, whatever their outcome
        self._waiting: deque[Job] = deque()
        self._cond = threading.Condition()
        self._durations: deque[float] = deque(maxlen=20)  # recent jobs' seconds: the retry hint
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="racer-engine", daemon=True)

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel what is queued and running, and end the thread."""
        with self._cond:
            self._stopping = True
            for job in [*self._waiting, *([self.running] if self.running else [])]:
                job.cancel()
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        """Queue `job`, or raise QueueFull when `capacity` jobs already wait."""
        with self._cond:
            if len(self._waiting) >= self.capacity or self._stopping:
                raise QueueFull(self._retry_after())
            self._waiting.append(job)
            self._cond.notify()
        self._tell("queued", job)

    def _retry_after(self) -> int:
        """Seconds until a place is likely free: the recent mean job time per waiting job."""
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, math.ceil(mean * len(self._waiting)))

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._waiting:
                    return
                job = self._waiting.popleft()
                self.running = job
            try:
                self._run(job)
            finally:
                with self._cond:
                    self.running = None

    def _run(self, job: Job) -> None:
        job.started_at = time.monotonic()
        if job.should_stop():  # its client left while it waited
            job.outcome = "cancelled"
        else:
            job.outcome = "running"
            self._tell("started", job)
            try:
                job.work(job)
                job.outcome = "cancelled" if job.should_stop() else ("failed" if job.error else "done")
            except BaseException as exc:  # noqa: BLE001 - one failed request never stops the server
                job.outcome = "failed"
                job.error = job.error or f"{type(exc).__name__}: {exc}"
                job.post(exc)
        job.finished_at = time.monotonic()
        self._durations.append(job.seconds)
        self.served += 1
        job.post(FINISHED)
        self._tell("finished", job)

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
