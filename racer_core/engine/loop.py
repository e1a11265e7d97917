"""The engine loop: one thread owns every active sequence and runs all their
model code, a pass at a time (nano-vllm's step(): schedule, run, postprocess).

A sequence is a decoder's `steps` coroutine (racer_core/engine/decoder.py):
it yields a Forward whenever it needs a pass and is sent that pass's logits,
and yields a Step after each and is sent the load its next step is weighed
against. Each iteration of the loop

    1. admits the waiting sequences (how many run at once is the caller's
       to bound: the API's worker starts at most --max-batch requests),
    2. advances every sequence that has its logits (or has just come): it
       completes its step and its Step goes to its reader's queue (a prefill
       chunk's logits lead to the next chunk's request instead),
    3. once a sequence's reader has read that Step (as when the reader drove
       the generator itself: its should_stop sees what it read), sends it the
       load: it checks should_stop and prepares its next tree against the
       others' rows (those already asking for this pass, and the last pass's
       rows of the rest), then asks for its pass. A pass waits for the readers
       at most `read_wait_s` while others could go on,
    4. runs one pass: the oldest requests first, as many as stay within
       `max_rows` rows (the first always goes, however large; one that does
       not fit is passed over for the younger ones that do), through one
       LeanForward.batch; a request the batch does not take (a stock or
       vision forward, eagle3's captured states) runs as a pass of its own.
       A request left out is the oldest at the next pass. A prefill chunk is
       one request, so a long prompt shares passes with the others' steps.
       Among the prompt chunks, the prompt with the least left goes first
       (shortest prompt first: requests that come together do not all wait
       for the longest one's passes before their first token), unless a chunk
       has been put behind `PROMPT_WAITS` times: then it keeps its age's place,
    5. hands each taken sequence its logits (step 2 of the next iteration
       completes it).

The callers' threads (a chat's, a request's) only read their queue: no other
thread runs model code, so OpenMP keeps one pool of workers, the loop's
(openmp_threads.py). The thread starts on the first submission and ends after
`IDLE_EXIT_S` without sequences (the next starts another).
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from racer_core.engine.decoder import Forward, Step
from racer_core.engine.openmp_threads import follow_free_cores, release_openmp_workers

DEFAULT_MAX_ROWS = 256
"""Rows per pass: a prefill chunk (256) or many requests' trees."""
IDLE_EXIT_S = 2.0
"""The loop's thread ends after this long without sequences."""
READ_WAIT_S = 0.05
"""How long a pass waits at most for the readers of the last one (see `_read_ones`)."""
PROMPT_WAITS = 4
"""Passes a prompt chunk may be put behind shorter prompts before it keeps its place by age."""

Steps = Generator[Forward | Step, Any, None]
_LOOPS: weakref.WeakSet[EngineLoop] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for loop in list(_LOOPS):
        loop.close()


@dataclass(eq=False)  # seats are told apart by identity (two may hold the same figures)
class Seat:
    """What the passes of one caller's sequences were like (a job's figures)."""

    passes: int = 0
    rows: int = 0  # rows of all the passes it was in (its own and the others')
    parts: int = 0  # sequences in those passes, itself included

    @property
    def rows_per_pass(self) -> float | None:
        return self.rows / self.passes if self.passes else None

    @property
    def parts_per_pass(self) -> float | None:
        return self.parts / self.passes if self.passes else None


_END = object()


@dataclass(eq=False)
class _Sequence:
    steps: Steps
    seat: Seat | None
    out: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    request: Forward | None = None  # asking for a pass
    logits: torch.Tensor | None = None  # its pass's, to send
    started: bool = False
    posted: int = 0  # Steps put in `out`
    taken: int = 0  # ...and read: its next step is prepared once its reader has read the last one
    last_rows: int = 0  # its rows in its last pass
    abandoned: bool = False  # its reader stopped reading
    passed_over: int = 0  # passes its current prompt chunk has waited through

    @property
    def awaiting(self) -> bool:
        """Its last Step is still unread (it prepares nothing until it is)."""
        return self.taken < self.posted and not self.abandoned


class EngineLoop:
    """The one thread that runs every sequence's passes (see the module doc)."""

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS, read_wait_s: float = READ_WAIT_S) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        self.max_rows = max_rows
        self.read_wait_s = read_wait_s
        self.passes = 0
        self.rows = 0  # over all passes
        self.last_rows = 0
        self.last_parts = 0
        self.most_rows = 0  # the largest pass so far, in rows
        self.most_parts = 0  # and in sequences
        self._waiting: deque[_Sequence] = deque()
        self._active: list[_Sequence] = []
        self._asking: deque[_Sequence] = deque()  # requests in the order they came
        self._cond = threading.Condition()
        self._held = 0
        self._thread: threading.Thread | None = None
        self._closing = False
        self._local = threading.local()  # the submitting thread's seat (figures only)
        self.observer: Callable[[list[Forward], float], None] | None = None
        """Told each pass's requests (their rows, a prompt chunk's prompt_left)
        and its seconds, on the loop's thread (a measuring script's: scripts/loop_load.py)."""
        _LOOPS.add(self)

    # -- the callers' side ------------------------------------------------------------

    def submit(self, steps: Steps) -> Iterator[Step]:
        """Run `steps` on the loop; returns its Steps as they come (the
        reader's thread waits on a queue). Its next step is prepared (and its
        should_stop asked) once the reader has read the last one, as when the
        reader drove it itself; a reader that stops reading ends it there.

        The caller's thread ends its own OpenMP workers first (it may have
        loaded the model or measured the cost curve, as the benchmark's main
        thread does): GNU OpenMP, managing more threads than there are CPUs,
        lets no idle worker spin, and every parallel region of the loop's
        passes then wakes its workers from sleep -- on 2 cores a one-row step
        of the embedded model took 13.4 ms against 6.0 ms (openmp_threads.py)."""
        release_openmp_workers()
        sequence = _Sequence(steps, getattr(self._local, "seat", None))
        with self._cond:
            self._closing = False
            self._waiting.append(sequence)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="racer-loop", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return self._read(sequence)

    def _read(self, sequence: _Sequence) -> Iterator[Step]:
        try:
            while True:
                item = sequence.out.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
                with self._cond:
                    sequence.taken += 1
                    self._cond.notify_all()
        finally:
            with self._cond:
                sequence.abandoned = True
                self._cond.notify_all()

    @contextlib.contextmanager
    def seat(self) -> Iterator[Seat]:
        """Sequences the calling thread submits in the block count their passes in the Seat (a job's figures)."""
        seat = Seat()
        self._local.seat = seat
        try:
            yield seat
        finally:
            self._local.seat = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Admit no sequence within the block (those submitted meanwhile start
        together after it: the tests share passes whatever the threads' timing)."""
        with self._cond:
            self._held += 1
        try:
            yield
        finally:
            with self._cond:
                self._held -= 1
                self._cond.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        """End the thread once no sequence is left (at the interpreter's exit:
        a daemon thread stopped inside torch's C++ there aborts the process)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)

    # -- the loop -------------------------------------------------------------------------

    def _serve(self) -> None:
        with torch.inference_mode():  # for all: a sequence's suspended generator holds none of its own
            while self._admit():
                try:
                    self._iterate()
                except BaseException as exc:  # noqa: BLE001 - a fault of the loop's own: no reader waits forever
                    for sequence in list(self._active):
                        self._end(sequence, exc)

    def _iterate(self) -> None:
        """Complete the last pass's sequences (and start the new ones), prepare
        the next steps of those whose Steps were read, run one pass."""
        for sequence in list(self._active):
            if not sequence.started:
                sequence.started = True
                self._resume(sequence, None)
            elif sequence.logits is not None:
                logits, sequence.logits = sequence.logits, None
                self._resume(sequence, logits)
        for sequence in self._read_ones():
            if sequence.abandoned:
                self._end(sequence, None)
            else:
                self._resume(sequence, self._load(sequence))
        if self._asking:
            self._pass()

    def _read_ones(self) -> list[_Sequence]:
        """The sequences whose last Step was read, once all are (or, while
        others could go on, `read_wait_s` has passed: a slow reader misses a pass, never holds it)."""
        deadline = time.monotonic() + self.read_wait_s
        with self._cond:
            while True:
                posted = [s for s in self._active if s.request is None and s.started and s.logits is None]
                if not posted:
                    return []
                unread = [s for s in posted if s.awaiting]
                if not unread:
                    return posted
                could_go_on = self._asking or len(unread) < len(posted)
                if could_go_on:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return [s for s in posted if not s.awaiting]
                    self._cond.wait(left)
                elif self._waiting and self._can_admit():
                    return []  # take the newcomers in meanwhile
                else:
                    self._cond.wait()

    def _can_admit(self) -> bool:
        return not self._held

    def _admit(self) -> bool:
        """Take in waiting sequences; False (the thread ends) after IDLE_EXIT_S with none."""
        with self._cond:
            while True:
                while self._waiting and self._can_admit():
                    self._active.append(self._waiting.popleft())
                if self._active:
                    return True
                if self._closing or (not self._cond.wait(IDLE_EXIT_S) and not self._waiting):
                    self._thread = None
                    return False

    def _load(self, sequence: _Sequence) -> tuple[int, int]:
        """(other sequences, their rows) in the pass `sequence` prepares for:
        the requests already made for it, and the last pass's rows of the rest."""
        others = [s for s in self._active if s is not sequence]
        rows = sum(s.request.rows if s.request is not None else s.last_rows for s in others)
        return len(others), rows

    def _resume(self, sequence: _Sequence, value: Any) -> None:
        """Send `value` to `sequence` and run it until it asks for a pass, posts a Step or ends."""
        try:
            item = sequence.steps.send(value)
        except StopIteration:
            self._end(sequence, None)
            return
        except BaseException as exc:  # noqa: BLE001 - handed to its reader: one failed reply never stops the loop
            self._end(sequence, exc)
            return
        if isinstance(item, Forward):
            sequence.request = item
            self._asking.append(sequence)
        else:
            with self._cond:
                sequence.posted += 1
            sequence.out.put(item)

    def _end(self, sequence: _Sequence, error: BaseException | None) -> None:
        with contextlib.suppress(Exception):
            sequence.steps.close()  # an abandoned one's drafter finishes
        sequence.request = None
        with contextlib.suppress(ValueError):
            self._asking.remove(sequence)
        with self._cond:
            self._active.remove(sequence)
        sequence.out.put(error if error is not None else _END)

    def _take(self) -> list[_Sequence]:
        """The next pass's sequences: the oldest requests within the rows budget
        (the shortest prompts' chunks first, `_shortest_prompts_first`)."""
        self._shortest_prompts_first()
        first = self._asking.popleft()
        taken = [first]
        if first.request is not None and first.request.batchable:
            rows = first.request.rows
            left: deque[_Sequence] = deque()
            while self._asking:
                sequence = self._asking.popleft()
                request = sequence.request
                assert request is not None
                if not request.batchable:
                    self._asking.appendleft(sequence)
                    break
                if rows + request.rows > self.max_rows:
                    left.append(sequence)  # no room: a younger one may fit
                    continue
                taken.append(sequence)
                rows += request.rows
            self._asking.extendleft(reversed(left))
        for sequence in self._asking:
            if sequence.request is not None and sequence.request.prompt_left:
                sequence.passed_over += 1
        for sequence in taken:
            sequence.passed_over = 0
        return taken

    def _shortest_prompts_first(self) -> None:
        """Reorder the asking prompt chunks among the places they hold: those
        put behind `PROMPT_WAITS` times first (by age), then by the prompt left."""
        places = [i for i, s in enumerate(self._asking) if s.request is not None and s.request.prompt_left]
        if len(places) < 2:
            return
        chunks = [self._asking[i] for i in places]
        overdue = [s for s in chunks if s.passed_over >= PROMPT_WAITS]
        rest = sorted((s for s in chunks if s.passed_over < PROMPT_WAITS),
                      key=lambda s: s.request.prompt_left)  # type: ignore[union-attr] - stable: by age among equals
        for i, sequence in zip(places, overdue + rest, strict=True):
            self._asking[i] = sequence

    def _pass(self) -> None:
        taken = self._take()
        requests = [s.request for s in taken]
        lean = requests[0].decoder.rt.lean  # type: ignore[union-attr]
        started = time.perf_counter()
        try:
            if len(requests) == 1:  # a pass of its own (it follows the free cores itself)
                results = [requests[0].run()]  # type: ignore[union-attr]
            else:
                assert lean is not None
                follow_free_cores(lean)
                results = lean.batch([r.part() for r in requests])  # type: ignore[union-attr]
        except BaseException as exc:  # noqa: BLE001 - every sequence of the pass gets the error
            for sequence in taken:
                self._end(sequence, exc)
            return
        if self.observer is not None:
            self.observer(requests, time.perf_counter() - started)  # type: ignore[arg-type]
        rows = sum(r.rows for r in requests)  # type: ignore[union-attr]
        self.passes += 1
        self.rows += rows
        self.last_rows, self.last_parts = rows, len(taken)
        self.most_rows, self.most_parts = max(self.most_rows, rows), max(self.most_parts, len(taken))
        for sequence, request, logits in zip(taken, requests, results, strict=True):
            sequence.request, sequence.logits = None, logits
            sequence.last_rows = request.rows  # type: ignore[union-attr]
            if sequence.seat is not None:
                sequence.seat.passes += 1
                sequence.seat.rows += rows
                sequence.seat.parts += len(taken)
